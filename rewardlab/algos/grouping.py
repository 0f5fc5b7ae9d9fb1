"""Group statistics of a batch of responses: GRPO's group advantages and DAPO's dynamic-sampling filter.

``(B,)`` tensors, one value per response; groups are the responses of one prompt (equal ``group_ids``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch

from rewardlab.algos.checks import AlgoError, check_choice
from rewardlab.algos.tensors import as_float_vector, group_index

Tensor = torch.Tensor
ADVANTAGE_SCALES: tuple[str, ...] = ("std", "none")
""":func:`group_advantages`' scales: the group z-score (GRPO, DAPO, GSPO) and r - group mean (Dr. GRPO)."""


def group_advantages(
    rewards: Tensor | Sequence[float],
    group_ids: Tensor | Sequence[Hashable],
    *,
    scale: str = "std",
    eps: float = 1e-6,
) -> Tensor:
    """Per-response advantages from per-response rewards, with statistics per prompt id.

    ``scale="std"`` (GRPO, DAPO, GSPO): ``A_i = (r_i - mean_g) / (std_g + eps)`` with the unbiased
    (n-1) std; ``scale="none"`` (Dr. GRPO): ``A_i = r_i - mean_g``. Groups are formed by equal
    ``group_ids`` (any hashables, or an integer tensor) in any order. As in verl, a group with one
    member has mean 0 and std 1 (its advantage is ``r / (1 + eps)``, or ``r`` unscaled), and a group
    of two or more equal rewards gets advantage exactly 0.

    Returns a ``(B,)`` tensor: ``rewards``' dtype when it is a floating tensor, else float32.
    Statistics are computed in float64. Broadcast over tokens as ``adv[:, None]``, or pass it to
    :func:`policy_loss` as is.
    """
    check_choice("scale", scale, ADVANTAGE_SCALES)
    r, out_dtype = as_float_vector(rewards, "rewards")
    inv, n_groups = group_index(group_ids, len(r), r.device)
    r64 = r.to(torch.float64)  # (B,)
    if not bool(torch.isfinite(r64).all()):
        raise AlgoError("rewards must be finite numbers (map ungradable None scores to a value first)")
    count = torch.bincount(inv, minlength=n_groups).to(torch.float64)  # (G,)
    mean = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inv, r64) / count  # (G,)
    dev = r64 - mean[inv]  # (B,)
    ss = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inv, dev * dev)  # (G,)
    std = torch.sqrt(ss / (count - 1).clamp(min=1))  # (G,) unbiased
    single = count == 1  # (G,)
    mean = torch.where(single, torch.zeros_like(mean), mean)  # verl: singleton mean 0
    std = torch.where(single, torch.ones_like(std), std)  # verl: singleton std 1
    gmax = torch.full((n_groups,), -math.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r64, "amax")
    gmin = torch.full((n_groups,), math.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r64, "amin")
    all_equal = (gmax == gmin) & ~single  # (G,)
    adv = r64 - mean[inv]  # (B,)
    if scale == "std":
        adv = adv / (std[inv] + eps)
    adv = torch.where(all_equal[inv], torch.zeros_like(adv), adv)  # exact 0, not float noise
    return adv.to(out_dtype)


def dynamic_sampling_keep(scores: Tensor | Sequence[float], group_ids: Tensor | Sequence[Hashable]) -> Tensor:
    """DAPO's dynamic-sampling filter: a ``(B,)`` bool mask, True for rows whose group survives.

    A group with two or more members is dropped when its scores (accuracy or the chosen metric)
    have zero spread (all equal); a single-member group is kept, as in verl. The caller keeps
    generating until enough groups survive, then truncates (``docs/algorithms.md``). The fraction
    of dropped groups is the ``frac_zero_std_groups`` metric.
    """
    s, _ = as_float_vector(scores, "scores")
    inv, n_groups = group_index(group_ids, len(s), s.device)
    s64 = s.to(torch.float64)  # (B,)
    count = torch.bincount(inv, minlength=n_groups)  # (G,)
    gmax = torch.full((n_groups,), -math.inf, dtype=torch.float64, device=s.device).scatter_reduce(0, inv, s64, "amax")
    gmin = torch.full((n_groups,), math.inf, dtype=torch.float64, device=s.device).scatter_reduce(0, inv, s64, "amin")
    keep_group = (gmax != gmin) | (count == 1)  # (G,)
    return keep_group[inv]  # (B,)

