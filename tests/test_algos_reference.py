"""rewardlab.algos against verl 0.9.1's own functions, run in float64 (../shared/fixtures/verl_reference.json).

Every quantity in the fixture is compared at rtol 1e-6: GRPO / Dr. GRPO advantages, the clipped
loss under every aggregation with dual clip 3 and 10 (plus the symmetric 0.2 variant), GSPO on both
input sets, the KL estimators, DAPO's overlong shaping, and d loss / d log_prob for each.
verl's masked means add 1e-8 to their denominators, far below the tolerance.
"""

from __future__ import annotations


import pytest
import torch

import verl_fixtures

from rewardlab import algos
from rewardlab.rewards.length import overlong_penalty
from algo_cases import loss_algo

RTOL = 1e-6
ATOL = 1e-12
F64 = torch.float64




REF = verl_fixtures.load("verl_reference.json")
INP = REF["inputs"]


t = verl_fixtures.t


def close(actual, expected, atol: float = ATOL) -> None:
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), t(expected), rtol=RTOL, atol=atol)


# verl's seq-mean-token-mean divides by n_i + 1e-8 (we divide by n_i, as algorithms.md says). On
# the GSPO input near on-policy the loss is -1e-4 left from cancelling per-sequence terms of ~0.5,
# so that epsilon moves it by 8e-10 (8e-6 relative). Losses therefore also get atol 1e-8, which is
# still below rtol 1e-6 for every other loss in the fixture (|loss| >= 0.04).
LOSS_ATOL = 1e-8


MASK = t(INP["response_mask"])


def test_fixture_is_float64_verl():
    assert REF["meta"]["dtype"] == "torch.float64"
    assert REF["meta"]["verl_version"] == "0.9.1"
    # the mask is the prefix given by the lengths, so the loss tests exercise unequal lengths
    assert MASK.sum(-1).tolist() == INP["lengths"]


def test_inputs_rewards_are_token_sums():
    close(t(INP["token_level_rewards"]).sum(-1), INP["seq_rewards"])


@pytest.mark.parametrize("key,scale", [("norm_adv_by_std", "std"), ("no_std_DrGRPO", "none")])
def test_group_advantages(key, scale):
    adv = algos.group_advantages(t(INP["seq_rewards"]), INP["uids"], scale=scale, eps=REF["grpo"]["epsilon"])
    assert adv.dtype == F64
    close(adv, REF["grpo"][key]["per_seq"])
    close(adv[:, None] * MASK, REF["grpo"][key]["advantages"])  # (B, T) broadcast form


@pytest.mark.parametrize("key,scale", [("norm_adv_by_std", "std"), ("no_std_DrGRPO", "none")])
def test_group_advantages_shuffled_ids(key, scale):
    perm = torch.randperm(INP["B"], generator=torch.Generator().manual_seed(0))
    uids = [INP["uids"][i] for i in perm]
    adv = algos.group_advantages(t(INP["seq_rewards"])[perm], uids, scale=scale)
    close(adv, t(REF["grpo"][key]["per_seq"])[perm])


def _advantages() -> torch.Tensor:
    return algos.group_advantages(t(INP["seq_rewards"]), INP["uids"], scale="std")  # (B,)


def _check(case: dict, loss, metrics, grad) -> None:
    close(loss, case["loss"], atol=LOSS_ATOL)
    close(metrics["clip_frac"], case["pg_clipfrac"])
    close(metrics["approx_kl_old"], case["ppo_kl"])
    close(metrics["dual_clip_frac"], case["pg_clipfrac_lower"])
    close(grad, case["grad_log_prob"])


AGG_CASES = [
    ("token-mean", "token-mean", None),
    ("seq-mean-token-sum", "seq-mean-token-sum", None),
    ("seq-mean-token-mean", "seq-mean-token-mean", None),
    ("seq-mean-token-sum-norm", "seq-mean-token-sum-norm", INP["T"]),  # verl's default L = T
    ("seq-mean-token-sum-norm@loss_scale_factor=16", "seq-mean-token-sum-norm", 16),
    ("token-sum", "token-sum", None),
]


@pytest.mark.parametrize("c", [3.0, 10.0])
@pytest.mark.parametrize("key,agg,max_len", AGG_CASES, ids=[c[0] for c in AGG_CASES])
def test_clipped_loss_dual_clip(c, key, agg, max_len):
    case = REF["ppo_vanilla"][f"clip_ratio_c={c}"][key]
    lp = t(INP["log_prob"]).requires_grad_()
    loss, metrics = algos.policy_loss(lp, t(INP["old_log_prob"]), _advantages(), MASK,
                                      loss_algo(eps_low=REF["ppo_vanilla"]["clip_ratio_low"],
                                                eps_high=REF["ppo_vanilla"]["clip_ratio_high"], clip_ratio_c=c,
                                                agg=agg), max_len=max_len)
    assert loss.dtype == F64
    (grad,) = torch.autograd.grad(loss, lp)
    _check(case, loss, metrics, grad)
    # clip_frac is "either side": the two sides partition it
    close(metrics["clip_frac_low"] + metrics["clip_frac_high"], case["pg_clipfrac"])


