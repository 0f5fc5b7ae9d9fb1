"""No input can hang or crash a reward on the caller's thread: fuzzing, scaling families, regexploit.

What runs on a trainer's thread without a deadline is the math reward's extraction and fast path
(``MathReward.fast``), the format rewards, the length/repetition shaping and code-block extraction.
Everything else runs in workers the pool can kill. Three kinds of proof live here:

1. a static check: regexploit finds no pattern in ``rewardlab/rewards`` whose backtracking is cubic
   or worse (possessive quantifiers and atomic groups, which it does not know, are read as their body
   taken once: they never give back what they matched, so they cannot take part in a re-split);
2. Hypothesis fuzzing with the hostile grammar of :mod:`rewardlab.rewards.fuzz`, and scaling families that
   grow one hostile shape to 100,000 characters. Each call must finish within a generous hang bound
   (a blow-up fails, noise does not) and must not raise;
3. the regression table: every input a fuzzer ever found, with its verdict.

A hang inside a regular expression holds the GIL, so nothing in this process could interrupt it: a
watchdog (``faulthandler``) dumps every thread's stack and ends the run instead of letting CI hang.
"""

from __future__ import annotations

import ast
import faulthandler
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewardlab.rewards import math_reward
from rewardlab.rewards.fuzz import FRAGMENTS, GOLDS, caller_thread_paths
from rewardlab.rewards.math.extract import extract_answer

HANG_BOUND_S = 2.0
"""A call on the caller's thread slower than this is a blow-up (typical calls take 0.01-5 ms)."""
REWARDS_DIR = Path(__file__).resolve().parent.parent / "rewardlab" / "rewards"


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(300, exit=True)  # far above any bound here: only a real hang
    yield
    faulthandler.cancel_dump_traceback_later()


CALLER_THREAD = caller_thread_paths()


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


# ---------------------------------------------------------------------------- 1. static: regexploit

def _redos_findings(source: str, filename: str) -> list[str]:
    from regexploit.ast.sre import SreOpParser
    from regexploit.languages.python_node_visitor import PythonNodeVisitor
    from regexploit.redos import find

    class Parser(SreOpParser):
        # Python 3.11 opcodes regexploit predates: a possessive repeat or an atomic group never gives
        # back what it matched, so for backtracking analysis it is its body, taken once.
        def from_POSSESSIVE_REPEAT(self, data):
            return self.sequence_or_singleton(data[2])

        def from_ATOMIC_GROUP(self, data):
            return self.sequence_or_singleton(data)

    visitor = PythonNodeVisitor()
    visitor.visit(ast.parse(source))
    out = []
    for rx in visitor.patterns:
        try:
            parsed = Parser().parse_sre(rx.pattern, rx.flags)
        except Exception:  # noqa: BLE001 - strings that are not patterns
            continue
        for redos in find(parsed):
            if redos.starriness > 2:  # cubic or worse, as regexploit's own CLI reports
                out.append(f"{filename}:{rx.lineno}: {rx.pattern!r} (starriness {redos.starriness}, e.g. "
                           f"{redos.example()!r:.80})")
    return out


def test_regexploit_finds_no_vulnerable_pattern_in_the_rewards() -> None:
    findings = []
    for path in sorted(REWARDS_DIR.glob("*.py")):
        findings += _redos_findings(path.read_text(), path.name)
    assert not findings, "ReDoS-prone patterns:\n" + "\n".join(findings)


@pytest.mark.parametrize("pattern", [
    r"(?<=\d)\s*((?:[A-Za-z]{2,}\.?\s*)+)\s*$",  # the trailing-unit pattern that hung the trainer
    r"(a+)+b",
    r"\s*\s*\s*x",
])
def test_the_regexploit_check_catches_a_vulnerable_pattern(pattern: str) -> None:
    """The check above is not vacuous: it flags the pattern this wave removed, and textbook ReDoS."""
    assert _redos_findings(f"import re\nP = re.compile({pattern!r})\n", "probe.py")


# ---------------------------------------------------------------------------- 2. fuzzing

piece = st.tuples(st.sampled_from(FRAGMENTS) | st.text(max_size=4), st.sampled_from([1, 2, 3, 8, 32, 128])).map(
    lambda fr: fr[0] * fr[1])
hostile = st.lists(piece, min_size=1, max_size=30).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(text=hostile, gold=st.sampled_from(GOLDS))
def test_fuzz_caller_thread_paths_finish_and_never_raise(text: str, gold: str) -> None:
    for name, fn in CALLER_THREAD.items():
        took = _timed(fn, text, gold)
        assert took < HANG_BOUND_S, f"{name} took {took:.2f} s on {text[:200]!r}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(text=hostile, gold=st.sampled_from(GOLDS))
