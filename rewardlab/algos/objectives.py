"""The per-token policy objectives behind ``policy_loss(loss=...)``, one small function each.

Each function takes the masked inputs that :func:`rewardlab.algos.policy_loss` prepares (padding
already replaced by zeros) and returns an :class:`Objective`: the loss per token ``(B, T)`` (or per
sequence ``(B,)`` for GMPO), the aggregation it forces (if any), and its own metrics. Everything
the objectives share (masking, rollout-correction weights, KL and entropy terms, aggregation over
the optimizer step, the ratio metrics) lives in ``policy_loss``; the equations and the verl 0.9.1
function each one matches are in ``docs/algorithms.md`` ("Objectives").

Notation: ``l = lp - lp_old`` per token, ``r = exp(clamp(l, -20, 20))``, ``A`` the advantage
``(B, T)``, ``m`` the response mask. ``sg`` is stop-gradient. The ``+-20`` clamp is applied where
verl applies it (ppo, cispo, sapo, dppo_*), not in gmpo, clip_cov and kl_cov (verl's quirk 4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

AlgoLike = Any
"""An :class:`rewardlab.algos.Algo` (its loss fields are read): not imported, since ``rewardlab.algos.settings``
imports this module for the objective names (no import circle)."""

Tensor = torch.Tensor

LOG_RATIO_CLAMP = 20.0  # token ratio: exp(clamp(lp - lp_old, -20, 20))
GSPO_LOG_MAX = 10.0  # GSPO-token ratio: log clamped at 10 from above
_DPPO_EPS = 1e-8  # binary KL: log((1 - p_old + eps) / (1 - p + eps)), as verl


@dataclass
class Objective:
    """What one objective computed for a micro-batch."""

    tok: Tensor | None = None
    """``(B, T)`` loss per token (zero on padding), aggregated by ``policy_loss``."""
    seq: Tensor | None = None
    """``(B,)`` loss per sequence (GMPO), averaged over the step's sequences instead."""
    agg: str | None = None
    """An aggregation the objective forces (SAPO: seq-mean-token-mean), else None = the setting."""
    ratio: Tensor | None = None
    """``(B, T)`` the ratio to report in ``ratio/*`` metrics (default exp(clamp(l, +-20)))."""
    metrics: dict[str, Tensor] = field(default_factory=dict)
    """Objective-specific metrics, each a per-token 0/1 or value tensor ``(B, T)`` to be averaged
    over response tokens (names in ``rewardlab.algos.METRIC_REDUCE``)."""


