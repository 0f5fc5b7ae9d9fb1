"""Extras: named options that compose with any preset, as pure, trainer-independent pieces.

Secondary write-ups ("interview prep" notes) attach these ideas to DAPO or GSPO; they are in
neither paper. Here each one is an option of its own, off by default, that changes no preset
(``docs/algorithms.md``, "Extras"). The training loop decides where to call them:

* :class:`AdaptiveClip` -- KL-adaptive clip range:
  ``eps = eps_base * (1 + alpha * (kl_target - kl_hat) / kl_target)``, clamped to ``[eps_min, eps_max]``.
* :class:`EmaRewardNorm` -- global EMA reward normalisation before the group statistics:
  ``r' = (r - mean_hat) / (sqrt(var_hat) + eps)``.
* :class:`GroupSizePolicy` -- variance-driven group size:
  ``G = clamp(ceil(var_hat / threshold), G_min, G_max)`` after a warm-up with fixed G.
* :func:`best_of_group`, :func:`bog_coef`, :func:`bog_nll` -- best-of-group auxiliary likelihood
  loss ``lambda(step) * NLL(best completion of each group)``, lambda warmed up from 0.
* :func:`dpo_pairs`, :func:`dpo_loss` -- DPO on (best, worst) pairs taken from the groups.

The stateful pieces (the first three) keep plain Python floats and ints; ``state_dict()`` is
JSON-serialisable and ``load_state_dict`` makes a resumed run continue exactly (bit for bit).
Every EMA is bias-corrected as in Adam: ``ema_n = decay * ema_{n-1} + (1 - decay) * x_n``,
``ema_0 = 0``, ``hat_n = ema_n / (1 - decay**n)`` (so ``hat_1 = x_1``).

Shapes as in :mod:`rewardlab.algos`: ``N`` or ``B`` rows (one per completion), ``T`` padded
response length, per-token tensors ``(B, T)``, ``mask`` 1 on response tokens, ``group_ids`` a
``(N,)`` sequence of hashables or an integer tensor (completions of one prompt share an id).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rewardlab.algos.checks import AlgoError, is_real
from rewardlab.algos.loss import aggregate
from rewardlab.algos.tensors import as_float_vector, compute_dtype, group_index

Tensor = torch.Tensor
Number = int | float


def _check_decay(decay: Any) -> float:
    if not is_real(decay) or not 0 <= decay < 1:
        raise AlgoError(f"decay must be in [0, 1), got {decay!r}")
    return float(decay)


def _finite(x: Any, name: str) -> float:
    if isinstance(x, Tensor):
        if x.numel() != 1:
            raise AlgoError(f"{name} must be one number, got shape {tuple(x.shape)}")
        x = float(x)
    if not is_real(x):
        raise AlgoError(f"{name} must be a finite number, got {x!r}")
    return float(x)


def _finite_scores(scores: Tensor | Sequence[float], name: str = "scores") -> Tensor:
    """``scores`` as a float64 ``(N,)`` tensor; NaN or inf raises."""
    s, _ = as_float_vector(scores, name)
    s64 = s.to(torch.float64)  # (N,)
    if not bool(torch.isfinite(s64).all()):
        raise AlgoError(f"{name} must be finite numbers (map ungradable None scores to a value first)")
    return s64


# ----------------------------------------------------------------------------------------------
# KL-adaptive clip range
# ----------------------------------------------------------------------------------------------


class AdaptiveClip:
    """KL-adaptive clip range: widen the clip when the policy moves less than ``kl_target``, narrow it when more.

    After each optimizer step the caller passes the step's measured KL to the old policy (e.g. the
    ``approx_kl_old`` metric); :meth:`update` returns the clip range for the next step::

        ema_n  = decay * ema_{n-1} + (1 - decay) * kl_n          (ema_0 = 0)
        kl_hat = ema_n / (1 - decay**n)                           (bias-corrected; kl_hat = kl_1 after one update)
        eps_x  = clamp(eps_x_base * (1 + alpha * (kl_target - kl_hat) / kl_target), eps_min, eps_max)

    for ``x`` in low / high (each side keeps its own base, so DAPO's asymmetric clip stays
    asymmetric until a bound is hit). ``kl_hat > kl_target`` shrinks the range, ``kl_hat < kl_target``
    grows it (by at most ``1 + alpha`` times, at ``kl_hat = 0``).

    Defaults: ``alpha=1.0``, ``kl_target=0.01``, ``eps_min=0.05``, ``eps_max=0.4``, ``decay=0.9``.
    Before any update, :meth:`current` is ``(eps_low, eps_high)`` as given (not clamped). The
    state (``n``, ``ema`` and the current range) is plain numbers; the settings come from the
    constructor, so a resumed run builds the object with the same arguments and loads the state.
    """

    def __init__(
        self,
        eps_low: float,
        eps_high: float,
        alpha: float = 1.0,
        kl_target: float = 0.01,
        eps_min: float = 0.05,
        eps_max: float = 0.4,
        decay: float = 0.9,
    ) -> None:
        for name, v in (("eps_low", eps_low), ("eps_high", eps_high)):
            if not is_real(v) or v <= 0:
                raise AlgoError(f"{name} must be a number > 0, got {v!r}")
        if not is_real(alpha) or alpha < 0:
            raise AlgoError(f"alpha must be a number >= 0, got {alpha!r}")
        if not is_real(kl_target) or kl_target <= 0:
            raise AlgoError(f"kl_target must be a number > 0, got {kl_target!r}")
        if not (is_real(eps_min) and is_real(eps_max)) or not 0 <= eps_min <= eps_max:
            raise AlgoError(f"need 0 <= eps_min <= eps_max, got {eps_min!r} and {eps_max!r}")
        self.eps_low_base = float(eps_low)
        self.eps_high_base = float(eps_high)
        self.alpha = float(alpha)
        self.kl_target = float(kl_target)
        self.eps_min = float(eps_min)
        self.eps_max = float(eps_max)
        self.decay = _check_decay(decay)
        self.n = 0
        self.ema = 0.0
        self.eps_low = self.eps_low_base
        self.eps_high = self.eps_high_base

    def kl_hat(self) -> float | None:
        """The bias-corrected EMA of the KL, ``ema / (1 - decay**n)``; None before any update."""
        return self.ema / (1.0 - self.decay**self.n) if self.n else None

    def update(self, kl: float) -> tuple[float, float]:
        """Fold in one step's measured KL (a finite number, a float or a 1-element tensor); return ``(eps_low,
        eps_high)``."""
        kl = _finite(kl, "kl")
        self.n += 1
        self.ema = self.decay * self.ema + (1.0 - self.decay) * kl
        kl_hat = self.ema / (1.0 - self.decay**self.n)
        factor = 1.0 + self.alpha * (self.kl_target - kl_hat) / self.kl_target
        self.eps_low = min(max(self.eps_low_base * factor, self.eps_min), self.eps_max)
        self.eps_high = min(max(self.eps_high_base * factor, self.eps_min), self.eps_max)
        return self.eps_low, self.eps_high

    def current(self) -> tuple[float, float]:
        """The clip range now: the last :meth:`update`'s, or the base ``(eps_low, eps_high)`` before any."""
        return self.eps_low, self.eps_high

    def metrics(self) -> dict[str, float]:
        """``adaptive_clip/eps_low``, ``adaptive_clip/eps_high`` and ``adaptive_clip/kl_hat`` (0 before any update)."""
        return {
            "adaptive_clip/eps_low": self.eps_low,
            "adaptive_clip/eps_high": self.eps_high,
            "adaptive_clip/kl_hat": self.kl_hat() or 0.0,
        }

    def state_dict(self) -> dict[str, Any]:
        """``{"n": int, "ema": float, "eps_low": float, "eps_high": float}`` (JSON-serialisable)."""
        return {"n": self.n, "ema": self.ema, "eps_low": self.eps_low, "eps_high": self.eps_high}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (e.g. after ``json.loads``)."""
        n = state["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise AlgoError(f"AdaptiveClip state: n must be an integer >= 0, got {n!r}")
        self.n = n
        self.ema = _finite(state["ema"], "AdaptiveClip state ema")
        self.eps_low = _finite(state["eps_low"], "AdaptiveClip state eps_low")
        self.eps_high = _finite(state["eps_high"], "AdaptiveClip state eps_high")


# ----------------------------------------------------------------------------------------------
# global EMA reward normalisation
# ----------------------------------------------------------------------------------------------


class EmaRewardNorm:
    """Global EMA reward normalisation, applied to a batch's rewards before the group statistics.

    Per call (batch ``r`` of ``N`` rewards, ``n`` = calls so far including this one)::

        m_n = decay * m_{n-1} + (1 - decay) * mean(r)          (m_0 = 0)
        s_n = decay * s_{n-1} + (1 - decay) * mean(r**2)       (s_0 = 0)
        mean_hat = m_n / (1 - decay**n),   sq_hat = s_n / (1 - decay**n)
        var_hat  = max(sq_hat - mean_hat**2, 0)
        r'       = (r - mean_hat) / (sqrt(var_hat) + eps)

    The EMAs track the batch mean and the batch mean of *squares* (not the batch variance), so
    ``var_hat`` is the variance of the EMA-weighted mixture of all batches seen: it includes the
    drift of the batch means between steps. The statistics INCLUDE the current batch (it is folded
    in before normalising), so the first call is plain standardisation with the population
    (divide-by-N) std: ``(r - mean(r)) / (std_pop(r) + eps)``. Statistics in float64 (Python
    floats); the result has ``rewards``' dtype when it is a floating tensor, else float32.

    Defaults: ``decay=0.99``, ``eps=1e-6``. Note: the group z-score (``advantage="std"``) is
    invariant to a positive affine map of the rewards up to its own eps, so this option matters
    mostly with advantages that do not divide by a std (``none``, ``rloo``, ``opo``, ...) and for
    the reward scale seen by any KL or auxiliary term.
    """

    def __init__(self, decay: float = 0.99, eps: float = 1e-6) -> None:
        self.decay = _check_decay(decay)
        if not is_real(eps) or eps < 0:
            raise AlgoError(f"eps must be a number >= 0, got {eps!r}")
        self.eps = float(eps)
        self.n = 0
        self.mean_ema = 0.0
        self.sq_ema = 0.0

    def stats(self) -> tuple[float, float] | None:
        """``(mean_hat, var_hat)`` now; None before any batch."""
        if not self.n:
            return None
        corr = 1.0 - self.decay**self.n
        mean_hat = self.mean_ema / corr
        return mean_hat, max(self.sq_ema / corr - mean_hat * mean_hat, 0.0)

    def __call__(self, rewards: Tensor | Sequence[float]) -> Tensor:
        """Fold ``rewards`` ``(N,)`` (N >= 1, finite) into the EMAs and return them normalised, ``(N,)``."""
        r, out_dtype = as_float_vector(rewards, "rewards")
        r64 = r.to(torch.float64)  # (N,)
        if r64.numel() == 0:
            raise AlgoError("rewards must hold at least one value")
        if not bool(torch.isfinite(r64).all()):
            raise AlgoError("rewards must be finite numbers (map ungradable None scores to a value first)")
        self.n += 1
        self.mean_ema = self.decay * self.mean_ema + (1.0 - self.decay) * float(r64.mean())
        self.sq_ema = self.decay * self.sq_ema + (1.0 - self.decay) * float((r64 * r64).mean())
        mean_hat, var_hat = self.stats()  # type: ignore[misc]
        return ((r64 - mean_hat) / (math.sqrt(var_hat) + self.eps)).to(out_dtype)  # (N,)

    def metrics(self) -> dict[str, float]:
        """``reward_norm/mean`` and ``reward_norm/std`` (the bias-corrected statistics; 0 and 1 before any batch)."""
        st = self.stats()
        mean_hat, var_hat = st if st is not None else (0.0, 1.0)
        return {"reward_norm/mean": mean_hat, "reward_norm/std": math.sqrt(var_hat)}

    def state_dict(self) -> dict[str, Any]:
        """``{"n": int, "mean_ema": float, "sq_ema": float}`` (JSON-serialisable; raw EMAs, not corrected)."""
        return {"n": self.n, "mean_ema": self.mean_ema, "sq_ema": self.sq_ema}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        n = state["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise AlgoError(f"EmaRewardNorm state: n must be an integer >= 0, got {n!r}")
        self.n = n
        self.mean_ema = _finite(state["mean_ema"], "EmaRewardNorm state mean_ema")
        self.sq_ema = _finite(state["sq_ema"], "EmaRewardNorm state sq_ema")


# ----------------------------------------------------------------------------------------------
# variance-driven group size
# ----------------------------------------------------------------------------------------------


class GroupSizePolicy:
    """Variance-driven group size per prompt: more completions for prompts whose rewards vary more.

    :meth:`update` takes one batch's rewards and the prompt key of every row; the rows sharing a
    key are that prompt's group (as ``group_advantages``' ``group_ids``). Per key ``k`` with at
    least two rows, ``v`` = the unbiased (n-1) variance of its rewards, and (per-key count ``n_k``)::

        ema_k  = decay * ema_k + (1 - decay) * v          (ema_k = 0 before the first)
        var_k  = ema_k / (1 - decay**n_k)                 (bias-corrected; the first v itself)

    A key seen with a single row is not updated (no variance). :meth:`size` is::

        g_fixed                                           if step <= warmup_steps or k is unseen
        clamp(ceil(var_k / threshold), g_min, g_max)      otherwise

    with ``step`` counted from 1 (steps 1..warmup_steps are the warm-up; ``warmup_steps=0`` = none)
    and ``ceil`` taken with a 1e-9 slack (``ceil(x - 1e-9)``) so float noise such as
    ``0.3 / 0.1 = 3.0000000000000004`` gives 3, not 4. A prompt whose rewards never vary (always
    solved, or never) gets ``g_min``. Default ``decay=0.9``.

    Keys are stored as ``str(key)`` (so that the state survives JSON unchanged): keys with the same
    ``str`` (``1`` and ``"1"``) are one prompt.
    """

    def __init__(
        self,
        g_fixed: int,
        g_min: int,
        g_max: int,
        threshold: float,
        warmup_steps: int,
        decay: float = 0.9,
    ) -> None:
        for name, v in (("g_fixed", g_fixed), ("g_min", g_min), ("g_max", g_max)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise AlgoError(f"{name} must be an integer >= 1, got {v!r}")
        if g_min > g_max:
            raise AlgoError(f"g_min must be <= g_max, got {g_min} and {g_max}")
        if not is_real(threshold) or threshold <= 0:
            raise AlgoError(f"threshold must be a number > 0, got {threshold!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise AlgoError(f"warmup_steps must be an integer >= 0, got {warmup_steps!r}")
        self.g_fixed, self.g_min, self.g_max = g_fixed, g_min, g_max
        self.threshold = float(threshold)
        self.warmup_steps = warmup_steps
        self.decay = _check_decay(decay)
        self.var_ema: dict[str, float] = {}
        self.count: dict[str, int] = {}

    def update(self, rewards: Tensor | Sequence[float], prompt_keys: Tensor | Sequence[Hashable]) -> None:
        """Fold one batch in: ``rewards`` ``(N,)`` finite, ``prompt_keys`` ``(N,)`` the prompt of each row."""
        r = _finite_scores(rewards, "rewards")  # (N,)
        keys = prompt_keys.tolist() if isinstance(prompt_keys, Tensor) else list(prompt_keys)
        if len(keys) != len(r):
            raise AlgoError(f"prompt_keys has {len(keys)} entries for {len(r)} rewards")
        rows: dict[str, list[float]] = {}
        for k, v in zip(keys, r.tolist()):
            rows.setdefault(str(k), []).append(v)
        for k, vals in rows.items():
            if len(vals) < 2:
                continue
            mean = math.fsum(vals) / len(vals)
            var = math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
            self.var_ema[k] = self.decay * self.var_ema.get(k, 0.0) + (1.0 - self.decay) * var
            self.count[k] = self.count.get(k, 0) + 1

    def variance(self, prompt_key: Hashable) -> float | None:
        """The bias-corrected EMA of the prompt's reward variance; None when unseen."""
        k = str(prompt_key)
        if k not in self.count:
            return None
        return self.var_ema[k] / (1.0 - self.decay ** self.count[k])

    def size(self, prompt_key: Hashable, step: int) -> int:
        """The group size for ``prompt_key`` at ``step`` (an integer >= 1); see the class docstring."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise AlgoError(f"step must be an integer >= 1 (counted from 1), got {step!r}")
        var = self.variance(prompt_key)
        if step <= self.warmup_steps or var is None:
            return self.g_fixed
        g = math.ceil(var / self.threshold - 1e-9)
        return min(max(g, self.g_min), self.g_max)

    def sizes(self, prompt_keys: Iterable[Hashable], step: int) -> list[int]:
        """:meth:`size` for each key."""
        return [self.size(k, step) for k in prompt_keys]

    def state_dict(self) -> dict[str, Any]:
        """``{"var_ema": {str: float}, "count": {str: int}}`` (JSON-serialisable)."""
        return {"var_ema": dict(self.var_ema), "count": dict(self.count)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (e.g. after ``json.loads``)."""
        var_ema = {str(k): _finite(v, "GroupSizePolicy state var_ema") for k, v in state["var_ema"].items()}
        count = {str(k): v for k, v in state["count"].items()}
        if set(var_ema) != set(count) or any(isinstance(c, bool) or not isinstance(c, int)
                                             or c < 1 for c in count.values()):
            raise AlgoError("GroupSizePolicy state: var_ema and count must have the same keys, counts integers >= 1")
        self.var_ema, self.count = var_ema, count


