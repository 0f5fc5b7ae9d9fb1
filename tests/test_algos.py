"""rewardlab.algos: micro-batch invariance, clamps, KL variants, dtypes, presets and argument errors.

Reference numbers from verl live in test_algos_reference.py; hypothesis properties in
test_algos_properties.py. Run: ``.venv/bin/python -m pytest -q tests/test_algos*.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from rewardlab import algos
from rewardlab.rewards.length import overlong_penalty
from rewardlab.errors import RewardlabError
from algo_cases import loss_algo, loss_with

F64 = torch.float64
AGGS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum"]
MAX_LEN = 16


def make_batch(B: int = 12, T: int = 10, seed: int = 0, empty_rows: tuple[int, ...] = (5,)) -> dict[str, torch.Tensor]:
    """A random float64 batch with unequal lengths, some rows with no response tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)  # (B,)
    for i in empty_rows:
        lengths[i] = 0
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F64)  # (B, T)
    old = -torch.rand(B, T, generator=g, dtype=F64) * 3  # (B, T)
    logp = old + 0.4 * torch.randn(B, T, generator=g, dtype=F64)  # (B, T) off-policy
    ref = old + 0.3 * torch.randn(B, T, generator=g, dtype=F64)  # (B, T)
    ent = torch.rand(B, T, generator=g, dtype=F64) * 2  # (B, T)
    rewards = torch.randint(0, 2, (B,), generator=g).to(F64)  # (B,)
    ids = [i // 4 for i in range(B)]
    adv = algos.group_advantages(rewards, ids)  # (B,)
    return {"logp": logp, "old": old, "ref": ref, "ent": ent, "adv": adv, "mask": mask}


def run(batch, rows=slice(None), width: int | None = None, **kw):
    """policy_loss on a row slice (optionally trimmed to ``width`` columns); returns loss, metrics, grads."""
    lp = batch["logp"][rows].clone().requires_grad_()
    ent = batch["ent"][rows].clone().requires_grad_()
    cols = slice(None, width)
    loss, metrics = loss_with(
        lp[:, cols], batch["old"][rows][:, cols], batch["adv"][rows], batch["mask"][rows][:, cols],
        ref_logp=batch["ref"][rows][:, cols], entropy=ent[:, cols], **kw,
    )
    g_lp, g_ent = torch.autograd.grad(loss, (lp, ent), allow_unused=True, materialize_grads=True)
    return loss, metrics, g_lp, g_ent


# ----------------------------------------------------------------------------------------------
# micro-batch and rank invariance
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("ratio", ["token", "sequence"])
@pytest.mark.parametrize("splits", [[12], [6, 6], [1, 4, 2, 5], [3] * 4])
def test_micro_batches_sum_to_the_step(agg, ratio, splits):
    batch = make_batch()
    kw = dict(agg=agg, ratio=ratio, max_len=MAX_LEN, beta=0.1, kl="k3", entropy_coef=0.01,
              eps_low=0.2, eps_high=0.28, clip_ratio_c=3.0 if ratio == "token" else None)
    full_loss, full_metrics, full_g, full_ge = run(batch, **kw)
    num_tokens, num_seqs = algos.step_counts(batch["mask"])
    assert num_seqs == 11  # the empty row is not in B_eff
    parts, grads, egrads, total = [], [], [], 0.0
    start = 0
    for size in splits:
        rows = slice(start, start + size)
        width = int(batch["mask"][rows].sum(-1).max())  # each micro-batch padded to its own width
        loss, metrics, g, ge = run(batch, rows, width=max(width, 1), num_tokens=num_tokens, num_seqs=num_seqs, **kw)
        total = total + loss
        parts.append(metrics)
        grads.append(g)
        egrads.append(ge)
        start += size
    torch.testing.assert_close(total, full_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(torch.cat(grads), full_g, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(torch.cat(egrads), full_ge, rtol=1e-12, atol=1e-14)
    combined = algos.combine_metrics(parts)
    for k, v in full_metrics.items():
        assert combined[k] == pytest.approx(float(v), rel=1e-12, abs=1e-14), k


OBJECTIVE_KW = {
    "cispo": dict(eps_low=10.0, eps_high=0.2), "gmpo": dict(eps_low=0.4, eps_high=0.4), "sapo": {}, "gpg": {},
    "dro": dict(dro_beta=0.5), "kl_cov": dict(cov_ratio=0.1, kl_cov_coef=1.0),
    "clip_cov": dict(cov_ratio=0.2, clip_cov_lb=0.05, eps_high=0.28), "dppo_tv": dict(eps_low=0.15, eps_high=0.15,
                                                                                     clip_ratio_c=3.0),
    "dppo_kl": dict(eps_low=0.05, eps_high=0.05, clip_ratio_c=3.0),
}


@pytest.mark.parametrize("loss", sorted(OBJECTIVE_KW))
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("splits", [[6, 6], [1, 4, 2, 5]])
def test_every_objective_is_micro_batch_invariant(loss, agg, splits):
    """Each new objective, with rollout-correction weights, KL and entropy terms: micro-batch losses
    and gradients sum to the step's. KL-Cov / Clip-Cov select their tokens over the whole step."""
    batch = make_batch()
    w = 0.5 + torch.rand(batch["logp"].shape, generator=torch.Generator().manual_seed(1), dtype=F64)  # (B, T)
    kw = dict(loss=loss, agg=agg, max_len=MAX_LEN, beta=0.1, kl="k3", entropy_coef=0.01, **OBJECTIVE_KW[loss])
    select = None
    if loss in algos.objectives.COV_LOSSES:
        p = loss_algo(**{k: v for k, v in kw.items() if k in algos.FIELDS})
        m = batch["mask"]
        select = algos.objectives.cov_select([(batch["logp"] * m, batch["old"] * m, batch["adv"][:, None] * m, m)],
                                             loss, p, generator=torch.Generator().manual_seed(0))[0]
        assert select.any()
    num_tokens, num_seqs = algos.step_counts(batch["mask"])

    def part(rows, width=None, **extra):
        cols = slice(None, width)
        sel = None if select is None else select[rows][:, cols]
        return run(batch, rows, width=width, is_weights=w[rows][:, cols], select=sel, **kw, **extra)

    full_loss, full_metrics, full_g, full_ge = part(slice(None), num_seqs=num_seqs)
    total, grads, egrads, start = 0.0, [], [], 0
    for size in splits:
        rows = slice(start, start + size)
        width = max(int(batch["mask"][rows].sum(-1).max()), 1)
        loss_k, _, g, ge = part(rows, width, num_tokens=num_tokens, num_seqs=num_seqs)
        total, start = total + loss_k, start + size
        grads.append(g)
        egrads.append(ge)
    torch.testing.assert_close(total, full_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(torch.cat(grads), full_g, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(torch.cat(egrads), full_ge, rtol=1e-12, atol=1e-14)
    assert full_g.abs().sum() > 0


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batch_local_denominators_are_the_bug(agg):
    """Without the step's counts, micro-batch losses do not sum to the step loss (why the args exist)."""
    batch = make_batch(empty_rows=())
    full, *_ = run(batch, agg=agg)
    split = sum(run(batch, rows, agg=agg)[0] for rows in (slice(0, 3), slice(3, 12)))
    assert not torch.isclose(split, full, rtol=1e-6)


def test_step_denominators_as_tensors():
    batch = make_batch()
    n_tok, n_seq = algos.step_counts(batch["mask"])
    a, *_ = run(batch, agg="token-mean", num_tokens=n_tok)
    b, *_ = run(batch, agg="token-mean", num_tokens=torch.tensor(float(n_tok)))
    c, *_ = run(batch, agg="seq-mean-token-mean", num_seqs=torch.tensor(n_seq))
    d, *_ = run(batch, agg="seq-mean-token-mean")
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(c, d)


def test_step_counts_over_micro_batches():
    batch = make_batch()
    assert algos.step_counts([batch["mask"][:4], batch["mask"][4:]]) == algos.step_counts(batch["mask"])
    assert algos.step_counts(batch["mask"])[0] == int(batch["mask"].sum())


# ----------------------------------------------------------------------------------------------
# aggregation formulas
# ----------------------------------------------------------------------------------------------


def test_aggregation_formulas_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]], dtype=F64)  # (3, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)  # row 2 empty
    assert float(algos.aggregate(values, mask, "token-mean")) == pytest.approx(10 / 4)
    assert float(algos.aggregate(values, mask, "seq-mean-token-mean")) == pytest.approx((6 / 3 + 4 / 1) / 2)
    assert float(algos.aggregate(values, mask, "seq-mean-token-sum")) == pytest.approx((6 + 4) / 2)
    assert float(algos.aggregate(values, mask, "seq-mean-token-sum-norm", max_len=5)) == pytest.approx((6 + 4) / 5 / 2)
    assert float(algos.aggregate(values, mask, "token-sum")) == pytest.approx(10)
    with pytest.raises(algos.AlgoError, match="max_len"):
        algos.aggregate(values, mask, "seq-mean-token-sum-norm")


def test_empty_batch_gives_zero_loss_with_a_graph():
    lp = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    mask = torch.zeros(2, 3)
    for agg in AGGS:
        loss, metrics = algos.policy_loss(lp, lp.detach(), torch.ones(2), mask, loss_algo(agg=agg), max_len=3)
        assert float(loss.detach()) == 0.0 and float(metrics["tokens"]) == 0 and float(metrics["seqs"]) == 0
        (g,) = torch.autograd.grad(loss, lp)
        assert not g.any()
    assert algos.combine_metrics([metrics])["ratio/min"] == 1.0


# ----------------------------------------------------------------------------------------------
# ratios, clamps, dual clip
# ----------------------------------------------------------------------------------------------


def test_token_ratio_log_clamped_at_20():
    lp = torch.tensor([[30.0, -30.0]], dtype=F64, requires_grad=True)
    old = torch.zeros(1, 2, dtype=F64)
    loss, m = algos.policy_loss(lp, old, torch.tensor([-1.0], dtype=F64), torch.ones(1, 2), loss_algo(agg="token-sum"))
    assert float(m["ratio/max"]) == pytest.approx(math.exp(20))
    assert float(m["ratio/min"]) == pytest.approx(math.exp(-20))
    (g,) = torch.autograd.grad(loss, lp)
    assert not g.any()  # the clamp stops the gradient beyond +-20


def test_gspo_log_ratio_clamped_at_10_from_above():
    lp = torch.tensor([[15.0, 15.0], [-30.0, -30.0]], dtype=F64, requires_grad=True)
    old = torch.zeros(2, 2, dtype=F64)
    adv = torch.tensor([-1.0, 1.0], dtype=F64)  # both rows take the unclipped branch
    loss, m = algos.policy_loss(lp, old, adv, torch.ones(2, 2),
                                loss_algo(ratio="sequence", eps_low=3e-4, eps_high=4e-4, agg="token-sum"))
    assert float(m["ratio/max"]) == pytest.approx(math.exp(10))
    assert float(m["ratio/min"]) == pytest.approx(math.exp(-30))  # no lower clamp on the sequence ratio
    assert float(loss.detach()) == pytest.approx(2 * math.exp(10) - 2 * math.exp(-30))
    (g,) = torch.autograd.grad(loss, lp)
    assert not g[0].any()  # clamped row: no gradient
    assert g[1].tolist() == pytest.approx([-math.exp(-30)] * 2, rel=1e-12)  # -A * s per token


def test_gspo_gradient_is_the_sequence_level_gradient():
    """GSPO-token form: with A constant over the sequence, d loss / d lp[i,t] = -A_i s_i / n_i / B_eff."""
    batch = make_batch(empty_rows=())
    lp = batch["logp"].clone().requires_grad_()
    loss, _ = algos.policy_loss(lp, batch["old"], batch["adv"], batch["mask"],
                                loss_algo(ratio="sequence", eps_low=10.0 ** -9, eps_high=1e9,
                                          agg="seq-mean-token-mean"))
    (g,) = torch.autograd.grad(loss, lp)
    s = torch.exp(algos.sequence_log_ratio(batch["logp"], batch["old"], batch["mask"]))  # (B,)
    n = batch["mask"].sum(-1)  # (B,)
    unclipped = (batch["adv"] > 0) | (s >= 1 - 1e-9)  # rows where the unclipped branch is active
    expected = (-batch["adv"] * s / n / len(n))[:, None] * batch["mask"]  # (B, T)
    torch.testing.assert_close(g[unclipped], expected[unclipped], rtol=1e-12, atol=1e-15)


def test_dual_clip_caps_negative_advantage_loss():
    lp = torch.tensor([[2.0, 2.0, -3.0]], dtype=F64, requires_grad=True)  # ratios e^2, e^2, e^-3
    old = torch.zeros(1, 3, dtype=F64)
    adv = torch.tensor([[-1.0, 1.0, -1.0]], dtype=F64)
    loss, m = algos.policy_loss(lp, old, adv, torch.ones(1, 3), loss_algo(clip_ratio_c=3.0, agg="token-sum"))
    # token 0: A<0, -A*rho = e^2 > 3 -> capped at 3; token 1: A>0 clipped at 1.2 -> -1.2; token 2: -A*0.8
    assert float(loss.detach()) == pytest.approx(3.0 - 1.2 + 0.8)
    assert float(m["dual_clip_frac"]) == pytest.approx(1 / 3)
    assert float(m["clip_frac_high"]) == pytest.approx(1 / 3)
    assert float(m["clip_frac_low"]) == pytest.approx(1 / 3)
    assert float(m["clip_frac"]) == pytest.approx(2 / 3)
    (g,) = torch.autograd.grad(loss, lp)
    assert not g.any()
    loss_nc, m_nc = algos.policy_loss(lp, old, adv, torch.ones(1, 3), loss_algo(agg="token-sum"))
    assert float(loss_nc.detach()) == pytest.approx(math.exp(2) - 1.2 + 0.8)
    assert float(m_nc["dual_clip_frac"]) == 0.0


def test_approx_kl_old_sign():
    lp = torch.tensor([[-1.0, -2.0]], dtype=F64)
    old = torch.tensor([[-0.5, -1.0]], dtype=F64)
    _, m = algos.policy_loss(lp, old, torch.zeros(1), torch.ones(1, 2), loss_algo())
    assert float(m["approx_kl_old"]) == pytest.approx(((-0.5 + 1.0) + (-1.0 + 2.0)) / 2)  # mean(lp_old - lp)


# ----------------------------------------------------------------------------------------------
# KL estimators and entropy
# ----------------------------------------------------------------------------------------------


def test_plus_variants_are_straight_through():
    g = torch.Generator().manual_seed(1)
    lp = (-torch.rand(4, 5, generator=g, dtype=F64) * 2).requires_grad_()
    ref = -torch.rand(4, 5, generator=g, dtype=F64) * 2
    for base in ("k1", "k3"):
        value = algos.kl_penalty(lp, ref, base)
        plus = algos.kl_penalty(lp, ref, base + "+")
        torch.testing.assert_close(plus, value)
        (g_plus,) = torch.autograd.grad(plus.sum(), lp)
        (g_k2,) = torch.autograd.grad(algos.kl_penalty(lp, ref, "k2").sum(), lp)
        torch.testing.assert_close(g_plus, g_k2)
        torch.testing.assert_close(g_k2, (lp - ref).detach())


def test_k3_clamps():
    lp = torch.tensor([[0.0, 0.0, 0.0]], dtype=F64)
    ref = torch.tensor([[50.0, -50.0, -5.0]], dtype=F64)  # x = ref - lp
    k = algos.kl_penalty(lp, ref, "k3")
    # x = 50 and x = -50 (-> clamped to -20: e^-20 + 19) both hit the value clamp at 10
    assert k.tolist() == [[10.0, 10.0, pytest.approx(math.exp(-5) + 5 - 1)]]
    assert algos.kl_penalty(lp, ref, "k1").tolist() == [[-50.0, 50.0, 5.0]]


def test_entropy_bonus_and_metric():
    batch = make_batch()
    base, m0, _, _ = run(batch, agg="token-mean")
    bonus, m1, _, g_ent = run(batch, agg="token-mean", entropy_coef=0.5)
    mask = batch["mask"]
    mean_h = float((batch["ent"] * mask).sum() / mask.sum())
    assert float(m1["entropy"]) == pytest.approx(mean_h)
    assert float(bonus.detach()) == pytest.approx(float(base.detach()) - 0.5 * mean_h)
    torch.testing.assert_close(g_ent, -0.5 * mask / mask.sum())
    assert float(m0["pg_loss"]) == pytest.approx(float(m1["pg_loss"]))


def test_kl_reported_without_penalty():
    batch = make_batch()
    loss_a, m_a, g_a, _ = run(batch, agg="token-mean", beta=0.0)
    assert "kl_ref" in m_a and float(m_a["kl_ref"]) > 0
    loss_b, m_b, g_b, _ = run(batch, agg="token-mean", beta=0.2)
    assert float(loss_b.detach()) == pytest.approx(float(loss_a.detach()) + 0.2 * float(m_a["kl_ref"]))
    assert float(m_b["pg_loss"]) == pytest.approx(float(loss_a.detach()))


# ----------------------------------------------------------------------------------------------
# precision
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("ratio,agg", [("token", "token-mean"), ("token", "seq-mean-token-sum-norm"),
                                       ("sequence", "seq-mean-token-mean"), ("token", "seq-mean-token-sum")])
def test_low_precision_inputs_match_float64(dtype, ratio, agg):
    """Inputs in fp32/bf16/fp16 are computed in float32 and match float64 on the same input values."""
    batch = make_batch()
    low = {k: v.to(dtype) for k, v in batch.items()}
    exact = {k: v.to(F64) for k, v in low.items()}  # same values, float64
    kw = dict(ratio=ratio, agg=agg, max_len=MAX_LEN, beta=0.04, kl="k3", entropy_coef=0.01,
              eps_low=0.2 if ratio == "token" else 3e-4, eps_high=0.28 if ratio == "token" else 4e-4)
    loss_lo, m_lo, g_lo, _ = run(low, **kw)
    loss_hi, m_hi, g_hi, _ = run(exact, **kw)
    assert loss_lo.dtype == torch.float32
    assert g_lo.dtype == dtype
    assert abs(float(loss_lo.detach()) - float(loss_hi.detach())) < 1e-4
    for k in m_hi:
        assert abs(float(m_lo[k]) - float(m_hi[k])) < 1e-4 * max(1.0, abs(float(m_hi[k]))), k
    # the gradient is computed in float32 and rounded once to the input dtype
    torch.testing.assert_close(g_lo.to(F64), g_hi.to(dtype).to(F64), rtol=0, atol=1e-4)


def test_float64_stays_float64():
    batch = make_batch()
    loss, metrics, g, _ = run(batch, agg="token-mean")
    assert loss.dtype == F64 and g.dtype == F64
    assert all(v.dtype == F64 and v.dim() == 0 and not v.requires_grad for v in metrics.values())
    assert algos.kl_penalty(batch["logp"], batch["ref"], "k3").dtype == F64
    assert algos.kl_penalty(batch["logp"].bfloat16(), batch["ref"].bfloat16(), "k3").dtype == torch.float32


# ----------------------------------------------------------------------------------------------
# advantages, dynamic sampling, overlong shaping
# ----------------------------------------------------------------------------------------------


def test_group_advantages_by_hand():
    rewards = [1.0, 0.0, 5.0, 0.3, 0.3, 0.3, 2.0]
    ids = ["a", "a", "solo", 7, 7, 7, "a"]  # groups by id, not by position
    adv = algos.group_advantages(rewards, ids)
    mean_a, std_a = 1.0, 1.0  # [1, 0, 2]: mean 1, unbiased std 1
    expected = [(1 - mean_a) / (std_a + 1e-6), (0 - mean_a) / (std_a + 1e-6), 5.0 / (1 + 1e-6), 0.0, 0.0, 0.0,
                (2 - mean_a) / (std_a + 1e-6)]
    assert adv.dtype == torch.float32
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)
    assert algos.group_advantages(rewards, ids, scale="none").tolist() == pytest.approx(
        [0.0, -1.0, 5.0, 0.0, 0.0, 0.0, 1.0], abs=1e-7)
    # an all-equal group of 0.1s is exactly 0, not float noise divided by 1e-6
    assert algos.group_advantages([0.1, 0.1, 0.1], [0, 0, 0]).tolist() == [0.0, 0.0, 0.0]


def test_group_advantages_tensor_ids_and_errors():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0])
    adv = algos.group_advantages(r, torch.tensor([9, 3, 9, 3]))
    torch.testing.assert_close(adv, algos.group_advantages(r, ["x", "y", "x", "y"]))
    with pytest.raises(algos.AlgoError, match="entries"):
        algos.group_advantages(r, [0, 0, 1])
    with pytest.raises(algos.AlgoError, match="finite"):
        algos.group_advantages([1.0, float("nan")], [0, 0])
    with pytest.raises(algos.AlgoError, match="scale"):
        algos.group_advantages(r, [0, 0, 1, 1], scale="mean")


