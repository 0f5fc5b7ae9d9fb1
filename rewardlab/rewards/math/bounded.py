"""Bounded exact arithmetic: the only place in the math reward where a cost can grow with a *value*.

Python's exact arithmetic costs time and memory in proportion to the size of its results:
``Fraction("1e99999999")`` builds a 100-million-digit integer (it never returns), ``2 ** 10**9``,
``math.factorial(10**7)`` and ``math.comb(10**9, 10**5)`` likewise. Every such operation of the fast
path goes through a function here, which estimates the size of its result *before* computing it (from
bit lengths and logarithms, in constant time) and, beyond :data:`BUDGET_LOG10`, returns a
:class:`Huge` magnitude (sign and log10) instead of the exact value. The callers compare magnitudes
without ever expanding them, or leave the pair undecided for the worker, which the pool can stop.

``tests/test_math_bounded.py`` parses every module of ``rewardlab/rewards/math`` and fails when such an
operation (``**``, shifts, ``factorial``/``comb``/``pow``, ``Fraction(text)``, ``int(text)``) appears
outside this module, so a new one cannot bypass the budget.

    >>> from rewardlab.rewards.math import bounded
    >>> bounded.decimal("1e99999999")
    Huge(sign=1, log10=99999999.0)
    >>> bounded.decimal("2.5e-3")
    Fraction(1, 400)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

BUDGET_LOG10 = 5000.0
"""Exact values are kept up to 10**BUDGET_LOG10 (in magnitude, numerator and denominator alike)."""
MAX_LITERAL_DIGITS = 2000
"""Number literals with more significant digits than this are compared as text only."""
ASTRONOMICAL = 1e300
"""log10 of values too large even for a float log (power towers): equal only to themselves, textually."""
_LOG10_2 = math.log10(2)


class TooBig(Exception):
    """A result would exceed the budget and has no magnitude form where it was asked for."""


@dataclass(frozen=True)
class Huge:
    """A real number too large to hold exactly: its sign and log10 of its magnitude (inf = astronomical)."""

    sign: int
    log10: float


def huge(sign: int, log10: float) -> Huge:
    """A magnitude, clamped so that arithmetic on towers never reaches the infinity reserved for ``\\infty``."""
    if math.isnan(log10) or log10 > ASTRONOMICAL:
        log10 = ASTRONOMICAL
    return Huge(sign, max(log10, -ASTRONOMICAL))


def _log10_int(n: int) -> float:
    n = abs(n)
    return math.log10(n) if n.bit_length() < 1000 else n.bit_length() * _LOG10_2


def log10_abs(c: Fraction | int) -> float:
    """log10 |c| in constant time (from bit lengths beyond 1000 bits); c must not be 0."""
    c = Fraction(c)
    return _log10_int(c.numerator) - _log10_int(c.denominator)


def size_log10(c: Fraction | int) -> float:
    """The size of an exact rational in decimal digits: log10 of its larger part."""
    c = Fraction(c)
    return max(c.numerator.bit_length(), c.denominator.bit_length()) * _LOG10_2


def exact(c: Fraction | int) -> Fraction:
    """An exact rational from an int or a Fraction (never from text: see :func:`decimal`)."""
    if isinstance(c, bool) or not isinstance(c, (int, Fraction)):
        raise TypeError(f"exact() takes an int or a Fraction, not {type(c).__name__}")
    return Fraction(c)


def _check(log10_size: float) -> None:
    if log10_size > BUDGET_LOG10:
        raise TooBig(f"result of about 10^{log10_size:.0f}")


# ---------------------------------------------------------------------------- text to numbers

_DECIMAL = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?\d+))?")


def decimal(txt: str) -> Fraction | Huge:
    """The value of a decimal literal (``12``, ``-3.25``, ``.5``, ``6.02e23``, ``1e99999999``).

    The mantissa may have at most :data:`MAX_LITERAL_DIGITS` digits (``ValueError`` beyond); the
    exponent is read as a number only when its result fits the budget, else the value is a
    :class:`Huge` (a tiny value is a Huge with a negative log10)."""
    m = _DECIMAL.fullmatch(txt.strip())
    if not m or not (m.group(2) or m.group(3)):
        raise ValueError(f"not a decimal literal: {txt[:40]!r}")
    sign, ip, fp, ex = m.group(1), m.group(2) or "", m.group(3) or "", m.group(4)
    digits = (ip + fp).lstrip("0")
    if len(digits) > MAX_LITERAL_DIGITS:
        raise ValueError("literal too long")
    neg = sign == "-"
    if not digits:
        return Fraction(0)
    mant = Fraction(int(digits), 1)
    shift = -len(fp)
    if ex is not None:
        ex_digits = ex.lstrip("+-").lstrip("0")
        if len(ex_digits) > 15:  # more than 10**15: a magnitude log10 cannot even hold exactly
            return huge(-1 if neg else 1, ASTRONOMICAL if not ex.startswith("-") else -ASTRONOMICAL)
        shift += int(ex)
    lg = _log10_int(mant.numerator) + shift
    if abs(lg) > BUDGET_LOG10 or abs(shift) > BUDGET_LOG10 + MAX_LITERAL_DIGITS:
        return huge(-1 if neg else 1, lg)
    value = mant * pow10(shift) if shift >= 0 else mant / pow10(-shift)
    return -value if neg else value


def parse_int(digits: str, base: int = 10) -> int:
    """An integer from its digits in ``base`` (2-36), at most :data:`MAX_LITERAL_DIGITS` of them."""
    if len(digits.lstrip("+-")) > MAX_LITERAL_DIGITS:
        raise ValueError("integer literal too long")
    return int(digits, base)


def repeating(int_part: str, fixed: str, period: str) -> Fraction:
    """``int_part.fixed(period)(period)...`` as a fraction: 0.1(6) = 1/6."""
    if len(int_part) + len(fixed) + len(period) > MAX_LITERAL_DIGITS or not period:
        raise ValueError("repeating decimal too long")
    whole = parse_int((int_part or "0") + fixed + period)
    head = parse_int((int_part or "0") + fixed)
    return Fraction(whole - head, pow10(len(fixed)) * (pow10(len(period)) - 1))


# ---------------------------------------------------------------------------- operations

def pow10(d: int) -> int:
    """10**d for 0 <= d within the budget (and the literal digits a shift may add)."""
    if d < 0 or d > BUDGET_LOG10 + MAX_LITERAL_DIGITS:
        raise TooBig(f"10^{d}")
    return 10 ** d


def terminates_within(c: Fraction, digits: int) -> bool:
    """Whether c has at most ``digits`` fractional decimal digits."""
    return (c * pow10(digits)).denominator == 1


def product(a: Fraction, b: Fraction) -> Fraction:
    """a * b, refused (:class:`TooBig`) when the result would exceed the budget."""
    _check(size_log10(a) + size_log10(b))
    return a * b


def add(a: Fraction, b: Fraction) -> Fraction:
    """a + b, refused (:class:`TooBig`) when the result's denominator could exceed the budget."""
    if a.denominator != b.denominator:
        _check(size_log10(a) + size_log10(b))
    return a + b


