"""Identities in variables with functions (``\\sec^2 y`` vs ``\\tan^2 y + 1``), decided by evaluation (issue 40).

The exact polynomial arithmetic of the fast path cannot compare functions of a variable, so these reached
the slow path (sympy's simplification in a worker, 25-60 ms). Here both answers are evaluated with the
fast path's own evaluator after each variable is replaced by a rational point, at :data:`POINTS` points
chosen on both sides of 0 (so ``\\sqrt{x^2}`` is not ``x``, nor ``\\ln(x^2)`` ``2\\ln x``: principal branches
are evaluated as they are). Two answers that agree at every point to 1e-10 (relative) are the same
function; one point apart by more than 1e-6 makes them different; anything else stays undecided. Applied
only to answers with a variable and a function (trigonometric, log, exp, root), at most
:data:`MAX_CHARS` characters, when the exact comparison could not decide.
"""

from __future__ import annotations

import re
from fractions import Fraction

POINTS = (("7", "13"), ("-11", "17"), ("19", "23"), ("-5", "29"))
"""Rational points (numerator, denominator); variable k of an answer takes point (j + k) of round j."""
MAX_CHARS = 200
_VARIABLE = re.compile(r"(?<![\\A-Za-z])([a-df-hj-zA-Z])(?![A-Za-z])")  # not e (Euler) nor i (imaginary)
_FUNCTION = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc|ln|log|exp|sqrt)(?![A-Za-z])")


def numeric_identity(pn: str, gn: str, evaluate) -> bool | None:
    """Whether ``pn`` and ``gn`` are the same function of their variables (see the module doc); None when
    undecided or not applicable. ``evaluate`` parses a constant answer into a complex number (or raises)."""
    if len(pn) > MAX_CHARS or len(gn) > MAX_CHARS or not (_FUNCTION.search(pn) or _FUNCTION.search(gn)):
        return None
    names = sorted(set(_VARIABLE.findall(pn)) | set(_VARIABLE.findall(gn)))
    if not names or len(names) > 3 or "=" in pn + gn:
        return None
    agree = 0
    for j in range(len(POINTS)):
        at = {v: POINTS[(j + k) % len(POINTS)] for k, v in enumerate(names)}

        def put(s: str) -> str:
            return _VARIABLE.sub(lambda m: "(\\frac{%s}{%s})" % at[m.group(1)], s)

        try:
            a, b = evaluate(put(pn)), evaluate(put(gn))
        except Exception:  # noqa: BLE001 - a point where either is undefined, or an unreadable answer
            continue
        if a is None or b is None:
            return None
        scale = max(1.0, abs(a), abs(b))
        if abs(a - b) > 1e-6 * scale:
            return False
        if abs(a - b) <= 1e-10 * scale:
            agree += 1
    return True if agree >= 3 else None


def as_complex(value) -> complex | None:
    """A constant value of the evaluator as a complex number (None: it still holds a variable)."""
    terms = getattr(value, "terms", None)
    if terms is None:
        return None
    if all(not m for m in terms):
        return complex(float(terms.get((), Fraction(0))))
    return value.numeric()
