"""Exact values for the math reward's fast path: rationals, polynomials, magnitudes, and their evaluator.

Pure Python and bounded: :class:`Poly` holds polynomials with ``Fraction`` coefficients in independent
symbols (letters, ``pi``, ``e``) plus dependent atoms (``√m``, ``i`` as ``√-1``, numerically valued
``#sin(1):...`` atoms, unexpanded big powers); :class:`Huge` keeps the sign and log10 of values too
large to hold (power towers, huge factorials) so that they are compared by magnitude, never expanded.
:func:`parse_scalar` evaluates one LaTeX/plain-text scalar (``\\frac``, ``\\sqrt``, ``^``, ``!``,
``\\log_b``, ``\\binom``, ``|x|``, implicit products) and raises :class:`Unsupported` for anything
else; :func:`scalars_equal` compares two of them exactly (``None`` when it cannot decide).
Used by :mod:`rewardlab.rewards.math.equiv`; see ``rewardlab reward math`` to try it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Union

from rewardlab.rewards.math.bounded import (
    ASTRONOMICAL,
    MAX_LITERAL_DIGITS,
    Huge,
    TooBig,
    add,
    binomial,
    decimal,
    exact,
    exact_root,
    fpow,
    integer_log,
    log10_abs,
    parse_int,
    pow10,
    power,
    product,
    small_power,
    terminates_within,
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


def _const_or_huge(v: Fraction | int | Huge) -> Value:
    return v if isinstance(v, Huge) else Poly.const(v)


def _pow(base: Value, exp: Value) -> Value:
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
                return _opaque(f"pow({base.value()},{ev.real!r})", complex(fpow(float(base.value()), ev.real)))
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
            return _mul(_pow(Poly.const(b.numerator * b.denominator), exp), Poly.const(Fraction(1, b.denominator)))
        if abs(e.numerator) > 64 or e.denominator > 64:
            raise Unsupported("large rational exponent")
        r = exact_root(b, e.denominator)
        if r is None:
            if e.denominator == 2 and e.numerator == 1 and b.denominator == 1 and b.numerator < 10**12:
                return _sqrt_symbol(int(b))
            raise Unsupported("irrational root")
        return _pow(Poly.const(r), Poly.const(e.numerator))
    if b == 0 and e < 0:
        raise Invalid("0 to a negative power")
    return _const_or_huge(power(b, e.numerator))


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


def _factorial(v: Value) -> Value:
    if not isinstance(v, Poly) or not v.is_const():
        raise Unsupported("factorial of non-constant")
    n = v.value()
    if n.denominator != 1 or n < 0:
        raise Unsupported("factorial of non-integer")
    return _const_or_huge(bounded.factorial(int(n)))


# ---------------------------------------------------------------------------- the evaluator

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+(?![A-Za-z]))?|\.\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<cmd>\\[A-Za-z]+|\\[{}|])|(?P<letter>[A-Za-z])|(?P<op>[-+*/^!(){}\[\]|_'])"
    r")"
)
_FUNCS = {"\\sin", "\\cos", "\\tan", "\\log", "\\ln", "\\exp", "\\sec", "\\csc", "\\cot", "\\arcsin", "\\arccos", "\\arctan",
          "\\sum", "\\prod", "\\int", "\\lim", "\\binom", "\\choose", "\\lfloor", "\\lceil", "\\infty", "\\pm", "\\mp",
          "\\cup", "\\cap", "\\setminus", "\\in", "\\le", "\\ge", "\\ne", "\\approx", "\\equiv", "\\mathbb", "\\vec",
          "\\overline", "\\hat", "\\begin", "\\end", "\\angle", "\\triangle", "\\sim", "\\cong", "\\perp", "\\parallel"}


def _cot(z: complex) -> complex:
    import cmath

    return 1 / cmath.tan(z)


def _unary_funcs() -> dict:
    import cmath

    return {"\\sin": cmath.sin, "\\cos": cmath.cos, "\\tan": cmath.tan, "\\cot": _cot,
            "\\sec": lambda z: 1 / cmath.cos(z), "\\csc": lambda z: 1 / cmath.sin(z),
            "\\ln": cmath.log, "\\log": cmath.log, "\\exp": cmath.exp}


_UNARY_FUNCS = _unary_funcs()


class _Parser:
    """Recursive-descent evaluator over a token list; ``max_depth`` bounds the nesting it accepts."""

    def __init__(self, s: str, max_depth: int):
        self.toks: list[tuple[str, str]] = []
        pos = 0
        n = len(s)
        while pos < n:
            m = _TOKEN.match(s, pos)
            if not m or m.end() == pos:
                if s[pos:].strip() == "":
                    break
                raise Unsupported(f"unexpected character {s[pos]!r}")
            kind = m.lastgroup
            self.toks.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0
        self.depth = 0
        self.max_depth = max_depth
        self.decimal_digits: int | None = None
        self.inexact_literal = False

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, val: str) -> None:
        t = self.peek()
        if t is None or t[1] != val:
            raise Unsupported(f"expected {val!r}")
        self.i += 1

    def parse(self) -> Value:
        v = self.expr()
        if self.peek() is not None:
            raise Unsupported(f"trailing {self.peek()[1]!r}")
        return v

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise Unsupported("nesting too deep")

    def expr(self) -> Value:
        self._enter()
        sign = 1
        t = self.peek()
        while t is not None and t[1] in "+-" and t[0] == "op":
            self.take()
            sign = -sign if t[1] == "-" else sign
            t = self.peek()
        v = self.term()
        if sign < 0:
            v = _neg(v)
        while True:
            t = self.peek()
            if t is None or t[0] != "op" or t[1] not in "+-":
                break
            self.take()
            rhs = self.term()
            v = _add(v, rhs if t[1] == "+" else _neg(rhs))
        self.depth -= 1
        return v

    def term(self) -> Value:
        v = self.unary()
        while True:
            t = self.peek()
            if t is None:
                break
            if t[1] in ("*", "\\cdot", "\\times"):
                self.take()
                v = _mul(v, self.unary())
            elif t[1] in ("/", "\\div"):
                self.take()
                v = _div(v, self.unary())
            elif t[0] in ("num", "letter") or t[1] in ("(", "{", "\\frac", "\\sqrt", "\\pi"):
                if t[0] == "num" and self.toks[self.i - 1][0] == "num":  # "1 11", "-9 1": a list or junk, not 11
                    raise Invalid("two numbers side by side")
                v = _mul(v, self.power())  # implicit product: 2x, 3\pi, (a+b)(a-b)
            else:
                break
        return v

    def unary(self) -> Value:
        t = self.peek()
        if t is not None and t[0] == "op" and t[1] in "+-":
            self.take()
            v = self.unary()
            return _neg(v) if t[1] == "-" else v
        return self.power()

    def power(self) -> Value:
        v = self.postfix()
        t = self.peek()
        if t is not None and t[1] == "^":
            self.take()
            self._enter()
            e = self.exponent()
            self.depth -= 1
            v = _pow(v, e)
        return v

    def exponent(self) -> Value:
        t = self.peek()
        if t is None:
            raise Unsupported("missing exponent")
        if t[1] == "{":
            self.take()
            e = self.expr()
            self.expect("}")
        elif t[0] == "num":  # x^23 in LaTeX is x^2 * 3; plain text 10^23 is 10**23: refuse the ambiguity
            self.take()
            if len(t[1]) > 1 and "." not in t[1]:
                raise Unsupported("ambiguous multi-digit exponent")
            e = self._literal(t[1])
        elif t[1] in "+-":
            self.take()
            e = self.exponent()
            e = _neg(e) if t[1] == "-" else e
        else:
            e = self.postfix()
        t = self.peek()
        if t is not None and t[1] == "^":  # right-associative tower a^b^c
            self.take()
            e = _pow(e, self.exponent())
        return e

    def postfix(self) -> Value:
        v = self.atom()
        while True:
            t = self.peek()
            if t is not None and t[1] == "!":
                self.take()
                v = _factorial(v)
            else:
                return v

    def group(self) -> Value:
        """``{...}`` argument, or a single token (``\\frac12``)."""
        t = self.peek()
        if t is None:
            raise Unsupported("missing argument")
        if t[1] == "{":
            self.take()
            v = self.expr()
            self.expect("}")
            return v
        if t[0] == "num":
            self.take()
            if len(t[1]) > 1 and "." not in t[1]:
                # \frac12 means \frac{1}{2}: split the digit run
                self.toks.insert(self.i, ("num", t[1][1:]))
                return Poly.const(parse_int(t[1][0]))
            return self._literal(t[1])
        return self.atom()

    def _literal(self, txt: str) -> Value:
        try:
            v = decimal(txt)
        except ValueError:
            raise TooLarge("literal too long") from None
        if "." in txt and "e" not in txt.lower():
            self.decimal_digits = max(self.decimal_digits or 0, len(txt.split(".", 1)[1]))
        return _const_or_huge(v)

    def function(self, name: str) -> Value:
        """Functions of constants: exact when possible (log_2 8, binom, |.|), else a valued opaque atom."""
        self.take()
        if name == "|":
            arg = self.expr()
            self.expect("|")
            c = _constant(arg)
            return _opaque(f"abs({c})", abs(c)) if not isinstance(c, Fraction) else Poly.const(abs(c))
        if name == "\\binom":
            n, k = _constant(self.group()), _constant(self.group())
            if not (isinstance(n, Fraction) and isinstance(k, Fraction) and n.denominator == k.denominator == 1 and n >= 0):
                raise Unsupported("binomial of non-integers")
            return _const_or_huge(binomial(int(n), int(k)))
        base: Value | None = None
        if name == "\\log" and self.peek() is not None and self.peek()[1] == "_":
            self.take()
            base = self.group()
        if self.peek() is not None and self.peek()[1] == "^":
            raise Unsupported("power of a function")
        t = self.peek()
        arg = self.group() if t is not None and t[1] in ("{", "(") else self.postfix()
        c = _constant(arg)
        if name == "\\log" and base is not None:
            b = _constant(base)
            if isinstance(b, Fraction) and isinstance(c, Fraction):
                k = integer_log(b, c)  # exact integer logarithms: log_2 8 = 3
                if k is not None:
                    return Poly.const(k)
            val = complex(_cmath_log(c) / _cmath_log(b))
            return _opaque(f"log({b},{c})", val)
        fn = _UNARY_FUNCS[name]
        try:
            val = complex(fn(complex(c)))
        except (ValueError, ZeroDivisionError, OverflowError):
            raise Invalid(f"{name} undefined here") from None
        return _opaque(f"{name[1:]}({c})", val)

    def atom(self) -> Value:
        self._enter()
        try:
            t = self.peek()
            if t is None:
                raise Unsupported("unexpected end")
            kind, val = t
            if kind == "num":
                self.take()
                return self._literal(val)
            if kind == "letter":
                self.take()
                if self.i >= 3 and all(k == "letter" for k, _ in self.toks[self.i - 3:self.i]):
                    raise Unsupported("a word, not a product of variables")
                if val == "i":
                    return Poly({(("√-1", 1),): Fraction(1)})
                nxt = self.peek()
                if nxt is not None and nxt[1] in ("_", "'", "("):
                    raise Unsupported("subscripted variable or function call")
                return Poly.sym(val)
            if val in ("(", "{", "["):
                self.take()
                v = self.expr()
                self.expect({"(": ")", "{": "}", "[": "]"}[val])
                return v
            if val == "\\frac":
                self.take()
                num = self.group()
                den = self.group()
                return _div(num, den)
            if val == "\\sqrt":
                self.take()
                k = 2
                if self.peek() is not None and self.peek()[1] == "[":
                    self.take()
                    idx = self.expr()
                    self.expect("]")
                    if not (isinstance(idx, Poly) and idx.is_const() and idx.value().denominator == 1 and 2 <= idx.value() <= 64):
                        raise Unsupported("root index")
                    k = int(idx.value())
                arg = self.group()
                return _pow(arg, Poly.const(Fraction(1, k)))
            if val == "\\pi":
                self.take()
                return Poly.sym("pi")
            if val in ("\\lceil", "\\lfloor"):
                self.take()
                inner = self.expr()
                self.expect("\\rceil" if val == "\\lceil" else "\\rfloor")
                c = _constant(inner)
                if not isinstance(c, Fraction):
                    c = c.real if abs(c.imag) < 1e-12 else None
                    if c is None or abs(c - round(c)) < 1e-9:
                        raise Unsupported("ceiling/floor too close to an integer to decide numerically")
                return Poly.const(math.ceil(c) if val == "\\lceil" else math.floor(c))
            if val in _UNARY_FUNCS or val in ("\\log", "\\binom", "|"):
                return self.function(val)
            raise Unsupported(f"token {val!r}")
        finally:
            self.depth -= 1


def _cmath_log(z) -> complex:
    import cmath

    return cmath.log(complex(z))


def _constant(v: Value) -> Fraction | complex:
    """The value of a constant (exact when rational); Unsupported for expressions with variables."""
    if isinstance(v, Huge):
        raise TooLarge("function of a huge value")
    if v.is_const():
        return v.value()
    num = v.numeric()
    if num is None:
        raise Unsupported("function of a variable")
    return num


def _opaque(desc: str, value: complex) -> Poly:
    """A constant atom known only numerically (sin(1), log(2,9), ...); its name carries its value."""
    if abs(value.imag) < 1e-12:
        value = complex(value.real, 0.0)
    return Poly({((f"#{desc}:{value!r}".replace(" ", ""), 1),): Fraction(1)})


def _neg(v: Value) -> Value:
    return Huge(-v.sign, v.log10) if isinstance(v, Huge) else -v


def _add(a: Value, b: Value) -> Value:
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


def _mul(a: Value, b: Value) -> Value:
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


def _div(a: Value, b: Value) -> Value:
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
    return _mul(a, Poly.const(1 / d))


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
            return Num(_const_or_huge(decimal(f"{mant}e{ex}")), percent)
        except ValueError:
            raise TooLarge("literal too long") from None
    m = re.fullmatch(r"(-?)(\d+)\s*\\frac\s*\{(\d+)\}\s*\{(\d+)\}", s)
    if m and len(s) < 200 and parse_int(m.group(3)) < parse_int(m.group(4)):  # mixed number 2\frac{1}{2}
        v = parse_int(m.group(2)) + Fraction(parse_int(m.group(3)), parse_int(m.group(4)))
        return Num(Poly.const(-v if m.group(1) else v), percent)
    p = _Parser(s, max_depth)
    v = p.parse()
    return Num(v, percent, p.decimal_digits)


_terminates_within = terminates_within


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
            return _vals_equal(x, y, scale=Fraction(1)) or _vals_equal(x, y, scale=Fraction(1, 100))
    return _vals_equal(a, b, Fraction(1))


def _vals_equal(a: Num, b: Num, scale: Fraction) -> bool | None:
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
            if d is not None and d >= APPROX_MIN_DIGITS and not _terminates_within(target, d):
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