# ----------------------------------------------------------------------------------------------
# best-of-group auxiliary likelihood loss
# ----------------------------------------------------------------------------------------------


def best_of_group(scores: Tensor | Sequence[float], group_ids: Tensor | Sequence[Hashable]) -> Tensor:
    """``(N,)`` bool: True for the best completion of each group with a unique best above the group mean.

    Per group ``g``: ``i`` is selected iff ``s_i = max_g`` and no other member of ``g`` has
    ``max_g`` (a tie for best selects no row, so all-equal groups select none) and ``s_i > mean_g``.
    In exact arithmetic a unique maximum of a group of two or more is always above the mean, and
    a one-member group's only score *is* its mean, so the mean test only removes one-member
    groups; it is implemented as "unique maximum in a group of >= 2", which never loses a best to
    rounding in the mean (``[x, nextafter(x, -inf)]`` selects ``x``). Scores must be finite.
    """
    s = _finite_scores(scores)  # (N,)
    inv, n_groups = group_index(group_ids, len(s), s.device)
    count = torch.bincount(inv, minlength=n_groups)  # (G,)
    gmax = torch.full((n_groups,), -math.inf, dtype=torch.float64, device=s.device).scatter_reduce(0, inv, s, "amax")
    is_max = s == gmax[inv]  # (N,)
    n_max = torch.bincount(inv, weights=is_max.to(torch.float64), minlength=n_groups)  # (G,)
    return is_max & (n_max[inv] == 1) & (count[inv] >= 2)  # (N,)


