"""Rollout correction as plain tensor functions: the training engine's log-probs vs the rollout engine's.

The rollout engine (vLLM, bf16 kernels, an older checkpoint) samples from ``pi_rollout``; the
trainer recomputes ``pi_old`` (decoupled mode, three policies) or reuses the engine's numbers as
``pi_old`` (bypass mode, two policies). Importance-sampling (IS) weights and rejection sampling (RS)
correct for the gap. Everything here matches verl 0.9.1 in float64
(``verl/trainer/ppo/rollout_corr_helper.py`` = ``rch``, ``core_algos.py``), number for number
(``tests/test_correction_verl.py`` against ``../shared/fixtures/verl_reference_v2.json``)::

    from rewardlab import algos
    from rewardlab.algos import correction

    c = correction.preset("decoupled_geo_rs_token_tis")
    w, mask2, corr = correction.correct(old_logp, rollout_logp, mask, c)   # no grad
    loss, metrics = algos.policy_loss(logp, old_logp, adv, mask2, algos.PRESETS["grpo"], is_weights=w, ...)
    # log corr as rollout_corr/<name>

    c = correction.preset("bypass_pg_is")                                   # bypass: old := rollout
    loss, metrics, corr = algos.bypass_policy_loss(logp, rollout_logp, adv, mask, c, algos.PRESETS["grpo"], ...)

Notation: ``m`` the response mask ``(B, T)``, ``n_i = sum_t m``, ``N = sum m``;
``mm(x) = sum x m / N`` (masked mean; verl divides by ``N + 1e-8``, we by ``N``, a relative
difference below 1e-9); ``mm_t`` the same per row. ``rho = log pi_old - log pi_rollout`` per token
(``old_logp - rollout_logp``; in bypass mode ``logp - rollout_logp``); ``clip20(x) = clamp(x, -20, 20)``
(verl's ``SAFETY_BOUND``). Padding values never matter (they are replaced by zeros first).

IS weights (``rch.compute_rollout_correction_weights``)
    token:    ``raw = exp(clip20(rho)) m``
    sequence: ``raw_i = exp(clip20(sum_t rho m))`` broadcast over the row, ``x m``; the sum is of the
              *unclamped* rho, then clamped (verl's quirk 9)
    TIS (``is_threshold`` a number u):   ``w = min(raw, u)``
    IcePop (``is_threshold`` ``"l_u"``): ``w = raw if l <= raw <= u else 0`` (the mask is unchanged)
    ``batch_normalize``: token ``w / mm(w)``; sequence ``w / mean_i mm_t(w)`` over rows with
    ``n_i > 0``; skipped (factor 1) when that mean is <= 1e-8. Weights are detached.

Rejection sampling (``rch.compute_rollout_rejection_mask``), on ``rs = clip20(rho)``:
    ``k1 = -rs``, ``k2 = rs^2 / 2``, ``k3 = exp(rs) - 1 - rs`` per token; ``token_kX`` uses them per
    token, ``seq_sum_kX`` their ``sum_t m``, ``seq_mean_kX`` their ``mm_t``, ``seq_max_kX`` their max
    over the row's valid tokens. k2/k3 keep ``stat <= u``; k1 keeps ``log l <= stat <= log u``,
    i.e. ``pi_old / pi_rollout in [1/u, 1/l]`` (quirk 8: the bounds apply to ``-rho``; a single
    number u for k1 means ``l = 1/u``). Comma-separated options are ANDed; a failed sequence option
    masks the whole row. ``modified_mask = m * keep``.

Off-policy metrics (``rch.compute_offpolicy_metrics``): ``kl = mm(log pi_rollout - log pi_old)``,
``k3_kl = mm(exp(rho) - rho - 1)`` (unclamped, as verl), ``training_ppl = mean_i exp(-mm_t(old))``
(and ``rollout_ppl``, the ``*_log_ppl`` means, ``log_ppl_diff = mean_i (mm_t(rollout) - mm_t(old))``
with abs/max/min, ``ppl_ratio = mean_i exp(that)``), ``chi2_token = mm(exp(clip20(rho))^2) - 1``,
``chi2_seq = mean_i exp(2 clip20(sum_t rho m)) - 1``.

Everything together is ``rch.compute_rollout_correction_and_rejection_mask`` = :func:`correct`;
its metric names are verl's without the ``rollout_corr/`` prefix (``rollout_is_mean``,
``rollout_rs_seq_mean_k1_masked_fraction``, ``chi2_seq``, ...). The IS metrics use the applied
weights before batch normalisation, the fractions the raw weights (``rch.compute_is_metrics``);
the RS metrics are ``rch.compute_rs_metrics``.

Bypass mode (``core_algos.compute_policy_loss_bypass_mode``) = :func:`rewardlab.algos.bypass_policy_loss`:
``old_logp := rollout_logp``; the weights and the RS mask come from :func:`correct` at
``(logp.detach(), rollout_logp)``; ``ppo_clip`` is PPO on the RS mask with the weights unused
(metrics only: the ratio already is pi_theta / pi_rollout); ``reinforce`` is
``-A sg(w) lp`` (``core_algos.compute_policy_loss_reinforce``; ``policy_loss`` with ``loss="gpg"``), or
``-A lp`` without IS weights.

Decoupled mode: verl's trainer applies the RS mask before computing advantages (quirk 10); with
outcome rewards (GRPO and friends) that changes nothing, because the score is the sum of the
per-token rewards, which only valid tokens hold.

Not reproduced on purpose: verl compares the sequence log-ratio with ``log u`` computed in float32
(``torch.log(torch.tensor(u))``); we use float64 ``log u``, which differs only for a ratio within
~1e-9 of the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from rewardlab.algos.checks import AlgoError, is_real
from rewardlab.algos.tensors import compute_dtype

Tensor = torch.Tensor

SAFETY_BOUND = 20.0
"""``exp`` arguments are clamped to [-20, 20] (verl's ``SAFETY_BOUND``)."""

IS_LEVELS: tuple[str, ...] = ("token", "sequence")
"""IS weight levels (``Correction.is_level``; None = no weights)."""

RS_OPTIONS: tuple[str, ...] = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
)
"""Rejection-sampling options (verl's ``SUPPORTED_ROLLOUT_RS_OPTIONS``)."""

