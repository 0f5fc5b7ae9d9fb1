"""The policy loss: KL estimators, aggregation over the optimizer step, and :func:`policy_loss`.

``policy_loss`` takes the algorithm whole (an :class:`~rewardlab.algos.settings.Algo`, e.g.
``algos.PRESETS["dapo"]`` or ``algos.get("grpo", eps_high=0.28)``), so a direct call computes exactly the
loss of the preset of the same name in ``rewardlab train``; the tensors and the step's counts are its
only other arguments. Shapes: ``B`` rows (responses), ``T`` padded response length.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import torch

from rewardlab.algos import objectives
from rewardlab.algos.checks import AlgoError, check_choice, is_real
from rewardlab.algos.correction import Correction, correct
from rewardlab.algos.settings import AGGREGATIONS, KL_KINDS, RATIO_LEVELS, Algo, check_clip, kl_kind
from rewardlab.algos.tensors import compute_dtype, denominator

Tensor = torch.Tensor
Number = int | float

_K3_X_CLAMP = 20.0  # k3: x = lp_ref - lp clamped to [-20, 20]
_K3_VALUE_CLAMP = 10.0  # k3: value clamped to [-10, 10]


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL(pi || pi_ref) estimate, ``(B, T)``, unmasked, with gradient through ``logp``.

    With ``x = ref_logp - logp``: ``k1 = -x``; ``k2 = x^2 / 2``; ``k3`` (``low_var_kl``) =
    ``exp(x) - x - 1`` with ``x`` clamped to [-20, 20] and the value to [-10, 10]; ``abs = |x|``
    (verl). ``X+`` (k1+, k2+, k3+, abs+) has the value of X and the gradient of k2 (straight-through), which is the
    unbiased gradient of KL(pi || pi_ref) when sampling from pi. Computed in float32 for low
    precision inputs and in float64 for float64 ``logp``.
    """
    kind = kl_kind(kind)
    check_choice("kl", kind, KL_KINDS)
    cdt = compute_dtype(logp)
    lp = logp.to(cdt)  # (B, T)
    x = ref_logp.to(cdt) - lp  # (B, T)
    base = kind.rstrip("+")
    if base == "k1":
        value = -x  # (B, T)
    elif base == "abs":
        value = x.abs()  # (B, T)
    elif base == "k2":
        value = 0.5 * x * x  # (B, T)
    else:
        xc = x.clamp(-_K3_X_CLAMP, _K3_X_CLAMP)  # (B, T)
        value = (torch.exp(xc) - xc - 1).clamp(-_K3_VALUE_CLAMP, _K3_VALUE_CLAMP)  # (B, T)
    if kind.endswith("+"):  # straight-through: forward = value, backward = d(k2)
        k2 = 0.5 * x * x  # (B, T)
        value = value.detach() + (k2 - k2.detach())  # (B, T)
    return value


def aggregate(
    values: Tensor,
    mask: Tensor,
    agg: str,
    *,
    max_len: int | None = None,
    num_tokens: Number | Tensor | None = None,
    num_seqs: Number | Tensor | None = None,
) -> Tensor:
    """Reduce per-token ``values`` ``(B, T)`` to one number under ``agg`` (see ``AGGREGATIONS``).

    With ``S_i = sum_t m[i,t] values[i,t]``, ``n_i = sum_t m[i,t]``, ``B_eff`` = rows with
    ``n_i > 0``: ``token-mean`` = ``sum S_i / N``; ``seq-mean-token-mean`` = ``sum (S_i / n_i) / B_eff``;
    ``seq-mean-token-sum`` = ``sum S_i / B_eff``; ``seq-mean-token-sum-norm`` = ``sum S_i / max_len / B_eff``;
    ``token-sum`` = ``sum S_i``. ``N`` is ``num_tokens`` and ``B_eff`` is ``num_seqs`` when given
    (the whole optimizer step's counts, so micro-batch losses sum to the step's loss), else this
    batch's own counts.
    """
    check_choice("agg", agg, AGGREGATIONS)
    m = mask.bool()  # (B, T)
    v = torch.where(m, values, torch.zeros((), dtype=values.dtype, device=values.device))  # (B, T)
    mf = m.to(values.dtype)  # (B, T)
    if agg == "token-mean":
        denom = denominator(num_tokens, mf.sum(), "num_tokens")
        return v.sum() / denom
    if agg == "token-sum":
        return v.sum()
    n = mf.sum(-1)  # (B,)
    seq_sum = v.sum(-1)  # (B,)
    if agg == "seq-mean-token-mean":
        per_seq = seq_sum / n.clamp(min=1)  # (B,); empty rows contribute 0
    elif agg == "seq-mean-token-sum":
        per_seq = seq_sum  # (B,)
    else:  # seq-mean-token-sum-norm (Dr. GRPO): a constant L, never the padded width
        if max_len is None or not is_real(max_len) or max_len <= 0:
            raise AlgoError("agg 'seq-mean-token-sum-norm' needs max_len = the max new tokens (a constant > 0)")
        per_seq = seq_sum / max_len  # (B,)
    denom = denominator(num_seqs, (n > 0).sum().to(values.dtype), "num_seqs")
    return per_seq.sum() / denom


