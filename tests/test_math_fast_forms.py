"""Forms that used to reach the slow path (math-verify in a worker, ~25 ms a call), now decided on the
caller's thread (issue 40's speed goal): ``{a \\over b}``, trigonometric values (radians and degrees),
numeric sums and products, inequalities joined by "or", ``|v|`` and ``f(x)`` bounds as sets,
``A \\setminus \\{p\\}``, and identities in a variable with functions (``\\sec^2 y`` vs ``\\tan^2 y + 1``).
Each row: the fast path decides (``MathReward.fast`` is not None) with the verdict a careful grader
gives, and the slow path (math-verify + sympy, run here as a worker runs it) gives the same score where
it decides. Rows marked ``# before: slow`` were undecided on the fast path
before this change; ``# before: wrong`` were decided wrongly (the fix changes the verdict).
"""

from __future__ import annotations

import pytest

from rewardlab.rewards import math_reward
from rewardlab.rewards.math.extract import extract_answer, extract_gold

ROWS = [
    # --- {a \over b}
    ("${3 \\over 4}$", "0.75", 1.0),  # before: slow
    ("${1 \\over 2}$", "\\frac{1}{3}", 0.0),  # before: slow
    ("$\\frac{{1 \\over 2}}{3}$", "\\frac16", 1.0),  # before: slow
    ("$1 \\over 2$", "\\frac12", 1.0),  # before: slow (no braces: the whole answer)
    # --- trigonometric values: exact for multiples of pi/12, degrees read as degrees
    ("$\\sin(\\pi/3)$", "\\frac{\\sqrt{3}}{2}", 1.0),  # before: slow
    ("$\\sin\\frac{\\pi}{6}$", "\\frac{1}{2}", 1.0),  # before: slow
    ("$\\sin\\frac{\\pi}{6}$", "\\frac{1}{3}", 0.0),  # before: slow
    ("$\\tan(\\pi/4)$", "1", 1.0),  # before: slow
    ("$\\cos(\\pi/12)$", "\\frac{\\sqrt6+\\sqrt2}{4}", 1.0),  # before: slow
    ("$\\sec(\\pi/3)$", "2", 1.0),  # before: slow
    ("$\\tan 30^\\circ$", "\\frac{\\sqrt3}{3}", 1.0),  # before: slow
    ("$\\cos 60^\\circ$", "\\frac12", 1.0),  # before: wrong (60 read as radians: unequal)
    ("$\\sin(60^\\circ)$", "\\frac{\\sqrt3}{2}", 1.0),  # before: wrong
    ("$\\frac{\\sqrt3}{2}$", "\\sin 60^\\circ", 1.0),  # before: wrong (the gold's degrees)
    ("$\\cos 60^\\circ$", "\\frac{\\sqrt3}{2}", 0.0),  # cos 60 is 1/2
    # --- sums and products over integer bounds
    ("$\\sum_{k=1}^{10} k$", "55", 1.0),  # before: slow
    ("$\\sum_{i=1}^{5} i^2$", "55", 1.0),  # before: slow
    ("$\\sum_{i=1}^{5} i^2$", "56", 0.0),  # before: slow
    ("$\\prod_{k=1}^{4} k$", "24", 1.0),  # before: slow
    ("$\\sum_{k=-2}^{3} k^2$", "19", 1.0),  # before: slow
    # --- inequalities as sets
    ("$x \\le -3 \\text{ or } x \\ge 2$", "(-\\infty,-3] \\cup [2,\\infty)", 1.0),  # before: slow
    ("$x \\leq -3$ or $x \\geq 2$", "(-\\infty,-3) \\cup [2,\\infty)", 0.0),  # before: slow
    ("$x<-3 \\text{ or } x>2$", "x>2 \\text{ or } x<-3", 1.0),  # before: slow
    ("$0<f(x)<1$", "(0,1)", 1.0),  # before: slow
    ("$0<f(x)<1$", "[0,1)", 0.0),  # before: slow
    ("$|x| < 3$", "(-3,3)", 1.0),  # before: slow
    ("$|x| \\ge 3$", "(-\\infty,-3] \\cup [3,\\infty)", 1.0),  # before: slow
    ("$z \\in [-\\frac{3}{2}, -1] \\cup [1, \\frac{3}{2}]$", "1\\leq|z|\\leq \\frac{3}{2}", 1.0),  # before: slow
    ("$[1, \\frac{3}{2}]$", "1\\leq|z|\\leq \\frac{3}{2}", 0.0),  # before: slow (half the set)
    # --- a set without points
    ("$[0,1) \\cup (1,2]$", "[0,2] \\setminus \\{1\\}", 1.0),  # before: slow
    ("$[0,1) \\cup (1,2]$", "[0,2] \\setminus \\{1.5\\}", 0.0),  # before: slow
    ("$(-\\infty,0)\\cup(0,\\infty)$", "\\mathbb{R} \\setminus \\{0\\}", 1.0),  # before: slow
    # --- identities in a variable, by evaluation at rational points on both sides of 0
    ("$\\sec^2(y)$", "\\tan^2(y)+1", 1.0),  # before: slow
    ("$\\sec^2(y)$", "\\tan^2(y)", 0.0),  # before: slow
    ("$\\sin(a+b) - \\sin(a-b)$", "2\\sin b\\cos a", 1.0),  # before: slow
    ("$\\sin(a+b) - \\sin(a-b)$", "2\\sin a\\cos b", 0.0),  # before: slow
    ("$\\sin^2 x + \\cos^2 x$", "1", 1.0),  # before: slow
    ("$\\cos(2x)$", "1-2\\sin^2 x", 1.0),  # before: slow
    ("$\\frac{\\sin x}{\\cos x}$", "\\tan x", 1.0),  # before: slow
    ("$\\sin x$", "x", 0.0),  # before: slow
    # --- a relation between constants is no interval
    ("$\\sqrt2 < 3$", "(-\\infty,3)", 0.0),  # before: wrong (read as an interval on the "variable" sqrt 2)
    ("$\\pi < 4$", "(-\\infty,4)", 0.0),  # before: wrong
]