BYPASS_LOSSES: tuple[str, ...] = ("ppo_clip", "reinforce")
"""Losses of bypass mode (verl's ``loss_type``)."""

_ISB_EPS = 1e-8  # batch normalisation is skipped below this mean; ESS divides by mean + 1e-8 (verl)


@dataclass(frozen=True)
class Correction:
    """One rollout-correction setting (verl's ``RolloutCorrectionConfig``, field by field).

    The default ``Correction()`` is verl's ``disabled()`` (metrics only); note that a bare verl
    ``RolloutCorrectionConfig()`` would turn on sequence IS. :func:`preset` gives verl's presets.
    """

    is_level: str | None = None
    ("""IS weights (verl ``rollout_is``): None (no weights), "token" (one per token, biased, low variance) or """
     """"sequence" (the row's product, broadcast).""")
    is_threshold: float | str | None = 2.0
    ("""verl ``rollout_is_threshold``: a number u = TIS, w = min(w, u); a string "l_u" = IcePop (sequence: MIS """
     """band), w = 0 outside [l, u]. Needed when is_level is set.""")
    batch_normalize: bool = False
    ("""verl ``rollout_is_batch_normalize``: divide the weights by their batch mean (token level: over tokens; """
     """sequence level: over rows).""")
    rs: str | None = None
    ("""verl ``rollout_rs``: comma-separated rejection options of RS_OPTIONS (e.g. "token_k2,seq_mean_k1"), all of """
     """which must pass; None = no rejection.""")
    rs_threshold: float | str | None = None
    ("""verl ``rollout_rs_threshold``: one threshold for all options or one per option, comma-separated; k2/k3 an """
     """upper bound u, k1 "l_u" on pi_rollout / pi_old (a single u means l = 1/u).""")
    bypass: bool = False
    ("""verl ``bypass_mode``: reuse the rollout engine's log-probs as old_logp (two policies; see """
     """bypass_policy_loss) instead of recomputing them (decoupled, three policies).""")
    bypass_loss: str = "ppo_clip"
    ("""verl ``loss_type`` in bypass mode: ppo_clip (PPO ratio pi_theta / pi_rollout, IS weights for metrics only) """
     """or reinforce (-A sg(w) log pi).""")

    def check(self) -> "Correction":
        """Raise :class:`AlgoError` (one line) for the first bad field; return ``self``."""
        if self.is_level is not None and self.is_level not in IS_LEVELS:
            raise AlgoError(f"unknown is_level {self.is_level!r}; choose one of: {', '.join(IS_LEVELS)} (or None)")
        if self.is_level is not None:
            if self.is_threshold is None:
                raise AlgoError(f"is_level {self.is_level!r} needs is_threshold (a number u for TIS or 'l_u' for "
                                "IcePop)")
            _parse_is_threshold(self.is_threshold)
        if not isinstance(self.batch_normalize, bool):
            raise AlgoError(f"batch_normalize must be true or false, got {self.batch_normalize!r}")
        if self.batch_normalize and self.is_level is None:
            raise AlgoError("batch_normalize needs IS weights (is_level 'token' or 'sequence')")
        if self.rs is not None:
            _parse_rs(self.rs, self.rs_threshold)
        if not isinstance(self.bypass, bool):
            raise AlgoError(f"bypass must be true or false, got {self.bypass!r}")
        if self.bypass_loss not in BYPASS_LOSSES:
            raise AlgoError(f"unknown bypass_loss {self.bypass_loss!r}; choose one of: {', '.join(BYPASS_LOSSES)}")
        if self.bypass_loss == "reinforce" and not self.bypass:
            raise AlgoError("bypass_loss 'reinforce' needs bypass=True (decoupled mode always uses the PPO loss)")
        return self


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Correction))
"""The :class:`Correction` field names."""