def bog_coef(step: int, total_steps: int, lam: float, warmup_frac: float) -> float:
    """Weight of the best-of-group loss at ``step`` (counted from 1): ``lam * min(1, step / W)``, ``W = warmup_frac *
    total_steps``.

    A line from 0 (at step 0) to ``lam`` at step ``W`` (``W`` need not be an integer), ``lam`` at
    and after it; ``warmup_frac = 0`` gives ``lam`` at every step. E.g. ``total_steps=100``,
    ``warmup_frac=0.1``: step 1 -> ``0.1 lam``, step 5 -> ``0.5 lam``, steps >= 10 -> ``lam``.
    Needs ``step >= 1``, ``total_steps >= 1``, ``lam >= 0``, ``0 <= warmup_frac <= 1``.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise AlgoError(f"step must be an integer >= 1 (counted from 1), got {step!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise AlgoError(f"total_steps must be an integer >= 1, got {total_steps!r}")
    if not is_real(lam) or lam < 0:
        raise AlgoError(f"lam must be a number >= 0, got {lam!r}")
    if not is_real(warmup_frac) or not 0 <= warmup_frac <= 1:
        raise AlgoError(f"warmup_frac must be in [0, 1], got {warmup_frac!r}")
    w = warmup_frac * total_steps
    if w <= 0 or step >= w:
        return float(lam)
    return float(lam) * step / w


def bog_token_count(mask: Tensor, select: Tensor) -> int:
    """The number of response tokens in the selected rows: ``sum_i select_i * sum_t mask[i,t]``.

    Sum it over a step's micro-batches (and ranks) and pass it to :func:`bog_nll` as ``num_tokens``.
    """
    return int((mask.bool() & select.bool()[:, None]).sum())


def bog_nll(logp: Tensor, mask: Tensor, select: Tensor, num_tokens: Number | Tensor | None = None) -> Tensor:
    """Best-of-group NLL: ``-sum_{i selected} sum_t m[i,t] logp[i,t] / N``, a 0-dim tensor.

    ``logp`` ``(B, T)`` with grad, ``mask`` ``(B, T)``, ``select`` ``(B,)`` bool (from
    :func:`best_of_group`). ``N`` = the selected rows' token count here, or ``num_tokens`` when
    given (the step's count over all micro-batches, :func:`bog_token_count`), so that micro-batch
    values sum to the step's. No selected token gives 0, still connected to ``logp``'s graph.
    Padding values never matter. Add ``bog_coef(step, ...) * bog_nll(...)`` to the policy loss.
    Computed in float32 (float64 for float64 ``logp``), like ``policy_loss``.
    """
    if logp.dim() != 2 or mask.shape != logp.shape:
        raise AlgoError(f"logp and mask must both be (B, T), got {tuple(logp.shape)} and {tuple(mask.shape)}")
    if select.shape != logp.shape[:1]:
        raise AlgoError(f"select must be (B,) = ({logp.shape[0]},), got {tuple(select.shape)}")
    cdt = compute_dtype(logp)
    m = mask.bool() & select.bool()[:, None]  # (B, T)
    return aggregate(-logp.to(cdt), m, "token-mean", num_tokens=num_tokens)


# ----------------------------------------------------------------------------------------------
# DPO from group pairs
# ----------------------------------------------------------------------------------------------


def dpo_pairs(scores: Tensor | Sequence[float], group_ids: Tensor | Sequence[Hashable]) -> list[tuple[int, int]]:
    """One ``(chosen, rejected)`` = ``(index of best, index of worst)`` pair per group whose scores are not all equal.

    Indices are rows of ``scores``; ties for best or for worst go to the lowest index. Pairs are in
    the order of each group's first row. All-equal groups (and one-member groups) give no pair.
    """
    s = _finite_scores(scores).tolist()
    inv, _ = group_index(group_ids, len(s), torch.device("cpu"))
    best: dict[int, int] = {}
    worst: dict[int, int] = {}
    for i, g in enumerate(inv.tolist()):
        if g not in best:
            best[g] = worst[g] = i
            continue
        if s[i] > s[best[g]]:  # strict: an equal later score keeps the lower index
            best[g] = i
        if s[i] < s[worst[g]]:
            worst[g] = i
    return [(best[g], worst[g]) for g in best if s[best[g]] != s[worst[g]]]


def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    num_pairs: Number | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Sigmoid DPO (with conservative-DPO label smoothing) on sequence log-prob sums, each ``(P,)``.

    With ``h_p = (pc_p - rc_p) - (pr_p - rr_p)`` (policy / reference log-prob sums of the chosen
    and rejected completions; the reference ones are detached)::

        l_p  = -logsigmoid(beta * h_p) * (1 - ls) - logsigmoid(-beta * h_p) * ls
        loss = sum_p l_p / D,     D = num_pairs when given (the step's pair count), else P

    so micro-batch losses with ``num_pairs`` sum to the step's mean. Defaults ``beta=0.1``,
    ``label_smoothing=0.0`` (then it is TRL's ``loss_type="sigmoid"``; ls > 0 is the cDPO form of
    TRL before 1.0, which TRL 1.16 keeps only in its ``aot`` losses). ``P = 0`` gives 0 with a graph.
    Computed in float32 (float64 for float64 ``chosen_logps``).

    Metrics (detached 0-dim tensors, means over this call's pairs; 0 when ``P = 0``):
    ``dpo/loss`` (the returned loss), ``dpo/reward_chosen`` = mean ``beta (pc - rc)``,
    ``dpo/reward_rejected`` = mean ``beta (pr - rr)``, ``dpo/reward_margin`` = their difference,
    ``dpo/accuracy`` = fraction of pairs with chosen reward > rejected reward, ``dpo/pairs`` = P.
    """
    pc = chosen_logps
    if pc.dim() != 1 or any(t.shape != pc.shape for t in (rejected_logps, ref_chosen_logps, ref_rejected_logps)):
        raise AlgoError(
            "chosen/rejected/ref log-probs must all be (P,), got "
            + ", ".join(str(tuple(t.shape)) for t in (chosen_logps, rejected_logps, ref_chosen_logps,
                                                      ref_rejected_logps))
        )
    if not is_real(beta) or beta <= 0:
        raise AlgoError(f"beta must be a number > 0, got {beta!r}")
    if not is_real(label_smoothing) or not 0 <= label_smoothing < 0.5:
        raise AlgoError(f"label_smoothing must be in [0, 0.5), got {label_smoothing!r}")
    cdt = compute_dtype(pc)
    pc = pc.to(cdt)  # (P,)
    pr = rejected_logps.to(cdt)  # (P,)
    rc = ref_chosen_logps.detach().to(cdt)  # (P,)
    rr = ref_rejected_logps.detach().to(cdt)  # (P,)
    h = (pc - rc) - (pr - rr)  # (P,)
    per_pair = -F.logsigmoid(beta * h) * (1 - label_smoothing) - F.logsigmoid(-beta * h) * label_smoothing  # (P,)
    p = pc.shape[0]
    denom = num_pairs if num_pairs is not None else max(p, 1)
    if isinstance(denom, Tensor):
        denom = denom.to(cdt)
    elif not is_real(denom) or denom <= 0:
        raise AlgoError(f"num_pairs must be > 0 (the optimizer step's pair count), got {num_pairs!r}")
    loss = per_pair.sum() / denom
    with torch.no_grad():
        r_c = beta * (pc.detach() - rc)  # (P,)
        r_r = beta * (pr.detach() - rr)  # (P,)
        zero = torch.zeros((), dtype=cdt, device=pc.device)
        mean = (lambda x: x.mean()) if p else (lambda x: zero)
        metrics = {
            "dpo/loss": loss.detach(),
            "dpo/reward_chosen": mean(r_c),
            "dpo/reward_rejected": mean(r_r),
            "dpo/reward_margin": mean(r_c - r_r),
            "dpo/accuracy": mean((r_c > r_r).to(cdt)),
            "dpo/pairs": torch.tensor(float(p), dtype=cdt, device=pc.device),
        }
    return loss, metrics


def dpo_pair_logps(seq_logps: Tensor, pairs: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
    """``(seq_logps[chosen], seq_logps[rejected])``, each ``(P,)``, from per-row sums ``(N,)`` and :func:`dpo_pairs`."""
    if seq_logps.dim() != 1:
        raise AlgoError(f"seq_logps must be (N,), got {tuple(seq_logps.shape)}")
    idx = torch.tensor(list(pairs), dtype=torch.long, device=seq_logps.device).reshape(-1, 2)  # (P, 2)
    return seq_logps[idx[:, 0]], seq_logps[idx[:, 1]]


__all__ = [
    "AdaptiveClip",
    "EmaRewardNorm",
    "GroupSizePolicy",
    "best_of_group",
    "bog_coef",
    "bog_nll",
    "bog_token_count",
    "dpo_loss",
    "dpo_pair_logps",
    "dpo_pairs",
]
