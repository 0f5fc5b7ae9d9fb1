"""An episode's verdict as a reward: the one rule every multi-turn environment's reward follows.

The episode engine (:mod:`rewardlab.rollout.episodes`) keeps what the environment said when the episode ended on
the completion (``Completion.episode``: ``{"reward": float or None, "status": str, ...}``); the trainer and the
eval hand it to the environment's reward as ``episode=``.
"""

from __future__ import annotations

import math
from typing import Any

from rewardlab.rewards.base import RewardResult


def graded(episode: dict | None) -> RewardResult:
    """An environment's reward function body: :func:`as_reward` of the episode's verdict; graded outside an
    episode (no verdict), a ``None`` score with status ``no_episode``."""
    if episode is None:
        return RewardResult(None, {"status": "no_episode",
                                   "reason": "graded outside an environment episode: the reward is the episode's"})
    return as_reward(episode)


def reward_value(value: Any) -> float | None:
    """``value`` as a reward: any finite real number (numpy and torch scalars too); None for anything else (text, a
    bool, NaN, an infinity, an object)."""
    try:
        out = None if isinstance(value, (str, bytes, bool)) else float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if out is not None and math.isfinite(out) else None


def as_reward(episode: dict) -> RewardResult:
    """The environment's reward, status ``ok``; or 0 with the status that says why there is none (the verdict's
    other fields, the error and the tool seconds, kept in ``info``): the verdict's own, or ``bad_reward`` for a
    reward that is no finite number (a NaN would reach every advantage of its group)."""
    info = {k: v for k, v in episode.items() if k != "reward"}
    if episode.get("reward") is None:
        return RewardResult(0.0, {**info, "status": str(episode.get("status") or "env_error")})
    value = reward_value(episode["reward"])
    if value is None:
        return RewardResult(0.0, {**info, "status": "bad_reward",
                                  "error": f"the environment's reward is no finite number: {episode['reward']!r:.80}"})
    return RewardResult(value, {**info, "status": "ok"})
