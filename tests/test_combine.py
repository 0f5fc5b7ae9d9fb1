"""Combined rewards: weighted sum, None skipped (not 0), failures counted by status, pickling, metrics."""

from __future__ import annotations

import math
import pickle

import pytest

from rewardlab.rewards.base import RewardResult
from rewardlab.rewards.combine import Combined, reward_metrics
from rewardlab.rewards.format import OneAnswer
from rewardlab.rewards.length import Overlong


def exact(completion: str, reference, **meta) -> RewardResult:
    """1/0 exact match; None when there is no reference (not gradable)."""
    if reference is None:
        return RewardResult(None, {"status": "no_reference"})
    return RewardResult(float(completion.strip().endswith(str(reference))), {})


def broken(completion: str, reference, **meta) -> RewardResult:
    raise RuntimeError("grader bug")


def nan_reward(completion: str, reference, **meta) -> RewardResult:
    return RewardResult(float("nan"), {})


def plain_float(completion: str, reference, **meta) -> float:
    return 0.25


def test_weighted_sum_and_components():
    c = Combined({"exact": (exact, 1.0), "one": (OneAnswer(), 0.1), "overlong": (Overlong(20, 8), 1.0)})
    r = c(r"\boxed{4}", "4}", completion_tokens=16)
    assert r.score == pytest.approx(1.0 + 0.1 - 0.5)
    assert r.info["components"] == {"exact": 1.0, "one": 1.0, "overlong": -0.5}
    assert r.info["component_info"]["one"]["reason"] == "one_answer"
    assert r.info["status_counts"] == {"ok": 3}
    assert r.ok


def test_none_component_is_skipped_not_zero():
    c = Combined({"exact": (exact, 1.0), "one": (OneAnswer(), 0.5)})
    r = c(r"\boxed{4}", None)  # exact has no reference: skipped, the total is the format part only
    assert r.score == pytest.approx(0.5)
    assert r.info["components"]["exact"] is None
    assert r.info["status_counts"] == {"ok": 1, "no_reference": 1}
    all_none = Combined({"exact": exact})(r"\boxed{4}", None)
    assert all_none.score is None and all_none.status == "no_reference"
    mixed = Combined({"exact": exact, "overlong": Overlong(10, 2)})("x", None)
    assert mixed.score is None and mixed.status == "no_component_graded"


def test_failures_counted_and_isolated():
    c = Combined({"bad": (broken, 1.0), "nan": (nan_reward, 1.0), "one": (OneAnswer(), 1.0), "f": (plain_float, 2.0)})
    r = c(r"\boxed{1}", None)
    assert r.score == pytest.approx(1.0 + 0.5)
    assert r.info["components"]["bad"] is None and r.info["components"]["nan"] is None
    assert r.info["status_counts"] == {"error": 1, "non_finite": 1, "ok": 2}
    assert "grader bug" in r.info["component_info"]["bad"]["error"]


def test_list_form_names_and_registry_names():
    c = Combined([exact, "one_answer"])
    assert c.names == ["exact", "one_answer"]
    assert c(r"\boxed{4}", "4}").score == pytest.approx(2.0)
    with pytest.raises(ValueError):
        Combined({})
    with pytest.raises(ValueError):
        Combined({"x": (exact, float("inf"))})
    with pytest.raises(TypeError):
        Combined({"x": (3, 1.0)})


def test_picklable_and_same_results():
    c = Combined({"exact": (exact, 1.0), "one": ("one_answer", 0.1), "overlong": (Overlong(20, 8), 1.0)}, name="mix")
    c(r"\boxed{4}", "4}")  # resolves the registry name; pickling must drop the cache
    clone = pickle.loads(pickle.dumps(c))
    assert clone.name == "mix"
    for text, meta in [(r"\boxed{4}", {"completion_tokens": 18}), ("no", {})]:
        assert clone(text, "4}", **meta).to_dict() == c(text, "4}", **meta).to_dict()
    assert "Combined(" in repr(clone)


def test_metrics_keys():
    c = Combined({"exact": exact, "one": OneAnswer()})
    results = [c(r"\boxed{4}", "4}"), c(r"\boxed{5}", "4}"), c("nothing", None)]
    m = c.metrics(results)
    assert m["rewards/exact/mean"] == pytest.approx(0.5)  # mean over the two graded samples
    assert m["rewards/exact/graded_frac"] == pytest.approx(2 / 3)
    assert m["rewards/exact/status/no_reference"] == 1.0
    assert m["rewards/one/mean"] == pytest.approx(2 / 3)
    assert not any(k.endswith("/status/ok") for k in m)
    empty = reward_metrics({"x": [RewardResult(None, {"status": "timeout"})]})
    assert math.isnan(empty["rewards/x/mean"]) and empty["rewards/x/status/timeout"] == 1.0


def test_isolated_only_when_every_component_is():
    class Iso:
        isolated = True
        name = "iso"

        def __call__(self, completion, reference, **meta):
            return RewardResult(1.0, {})

    assert Combined({"a": Iso(), "b": Iso()}).isolated
    assert Combined({"a": Iso(), "b": OneAnswer()}).isolated  # cheap component with a fast path
    assert not Combined({"a": Iso(), "b": exact}).isolated  # arbitrary user code: worker processes
    assert not Combined({"a": OneAnswer(), "b": Overlong(4, 2)}).isolated  # nothing isolated


def test_fast_path_decides_only_when_every_component_does():
    cheap = Combined({"one": OneAnswer(), "overlong": (Overlong(20, 8), 1.0)})
    fast = cheap.fast(r"\boxed{2}", None, completion_tokens=16)
    assert fast is not None and fast.to_dict() == cheap(r"\boxed{2}", None, completion_tokens=16).to_dict()
    assert Combined({"one": OneAnswer(), "exact": exact}).fast(r"\boxed{2}", "2}") is None