def test_dynamic_sampling_keep():
    scores = [1, 1, 1, 0, 1, 0, 0, 0, 1]
    ids = ["a", "a", "a", "b", "b", "c", "c", "c", "d"]  # a all 1, b mixed, c all 0, d singleton
    keep = algos.dynamic_sampling_keep(scores, ids)
    assert keep.dtype == torch.bool
    assert keep.tolist() == [False, False, False, True, True, False, False, False, True]
    shuffled = algos.dynamic_sampling_keep([0, 1, 1, 1], ["b", "a", "b", "a"])
    assert shuffled.tolist() == [True, False, True, False]


def test_overlong_penalty_values_and_errors():
    """The one implementation (rewardlab.rewards.length; the tensor copy in rewardlab.algos went in issue 25)."""
    pen = [overlong_penalty(n, 20, 8, factor=0.5) for n in (0, 12, 16, 20, 24)]
    assert pen == pytest.approx([0.0, 0.0, -0.25, -0.5, -0.75])
    for bad in ((20, 0), (20, 21)):
        with pytest.raises(ValueError, match="cache_len"):
            overlong_penalty(1, *bad)


# ----------------------------------------------------------------------------------------------
# presets
# ----------------------------------------------------------------------------------------------


def test_presets_match_the_table():
    table = {  # docs/algorithms.md, "Presets": advantage, loss, ratio, eps_low, eps_high, agg, beta, kl,
        # dynamic sampling, overlong, mini-batches, clip_ratio_c
        "grpo": ("std", "ppo", "token", 0.2, 0.2, "seq-mean-token-mean", 0.04, "k3", False, False, 1, None),
        "dr_grpo": ("none", "ppo", "token", 0.2, 0.2, "seq-mean-token-sum-norm", 0.0, None, False, False, 1, None),
        "dapo": ("std", "ppo", "token", 0.2, 0.28, "token-mean", 0.0, None, True, True, 1, None),
        "gspo": ("std", "ppo", "sequence", 3e-4, 4e-4, "seq-mean-token-mean", 0.0, None, False, False, 4, None),
        "rloo": ("rloo", "ppo", "token", 0.2, 0.2, "token-mean", 0.0, None, False, False, 1, None),
        "reinforce_pp": ("reinforce_pp", "ppo", "token", 0.2, 0.2, "token-mean", 0.001, "k2", False, False, 1, None),
        "reinforce_pp_baseline": ("reinforce_pp_baseline", "ppo", "token", 0.2, 0.2, "token-mean", 0.001, "k2",
                                  False, False, 1, None),
        "cispo": ("std", "cispo", "token", 10.0, 0.2, "token-mean", 0.0, None, False, False, 1, None),
        "gmpo": ("std", "gmpo", "token", 0.4, 0.4, "seq-mean-token-mean", 0.0, None, False, False, 1, None),
        "sapo": ("std", "sapo", "token", 0.2, 0.2, "seq-mean-token-mean", 0.0, None, False, False, 1, None),
        "clip_cov": ("std", "clip_cov", "token", 0.2, 0.28, "token-mean", 0.0, None, False, False, 1, None),
        "kl_cov": ("std", "kl_cov", "token", 0.2, 0.28, "token-mean", 0.0, None, False, False, 1, None),
        "dppo_tv": ("std", "dppo_tv", "token", 0.15, 0.15, "token-mean", 0.0, None, False, False, 1, 3.0),
        "dppo_kl": ("std", "dppo_kl", "token", 0.05, 0.05, "token-mean", 0.0, None, False, False, 1, 3.0),
        "gpg": ("gpg", "gpg", "token", 0.2, 0.2, "token-mean", 0.0, None, False, False, 1, None),
        "opo": ("opo", "ppo", "token", 0.2, 0.2, "token-mean", 0.0, None, False, False, 1, None),
        "remax": ("remax", "ppo", "token", 0.2, 0.2, "token-mean", 0.0, None, False, False, 1, None),
        "grpo_passk": ("grpo_passk", "ppo", "token", 0.2, 0.2, "seq-mean-token-mean", 0.04, "k3", False, False, 1,
                       None),
        "ppo": ("gae", "ppo", "token", 0.2, 0.2, "token-mean", 0.0, None, False, False, 1, None),
        "dpo": ("std", "dpo", "token", 0.2, 0.2, "seq-mean-token-mean", 0.0, None, False, False, 1, None),
    }
    assert set(algos.PRESETS) == set(table)
    for name, (adv, loss, ratio, lo, hi, agg, beta, kl, ds, ol, mb, c) in table.items():
        p = algos.preset(name)
        assert (p["advantage"], p["loss"], p["ratio"], p["eps_low"], p["eps_high"], p["agg"], p["beta"]) == (
            adv, loss, ratio, lo, hi, agg, beta), name
        if kl is not None:
            assert p["kl"] == kl
        assert (p["dynamic_sampling"], p["overlong"], p["mini_batches"], p["clip_ratio_c"]) == (ds, ol, mb, c), name
        assert p["overlong_filter"] is False and p["correction"] is None
        assert p["critic"] == ("separate" if name == "ppo" else None)
        assert set(p) == set(algos.PRESETS["grpo"])  # every preset has every field


