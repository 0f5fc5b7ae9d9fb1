"""Scalar answers of the math reward's fast path: parsed into exact values and compared.

:func:`parse_scalar` evaluates one LaTeX/plain-text scalar with the :mod:`.parser` into a :class:`Num`
(a :mod:`.poly` value and how it was written: percent, decimal digits, an over-long literal) and
raises :class:`Unsupported` for anything else; :func:`scalars_equal` compares two of them exactly
(``None`` when it cannot decide). Values too large to hold are :class:`Huge` magnitudes
(:mod:`.bounded`), compared by sign and log10, never expanded. Used by :mod:`.equiv` and
:mod:`.structures`; see ``rewardlab reward math`` to try it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from rewardlab.rewards.math.bounded import (
    MAX_LITERAL_DIGITS,
    Huge,
    decimal,
    fpow,
    log10_abs,
    parse_int,
    pow10,
    terminates_within,
)
from rewardlab.rewards.math.poly import (
    APPROX_MIN_DIGITS,
    Invalid,
    Poly,
    TooLarge,
    Unsupported,
    Value,
    const_or_huge,
)
from rewardlab.rewards.math.parser import Parser


@dataclass
class Num:
    """A parsed scalar answer: its value and how it was written."""

    value: Value
    percent: bool = False
    decimal_digits: int | None = None
    """Fractional digits when written as a plain decimal literal (for the approximation rule)."""
    literal: str | None = None
    """The digit string of a literal too long to convert (compared as text only)."""


_BASE_NUMERAL = re.compile(r"^([0-9A-Za-z]+)_\{?(\d{1,2})\}?$")
_LONG_LITERAL = re.compile(r"-?\d+(?:\.\d+)?")
_SCI = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?$")


def parse_scalar(s: str, max_depth: int = 40) -> Num:
    """Evaluate one scalar answer (no top-level commas). Raises Unsupported / Invalid."""
    s = s.strip()
    percent = False
    if s.endswith("%"):
        percent = True
        s = s[:-1].strip()
    if not s:
        raise Unsupported("empty")
    if len(s) > MAX_LITERAL_DIGITS and _LONG_LITERAL.fullmatch(s):
        return Num(Poly.const(0), percent, literal=s.lstrip("-").lstrip("0") or "0")
    m = _BASE_NUMERAL.match(s)
    if m:
        digits, base = m.group(1), parse_int(m.group(2))
        if 2 <= base <= 36 and len(digits) < 200:
            try:
                return Num(Poly.const(parse_int(digits, base)), percent)
            except ValueError:
                raise Invalid(f"{digits} is not a base-{base} numeral") from None
    m = _SCI.match(s)
    if m:
        mant, ex = m.groups()
        try:
            return Num(const_or_huge(decimal(f"{mant}e{ex}")), percent)
        except ValueError:
            raise TooLarge("literal too long") from None
    m = re.fullmatch(r"(-?)(\d+)\s*\\frac\s*\{(\d+)\}\s*\{(\d+)\}", s)
    if m and len(s) < 200 and parse_int(m.group(3)) < parse_int(m.group(4)):  # mixed number 2\frac{1}{2}
        v = parse_int(m.group(2)) + Fraction(parse_int(m.group(3)), parse_int(m.group(4)))
        return Num(Poly.const(-v if m.group(1) else v), percent)
    p = Parser(s, max_depth)
    v = p.parse()
    return Num(v, percent, p.decimal_digits)




def scalars_equal(a: Num, b: Num) -> bool | None:
    """Exact comparison of two scalars; None when it cannot be decided here."""
    ia = isinstance(a.value, Huge) and math.isinf(a.value.log10)
    ib = isinstance(b.value, Huge) and math.isinf(b.value.log10)
    if ia and ib and not a.percent and not b.percent:
        return a.value.sign == b.value.sign if (a.literal is None and b.literal is None) else None
    if a.literal is not None or b.literal is not None:
        if a.literal is not None and b.literal is not None:
            return a.literal == b.literal and a.percent == b.percent
        other = b if a.literal is not None else a
        lit = a.literal if a.literal is not None else b.literal
        if isinstance(other.value, Poly) and other.value.is_const():
            return False if len(lit.split(".")[0]) > 60 else None
        return None
    for x, y in ((a, b), (b, a)):
        if x.percent and not y.percent:
            return vals_equal(x, y, scale=Fraction(1)) or vals_equal(x, y, scale=Fraction(1, 100))
    return vals_equal(a, b, Fraction(1))


def vals_equal(a: Num, b: Num, scale: Fraction) -> bool | None:
    va, vb = a.value, b.value
    if isinstance(va, Huge) or isinstance(vb, Huge):
        if isinstance(va, Poly) and not va.is_const() or isinstance(vb, Poly) and not vb.is_const():
            return None
        la = va.log10 if isinstance(va, Huge) else (log10_abs(va.value()) if va.value() != 0 else -math.inf)
        lb = vb.log10 if isinstance(vb, Huge) else (log10_abs(vb.value()) if vb.value() != 0 else -math.inf)
        sa = va.sign if isinstance(va, Huge) else (1 if va.value() >= 0 else -1)
        sb = vb.sign if isinstance(vb, Huge) else (1 if vb.value() >= 0 else -1)
        if sa != sb:
            return False
        if math.isinf(la) and math.isinf(lb):
            return None
        if math.isinf(la) or math.isinf(lb):
            return False
        if abs(la - lb) > 1e-6 * max(1.0, abs(la), abs(lb)):
            return False
        return None
    if scale != 1:
        va = va * Poly.const(scale)
    if va == vb:
        return True
    if va.is_const() and vb.is_const():
        x, y = va.value(), vb.value()
        for dec, target in ((a, y), (b, x)):
            d = dec.decimal_digits
            approx = x if dec is a else y
            if d is not None and d >= APPROX_MIN_DIGITS and not terminates_within(target, d):
                if abs(approx - target) <= Fraction(1, pow10(d)):
                    return True
        return False
    # Different polynomials: unequal as functions of independent symbols (letters, pi, e). Square
    # roots are not independent (√2√3 = √6): decide those numerically, and only "unequal" for sure.
    if any(x[0] in "√#^" for x in va.symbols() | vb.symbols()):
        na, nb = va.numeric(), vb.numeric()
        if na is None or nb is None:
            return None
        for dec, mine, other in ((a, na, nb), (b, nb, na)):
            d = dec.decimal_digits
            if d is not None and d >= APPROX_MIN_DIGITS and abs(mine - other) <= fpow(10.0, -d):
                return True  # 4.123105625617661 vs \\sqrt{17}
        if abs(na - nb) > 1e-9 * max(1.0, abs(na), abs(nb)):
            return False
        return None
    return False
