"""Verifiable rewards: pure functions ``reward(completion, reference, **meta) -> RewardResult``.

See :mod:`rewardlab.rewards.base` for the contract.
"""

from rewardlab.rewards.base import RewardResult, get_reward, register, registered_rewards, reward_name

__all__ = ["RewardResult", "get_reward", "register", "registered_rewards", "reward_name"]
