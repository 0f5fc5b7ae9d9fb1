"""``rewardlab.algos.correction`` against verl 0.9.1's rollout correction, number for number, in float64.

Sections of ``../shared/fixtures/verl_reference_v2.json`` (see ``verl_reference_v2.md``, quirks 8-10):

* ``rollout_correction`` (decoupled mode, ``rch.compute_rollout_correction_and_rejection_mask`` at
  ``old_log_prob`` vs ``rollout_log_prob``): per block the IS weights, the RS-modified mask, every
  verl metric (the key sets must be equal), and ``vanilla_loss:<mode>`` = PPO (0.2/0.28, c = 3) on
  the modified mask times the weights, with d loss / d log_prob;
* ``bypass_mode`` (``core_algos.compute_policy_loss_bypass_mode``, old := rollout): per block the
  weights and mask at ``log_prob`` vs ``rollout_log_prob``, and under every aggregation mode the
  loss, its gradient, the loss metrics and every rollout-correction metric.

The ids come from the JSON's keys, and the block counts are asserted, so nothing is skipped silently.
Our weights and masks (not the fixture's) feed our losses, so each loss checks the whole chain.

Tolerances: rtol 1e-6 everywhere. verl's masked means divide by ``sum(m) + 1e-8`` (per row
``n_i + 1e-8``) and some of its fractions are float32 means; we divide by plain counts in float64.
That moves a number by at most ~3e-8 relative (a one-token row's mean, a float32 fraction), far
inside rtol. ATOL (1e-12) only covers exact zeros; unlike ``tests/test_objectives_verl.py`` no loss
needs a larger atol here, since the smallest loss of these sections is 6e-3 in size.
"""

from __future__ import annotations

import ast
from dataclasses import fields

import pytest
import torch

import verl_fixtures

from rewardlab import algos
from rewardlab.algos import correction
from algo_cases import bypass_with, loss_with

RTOL = 1e-6
ATOL = 1e-12
F64 = torch.float64




REF = verl_fixtures.load("verl_reference_v2.json")
INP = REF["inputs"]
T = INP["T"]
RC = REF["rollout_correction"]
BP = REF["bypass_mode"]


t = verl_fixtures.t


def close(actual, expected, atol: float = ATOL, what: str = "") -> None:
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), t(expected), rtol=RTOL, atol=atol,
                               msg=lambda m: f"{what}: {m}")


MASK = t(INP["response_mask"])
OLD = t(INP["old_log_prob"])
LOGP = t(INP["log_prob"])
ROLLOUT = t(INP["rollout_log_prob"])
ADV = algos.group_advantages(t(INP["seq_rewards"]), INP["uids"], scale="std")  # (B,) verl's GRPO advantages

AGG = verl_fixtures.aggregations(T)
PPO = dict(eps_low=0.2, eps_high=0.28, clip_ratio_c=3.0)  # the fixture's ActorConfig (ppo_clip_config)
LOSS_METRICS = {"pg_clipfrac": "clip_frac", "pg_clipfrac_lower": "dual_clip_frac", "ppo_kl": "approx_kl_old"}
"""verl ``actor/*`` metric -> ours (``policy_loss``)."""
NOT_METRICS = {"loss", "grad_log_prob"}


def from_verl(config: dict) -> correction.Correction:
    """Our setting for a dumped ``RolloutCorrectionConfig``."""
    return correction.Correction(
        is_level=config["rollout_is"], is_threshold=config["rollout_is_threshold"],
        batch_normalize=config["rollout_is_batch_normalize"], rs=config["rollout_rs"],
        rs_threshold=config["rollout_rs_threshold"], bypass=config["bypass_mode"], bypass_loss=config["loss_type"],
    )


def preset_call(label: str) -> tuple[str, dict] | None:
    """``"decoupled_token_icepop(threshold=5.0,threshold_lower=0.5)"`` -> our preset name and field overrides."""
    if "(" not in label:
        return None
    name, rest = label.split("(", 1)
    if name not in correction.PRESETS:
        return None
    call = ast.parse(f"f({rest.split(')', 1)[0]})", mode="eval").body
    args = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    if "threshold_lower" in args:  # IcePop presets: verl writes f"{threshold_lower}_{threshold}"
        return name, {"is_threshold": f"{args['threshold_lower']}_{args['threshold']}"}
    rename = {"threshold": "is_threshold", "is_threshold": "is_threshold", "rs_threshold": "rs_threshold"}
    return name, {rename[k]: v for k, v in args.items()}


def _blocks(section: dict) -> list[str]:
    return [k for k, v in section.items() if isinstance(v, dict) and "config" in v]


RC_BLOCKS = _blocks(RC)
BP_BLOCKS = _blocks(BP)
RC_LOSS_CASES = [(label, key.split(":", 1)[1]) for label in RC_BLOCKS for key in RC[label]
                 if key.startswith("vanilla_loss:")]
BP_LOSS_CASES = [(label, mode) for label in BP_BLOCKS for mode in BP[label] if mode in AGG]


