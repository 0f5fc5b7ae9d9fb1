"""One extraction policy: the fast path and the slow path agree wherever both decide.

The slow path (sympy + math-verify in a worker) once re-extracted the answer with its own policy
and paid random-model junk that the fast path refused. Now ``MathReward.slow`` grades the answer that
``extract.py`` chose, parsed whole. The property: for every input where ``MathReward.fast`` decides,
``MathReward.slow`` (run in this process, as a worker runs it) gives the same score, over the hostile
fuzz grammar and over every row of the public corpus.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import shared_dir
from rewardlab.rewards import math_reward
from rewardlab.rewards.fuzz import FRAGMENTS, GOLDS, hostile_text

_SHARED = shared_dir()
CORPUS = _SHARED / "bench" / "math_equiv_public.jsonl" if _SHARED else None


def _agree(completion: str, gold: str) -> None:
    fast = math_reward.fast(completion, gold)
    if fast is None:
        return  # undecided here: the slow path alone decides
    slow = math_reward.slow(completion, gold)
    assert slow.score == fast.score, (completion[:200], gold, fast.info, slow.info)


piece = (st.tuples(st.sampled_from(FRAGMENTS) | st.text(max_size=4), st.sampled_from([1, 2, 3, 8]))
         .map(lambda t: t[0] * t[1]))
hostile = st.lists(piece, min_size=1, max_size=20).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile, gold=st.sampled_from(GOLDS))
def test_fast_and_slow_agree_on_the_fuzz_grammar(text: str, gold: str) -> None:
    _agree(text, gold)


def test_fast_and_slow_agree_on_seeded_hostile_texts() -> None:
    rng = random.Random(22)
    for _ in range(300):
        _agree(hostile_text(rng, max_chars=300), rng.choice(GOLDS))


@pytest.mark.skipif(CORPUS is None or not CORPUS.is_file(), reason="public corpus not present")
def test_fast_and_slow_agree_on_the_public_corpus() -> None:
    rows = [json.loads(line) for line in CORPUS.open(encoding="utf-8") if line.strip()]
    decided = 0
    for r in rows:
        if r.get("category") == "adversarial_hang":
            continue  # built to exhaust sympy: the worker's budget stops them, not this process
        if math_reward.fast(r["pred"], r["gold"]) is not None:
            decided += 1
            _agree(r["pred"], r["gold"])
    assert decided > 300  # most of the corpus is decided on the fast path: the property is not vacuous


@pytest.mark.parametrize("completion, gold", [
    (" 3\ufffdqI 4(Ganswer\ufffd00\ufffd\ufffd", "4"),
    ("answer: 4 (G\ufffd", "4"),
    ("So $x = 4$ and then \ufffd\ufffd", "4"),
])
def test_the_slow_path_never_pays_junk_around_the_right_number(completion: str, gold: str) -> None:
    assert math_reward.slow(completion, gold).score == 0.0