_TOKEN_TIS = dict(is_level="token", is_threshold=2.0)
_SEQ_TIS = dict(is_level="sequence", is_threshold=2.0)
_ICEPOP = dict(is_level="token", is_threshold="0.5_5.0")  # verl: threshold=5.0, threshold_lower=0.5
_GEO_RS = dict(rs="seq_mean_k1", rs_threshold="0.999_1.001")
_K3_RS = dict(rs="seq_mean_k3", rs_threshold=0.01)
_BYPASS_PG = dict(bypass=True, bypass_loss="reinforce")

PRESETS: dict[str, Correction] = {
    "disabled": Correction(),
    "decoupled_token_is": Correction(**_TOKEN_TIS),
    "decoupled_seq_is": Correction(**_SEQ_TIS),
    "decoupled_token_icepop": Correction(**_ICEPOP),
    "decoupled_seq_is_rs": Correction(**_SEQ_TIS, rs="seq_sum_k1", rs_threshold="0.5_2.0"),  # seq-MIS
    "decoupled_geo_rs": Correction(**_GEO_RS),
    "decoupled_geo_rs_token_tis": Correction(**_TOKEN_TIS, **_GEO_RS),
    "decoupled_geo_rs_seq_tis": Correction(**_SEQ_TIS, **_GEO_RS),
    "decoupled_k3_rs": Correction(**_K3_RS),
    "decoupled_k3_rs_token_tis": Correction(**_TOKEN_TIS, **_K3_RS),
    "decoupled_k3_rs_seq_tis": Correction(**_SEQ_TIS, **_K3_RS),
    "bypass_ppo_clip": Correction(bypass=True),
    "bypass_ppo_clip_k3_rs": Correction(**_K3_RS, bypass=True),
    "bypass_ppo_clip_geo_rs": Correction(**_GEO_RS, bypass=True),
    "bypass_pg_is": Correction(**_SEQ_TIS, **_BYPASS_PG),
    "bypass_pg_token_icepop": Correction(**_ICEPOP, **_BYPASS_PG),
    "bypass_pg_geo_rs": Correction(**_GEO_RS, **_BYPASS_PG),
    "bypass_pg_geo_rs_seq_tis": Correction(**_SEQ_TIS, **_GEO_RS, **_BYPASS_PG),
    "bypass_pg_geo_rs_token_tis": Correction(**_TOKEN_TIS, **_GEO_RS, **_BYPASS_PG),
}
"""verl 0.9.1's ``RolloutCorrectionConfig`` classmethods, by name, with their default arguments:
IS threshold 2.0 (TIS), IcePop "0.5_5.0", seq-MIS rs "0.5_2.0", Geo-RS (``seq_mean_k1``)
"0.999_1.001", K3-RS (``seq_mean_k3``) 0.01. Change a threshold with ``preset(name, rs_threshold=...)``."""