def test_preset_overrides_copy_and_feed_policy_loss():
    p = algos.preset("dapo", eps_high=0.3, kl="low_var_kl", clip_ratio_c=3.0)
    assert p["eps_high"] == 0.3 and p["kl"] == "k3" and algos.PRESETS["dapo"]["eps_high"] == 0.28
    p["agg"] = "changed"
    assert algos.PRESETS["dapo"]["agg"] == "token-mean"
    batch = make_batch()
    for name, algo in algos.PRESETS.items():
        if algo.loss == "dpo":  # a pairwise branch of the update stage, not a policy_loss objective
            with pytest.raises(algos.AlgoError, match="unknown loss 'dpo'"):
                algos.policy_loss(batch["logp"], batch["old"], batch["adv"], batch["mask"], algo)
            continue
        lp = batch["logp"].clone().requires_grad_()
        loss, _ = algos.policy_loss(lp, batch["old"], batch["adv"], batch["mask"], algo,
                                    max_len=MAX_LEN, ref_logp=batch["ref"])
        loss.backward()
        assert torch.isfinite(lp.grad).all()


@pytest.mark.parametrize("name,overrides,match", [
    ("trpo", {}, "unknown algorithm preset 'trpo'; choose one of: grpo, dr_grpo, dapo, gspo, rloo"),
    ("grpo", {"epsilon": 0.1}, "unknown field"),
    ("grpo", {"agg": "mean"}, "unknown agg"),
    ("grpo", {"kl": "k4"}, "unknown kl"),
    ("grpo", {"ratio": "seq"}, "unknown ratio"),
    ("grpo", {"advantage": "z"}, "unknown advantage"),
    ("grpo", {"clip_ratio_c": 1.0}, "must be > 1"),
    ("gspo", {"clip_ratio_c": 3.0}, "not defined for the sequence ratio"),
    ("grpo", {"eps_low": 1.5}, "eps_low"),
    ("grpo", {"eps_high": -0.1}, "eps_high"),
    ("grpo", {"beta": -1.0}, "beta"),
    ("grpo", {"mini_batches": 0}, "mini_batches"),
    ("grpo", {"dynamic_sampling": "yes"}, "dynamic_sampling"),
    ("dapo", {"overlong_factor": -2.0}, "overlong_factor"),
])
def test_preset_errors(name, overrides, match):
    with pytest.raises(algos.AlgoError, match=match) as info:
        algos.preset(name, **overrides)
    assert isinstance(info.value, RewardlabError) and isinstance(info.value, ValueError)