def test_every_block_is_visited():
    assert len(RC_BLOCKS) == 15 + 12  # 15 configs and presets + 12 RS-only options
    assert len(BP_BLOCKS) == 10
    # disabled() has no loss; 14 configs with IS or RS under 6 modes; RS-only under token-mean
    assert len(RC_LOSS_CASES) == 14 * 6 + 12
    assert len(BP_LOSS_CASES) == 10 * 6
    assert {mode for _, mode in RC_LOSS_CASES + BP_LOSS_CASES} == set(AGG) == set(REF["meta"]["loss_agg_modes"])
    for label in RC_BLOCKS:  # no key of a block goes unread
        assert set(RC[label]) - {"config", "rollout_is_weights", "modified_response_mask", "metrics"} == {
            f"vanilla_loss:{mode}" for lab, mode in RC_LOSS_CASES if lab == label}, label
    for label in BP_BLOCKS:
        assert set(BP[label]) == {"config", "rollout_is_weights", "modified_response_mask", *AGG}, label


def test_constants_match_verl():
    assert sorted(correction.RS_OPTIONS) == RC["rs_options_supported"]
    assert correction.SAFETY_BOUND == RC["safety_bound"]
    assert [f.name for f in fields(correction.Correction)] == list(correction.FIELDS)


def test_every_preset_is_in_the_fixture_and_matches_its_config():
    seen = set()
    for section in (RC, BP):
        for label in _blocks(section):
            call = preset_call(label)
            if call is None:
                continue
            name, overrides = call
            assert correction.preset(name, **overrides) == from_verl(section[label]["config"]), label
            seen.add(name)
    assert seen == set(correction.PRESETS)  # all 19 of verl's presets


def check_correction(block: dict, weights, modified, metrics, expected_metrics: dict) -> None:
    if block["rollout_is_weights"] is None:
        assert weights is None
    else:
        assert weights is not None and weights.dtype == F64
        close(weights, block["rollout_is_weights"], what="rollout_is_weights")
    assert modified.dtype == MASK.dtype
    assert torch.equal(modified, t(block["modified_response_mask"]))
    assert set(metrics) == set(expected_metrics)
    for name, value in expected_metrics.items():
        close(metrics[name], value, what=name)


@pytest.mark.parametrize("label", RC_BLOCKS)
def test_rollout_correction_matches_verl(label):
    block = RC[label]
    c = from_verl(block["config"])
    weights, modified, metrics = correction.correct(OLD, ROLLOUT, MASK, c)
    check_correction(block, weights, modified, metrics, block["metrics"])
    expected_offpolicy = {k: v for k, v in block["metrics"].items() if not k.startswith(("rollout_is", "rollout_rs"))}
    got = correction.offpolicy_metrics(OLD, ROLLOUT, MASK)
    assert set(got) == set(expected_offpolicy)
    for name, value in expected_offpolicy.items():
        close(got[name], value, what=name)


@pytest.mark.parametrize("label,mode", RC_LOSS_CASES, ids=[f"{lab}/{mode}" for lab, mode in RC_LOSS_CASES])
def test_rollout_correction_loss_matches_verl(label, mode):
    case = RC[label][f"vanilla_loss:{mode}"]
    weights, modified, _ = correction.correct(OLD, ROLLOUT, MASK, from_verl(RC[label]["config"]))
    lp = LOGP.clone().requires_grad_()
    agg, max_len = AGG[mode]
    loss, metrics = loss_with(lp, OLD, ADV, modified, loss="ppo", agg=agg, max_len=max_len,
                                      is_weights=weights, **PPO)
    (grad,) = torch.autograd.grad(loss, lp)
    close(loss, case["loss"], what="loss")
    close(grad, case["grad_log_prob"], what="grad_log_prob")
    assert set(case) - NOT_METRICS == set(LOSS_METRICS)
    for verl_name, ours in LOSS_METRICS.items():
        close(metrics[ours], case[verl_name], what=verl_name)


@pytest.mark.parametrize("label", BP_BLOCKS)
def test_bypass_weights_and_mask_match_verl(label):
    block = BP[label]
    c = from_verl(block["config"])
    assert c.bypass
    weights, modified, metrics = correction.correct(LOGP, ROLLOUT, MASK, c)  # pi_theta vs pi_rollout
    expected = {k: v for k, v in block["token-mean"].items() if k not in NOT_METRICS and k not in LOSS_METRICS}
    check_correction(block, weights, modified, metrics, expected)


@pytest.mark.parametrize("label,mode", BP_LOSS_CASES, ids=[f"{lab}/{mode}" for lab, mode in BP_LOSS_CASES])
def test_bypass_loss_matches_verl(label, mode):
    block = BP[label]
    case = block[mode]
    c = from_verl(block["config"])
    lp = LOGP.clone().requires_grad_()
    agg, max_len = AGG[mode]
    loss, metrics, corr = bypass_with(lp, ROLLOUT, ADV, MASK, c, agg=agg, max_len=max_len, **PPO)
    (grad,) = torch.autograd.grad(loss, lp)
    close(loss, case["loss"], what="loss")
    close(grad, case["grad_log_prob"], what="grad_log_prob")
    loss_keys = {"ppo_kl"} if c.bypass_loss == "reinforce" else set(LOSS_METRICS)
    assert set(case) - NOT_METRICS == loss_keys | set(corr)  # every metric verl reports, nothing more
    for verl_name in loss_keys:
        close(metrics[LOSS_METRICS[verl_name]], case[verl_name], what=verl_name)
    for name, value in corr.items():
        close(value, case[name], what=name)