def preset(name: str, **overrides: Any) -> Correction:
    """verl's preset ``name`` (a key of :data:`PRESETS`) with field ``overrides``, checked.

    >>> preset("decoupled_geo_rs", rs_threshold="0.8_1.25").rs
    'seq_mean_k1'
    """
    if name not in PRESETS:
        raise AlgoError(f"unknown rollout-correction preset {name!r}; choose one of: {', '.join(PRESETS)}")
    unknown = sorted(set(overrides) - set(FIELDS))
    if unknown:
        raise AlgoError(f"unknown rollout-correction field(s) {', '.join(map(repr, unknown))}; valid: "
                        f"{', '.join(FIELDS)}")
    return replace(PRESETS[name], **overrides).check()


# ----------------------------------------------------------------------------------------------
# the correction
# ----------------------------------------------------------------------------------------------


def correct(
    old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, c: Correction
) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
    """IS weights, rejection mask and metrics (``rch.compute_rollout_correction_and_rejection_mask``).

    Args:
        old_logp: ``(B, T)`` log-probs under the training engine (decoupled: ``pi_old``; bypass:
            the current policy, detached).
        rollout_logp: ``(B, T)`` the rollout engine's log-probs of the same tokens.
        mask: ``(B, T)`` response mask (bool or 0/1), at least one valid token.
        c: the setting (checked here).

    Returns:
        ``(weights, modified_mask, metrics)``: ``weights`` ``(B, T)`` (zero on padding) or None when
        ``c.is_level`` is None; ``modified_mask`` ``(B, T)`` in ``mask``'s dtype, ``mask`` with
        rejected tokens / rows set to 0; ``metrics`` verl's names (without ``rollout_corr/``) ->
        0-dim tensors. Computed under ``no_grad`` in float64 for float64 ``old_logp``, else float32.
    """
    c.check()
    _check_shapes(old_logp, rollout_logp, mask)
    with torch.no_grad():
        cdt = compute_dtype(old_logp)
        m = mask.bool()  # (B, T)
        if not bool(m.any()):
            raise AlgoError("rollout correction needs at least one response token in mask")
        mf = m.to(cdt)  # (B, T)
        zero = torch.zeros((), dtype=cdt, device=old_logp.device)
        old = torch.where(m, old_logp.detach().to(cdt), zero)  # (B, T)
        roll = torch.where(m, rollout_logp.detach().to(cdt), zero)  # (B, T)
        rho = old - roll  # (B, T) log(pi_old / pi_rollout), 0 on padding
        metrics: dict[str, Tensor] = {}
        weights = None
        if c.is_level is not None:
            weights, is_metrics = _is_weights(rho, m, mf, c)
            metrics.update(is_metrics)
        keep = torch.ones_like(m)  # (B, T)
        if c.rs is not None:
            keep, rs_metrics = _rejection(rho, m, mf, c)
            metrics.update(rs_metrics)
        metrics.update(_offpolicy(old, roll, m, mf))
        if mask.dtype == torch.bool:
            modified = mask & keep  # (B, T)
        else:
            modified = mask * keep.to(mask.dtype)  # (B, T)
    return weights, modified, metrics