def test_fuzz_full_math_reward_returns_a_result_with_a_status(text: str, gold: str) -> None:
    r = math_reward(text, gold)  # slow path included: the pool bounds it
    assert r.score in (0.0, 1.0, None) and r.info["status"]


# One hostile shape grown long: a pattern that is linear per start but restarts at every position
# (quadratic), or backtracks exponentially, shows up here even if the fuzzer's 600 chars hide it.
FAMILIES = {
    "unit tail": lambda n: "The answer is 5 " + "ab" * n + "1",
    "spaces after 'answer'": lambda n: "answer" + " " * n + "x",
    "spaces before 'degree'": lambda n: "5" + " " * n + "x",
    "unbalanced boxes": lambda n: "\\boxed{\n" * n,
    "nested boxes": lambda n: "\\boxed{" * n + "}" * n,
    "thousands groups": lambda n: "1" + ",234" * n + "5",
    "subscript braces": lambda n: "x_{" * n + "= 5",
    "dollars": lambda n: "$" * n + "5",
    "inline math openers": lambda n: "\\(" * n + "5",
    "answer phrases": lambda n: "The answer is " * n,
    "think tags": lambda n: "<think>" * n + "</think>" * n + "<answer>5</answer>",
    "fences": lambda n: "```py\n" * n,
    "letters": lambda n: "a" * (2 * n),
    "digits": lambda n: "9" * (2 * n),
    "words": lambda n: "the " * n,
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_scaling_families_stay_within_the_hang_bound(family: str) -> None:
    text = FAMILIES[family](25_000)  # 25,000 repetitions: 50-175k characters
    for name, fn in CALLER_THREAD.items():
        took = _timed(fn, text, "5")
        assert took < HANG_BOUND_S, f"{name} took {took:.2f} s on the {family!r} family ({len(text)} chars)"


# ---------------------------------------------------------------------------- 3. regression rows

# (completion, gold, score, status, what happened). Every input a fuzzer or a user found goes here.
REGRESSIONS = [
    # wave 2 review: trailing-unit pattern, exponential (22 s at n=18); hung `rewardlab train` on a random model
    ("The answer is 5 " + "ab" * 18 + "1", "5", 0.0, "ok", "unit tail re-split"),
    ("The answer is 5 " + "ab" * 40 + "1", "5", 0.0, "ok", "same, longer"),
    # bench/fuzz_rewards.py seed 0 call 1: 'Answer:' spam then letters and '^^^' hit the same pattern
    ("Answer:" * 16 + "(a, b)" * 16 + "\\{" * 32 + "3.14" * 31 + "&&\\(\\(ZZZZZZZZ" + "007" * 8 + "e" * 64 + "^^^",
     "3.14", 0.0, "ok", "unit tail via fuzzer"),
    # bench/fuzz_rewards.py seed 0: a 400-digit integer against an irrational gold raised OverflowError
    # in the float check of the fast path (math_reward then reported status "error")
    ("\\boxed{" + "9" * 300 + "}", "\\sqrt{2}", 0.0, "ok", "huge integer vs irrational"),
    # unbalanced boxes: each one rescanned the rest of the text (quadratic). Empty ones are no
    # distinct answers, so the one real box is graded
    ("\\boxed{\n" * 5000 + "so \\boxed{7}", "7", 1.0, "ok", "unbalanced boxes, then an answer"),
    # a run of spaces after 'answer' made the phrase pattern quadratic
    ("The answer" + " " * 20000 + "is 5", "5", 1.0, "ok", "whitespace run in the answer phrase"),
    # legitimate answers next to hostile ones keep their verdicts
    ("so the distance is 125 miles.", "125", 1.0, "ok", "unit words are still dropped"),
    ("The answer is 15 cm^2", "15", 1.0, "ok", "unit with a power"),
    ("The answer is 90 degrees", "90", 1.0, "ok", "degrees"),
    ("The answer is $12\\text{ cm}$.", "12", 1.0, "ok", "text unit"),
    ("The final answer is: 50 percent", "50\\%", 1.0, "ok", "percent word"),
]


@pytest.mark.parametrize("completion,gold,score,status,why", REGRESSIONS, ids=[r[4] for r in REGRESSIONS])
def test_regressions(completion: str, gold: str, score: float, status: str, why: str) -> None:
    assert _timed(math_reward.fast, completion, gold) < HANG_BOUND_S
    r = math_reward(completion, gold)
    assert (r.score, r.info["status"]) == (score, status), r.info


def test_extraction_of_the_fuzzer_shapes_is_what_a_reader_expects() -> None:
    assert extract_answer("The answer is 5 " + "ab" * 30 + "1").answer == "5 " + "ab" * 30 + "1"
    assert extract_answer("\\boxed{\n" * 3).method == "boxed"
