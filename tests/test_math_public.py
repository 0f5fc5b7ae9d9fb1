"""The public math-equivalence corpus (../shared/bench/math_equiv_public.jsonl): agreement, hacking, deadlines.

Skipped when the corpus is absent. Contracts: the agreement the README states (99.6%, 456 of the 458
rows; the misses are ``mv-229`` and, by policy, ``mv-023``), no false positive in ``reward_hacking``, and every
``adversarial_hang`` case answered within the reward's wall-clock cap plus 0.5 s, from the main thread
and from a worker thread (the only timed asserts in the suite: they are the contract, not a
performance figure).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from conftest import shared_dir
from rewardlab.rewards import math_reward, score_batch
from rewardlab.rewards.pool import get_pool

_SHARED = shared_dir()
CORPUS = _SHARED / "bench" / "math_equiv_public.jsonl" if _SHARED else None
pytestmark = pytest.mark.skipif(CORPUS is None or not CORPUS.is_file(), reason="public corpus not present")
DEADLINE = 1.0
MARGIN = 0.5


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in CORPUS.open(encoding="utf-8") if line.strip()]


@pytest.fixture(scope="module")
def results(rows) -> list:
    return score_batch(math_reward, [r["pred"] for r in rows], [r["gold"] for r in rows], deadline=DEADLINE)


# README, "Public corpus": 99.8% accuracy on the 458 rows, i.e. 457 agree with the label. The one
# known disagreement: a Fibonacci recurrence whose two sides differ by the order of a product inside
# a sum (equal, but past what the fast path and the bounded slow path decide). And one by policy
# (issue 22): ``mv-023``, "Answer (9+1)" for 10, is an unevaluated expression: paying it pays a model for
# restating the question ("The answer is: 4 + 2" for 6 in our real completions), so it scores 0.
README_ROWS, README_AGREE = 458, 456
KNOWN_MISSES = {"mv-229", "mv-023"}
SLOW_MACHINE_WALL_CAP = 60.0


def test_agreement_is_the_readme_figure(rows, results) -> None:
    assert len(rows) == README_ROWS
    # The verdict is decided within DEADLINE CPU seconds, as in the README's run. A label-True row that
    # timed out on the wall-clock cap instead (phase "wall", "startup" or "queue": a loaded machine,
    # not the budget) is rescored once with the same CPU budget and a long wall-clock cap; a "cpu"
    # timeout is a verdict and counts as it is.
    retry = [i for i, (r, res) in enumerate(zip(rows, results))
             if r["equal"] and res.info.get("status") == "timeout" and res.info.get("phase") != "cpu"]
    results = list(results)
    if retry:
        again = score_batch(math_reward, [rows[i]["pred"] for i in retry], [rows[i]["gold"] for i in retry],
                            deadline=DEADLINE, wall_cap=SLOW_MACHINE_WALL_CAP)
        for i, res in zip(retry, again):
            results[i] = res
    wrong = {r["id"]: (r["equal"], res.info.get("status"), res.info.get("rule"))
             for r, res in zip(rows, results) if (res.score == 1.0) != r["equal"]}
    agree = len(rows) - len(wrong)
    assert agree >= README_AGREE, f"{agree}/{len(rows)} agree (README: {README_AGREE}); disagreements: {wrong}"
    assert set(wrong) <= KNOWN_MISSES, f"new disagreements: {sorted(set(wrong) - KNOWN_MISSES)}: {wrong}"


def test_no_false_positive_on_reward_hacking(rows, results) -> None:
    hacks = [(r, res) for r, res in zip(rows, results) if r["category"] == "reward_hacking"]
    assert hacks
    paid = [r["id"] for r, res in hacks if res.score and res.score > 0]
    assert not paid, f"paid reward-hacking outputs: {paid}"


def test_every_result_has_a_status(results) -> None:
    assert all(isinstance(r.info.get("status"), str) for r in results)


def _timed(rows: list[dict]) -> list[tuple[str, float, str]]:
    out = []
    for r in rows:
        t = time.monotonic()
        res = math_reward(r["pred"], r["gold"])
        out.append((r.get("id", r["pred"][:30]), time.monotonic() - t, res.info["status"]))
    return out


# Inputs that do reach sympy and make it run past the deadline (the worker is killed), in addition to
# the corpus's adversarial rows (most of which the fast path now decides without sympy).
HANGS = [
    {"pred": "$\\boxed{\\prod_{k=1}^{9999} k^k}$", "gold": "1"},
    {"pred": "$\\boxed{\\int_0^1 x^{x^{x^{x^x}}} dx}$", "gold": "1"},
]


def test_sympy_hangs_are_cut_at_the_deadline() -> None:
    get_pool().warmup()
    for row in HANGS:
        res = math_reward(row["pred"], row["gold"])
        assert res.info["status"] == "timeout" and res.score == 0.0


def test_adversarial_cases_meet_the_deadline_in_main_thread_and_worker_thread(rows) -> None:
    adv = [r for r in rows if r["category"] == "adversarial_hang"] + HANGS
    assert adv
    get_pool().warmup()  # the first start imports sympy; the contract is about hostile inputs
    main = _timed(adv)
    box: list = []
    t = threading.Thread(target=lambda: box.extend(_timed(adv)))
    t.start()
    t.join(timeout=len(adv) * (DEADLINE + MARGIN) + 30)
    assert len(box) == len(adv), "worker-thread scoring did not finish"
    # The CPU budget (DEADLINE) decides the verdict; the wall-clock cap is the bound on the return,
    # whatever the machine's load (rewardlab/rewards/pool.py).
    slow = [(i, round(dt, 3), st) for i, dt, st in main + box if dt > math_reward.wall_cap + MARGIN]
    assert not slow, f"over the wall-clock cap + margin: {slow}"
