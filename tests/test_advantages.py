"""Hand-computed cases for rewardlab.algos.advantages (the verl numbers are in test_advantages_verl.py).

Each expected value below is worked out by hand from the estimator's formula (the arithmetic is in
the comments). Where verl's whitening epsilons enter (``mu = sum / (N + 1e-8)``,
``rsqrt(var + 1e-8)``), the exact hand value differs by < 1e-7 relative, inside the rtol used.
"""

from __future__ import annotations

import math

import pytest
import torch

from rewardlab.algos import AGGREGATIONS, AlgoError
from rewardlab.algos import advantages as A
from rewardlab.algos.value import value_loss

F64 = torch.float64
RTOL = 1e-6  # the whitening epsilons move hand values by < 1e-7 relative
S2 = 1 / math.sqrt(2)  # two whitened values are +-1/sqrt(2)


def t(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=F64)


def close(actual, expected, atol: float = 0.0) -> None:
    torch.testing.assert_close(actual, t(expected), rtol=RTOL, atol=atol)


def outcome(scores, lengths, width):
    mask = t([[1.0] * n + [0.0] * (width - n) for n in lengths])
    return A.outcome_token_rewards(t(scores), mask), mask


# ----------------------------------------------------------------------------------------------
# token rewards
# ----------------------------------------------------------------------------------------------


def test_outcome_token_rewards_last_valid_token():
    mask = t([[1, 1, 0], [1, 0, 0], [1, 0, 1], [0, 0, 0]])
    out = A.outcome_token_rewards(t([2.0, 3.0, 4.0, 5.0]), mask)
    assert torch.equal(out, t([[0, 2, 0], [3, 0, 0], [0, 0, 4], [0, 0, 0]]))  # hole: still the last valid; empty: none
    assert out.dtype == F64
    assert A.outcome_token_rewards([1.0, 2.0, 3.0, 4.0], mask).dtype == torch.float32


# ----------------------------------------------------------------------------------------------
# group estimators
# ----------------------------------------------------------------------------------------------