METRIC_REDUCE: dict[str, str] = {
    "loss": "sum",
    "pg_loss": "sum",
    "clip_frac": "token",
    "clip_frac_low": "token",
    "clip_frac_high": "token",
    "dual_clip_frac": "token",
    "trunc_frac": "token",
    "cov_frac": "token",
    "abs_kl_old": "token",
    "vf_loss": "sum",
    "bog/nll": "sum",
    "bog/rows": "sum",
    "dpo/loss": "sum",
    "dpo/pairs": "sum",
    "vf_clipfrac": "token",
    "value_group_mse": "sum",
    "values/mean": "token",
    "is_weight/mean": "token",
    "approx_kl_old": "token",
    "ratio/mean": "token",
    "ratio/min": "min",
    "ratio/max": "max",
    "kl_ref": "token",
    "entropy": "token",
    "tokens": "sum",
    "seqs": "sum",
}
"""How each ``policy_loss`` metric combines over micro-batches (and ranks): ``sum`` (the losses,
already divided by the step's denominators, and the counts), ``token`` (a mean over this batch's
response tokens: weight by ``tokens``), ``min`` / ``max``. :func:`combine_metrics` applies it."""




def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    algo: Algo,
    *,
    max_len: int | None = None,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
    is_weights: Tensor | None = None,
    select: Tensor | None = None,
    num_tokens: Number | Tensor | None = None,
    num_seqs: Number | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The policy loss (to minimise) and its metrics, for the algorithm ``algo``.

    Args:
        logp: ``(B, T)`` log-probs of the sampled tokens under the current policy (with grad).
        old_logp: ``(B, T)`` log-probs under the policy that generated the batch (no grad).
            On-policy (one optimizer step per rollout batch) pass ``logp.detach()``; in bypass mode
            the rollout engine's log-probs.
        advantages: ``(B,)`` per response (from :func:`group_advantages`) or ``(B, T)`` per token.
        mask: ``(B, T)`` 1/True on response tokens (EOS included), 0 on padding (and on tokens a
            rollout-correction rejection removed).
        algo: the settings (:class:`Algo`): its objective ``loss`` (ppo = GRPO/DAPO/GSPO's clipped
            surrogate, cispo, gmpo, sapo, gpg, dro, kl_cov, clip_cov, dppo_tv, dppo_kl), ``ratio``
            (token, or GSPO's sequence), the clip range ``eps_low``/``eps_high`` and dual clip
            ``clip_ratio_c``, the objectives' own settings, the aggregation ``agg`` (SAPO always uses
            seq-mean-token-mean and GMPO a mean over sequences, as verl), the KL to the reference
            ``beta * kl`` per token aggregated with ``agg``, and ``entropy_coef``. A variant is
            ``dataclasses.replace(algo, eps_high=0.28)`` or ``algos.get("grpo", eps_high=0.28)``.
        max_len: the constant L of ``seq-mean-token-sum-norm`` (the max new tokens).
        ref_logp: ``(B, T)`` log-probs under the frozen reference; with ``beta=0`` and ``ref_logp``
            given, ``kl_ref`` is still reported.
        entropy: ``(B, T)`` per-token entropy; ``- entropy_coef * H`` per token.
        is_weights: ``(B, T)`` rollout-correction weights (detached) that multiply the policy
            loss per token (GMPO: their per-sequence geometric mean), as verl's ``rollout_is_weights``.
        select: ``(B, T)`` bool, the KL-Cov / Clip-Cov token selection made over the whole step
            (:func:`rewardlab.algos.objectives.cov_select`); None = select within this call (verl).
        num_tokens, num_seqs: the whole optimizer step's response-token count and B_eff (summed
            over micro-batches and ranks). Pass them when a step is split, so that the sum of the
            micro-batch losses equals the loss of the step (exactly the same gradient).

    Returns:
        ``(loss, metrics)``: ``loss`` a 0-dim tensor (float32, or float64 for float64 ``logp``);
        ``metrics`` a dict of detached 0-dim tensors named in :data:`METRIC_REDUCE`
        (``kl_ref`` only with ``ref_logp``, ``entropy`` only with ``entropy``). Token metrics are
        means over this call's response tokens; combine calls with :func:`combine_metrics`.
    """
    _check_inputs(logp, old_logp, advantages, mask, algo, ref_logp=ref_logp, entropy=entropy,
                  is_weights=is_weights, select=select)
    cdt = compute_dtype(logp)
    m = mask.bool()  # (B, T)
    zero = torch.zeros((), dtype=cdt, device=logp.device)
    lp = torch.where(m, logp.to(cdt), zero)  # (B, T) padding -> 0 (also blocks NaN gradients)
    lp_old = torch.where(m, old_logp.detach().to(cdt), zero)  # (B, T)
    adv = advantages.detach().to(cdt)
    adv = torch.where(m, adv[:, None].expand_as(lp) if adv.dim() == 1 else adv, zero)  # (B, T)
    obj = objectives.OBJECTIVES[algo.loss](lp, lp_old, adv, m, algo, None if select is None else select.bool() & m)
    w = None if is_weights is None else torch.where(m, is_weights.detach().to(cdt), zero)  # (B, T)
    kw = {"max_len": max_len, "num_tokens": num_tokens, "num_seqs": num_seqs}
    pg = _policy_term(obj, w, m, algo.agg, kw)
    total = pg
    kl_tok = None  # (B, T)
    if ref_logp is not None:
        kl_tok = kl_penalty(lp, torch.where(m, ref_logp.detach().to(cdt), zero), kl_kind(algo.kl))  # (B, T)
        if algo.beta != 0:
            total = total + algo.beta * aggregate(kl_tok, m, algo.agg, **kw)
    ent = None if entropy is None else torch.where(m, entropy.to(cdt), zero)  # (B, T)
    if ent is not None and algo.entropy_coef != 0:
        total = total - algo.entropy_coef * aggregate(ent, m, algo.agg, **kw)
    return total, _loss_metrics(total, pg, obj, lp, lp_old, m, w, kl_tok, ent)


def _check_inputs(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, algo: Algo, *,
                  ref_logp: Tensor | None, entropy: Tensor | None, is_weights: Tensor | None,
                  select: Tensor | None) -> None:
    """One-line errors for an algorithm or tensors that policy_loss cannot use."""
    if not isinstance(algo, Algo):
        raise AlgoError("algo must be an Algo (algos.PRESETS[name] or algos.get(name, **overrides)), got "
                        f"{type(algo).__name__}")
    check_choice("loss", algo.loss, tuple(objectives.OBJECTIVES))
    check_choice("ratio", algo.ratio, RATIO_LEVELS)
    check_choice("agg", algo.agg, AGGREGATIONS)
    check_choice("kl", kl_kind(algo.kl), KL_KINDS)
    check_clip(algo.eps_low, algo.eps_high, algo.clip_ratio_c, algo.ratio, algo.loss)
    if logp.dim() != 2:
        raise AlgoError(f"logp must be (B, T), got shape {tuple(logp.shape)}")
    for name, t in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp), ("entropy", entropy),
                    ("is_weights", is_weights), ("select", select)):
        if t is not None and t.shape != logp.shape:
            raise AlgoError(f"{name} must have logp's shape {tuple(logp.shape)}, got {tuple(t.shape)}")
    if advantages.shape not in (logp.shape, logp.shape[:1]):
        raise AlgoError(f"advantages must be (B,) or (B, T) = {tuple(logp.shape)}, got {tuple(advantages.shape)}")
    if algo.beta != 0 and ref_logp is None:
        raise AlgoError("beta != 0 needs ref_logp (log-probs under the reference model)")
    if algo.entropy_coef != 0 and entropy is None:
        raise AlgoError("entropy_coef != 0 needs the per-token entropy tensor")


def _policy_term(obj: objectives.Objective, w: Tensor | None, m: Tensor, agg: str, kw: dict) -> Tensor:
    """The objective's loss, weighted by the correction weights ``w`` (B, T), aggregated over the step."""
    if obj.seq is None:
        tok_loss = obj.tok if w is None else obj.tok * w  # (B, T)
        return aggregate(tok_loss, m, obj.agg or agg, **kw)
    # --- GMPO: one loss per sequence, averaged over the step's sequences (verl: all B rows) ---
    seq_loss = obj.seq  # (B,)
    if w is not None:  # the per-sequence geometric mean of the weights, as verl
        mf = m.to(seq_loss.dtype)  # (B, T)
        n = mf.sum(-1)  # (B,)
        seq_loss = seq_loss * torch.exp((torch.log(w + 1e-10) * mf).sum(-1) / (n + 1e-8))  # (B,)
    n_seqs = torch.tensor(float(len(seq_loss)), dtype=seq_loss.dtype)
    return seq_loss.sum() / denominator(kw["num_seqs"], n_seqs, "num_seqs")


