"""The batch API and its worker pool: order, deadlines, errors, pickling once, isolation, shutdown."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rewardlab.rewards.base import RewardResult
from rewardlab.rewards.pool import WorkerPool, ascore_batch, get_pool, score_batch


def echo_reward(completion, reference, **meta) -> RewardResult:
    """Score 1 when completion == reference; reports the worker pid and meta."""
    return RewardResult(float(completion == reference), {"status": "ok", "pid": os.getpid(), "meta": meta})


def sleepy_reward(completion, reference, **meta) -> RewardResult:
    """Sleeps ``completion`` seconds (a stand-in for a pathological input)."""
    time.sleep(float(completion))
    return RewardResult(1.0, {"status": "ok"})


def raising_reward(completion, reference, **meta) -> RewardResult:
    if completion == "boom":
        raise ValueError("kaboom")
    return RewardResult(1.0, {"status": "ok"})


def plain_float_reward(completion, reference, **meta) -> float:
    return 0.5


def trl_style_reward(completion, reference, **meta):
    """Returns what TRL-style functions return: a bool, None (not gradable) or, wrongly, a string."""
    return {"yes": True, "skip": None}.get(completion, "oops")


class CountingReward:
    """Counts its unpickles in the worker, to check that the reward crosses once per worker."""

    name = "counting"
    loads = 0

    def __init__(self) -> None:
        self.tag = "x"  # non-empty state, so unpickling calls __setstate__

    def __setstate__(self, state) -> None:
        type(self).loads += 1
        self.__dict__.update(state)

    def __call__(self, completion, reference, **meta) -> RewardResult:
        return RewardResult(float(type(self).loads), {"status": "ok", "pid": os.getpid()})


class ThreadReward:
    isolated = True
    name = "threaded"

    def __call__(self, completion, reference, **meta) -> RewardResult:
        return RewardResult(1.0, {"status": "ok", "pid": os.getpid()})


def test_results_in_input_order_and_meta_passed() -> None:
    comps = [str(i) for i in range(40)]
    refs = [str(i) if i % 3 else "x" for i in range(40)]
    metas = [{"i": i} for i in range(40)]
    out = score_batch(echo_reward, comps, refs, metas, deadline=5.0)
    assert [r.score for r in out] == [0.0 if i % 3 == 0 else 1.0 for i in range(40)]
    assert [r.info["meta"]["i"] for r in out] == list(range(40))
    assert all(r.info["pid"] != os.getpid() for r in out)


def test_timeout_kills_and_replaces_the_worker() -> None:
    pool = get_pool()
    pool.warmup()
    t = time.monotonic()
    out = score_batch(sleepy_reward, ["30", "0", "30", "0"], ["", "", "", ""], deadline=0.5)
    took = time.monotonic() - t
    assert [r.info["status"] for r in out] == ["timeout", "ok", "timeout", "ok"]
    assert out[0].score == 0.0 and out[0].info["deadline_s"] == 0.5
    assert took < 20  # nothing waited for the 30 s sleeps
    assert score_batch(echo_reward, ["a"], ["a"])[0].score == 1.0  # the pool still works


def test_exceptions_become_error_results() -> None:
    out = score_batch(raising_reward, ["ok", "boom", "ok"], ["", "", ""])
    assert [r.info["status"] for r in out] == ["ok", "error", "ok"]
    assert "kaboom" in out[1].info["error"]


def test_plain_float_return_is_wrapped() -> None:
    out = score_batch(plain_float_reward, ["a", "b"], ["a", "b"])
    assert [r.score for r in out] == [0.5, 0.5] and out[0].info["status"] == "ok"


def test_reward_is_unpickled_once_per_worker() -> None:
    pool = WorkerPool(max_workers=1)
    try:
        assert pool.warmup()
        scores = []
        for c in "abcdef":
            out = pool.call(CountingReward(), (c, c), deadline=5.0, key="fixed",
                            payload=__import__("pickle").dumps(CountingReward()))
            status, value = out.status, out.value
            assert status == "ok"
            scores.append(value.score)
        assert scores == [1.0] * 6
    finally:
        pool.shutdown()


def test_isolated_rewards_run_in_threads_here() -> None:
    out = score_batch(ThreadReward(), ["a", "b", "c"], ["", "", ""])
    assert all(r.info["pid"] == os.getpid() for r in out)


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError):
        score_batch(echo_reward, ["a"], ["a", "b"])


def test_unpicklable_reward_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot be pickled"):
        score_batch(lambda c, r: RewardResult(1.0), ["a"], ["a"])


def test_ascore_batch() -> None:
    out = asyncio.run(ascore_batch(echo_reward, ["a", "b"], ["a", "c"]))
    assert [r.score for r in out] == [1.0, 0.0]


def test_worker_pool_shutdown_leaves_no_processes() -> None:
    pool = WorkerPool(max_workers=2)
    pool.warmup()
    pids = pool.pids()
    assert len(pids) == 2
    pool.shutdown()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_script_without_main_guard_is_not_rerun_and_exits_cleanly(tmp_path) -> None:
    """A trainer script with no __main__ guard: workers must not re-run it, and exit must not hang."""
    marker = tmp_path / "runs.txt"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        from rewardlab.rewards import math_reward, score_batch
        from rewardlab.rewards.pool import get_pool
        open({str(marker)!r}, "a").write("run\\n")
        assert get_pool().warmup()
        out = score_batch(math_reward, ["\\\\boxed{{\\\\sin(\\\\pi/6)}}", "\\\\boxed{{2}}"], ["\\\\frac12", "3"])
        print([r.score for r in out])
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1.0, 0.0]"
    assert marker.read_text() == "run\n"


def test_forked_child_gets_its_own_pool() -> None:
    """A fork-started child (DataLoader-style) must not reuse the parent's worker pipes."""
    import multiprocessing as mp

    from rewardlab.rewards import math_reward

    get_pool().warmup(1)
    parent_pool = get_pool()
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child() -> None:
        get_pool().warmup()  # a fresh pool (spawned, cold): its first calls would wait for it
        r = math_reward("$\\boxed{\\sin(\\pi/6)}$", "\\frac12")
        q.put((r.score, get_pool() is not parent_pool))

    p = ctx.Process(target=child)
    p.start()
    score, fresh = q.get(timeout=120)
    p.join(timeout=30)
    assert score == 1.0 and fresh
    assert math_reward("$\\boxed{\\sin(\\pi/6)}$", "\\frac12").score == 1.0  # the parent's pool still works


