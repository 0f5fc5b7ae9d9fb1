"""The slow path of the math reward: symbolic equivalence with math-verify and sympy, in a worker process.

Imported by pool workers (the fork server preloads it), never on the caller's thread: parsing LaTeX
and simplifying with sympy can take unbounded time on hostile inputs, so it only runs where
:mod:`rewardlab.rewards.pool` can kill it. For the same reason math-verify's own ``signal.alarm``
timeouts are switched off here (``parsing_timeout=None``, ``timeout_seconds=None``): the pool's
deadline is the timeout.

:func:`slow_compare` first retries the exact evaluator with deep nesting allowed (this process has a
raised recursion limit), refuses inputs too large or too deeply nested to be real answers (they
would only reach math-verify's 6-digit float rounding, which calls ``sqrt(sqrt(...sqrt(2)))`` equal to
1), then asks math-verify, gold first, and for relation-vs-interval pairs both ways round.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import sympy
from math_verify import LatexExtractionConfig, parse, verify

from rewardlab.rewards.math.equiv import fast_compare, unbounded_operator

MAX_SLOW_CHARS = 1500
"""Answers longer than this are not sent to the symbolic parser."""
MAX_SLOW_NESTING = 40
"""Answers nested deeper than this (braces/parentheses) are not sent to the symbolic parser."""

logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" warning is expected here

# LaTeX only: math-verify's ExprExtractionConfig searches a text for the last expression it can read,
# which re-extracts an answer of its own choosing from junk (" 3\ufffdqI 4(G..." was read as 4). The
# slow path grades the answer that extract.py chose, whole, or nothing.
_LATEX = [LatexExtractionConfig(boxed_match_priority=0)]
_DELIMITERS = re.compile(r"\$\$?|\\[()\[\]]")


def _nesting(s: str) -> int:
    depth = best = 0
    for c in s:
        if c in "({[":
            depth += 1
            best = max(best, depth)
        elif c in ")}]":
            depth -= 1
    return best


def _short(obj: Any, limit: int = 200) -> str:
    try:
        s = str(obj)
    except Exception:  # noqa: BLE001
        s = type(obj).__name__
    return s if len(s) <= limit else s[:limit] + "..."


def _parse(ans: str) -> list:
    """math-verify's reading of the whole answer as one formula (its delimiters removed, then re-added
    around everything), so that it cannot pick a piece of the answer."""
    return parse(f"${_DELIMITERS.sub(' ', ans)}$", extraction_config=_LATEX, parsing_timeout=None)


def _is_relational(x: Any) -> bool:
    return isinstance(x, (sympy.core.relational.Relational, sympy.logic.boolalg.And, sympy.logic.boolalg.Or))


def _is_setlike(x: Any) -> bool:
    return isinstance(x, (sympy.Interval, sympy.Union, sympy.FiniteSet)) or (
        isinstance(x, sympy.Eq) and isinstance(x.rhs, (sympy.Interval, sympy.Union)))


# One pair per family of sympy code paths, so that a freshly forked worker does not pay first-use costs.
_WARM_PAIRS = [
    ("0.5", "\\frac{1}{2}"), ("\\sec^2(y)", "\\tan^2(y)+1"), ("\\sin(a+b)-\\sin(a-b)", "2\\sin b\\cos a"),
    ("\\log_2 9", "3"), ("\\tan(\\pi/3)", "\\frac{\\sqrt{3}}{3}"), ("(0,1)", "0<f(x)<1"),
    ("z \\in [-1, 1] \\cup [2, 3]", "1\\le|z|\\le 2"), ("x \\ge 1", "(1, \\infty)"), ("{1,3}", "(3,1)"),
    ("\\begin{pmatrix}\\frac{1}{3x^{2/3}}&0\\\\-\\sin(x)&0\\end{pmatrix}",
     "\\begin{pmatrix}\\frac{1}{3\\sqrt[3]{x}^2}&0\\\\-\\sin(x)&0\\end{pmatrix}"),
    ("10^{\\frac{\\sqrt{13} - 5}{6}}", "x_{1}=10^{\\frac{-5+\\sqrt{13}}{6}}"), ("7 = 11a+c", "11a+c"), ("|-7|", "7"),
    ("\\binom{5}{3}", "10"), ("\\lceil 3.2 \\rceil", "3"), ("(x+1)^{10}", "(1+x)^{10}"), ("x^2+y^2=1", "y^2+x^2=1"),
]


def _warm() -> None:
    """Build math-verify's LaTeX grammar once at import: the fork server then hands it to every worker."""
    for pred, gold in _WARM_PAIRS:
        try:
            verify(_parse(gold), _parse(pred), timeout_seconds=None)
        except Exception:  # noqa: BLE001 - warming is an optimisation only
            pass


def slow_compare(pred: str, gold: str) -> dict:
    """Decide ``pred == gold`` symbolically. Returns ``{"equal", "rule", "pred_parsed", "gold_parsed", ...}``."""
    d = fast_compare(pred, gold, max_depth=5000)
    if d.equal is not None:
        return {"equal": d.equal, "rule": d.rule, "pred_parsed": d.pred_norm[:200], "gold_parsed": d.gold_norm[:200]}
    if d.detail.startswith("TooLarge"):  # sympy would expand 10^{10^{10}} - 10^{10^{10}} for ever
        return {"equal": False, "rule": "too_large", "status": "too_complex", "detail": d.detail}
    for name, s in (("prediction", pred), ("gold", gold)):
        if len(s) > MAX_SLOW_CHARS or _nesting(s) > MAX_SLOW_NESTING:
            return {"equal": False, "rule": "too_complex", "status": "too_complex",
                    "detail": f"{name} answer too long or too deeply nested for symbolic comparison"}
    for name, s in (("prediction", pred), ("gold", gold)):
        if unbounded_operator(s):
            return {"equal": False, "rule": "unsupported", "status": "too_complex",
                    "detail": f"{name} answer is a sum/product with a symbolic or huge bound (not evaluated)"}
    return symbolic_compare(pred, gold)


def symbolic_compare(pred: str, gold: str) -> dict:
    """math-verify's verdict on the two answers, without the fast comparison first (``slow_compare`` is the
    fast comparison, the size guards, then this; tests compare the fast path's verdicts with this one)."""
    # math-verify returns [formula, matched text] or, when the formula does not parse, just [text]:
    # a side without a formula is not compared (its text could only match as text, which fast did)
    g = [x for x in _parse(gold) if not isinstance(x, str)]
    p = [x for x in _parse(pred) if not isinstance(x, str)]
    out = {"pred_parsed": _short(p[0] if p else None), "gold_parsed": _short(g[0] if g else None),
           "rule": "math_verify"}
    if not p or not g:
        out.update(equal=False, status="parse_error" if not p else "ok",
                   detail=("prediction" if not p else "gold") + " could not be parsed")
        if not g:
            out["status"] = "gold_parse_error"
        return out
    eq = verify(g, p, timeout_seconds=None)
    if not eq and ((_is_relational(p[0]) and _is_setlike(g[0])) or (_is_setlike(p[0]) and _is_relational(g[0]))):
        eq = verify(p, g, timeout_seconds=None)
        if eq:
            out["rule"] = "math_verify_swapped"
    out["equal"] = bool(eq)
    return out


_warm()