def _loss_metrics(total: Tensor, pg: Tensor, obj: objectives.Objective, lp: Tensor, lp_old: Tensor, m: Tensor,
                  w: Tensor | None, kl_tok: Tensor | None, ent: Tensor | None) -> dict[str, Tensor]:
    """Detached metrics of one policy_loss call: token means over its response tokens (METRIC_REDUCE)."""
    with torch.no_grad():
        mf = m.to(lp.dtype)  # (B, T)
        n_tok = mf.sum()
        denom = n_tok.clamp(min=1)
        r = obj.ratio if obj.ratio is not None else objectives.token_ratio(lp.detach() - lp_old)  # (B, T)
        big = torch.finfo(lp.dtype).max
        one = torch.ones((), dtype=lp.dtype, device=r.device)
        metrics: dict[str, Tensor] = {"loss": total.detach(), "pg_loss": pg.detach()}
        for name, per_tok in obj.metrics.items():
            metrics[name] = (per_tok.to(lp.dtype) * mf).sum() / denom
        metrics.update({
            "approx_kl_old": ((lp_old - lp.detach()) * mf).sum() / denom,
            "ratio/mean": (r * mf).sum() / denom,
            # no host sync: an empty batch reports 1.0 (combine_metrics ignores it)
            "ratio/min": torch.where(n_tok > 0, torch.where(m, r, big).min(), one),
            "ratio/max": torch.where(n_tok > 0, torch.where(m, r, -big).max(), one),
        })
        if w is not None:
            metrics["is_weight/mean"] = (w * mf).sum() / denom
        if kl_tok is not None:
            metrics["kl_ref"] = (kl_tok.detach() * mf).sum() / denom
        if ent is not None:
            metrics["entropy"] = (ent.detach() * mf).sum() / denom
        metrics["tokens"] = n_tok
        metrics["seqs"] = (mf.sum(-1) > 0).sum().to(lp.dtype)
    return metrics