def test_bare_returns_are_read_the_same_everywhere() -> None:
    """pool, Combined and the adapters share one reading of bool / None / junk returns."""
    from rewardlab.adapters._common import safe_call
    from rewardlab.rewards.combine import Combined

    def summary(rs):
        return [(r.score, r.info["status"]) for r in rs]

    items = ["yes", "skip", "junk"]
    pooled = summary(score_batch(trl_style_reward, items, ["", "", ""]))
    assert pooled == [(1.0, "ok"), (None, "no_score"), (0.0, "error")]  # the pool pays 0 on errors
    adapted = summary(safe_call(trl_style_reward, c, "", {}) for c in items)
    assert adapted == [(1.0, "ok"), (None, "no_score"), (None, "error")]  # adapters report None
    combined = Combined({"t": trl_style_reward})
    assert [combined(x, "").info["component_info"]["t"]["status"] for x in items] == ["ok", "no_score", "error"]


# ------------------------------------------------------------------ the execution protocol (rewards/base.py)
SLOW_PRED, SLOW_GOLD = "\\boxed{\\arcsin(1/2)}", "\\frac{\\pi}{6}"  # undecided by math_reward.fast: sympy decides


class IsolatedOk:
    """An isolated component: it makes the Combined below run in threads of this process."""

    isolated = True
    name = "iso"

    def __call__(self, completion, reference, **meta) -> RewardResult:
        return RewardResult(1.0)


class StagedReward:
    """fast decides "fast:*" here; slow (in a worker) reports its pid; __call__ would raise if used."""

    name = "staged"
    timeout_score = -1.0

    def fast(self, completion, reference, **meta):
        return RewardResult(1.0, {"where": "fast"}) if completion.startswith("fast:") else None

    def slow(self, completion, reference, **meta):
        if completion == "hang":
            time.sleep(30)
        return RewardResult(0.5, {"where": "slow", "pid": os.getpid()})

    def __call__(self, completion, reference, **meta):
        raise AssertionError("the pool runs fast and slow, never the whole call of a staged reward")


