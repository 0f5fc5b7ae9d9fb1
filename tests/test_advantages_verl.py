"""rewardlab.algos.advantages against verl 0.9.1's own outputs (../shared/fixtures/verl_reference_v2.json).

Every variant of every advantage estimator in ``adv_estimators`` (advantages, returns and, where
dumped, ``per_seq`` = advantages[:, 0]) and every ``value_loss`` block (vf_loss, vf_clipfrac and
d vf_loss / d vpreds under each aggregation key) is compared in float64 at rtol 1e-6. The cases
are generated from the JSON's keys, so a variant added to the fixture becomes a test here (and an
estimator section nobody handles fails ``test_every_estimator_section_is_handled``).
Both tensors are compared at every position, padding included: verl's GAE leaves values there
(whitened advantages not re-masked, returns = A + junk values) and so does this implementation.
"""

from __future__ import annotations


import pytest
import torch

import verl_fixtures

from rewardlab.algos import advantages as adv_mod
from rewardlab.algos.value import value_loss

F64 = torch.float64
RTOL = 1e-6

# No atol anywhere: every comparison is rtol 1e-6 with atol 0 (verl's exact zeros at padding and in
# tied/all-equal groups are exact zeros here too). Measured residues, all inside rtol:
# * gdpo two_rewards: verl builds each keyed reward component and its GRPO statistics in float32
#   (then casts to float64), so it is float32-accurate only: 1.3e-7 relative at most. We stay in
#   float64; if this ever needed an atol it would be that float32 residue, nothing else.
# * gpg: verl's alpha = B / count_nonzero(s) is an int tensor division, i.e. float32
#   (1.2 -> 1.2000000477): 4.0e-8 relative. We compute alpha in float64.
# * OTB / TIR-OTB with IS weights: summation order only, < 1e-15 relative.
# * vf_clipfrac: verl divides by N + 1e-8, we by N: 1.8e-10 relative.
ATOL = 0.0




REF = verl_fixtures.load("verl_reference_v2.json")
INP = REF["inputs"]
ADV = REF["adv_estimators"]
VL = REF["value_loss"]


t = verl_fixtures.t


MASK = t(INP["response_mask"])
HOLES = t(INP["response_mask_holes"])
TLR = t(INP["token_level_rewards"])
DENSE = t(ADV["rewards_dense"]["values"])
VALUES = t(INP["values"])
UIDS = INP["uids"]
T_PAD = int(INP["T"])
TIS_W = t(REF["rollout_correction"]["decoupled_token_is(threshold=2.0)"]["rollout_is_weights"])

REWARDS = {"outcome": (TLR, MASK), "dense": (DENSE, MASK), "outcome_mask_holes": (TLR, HOLES)}
MASKS = {"response_mask": MASK, "response_mask_holes": HOLES}
IS_WEIGHTS = {"token_tis_2.0": TIS_W}
NOT_ESTIMATORS = {"registry_keys", "rewards_dense"}


def _resolve(ref: str) -> torch.Tensor:
    """A fixture reference string such as ``inputs.seq_rewards`` or ``rewards_dense.values``."""
    if ref.startswith("inputs."):
        return t(INP[ref.removeprefix("inputs.")])
    if ref == "rewards_dense.values":
        return DENSE
    raise KeyError(f"unknown fixture reference {ref!r}")


def _settings(path: tuple[str, ...]) -> dict[str, str]:
    """``("rewards=outcome", "gamma=1.0,lam=0.95")`` -> ``{"rewards": "outcome", "gamma": "1.0", ...}``."""
    out: dict[str, str] = {}
    for part in path:
        for item in part.split(","):
            key, sep, value = item.partition("=")
            out[key] = value if sep else ""
    return out


def _reward_and_mask(s: dict[str, str]) -> tuple[torch.Tensor, torch.Tensor]:
    r, m = REWARDS[s.pop("rewards")]
    if "mask" in s:
        m = MASKS[s.pop("mask")]
    return r, m


def _bool(v: str) -> bool:
    return {"True": True, "False": False}[v]