def sequence_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO's length-normalised log importance ratio ``log s_i = sum_t m (lp - lp_old) / n_i``, ``(B,)``.

    Rows without response tokens get 0 (s_i = 1). Gradient flows through ``logp``. Computed in
    float64 for float64 ``logp``, else float32.
    """
    m = mask.bool()  # (B, T)
    cdt = torch.float64 if logp.dtype == torch.float64 else torch.float32
    zero = torch.zeros((), dtype=cdt, device=logp.device)
    diff = torch.where(m, logp.to(cdt) - old_logp.to(cdt), zero)  # (B, T)
    return diff.sum(-1) / m.sum(-1).clamp(min=1).to(cdt)  # (B,)


def token_ratio(log_ratio: Tensor) -> Tensor:
    return torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (B, T)


def ppo(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """PPO clip (verl ``vanilla``), optional dual clip; with ``ratio="sequence"`` GSPO's ratio (verl ``gspo``).

    ``L = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))``, and for ``A < 0`` with dual clip
    ``L = min(L, -A c)``. GSPO: ``r_i,t = sg(s_i) exp(lp - sg(lp))`` with
    ``log s_i = sum_t m l / n_i``, log clamped at 10 from above.
    """
    if p.ratio == "token":
        rho = token_ratio(lp - lp_old)  # (B, T)
    else:
        # --- GSPO: s_i = exp(mean_t log ratio), as sg(s_i) * exp(lp - sg(lp)) (GSPO-token form) ---
        log_s = sequence_log_ratio(lp, lp_old, m)  # (B,)
        log_rho = lp - lp.detach() + log_s.detach()[:, None]  # (B, T) value log s_i, grad d lp
        rho = torch.exp(log_rho.clamp(max=GSPO_LOG_MAX))  # (B, T)
    unclipped = -adv * rho  # (B, T)
    clipped = -adv * rho.clamp(1 - p.eps_low, 1 + p.eps_high)  # (B, T)
    tok = torch.maximum(unclipped, clipped)  # (B, T)
    r = rho.detach()
    low = (adv < 0) & (r < 1 - p.eps_low) & m  # (B, T)
    high = (adv > 0) & (r > 1 + p.eps_high) & m  # (B, T)
    dual = torch.zeros_like(m)  # (B, T)
    if p.clip_ratio_c is not None:
        # --- dual clip: for A < 0, cap the loss at -A * c ---
        cap = -adv * p.clip_ratio_c  # (B, T)
        dual = (adv < 0) & (tok > cap) & m  # (B, T)
        tok = torch.where(adv < 0, torch.minimum(tok, cap), tok)  # (B, T)
    return Objective(tok=tok, ratio=r, metrics={"clip_frac": low | high, "clip_frac_low": low,
                                                "clip_frac_high": high, "dual_clip_frac": dual})


def cispo(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """CISPO (MiniMax-M1; verl ``cispo``): ``L = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A lp``.

    The clipped ratio only weights the REINFORCE term, so clipped tokens keep their gradient."""
    r = token_ratio(lp - lp_old).detach()  # (B, T)
    rc = r.clamp(1 - p.eps_low, 1 + p.eps_high)  # (B, T)
    tok = -rc * adv * lp  # (B, T)
    return Objective(tok=tok, metrics={"clip_frac": (r != rc) & m, "clip_frac_low": (r < rc) & m,
                                       "clip_frac_high": (r > rc) & m})


def gmpo(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """GMPO, the geometric-mean objective (verl ``geo_mean``), one loss per sequence.

    ``l~ = sgn(A) min(sgn(A) l, sgn(A) clamp(l, -eps_low, eps_high))`` (no +-20 clamp);
    ``ratio_i = exp(sum_t m l~ / (n_i + 1e-8))``, ``A_i = sum_t m A / (n_i + 1e-8)``,
    ``L_i = -A_i ratio_i``; ``policy_loss`` averages ``L_i`` over the step's sequences."""
    log_ratio = lp - lp_old  # (B, T)
    sgn = torch.sign(adv)  # (B, T)
    clamped = log_ratio.clamp(-p.eps_low, p.eps_high)  # (B, T)
    lt = sgn * torch.minimum(sgn * log_ratio, sgn * clamped)  # (B, T)
    n = m.sum(-1).to(lp.dtype)  # (B,)
    ratio_seq = torch.exp((lt * m).sum(-1) / (n + 1e-8))  # (B,)
    adv_seq = (adv * m).sum(-1) / (n + 1e-8)  # (B,)
    was_clipped = (log_ratio != clamped) & m  # (B, T)
    return Objective(seq=-adv_seq * ratio_seq,
                     metrics={"clip_frac": was_clipped & (adv != 0), "clip_frac_high": was_clipped & (adv > 0),
                              "clip_frac_low": was_clipped & (adv < 0)})