def test_validate_algo_on_an_overridden_dict():
    cfg = dict(algos.preset("gspo"))
    algos.validate_algo(cfg)
    cfg["clip_ratio_c"] = 3.0
    with pytest.raises(algos.AlgoError, match="GSPO"):
        algos.validate_algo(cfg)
    with pytest.raises(algos.AlgoError, match="unknown algorithm field"):
        algos.validate_algo({**algos.preset("grpo"), "lr": 1e-6})


@pytest.mark.parametrize("kwargs,match", [
    ({"beta": 0.1}, "needs ref_logp"),
    ({"entropy_coef": 0.1}, "needs the per-token entropy"),
    ({"agg": "seq-mean-token-sum-norm"}, "max_len"),
    ({"ratio": "sequence", "clip_ratio_c": 2.0}, "sequence ratio"),
    ({"num_tokens": 0}, "num_tokens"),
    ({"agg": "seq-mean-token-mean", "num_seqs": -1}, "num_seqs"),
    ({"kl": "k9"}, "unknown kl"),
])
def test_policy_loss_argument_errors(kwargs, match):
    lp = torch.zeros(2, 3)
    with pytest.raises(algos.AlgoError, match=match):
        loss_with(lp, lp, torch.zeros(2), torch.ones(2, 3), **kwargs)


