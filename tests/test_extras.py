"""rewardlab.algos.extras: hand-computed values for every formula, state round-trips, and DPO against TRL.

The TRL check runs TRL's own ``DPOTrainer._compute_loss`` (the installed trl, 1.16 when written)
on a stub trainer and a stub model whose per-token log-probs sum to the given sequence log-probs,
with precomputed reference log-probs; see :func:`trl_dpo`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from rewardlab.algos import AlgoError
from rewardlab.algos.extras import (
    AdaptiveClip,
    EmaRewardNorm,
    GroupSizePolicy,
    best_of_group,
    bog_coef,
    bog_nll,
    bog_token_count,
    dpo_loss,
    dpo_pair_logps,
    dpo_pairs,
)

D = torch.float64


def approx(x, rel=1e-12, abs=1e-15):
    return pytest.approx(x, rel=rel, abs=abs)


# ----------------------------------------------------------------------------------------------
# AdaptiveClip
# ----------------------------------------------------------------------------------------------


def test_adaptive_clip_before_any_update_is_the_base():
    c = AdaptiveClip(0.2, 0.28)
    assert c.current() == (0.2, 0.28)
    assert c.kl_hat() is None
    # the base is returned as given, even outside [eps_min, eps_max]
    assert AdaptiveClip(0.01, 0.9).current() == (0.01, 0.9)


def test_adaptive_clip_bias_correction_after_one_update_is_the_raw_kl():
    c = AdaptiveClip(0.2, 0.28, decay=0.9)
    c.update(0.0123)
    # ema = 0.9 * 0 + 0.1 * 0.0123 = 0.00123; kl_hat = 0.00123 / (1 - 0.9**1) = 0.0123
    assert c.ema == approx(0.00123)
    assert c.kl_hat() == approx(0.0123)


def test_adaptive_clip_kl_above_target_shrinks():
    c = AdaptiveClip(0.2, 0.28, alpha=1.0, kl_target=0.01, eps_min=0.05, eps_max=0.4, decay=0.9)
    lo, hi = c.update(0.015)
    # kl_hat = 0.015 (one update); factor = 1 + 1.0 * (0.01 - 0.015) / 0.01 = 0.5
    # eps_low = 0.2 * 0.5 = 0.1; eps_high = 0.28 * 0.5 = 0.14
    assert (lo, hi) == (approx(0.1), approx(0.14))
    assert c.current() == (lo, hi)


def test_adaptive_clip_kl_below_target_grows_and_clamps_at_eps_max():
    c = AdaptiveClip(0.2, 0.28, alpha=1.0, kl_target=0.01, eps_min=0.05, eps_max=0.4)
    lo, hi = c.update(0.005)
    # factor = 1 + (0.01 - 0.005) / 0.01 = 1.5; eps_low = 0.3; eps_high = 0.42 -> clamped to 0.4
    assert lo == approx(0.3)
    assert hi == 0.4
    # kl 0 is the largest growth, 1 + alpha: 0.2 * 2 = 0.4 (= eps_max), 0.28 * 2 = 0.56 -> 0.4
    assert AdaptiveClip(0.2, 0.28).update(0.0) == (approx(0.4), 0.4)
    # both sides over: 0.3 * 2 = 0.6 and 0.35 * 2 = 0.7 -> (0.4, 0.4)
    assert AdaptiveClip(0.3, 0.35).update(0.0) == (0.4, 0.4)


def test_adaptive_clip_clamps_at_eps_min():
    c = AdaptiveClip(0.2, 0.28, alpha=1.0, kl_target=0.01, eps_min=0.05, eps_max=0.4)
    # factor = 1 + (0.01 - 0.05) / 0.01 = -3 (negative): both sides clamp to eps_min
    assert c.update(0.05) == (0.05, 0.05)
    # alpha 0.5: factor = 1 + 0.5 * (0.01 - 0.02) / 0.01 = 0.5 -> 0.1 and 0.14
    assert AdaptiveClip(0.2, 0.28, alpha=0.5).update(0.02) == (approx(0.1), approx(0.14))


def test_adaptive_clip_two_updates_by_hand():
    c = AdaptiveClip(0.2, 0.28, alpha=1.0, kl_target=0.01, decay=0.9)
    c.update(0.015)
    lo, hi = c.update(0.005)
    # ema_1 = 0.1 * 0.015 = 0.0015
    # ema_2 = 0.9 * 0.0015 + 0.1 * 0.005 = 0.00135 + 0.0005 = 0.00185
    # kl_hat = 0.00185 / (1 - 0.81) = 0.00185 / 0.19 = 37 / 3800
    # factor = 1 + (38/3800 - 37/3800) / (38/3800) = 1 + 1/38 = 39/38
    # eps_low = 0.2 * 39 / 38 = 0.2052631578947...; eps_high = 0.28 * 39 / 38 = 0.2873684210526...
    assert c.kl_hat() == approx(37 / 3800)
    assert (lo, hi) == (approx(0.2 * 39 / 38), approx(0.28 * 39 / 38))
    # without bias correction kl_hat would be 0.00185 (factor 1.815): far from this
    assert lo < 0.21


def test_adaptive_clip_state_round_trip_continues_exactly():
    kls = [0.013, 0.002, 0.031, 0.0099, 0.0, 0.0175, 0.004]
    a = AdaptiveClip(0.2, 0.28, alpha=0.7, kl_target=0.01, decay=0.95)
    for kl in kls[:3]:
        a.update(kl)
    state = json.loads(json.dumps(a.state_dict()))
    b = AdaptiveClip(0.2, 0.28, alpha=0.7, kl_target=0.01, decay=0.95)
    b.load_state_dict(state)
    assert b.current() == a.current()
    for kl in kls[3:]:
        assert b.update(kl) == a.update(kl)  # bit for bit
    assert b.state_dict() == a.state_dict()
    assert set(a.metrics()) == {"adaptive_clip/eps_low", "adaptive_clip/eps_high", "adaptive_clip/kl_hat"}


def test_adaptive_clip_rejects_bad_input():
    c = AdaptiveClip(0.2, 0.28)
    with pytest.raises(AlgoError):
        c.update(float("nan"))
    assert c.n == 0  # a rejected kl does not count
    assert c.update(torch.tensor(0.01, dtype=D)) == (approx(0.2), approx(0.28))  # a 1-element tensor is fine
    for kwargs in ({"kl_target": 0}, {"decay": 1.0}, {"eps_min": 0.5, "eps_max": 0.4}, {"alpha": -1}):
        with pytest.raises(AlgoError):
            AdaptiveClip(0.2, 0.28, **kwargs)
    with pytest.raises(AlgoError):
        AdaptiveClip(0.0, 0.28)


# ----------------------------------------------------------------------------------------------
# EmaRewardNorm
# ----------------------------------------------------------------------------------------------


def test_ema_reward_norm_first_batch_is_plain_standardisation():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=D)
    out = EmaRewardNorm(decay=0.99, eps=1e-6)(r)
    # mean = 2.5; mean of squares = (1 + 4 + 9 + 16) / 4 = 7.5; var = 7.5 - 6.25 = 1.25 (population)
    # (bias correction: m = 0.01 * 2.5, m / (1 - 0.99) = 2.5; without it the mean would be 0.025)
    want = (r - 2.5) / (math.sqrt(1.25) + 1e-6)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=0)
    torch.testing.assert_close(out, (r - r.mean()) / (r.std(unbiased=False) + 1e-6), rtol=1e-12, atol=0)
    assert out.dtype == D


def test_ema_reward_norm_second_batch_by_hand():
    n = EmaRewardNorm(decay=0.5, eps=0.0)
    n(torch.tensor([0.0, 2.0], dtype=D))
    out = n(torch.tensor([2.0, 4.0], dtype=D))
    # batch 1: mean 1, mean sq 2 -> m1 = 0.5 * 1 = 0.5, s1 = 0.5 * 2 = 1
    # batch 2: mean 3, mean sq (4 + 16) / 2 = 10 -> m2 = 0.25 + 1.5 = 1.75, s2 = 0.5 + 5 = 5.5
    # corr = 1 - 0.5**2 = 0.75: mean_hat = 7/3, sq_hat = 22/3, var_hat = 22/3 - 49/9 = 17/9
    # (= the mixture of {0, 2} with weight 1/3 and {2, 4} with weight 2/3)
    # r' = (2 - 7/3) / (sqrt(17)/3) = -1/sqrt(17); (4 - 7/3) / (sqrt(17)/3) = 5/sqrt(17)
    assert n.stats() == (approx(7 / 3), approx(17 / 9))
    torch.testing.assert_close(out, torch.tensor([-1, 5], dtype=D) / math.sqrt(17), rtol=1e-12, atol=0)


def test_ema_reward_norm_dtypes_constant_batch_and_errors():
    n = EmaRewardNorm()
    out = n(torch.tensor([0.5, 0.5, 0.5], dtype=torch.float32))
    assert out.dtype == torch.float32 and out.tolist() == [0.0, 0.0, 0.0]  # var 0: (r - mean) / eps = 0
    assert EmaRewardNorm()([1, 0]).dtype == torch.float32  # a list gives float32
    with pytest.raises(AlgoError):
        n(torch.tensor([1.0, float("nan")]))
    with pytest.raises(AlgoError):
        n(torch.tensor([]))
    assert n.n == 1  # rejected batches are not folded in


def test_ema_reward_norm_state_round_trip():
    g = torch.Generator().manual_seed(0)
    batches = [torch.rand(6, generator=g, dtype=D) * 3 for _ in range(6)]
    a = EmaRewardNorm(decay=0.9)
    for b in batches[:3]:
        a(b)
    b_norm = EmaRewardNorm(decay=0.9)
    b_norm.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for b in batches[3:]:
        assert torch.equal(b_norm(b), a(b))
    assert b_norm.state_dict() == a.state_dict()


# ----------------------------------------------------------------------------------------------
# GroupSizePolicy
# ----------------------------------------------------------------------------------------------


def _policy(**kw) -> GroupSizePolicy:
    args = {"g_fixed": 8, "g_min": 2, "g_max": 16, "threshold": 0.05, "warmup_steps": 3, "decay": 0.5}
    args.update(kw)
    return GroupSizePolicy(**args)


def test_group_size_warmup_ceil_clamp_unseen():
    p = _policy()
    # a: [0, 1, 0, 1] -> mean 0.5, unbiased var = 4 * 0.25 / 3 = 1/3
    # b: [1, 1, 1, 1] -> var 0; c: one row -> no variance, not updated
    p.update(torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5]), ["a"] * 4 + ["b"] * 4 + ["c"])
    assert p.variance("a") == approx(1 / 3)
    assert p.variance("b") == 0.0
    assert p.variance("c") is None
    for step in (1, 2, 3):  # warm-up: g_fixed for every prompt
        assert p.sizes(["a", "b", "c"], step) == [8, 8, 8]
    # step 4: a -> ceil((1/3) / 0.05) = ceil(6.67) = 7; b -> ceil(0) = 0 -> g_min 2; c, d unseen -> g_fixed
    assert p.sizes(["a", "b", "c", "d"], 4) == [7, 2, 8, 8]
    # a again with [0, 0, 0, 1]: mean 0.25, var = (3 * 0.0625 + 0.5625) / 3 = 0.25
    # ema: 0.5 * (1/3) = 1/6, then 0.5 * 1/6 + 0.5 * 0.25 = 5/24; / (1 - 0.25) = 5/18
    # size = ceil((5/18) / 0.05) = ceil(5.56) = 6
    p.update([0.0, 0.0, 0.0, 1.0], ["a"] * 4)
    assert p.variance("a") == approx(5 / 18)
    assert p.size("a", 10) == 6
    # clamp at g_max: threshold 0.01 -> ceil(33.3) = 34 -> 16
    q = _policy(threshold=0.01, warmup_steps=0)
    q.update([0.0, 1.0, 0.0, 1.0], ["a"] * 4)
    assert q.size("a", 1) == 16


def test_group_size_ceil_has_slack_for_float_noise():
    p = _policy(g_min=1, threshold=0.01, warmup_steps=0)
    p.update([0.0, 0.1, 0.2], ["x"] * 3)
    # var of [0, 0.1, 0.2] = 0.01 in exact arithmetic, 0.010000000000000002 in floats:
    # var / 0.01 = 1.0000000000000002, which a bare ceil would round up to 2
    assert p.variance("x") / 0.01 > 1.0
    assert p.size("x", 1) == 1


def test_group_size_tensor_keys_and_state_json_round_trip():
    p = _policy(warmup_steps=1)
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.2, 0.4, 0.9])
    keys = torch.tensor([7, 7, 7, 3, 3, 3])  # integer prompt ids
    p.update(rewards, keys)
    q = _policy(warmup_steps=1)
    q.load_state_dict(json.loads(json.dumps(p.state_dict())))  # int keys become "7", "3"
    assert q.state_dict() == p.state_dict()
    assert q.sizes([7, 3, "7", 99], 2) == p.sizes([7, 3, "7", 99], 2)
    assert q.size(7, 2) == p.size(7, 2) == math.ceil((1 / 3) / 0.05)  # var [0, 1, 1] = 1/3 -> 7
    more = torch.tensor([0.0, 0.0, 1.0, 0.5, 0.5, 0.0])
    p.update(more, keys)
    q.update(more, keys)
    assert q.state_dict() == p.state_dict()


def test_group_size_errors():
    with pytest.raises(AlgoError):
        _policy(g_min=5, g_max=4)
    with pytest.raises(AlgoError):
        _policy(threshold=0)
    p = _policy()
    with pytest.raises(AlgoError):
        p.size("a", 0)  # steps count from 1
    with pytest.raises(AlgoError):
        p.update([0.0, 1.0], ["a"])


# ----------------------------------------------------------------------------------------------
# best of group
# ----------------------------------------------------------------------------------------------


def test_best_of_group_unique_tie_all_equal_single():
    scores = [1.0, 0.0, 0.5, 1.0, 1.0, 0.0, 2.0, 2.0, 3.0, 0.0, 5.0]
    groups = ["a", "a", "a", "b", "b", "b", "c", "c", "d", "e", "e"]
    # a: unique best 1.0 (> mean 0.5) -> row 0; b: tie for best -> none; c: all equal -> none;
    # d: one member, its score is its mean (not above) -> none; e: row 10 (5 > mean 2.5)
    got = best_of_group(scores, groups)
    assert got.dtype == torch.bool
    assert got.tolist() == [True, False, False, False, False, False, False, False, False, False, True]
    # tensor group ids, interleaved order
    got = best_of_group(torch.tensor([0.0, 3.0, 1.0, 3.0]), torch.tensor([5, 6, 5, 6]))
    assert got.tolist() == [False, False, True, False]  # group 5: row 2; group 6 ties


def test_best_of_group_above_mean_cannot_fail_for_a_unique_best():
    # In exact arithmetic a unique maximum of >= 2 scores is above their mean. In floats the mean
    # of [x, x - ulp] rounds to x (round half to even), so a literal "max > mean" test would drop
    # this best; best_of_group does not.
    x = 1.0
    y = math.nextafter(x, -math.inf)
    assert (x + y) / 2 == x  # the mean rounds onto the maximum
    assert best_of_group([x, y], [0, 0]).tolist() == [True, False]
    with pytest.raises(AlgoError):
        best_of_group([1.0, float("nan")], [0, 0])


def test_bog_coef_warmup():
    # W = 0.1 * 100 = 10 steps: lam * step / 10, lam from step 10 on
    assert bog_coef(1, 100, 0.5, 0.1) == approx(0.05)
    assert bog_coef(5, 100, 0.5, 0.1) == approx(0.25)
    assert bog_coef(10, 100, 0.5, 0.1) == 0.5
    assert bog_coef(11, 100, 0.5, 0.1) == 0.5
    assert bog_coef(100, 100, 0.5, 0.1) == 0.5
    # W = 0.25 * 10 = 2.5: step 1 -> 0.4 lam, step 2 -> 0.8 lam, step 3 -> lam
    assert [bog_coef(s, 10, 1.0, 0.25) for s in (1, 2, 3)] == [approx(0.4), approx(0.8), 1.0]
    assert bog_coef(1, 100, 0.3, 0.0) == 0.3  # no warm-up
    assert bog_coef(1, 100, 0.0, 0.5) == 0.0
    for bad in ((0, 100, 0.5, 0.1), (1, 0, 0.5, 0.1), (1, 100, -0.1, 0.1), (1, 100, 0.5, 1.5)):
        with pytest.raises(AlgoError):
            bog_coef(*bad)


def _bog_batch():
    nan = float("nan")
    logp = torch.tensor([[-1.0, -2.0, -3.0, nan], [-0.5, -0.5, 0.0, 0.0], [-4.0, -1.0, nan, nan]], dtype=D)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0]])
    select = torch.tensor([True, False, True])
    return logp.requires_grad_(), mask, select


def test_bog_nll_by_hand():
    logp, mask, select = _bog_batch()
    loss = bog_nll(logp, mask, select)
    # selected tokens: row 0 (-1, -2, -3), row 2 (-4, -1): NLL = (6 + 5) / 5 = 2.2 (NaN padding ignored)
    assert float(loss.detach()) == approx(2.2)
    assert bog_token_count(mask, select) == 5
    loss.backward()
    want = torch.zeros(3, 4, dtype=D)
    want[0, :3] = -1 / 5
    want[2, :2] = -1 / 5
    torch.testing.assert_close(logp.grad, want)


def test_bog_nll_micro_batches_sum_to_the_whole():
    logp, mask, select = _bog_batch()
    whole = bog_nll(logp, mask, select)
    n = bog_token_count(mask[:2], select[:2]) + bog_token_count(mask[2:], select[2:])
    parts = (bog_nll(logp[:2], mask[:2], select[:2], num_tokens=n)
             + bog_nll(logp[2:], mask[2:], select[2:], num_tokens=n))
    # (6 / 5) + (5 / 5) = 2.2
    assert float(parts.detach()) == approx(float(whole.detach()))


def test_bog_nll_none_selected_is_zero_with_graph():
    logp, mask, _ = _bog_batch()
    loss = bog_nll(logp, mask, torch.zeros(3, dtype=torch.bool))
    assert float(loss.detach()) == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.equal(logp.grad, torch.zeros(3, 4, dtype=D))
    assert float(bog_nll(logp, mask, torch.zeros(3, dtype=torch.bool), num_tokens=7).detach()) == 0.0
    with pytest.raises(AlgoError):
        bog_nll(logp, mask, torch.ones(2, dtype=torch.bool))


# ----------------------------------------------------------------------------------------------
# DPO
# ----------------------------------------------------------------------------------------------


def test_dpo_pairs_by_hand():
    scores = [1.0, 3.0, 3.0, 0.0, 0.0, 2.0, 2.0, 5.0, 1.0, 5.0, 1.0, 4.0]
    groups = ["a"] * 5 + ["b"] * 2 + ["c"] * 4 + ["d"]
    # a: best 3.0 at rows 1, 2 -> 1 (lowest); worst 0.0 at rows 3, 4 -> 3
    # b: all equal -> no pair; c: best rows 7, 9 -> 7; worst rows 8, 10 -> 8; d: one member -> none
    assert dpo_pairs(scores, groups) == [(1, 3), (7, 8)]
    # interleaved groups: pairs in order of each group's first row
    assert dpo_pairs(torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.tensor([4, 9, 4, 9])) == [(2, 0), (1, 3)]
    seq = torch.tensor([10.0, 11.0, 12.0, 13.0])
    c, r = dpo_pair_logps(seq, [(2, 0), (1, 3)])
    assert c.tolist() == [12.0, 11.0] and r.tolist() == [10.0, 13.0]
    assert dpo_pairs([1.0, 1.0], [0, 0]) == []


def _dpo_hand():
    pc = torch.tensor([-10.0, -5.0], dtype=D, requires_grad=True)
    pr = torch.tensor([-12.0, -4.0], dtype=D, requires_grad=True)
    rc = torch.tensor([-11.0, -5.0], dtype=D)
    rr = torch.tensor([-11.0, -5.0], dtype=D)
    return pc, pr, rc, rr


def test_dpo_loss_by_hand():
    pc, pr, rc, rr = _dpo_hand()
    loss, m = dpo_loss(pc, pr, rc, rr, beta=0.5)
    # pair 0: h = (-10 + 11) - (-12 + 11) = 1 - (-1) = 2, beta h = 1:   -logsigmoid(1)    = log(1 + e^-1)  = 0.31326...
    # pair 1: h = (-5 + 5) - (-4 + 5)    = 0 - 1    = -1, beta h = -0.5: -logsigmoid(-0.5) = log(1 + e^0.5) = 0.97407...
    l0, l1 = math.log1p(math.exp(-1)), math.log1p(math.exp(0.5))
    assert float(loss.detach()) == approx((l0 + l1) / 2)
    # rewards: chosen 0.5 * [1, 0] -> mean 0.25; rejected 0.5 * [-1, 1] -> mean 0; margin 0.25
    # accuracy: 0.5 > -0.5 yes, 0 > 0.5 no -> 0.5
    assert {k: float(v) for k, v in m.items()} == {
        "dpo/loss": approx((l0 + l1) / 2),
        "dpo/reward_chosen": approx(0.25),
        "dpo/reward_rejected": approx(0.0),
        "dpo/reward_margin": approx(0.25),
        "dpo/accuracy": 0.5,
        "dpo/pairs": 2.0,
    }
    loss.backward()
    # d/d pc of log(1 + e^{-beta h}) = -beta sigmoid(-beta h); / P = 2
    s = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    torch.testing.assert_close(pc.grad, torch.tensor([-0.5 * s(-1.0) / 2, -0.5 * s(0.5) / 2], dtype=D))
    torch.testing.assert_close(pr.grad, -pc.grad)


def test_dpo_loss_label_smoothing_by_hand():
    pc, pr, rc, rr = _dpo_hand()
    loss, _ = dpo_loss(pc, pr, rc, rr, beta=0.5, label_smoothing=0.1)
    # l = -(1 - ls) logsigmoid(x) - ls logsigmoid(-x) = log(1 + e^-x) + ls x, since
    # -logsigmoid(-x) = log(1 + e^x) = x + log(1 + e^-x):
    # pair 0 (x = 1): 0.31326 + 0.1 = 0.41326; pair 1 (x = -0.5): 0.97408 - 0.05 = 0.92408
    l0 = math.log1p(math.exp(-1)) + 0.1
    l1 = math.log1p(math.exp(0.5)) - 0.05
    assert float(loss.detach()) == approx((l0 + l1) / 2)


def test_dpo_loss_num_pairs_micro_batches_and_empty():
    pc, pr, rc, rr = _dpo_hand()
    whole, _ = dpo_loss(pc, pr, rc, rr, beta=0.5)
    a, _ = dpo_loss(pc[:1], pr[:1], rc[:1], rr[:1], beta=0.5, num_pairs=2)
    b, _ = dpo_loss(pc[1:], pr[1:], rc[1:], rr[1:], beta=0.5, num_pairs=2)
    assert float((a + b).detach()) == approx(float(whole.detach()))
    empty = pc[:0]
    loss, m = dpo_loss(empty, empty, empty.detach(), empty.detach())
    assert float(loss.detach()) == 0.0 and loss.requires_grad and float(m["dpo/pairs"]) == 0.0
    # a pair with equal implicit rewards (h = 0) is not "accurate": (0 - 0) - (-1 + 1) = 0
    z = torch.tensor([0.0], dtype=D)
    _, m = dpo_loss(z, z - 1, z, z - 1)
    assert float(m["dpo/accuracy"]) == 0.0 and float(m["dpo/loss"]) == approx(math.log(2))  # -logsigmoid(0)
    for bad in ({"beta": 0.0}, {"label_smoothing": 0.5}, {"num_pairs": 0}):
        with pytest.raises(AlgoError):
            dpo_loss(pc, pr, rc, rr, **bad)
    with pytest.raises(AlgoError):
        dpo_loss(pc, pr[:1], rc, rr)


# ----------------------------------------------------------------------------------------------
# DPO against TRL's own code
# ----------------------------------------------------------------------------------------------


class _Accelerator:
    device = torch.device("cpu")

    @staticmethod
    def gather_for_metrics(x):
        return x

    @staticmethod
    def gather(x):
        return x


def trl_dpo(pc, pr, rc, rr, beta, loss_type="sigmoid", label_smoothing=0.0):
    """TRL's ``DPOTrainer._compute_loss`` run on a stub trainer: ``(loss, its metrics dict)``.

    The stub model returns per-token log-probs ``(2P, 3)`` whose rows sum to ``[pc; pr]`` (TRL's
    batch is chosen rows then rejected rows; it sums ``outputs.log_probs`` over tokens), and the
    reference log-probs are passed precomputed (``precompute_ref_logps``), as TRL's inputs
    ``ref_chosen_logps`` / ``ref_rejected_logps``.
    """
    from trl.trainer.dpo_trainer import DPOTrainer

    p = pc.shape[0]
    split = torch.tensor([0.5, 0.3, 0.2], dtype=D)
    per_tok = torch.cat([pc, pr])[:, None] * split  # (2P, 3)
    outputs = SimpleNamespace(
        log_probs=per_tok,
        entropy=torch.zeros(2 * p, 3, dtype=D),
        mean_logits=torch.zeros(2 * p, 3, dtype=D),
        is_top1=torch.zeros(2 * p, 3, dtype=torch.bool),
    )
    stub = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=_Accelerator(),
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=[loss_type],
        loss_weights=[1.0],
        beta=beta,
        label_smoothing=label_smoothing,
        use_weighting=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros(2 * p, 4, dtype=torch.long),
        "attention_mask": torch.ones(2 * p, 4, dtype=torch.long),
        "completion_mask": torch.tensor([[0, 1, 1, 1]] * (2 * p)),  # shifted: 3 completion tokens
        "ref_chosen_logps": rc,
        "ref_rejected_logps": rr,
    }
    loss = DPOTrainer._compute_loss(stub, lambda **kw: outputs, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in stub._metrics["train"].items()}


def _random_logps(seed, p=8):
    g = torch.Generator().manual_seed(seed)
    return [-(torch.rand(p, generator=g, dtype=D) * 40 + 1) for _ in range(4)]


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_equals_trl_sigmoid(beta):
    pytest.importorskip("trl")
    pc, pr, rc, rr = _random_logps(int(beta * 10))
    want, trl_metrics = trl_dpo(pc, pr, rc, rr, beta)
    got, m = dpo_loss(pc, pr, rc, rr, beta=beta)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    for ours, theirs in (("reward_chosen", "chosen"), ("reward_rejected", "rejected"),
                         ("reward_margin", "margins"), ("accuracy", "accuracies")):
        assert float(m[f"dpo/{ours}"]) == pytest.approx(trl_metrics[f"rewards/{theirs}"], rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_label_smoothing_equals_trl(beta):
    """label_smoothing 0.1 against TRL.

    In TRL 1.16, ``loss_type="sigmoid"`` ignores ``label_smoothing`` (DPOConfig: it is used by the
    robust and EXO losses); the cDPO form ``-(1-ls) logsigmoid(beta d) - ls logsigmoid(-beta d)``
    (TRL's sigmoid loss before 1.0) survives in its ``aot`` loss, on ``d`` = sorted
    ``(pc - pr)`` minus sorted ``(rc - rr)``. For one pair the sorts are the identity and ``d = h``,
    so TRL's ``aot`` run pair by pair is exactly this loss; the mean over pairs is ours.
    """
    pytest.importorskip("trl")
    pc, pr, rc, rr = _random_logps(100 + int(beta * 10))
    ls = 0.1
    per_pair = [trl_dpo(pc[i:i + 1], pr[i:i + 1], rc[i:i + 1], rr[i:i + 1], beta, "aot", ls)[0] for i in range(len(pc))]
    want = torch.stack(per_pair).mean()
    got, _ = dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=ls)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    # and aot with ls = 0 on one pair is the plain sigmoid loss (the reduction above is sound)
    one = [t[:1] for t in (pc, pr, rc, rr)]
    torch.testing.assert_close(trl_dpo(*one, beta, "aot")[0], trl_dpo(*one, beta, "sigmoid")[0], rtol=1e-12, atol=0)
    # TRL 1.16's sigmoid loss does not read label_smoothing; a TRL whose sigmoid loss reads it
    # again (the cDPO form, as before 1.0) must give ours
    sig_ls, _ = trl_dpo(pc, pr, rc, rr, beta, "sigmoid", ls)
    sig_0, _ = trl_dpo(pc, pr, rc, rr, beta, "sigmoid", 0.0)
    if float(sig_ls) != float(sig_0):
        torch.testing.assert_close(got, sig_ls, rtol=1e-6, atol=0)