def offpolicy_metrics(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """verl's off-policy diagnostics (``rch.compute_offpolicy_metrics``), names -> 0-dim tensors.

    ``training_ppl``, ``training_log_ppl``, ``kl``, ``k3_kl``, ``rollout_ppl``, ``rollout_log_ppl``,
    ``log_ppl_diff``, ``log_ppl_abs_diff``, ``log_ppl_diff_max``, ``log_ppl_diff_min``,
    ``ppl_ratio``, ``chi2_token``, ``chi2_seq`` (formulas in the module docstring). Per-row means
    average over all B rows, as verl.
    """
    _check_shapes(old_logp, rollout_logp, mask)
    with torch.no_grad():
        cdt = compute_dtype(old_logp)
        m = mask.bool()  # (B, T)
        if not bool(m.any()):
            raise AlgoError("off-policy metrics need at least one response token in mask")
        mf = m.to(cdt)  # (B, T)
        zero = torch.zeros((), dtype=cdt, device=old_logp.device)
        old = torch.where(m, old_logp.detach().to(cdt), zero)  # (B, T)
        roll = torch.where(m, rollout_logp.detach().to(cdt), zero)  # (B, T)
        return _offpolicy(old, roll, m, mf)


def simulate_mismatch(logp: Tensor, mask: Tensor, *, noise: float, generator: torch.Generator | None) -> Tensor:
    """A stand-in rollout engine for tests and CPU studies: ``logp`` plus Gaussian noise per token.

    Returns ``(B, T)`` "engine" log-probs, detached, in ``logp``'s dtype: on valid tokens
    ``min(logp + N(0, noise^2), -1e-6)`` (so each stays a valid log-probability below 0), on
    padding ``logp`` unchanged. The noise is drawn with ``generator`` (on ``logp``'s device; None =
    torch's global generator), so a seeded generator gives the same engine every run. ``noise`` is
    the standard deviation in nats; 0 returns ``logp`` clamped only.
    """
    if not is_real(noise) or noise < 0:
        raise AlgoError(f"noise must be a number >= 0 (a standard deviation in nats), got {noise!r}")
    if mask.shape != logp.shape:
        raise AlgoError(f"mask must have logp's shape {tuple(logp.shape)}, got {tuple(mask.shape)}")
    with torch.no_grad():
        lp = logp.detach()  # (B, T)
        eps = torch.randn(lp.shape, generator=generator, dtype=lp.dtype, device=lp.device)  # (B, T)
        engine = (lp + noise * eps).clamp(max=-1e-6)  # (B, T)
        return torch.where(mask.bool(), engine, lp)  # (B, T)


# ----------------------------------------------------------------------------------------------
# pieces of correct()
# ----------------------------------------------------------------------------------------------


def _is_weights(rho: Tensor, m: Tensor, mf: Tensor, c: Correction) -> tuple[Tensor, dict[str, Tensor]]:
    """``rch.compute_rollout_correction_weights`` + ``rch.compute_is_metrics``."""
    upper, lower = _parse_is_threshold(c.is_threshold)
    low_bound = 1.0 / upper if lower is None else lower  # metrics' lower bound (TIS: 1/u)
    n_tok = mf.sum()
    n_row = mf.sum(-1)  # (B,)

    def mm(x: Tensor) -> Tensor:
        return (x * mf).sum() / n_tok

    if c.is_level == "token":
        raw = torch.exp(rho.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * mf  # (B, T)
        log_seq = None
    else:
        log_seq = rho.sum(-1)  # (B,) unclamped sum, then clamped (quirk 9)
        raw = torch.exp(log_seq.clamp(-SAFETY_BOUND, SAFETY_BOUND))[:, None] * mf  # (B, T)
    if lower is None:
        w = raw.clamp(max=upper)  # (B, T) TIS
    else:
        w = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))  # (B, T) IcePop

    met: dict[str, Tensor] = {}
    if log_seq is not None:
        met["rollout_is_max"] = torch.exp(log_seq.max().clamp(max=SAFETY_BOUND))
        met["rollout_is_min"] = torch.exp(log_seq.min())
        met["rollout_is_mean"] = mm(w)
        met["rollout_is_ratio_fraction_high"] = (log_seq > math.log(upper)).to(w.dtype).mean()
        met["rollout_is_ratio_fraction_low"] = (log_seq < math.log(low_bound)).to(w.dtype).mean()
    else:
        met["rollout_is_mean"] = mm(w)
        met["rollout_is_ratio_fraction_high"] = mm((raw > upper).to(w.dtype))
        met["rollout_is_ratio_fraction_low"] = mm((raw < low_bound).to(w.dtype))
        met["rollout_is_max"] = torch.where(m, w, -math.inf).max()
        met["rollout_is_min"] = torch.where(m, w, math.inf).min()
    x = w.clamp(min=0.0, max=upper)  # (B, T)
    var = mm(x * x) - mm(x) ** 2
    met["rollout_is_std"] = torch.where(n_tok > 1, var.clamp(min=0.0).sqrt(), torch.zeros_like(var))
    xn = x / (mm(x) + _ISB_EPS)  # (B, T)
    met["rollout_is_eff_sample_size"] = 1.0 / mm(xn * xn)
    s = (w * mf).sum(-1) / n_row.clamp(min=1)  # (B,) per-row mean weight, over all B rows as verl
    met["rollout_is_seq_mean"] = s.mean()
    met["rollout_is_seq_std"] = s.std() if s.numel() > 1 else torch.zeros((), dtype=w.dtype, device=w.device)
    met["rollout_is_seq_max"] = s.max()
    met["rollout_is_seq_min"] = s.min()
    met["rollout_is_seq_max_deviation"] = (s - 1.0).abs().max()
    s_raw = (raw * mf).sum(-1) / n_row.clamp(min=1)  # (B,)
    met["rollout_is_seq_fraction_high"] = (s_raw > upper).to(w.dtype).mean()
    met["rollout_is_seq_fraction_low"] = (s_raw < low_bound).to(w.dtype).mean()
    if lower is not None:
        met["rollout_is_oob_ratio"] = mm(((raw < lower) | (raw > upper)).to(w.dtype))

    if c.batch_normalize:
        if c.is_level == "token":
            mean = mm(w)
        else:
            valid = (n_row > 0).to(w.dtype)  # (B,)
            mean = (s * valid).sum() / valid.sum().clamp(min=1)
        factor = torch.where(mean > _ISB_EPS, mean, torch.ones_like(mean))
        w = w / factor  # (B, T)
        met["rollout_is_batch_norm_factor"] = factor
    return w, met