def test_clipped_loss_advantages_per_token_form():
    """The (B, T) advantages of the fixture give the same result as our (B,) ones."""
    case = REF["ppo_vanilla"]["clip_ratio_c=3.0"]["token-mean"]
    lp = t(INP["log_prob"]).requires_grad_()
    loss, metrics = algos.policy_loss(lp, t(INP["old_log_prob"]), t(REF["grpo"]["norm_adv_by_std"]["advantages"]), MASK,
                                      loss_algo(eps_low=0.2, eps_high=0.28, clip_ratio_c=3.0, agg="token-mean"))
    (grad,) = torch.autograd.grad(loss, lp)
    _check(case, loss, metrics, grad)


def test_clipped_loss_symmetric():
    case = REF["ppo_vanilla"]["symmetric_0.2_token-mean"]
    lp = t(INP["log_prob"]).requires_grad_()
    loss, metrics = algos.policy_loss(lp, t(INP["old_log_prob"]), _advantages(), MASK,
                                      loss_algo(eps_low=0.2, eps_high=0.2, clip_ratio_c=3.0, agg="token-mean"))
    (grad,) = torch.autograd.grad(loss, lp)
    _check(case, loss, metrics, grad)


@pytest.mark.parametrize("inputs", ["log_prob_gspo", "log_prob"])
@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
def test_gspo(inputs, agg):
    block = REF["gspo"][f"inputs={inputs}"]
    case = block[agg]
    lp = t(INP[inputs]).requires_grad_()
    old = t(INP["old_log_prob"])
    close(torch.exp(algos.sequence_log_ratio(lp, old, MASK)), block["seq_ratio_s_i"])
    loss, metrics = algos.policy_loss(lp, old, _advantages(), MASK,
                                      loss_algo(ratio="sequence", eps_low=REF["gspo"]["clip_ratio_low"],
                                                eps_high=REF["gspo"]["clip_ratio_high"], agg=agg))
    (grad,) = torch.autograd.grad(loss, lp)
    _check(case, loss, metrics, grad)
    # the per-token ratio of the GSPO-token form carries s_i on every response token
    s = t(block["seq_ratio_s_i"])
    close(metrics["ratio/max"], s.max())
    close(metrics["ratio/min"], s.min())


@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "k3+", "low_var_kl"])
def test_kl_estimators(kind):
    case = REF["kl"][kind]
    lp = t(INP["log_prob"]).requires_grad_()
    ref = t(INP["ref_log_prob"])
    k = algos.kl_penalty(lp, ref, kind)  # (B, T)
    close(k.detach() * MASK, case["per_token_masked"])
    mean = algos.aggregate(k, MASK, "token-mean")
    close(mean, case["token_mean"])
    (grad,) = torch.autograd.grad(mean, lp)
    close(grad, case["grad_token_mean_wrt_log_prob"])


@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "k3+"])
def test_kl_inside_policy_loss(kind):
    """beta * k is added per token: with zero advantages the loss is the KL token mean."""
    case = REF["kl"][kind]
    lp = t(INP["log_prob"]).requires_grad_()
    zeros = torch.zeros(INP["B"], dtype=F64)
    loss, metrics = algos.policy_loss(lp, t(INP["old_log_prob"]), zeros, MASK,
                                      loss_algo(agg="token-mean", beta=1.0, kl=kind), ref_logp=t(INP["ref_log_prob"]))
    close(loss, case["token_mean"])
    close(metrics["kl_ref"], case["token_mean"])
    (grad,) = torch.autograd.grad(loss, lp)
    close(grad, case["grad_token_mean_wrt_log_prob"])


def test_dapo_overlong_shaping():
    block = REF["dapo_overlong"]
    # the one implementation (rewardlab train's DAPO shaping and the Overlong reward), per completion
    one = [overlong_penalty(n, block["max_resp_len(L_max)"], block["overlong_buffer_len(L_cache)"],
                            block["penalty_factor"]) for n in block["response_lengths"]]
    pen = torch.tensor(one, dtype=F64)
    close(pen, block["overlong_reward"])
    close(block["task_score"] + pen, block["total_reward_per_seq"])
    close(block["task_score"] + pen, block["reward_at_last_valid_token"])