def _run(est: str, path: tuple[str, ...], case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Call this implementation the way the fixture script called verl for ``est`` / ``path``."""
    s = _settings(path)
    if est == "gae":
        r, m = _reward_and_mask(s)
        block = ADV["gae"][path[0]]
        assert torch.equal(_resolve(block["token_level_rewards"]), r)  # the block says which inputs verl got
        assert torch.equal(_resolve(block["response_mask"]), m)
        out = adv_mod.gae(r, _resolve(ADV["gae"]["values"]), m, gamma=float(s.pop("gamma")), lam=float(s.pop("lam")))
    elif est == "reinforce_plus_plus":
        r, m = _reward_and_mask(s)
        out = adv_mod.reinforce_pp(r, m, gamma=float(s.pop("gamma")))
    elif est == "reinforce_plus_plus_baseline":
        r, m = _reward_and_mask(s)
        out = adv_mod.reinforce_pp_baseline(r, m, UIDS)
    elif est == "rloo":
        out = adv_mod.rloo(TLR, MASK, UIDS)
    elif est == "opo":
        out = adv_mod.opo(TLR, MASK, UIDS)
    elif est == "grpo_passk":
        out = adv_mod.grpo_passk(TLR, MASK, UIDS, norm_by_std=_bool(s.pop("norm_adv_by_std_in_grpo")),
                                 eps=ADV["grpo_passk"]["epsilon"])
    elif est == "gpg":
        out = adv_mod.gpg_advantage(TLR, MASK, UIDS, f_norm=case["f_norm"])
    elif est == "remax":
        out = adv_mod.remax(TLR, MASK, _resolve(case["reward_baselines"]))
    elif est == "gdpo":
        if "single_reward_fallback" in s:
            s.pop("single_reward_fallback")
            out = adv_mod.gdpo(TLR, MASK, UIDS)
        else:
            s.pop("two_rewards")
            keys = case["gdpo_reward_keys"]
            comps = {k: _resolve(case[k]) for k in keys}
            out = adv_mod.gdpo(TLR, MASK, UIDS, components=comps, weights=dict(zip(keys, case["gdpo_reward_weights"])))
    elif est in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        r, m = _reward_and_mask(s)
        w = IS_WEIGHTS[s.pop("rollout_is_weights")] if "rollout_is_weights" in s else None
        fn = adv_mod.optimal_token_baseline if est == "optimal_token_baseline" else adv_mod.tir_optimal_token_baseline
        sec = ADV[est]
        out = fn(r, m, UIDS, _resolve(sec["old_log_probs"]), _resolve(sec["sum_pi_squared"]), rollout_is_weights=w,
                 handle_zero_tail=sec["handle_zero_tail"], eps=sec["epsilon"])
    else:
        raise KeyError(f"no runner for estimator section {est!r}")
    assert not s, f"unparsed settings {s} in {path}"  # every part of the variant key was applied
    return out


HANDLED = {"gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo", "opo", "grpo_passk", "gpg",
           "remax", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline"}


def _cases(node: dict, path: tuple[str, ...] = ()):
    if "advantages" in node:
        yield path, node
        return
    for k, v in node.items():
        if isinstance(v, dict):
            yield from _cases(v, path + (k,))


CASES = [(est, path, case) for est, block in ADV.items() if est not in NOT_ESTIMATORS
         for path, case in _cases(block)]


def test_fixture_is_float64_verl_091():
    assert REF["meta"]["verl_version"] == "0.9.1"
    assert REF["meta"]["dtype"] == "torch.float64"


def test_every_estimator_section_is_handled():
    assert set(ADV) - NOT_ESTIMATORS == HANDLED
    # every section yields at least one case, and the count is what the fixture holds
    per_section = {est: sum(1 for e, _, _ in CASES if e == est) for est in HANDLED}
    assert all(n > 0 for n in per_section.values()), per_section
    assert per_section["gae"] == 12 and per_section["reinforce_plus_plus"] == 6
    assert len(CASES) == 34


def test_dense_rewards_input():
    """The dumped dense rewards are tlr - 0.1 (old - ref) on valid tokens (a check of the input)."""
    old, ref = t(INP["old_log_prob"]), t(INP["ref_log_prob"])
    torch.testing.assert_close((TLR - 0.1 * (old - ref)) * MASK, DENSE, rtol=RTOL, atol=ATOL)


def test_outcome_token_rewards_rebuilds_fixture_rewards():
    out = adv_mod.outcome_token_rewards(t(INP["seq_rewards"]), MASK)
    assert torch.equal(out, TLR)
    assert torch.equal(adv_mod.outcome_token_rewards(t(INP["seq_rewards"]), HOLES), TLR)  # last token unchanged


@pytest.mark.parametrize(("est", "path", "case"), CASES, ids=["/".join((e,) + p) for e, p, _ in CASES])
def test_estimator_matches_verl(est, path, case):
    a, r = _run(est, path, case)
    assert a.dtype == F64 and r.dtype == F64
    torch.testing.assert_close(a, t(case["advantages"]), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(r, t(case["returns"]), rtol=RTOL, atol=ATOL)
    if "per_seq" in case:
        torch.testing.assert_close(a[:, 0], t(case["per_seq"]), rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------
# value loss
# ----------------------------------------------------------------------------------------------


def _agg(key: str) -> tuple[str, int | None]:
    """Aggregation key -> (agg, max_len): verl's default sum-norm constant is the padded width T."""
    mode, _, lsf = key.partition("@loss_scale_factor=")
    if lsf:
        return mode, int(lsf)
    return mode, (T_PAD if mode == "seq-mean-token-sum-norm" else None)


VL_CASES = [(ck, ak, VL[ck][ak]) for ck in VL if ck.startswith("cliprange_value=") for ak in VL[ck]]


def test_value_loss_cases_cover_every_mode():
    clips = {ck for ck, _, _ in VL_CASES}
    assert clips == {"cliprange_value=0.5", "cliprange_value=0.2"}
    for ck in clips:
        assert list(VL[ck]) == REF["meta"]["loss_agg_modes"]
    assert len(VL_CASES) == 12


def test_value_loss_returns_are_our_gae_returns():
    _, ret = adv_mod.gae(TLR, VALUES, MASK, gamma=1.0, lam=0.95)
    assert VL["returns_source"] == "adv_estimators.gae['rewards=outcome']['gamma=1.0,lam=0.95'].returns"
    torch.testing.assert_close(ret, t(VL["returns"]), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("clip_key", "agg_key", "case"), VL_CASES, ids=[f"{c}/{a}" for c, a, _ in VL_CASES])
def test_value_loss_matches_verl(clip_key, agg_key, case):
    clip = float(clip_key.removeprefix("cliprange_value="))
    agg, max_len = _agg(agg_key)
    vp = _resolve(VL["vpreds"]).clone().requires_grad_(True)
    loss, metrics = value_loss(vp, _resolve(VL["values"]), t(VL["returns"]), MASK, cliprange=clip,
                                       agg=agg, max_len=max_len)
    loss.backward()
    torch.testing.assert_close(loss.detach(), t(case["vf_loss"]), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(metrics["vf_loss"], t(case["vf_loss"]), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(metrics["vf_clipfrac"], t(case["vf_clipfrac"]), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(vp.grad, t(case["grad_vpreds"]), rtol=RTOL, atol=ATOL)