def test_rloo_hand():
    r, m = outcome([1.0, 0.0, 0.0, 1.0], [2, 2, 2, 2], 3)
    adv, ret = A.rloo(r, m, ["q"] * 4)
    # s_i - mean of the other three: 1 - 1/3, 0 - 2/3, 0 - 2/3, 1 - 1/3
    close(adv[:, 0], [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    close(adv, [[2 / 3, 2 / 3, 0], [-2 / 3, -2 / 3, 0], [-2 / 3, -2 / 3, 0], [2 / 3, 2 / 3, 0]])
    assert torch.equal(adv, ret)


def test_rloo_singleton_and_all_equal_groups():
    r, m = outcome([0.7, 1.0, 1.0, 1.0], [1, 2, 1, 3], 3)
    adv, _ = A.rloo(r, m, ["solo", "eq", "eq", "eq"])
    close(adv[0, 0], 0.7)  # singleton: A = s (verl)
    assert torch.equal(adv[1:], torch.zeros(3, 3, dtype=F64))  # all-equal group: exactly 0


def test_group_ids_as_integer_tensor():
    r, m = outcome([1.0, 0.0, 0.5, 0.2], [1, 2, 3, 1], 3)
    a1, _ = A.rloo(r, m, ["a", "b", "a", "b"])
    a2, _ = A.rloo(r, m, torch.tensor([7, 3, 7, 3]))
    assert torch.equal(a1, a2)
    close(a1[:, 0], [1.0 - 0.5, 0.0 - 0.2, 0.5 - 1.0, 0.2 - 0.0])  # pairs: A = s_i - s_other


def test_opo_hand():
    r, m = outcome([1.0, 0.0, 0.4], [1, 3, 2], 3)
    adv, ret = A.opo(r, m, ["q", "q", "solo"])
    # b = (1*1 + 3*0) / (1 + 3) = 0.25; singleton: b = 0
    close(adv, [[0.75, 0, 0], [-0.25, -0.25, -0.25], [0.4, 0.4, 0]])
    assert torch.equal(adv, ret)


def test_grpo_passk_hand():
    r, m = outcome([0.2, 0.9, 0.5, 1.0, 1.0, 0.0], [1, 1, 1, 1, 1, 1], 1)
    ids = ["a", "a", "a", "b", "b", "b"]
    adv, _ = A.grpo_passk(r, m, ids, norm_by_std=False)
    close(adv[:, 0], [0, 0.9 - 0.5, 0, 0, 0, 0])  # only the argmax gets s_max - s_2nd; a tie gives 0
    mean = (0.2 + 0.9 + 0.5) / 3
    std = math.sqrt(((0.2 - mean) ** 2 + (0.9 - mean) ** 2 + (0.5 - mean) ** 2) / 2)  # unbiased
    adv, _ = A.grpo_passk(r, m, ids)
    close(adv[:, 0], [0, 0.4 / (std + 1e-6), 0, 0, 0, 0])


def test_grpo_passk_rejects_a_group_of_one():
    r, m = outcome([0.2, 0.9, 0.5], [1, 1, 1], 1)
    with pytest.raises(AlgoError, match="at least 2"):
        A.grpo_passk(r, m, ["a", "a", "b"])


def test_gpg_hand():
    r, m = outcome([1.0, 0.0, 1.0, 0.0, 0.0, 0.0], [1, 2, 1, 1, 1, 1], 2)
    adv, _ = A.gpg_advantage(r, m, ["a", "a", "a", "a", "b", "b"])
    # alpha = B / nonzero = 6 / 2 = 3 (batch-wide); group a mean 0.5 -> 3 * (+-0.5); group b all 0
    close(adv, [[1.5, 0], [-1.5, -1.5], [1.5, 0], [-1.5, 0], [0, 0], [0, 0]])
    adv, _ = A.gpg_advantage(r, m, ["a", "a", "a", "a", "b", "b"], f_norm=3.0)
    close(adv[:, 0], [0.5, -0.5, 0.5, -0.5, 0, 0])
    adv, _ = A.gpg_advantage(r[:1], m[:1], ["solo"])
    close(adv[0, 0], 1.0)  # alpha = 1/1, singleton mean 0


def test_reinforce_pp_baseline_hand():
    r, m = outcome([1.0, 0.0], [1, 2], 2)
    adv, ret = A.reinforce_pp_baseline(r, m, ["q", "q"])
    # s - mean = [0.5, -0.5] on tokens [0.5 | -0.5, -0.5]: mu = -1/6, deviations 2/3, -1/3, -1/3,
    # unbiased var = (4/9 + 1/9 + 1/9) / 2 = 1/3 -> whitened 2/sqrt(3), -1/sqrt(3), -1/sqrt(3)
    r3 = math.sqrt(3)
    close(adv, [[2 / r3, 0], [-1 / r3, -1 / r3]])
    assert torch.equal(adv, ret)


def test_reinforce_pp_baseline_singleton_group():
    r, m = outcome([1.0, 0.0, 0.6], [1, 1, 1], 1)
    adv, _ = A.reinforce_pp_baseline(r, m, ["q", "q", "solo"])
    # before whitening: [0.5, -0.5] and the singleton keeps s = 0.6 (mean 0, verl)
    mu, sd = _whiten_hand([0.5, -0.5, 0.6])
    close(adv[:, 0], [(0.5 - mu) / sd, (-0.5 - mu) / sd, (0.6 - mu) / sd])


def test_all_equal_batch_whitens_to_zero_not_nan():
    # every group all-equal: the pre-whitening advantages are 0, var = 0, and verl's rsqrt(var + 1e-8)
    # keeps the result 0 (rsqrt(0) would give 0 * inf = NaN)
    r, m = outcome([1.0, 1.0, 0.3, 0.3], [1, 2, 3, 1], 3)
    ids = ["a", "a", "b", "b"]
    for fn in (A.reinforce_pp_baseline, A.gdpo):
        adv, _ = fn(r, m, ids)
        assert torch.equal(adv, torch.zeros_like(adv)), fn.__name__


def test_gdpo_singleton_group():
    r, m = outcome([1.0, 0.0, 0.5], [1, 1, 1], 1)
    adv, _ = A.gdpo(r, m, ["a", "a", "solo"])
    # GRPO: group a -> +-0.5 / (std + eps) with std = sqrt(0.5); the singleton -> (0.5 - 0) / (1 + eps)
    g = 0.5 / (math.sqrt(0.5) + 1e-6)
    pre = [g, -g, 0.5 / (1 + 1e-6)]
    mu, sd = _whiten_hand(pre)
    close(adv[:, 0], [(x - mu) / sd for x in pre])


def test_gdpo_fallback_and_keyed_hand():
    r, m = outcome([1.0, 0.0, 1.0, 1.0], [1, 1, 1, 1], 1)
    ids = ["a", "a", "b", "b"]
    # GRPO: a -> +-0.5 / (std + eps) = +-g, b all equal -> 0; whitening over 4 tokens (mean 0,
    # unbiased var = 2 g^2 / 3) -> +-sqrt(3/2), 0 whatever g is
    k = math.sqrt(1.5)
    adv, ret = A.gdpo(r, m, ids)
    close(adv[:, 0], [k, -k, 0, 0])
    assert torch.equal(adv, ret)
    comps = {"acc": t([1.0, 0.0, 1.0, 1.0]), "fmt": t([0.0, 1.0, 0.0, 1.0])}
    # acc -> [g, -g, 0, 0], fmt -> [-g, g, -g, g]; weights 1, 1 -> [0, 0, -g, g] -> whitened [0, 0, -k, k]
    adv, _ = A.gdpo(r, m, ids, components=comps)
    close(adv[:, 0], [0, 0, -k, k], atol=1e-12)  # 0 = g - g may leave 1 ulp
    # weights 1 and 0: fmt drops out -> same as the fallback
    adv, _ = A.gdpo(r, m, ids, components=comps, weights={"acc": 1.0, "fmt": 0.0})
    close(adv[:, 0], [k, -k, 0, 0])
    adv2, _ = A.gdpo(r, m, ids, components=comps, weights=[1.0, 0.0])
    assert torch.equal(adv, adv2)
    with pytest.raises(AlgoError):
        A.gdpo(r, m, ids, components=comps, weights={"acc": 1.0})


def test_remax_hand():
    r = t([[0.0, 1.0, 2.0], [0.5, 9.0, 9.0]])  # row 2: padding junk
    m = t([[1, 1, 1], [1, 0, 0]])
    adv, ret = A.remax(r, m, t([1.0, 0.25]))
    close(ret, [[3, 3, 2], [0.5, 0, 0]])  # reward-to-go of r * m
    close(adv, [[2, 2, 1], [0.25, 0, 0]])  # minus b_i on valid tokens


# ----------------------------------------------------------------------------------------------
# REINFORCE++ and GAE
# ----------------------------------------------------------------------------------------------


def _whiten_hand(xs):
    """Whitening of a few plain floats (verl's formula, eps included)."""
    n = len(xs)
    mu = sum(xs) / (n + 1e-8)
    var = sum((x - mu) ** 2 for x in xs) / (n + 1e-8) * n / (n - 1)
    return mu, math.sqrt(var + 1e-8)


def test_reinforce_pp_hand_with_hole():
    r = t([[0.0, 5.0, 0.0, 1.0]])  # the hole holds junk reward 5
    m = t([[1, 0, 1, 1]])
    adv, ret = A.reinforce_pp(r, m, gamma=0.5)
    # G_3 = 1, G_2 = 0.5, hole: returns 0 and G carried undiscounted, G_0 = 0.5 * 0.5 = 0.25
    close(ret, [[0.25, 0, 0.5, 1.0]])
    mu, sd = _whiten_hand([0.25, 0.5, 1.0])
    close(adv, [[(0.25 - mu) / sd, 0, (0.5 - mu) / sd, (1.0 - mu) / sd]])


def test_gae_hand():
    r = t([[0.0, 1.0]])
    v = t([[0.5, 0.2]])
    m = t([[1, 1]])
    adv, ret = A.gae(r, v, m, gamma=1.0, lam=1.0)
    # delta_1 = 1 - 0.2 = 0.8 = A_1; delta_0 = 0.2 - 0.5 = -0.3, A_0 = -0.3 + 0.8 = 0.5; R = A + V = 1, 1
    close(ret, [[1.0, 1.0]])
    close(adv, [[-S2, S2]])
    adv, ret = A.gae(r, v, m, gamma=0.9, lam=0.5)
    # delta_0 = 0.9 * 0.2 - 0.5 = -0.32, A_0 = -0.32 + 0.45 * 0.8 = 0.04; R = 0.54, 1.0
    close(ret, [[0.54, 1.0]])
    close(adv, [[-S2, S2]])


def test_gae_holes_and_padding_quirks():
    r = t([[0.0, 0.0, 1.0, 0.0]])
    v = t([[0.5, 9.0, 0.2, 7.0]])  # junk values at the hole (t=1) and the padding (t=3)
    m = t([[1, 0, 1, 0]])
    adv, ret = A.gae(r, v, m, gamma=1.0, lam=1.0)
    # A_2 = 0.8; hole carries A = 0.8 and V' = 0.2; A_0 = (0.2 - 0.5) + 0.8 = 0.5; padding A = 0
    # returns = A + V with the junk values: [1.0, 0.8 + 9, 1.0, 0 + 7]
    close(ret, [[1.0, 9.8, 1.0, 7.0]])
    mu, sd = _whiten_hand([0.5, 0.8])
    # not re-masked: the hole gets the next token's whitened value, padding gets -mu / sigma
    close(adv, [[(0.5 - mu) / sd, (0.8 - mu) / sd, (0.8 - mu) / sd, -mu / sd]])
    close(adv[0, :3], [-S2, S2, S2])


def test_whitening_needs_two_tokens():
    with pytest.raises(AlgoError, match="at least 2 valid tokens"):
        A.reinforce_pp(t([[1.0, 0.0]]), t([[1, 0]]), gamma=1.0)


# ----------------------------------------------------------------------------------------------
# optimal token baseline
# ----------------------------------------------------------------------------------------------


def _otb_inputs(masks):
    m = t(masks)
    old = torch.full_like(m, math.log(0.5))  # pi = 0.5 -> w = 1 - 1 + sum_pi^2 = sum_pi^2
    return m, old


def test_otb_hand_equal_lengths():
    m, old = _otb_inputs([[1, 1], [1, 1]])
    r = t([[0.0, 1.0], [0.0, 0.0]])
    spp = t([[0.5, 0.5], [1.0, 1.0]])  # w: 0.5 and 1 -> W1 = [0.5, 1], W2 = [1, 2]
    adv, ret = A.optimal_token_baseline(r, m, ["q", "q"], old, spp)
    # G1 = [1, 1], G2 = [0, 0]; B_0 = 0.5 / 1.5, B_1 = 1 / 3
    close(ret, [[1, 1], [0, 0]])
    close(adv, [[2 / 3, 2 / 3], [-1 / 3, -1 / 3]])
    # IS weights scale w by rho^2: rho = 2 on row 2 -> w2 = 4, W2 = [4, 8]: B = 0.5/4.5, 1/9
    adv, _ = A.optimal_token_baseline(r, m, ["q", "q"], old, spp, rollout_is_weights=t([[1, 1], [2, 2]]))
    close(adv, [[1 - 1 / 9, 1 - 1 / 9], [-1 / 9, -1 / 9]])


def test_otb_zero_tail_and_singleton():
    m, old = _otb_inputs([[1, 1], [1, 0]])
    r = t([[0.0, 1.0], [0.5, 3.0]])  # junk reward in the padding of row 2
    spp = t([[0.5, 0.5], [1.0, 1.0]])  # W1 = [0.5, 1], W2 = [1, 1]
    # G1 = [1, 1], G2 = [0.5, 0]; B_0 = (0.5 + 0.5) / 1.5 = 2/3, B_1 = (1 * 1) / 1 = 1
    adv, _ = A.optimal_token_baseline(r, m, ["q", "q"], old, spp, handle_zero_tail=False)
    # B_1 = 1 / (1 + 1e-8) with verl's epsilon, so A_1 of row 1 is the residue 1 - 1 / (1 + 1e-8), not 0
    close(adv, [[1 / 3, 1 - 1 / (1 + 1e-8)], [0.5 - 2 / 3, 0]])
    # zero tail: the unique longest row gets B = 0 from the second-longest length (1) on
    adv, _ = A.optimal_token_baseline(r, m, ["q", "q"], old, spp)
    close(adv, [[1 / 3, 1], [0.5 - 2 / 3, 0]])
    adv, ret = A.optimal_token_baseline(r, m, ["a", "b"], old, spp)  # singletons: no baseline
    assert torch.equal(adv, ret * m)


def test_tir_otb_aligns_valid_tokens():
    m = t([[1, 0, 1], [1, 1, 0]])  # row 1 has a hole; both have 2 valid tokens
    old = torch.full_like(m, math.log(0.5))
    r = t([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    spp = t([[0.5, 99.0, 0.5], [1.0, 1.0, 99.0]])  # junk at the hole / padding
    adv, ret = A.tir_optimal_token_baseline(r, m, ["q", "q"], old, spp)
    # compacted: row 1 = [G 1, 1 | W 0.5, 1], row 2 = [G 0, 0 | W 1, 2] -> B = [1/3, 1/3]
    close(adv, [[2 / 3, 0, 2 / 3], [-1 / 3, -1 / 3, 0]])
    close(ret, [[1, 1, 1], [0, 0, 0]])
    # the padded-position variant aligns t=1 (a hole in row 1) with row 2's second token instead
    adv_pos, _ = A.optimal_token_baseline(r, m, ["q", "q"], old, spp)
    assert not torch.allclose(adv_pos, adv)


# ----------------------------------------------------------------------------------------------
# padding never leaks
# ----------------------------------------------------------------------------------------------


def _nan_padded(x, m):
    return torch.where(m.bool(), x, torch.full_like(x, math.nan))


@pytest.mark.parametrize("name", ["rloo", "reinforce_pp", "reinforce_pp_baseline", "opo", "grpo_passk", "gpg",
                                  "remax", "gdpo", "gae", "otb", "tir_otb"])
def test_nan_padding_does_not_reach_valid_outputs(name):
    g = torch.Generator().manual_seed(3)
    lengths = [4, 1, 3, 2, 4, 2]
    m = t([[1.0] * n + [0.0] * (4 - n) for n in lengths])
    m[0, 1] = 0.0  # a hole too
    r = torch.rand(6, 4, generator=g, dtype=F64) * m
    ids = ["a", "a", "a", "b", "b", "b"]
    v = torch.randn(6, 4, generator=g, dtype=F64)
    old = -torch.rand(6, 4, generator=g, dtype=F64) - 0.1
    spp = torch.rand(6, 4, generator=g, dtype=F64)
    b = torch.rand(6, generator=g, dtype=F64)

    def call(rr, vv, oo, ss):
        return {
            "rloo": lambda: A.rloo(rr, m, ids),
            "reinforce_pp": lambda: A.reinforce_pp(rr, m, gamma=0.9),
            "reinforce_pp_baseline": lambda: A.reinforce_pp_baseline(rr, m, ids),
            "opo": lambda: A.opo(rr, m, ids),
            "grpo_passk": lambda: A.grpo_passk(rr, m, ids),
            "gpg": lambda: A.gpg_advantage(rr, m, ids),
            "remax": lambda: A.remax(rr, m, b),
            "gdpo": lambda: A.gdpo(rr, m, ids),
            "gae": lambda: A.gae(rr, vv, m, gamma=0.99, lam=0.95),
            "otb": lambda: A.optimal_token_baseline(rr, m, ids, oo, ss),
            "tir_otb": lambda: A.tir_optimal_token_baseline(rr, m, ids, oo, ss),
        }[name]()

    clean = call(r, v, old, spp)
    dirty = call(_nan_padded(r, m), _nan_padded(v, m), _nan_padded(old, m), _nan_padded(spp, m))
    valid = m.bool()
    for c, d in zip(clean, dirty):
        assert torch.isfinite(d[valid]).all()
        assert torch.equal(c[valid], d[valid])
    if name != "gae":  # GAE's returns at padding are A + values (the caller's junk), as in verl
        for d in dirty:
            assert torch.isfinite(d).all()
    else:
        assert torch.isfinite(dirty[0]).all()  # whitened advantages are finite everywhere


# ----------------------------------------------------------------------------------------------
# value loss
# ----------------------------------------------------------------------------------------------


def test_value_loss_clipping_two_tokens():
    vpreds = t([[0.5, 0.5, math.nan]]).requires_grad_(True)  # NaN padding
    values = t([[0.0, 0.0, 5.0]])
    returns = t([[1.0, 0.0, 5.0]])
    m = t([[1, 1, 0]])
    loss, metrics = value_loss(vpreds, values, returns, m, cliprange=0.2)
    # token 1: v_clip = 0.2, (0.5-1)^2 = 0.25 < (0.2-1)^2 = 0.64 -> the clipped term, no gradient
    # token 2: (0.5-0)^2 = 0.25 > (0.2-0)^2 = 0.04 -> unclipped, d/dv = 2 * 0.5 = 1
    # token-mean: 0.5 * (0.64 + 0.25) / 2 = 0.2225; grad = 0.5 * [0, 1] / 2
    loss.backward()
    close(loss.detach(), 0.2225)
    close(metrics["vf_loss"], 0.2225)
    close(metrics["vf_clipfrac"], 0.5)
    close(vpreds.grad, [[0.0, 0.25, 0.0]])
    vp2 = vpreds.detach().clone().requires_grad_(True)
    loss2, _ = value_loss(vp2, values, returns, m, cliprange=0.2, agg="token-sum")
    loss2.backward()
    close(loss2.detach(), 0.445)  # 0.5 * 0.89, the 0.5 after the sum
    close(vp2.grad, [[0.0, 0.5, 0.0]])


def test_value_loss_inside_the_clip_range():
    vp = t([[0.1, 0.3]]).requires_grad_(True)
    loss, metrics = value_loss(vp, t([[0.0, 0.0]]), t([[1.0, 1.0]]), t([[1, 0]]), cliprange=0.2)
    loss.backward()
    # v_clip = vpred = 0.1: both terms (0.1 - 1)^2 = 0.81; 0.5 * 0.81; grad 0.5 * 2 * (0.1 - 1) = -0.9
    close(loss.detach(), 0.405)
    close(metrics["vf_clipfrac"], 0.0)
    close(vp.grad, [[-0.9, 0.0]])


def test_value_loss_sum_norm_needs_max_len():
    x = t([[0.1, 0.3]])
    with pytest.raises(AlgoError, match="max_len"):
        value_loss(x, x, x, t([[1, 1]]), cliprange=0.2, agg="seq-mean-token-sum-norm")


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_value_loss_micro_batches_sum_to_the_step(agg):
    g = torch.Generator().manual_seed(11)
    lengths = [8, 3, 5, 0, 6, 2, 8, 4, 5, 5, 3, 7]  # an empty row: num_seqs must count only non-empty
    m = t([[1.0] * n + [0.0] * (8 - n) for n in lengths])
    values = torch.randn(12, 8, generator=g, dtype=F64) * 0.5
    vpreds = values + torch.randn(12, 8, generator=g, dtype=F64) * 0.4
    returns = torch.randn(12, 8, generator=g, dtype=F64)
    kw = {"cliprange": 0.2, "agg": agg, "max_len": 8 if agg == "seq-mean-token-sum-norm" else None}

    whole_vp = vpreds.clone().requires_grad_(True)
    whole, _ = value_loss(whole_vp, values, returns, m, **kw)
    whole.backward()

    split_vp = vpreds.clone().requires_grad_(True)
    n_tok, n_seq = int(m.sum()), int((m.sum(-1) > 0).sum())
    total = torch.zeros((), dtype=F64)
    start = 0
    for size in (5, 4, 3):
        sl = slice(start, start + size)
        part, _ = value_loss(split_vp[sl], values[sl], returns[sl], m[sl], num_tokens=n_tok, num_seqs=n_seq, **kw)
        total = total + part
        start += size
    total.backward()
    torch.testing.assert_close(total.detach(), whole.detach(), rtol=1e-12, atol=0.0)
    torch.testing.assert_close(split_vp.grad, whole_vp.grad, rtol=1e-12, atol=0.0)


# ----------------------------------------------------------------------------------------------
# API
# ----------------------------------------------------------------------------------------------


def test_estimators_registry():
    assert set(A.FUNCTIONS) == {"gae", "reinforce_pp", "reinforce_pp_baseline", "rloo", "opo", "grpo_passk", "gpg",
                                 "remax", "gdpo"}
    assert A.FUNCTIONS["gpg"] is A.gpg_advantage
    assert all(callable(f) and f.__doc__ for f in A.FUNCTIONS.values())


def test_float32_in_float32_out_and_shape_errors():
    r, m = outcome([1.0, 0.0], [2, 1], 2)
    adv, ret = A.rloo(r.float(), m, ["q", "q"])
    assert adv.dtype == ret.dtype == torch.float32
    adv, _ = A.gae(r.float(), r.float(), m, gamma=1.0, lam=1.0)
    assert adv.dtype == torch.float32
    with pytest.raises(AlgoError):
        A.rloo(r, m[:, :1], ["q", "q"])
    with pytest.raises(AlgoError):
        A.rloo(r, m, ["q"])
    with pytest.raises(AlgoError):
        A.remax(r, m, t([1.0]))
    with pytest.raises(AlgoError):
        A.gae(r, r, m, gamma=1.5, lam=1.0)