@pytest.mark.parametrize("pred,gold,score", ROWS, ids=[f"{i:02d}" for i in range(len(ROWS))])
def test_the_fast_path_decides(pred: str, gold: str, score: float) -> None:
    r = math_reward.fast(pred, gold)
    assert r is not None, (pred, gold, "left to the slow path")
    assert r.score == score, (pred, gold, r.info)


_DEGREES = "math-verify reads the degree mark as nothing: cos(60 radians), unequal (a grader: cos 60 deg = 1/2)"
SLOW_DIFFERS = {
    "$\\tan 30^\\circ$": _DEGREES, "$\\cos 60^\\circ$": _DEGREES, "$\\sin(60^\\circ)$": _DEGREES,
    "$\\frac{\\sqrt3}{2}$": _DEGREES + " (the gold's)",
    "$x \\le -3 \\text{ or } x \\ge 2$": "math-verify reads the disjunction as a set {x >= 2, x <= -3}",
}
"""Rows where math-verify's own verdict differs from the row's (from a run, Dec 2026): these reached the
slow path before and were graded wrongly there; the fast path's verdict is the careful grader's."""


@pytest.mark.parametrize("pred,gold,score", ROWS, ids=[f"{i:02d}" for i in range(len(ROWS))])
def test_math_verify_agrees_where_it_decides(pred: str, gold: str, score: float) -> None:
    """math-verify alone (``slow.symbolic_compare``: ``MathReward.slow`` would ask the fast path first) on
    the extracted answers."""
    from rewardlab.rewards.math.slow import symbolic_compare

    if pred in SLOW_DIFFERS:
        pytest.skip(SLOW_DIFFERS[pred])
    p, g = extract_answer(pred).answer, extract_gold(gold).answer
    out = symbolic_compare(p, g)
    if out.get("status", "ok") != "ok":
        pytest.skip(f"math-verify does not decide: {out.get('status')}")
    assert float(out["equal"]) == score, (pred, gold, out)