def _rejection(rho: Tensor, m: Tensor, mf: Tensor, c: Correction) -> tuple[Tensor, dict[str, Tensor]]:
    """``rch.compute_rollout_rejection_mask`` + ``rch.compute_rs_metrics``: the keep mask (bool)."""
    rs = rho.clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B, T)
    tok_stat = {"k1": -rs, "k2": 0.5 * rs * rs, "k3": torch.exp(rs) - 1.0 - rs}  # (B, T) each
    n_tok = mf.sum()
    n_row = mf.sum(-1)  # (B,)
    valid = n_row > 0  # (B,)
    vf = valid.to(mf.dtype)  # (B,)
    n_valid = vf.sum()

    def mm(x: Tensor) -> Tensor:
        return (x * mf).sum() / n_tok

    keep_all = torch.ones_like(m)  # (B, T)
    met: dict[str, Tensor] = {}
    for name, lower, upper in _parse_rs(c.rs, c.rs_threshold):
        kind = name[-2:]
        tok = tok_stat[kind]  # (B, T)
        is_k1 = kind == "k1"
        hi = math.log(upper) if is_k1 else upper
        lo = math.log(lower) if is_k1 else 0.0
        if name.startswith("token"):
            seq = None
            stat = tok  # (B, T)
        else:
            if name.startswith("seq_sum"):
                seq = (tok * mf).sum(-1)  # (B,)
            elif name.startswith("seq_mean"):
                seq = (tok * mf).sum(-1) / n_row.clamp(min=1)  # (B,)
            else:  # seq_max; an empty row gets 0 (verl)
                seq = torch.where(valid, torch.where(m, tok, -math.inf).max(-1).values, torch.zeros_like(n_row))
            stat = seq[:, None].expand_as(tok)  # (B, T)
        keep = (stat >= lo) & (stat <= hi) if is_k1 else stat <= hi  # (B, T)
        keep_all = keep_all & keep

        p = f"rollout_rs_{name}"
        seqv = seq if seq is not None else (tok * mf).sum(-1) / n_row.clamp(min=1)  # (B,)
        met[f"{p}_mean"] = mm(stat)
        if seq is not None:
            met[f"{p}_max"] = torch.where(valid, seqv, -math.inf).max()
            met[f"{p}_min"] = torch.where(valid, seqv, math.inf).min()
            met[f"{p}_fraction_high"] = ((seqv > hi) & valid).to(mf.dtype).sum() / n_valid
            low = ((seqv < lo) & valid).to(mf.dtype).sum() / n_valid if is_k1 else torch.zeros_like(n_valid)
        else:
            met[f"{p}_max"] = torch.where(m, stat, -math.inf).max()
            met[f"{p}_min"] = torch.where(m, stat, math.inf).min()
            met[f"{p}_fraction_high"] = mm((stat > hi).to(mf.dtype))
            low = mm((stat < lo).to(mf.dtype)) if is_k1 else torch.zeros_like(n_valid)
        met[f"{p}_fraction_low"] = low
        x = stat.clamp(min=lo, max=hi)  # (B, T) lo = 0 for k2/k3
        var = mm(x * x) - mm(x) ** 2
        met[f"{p}_std"] = torch.where(n_tok > 1, var.clamp(min=0.0).sqrt(), torch.zeros_like(var))
        seq_mean = (seqv * vf).sum() / n_valid
        seq_var = (((seqv - seq_mean) ** 2) * vf).sum() / (n_valid - 1).clamp(min=1)  # unbiased
        met[f"{p}_seq_mean"] = seq_mean
        met[f"{p}_seq_std"] = torch.where(n_valid > 1, seq_var.sqrt(), torch.zeros_like(seq_var))
        met[f"{p}_seq_max"] = torch.where(valid, seqv, -math.inf).max()
        met[f"{p}_seq_min"] = torch.where(valid, seqv, math.inf).min()
        met[f"{p}_seq_max_deviation"] = torch.where(valid, seqv.abs(), -math.inf).max()
        met[f"{p}_seq_fraction_high"] = ((seqv > hi) & valid).to(mf.dtype).sum() / n_valid
        if is_k1:
            met[f"{p}_seq_fraction_low"] = ((seqv < lo) & valid).to(mf.dtype).sum() / n_valid
        met[f"{p}_masked_fraction"] = mm((~keep).to(mf.dtype))
        row_rejected = (~keep & m).any(-1)  # (B,)
        met[f"{p}_seq_masked_fraction"] = (row_rejected & valid).to(mf.dtype).sum() / n_valid

    met["rollout_rs_masked_fraction"] = mm((~keep_all).to(mf.dtype))
    met["rollout_rs_seq_masked_fraction"] = (~keep_all & m).any(-1).to(mf.dtype).mean()  # over all B rows (verl)
    return keep_all, met