def test_policy_loss_shape_errors():
    lp = torch.zeros(2, 3)
    with pytest.raises(algos.AlgoError, match="old_logp"):
        algos.policy_loss(lp, torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3), loss_algo())
    with pytest.raises(algos.AlgoError, match="advantages"):
        algos.policy_loss(lp, lp, torch.zeros(3), torch.ones(2, 3), loss_algo())
    with pytest.raises(algos.AlgoError, match=r"\(B, T\)"):
        algos.policy_loss(torch.zeros(6), torch.zeros(6), torch.zeros(6), torch.ones(6), loss_algo())


# ----------------------------------------------------------------------------------------------
# boundaries, defaults and messages: each kills mutants that survived the tests above
# (`bench/mutation.py algos` lists what still survives; the rest are equivalent mutants)
# ----------------------------------------------------------------------------------------------


def test_validate_algo_defaults_are_valid():
    algos.validate_algo({})  # every field may be left out; each default is a valid value
    algos.validate_algo({"advantage": "none", "ratio": "sequence", "agg": "seq-mean-token-sum", "kl": "low_var_kl"})


@pytest.mark.parametrize("field,value,message", [
    ("beta", True, "beta must be a number >= 0, got True"),  # a bool is not a number here
    ("beta", float("inf"), "beta must be a number >= 0, got inf"),
    ("beta", "0.1", "beta must be a number >= 0, got '0.1'"),
    ("entropy_coef", float("nan"), "entropy_coef must be a number, got nan"),
    ("entropy_coef", "x", "entropy_coef must be a number, got 'x'"),
    ("overlong_factor", -0.5, "overlong_factor must be a number >= 0, got -0.5"),
    ("mini_batches", True, "mini_batches must be an integer >= 1, got True"),
    ("mini_batches", 2.0, "mini_batches must be an integer >= 1, got 2.0"),
    ("eps_low", 1.0, "eps_low must be in [0, 1), got 1.0"),
    ("eps_low", -0.1, "eps_low must be in [0, 1), got -0.1"),
    ("eps_high", float("nan"), "eps_high must be >= 0, got nan"),
    ("clip_ratio_c", 1.0, "clip_ratio_c (dual clip) must be > 1 or None, got 1.0"),
    ("agg", "mean", "unknown agg 'mean'; choose one of: token-mean, seq-mean-token-mean, seq-mean-token-sum, "
                    "seq-mean-token-sum-norm, token-sum"),
    # not a string: no alias lookup
    ("kl", ["k3"], "unknown kl ['k3']; choose one of: k1, k2, k3, abs, k1+, k2+, k3+, abs+"),
    ("ratio", "seq", "unknown ratio 'seq'; choose one of: token, sequence"),
    ("advantage", "z", "unknown advantage 'z'; choose one of: std, none, rloo, reinforce_pp, reinforce_pp_baseline, "
     "opo, grpo_passk, remax, gpg, gae"),
    ("overlong", 1, "overlong must be true or false, got 1"),
])
def test_validate_algo_messages(field, value, message):
    with pytest.raises(algos.AlgoError) as info:
        algos.validate_algo({field: value})
    assert str(info.value) == message


