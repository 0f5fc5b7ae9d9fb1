"""An episode's verdict as a reward: the one rule every multi-turn environment's reward follows.

The episode engine (:mod:`rewardlab.rollout.episodes`) keeps what the environment said when the episode ended on
the completion (``Completion.episode``: ``{"reward": float or None, "status": str, ...}``); the trainer and the
eval hand it to the environment's reward as ``episode=``.
"""

from __future__ import annotations

from rewardlab.rewards.base import RewardResult


def graded(episode: dict | None) -> RewardResult:
    """An environment's reward function body: :func:`as_reward` of the episode's verdict; graded outside an
    episode (no verdict), a ``None`` score with status ``no_episode``."""
    if episode is None:
        return RewardResult(None, {"status": "no_episode",
                                   "reason": "graded outside an environment episode: the reward is the episode's"})
    return as_reward(episode)


def as_reward(episode: dict) -> RewardResult:
    """The environment's reward, status ``ok``; or 0 with the status that says why there is none (the verdict's
    other fields, the error and the tool seconds, kept in ``info``)."""
    info = {k: v for k, v in episode.items() if k != "reward"}
    if episode.get("reward") is None:
        return RewardResult(0.0, {**info, "status": str(episode.get("status") or "env_error")})
    return RewardResult(float(episode["reward"]), {**info, "status": "ok"})