def _offpolicy(old: Tensor, roll: Tensor, m: Tensor, mf: Tensor) -> dict[str, Tensor]:
    """``rch.compute_offpolicy_metrics`` on zero-padded ``(B, T)`` log-probs."""
    n_tok = mf.sum()
    n_row = mf.sum(-1).clamp(min=1)  # (B,)

    def mm(x: Tensor) -> Tensor:
        return (x * mf).sum() / n_tok

    met: dict[str, Tensor] = {}
    mean_old = old.sum(-1) / n_row  # (B,) per-row mean log-prob, training engine
    met["training_ppl"] = torch.exp(-mean_old).mean()
    met["training_log_ppl"] = (-mean_old).mean()
    met["kl"] = mm(roll - old)
    rho = old - roll  # (B, T)
    met["k3_kl"] = mm(torch.exp(rho) - rho - 1.0)  # unclamped, as verl
    mean_roll = roll.sum(-1) / n_row  # (B,)
    met["rollout_ppl"] = torch.exp(-mean_roll).mean()
    met["rollout_log_ppl"] = (-mean_roll).mean()
    diff = mean_roll - mean_old  # (B,) log(training ppl / rollout ppl)
    met["log_ppl_diff"] = diff.mean()
    met["log_ppl_abs_diff"] = diff.abs().mean()
    met["log_ppl_diff_max"] = diff.max()
    met["log_ppl_diff_min"] = diff.min()
    met["ppl_ratio"] = torch.exp(diff).mean()
    rho_tok = torch.exp(rho.clamp(-SAFETY_BOUND, SAFETY_BOUND))  # (B, T)
    met["chi2_token"] = mm(rho_tok * rho_tok) - 1.0
    met["chi2_seq"] = torch.exp(2.0 * rho.sum(-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)).mean() - 1.0
    return met