def test_validate_algo_accepts_the_edges():
    for cfg in ({"eps_low": 0.0}, {"eps_high": 0.0}, {"beta": 0}, {"overlong_factor": 0.0}, {"mini_batches": 1},
                {"clip_ratio_c": 1.0001}, {"entropy_coef": -0.01}):
        algos.validate_algo(cfg)


def test_dual_clip_message_and_unknown_field_messages():
    with pytest.raises(algos.AlgoError) as info:
        algos.validate_algo({"ratio": "sequence", "clip_ratio_c": 3.0})
    assert str(info.value) == "dual clip (clip_ratio_c) is not defined for the sequence ratio (GSPO); set it to None"
    fields = ", ".join(algos.PRESETS["grpo"])
    with pytest.raises(algos.AlgoError) as info:
        algos.validate_algo({"lr": 1e-6, "epsilon": 0.1})
    assert str(info.value) == f"unknown algorithm field(s) 'epsilon', 'lr'; valid fields: {fields}"
    with pytest.raises(algos.AlgoError) as info:
        algos.preset("dapo", lr=1e-6, foo=1)
    assert str(info.value) == f"unknown field(s) 'foo', 'lr' for preset 'dapo'; valid fields: {fields}"


def test_policy_loss_messages_name_the_argument():
    lp = torch.zeros(2, 3)
    cases = [
        (dict(ratio="seq"), "unknown ratio 'seq'; choose one of: token, sequence"),
        (dict(agg="mean"), "unknown agg 'mean'; choose one of: token-mean"),
        (dict(kl="k9"), "unknown kl 'k9'; choose one of: k1"),
        (dict(beta=0.1), "beta != 0 needs ref_logp (log-probs under the reference model)"),
        (dict(entropy_coef=0.1), "entropy_coef != 0 needs the per-token entropy tensor"),
        (dict(ref_logp=torch.zeros(2, 4)), "ref_logp must have logp's shape (2, 3), got (2, 4)"),
        (dict(entropy=torch.zeros(1, 3)), "entropy must have logp's shape (2, 3), got (1, 3)"),
    ]
    for kwargs, message in cases:
        with pytest.raises(algos.AlgoError) as info:
            loss_with(lp, lp, torch.zeros(2), torch.ones(2, 3), **kwargs)
        assert str(info.value).startswith(message), (kwargs, str(info.value))
    for old, mask, message in ((torch.zeros(2, 4), torch.ones(2, 3),
                                "old_logp must have logp's shape (2, 3), got (2, 4)"),
                               (lp, torch.ones(3, 3), "mask must have logp's shape (2, 3), got (3, 3)")):
        with pytest.raises(algos.AlgoError) as info:
            algos.policy_loss(lp, old, torch.zeros(2), mask, loss_algo())
        assert str(info.value) == message