def combine_metrics(parts: Iterable[Mapping[str, Tensor | float]]) -> dict[str, float]:
    """Combine ``policy_loss`` metrics of several micro-batches (or ranks' gathered lists) into floats.

    ``sum`` metrics are added (``loss`` then equals the step's loss when ``num_tokens``/``num_seqs``
    were passed), ``token`` metrics are averaged weighted by ``tokens``, ``min``/``max`` reduce.
    Micro-batches without response tokens do not affect means, minima or maxima. Keys not in
    :data:`METRIC_REDUCE` are averaged with equal weight.
    """
    parts = [{k: float(v) for k, v in p.items()} for p in parts]
    out: dict[str, float] = {}
    keys: list[str] = []
    for p in parts:
        keys.extend(k for k in p if k not in keys)
    total_tokens = sum(p.get("tokens", 0.0) for p in parts)
    for k in keys:
        have = [p for p in parts if k in p]
        how = METRIC_REDUCE.get(k, "plain")
        if how == "sum":
            out[k] = sum(p[k] for p in have)
        elif how == "token":
            w = sum(p.get("tokens", 0.0) for p in have)
            out[k] = sum(p[k] * p.get("tokens", 0.0) for p in have) / w if w > 0 else 0.0
        elif how in ("min", "max"):
            vals = [p[k] for p in have if p.get("tokens", 0.0) > 0] or [1.0]
            out[k] = min(vals) if how == "min" else max(vals)
        else:
            out[k] = sum(p[k] for p in have) / len(have)
    if parts and "tokens" not in keys:
        out["tokens"] = total_tokens
    return out