# ----------------------------------------------------------------------------------------------
# parsing and checks
# ----------------------------------------------------------------------------------------------


def _parse_is_threshold(spec: Any) -> tuple[float, float | None]:
    """``(upper, lower)``: a number (or number string) = TIS ``(u, None)``, ``"l_u"`` = IcePop ``(u, l)``."""
    bad = f"is_threshold must be a number > 0 (TIS) or a string 'l_u' with 0 < l <= u (IcePop), got {spec!r}"
    if is_real(spec):
        upper, lower = float(spec), None
    elif isinstance(spec, str) and spec.strip():
        parts = spec.strip().split("_", 1)
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            raise AlgoError(bad) from None
        upper, lower = (vals[0], None) if len(vals) == 1 else (vals[1], vals[0])
    else:
        raise AlgoError(bad)
    if not math.isfinite(upper) or upper <= 0 or (lower is not None and not (0 < lower <= upper)):
        raise AlgoError(bad)
    return upper, lower


def _parse_rs(rs: Any, spec: Any) -> list[tuple[str, float | None, float]]:
    """``[(option, lower, upper)]`` for ``rs`` options (deduplicated, in order) and their thresholds."""
    if not isinstance(rs, str) or not rs.strip():
        raise AlgoError(f"rs must be comma-separated options of: {', '.join(RS_OPTIONS)}; got {rs!r}")
    options: list[str] = []
    for opt in (o.strip() for o in rs.split(",")):
        if not opt:
            continue
        if opt not in RS_OPTIONS:
            raise AlgoError(f"unknown rs option {opt!r}; choose from: {', '.join(RS_OPTIONS)}")
        if opt not in options:
            options.append(opt)
    if not options:
        raise AlgoError(f"rs must name at least one option of: {', '.join(RS_OPTIONS)}")
    if spec is None:
        raise AlgoError(f"rs {rs!r} needs rs_threshold (k2/k3: an upper bound u; k1: 'l_u')")
    if is_real(spec):
        specs = [repr(float(spec))]
    elif isinstance(spec, str):
        specs = [s.strip() for s in spec.split(",") if s.strip()]
    else:
        raise AlgoError(f"rs_threshold must be a number or a comma-separated string, got {spec!r}")
    if len(specs) not in (1, len(options)):
        raise AlgoError(f"rs_threshold {spec!r} gives {len(specs)} thresholds for {len(options)} rs options "
                        f"{', '.join(options)}; give one, or one per option")
    specs = specs * len(options) if len(specs) == 1 else specs
    out: list[tuple[str, float | None, float]] = []
    for opt, s in zip(options, specs):
        if "_" in s and not opt.endswith("k1"):
            raise AlgoError(f"rs_threshold for {opt!r} is one upper bound, not a range 'l_u'; got {s!r}")
        try:
            if opt.endswith("k1"):
                lo_s, up_s = s.split("_", 1) if "_" in s else (None, s)
                upper = float(up_s)
                lower = 1.0 / upper if lo_s is None else float(lo_s)
            else:
                upper, lower = float(s), None
        except (ValueError, ZeroDivisionError):
            raise AlgoError(f"rs_threshold {s!r} for {opt!r} is not a number (k1: 'l_u')") from None
        if not math.isfinite(upper) or upper <= 0 or (lower is not None and not (0 < lower <= upper)):
            raise AlgoError(f"rs_threshold for {opt!r} must be > 0 (k1: 0 < l <= u), got {s!r}")
        out.append((opt, lower, upper))
    return out


def _check_shapes(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> None:
    if old_logp.dim() != 2:
        raise AlgoError(f"log-probs must be (B, T), got shape {tuple(old_logp.shape)}")
    for name, t in (("rollout_logp", rollout_logp), ("mask", mask)):
        if t.shape != old_logp.shape:
            raise AlgoError(f"{name} must have old_logp's shape {tuple(old_logp.shape)}, got {tuple(t.shape)}")


__all__ = [
    "BYPASS_LOSSES",
    "Correction",
    "FIELDS",
    "IS_LEVELS",
    "PRESETS",
    "RS_OPTIONS",
    "SAFETY_BOUND",
    "correct",
    "offpolicy_metrics",
    "preset",
    "simulate_mismatch",
]
