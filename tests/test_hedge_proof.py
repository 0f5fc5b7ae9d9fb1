"""The hedge-proof property of the math reward (issue 40), on completions from a grammar of hedging strategies.

``bench/hedge_proof.py`` composes, for random problems (a gold plus distractors), completions from a grammar
(several answers, withdrawn and corrected answers, negations, bounds, questions, answer lists, candidate
spam, boxes in footnotes, conditional answers) and knows which candidate each commits to, if any. Each
completion is scored against every candidate as the gold. Hedge-proof: no completion is paid for a gold it
does not commit to; so a hedge earns 0, nothing earns more than committing to one random candidate (1/k),
and hedging strictly loses. With the commitment rule off (``ExtractionPolicy(commitment=False)``), the same
grammar finds hundreds of completions paid for an answer they do not commit to (hedges earn about 0.2;
``bench/hedge_proof.py --no-commitment``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rewardlab.rewards import ExtractionPolicy, MathReward, math_reward

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import hedge_proof  # noqa: E402  (bench/hedge_proof.py: the grammar and the measurement)

PROBLEMS = 60


@pytest.mark.parametrize("seed", [0, 1, 2, 4, 7])
def test_no_completion_is_paid_for_an_answer_it_does_not_commit_to(seed: int) -> None:
    res = hedge_proof.measure(math_reward, PROBLEMS, seed)
    shown = "\n".join(f"commits to {c!r}, paid for {p}: {t[:200]!r}" for t, c, p in res["violations"][:10])
    assert not res["violations"], f"{len(res['violations'])} completions paid without committing:\n{shown}"
    assert len(res["hedge"]) > 100 and len(res["committing"]) > 50  # the grammar writes both


def test_no_strategy_beats_committing() -> None:
    res = hedge_proof.measure(math_reward, PROBLEMS, 7)
    baseline = hedge_proof._mean(res["baseline"])
    assert baseline > 0.25  # committing plainly to a random candidate of 2-4 is paid about 1/k
    assert hedge_proof._mean(res["hedge"]) == 0.0 < baseline
    for shape, rewards in res["shapes"].items():
        assert max(rewards) <= 0.5, shape  # at most 1/k for k >= 2: one gold per completion


def test_the_grammar_uses_every_rule() -> None:
    res = hedge_proof.measure(math_reward, 20, 3)
    kinds = {k for shape in res["shapes"] for k in shape.split("+")}
    assert kinds == {"state", "correct", "negate", "bound", "ask", "offer"}


def test_the_property_fails_with_the_commitment_rule_off() -> None:
    """The test has teeth: without the rule, hedges are paid (the last box, the first phrase, ...)."""
    res = hedge_proof.measure(MathReward(ExtractionPolicy(commitment=False)), PROBLEMS, 0)
    assert len(res["violations"]) > 50
    assert hedge_proof._mean(res["hedge"]) > 0.1


def test_bench_main_exit_code() -> None:
    assert hedge_proof.main(["--problems", "10", "--seed", "0"]) == 0
    assert hedge_proof.main(["--problems", "10", "--seed", "0", "--no-commitment"]) == 1