def step_counts(masks: Tensor | Iterable[Tensor]) -> tuple[int, int]:
    """``(num_tokens, num_seqs)`` of an optimizer step from its response mask(s) (all micro-batches).

    Sum these over ranks (``all_reduce_sum``) before passing them to :func:`policy_loss`.
    """
    if isinstance(masks, Tensor):
        masks = [masks]
    tokens = seqs = 0
    for mk in masks:
        mb = mk.bool()  # (B, T)
        tokens += int(mb.sum())
        seqs += int(mb.any(-1).sum())
    return tokens, seqs


def bypass_policy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    c: Correction,
    algo: Algo,
    **kwargs: Any,
) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
    """Bypass mode's policy loss (``core_algos.compute_policy_loss_bypass_mode``).

    ``old_logp := rollout_logp``. The IS weights and RS mask are :func:`correct` at
    ``(logp.detach(), rollout_logp, mask)``; the loss is :func:`rewardlab.algos.policy_loss` on the
    RS-modified mask with ``loss="ppo"`` and no weights (``c.bypass_loss == "ppo_clip"``: the
    weights only feed metrics) or ``loss="gpg"`` times the weights (``"reinforce"``,
    ``core_algos.compute_policy_loss_reinforce``). ``algo`` gives every other setting (its ``loss`` is
    replaced as said); ``kwargs`` go to ``policy_loss`` (``max_len``, ``ref_logp``, ``num_tokens``, ...;
    not ``is_weights``).

    Returns ``(loss, loss_metrics, correction_metrics)``: verl's ``actor/pg_clipfrac``,
    ``pg_clipfrac_lower`` and ``ppo_kl`` are ``loss_metrics``' ``clip_frac``, ``dual_clip_frac``
    and ``approx_kl_old``; ``correction_metrics`` are :func:`correct`'s (log as ``rollout_corr/``).
    """
    c.check()
    if not c.bypass:
        raise AlgoError("bypass_policy_loss needs a Correction with bypass=True (decoupled mode: correct + "
                        "policy_loss)")
    clash = sorted({"is_weights"} & set(kwargs))
    if clash:
        raise AlgoError(f"bypass_policy_loss sets {', '.join(clash)} itself (from c.bypass_loss)")
    weights, modified, corr_metrics = correct(logp.detach(), rollout_logp, mask, c)
    if c.bypass_loss == "reinforce":
        loss, metrics = policy_loss(logp, rollout_logp, advantages, modified, replace(algo, loss="gpg"),
                                    is_weights=weights, **kwargs)
    else:
        loss, metrics = policy_loss(logp, rollout_logp, advantages, modified, replace(algo, loss="ppo"),
                                    is_weights=None, **kwargs)
    return loss, metrics, corr_metrics
