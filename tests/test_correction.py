"""Hand-computed checks of ``rewardlab.algos.correction`` (the verl comparison is test_correction_verl.py).

Every expected number below is worked out in the comment beside it from the module's equations.
Log-ratios are written as ``log(ratio)`` so that the weights are the ratios themselves.
"""

from __future__ import annotations

import math

import pytest
import torch

from rewardlab import algos
from rewardlab.algos import AlgoError, correction
from rewardlab.algos.correction import Correction, correct
from algo_cases import loss_algo

F64 = torch.float64
ln = math.log


def logps(ratios: list[list[float]], mask: list[list[int]] | None = None):
    """(old, rollout, mask) with old - rollout = log(ratio) per token; rollout = -2 everywhere."""
    rho = torch.tensor([[ln(r) for r in row] for row in ratios], dtype=F64)  # (B, T)
    rollout = torch.full_like(rho, -2.0)  # (B, T)
    m = torch.ones_like(rho) if mask is None else torch.tensor(mask, dtype=F64)
    return rollout + rho, rollout, m


def close(actual, expected) -> None:
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), torch.as_tensor(expected, dtype=F64),
                               rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# IS weights
# ----------------------------------------------------------------------------------------------


def test_token_tis_truncates_at_the_threshold():
    old, roll, m = logps([[3.0, 0.4, 1.5]])
    w, mask2, met = correct(old, roll, m, Correction(is_level="token", is_threshold=2.0))
    close(w, [[2.0, 0.4, 1.5]])  # min(3, 2) = 2; the others are below u (TIS has no lower clip)
    assert torch.equal(mask2, m)  # IS never touches the mask
    close(met["rollout_is_mean"], 3.9 / 3.0)  # (2 + 0.4 + 1.5) / 3, the truncated weights
    close(met["rollout_is_max"], 2.0)
    close(met["rollout_is_min"], 0.4)
    close(met["rollout_is_ratio_fraction_high"], 1.0 / 3.0)  # the raw 3 > u = 2
    close(met["rollout_is_ratio_fraction_low"], 1.0 / 3.0)  # 0.4 < 1/u = 0.5
    assert "rollout_is_batch_norm_factor" not in met and "rollout_is_oob_ratio" not in met


def test_icepop_zeroes_weights_outside_the_band_and_keeps_the_mask():
    old, roll, m = logps([[0.5, 0.9, 1.2, 2.0]])
    w, mask2, met = correct(old, roll, m, Correction(is_level="token", is_threshold="0.8_1.25"))
    close(w, [[0.0, 0.9, 1.2, 0.0]])  # 0.5 < 0.8 and 2 > 1.25 are zeroed, not clipped
    assert torch.equal(mask2, m)
    close(met["rollout_is_oob_ratio"], 0.5)  # 2 of 4 tokens out of band
    close(met["rollout_is_ratio_fraction_high"], 0.25)
    close(met["rollout_is_ratio_fraction_low"], 0.25)  # IcePop: the lower bound is l, not 1/u
    close(met["rollout_is_mean"], (0.9 + 1.2) / 4)


def test_sequence_weights_are_the_row_product_broadcast_and_masked():
    # row 0: 1.5 * 1.2 = 1.8 on both tokens; row 1: 3 on its one token -> TIS 2; padding 0
    old, roll, m = logps([[1.5, 1.2], [3.0, 7.0]], mask=[[1, 1], [1, 0]])
    w, _, met = correct(old, roll, m, Correction(is_level="sequence", is_threshold=2.0))
    close(w, [[1.8, 1.8], [2.0, 0.0]])
    close(met["rollout_is_max"], 3.0)  # sequence level: the untruncated product
    close(met["rollout_is_seq_mean"], (1.8 + 2.0) / 2)
    close(met["rollout_is_seq_fraction_high"], 0.5)  # row 1's raw 3 > 2
    close(met["rollout_is_mean"], (1.8 + 1.8 + 2.0) / 3)  # token-weighted


def test_sequence_log_ratio_is_summed_unclamped_then_clamped():
    """Quirk 9: rho = (25, -10) gives exp(clamp(15)) = e^15, not exp(20 - 10) = e^10."""
    rho = torch.tensor([[25.0, -10.0], [30.0, 0.0]], dtype=F64)  # row 1: sum 30 -> clamped to 20
    roll = torch.full_like(rho, -40.0)
    w, _, _ = correct(roll + rho, roll, torch.ones_like(rho), Correction(is_level="sequence", is_threshold=1e12))
    close(w, [[math.exp(15.0)] * 2, [math.exp(20.0)] * 2])
    wt, _, _ = correct(roll + rho, roll, torch.ones_like(rho), Correction(is_level="token", is_threshold=1e12))
    close(wt, [[math.exp(20.0), math.exp(-10.0)], [math.exp(20.0), 1.0]])  # token level: clamp per token


