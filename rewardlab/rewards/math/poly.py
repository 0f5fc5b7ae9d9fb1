"""Exact values of the math reward's fast path: polynomials with rational coefficients, and their arithmetic.

:class:`Poly` holds polynomials with ``Fraction`` coefficients in independent symbols (letters, ``pi``,
``e``) plus dependent atoms (``√m``, ``i`` as ``√-1``, numerically valued ``#sin(1):...`` atoms,
unexpanded big powers); a :data:`Value` is a Poly or a :class:`~rewardlab.rewards.math.bounded.Huge`
(sign and log10 of a value too large to hold). The arithmetic here (``plus``, ``times``, ``divide``,
``power_of``, ``factorial_of``) goes through :mod:`.bounded` for every step whose cost grows with a value.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Union

from rewardlab.rewards.math.bounded import (
    ASTRONOMICAL,
    Huge,
    TooBig,
    add,
    exact,
    exact_root,
    fpow,
    log10_abs,
    parse_int,
    power,
    product,
    small_power,
)
from rewardlab.rewards.math import bounded
from rewardlab.rewards.math.bounded import huge as _huge


MAX_POLY_DEGREE = 64
MAX_POLY_TERMS = 400
APPROX_MIN_DIGITS = 6
"""A decimal with at least this many fractional digits may approximate an exact non-terminating gold."""


class Unsupported(Exception):
    """The fast evaluator does not handle this input; the slow path will."""


class TooLarge(Unsupported):
    """A value too large to compare exactly here; the symbolic path would only expand it (not sent there)."""


class Invalid(Exception):
    """The input is not a valid value (division by zero, 0^-1, ...)."""


# ---------------------------------------------------------------------------- values

Monomial = tuple  # sorted tuple of (symbol, exponent)


class Poly:
    """A polynomial with rational coefficients in independent symbols (letters, pi). Constants too."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict):
        self.terms = {k: v for k, v in terms.items() if v != 0}

    @staticmethod
    def const(c: Fraction | int) -> "Poly":
        return Poly({(): exact(c)})

    @staticmethod
    def sym(name: str) -> "Poly":
        return Poly({((name, 1),): Fraction(1)})

    def is_const(self) -> bool:
        return not self.terms or (len(self.terms) == 1 and () in self.terms)

    def value(self) -> Fraction:
        return self.terms.get((), Fraction(0))

    def degree(self) -> int:
        return max((sum(abs(e) for _, e in m) for m in self.terms), default=0)

    def symbols(self) -> set[str]:
        return {x for m in self.terms for x, _ in m}

    def monomial_inverse(self) -> "Poly | None":
        """1/self when self is a single term c * x^a * y^b (a Laurent monomial); else None."""
        if len(self.terms) != 1:
            return None
        (m, c), = self.terms.items()
        if c == 0:
            return None
        inv: dict = {}
        coef = 1 / c
        for x, e in m:
            if x[0] == "√":  # 1/√r = √r / r
                coef /= small_power(_radicand(x), (e + 1) // 2)
                if e % 2:
                    inv[x] = 1
            else:
                inv[x] = -e
        return Poly({tuple(sorted(inv.items())): coef})

    def numeric(self) -> complex | None:
        """Float value when the only symbols are pi, e, i and square roots; else None."""
        total = 0j
        for m, c in self.terms.items():
            v = complex(float(c))
            for x, e in m:
                if x == "pi":
                    v *= fpow(math.pi, e)
                elif x == "e":
                    v *= fpow(math.e, e)
                elif x[0] == "√":
                    v *= fpow(fpow(complex(float(_radicand(x))), 0.5), e)
                elif x[0] == "#":  # an opaque constant that carries its value: "#log(2,9):3.1699..."
                    v *= fpow(complex(x.rsplit(":", 1)[1]), e)
                else:
                    return None
            total += v
        return total

    def __add__(self, o: "Poly") -> "Poly":
        t = dict(self.terms)
        for k, v in o.terms.items():
            t[k] = add(t.get(k, Fraction(0)), v)
        return Poly(t)

    def __neg__(self) -> "Poly":
        return Poly({k: -v for k, v in self.terms.items()})

    def __mul__(self, o: "Poly") -> "Poly":
        if len(self.terms) * len(o.terms) > MAX_POLY_TERMS * 4:
            raise TooLarge("polynomial too large")
        t: dict = {}
        for k1, v1 in self.terms.items():
            for k2, v2 in o.terms.items():
                d = dict(k1)
                for s, e in k2:
                    d[s] = d.get(s, 0) + e
                coef = product(v1, v2)
                for sname in [x for x in d if x[0] == "√"]:
                    e = d[sname]
                    if e >= 2 or e <= -2:  # (√r)^2 = r
                        q, rem = divmod(e, 2)
                        coef = product(coef, small_power(_radicand(sname), q))
                        d[sname] = rem
                d = {x: e for x, e in d.items() if e != 0}
                k = tuple(sorted(d.items()))
                t[k] = add(t.get(k, Fraction(0)), coef)
        p = Poly(t)
        if len(p.terms) > MAX_POLY_TERMS or p.degree() > MAX_POLY_DEGREE:
            raise TooLarge("polynomial too large")
        return p

    def __eq__(self, o: object) -> bool:
        return isinstance(o, Poly) and self.terms == o.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __repr__(self) -> str:
        if self.is_const():
            return str(self.value())
        return " + ".join(f"{v}*{'*'.join(f'{s}^{e}' for s, e in k) or '1'}" for k, v in self.terms.items())


Value = Union[Poly, Huge]


def _radicand(symbol: str) -> Fraction:
    """r of a square-root symbol "√r" (r is an integer below 10**12, or -1 for i)."""
    return exact(parse_int(symbol[1:]))


def const_or_huge(v: Fraction | int | Huge) -> Value:
    return v if isinstance(v, Huge) else Poly.const(v)


def power_of(base: Value, exp: Value) -> Value:
    if isinstance(exp, Huge):
        if isinstance(base, Poly) and base.is_const():
            b = base.value()
            if b in (0, 1):
                return base
            if exp.sign > 0 and abs(b) > 1 and b > 0:
                return _huge(1, ASTRONOMICAL)
        raise TooLarge("huge exponent")
    if not exp.is_const():
        if isinstance(base, Poly) and base.is_const() and base.value() > 0:
            ev = exp.numeric()
            if ev is not None and abs(ev.imag) < 1e-12 and abs(ev.real) < 300:
                return opaque(f"pow({base.value()},{ev.real!r})", complex(fpow(float(base.value()), ev.real)))
        raise Unsupported("symbolic exponent")
    e = exp.value()
    if isinstance(base, Huge):
        if e.denominator == 1 and e > 0:
            return _huge(base.sign if e.numerator % 2 else 1, base.log10 * float(e))
        raise TooLarge("huge base")
    if not base.is_const():
        if e.denominator != 1 or e < 0:
            raise Unsupported("polynomial power")
        if e > 8 and len(base.terms) > 1:
            # (1+x)^1000: kept as an atom named by its canonical base; equal atoms are equal values
            if e > 10**6 or len(base.terms) > 20:
                raise Unsupported("polynomial power")
            return Poly({((f"^{sorted(base.terms.items())!r}^{e}", 1),): Fraction(1)})
        out = Poly.const(1)
        for _ in range(int(e)):
            out = out * base
        return out
    b = base.value()
    if e.denominator != 1:
        if b < 0:
            raise Unsupported("root of negative")
        if b.denominator != 1 and e == Fraction(1, 2):
            return times(power_of(Poly.const(b.numerator * b.denominator), exp), Poly.const(Fraction(1, b.denominator)))
        if abs(e.numerator) > 64 or e.denominator > 64:
            raise Unsupported("large rational exponent")
        r = exact_root(b, e.denominator)
        if r is None:
            if e.denominator == 2 and e.numerator == 1 and b.denominator == 1 and b.numerator < 10**12:
                return _sqrt_symbol(int(b))
            raise Unsupported("irrational root")
        return power_of(Poly.const(r), Poly.const(e.numerator))
    if b == 0 and e < 0:
        raise Invalid("0 to a negative power")
    return const_or_huge(power(b, e.numerator))


def _sqrt_symbol(n: int) -> Poly:
    """√n = k√m with m squarefree, as a polynomial in the symbol "√m"."""
    k, m = 1, n
    f = 2
    while f * f <= m and f < 10**4:
        while m % (f * f) == 0:
            m //= f * f
            k *= f
        f += 1
    if m == 1:
        return Poly.const(k)
    return Poly({((f"√{m}", 1),): exact(k)})


def factorial_of(v: Value) -> Value:
    if not isinstance(v, Poly) or not v.is_const():
        raise Unsupported("factorial of non-constant")
    n = v.value()
    if n.denominator != 1 or n < 0:
        raise Unsupported("factorial of non-integer")
    return const_or_huge(bounded.factorial(int(n)))


def complex_log(z) -> complex:
    import cmath

    return cmath.log(complex(z))


def constant_of(v: Value) -> Fraction | complex:
    """The value of a constant (exact when rational); Unsupported for expressions with variables."""
    if isinstance(v, Huge):
        raise TooLarge("function of a huge value")
    if v.is_const():
        return v.value()
    num = v.numeric()
    if num is None:
        raise Unsupported("function of a variable")
    return num


def opaque(desc: str, value: complex) -> Poly:
    """A constant atom known only numerically (sin(1), log(2,9), ...); its name carries its value."""
    if abs(value.imag) < 1e-12:
        value = complex(value.real, 0.0)
    return Poly({((f"#{desc}:{value!r}".replace(" ", ""), 1),): Fraction(1)})


def negate(v: Value) -> Value:
    return Huge(-v.sign, v.log10) if isinstance(v, Huge) else -v


def plus(a: Value, b: Value) -> Value:
    if isinstance(a, Huge) or isinstance(b, Huge):
        return _add_magnitudes(a, b)
    try:
        return a + b
    except TooBig:
        raise TooLarge("sum too large to hold exactly") from None


def _add_magnitudes(a: Value, b: Value) -> Huge:
    """A sum with a huge term, as a magnitude: 10^{10^9} + 1 is 10^{10^9} to any precision a magnitude has.
    A term that is not a constant, or two of opposite signs within 20 orders of magnitude (they may
    cancel), are not added."""
    logs = []
    for v in (a, b):
        if isinstance(v, Huge):
            logs.append((v.sign, v.log10))
        elif v.is_const():
            c = v.value()
            if c != 0:
                logs.append((1 if c > 0 else -1, log10_abs(c)))
        else:
            raise TooLarge("arithmetic on huge values")
    logs.sort(key=lambda t: t[1], reverse=True)
    (sign, top), rest = logs[0], logs[1:]
    if top >= ASTRONOMICAL:
        if rest and rest[0][1] >= ASTRONOMICAL:
            raise TooLarge("a sum of astronomical values")
        return _huge(sign, ASTRONOMICAL)
    if not rest:
        return _huge(sign, top)
    other_sign, other = rest[0]
    if other_sign != sign and top - other < 20:
        raise TooLarge("a difference of huge values that may cancel")
    ratio = fpow(10.0, max(other - top, -300.0))
    return _huge(sign, top + math.log10(1 + ratio if other_sign == sign else 1 - ratio))


def times(a: Value, b: Value) -> Value:
    if isinstance(a, Poly) and isinstance(b, Poly) and a.is_const() and b.is_const() and a.value() and b.value():
        x, y = a.value(), b.value()
        try:
            return Poly.const(product(x, y))
        except TooBig:  # an exact product beyond the budget: its magnitude
            return _huge(1 if (x > 0) == (y > 0) else -1, log10_abs(x) + log10_abs(y))
    if isinstance(a, Huge) or isinstance(b, Huge):
        if isinstance(a, Poly) and a.is_const() and a.value() != 0:
            return _huge(b.sign * (1 if a.value() > 0 else -1), b.log10 + log10_abs(a.value()))
        if isinstance(b, Poly) and b.is_const() and b.value() != 0:
            return _huge(a.sign * (1 if b.value() > 0 else -1), a.log10 + log10_abs(b.value()))
        raise TooLarge("arithmetic on huge values")
    try:
        return a * b
    except TooBig:
        raise TooLarge("coefficients too large") from None


def divide(a: Value, b: Value) -> Value:
    if isinstance(b, Huge):
        if isinstance(a, Poly) and a.is_const() and a.value() != 0:
            v = a.value()
            return _huge(b.sign * (1 if v > 0 else -1), log10_abs(v) - b.log10)
        raise TooLarge("division by huge value")
    if not b.is_const():
        inv = b.monomial_inverse()
        if inv is None:
            raise Unsupported("division by a polynomial")
        if isinstance(a, Huge):
            raise TooLarge("huge over polynomial")
        return a * inv
    d = b.value()
    if d == 0:
        raise Invalid("division by zero")
    if isinstance(a, Huge):
        return _huge(a.sign * (1 if d > 0 else -1), a.log10 - log10_abs(d))
    return times(a, Poly.const(1 / d))