def test_the_pool_runs_fast_here_and_slow_in_a_worker() -> None:
    from rewardlab.rewards.pool import score_one

    get_pool().warmup(1)
    out = score_batch(StagedReward(), ["fast:a", "b", "hang"], ["", "", ""], deadline=1.0, wall_cap=2.0)
    assert [r.info.get("where") for r in out[:2]] == ["fast", "slow"]
    assert out[1].info["pid"] != os.getpid() and out[1].score == 0.5
    assert (out[2].score, out[2].info["status"], out[2].info["phase"]) == (-1.0, "timeout", "wall")
    one = score_one(StagedReward(), "b", "", deadline=1.0)
    assert one.info["where"] == "slow" and one.info["pid"] != os.getpid()
    assert score_one(StagedReward(), "fast:x", "").info["where"] == "fast"
    assert score_one(plain_float_reward, "x", "").score == 0.5  # plain functions: the whole call is the slow part


def test_math_reward_computes_its_slow_part_without_dispatching() -> None:
    from rewardlab.rewards import math_reward

    calls = get_pool().stats["calls"]
    r = math_reward.slow(SLOW_PRED, SLOW_GOLD)  # what a worker runs: here it runs inline, in this process
    assert (r.score, r.info["rule"]) == (1.0, "math_verify")
    assert get_pool().stats["calls"] == calls
    assert math_reward(SLOW_PRED, SLOW_GOLD).info["cpu_s"] >= 0  # a direct call: the pool put slow in a worker
    assert get_pool().stats["calls"] == calls + 1


def test_the_batch_deadline_reaches_rewards_called_inside_the_batch() -> None:
    """An isolated Combined runs in threads here and calls its math component directly: the batch's
    deadline (the trainer's --reward-deadline) is that call's budget, not MathReward(timeout=...)."""
    from rewardlab.rewards import MathReward
    from rewardlab.rewards.combine import Combined

    assert get_pool().warmup(1)
    total = Combined({"math": MathReward(timeout=30.0), "iso": IsolatedOk()})
    assert total.isolated
    r = score_batch(total, [SLOW_PRED], [SLOW_GOLD], deadline=1e-4)[0]
    math_info = r.info["component_info"]["math"]
    assert (math_info["status"], math_info["deadline_s"], math_info["rule"]) == ("timeout", 1e-4, "deadline")
    assert score_batch(total, [SLOW_PRED], [SLOW_GOLD], deadline=5.0)[0].info["components"]["math"] == 1.0
    direct = MathReward(timeout=1e-4)(SLOW_PRED, SLOW_GOLD)  # outside a batch: the reward's own default
    assert (direct.info["status"], direct.info["deadline_s"]) == ("timeout", 1e-4)


def test_combined_reports_a_pool_timeout_in_its_components_shape() -> None:
    from rewardlab.rewards import math_reward
    from rewardlab.rewards.combine import Combined

    get_pool().warmup(1)
    total = Combined({"math": math_reward, "sleepy": sleepy_reward})  # sleepy has no fast: a worker runs it all
    r = score_batch(total, ["30"], ["30"], deadline=1.0, wall_cap=1.0)[0]
    assert r.info["components"] == {"math": 1.0, "sleepy": 0.0}  # math decided on its fast path, here
    assert r.info["component_info"]["sleepy"]["status"] == "timeout"
    assert r.info["status_counts"] == {"ok": 1, "timeout": 1} and r.score == 1.0


def test_a_direct_call_warms_the_pool_for_the_next_undecided_answer(tmp_path) -> None:
    """Issue 40: a per-call user (verl's naive manager) never calls warmup. Importing starts nothing; the
    first direct call, decided on the fast path, starts the workers and loads the reward in the background,
    so that a later undecided answer finds a warm worker instead of paying the fork server's start."""
    script = tmp_path / "direct.py"
    script.write_text(textwrap.dedent("""
        import time
        from rewardlab.rewards import math_reward
        from rewardlab.rewards.pool import process
        from rewardlab.rewards.pool.batch import _pickled
        assert process._POOL is None, "importing started a pool"
        r = math_reward("The answer is 4.", "4")
        assert r.info["rule"] != "math_verify", r.info
        _, key = _pickled(math_reward)
        end = time.monotonic() + 240  # a bound on waiting, not a performance figure
        while time.monotonic() < end and not (process._POOL is not None and process._POOL.holds(key)):
            time.sleep(0.2)
        assert process._POOL is not None and process._POOL.holds(key), "no worker was started by the call"
        slow = math_reward("$\\\\arcsin(1/2)$", "$\\\\frac{\\\\pi}{6}$")
        print(slow.info.get("rule"), slow.info.get("status"), slow.info.get("phase"))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "REWARDLAB_REWARD_WORKERS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["math_verify", "ok", "None"], proc.stdout
