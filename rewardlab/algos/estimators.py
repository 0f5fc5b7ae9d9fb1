"""Every advantage an :class:`~rewardlab.algos.Algo` may name, declared once, with one call shape.

:data:`ESTIMATORS` maps each ``--advantage`` name to an :class:`Estimator`: how to compute it from one
:class:`AdvantageInputs`, and what it needs beyond the rewards (the critic's values, a greedy rollout's
baseline). The trainer asks the row, never the name::

    est = ESTIMATORS[algo.advantage]
    values = critic_values() if est.needs_values else None
    adv, returns = est.compute(AdvantageInputs(scores, groups, mask, gamma=algo.gamma, values=values))

``per_token`` estimators return ``(N, R)`` advantages (verl's estimators, :mod:`rewardlab.algos.advantages`,
on the outcome reward placed on the last response token); the group scales (``std``, ``none``) return one
advantage per response, ``(N,)``. Adding an estimator is its function in ``advantages.py`` and one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rewardlab.algos import advantages as A
from rewardlab.algos.grouping import ADVANTAGE_SCALES, group_advantages

Tensor = torch.Tensor


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator may read (one shape for all of them)."""

    scores: Tensor
    """``(N,)`` the responses' rewards (float64)."""
    groups: Tensor
    """``(N,)`` each response's prompt (group) id."""
    mask: Tensor | None = None
    """``(N, R)`` 1 on the model's own response tokens (per-token estimators)."""
    gamma: float = 1.0
    """Discount of the per-token return."""
    lam: float = 0.95
    """GAE lambda."""
    values: Tensor | None = None
    """``(N, R)`` the critic's values before the update (estimators that need them)."""
    baselines: Tensor | None = None
    """``(N,)`` each response's baseline reward (ReMax: its prompt's greedy completion's)."""

    def token_rewards(self) -> Tensor:
        """``(N, R)`` the outcome score on each response's last valid token."""
        return A.outcome_token_rewards(self.scores, self.mask)


@dataclass(frozen=True)
class Estimator:
    """One advantage: its computation and what it needs."""

    compute: Callable[[AdvantageInputs], tuple[Tensor, Tensor | None]]
    """``inputs -> (advantages, returns)``: ``(N,)`` and None for a group scale, ``(N, R)`` each per token."""
    per_token: bool = True
    """Advantages per token (``(N, R)``, needs ``mask``); False: one per response."""
    needs_values: bool = False
    """It reads the critic's values (PPO's GAE): the algorithm needs a critic."""
    needs_greedy_baseline: bool = False
    """It reads ``baselines``: each prompt's greedy completion is generated and graded in the rollout stage."""


def _scale(name: str) -> Estimator:
    return Estimator(lambda x: (group_advantages(x.scores.to(torch.float32), x.groups, scale=name), None),
                     per_token=False)


def _grouped(fn: Callable[..., tuple[Tensor, Tensor]]) -> Estimator:
    return Estimator(lambda x: fn(x.token_rewards(), x.mask, x.groups))


ESTIMATORS: dict[str, Estimator] = {
    **{name: _scale(name) for name in ADVANTAGE_SCALES},  # group z-score (GRPO, DAPO, GSPO), r - mean (Dr. GRPO)
    "rloo": _grouped(A.rloo),
    "reinforce_pp": Estimator(lambda x: A.reinforce_pp(x.token_rewards(), x.mask, gamma=x.gamma)),
    "reinforce_pp_baseline": _grouped(A.reinforce_pp_baseline),
    "opo": _grouped(A.opo),
    "grpo_passk": _grouped(A.grpo_passk),
    "remax": Estimator(lambda x: A.remax(x.token_rewards(), x.mask, x.baselines), needs_greedy_baseline=True),
    "gpg": _grouped(A.gpg_advantage),
    "gae": Estimator(lambda x: A.gae(x.token_rewards(), x.values, x.mask, gamma=x.gamma, lam=x.lam),
                     needs_values=True),
}
"""``--advantage`` -> :class:`Estimator`; its keys are the one list of advantage names (``algos.ADVANTAGES``)."""


__all__ = [ "ESTIMATORS", "AdvantageInputs", "Estimator"]
