"""The fast path's evaluator: a recursive-descent parser of one LaTeX or plain-text scalar into a Value.

It reads ``\\frac``, ``\\sqrt``, ``^``, ``!``, ``\\log_b``, ``\\binom``, ``|x|`` and implicit products, bounded
in nesting depth by ``max_depth``, and raises :class:`~rewardlab.rewards.math.poly.Unsupported` for anything else.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from rewardlab.rewards.math.bounded import (
    binomial,
    decimal,
    integer_log,
    parse_int,
)
from rewardlab.rewards.math.forms import exact_trig
from rewardlab.rewards.math.poly import (
    Invalid,
    Poly,
    TooLarge,
    Unsupported,
    Value,
    complex_log,
    const_or_huge,
    constant_of,
    divide,
    factorial_of,
    negate,
    opaque,
    plus,
    power_of,
    times,
)


# ---------------------------------------------------------------------------- the evaluator

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+(?![A-Za-z]))?|\.\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<cmd>\\[A-Za-z]+|\\[{}|])|(?P<letter>[A-Za-z])|(?P<op>[-+*/^!(){}\[\]|_'])"
    r")"
)
_FUNCS = {"\\sin", "\\cos", "\\tan", "\\log", "\\ln", "\\exp", "\\sec", "\\csc", "\\cot", "\\arcsin", "\\arccos",
          "\\arctan",
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
_TRIG = {"\\sin", "\\cos", "\\tan", "\\cot", "\\sec", "\\csc"}


class Parser:
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
            v = negate(v)
        while True:
            t = self.peek()
            if t is None or t[0] != "op" or t[1] not in "+-":
                break
            self.take()
            rhs = self.term()
            v = plus(v, rhs if t[1] == "+" else negate(rhs))
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
                v = times(v, self.unary())
            elif t[1] in ("/", "\\div"):
                self.take()
                v = divide(v, self.unary())
            elif t[0] in ("num", "letter") or t[1] in ("(", "{", "\\frac", "\\sqrt", "\\pi") or t[1] in _TRIG:
                if t[0] == "num" and self.toks[self.i - 1][0] == "num":  # "1 11", "-9 1": a list or junk, not 11
                    raise Invalid("two numbers side by side")
                v = times(v, self.power())  # implicit product: 2x, 3\pi, (a+b)(a-b)
            else:
                break
        return v

    def unary(self) -> Value:
        t = self.peek()
        if t is not None and t[0] == "op" and t[1] in "+-":
            self.take()
            v = self.unary()
            return negate(v) if t[1] == "-" else v
        return self.power()

    def power(self) -> Value:
        v = self.postfix()
        t = self.peek()
        if t is not None and t[1] == "^":
            self.take()
            self._enter()
            e = self.exponent()
            self.depth -= 1
            v = power_of(v, e)
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
            e = negate(e) if t[1] == "-" else e
        else:
            e = self.postfix()
        t = self.peek()
        if t is not None and t[1] == "^":  # right-associative tower a^b^c
            self.take()
            e = power_of(e, self.exponent())
        return e

    def postfix(self) -> Value:
        v = self.atom()
        while True:
            t = self.peek()
            if t is not None and t[1] == "!":
                self.take()
                v = factorial_of(v)
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
        return const_or_huge(v)

    def function(self, name: str) -> Value:
        """Functions of constants: exact when possible (log_2 8, binom, |.|), else a valued opaque atom."""
        self.take()
        if name == "|":
            arg = self.expr()
            self.expect("|")
            c = constant_of(arg)
            return opaque(f"abs({c})", abs(c)) if not isinstance(c, Fraction) else Poly.const(abs(c))
        if name == "\\binom":
            n, k = constant_of(self.group()), constant_of(self.group())
            if not (isinstance(n, Fraction) and isinstance(k, Fraction) and n.denominator == k.denominator == 1
                    and n >= 0):
                raise Unsupported("binomial of non-integers")
            return const_or_huge(binomial(int(n), int(k)))
        base: Value | None = None
        if name == "\\log" and self.peek() is not None and self.peek()[1] == "_":
            self.take()
            base = self.group()
        power = self._function_power(name)
        value = self._function_value(name, base)
        return value if power is None else power_of(value, power)

    def _function_power(self, name: str) -> Value | None:
        """``\\sec^2 y`` is (sec y)^2: a positive integer power of a trigonometric function (``\\sin^{-1}`` is
        arcsin, refused); None when no power is written."""
        if self.peek() is None or self.peek()[1] != "^":
            return None
        if name not in _TRIG:
            raise Unsupported("power of a function")
        self.take()
        power = self.exponent()
        if not (isinstance(power, Poly) and power.is_const() and power.value() > 0
                and power.value().denominator == 1 and power.value() <= 8):
            raise Unsupported("only small positive integer powers of a function")
        return power

    def _function_value(self, name: str, base: Value | None) -> Value:
        t = self.peek()
        arg = self.group() if t is not None and t[1] in ("{", "(") else self.postfix()
        exact = self._exact_trig(name, arg)
        if exact is not None:
            return exact
        c = constant_of(arg)
        if name == "\\log" and base is not None:
            b = constant_of(base)
            if isinstance(b, Fraction) and isinstance(c, Fraction):
                k = integer_log(b, c)  # exact integer logarithms: log_2 8 = 3
                if k is not None:
                    return Poly.const(k)
            val = complex(complex_log(c) / complex_log(b))
            return opaque(f"log({b},{c})", val)
        fn = _UNARY_FUNCS[name]
        try:
            val = complex(fn(complex(c)))
        except (ValueError, ZeroDivisionError, OverflowError):
            raise Invalid(f"{name} undefined here") from None
        return opaque(f"{name[1:]}({c})", val)

    @staticmethod
    def _exact_trig(name: str, arg: Value) -> Value | None:
        """sin(pi/3) = sqrt(3)/2 exactly (:func:`~rewardlab.rewards.math.forms.exact_trig`); None: not such an angle,
        or a quotient of radicals this evaluator cannot divide (then the numeric atom decides unequal only)."""
        ex = exact_trig(name, arg, lambda latex: Parser(latex, 10).parse())
        if ex is None:
            return None
        num, den = ex
        if den is None:
            return num
        if den.is_const() and den.value() == 0:
            raise Invalid(f"{name} has a pole here")
        try:
            return divide(num, den)
        except Unsupported:
            return None

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
                return divide(num, den)
            if val == "\\sqrt":
                self.take()
                k = 2
                if self.peek() is not None and self.peek()[1] == "[":
                    self.take()
                    idx = self.expr()
                    self.expect("]")
                    if not (isinstance(idx, Poly) and idx.is_const() and idx.value().denominator == 1
                            and 2 <= idx.value() <= 64):
                        raise Unsupported("root index")
                    k = int(idx.value())
                arg = self.group()
                return power_of(arg, Poly.const(Fraction(1, k)))
            if val == "\\pi":
                self.take()
                return Poly.sym("pi")
            if val in ("\\lceil", "\\lfloor"):
                self.take()
                inner = self.expr()
                self.expect("\\rceil" if val == "\\lceil" else "\\rfloor")
                c = constant_of(inner)
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