def test_batch_normalize_token_and_sequence():
    old, roll, m = logps([[3.0, 0.5, 1.5]])
    w, _, met = correct(old, roll, m, Correction(is_level="token", is_threshold=2.0, batch_normalize=True))
    close(w, [[1.5, 0.375, 1.125]])  # (2, 0.5, 1.5) / (4/3)
    close(met["rollout_is_batch_norm_factor"], 4.0 / 3.0)
    close(met["rollout_is_mean"], 4.0 / 3.0)  # metrics are taken before normalisation

    old, roll, m = logps([[1.5, 1.2], [3.0, 7.0]], mask=[[1, 1], [1, 0]])
    w, _, met = correct(old, roll, m, Correction(is_level="sequence", is_threshold=2.0, batch_normalize=True))
    # per-row weights 1.8 and 2 -> mean over rows 1.9 (a token mean would be 5.6 / 3)
    close(w, [[1.8 / 1.9, 1.8 / 1.9], [2.0 / 1.9, 0.0]])
    close(met["rollout_is_batch_norm_factor"], 1.9)


def test_batch_normalize_is_skipped_when_every_weight_is_zero():
    old, roll, m = logps([[3.0, 4.0]])  # IcePop band [0.5, 2] rejects both
    w, _, met = correct(old, roll, m, Correction(is_level="token", is_threshold="0.5_2.0", batch_normalize=True))
    close(w, [[0.0, 0.0]])
    close(met["rollout_is_batch_norm_factor"], 1.0)


# ----------------------------------------------------------------------------------------------
# rejection sampling
# ----------------------------------------------------------------------------------------------


def test_k1_bounds_apply_to_minus_log_ratio():
    """Quirk 8: token_k1 "0.8_1.5" keeps -rho in [log 0.8, log 1.5], i.e. ratio in [1/1.5, 1/0.8]."""
    old, roll, m = logps([[0.7, 1.3, 1.0, 0.6]])
    _, mask2, met = correct(old, roll, m, Correction(rs="token_k1", rs_threshold="0.8_1.5"))
    # 0.7 in [0.667, 1.25] kept (though < 0.8); 1.3 > 1.25 rejected (though < 1.5); 0.6 < 0.667 rejected
    close(mask2, [[1.0, 0.0, 1.0, 0.0]])
    close(met["rollout_rs_token_k1_masked_fraction"], 0.5)
    close(met["rollout_rs_token_k1_fraction_low"], 0.25)  # -log 1.3 < log 0.8
    close(met["rollout_rs_token_k1_fraction_high"], 0.25)  # -log 0.6 > log 1.5
    # a single number u for k1 means l = 1/u: ratios in [1/1.5, 1.5]
    _, mask3, _ = correct(old, roll, m, Correction(rs="token_k1", rs_threshold=1.5))
    close(mask3, [[1.0, 1.0, 1.0, 0.0]])


def test_k2_k3_keep_statistics_up_to_the_threshold():
    old, roll, m = logps([[1.0, math.exp(0.5), math.exp(-0.3)]])
    # k2 = rho^2 / 2: (0, 0.125, 0.045); k3 = e^rho - 1 - rho: (0, 0.1487, 0.0408)
    _, mask2, met = correct(old, roll, m, Correction(rs="token_k2", rs_threshold=0.1))
    close(mask2, [[1.0, 0.0, 1.0]])
    close(met["rollout_rs_token_k2_max"], 0.125)
    close(met["rollout_rs_token_k2_mean"], (0.125 + 0.045) / 3)
    _, mask3, _ = correct(old, roll, m, Correction(rs="token_k3", rs_threshold=0.1))
    close(mask3, [[1.0, 0.0, 1.0]])


def test_rejection_statistics_use_the_clamped_log_ratio():
    rho = torch.tensor([[25.0, -30.0, 0.0]], dtype=F64)  # clamped to (20, -20, 0)
    roll = torch.full_like(rho, -40.0)
    m = torch.ones_like(rho)
    _, _, met = correct(roll + rho, roll, m, Correction(rs="token_k3,token_k1", rs_threshold="1e12,1e-12_1e12"))
    close(met["rollout_rs_token_k3_max"], math.exp(20.0) - 21.0)  # e^20 - 1 - 20, not e^25 - 26
    close(met["rollout_rs_token_k1_max"], 20.0)  # -(-20)
    close(met["rollout_rs_token_k1_min"], -20.0)