def test_aggregate_and_kl_messages_and_max_len_edges():
    values, mask = torch.ones(2, 3, dtype=F64), torch.ones(2, 3)
    with pytest.raises(algos.AlgoError) as info:
        algos.aggregate(values, mask, "mean")
    assert str(info.value).startswith("unknown agg 'mean'; choose one of: token-mean, seq-mean-token-mean")
    with pytest.raises(algos.AlgoError) as info:
        algos.kl_penalty(values, values, "k9")
    assert str(info.value) == "unknown kl 'k9'; choose one of: k1, k2, k3, abs, k1+, k2+, k3+, abs+"
    need = "agg 'seq-mean-token-sum-norm' needs max_len = the max new tokens (a constant > 0)"
    for bad in (None, 0, -4, "16", float("inf")):
        with pytest.raises(algos.AlgoError) as info:
            algos.aggregate(values, mask, "seq-mean-token-sum-norm", max_len=bad)
        assert str(info.value) == need, bad
    assert float(algos.aggregate(values, mask, "seq-mean-token-sum-norm", max_len=1)) == 3.0  # 3 tokens / L=1
    with pytest.raises(algos.AlgoError) as info:
        algos.aggregate(values, mask, "token-mean", num_tokens=0)
    assert str(info.value) == "num_tokens must be > 0 (the optimizer step's total), got 0"
    with pytest.raises(algos.AlgoError) as info:
        algos.aggregate(values, mask, "seq-mean-token-mean", num_seqs=-1)
    assert str(info.value) == "num_seqs must be > 0 (the optimizer step's total), got -1"


def test_denominators_of_one():
    values = torch.tensor([[3.0, 5.0]], dtype=F64)
    one_token = torch.tensor([[1, 0]])
    assert float(algos.aggregate(values, one_token, "token-mean")) == 3.0  # N = 1, not clamped higher
    assert float(algos.aggregate(values, one_token, "token-mean", num_tokens=1)) == 3.0
    assert float(algos.aggregate(values, one_token, "seq-mean-token-sum", num_seqs=1)) == 3.0
    assert float(algos.aggregate(values, torch.ones(1, 2), "token-mean", num_tokens=torch.tensor(4))) == 2.0


def test_single_token_batch_metrics():
    lp = torch.tensor([[0.5]], dtype=F64, requires_grad=True)
    _, m = algos.policy_loss(lp, torch.zeros(1, 1, dtype=F64), torch.ones(1), torch.ones(1, 1), loss_algo())
    assert float(m["ratio/min"]) == float(m["ratio/max"]) == pytest.approx(math.exp(0.5))
    assert float(m["clip_frac_high"]) == 1.0 and float(m["tokens"]) == 1.0 and float(m["seqs"]) == 1.0


def test_clip_fractions_count_strictly_outside_the_range():
    # ratios exactly 0.5 and 2.0 (exp(log 0.5), exp(log 2) are exact) on the edges of [1 - 0.5, 1 + 1.0]
    lp = torch.tensor([[math.log(0.5), math.log(2.0)]], dtype=F64)
    old = torch.zeros(1, 2, dtype=F64)
    adv = torch.tensor([[-1.0, 1.0]], dtype=F64)
    _, m = algos.policy_loss(lp, old, adv, torch.ones(1, 2), loss_algo(eps_low=0.5, eps_high=1.0))
    assert (float(m["clip_frac_low"]), float(m["clip_frac_high"]), float(m["clip_frac"])) == (0.0, 0.0, 0.0)


def test_dual_clip_fraction_counts_only_tokens_above_the_cap():
    c = math.e  # the ratio exp(1) equals the cap exactly: the loss is at the cap, not above it
    lp = torch.tensor([[1.0, 1.5]], dtype=F64)
    loss, m = algos.policy_loss(lp, torch.zeros(1, 2, dtype=F64), torch.tensor([-1.0]), torch.ones(1, 2),
                                loss_algo(clip_ratio_c=c, eps_high=0.28, agg="token-sum"))
    assert float(m["dual_clip_frac"]) == 0.5  # only the second token (e^1.5 > e) is capped
    assert float(loss) == pytest.approx(2 * math.e)


def test_entropy_coefficient_of_one_is_applied():
    batch = make_batch()
    base, *_ = run(batch, agg="token-mean")
    bonus, m, _, g_ent = run(batch, agg="token-mean", entropy_coef=1.0)
    assert float(bonus.detach()) == pytest.approx(float(base.detach()) - float(m["entropy"]), rel=1e-12)
    torch.testing.assert_close(g_ent, -batch["mask"] / batch["mask"].sum())


def test_kl_default_is_k3_and_huge_x_has_a_finite_gradient():
    lp = torch.tensor([[-1000.0, 1000.0, -0.3]], dtype=F64, requires_grad=True)
    ref = torch.zeros(1, 3, dtype=F64)
    k = algos.kl_penalty(lp, ref)
    torch.testing.assert_close(k, algos.kl_penalty(lp, ref, "k3"))
    assert k[0, :2].tolist() == [10.0, 10.0]
    (g,) = torch.autograd.grad(k.sum(), lp)
    assert torch.isfinite(g).all() and g[0, :2].tolist() == [0.0, 0.0]  # exp(1000) never reaches the graph


def test_group_of_two_uses_the_unbiased_std():
    adv = algos.group_advantages(torch.tensor([1.0, 0.0], dtype=F64), [0, 0], eps=0.0)
    assert adv.tolist() == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], rel=1e-12)  # std = sqrt(0.5 / 1)


def test_python_float_rewards_keep_float64_precision():
    # 1 and 1 + 1e-9 are equal in float32: a float32 copy would call this group all-equal
    adv = algos.group_advantages([1.0, 1.0 + 1e-9], [0, 0])
    assert adv.dtype == torch.float32 and adv[0] < 0 < adv[1]
    assert algos.dynamic_sampling_keep([1.0, 1.0 + 1e-9], [0, 0]).tolist() == [True, True]


