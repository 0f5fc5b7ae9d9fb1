"""Property tests (hypothesis) for rewardlab.algos.

- on-policy (logp == old_logp): every ratio is 1, clip fractions and approx_kl_old are 0;
- on-policy GSPO equals GRPO's token ratio with seq-mean-token-mean (loss and gradient);
- padding values (even NaN / inf) and extra padded columns never change a result;
- an all-equal group has advantage 0; shuffling rows only permutes advantages.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardlab import algos
from algo_cases import loss_with

F64 = torch.float64
AGGS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum"]
FAST = settings(max_examples=40, deadline=None)


@st.composite
def batches(draw, min_rows: int = 1):
    """A float64 batch: lengths (some may be 0), log-probs, advantages and garbage-able padding."""
    B = draw(st.integers(min_rows, 6))
    T = draw(st.integers(1, 7))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).to(F64)  # (B, T)
    old = -torch.rand(B, T, generator=g, dtype=F64) * 4  # (B, T)
    scale = draw(st.sampled_from([0.0, 0.05, 0.5, 2.0]))
    logp = old + scale * torch.randn(B, T, generator=g, dtype=F64)  # (B, T)
    ref = old + 0.3 * torch.randn(B, T, generator=g, dtype=F64)  # (B, T)
    ent = torch.rand(B, T, generator=g, dtype=F64)  # (B, T)
    adv = torch.randn(B, generator=g, dtype=F64)  # (B,)
    return {"logp": logp, "old": old, "ref": ref, "ent": ent, "adv": adv, "mask": mask}


def loss_and_grad(logp, old, adv, mask, **kw):
    lp = logp.clone().requires_grad_()
    loss, metrics = loss_with(lp, old, adv, mask, **kw)
    (g,) = torch.autograd.grad(loss, lp, allow_unused=True, materialize_grads=True)
    return loss.detach(), metrics, g


@FAST
@given(batches(), st.sampled_from(AGGS), st.sampled_from(["token", "sequence"]))
def test_on_policy_ratio_is_one_and_nothing_clips(b, agg, ratio):
    clip_c = 3.0 if ratio == "token" else None
    eps = (0.2, 0.28) if ratio == "token" else (3e-4, 4e-4)
    _, m, _ = loss_and_grad(b["logp"], b["logp"], b["adv"], b["mask"], agg=agg, ratio=ratio, max_len=8,
                            eps_low=eps[0], eps_high=eps[1], clip_ratio_c=clip_c)
    assert float(m["ratio/mean"]) == (1.0 if float(m["tokens"]) > 0 else 0.0)
    assert float(m["ratio/min"]) == 1.0 and float(m["ratio/max"]) == 1.0
    for k in ("clip_frac", "clip_frac_low", "clip_frac_high", "dual_clip_frac", "approx_kl_old"):
        assert float(m[k]) == 0.0, k


@FAST
@given(batches())
def test_on_policy_gspo_equals_grpo_sequence_mean(b):
    kw = dict(agg="seq-mean-token-mean")
    old = b["logp"]  # on-policy: one mini-batch, one epoch
    l_tok, _, g_tok = loss_and_grad(b["logp"], old, b["adv"], b["mask"], ratio="token", eps_low=0.2, eps_high=0.2, **kw)
    l_seq, _, g_seq = loss_and_grad(b["logp"], old, b["adv"], b["mask"], ratio="sequence", eps_low=3e-4,
                                    eps_high=4e-4, **kw)
    torch.testing.assert_close(l_seq, l_tok, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(g_seq, g_tok, rtol=1e-12, atol=1e-15)


GARBAGE = st.sampled_from([0.0, -1e4, 1e4, 123.0, math.nan, math.inf, -math.inf])


@FAST
@given(batches(), GARBAGE, st.integers(0, 3), st.sampled_from(AGGS), st.sampled_from(["token", "sequence"]),
       st.sampled_from(["k1", "k2", "k3", "k1+", "k3+"]))
def test_padding_never_changes_a_result(b, junk, extra_cols, agg, ratio, kl):
    kw = dict(agg=agg, ratio=ratio, max_len=8, beta=0.1, kl=kl, entropy_coef=0.01,
              clip_ratio_c=2.0 if ratio == "token" else None)
    mask = b["mask"]
    clean, clean_m, clean_g = loss_and_grad(b["logp"], b["old"], b["adv"], mask, ref_logp=b["ref"],
                                            entropy=b["ent"], **kw)

    mask2 = torch.cat([mask, torch.zeros(mask.shape[0], extra_cols, dtype=F64)], 1)  # (B, T + extra)

    def dirty(x):  # (B, T) -> (B, T + extra) with junk on every padded position
        wide = torch.cat([x, torch.zeros(x.shape[0], extra_cols, dtype=x.dtype)], 1)  # (B, T + extra)
        return torch.where(mask2.bool(), wide, junk)

    adv_tok = b["adv"][:, None].expand_as(mask)  # (B, T) per-token advantages, junk on padding
    loss, m, g = loss_and_grad(dirty(b["logp"]), dirty(b["old"]), dirty(adv_tok), mask2,
                               ref_logp=dirty(b["ref"]), entropy=dirty(b["ent"]), **kw)
    torch.testing.assert_close(loss, clean, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(g[:, : mask.shape[1]], clean_g, rtol=1e-12, atol=1e-15)
    assert not g[mask2 == 0].any()  # no gradient (and no NaN) on padding
    for k, v in clean_m.items():
        torch.testing.assert_close(m[k], v, rtol=1e-12, atol=1e-15, msg=k)


@FAST
@given(batches(), st.sampled_from(AGGS))
def test_rows_without_tokens_do_not_count(b, agg):
    """Appending all-padding rows changes nothing: B_eff counts rows with n_i > 0."""
    pad = lambda x, v=0.0: torch.cat([x, torch.full((2, *x.shape[1:]), v, dtype=x.dtype)])  # noqa: E731
    base, bm, _ = loss_and_grad(b["logp"], b["old"], b["adv"], b["mask"], agg=agg, max_len=8)
    more, mm, _ = loss_and_grad(pad(b["logp"], -1.0), pad(b["old"]), pad(b["adv"], 5.0), pad(b["mask"]),
                                agg=agg, max_len=8)
    torch.testing.assert_close(more, base, rtol=1e-12, atol=1e-15)
    assert float(mm["seqs"]) == float(bm["seqs"]) == float((b["mask"].sum(-1) > 0).sum())


@st.composite
def grouped_rewards(draw):
    n_groups = draw(st.integers(1, 5))
    rewards, ids, equal_groups = [], [], set()
    for gi in range(n_groups):
        size = draw(st.integers(1, 5))
        if draw(st.booleans()):
            value = draw(st.floats(-10, 10, allow_nan=False, allow_subnormal=False))
            rewards += [value] * size
            equal_groups.add(gi)
        else:
            rewards += draw(st.lists(st.floats(-10, 10, allow_nan=False, allow_subnormal=False),
                                     min_size=size, max_size=size))
        ids += [f"p{gi}"] * size
    perm = draw(st.permutations(range(len(rewards))))
    return [rewards[i] for i in perm], [ids[i] for i in perm], equal_groups


@FAST
@given(grouped_rewards(), st.sampled_from(["std", "none"]))
def test_all_equal_groups_get_zero_advantage(data, scale):
    rewards, ids, equal_groups = data
    adv = algos.group_advantages(torch.tensor(rewards, dtype=F64), ids, scale=scale)
    sizes = {g: ids.count(g) for g in set(ids)}
    for i, g in enumerate(ids):
        if int(g[1:]) in equal_groups and sizes[g] > 1:
            assert float(adv[i]) == 0.0
        if sizes[g] == 1:  # singleton: mean 0, std 1
            expected = rewards[i] / (1 + 1e-6) if scale == "std" else rewards[i]
            assert math.isclose(float(adv[i]), expected, rel_tol=1e-12, abs_tol=1e-12)
    # group means of the advantages are 0 for every group of two or more
    for g, n in sizes.items():
        if n > 1:
            total = sum(float(adv[i]) for i, x in enumerate(ids) if x == g)
            assert abs(total) < 1e-9 * max(1.0, max(abs(float(a)) for a in adv))
    keep = algos.dynamic_sampling_keep(rewards, ids)
    for i, g in enumerate(ids):
        if sizes[g] > 1 and int(g[1:]) in equal_groups:
            assert not keep[i]


@FAST
@given(grouped_rewards(), st.randoms(use_true_random=False))
def test_advantages_follow_rows_when_shuffled(data, rnd):
    rewards, ids, _ = data
    perm = list(range(len(rewards)))
    rnd.shuffle(perm)
    adv = algos.group_advantages(rewards, ids)
    adv_p = algos.group_advantages([rewards[i] for i in perm], [ids[i] for i in perm])
    torch.testing.assert_close(adv_p, adv[perm], rtol=1e-6, atol=1e-6)
