"""Verifiable rewards: pure functions ``reward(completion, reference, **meta) -> RewardResult``.

    from rewardlab.rewards import math_reward, code_reward, Combined, ThinkAnswerFormat, score_batch
    math_reward("so $\\boxed{3/4}$", "0.75").score                     # 1.0
    total = Combined({"math": (math_reward, 1.0), "format": (ThinkAnswerFormat(), 0.1)})
    score_batch(total, completions, references, deadline=1.0)         # parallel, input order

Everything public is here: the contract (``RewardResult``, ``as_result``, ``register``,
``get_reward``, ``registered_rewards``, ``reward_name``), the graders (``math_reward`` /
``MathReward`` / ``ExtractionPolicy``, ``code_reward`` / ``extract_code``), shaping rewards
(``ThinkAnswerFormat``, ``OneAnswer``, ``RegexReward``, ``Overlong``, ``CosineLength``,
``RepetitionPenalty``), composition (``Combined``, ``reward_metrics``) and batch scoring
(``score_batch``, ``ascore_batch``, ``score_one``), LLM-as-judge grading (``JudgeReward``,
``HybridReward``, ``judge_metrics``; :mod:`rewardlab.rewards.judge`) and reward models
(``RewardModelReward``; :mod:`rewardlab.rewards.reward_model`). See :mod:`rewardlab.rewards.base` for the contract
and the execution protocol (``Reward``: ``fast`` on the caller's thread, ``slow`` in a pool worker,
``isolated``, ``timeout_score``, ``on_failure``), :mod:`rewardlab.rewards.pool` for where each part
runs and under which deadline.

Modules: ``base`` (contract, registry), ``pool`` (workers, deadlines), ``combine``, ``format``,
``length``, ``code`` (uses :mod:`rewardlab.sandbox`), ``math/`` (``extract``, ``equiv``, ``values``:
the fast path; ``slow``: sympy + math-verify, imported by workers only).
"""

from rewardlab.rewards.base import (
    Reward,
    RewardResult,
    StagedReward,
    as_result,
    get_reward,
    register,
    registered_rewards,
    reward_name,
)
from rewardlab.rewards.code import code_reward, extract_code
from rewardlab.rewards.combine import Combined, reward_metrics
from rewardlab.rewards.format import OneAnswer, RegexReward, ThinkAnswerFormat
from rewardlab.rewards.judge import HybridReward, JudgeReward, judge_metrics
from rewardlab.rewards.length import CosineLength, Overlong, RepetitionPenalty
from rewardlab.rewards.math import ExtractionPolicy, MathReward, math_reward
from rewardlab.rewards.pool import ascore_batch, score_batch, score_one
from rewardlab.rewards.reward_model import RewardModelReward

__all__ = ["Reward", "StagedReward", "RewardResult", "as_result", "get_reward", "register", "registered_rewards",
           "reward_name",
           "code_reward", "extract_code",
           "Combined", "reward_metrics", "OneAnswer", "RegexReward", "ThinkAnswerFormat",
           "CosineLength", "Overlong", "RepetitionPenalty",
           "ExtractionPolicy", "MathReward", "math_reward", "score_batch", "ascore_batch", "score_one",
           "JudgeReward", "HybridReward", "judge_metrics", "RewardModelReward"]