def test_dtypes_of_vector_inputs():
    assert algos.group_advantages(torch.tensor([1, 0, 1, 1]), [0, 0, 1, 1]).dtype == torch.float32  # int tensor
    assert algos.group_advantages(torch.tensor([1.0, 0.0], dtype=torch.bfloat16), [0, 0]).dtype == torch.bfloat16
    keep = algos.dynamic_sampling_keep(torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float32), [0, 0, 1, 1])
    assert keep.tolist() == [True, True, False, False]
    lp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.bfloat16)
    old = torch.tensor([[-1.5, -2.5, -0.25]], dtype=torch.bfloat16)
    s = algos.sequence_log_ratio(lp, old, torch.tensor([[1, 1, 0]]))
    assert s.dtype == torch.float32 and s.tolist() == [0.5]


def test_empty_inputs():
    assert algos.group_advantages([], []).shape == (0,)
    assert algos.group_advantages(torch.tensor([]), torch.tensor([], dtype=torch.long)).shape == (0,)
    assert algos.dynamic_sampling_keep([], []).shape == (0,)


def test_vector_shape_messages():
    with pytest.raises(algos.AlgoError) as info:
        algos.group_advantages(torch.zeros(2, 2), [0, 1])
    assert str(info.value) == "rewards must be one value per response (B,), got shape (2, 2)"
    with pytest.raises(algos.AlgoError) as info:
        algos.dynamic_sampling_keep(torch.zeros(2, 2), [0, 1])
    assert str(info.value) == "scores must be one value per response (B,), got shape (2, 2)"
    with pytest.raises(algos.AlgoError) as info:
        algos.group_advantages([1.0, 2.0], torch.zeros(2, 1, dtype=torch.long))
    assert str(info.value) == "group_ids must be (B,), got shape (2, 1)"
    with pytest.raises(algos.AlgoError) as info:
        algos.group_advantages([1.0, float("inf")], [0, 0])
    assert str(info.value) == "rewards must be finite numbers (map ungradable None scores to a value first)"
    with pytest.raises(algos.AlgoError) as info:
        algos.group_advantages([1.0], [0], scale="mean")
    assert str(info.value) == "unknown scale 'mean'; choose one of: std, none"


def test_overlong_penalty_edges():
    assert [overlong_penalty(n, 20, 1) for n in (0, 19, 20, 21)] == [0.0, 0.0, -1.0, -2.0]  # cache_len 1
    assert [overlong_penalty(n, 20, 20) for n in (0, 10, 20)] == pytest.approx([0.0, -0.5, -1.0])  # cache = max
    assert [overlong_penalty(n, 20, 8, factor=0.0) for n in (12, 20)] == [0.0, 0.0]
    assert [overlong_penalty(n, 1, 1, factor=0.3) for n in range(6)] == [min(-n * 0.3, 0.0) + 0.0 for n in range(6)]


def test_combine_metrics_weights_defaults_and_extra_keys():
    parts = [
        {"loss": 1.0, "clip_frac": 0.5, "ratio/min": 0.5, "ratio/max": 2.0, "tokens": 1.0, "foo": 1.0},
        {"loss": 2.0, "clip_frac": 1.0, "ratio/min": 0.9, "ratio/max": 1.1, "tokens": 3.0, "foo": 3.0},
        {"loss": 0.0, "clip_frac": 0.0, "ratio/min": 1.0, "ratio/max": 1.0, "tokens": 0.0},  # an empty micro-batch
    ]
    out = algos.combine_metrics(parts)
    assert out == {"loss": 3.0, "clip_frac": pytest.approx((0.5 * 1 + 1.0 * 3) / 4), "ratio/min": 0.5,
                   "ratio/max": 2.0, "tokens": 4.0, "foo": 2.0}
    # a token metric weighted by a single token, and micro-batches without "tokens" weigh nothing
    assert algos.combine_metrics([{"entropy": 0.7, "tokens": 1.0}, {"entropy": 0.1}]) == {"entropy": 0.7, "tokens": 1.0}
    assert algos.combine_metrics([{"entropy": 0.7, "tokens": 0.0}]) == {"entropy": 0.0, "tokens": 0.0}
    assert algos.combine_metrics([{"ratio/min": 0.3}, {"ratio/min": 0.8, "tokens": 2.0}])["ratio/min"] == 0.8
    # without any "tokens" key the result still reports 0 tokens; no parts, no keys
    assert algos.combine_metrics([{"loss": 1.0}, {"loss": 2.0}]) == {"loss": 3.0, "tokens": 0.0}
    assert algos.combine_metrics([]) == {}


def test_algo_objects_overrides_lookup_and_optimizer_steps():
    fields = ", ".join(algos.FIELDS)
    with pytest.raises(algos.AlgoError) as info:
        algos.GRPO.with_overrides(lr=1e-6, foo=1)
    assert str(info.value) == f"unknown field(s) 'foo', 'lr'; valid fields: {fields}"
    with pytest.raises(KeyError) as key_info:
        algos.GRPO["lr"]
    assert key_info.value.args == ("lr",)
    assert algos.GRPO.with_overrides(kl="low_var_kl")["kl"] == "k3"
    assert algos.optimizer_steps_per_rollout(algos.preset("grpo")) == 1  # one epoch by default
    steps = algos.optimizer_steps_per_rollout(algos.preset("gspo"), epochs=2)
    assert steps == 8 and isinstance(steps, int)


@pytest.mark.parametrize("cache", [0, -3, True, 2.0, "4"])
def test_overlong_cache_must_be_a_positive_integer(cache):
    with pytest.raises(algos.AlgoError) as info:
        algos.validate_algo({"overlong_cache": cache})
    assert str(info.value) == f"overlong_cache must be an integer >= 1 or None, got {cache!r}"


def test_overlong_cache_accepts_none_and_positive_integers():
    for cache in (None, 1, 2, 64):
        algos.validate_algo({"overlong_cache": cache})
