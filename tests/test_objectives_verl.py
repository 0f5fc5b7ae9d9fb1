"""The objectives of ``policy_loss(loss=...)`` against verl 0.9.1's registered policy losses, in float64.

Sections of ``../shared/fixtures/verl_reference_v2.json`` (see ``verl_reference_v2.md``):
``policy_losses`` (cispo, geo_mean, sapo, gpg, dro, kl_cov, clip_cov, dppo_tv, dppo_kl under every
aggregation mode, each with d loss / d log_prob), ``policy_losses_with_is_weights`` (the same losses
plus vanilla and gspo, multiplied by token-TIS weights) and ``kl_extra`` (the extra KL estimators).
Every block of the JSON is visited (the ids come from the JSON's keys), at rtol 1e-6.

verl's masked means divide by ``sum(m) + 1e-8`` and its seq-mean-token-mean by ``n_i + 1e-8``; we
divide by the plain counts. That moves a metric by at most 1e-9 relative, and a loss that cancels to
near zero by ~1e-9 absolute, hence LOSS_ATOL on losses (every loss here is >= 1e-2 in size except
where noted by the fixture itself).
"""

from __future__ import annotations


import pytest
import torch

import verl_fixtures

from rewardlab import algos
from algo_cases import loss_algo, loss_with

RTOL = 1e-6
ATOL = 1e-12
LOSS_ATOL = 1e-8
F64 = torch.float64




REF = verl_fixtures.load("verl_reference_v2.json")
INP = REF["inputs"]
T = INP["T"]


t = verl_fixtures.t


def close(actual, expected, atol: float = ATOL) -> None:
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), t(expected), rtol=RTOL, atol=atol)


MASK = t(INP["response_mask"])
ADV = algos.group_advantages(t(INP["seq_rewards"]), INP["uids"], scale="std")  # (B,) verl's GRPO advantages

VERL_NAME = {"vanilla": "ppo", "gspo": "ppo", "geo_mean": "gmpo", "cispo": "cispo", "sapo": "sapo", "gpg": "gpg",
             "dro": "dro", "kl_cov": "kl_cov", "clip_cov": "clip_cov", "dppo_tv": "dppo_tv", "dppo_kl": "dppo_kl"}
"""verl's registered loss name -> our ``loss`` setting."""

METRICS = {  # verl metric -> ours, per loss (verl's zeros-for-compatibility metrics are checked to be 0)
    "vanilla": {"pg_clipfrac": "clip_frac", "pg_clipfrac_lower": "dual_clip_frac", "ppo_kl": "approx_kl_old"},
    "gspo": {"pg_clipfrac": "clip_frac", "ppo_kl": "approx_kl_old"},
    "cispo": {"pg_clipfrac": "clip_frac", "pg_clipfrac_lower": None, "ppo_kl": "approx_kl_old"},
    "geo_mean": {"pg_clipfrac": "clip_frac_high", "pg_clipfrac_lower": "clip_frac_low", "ppo_kl": "approx_kl_old"},
    "sapo": {"pg_clipfrac": None, "pg_clipfrac_lower": None, "ppo_kl": "approx_kl_old"},
    "gpg": {},
    "dro": {"ppo_kl": "approx_kl_old"},
    "kl_cov": {"ppo_kl": "abs_kl_old"},  # verl's quirk 5: kl_cov's ppo_kl is the absolute KL
    "clip_cov": {"pg_clipfrac": "cov_frac", "ppo_kl": "approx_kl_old"},  # quirk 5: the zeroed fraction
    "dppo_tv": {"pg_clipfrac": "clip_frac", "pg_clipfrac_lower": "trunc_frac", "ppo_kl": "approx_kl_old"},
    "dppo_kl": {"pg_clipfrac": "clip_frac", "pg_clipfrac_lower": "trunc_frac", "ppo_kl": "approx_kl_old"},
}

AGG = verl_fixtures.aggregations(T)


def settings(verl_loss: str, config: dict) -> dict:
    """Our ``policy_loss`` keywords for a verl loss name and its dumped config (ActorConfig defaults apply)."""
    kw: dict = {"loss": VERL_NAME[verl_loss]}
    if "clip_ratio_low" in config:
        kw.update(eps_low=config["clip_ratio_low"], eps_high=config["clip_ratio_high"])
    if verl_loss == "vanilla":
        kw["clip_ratio_c"] = 3.0  # ActorConfig's default dual clip
    if verl_loss == "gspo":
        kw["ratio"] = "sequence"
    if verl_loss.startswith("dppo"):
        kw["clip_ratio_c"] = config.get("clip_ratio_c", 3.0)  # quirk 7: a typed ActorConfig has 3.0
    rename = {"tau_pos": "tau_pos", "tau_neg": "tau_neg", "dro_beta": "dro_beta", "kl_cov_ratio": "cov_ratio",
              "clip_cov_ratio": "cov_ratio", "ppo_kl_coef": "kl_cov_coef", "clip_cov_lb": "clip_cov_lb",
              "clip_cov_ub": "clip_cov_ub"}
    kw.update({rename[k]: v for k, v in config.items() if k in rename})
    return kw