def power(base: Fraction, n: int) -> Fraction | Huge:
    """base ** n for an integer n: exact within the budget, else its magnitude."""
    if base == 0:
        if n < 0:
            raise ZeroDivisionError("0 to a negative power")
        return Fraction(1 if n == 0 else 0)
    if abs(base) == 1:
        return Fraction(1 if base > 0 or n % 2 == 0 else -1)
    sign = -1 if (base < 0 and n % 2) else 1
    if abs(n) * max(_log10_int(base.numerator), _log10_int(base.denominator)) > BUDGET_LOG10:
        return huge(sign, n * log10_abs(base))
    return base ** n


def small_power(base: Fraction, n: int) -> Fraction:
    """base ** n where a magnitude has no use (polynomial coefficients): :class:`TooBig` beyond the budget."""
    out = power(base, n)
    if isinstance(out, Huge):
        raise TooBig("power too large")
    return out


def fpow(x: float | complex, e: float | complex) -> float | complex:
    """A float or complex power: constant cost (overflow is the caller's to catch)."""
    return x ** e


def factorial(n: int) -> int | Huge:
    """n! exactly within the budget, else its magnitude (from lgamma)."""
    if n < 0:
        raise ValueError("factorial of a negative number")
    if n > 1e300:
        return huge(1, ASTRONOMICAL)
    lg = math.lgamma(n + 1) / math.log(10)
    if lg > BUDGET_LOG10:
        return huge(1, lg)
    return math.factorial(n)


def binomial(n: int, k: int) -> int | Huge:
    """C(n, k) for integers n >= 0: exact within the budget (cost grows with min(k, n-k)), else its magnitude."""
    if n < 0:
        raise ValueError("binomial of a negative number")
    if k < 0 or k > n:
        return 0
    k = min(k, n - k)
    if n > 1e300:
        return huge(1, ASTRONOMICAL)
    # log10 C(n, k) <= k * log10(n): a cheap bound on the result's size decides whether to compute it
    if k * max(math.log10(max(n, 2)), 1.0) <= BUDGET_LOG10:
        return math.comb(n, k)
    lg = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(10)
    return huge(1, lg)


def integer_root(x: int, k: int) -> int | None:
    """The exact k-th root of x >= 0, or None (also for x beyond 4,000 bits)."""
    if x < 0 or k < 1 or x.bit_length() > 4000 or k > 64:
        return None
    r = round(x ** (1.0 / k)) if x.bit_length() < 1000 else int(math.exp(math.log(x) / k))
    for cand in (r - 1, r, r + 1):
        if cand >= 0 and cand ** k == x:
            return cand
    lo, hi = 0, 1 << (x.bit_length() // k + 1)
    while lo < hi:
        mid = (lo + hi) // 2
        if mid ** k < x:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo ** k == x else None


def exact_root(c: Fraction, k: int) -> Fraction | None:
    """The exact k-th root of a rational c >= 0, or None."""
    n, d = integer_root(c.numerator, k), integer_root(c.denominator, k)
    if n is None or d is None:
        return None
    return Fraction(n, d)


def integer_log(base: Fraction, value: Fraction, limit: int = 64) -> int | None:
    """k with base**k == value for |k| < limit (exact integer logarithms: log_2 8 = 3), else None."""
    if base <= 0 or base == 1 or value <= 0:
        return None
    guess = round(log10_abs(value) / log10_abs(base))
    for k in (guess - 1, guess, guess + 1):
        if abs(k) < limit and power(base, k) == value:
            return k
    return None
