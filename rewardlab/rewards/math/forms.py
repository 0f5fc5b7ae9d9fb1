"""LaTeX forms the fast path reads by rewriting them into ones it already evaluates (issue 40).

Each rewrite is exact and bounded, so what used to reach the slow path (math-verify in a worker, about
25 ms a call) is decided on the caller's thread:

* ``{a \\over b}`` is ``\\frac{a}{b}``;
* a trigonometric function of degrees (``\\cos 60^\\circ``) is the function of ``60\\pi/180`` (before, the
  degree mark was dropped and 60 read as radians: ``\\cos 60^\\circ`` was wrongly *unequal* to 1/2);
* ``\\sum_{k=a}^{b} f(k)`` / ``\\prod`` with integer bounds and at most :data:`MAX_TERMS` terms is the
  explicit sum / product of its terms (symbolic or huge bounds stay ``unsupported``, see ``equiv``);
* :func:`exact_trig`: sin, cos, tan, sec, csc, cot of a rational multiple of pi whose denominator divides
  12 is its exact value with square roots (``\\sin(\\pi/3)`` is ``\\sqrt{3}/2``), not a float.

Linear in the text: every pattern is anchored or possessive, and the ``\\over`` scan handles at most
:data:`MAX_OVERS` occurrences.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rewardlab.rewards.math.bounded import parse_int

MAX_TERMS = 60
"""Most terms a numeric ``\\sum`` / ``\\prod`` is expanded to."""
MAX_EXPANDED = 2000
"""Most characters of an expanded sum or product."""
MAX_OVERS = 8
"""Most ``\\over`` occurrences rewritten in one answer (more: left as they are, for the slow path)."""

_OVER = re.compile(r"\\over(?![A-Za-z])")
_TRIG_DEGREES = re.compile(
    r"(\\(?:sin|cos|tan|sec|csc|cot))\s*+(?:\(\s*+(-?\d{1,6}(?:\.\d{1,6})?)\s*+(?:\^\s*+\{?\s*+\\circ\s*+\}?|°|\\degree)"
    r"\s*+\)|\{\s*+(-?\d{1,6}(?:\.\d{1,6})?)\s*+(?:\^\s*+\{?\s*+\\circ\s*+\}?|°|\\degree)\s*+\}"
    r"|(-?\d{1,6}(?:\.\d{1,6})?)\s*+(?:\^\s*+\{?\s*+\\circ\s*+\}?|°|\\degree))")
# a whole answer that is one sum or product over integer bounds: \sum_{k=1}^{10} k^2, \prod_{i=1}^5 (1+1/i)
_BIG_OP = re.compile(r"\\(sum|prod)\s*+(?:\\limits\s*+)?_\s*+\{\s*+([A-Za-z])\s*+=\s*+(-?\d{1,4})\s*+\}"
                     r"\s*+\^\s*+(?:\{\s*+(-?\d{1,4})\s*+\}|(\d))\s*+(.+)")
_BODY_STOP = re.compile(r"\\(?:sum|prod|int|lim)|[=<>,;]|\\(?:le|ge|ne|cup|in)(?![A-Za-z])")


def _unmatched(s: str, positions: range, target: str, other: str) -> int:
    """The first position of ``positions`` holding a ``target`` bracket that no ``other`` bracket met on the way
    closes; -1 if none."""
    depth = 0
    for j in positions:
        if s[j] == other:
            depth += 1
        elif s[j] == target:
            if depth == 0:
                return j
            depth -= 1
    return -1


def _over(s: str) -> str:
    """``{a \\over b}`` -> ``\\frac{a}{b}`` (the innermost brace group around each ``\\over``)."""
    for _ in range(MAX_OVERS):
        m = _OVER.search(s)
        if m is None:
            return s
        start = _unmatched(s, range(m.start() - 1, -1, -1), "{", "}")  # the unmatched "{" before it
        end = _unmatched(s, range(m.end(), len(s)), "}", "{")  # the unmatched "}" after it
        if (start < 0) != (end < 0):
            return s  # unbalanced: not a fraction we can read
        lo, hi = (start + 1, end) if start >= 0 else (0, len(s))
        num, den = s[lo:m.start()].strip(), s[m.end():hi].strip()
        if not num or not den:
            return s
        s = s[:lo] + "\\frac{" + num + "}{" + den + "}" + s[hi:]
    return s


def _degrees(m: re.Match) -> str:
    deg = m.group(2) or m.group(3) or m.group(4)
    return f"{m.group(1)}(\\frac{{{deg}}}{{180}}\\pi)"


def _big_op(s: str) -> str:
    m = _BIG_OP.fullmatch(s)
    if m is None:
        return s
    op, var, lo, hi = m.group(1), m.group(2), parse_int(m.group(3)), parse_int(m.group(4) or m.group(5))
    body = m.group(6).strip()
    n = hi - lo + 1
    if not 1 <= n <= MAX_TERMS or len(body) * n > MAX_EXPANDED or _BODY_STOP.search(body):
        return s
    index = re.compile(rf"(?<![\\A-Za-z]){var}(?![A-Za-z])")
    terms = [index.sub(f"({k})", body) for k in range(lo, hi + 1)]
    return ("+" if op == "sum" else "\\cdot ").join(f"({t})" for t in terms)


def rewrite_forms(s: str) -> str:
    """The answer with ``\\over``, trigonometric degrees and numeric sums / products rewritten."""
    if "\\over" in s:
        s = _over(s)
    if "\\" in s and ("circ" in s or "°" in s or "degree" in s):
        s = _TRIG_DEGREES.sub(_degrees, s)
    if "\\sum" in s or "\\prod" in s:
        s = _big_op(s.strip())
    return s


# ---------------------------------------------------------------------------- exact trigonometric values

_SIN_15 = ("0", "\\frac{\\sqrt{6}-\\sqrt{2}}{4}", "\\frac{1}{2}", "\\frac{\\sqrt{2}}{2}", "\\frac{\\sqrt{3}}{2}",
           "\\frac{\\sqrt{6}+\\sqrt{2}}{4}", "1")
"""sin of 0, 15, 30, ..., 90 degrees."""
_TABLE: dict[int, object] = {}


def _sin_latex(k: int) -> str:
    """sin(k * 15 degrees) as LaTeX, for any integer k."""
    k %= 24
    sign = "-" if k >= 12 else ""
    k %= 12
    k = k if k <= 6 else 12 - k
    v = _SIN_15[k]
    return v if v == "0" else sign + v


def exact_trig(name: str, arg, evaluate) -> tuple | None:
    """``(numerator, denominator)`` of ``name`` (``\\sin`` ... ``\\cot``) at ``arg`` when ``arg`` is q*pi with
    12q an integer (the denominator None for sin and cos); None otherwise. ``evaluate`` parses LaTeX into a
    value (the caller's parser; each table entry is parsed once). The caller divides (a pole: a zero
    denominator)."""
    terms = getattr(arg, "terms", None)
    if terms is None:
        return None
    if not terms:
        q = Fraction(0)
    elif len(terms) == 1 and (("pi", 1),) in terms:
        q = terms[(("pi", 1),)]
    else:
        return None
    k = q * 12
    if k.denominator != 1:
        return None
    k = int(k % 24)

    def sin(j: int):
        j %= 24
        if j not in _TABLE:
            _TABLE[j] = evaluate(_sin_latex(j))
        return _TABLE[j]

    one = sin(6)
    return {"\\sin": (sin(k), None), "\\cos": (sin(k + 6), None), "\\tan": (sin(k), sin(k + 6)),
            "\\cot": (sin(k + 6), sin(k)), "\\sec": (one, sin(k + 6)), "\\csc": (one, sin(k))}.get(name)