def test_a_rejected_sequence_gets_a_fully_zero_mask():
    # row 0 is close (ratios ~1), row 1 has one outlier: mean k3 over its 3 tokens = (e - 2) / 3 = 0.239
    old, roll, m = logps([[1.01, 0.99, 1.0], [math.e, 1.0, 1.0]])
    _, mask2, met = correct(old, roll, m, Correction(rs="seq_mean_k3", rs_threshold=0.05))
    close(mask2, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    close(met["rollout_rs_seq_mean_k3_seq_masked_fraction"], 0.5)
    close(met["rollout_rs_masked_fraction"], 0.5)  # 3 of 6 tokens
    close(met["rollout_rs_seq_masked_fraction"], 0.5)
    close(met["rollout_rs_seq_mean_k3_max"], (math.e - 2.0) / 3.0)
    # token_k3 at the same bound rejects only the outlier token
    _, mask3, _ = correct(old, roll, m, Correction(rs="token_k3", rs_threshold=0.05))
    close(mask3, [[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])


def test_chained_options_are_anded_and_respect_padding():
    old, roll, m = logps([[1.0, 2.0, 1.0], [1.1, 1.0, 5.0]], mask=[[1, 1, 1], [1, 1, 0]])
    # token_k2 <= 0.1 rejects log 2 (k2 = 0.240); seq_sum_k2 <= 0.3 passes both rows (row 1's 5 is padding)
    _, mask2, met = correct(old, roll, m, Correction(rs="token_k2,seq_sum_k2", rs_threshold="0.1,0.3"))
    close(mask2, [[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    close(met["rollout_rs_seq_sum_k2_masked_fraction"], 0.0)
    close(met["rollout_rs_token_k2_masked_fraction"], 0.2)  # 1 of 5 valid tokens
    # a shared threshold for two options, and a duplicate option counted once
    _, mask3, _ = correct(old, roll, m, Correction(rs="token_k2, token_k2,seq_max_k2", rs_threshold=0.1))
    close(mask3, [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])  # seq_max_k2 of row 0 is 0.240 > 0.1


def test_bool_masks_and_dtypes_are_kept():
    old, roll, m = logps([[1.0, 3.0]])
    w, mask2, met = correct(old.float(), roll.float(), m.bool(), Correction(is_level="token", rs="token_k2",
                                                                              rs_threshold=0.1))
    assert mask2.dtype == torch.bool and mask2.tolist() == [[True, False]]
    assert w.dtype == torch.float32 and all(v.dtype == torch.float32 for v in met.values())
    w64, mask64, _ = correct(old, roll, m, Correction(is_level="token"))
    assert w64.dtype == F64 and mask64.dtype == F64


def test_padding_values_never_matter():
    old, roll, m = logps([[1.5, 1.2], [3.0, 7.0]], mask=[[1, 1], [1, 0]])
    c = correction.preset("decoupled_geo_rs_seq_tis", rs_threshold="0.5_2.0")
    ref = correct(old, roll, m, c)
    old2, roll2 = old.clone(), roll.clone()
    old2[1, 1], roll2[1, 1] = float("nan"), float("inf")
    got = correct(old2, roll2, m, c)
    close(got[0], ref[0])
    assert torch.equal(got[1], ref[1])
    assert got[2].keys() == ref[2].keys()
    for k in ref[2]:
        close(got[2][k], ref[2][k])


def test_no_grad_and_detached():
    old, roll, m = logps([[3.0, 0.5]])
    old.requires_grad_()
    w, _, met = correct(old, roll, m, Correction(is_level="token"))
    assert not w.requires_grad and not any(v.requires_grad for v in met.values())


# ----------------------------------------------------------------------------------------------
# off-policy metrics
# ----------------------------------------------------------------------------------------------


def test_offpolicy_metrics_by_hand():
    old = torch.tensor([[-1.0, -2.0]], dtype=F64)
    roll = torch.tensor([[-1.5, -2.0]], dtype=F64)  # rho = (0.5, 0)
    met = correction.offpolicy_metrics(old, roll, torch.ones_like(old))
    close(met["kl"], -0.25)  # mean(rollout - old)
    close(met["k3_kl"], (math.exp(0.5) - 1.5) / 2)
    close(met["training_ppl"], math.exp(1.5))
    close(met["rollout_ppl"], math.exp(1.75))
    close(met["training_log_ppl"], 1.5)
    close(met["log_ppl_diff"], -0.25)  # mean rollout logp - mean old logp
    close(met["log_ppl_abs_diff"], 0.25)
    close(met["ppl_ratio"], math.exp(-0.25))
    close(met["chi2_token"], (math.e + 1.0) / 2 - 1.0)  # mean(rho_t^2) - 1
    close(met["chi2_seq"], math.e - 1.0)  # (1.6487 * 1)^2 - 1
    assert correct(old, roll, torch.ones_like(old), Correction())[2].keys() == met.keys()


# ----------------------------------------------------------------------------------------------
# bypass mode
# ----------------------------------------------------------------------------------------------


def test_bypass_reinforce_multiplies_by_the_weights():
    lp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=F64, requires_grad=True)
    roll = lp.detach() - torch.tensor([[ln(3.0), ln(0.5), 0.0]], dtype=F64)  # w = (3 -> 2, 0.5, 1)
    adv = torch.tensor([2.0], dtype=F64)
    m = torch.ones_like(roll)
    loss, metrics, corr = algos.bypass_policy_loss(lp, roll, adv, m, correction.preset("bypass_pg_is"),
                                                   loss_algo(agg="token-mean"))
    # sequence TIS: w = min(3 * 0.5 * 1, 2) = 1.5 on every token; loss = -mean(A w lp) = -2 * 1.5 * (-3.5) / 3
    close(loss, 3.5)
    (g,) = torch.autograd.grad(loss, lp)
    close(g, [[-1.0, -1.0, -1.0]])  # -A w / N
    close(metrics["approx_kl_old"], (ln(3.0) + ln(0.5)) / -3.0)  # mean(rollout - lp)
    close(corr["rollout_is_mean"], 1.5)


def test_bypass_ppo_clip_ignores_the_weights_for_the_loss():
    lp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=F64, requires_grad=True)
    roll = lp.detach() - torch.tensor([[ln(3.0), ln(0.5), 0.0]], dtype=F64)
    adv = torch.tensor([1.0], dtype=F64)
    m = torch.ones_like(roll)
    c = Correction(is_level="token", is_threshold=2.0, bypass=True)
    loss, metrics, corr = algos.bypass_policy_loss(lp, roll, adv, m, c, loss_algo(eps_low=0.2, eps_high=0.28))
    ref, ref_metrics = algos.policy_loss(lp, roll, adv, m, loss_algo(eps_low=0.2, eps_high=0.28))
    assert torch.equal(loss, ref) and "is_weight/mean" not in metrics
    close(corr["rollout_is_mean"], (2.0 + 0.5 + 1.0) / 3)  # the weights still feed the metrics
    # with RS the loss uses the modified mask: 3 and 0.5 fail k2 <= 0.1, only the last token is left
    c2 = Correction(rs="token_k2", rs_threshold=0.1, bypass=True)
    loss2, _, _ = algos.bypass_policy_loss(lp, roll, adv, m, c2, loss_algo(eps_low=0.2, eps_high=0.28))
    close(loss2, -1.0)  # -A * r with r = 1


# ----------------------------------------------------------------------------------------------
# presets, the simulator, bad settings
# ----------------------------------------------------------------------------------------------


def test_presets_have_verls_default_thresholds():
    """Defaults of verl 0.9.1's RolloutCorrectionConfig classmethods (verl/trainer/config/algorithm.py)."""
    p = correction.PRESETS
    assert len(p) == 19
    assert p["disabled"] == Correction()
    assert p["decoupled_token_is"] == Correction(is_level="token", is_threshold=2.0)
    assert p["decoupled_token_icepop"].is_threshold == "0.5_5.0"  # threshold=5.0, threshold_lower=0.5
    assert (p["decoupled_seq_is_rs"].rs, p["decoupled_seq_is_rs"].rs_threshold) == ("seq_sum_k1", "0.5_2.0")
    for name in ("decoupled_geo_rs", "decoupled_geo_rs_token_tis", "decoupled_geo_rs_seq_tis", "bypass_ppo_clip_geo_rs",
                 "bypass_pg_geo_rs", "bypass_pg_geo_rs_seq_tis", "bypass_pg_geo_rs_token_tis"):
        assert (p[name].rs, p[name].rs_threshold) == ("seq_mean_k1", "0.999_1.001"), name
    for name in ("decoupled_k3_rs", "decoupled_k3_rs_token_tis", "decoupled_k3_rs_seq_tis", "bypass_ppo_clip_k3_rs"):
        assert (p[name].rs, p[name].rs_threshold) == ("seq_mean_k3", 0.01), name
    for name, c in p.items():
        c.check()
        assert c.bypass == name.startswith("bypass"), name
        assert (c.bypass_loss == "reinforce") == name.startswith("bypass_pg"), name
    assert correction.preset("decoupled_geo_rs", rs_threshold="0.8_1.25").rs_threshold == "0.8_1.25"


def test_simulate_mismatch():
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(64, 32, generator=g, dtype=F64) * 3  # (B, T)
    m = (torch.arange(32)[None, :] < torch.randint(1, 33, (64, 1), generator=g)).to(F64)
    a = correction.simulate_mismatch(lp, m, noise=0.3, generator=torch.Generator().manual_seed(1))
    b = correction.simulate_mismatch(lp, m, noise=0.3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.dtype == F64  # seeded = reproducible
    assert torch.equal(a[m == 0], lp[m == 0])  # padding untouched
    assert bool((a[m == 1] <= -1e-6).all())  # a valid log-prob
    d = (a - lp)[(m == 1) & (lp < -1.5)]  # away from the clamp the noise is N(0, 0.3^2)
    assert abs(float(d.mean())) < 0.03 and abs(float(d.std()) - 0.3) < 0.03
    close(correction.simulate_mismatch(lp, m, noise=0.0, generator=None), lp.clamp(max=-1e-6))
    w, _, met = correct(lp, a, m, Correction(is_level="token"))  # usable as the engine side
    assert float(met["kl"]) != 0.0 and bool(torch.isfinite(w).all())


@pytest.mark.parametrize("kwargs,message", [
    (dict(is_level="tok"), "unknown is_level 'tok'"),
    (dict(is_level="token", is_threshold=None), "needs is_threshold"),
    (dict(is_level="token", is_threshold=-1.0), "is_threshold must be a number > 0"),
    (dict(is_level="token", is_threshold="2_1"), "0 < l <= u"),
    (dict(is_level="token", is_threshold="abc"), "is_threshold must be"),
    (dict(is_level="token", is_threshold=True), "is_threshold must be"),
    (dict(is_level="token", batch_normalize="yes"), "batch_normalize must be true or false"),
    (dict(batch_normalize=True), "batch_normalize needs IS weights"),
    (dict(rs="token_k4", rs_threshold=0.1), "unknown rs option 'token_k4'"),
    (dict(rs=" , ", rs_threshold=0.1), "at least one option"),
    (dict(rs="token_k2"), "needs rs_threshold"),
    (dict(rs="token_k2,seq_mean_k1", rs_threshold="0.1,0.2,0.3"), "gives 3 thresholds for 2 rs options"),
    (dict(rs="token_k2", rs_threshold="0.1_0.2"), "one upper bound, not a range"),
    (dict(rs="token_k1", rs_threshold="0_1.2"), "must be > 0"),
    (dict(rs="seq_mean_k1", rs_threshold="1.2_0.8"), "0 < l <= u"),
    (dict(rs="token_k3", rs_threshold="x"), "is not a number"),
    (dict(rs="token_k3", rs_threshold=[0.1]), "rs_threshold must be a number or a comma-separated string"),
    (dict(bypass=1), "bypass must be true or false"),
    (dict(bypass=True, bypass_loss="ppo"), "unknown bypass_loss 'ppo'"),
    (dict(bypass_loss="reinforce"), "needs bypass=True"),
])
def test_bad_settings_raise_one_line_messages(kwargs, message):
    with pytest.raises(AlgoError, match=message) as err:
        Correction(**kwargs).check()
    assert "\n" not in str(err.value)
    old, roll, m = logps([[1.0]])
    with pytest.raises(AlgoError, match=message):
        correct(old, roll, m, Correction(**kwargs))


def test_bad_calls_raise():
    old, roll, m = logps([[1.0, 2.0]])
    with pytest.raises(AlgoError, match="unknown rollout-correction preset 'tis'"):
        correction.preset("tis")
    with pytest.raises(AlgoError, match="unknown rollout-correction field"):
        correction.preset("disabled", threshold=2.0)
    with pytest.raises(AlgoError, match="at least one response token"):
        correct(old, roll, torch.zeros_like(m), Correction())
    with pytest.raises(AlgoError, match="mask must have old_logp's shape"):
        correct(old, roll, m[:, :1], Correction())
    with pytest.raises(AlgoError, match="needs a Correction with bypass=True"):
        algos.bypass_policy_loss(old, roll, torch.ones(1, dtype=F64), m, correction.preset("decoupled_token_is"),
                                 loss_algo())
    with pytest.raises(AlgoError, match="sets is_weights itself"):
        algos.bypass_policy_loss(old, roll, torch.ones(1, dtype=F64), m, correction.preset("bypass_pg_is"), loss_algo(),
                                 is_weights=torch.ones_like(old))
    with pytest.raises(AlgoError, match="noise must be a number >= 0"):
        correction.simulate_mismatch(old, m, noise=-0.1, generator=None)