def sapo(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """SAPO's soft gate (verl ``sapo``): ``L = -sigmoid(tau (r - 1)) (4 / tau) A``, with
    ``tau = tau_pos`` for ``A > 0`` else ``tau_neg``; always seq-mean-token-mean, as verl."""
    r = token_ratio(lp - lp_old)  # (B, T)
    tau = torch.where(adv > 0, torch.as_tensor(p.tau_pos, dtype=lp.dtype, device=lp.device),
                      torch.as_tensor(p.tau_neg, dtype=lp.dtype, device=lp.device))  # (B, T)
    gate = torch.sigmoid(tau * (r - 1.0)) * (4.0 / tau)  # (B, T)
    return Objective(tok=-gate * adv, agg="seq-mean-token-mean")


def gpg(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """Plain policy gradient (GPG, verl ``gpg``; REINFORCE in bypass mode): ``L = -A lp``."""
    return Objective(tok=-adv * lp)


def dro(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """DRO (verl ``dro``): policy gradient with a squared log-ratio penalty,
    ``L = -(A lp - dro_beta / 2 * l^2)``."""
    log_ratio = lp - lp_old  # (B, T)
    return Objective(tok=-(adv * lp - 0.5 * p.dro_beta * log_ratio * log_ratio))


def kl_cov(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """KL-Cov (verl ``kl_cov``): ``L = -A r`` (no clip, no +-20 clamp), plus ``kl_cov_coef |l|`` on
    the selected tokens, the ``max(1, int(N cov_ratio))`` with the largest covariance
    ``(A - mean A)(lp - mean lp)`` over the step's valid tokens (:func:`cov_select`)."""
    log_ratio = lp - lp_old  # (B, T)
    tok = -adv * torch.exp(log_ratio)  # (B, T)
    sel = select if select is not None else cov_select([(lp, lp_old, adv, m)], "kl_cov", p)[0]  # (B, T)
    tok = torch.where(sel, tok + p.kl_cov_coef * log_ratio.abs(), tok)  # (B, T)
    return Objective(tok=tok, metrics={"abs_kl_old": log_ratio.detach().abs(), "cov_frac": sel & m})


def clip_cov(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """Clip-Cov (verl ``clip_cov``): PPO clip without the +-20 clamp or dual clip, with the loss and
    gradient of up to ``max(1, int(N cov_ratio))`` not-yet-clipped tokens whose covariance lies in
    ``(clip_cov_lb, clip_cov_ub)`` set to zero (chosen at random among candidates, as verl)."""
    r = torch.exp(lp - lp_old)  # (B, T)
    unclipped = -adv * r  # (B, T)
    clipped = -adv * r.clamp(1 - p.eps_low, 1 + p.eps_high)  # (B, T)
    sel = select if select is not None else cov_select([(lp, lp_old, adv, m)], "clip_cov", p)[0]  # (B, T)
    tok = torch.where(sel, torch.zeros_like(unclipped), torch.maximum(unclipped, clipped))  # (B, T)
    return Objective(tok=tok, ratio=r.detach(), metrics={"cov_frac": sel & m})


def _dppo(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, valid: Tensor) -> Objective:
    r = token_ratio(lp - lp_old).detach()  # (B, T)
    c = float("inf") if p.clip_ratio_c is None else p.clip_ratio_c
    tok = -adv * r.clamp(max=c) * lp * valid.to(lp.dtype)  # (B, T)
    return Objective(tok=tok, metrics={"clip_frac": ~valid & m, "trunc_frac": (r > c) & valid & m})


def dppo_tv(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """DPPO with a total-variation trust region (verl ``dppo_tv``): a token leaves the loss when its
    probability moved past the region in the advantage's direction, ``p - p_old > eps_high`` for
    ``A > 0`` or ``p - p_old < -eps_low`` otherwise; ``L = -A sg(min(r, c)) lp`` on the rest
    (``c = clip_ratio_c``, None = no truncation)."""
    prob, prob_old = torch.exp(lp.detach()), torch.exp(lp_old)  # (B, T)
    diff = prob - prob_old  # (B, T)
    valid = torch.where(adv > 0, diff <= p.eps_high, diff >= -p.eps_low)  # (B, T)
    return _dppo(lp, lp_old, adv, m, p, valid)


def dppo_kl(lp: Tensor, lp_old: Tensor, adv: Tensor, m: Tensor, p: AlgoLike, select: Tensor | None) -> Objective:
    """DPPO with a binary-KL trust region (verl ``dppo_kl``):
    ``KL = p_old (log p_old - log p) + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8))``; a token
    stays when ``KL <= eps_high or p <= p_old`` (A > 0), ``KL <= eps_low or p >= p_old`` (else)."""
    lpd = lp.detach()
    prob, prob_old = torch.exp(lpd), torch.exp(lp_old)  # (B, T)
    kl = prob_old * (lp_old - lpd) + (1 - prob_old) * torch.log((1 - prob_old + _DPPO_EPS) / (1 - prob + _DPPO_EPS))
    valid = torch.where(adv > 0, (kl <= p.eps_high) | (prob <= prob_old), (kl <= p.eps_low) | (prob >= prob_old))
    return _dppo(lp, lp_old, adv, m, p, valid & m)


OBJECTIVES: dict[str, Callable[..., Objective]] = {
    "ppo": ppo, "cispo": cispo, "gmpo": gmpo, "sapo": sapo, "gpg": gpg, "dro": dro,
    "kl_cov": kl_cov, "clip_cov": clip_cov, "dppo_tv": dppo_tv, "dppo_kl": dppo_kl,
}
"""``Algo.loss`` choices; ``ppo`` covers GRPO, Dr. GRPO, DAPO and (``ratio="sequence"``) GSPO."""

COV_LOSSES: tuple[str, ...] = ("kl_cov", "clip_cov")
"""Objectives whose token selection depends on the whole step (see :func:`cov_select`)."""


def cov_select(parts: list[tuple[Tensor, Tensor, Tensor, Tensor]], loss: str, p: AlgoLike,
               generator: torch.Generator | None = None) -> list[Tensor]:
    """The tokens KL-Cov penalises or Clip-Cov zeroes, chosen over every part at once.

    ``parts`` are ``(lp, lp_old, adv, mask)`` per micro-batch (each ``(B_k, T_k)``, padding zero);
    pass all micro-batches of an optimizer step so the selection, like the loss, does not depend on
    how the step is split. Covariance per valid token: ``(A - mean A)(lp - mean lp)`` with plain
    means over the valid tokens of all parts. KL-Cov takes the top ``max(1, int(N cov_ratio))``;
    Clip-Cov draws up to ``max(1, int(N cov_ratio))`` at random among the tokens that PPO did not
    clip and whose covariance lies strictly in ``(clip_cov_lb, clip_cov_ub)``. Returns a bool
    ``(B_k, T_k)`` mask per part.
    """
    masks = [mk.bool() for (_, _, _, mk) in parts]
    adv = torch.cat([a.detach()[mk] for (_, _, a, _), mk in zip(parts, masks)])  # (N,)
    lpv = torch.cat([lp.detach()[mk] for (lp, _, _, _), mk in zip(parts, masks)])  # (N,)
    out = [torch.zeros_like(mk) for mk in masks]
    n = adv.numel()
    if n == 0:
        return out
    cov = (adv - adv.mean()) * (lpv - lpv.mean())  # (N,)
    k = max(1, int(n * p.cov_ratio))
    if loss == "kl_cov":
        chosen = torch.topk(cov, min(k, n), largest=True).indices  # (k,)
    else:
        lr = torch.cat([(lp.detach() - old)[mk] for (lp, old, _, _), mk in zip(parts, masks)])  # (N,)
        r = torch.exp(lr)  # (N,)
        clipped = -adv * r.clamp(1 - p.eps_low, 1 + p.eps_high) > -adv * r  # (N,)
        cand = torch.nonzero((cov > p.clip_cov_lb) & (cov < p.clip_cov_ub) & ~clipped).flatten()  # (C,)
        perm = torch.randperm(cand.numel(), generator=generator, device=cand.device)
        chosen = cand[perm[:k]]  # (<= k,)
    flat = torch.zeros(n, dtype=torch.bool, device=adv.device)
    flat[chosen] = True
    start = 0
    for o, mk in zip(out, masks):
        cnt = int(mk.sum())
        o[mk] = flat[start : start + cnt]
        start += cnt
    return out