def run(kw: dict, log_prob_ref: str, agg_key: str, is_weights=None):
    lp = t(INP[log_prob_ref.removeprefix("inputs.")]).requires_grad_()
    agg, max_len = AGG[agg_key]
    loss, metrics = loss_with(lp, t(INP["old_log_prob"]), ADV, MASK, agg=agg, max_len=max_len,
                                      is_weights=is_weights, **kw)
    assert loss.dtype == F64
    (grad,) = torch.autograd.grad(loss, lp)
    return loss, metrics, grad


def check(verl_loss: str, case: dict, loss, metrics, grad) -> None:
    close(loss, case["loss"], atol=LOSS_ATOL)
    if "grad_log_prob" in case:
        close(grad, case["grad_log_prob"])
    for verl_metric, ours in METRICS[verl_loss].items():
        if verl_metric not in case:
            continue
        if ours is None:
            assert case[verl_metric] == 0.0, (verl_metric, case[verl_metric])
        else:
            close(metrics[ours], case[verl_metric])


POLICY_CASES = [
    (loss, label, agg_key)
    for loss, block in REF["policy_losses"].items() if loss in VERL_NAME
    for label, variant in block.items() if isinstance(variant, dict) and "config" in variant
    for agg_key in variant if agg_key in AGG
]


def test_every_policy_loss_block_is_visited():
    registered = set(REF["policy_losses"]["registry_keys"])
    covered = {k for k, _, _ in POLICY_CASES} | set(REF["policy_losses"]["covered_elsewhere"])
    assert registered <= covered | {"bypass_mode"}, registered - covered
    assert len(POLICY_CASES) == 9 * 2 * 6 - 6  # 9 losses x 2 configs x 6 modes, gpg has one config


@pytest.mark.parametrize("verl_loss,label,agg_key", POLICY_CASES, ids=["/".join(c) for c in POLICY_CASES])
def test_policy_loss_matches_verl(verl_loss, label, agg_key):
    variant = REF["policy_losses"][verl_loss][label]
    loss, metrics, grad = run(settings(verl_loss, variant["config"]), variant["log_prob"], agg_key)
    check(verl_loss, variant[agg_key], loss, metrics, grad)


IS_CASES = [k for k, v in REF["policy_losses_with_is_weights"].items() if isinstance(v, dict) and "loss" in v]


@pytest.mark.parametrize("verl_loss", IS_CASES)
def test_policy_loss_with_is_weights_matches_verl(verl_loss):
    sec = REF["policy_losses_with_is_weights"]
    assert sec["loss_agg_mode"] == "token-mean"
    src = sec["rollout_is_weights"]  # "rollout_correction['<preset>'].rollout_is_weights"
    preset = src.split("['", 1)[1].split("']", 1)[0]
    w = t(REF["rollout_correction"][preset]["rollout_is_weights"])  # (B, T) token TIS at 2.0
    case = sec[verl_loss]
    loss, metrics, grad = run(settings(verl_loss, case["config"]), case["log_prob"], "token-mean", is_weights=w)
    check(verl_loss, case, loss, metrics, grad)
    assert len(IS_CASES) == 11


KL_CASES = [k for k, v in REF["kl_extra"].items() if isinstance(v, dict)]


@pytest.mark.parametrize("kind", KL_CASES)
def test_kl_extra_matches_verl(kind):
    case = REF["kl_extra"][kind]
    lp = t(INP["log_prob"]).requires_grad_()
    k = algos.kl_penalty(lp, t(INP["ref_log_prob"]), kind)  # (B, T)
    close(k * MASK, case["per_token_masked"])
    value = algos.aggregate(k, MASK, "token-mean")
    close(value, case["token_mean"])
    (grad,) = torch.autograd.grad(value, lp)
    close(grad, case["grad_token_mean_wrt_log_prob"])


def test_cov_selection_is_the_same_for_a_split_step():
    """KL-Cov / Clip-Cov select over the whole step when given every micro-batch (micro-batch invariance)."""
    lp, old = t(INP["log_prob"]), t(INP["old_log_prob"])
    adv = ADV[:, None].expand_as(lp) * MASK
    for loss, cfg in (("kl_cov", dict(cov_ratio=0.1)), ("clip_cov", dict(cov_ratio=0.2, clip_cov_lb=0.5))):
        p = loss_algo(eps_low=0.2, eps_high=0.28, **cfg)
        whole = algos.objectives.cov_select([(lp * MASK, old * MASK, adv, MASK)], loss, p)[0]
        parts = [(lp[i:j] * MASK[i:j], old[i:j] * MASK[i:j], adv[i:j], MASK[i:j]) for i, j in ((0, 5), (5, 9), (9, 12))]
        split = torch.cat(algos.objectives.cov_select(parts, loss, p))
        assert torch.equal(whole, split), loss
        assert int(whole.sum()) > 0
