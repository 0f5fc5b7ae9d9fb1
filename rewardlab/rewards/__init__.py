"""Verifiable rewards: pure functions ``reward(completion, reference, **meta) -> RewardResult``.

See :mod:`rewardlab.rewards.base` for the contract.
"""

from rewardlab.rewards.base import RewardResult, get_reward, register, registered_rewards, reward_name
from rewardlab.rewards.code import code_reward, extract_code
from rewardlab.rewards.combine import Combined, reward_metrics
from rewardlab.rewards.format import OneAnswer, RegexReward, ThinkAnswerFormat
from rewardlab.rewards.length import CosineLength, Overlong, RepetitionPenalty
from rewardlab.rewards.math import ExtractionPolicy, MathReward, math_reward
from rewardlab.rewards.pool import score_batch

__all__ = ["RewardResult", "get_reward", "register", "registered_rewards", "reward_name",
           "code_reward", "extract_code",
           "Combined", "reward_metrics", "OneAnswer", "RegexReward", "ThinkAnswerFormat",
           "CosineLength", "Overlong", "RepetitionPenalty",
           "ExtractionPolicy", "MathReward", "math_reward", "score_batch"]
