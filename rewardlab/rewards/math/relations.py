"""Equations and inequalities of the fast path, and the sets that inequalities describe.

:func:`relations` reads ``a < b \\le c`` as canonical (polynomial, op) pairs; :func:`relations_as_interval`
reads bounds on one variable as an interval. :func:`relation_sets_equal` (issue 40) compares the set an
answer's inequalities describe with the other side's set, so that these no longer reach the slow path:

* disjunctions: ``x \\le -3 or x \\ge 2`` is ``(-\\infty, -3] \\cup [2, \\infty)``;
* absolute values: ``1 \\le |z| \\le \\frac32`` is ``[-\\frac32, -1] \\cup [1, \\frac32]``, ``|x| < 3`` is ``(-3, 3)``;
* a function's range: ``0 < f(x) < 1`` is ``(0, 1)`` (the set of values of ``f(x)``).

Every disjunct must bound the same variable (or the same ``|v|`` / ``f(x)``); anything else (``=``, ``\\ne``,
two variables, a constant relation) is left to the other rules, as before.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from rewardlab.rewards.math.structures import Seq, canonical_union, parse_structure, top_level_split
from rewardlab.rewards.math.values import Huge, Invalid, Num, Poly, Unsupported, parse_scalar
from rewardlab.rewards.math.poly import negate

_REL_SPLIT = re.compile(r"\\le(?![a-z])|\\ge(?![a-z])|\\ne(?![a-z])|<|>|=")
_FLIP = {">": "<", "\\ge": "\\le"}


def relations(s: str, max_depth: int) -> list[tuple[tuple, str]] | None:
    """``a < b \\le c`` as canonical (polynomial, op) pairs with op in <, \\le, =, \\ne; None if not parsable."""
    if top_level_split(s, ",") or "\\in" in s:
        return None
    parts, ops, last = [], [], 0
    depth = 0
    for m in _REL_SPLIT.finditer(s):
        seg = s[last:m.start()]
        depth += sum(seg.count(c) for c in "({[") - sum(seg.count(c) for c in ")}]")
        if depth != 0:
            return None
        parts.append(s[last:m.start()])
        ops.append(m.group(0))
        last = m.end()
    parts.append(s[last:])
    if not ops:
        return None
    out = []
    for (lhs, rhs), op in zip(zip(parts, parts[1:]), ops):
        a, b = parse_scalar(lhs, max_depth), parse_scalar(rhs, max_depth)
        if not (isinstance(a.value, Poly) and isinstance(b.value, Poly)) or a.percent or b.percent:
            return None
        poly = a.value + (-b.value)
        if op in _FLIP:
            poly, op = -poly, _FLIP[op]
        keys = sorted(k for k in poly.terms if k)
        if not keys:
            return None  # a relation between constants: let the slow path decide what it means
        lead = poly.terms[keys[-1]]
        scale = 1 / (abs(lead) if op in ("<", "\\le") else lead)
        poly = poly * Poly.const(scale)
        out.append((tuple(sorted(poly.terms.items())), op))
    return out


def relations_as_interval(rel: list[tuple[tuple, str]]) -> tuple[Num, Num, bool, bool, str | None] | None:
    """Bounds on one variable (``a < x \\le b``, ``x \\ge 1``) as (lo, hi, lo_closed, hi_closed, variable)."""
    lo, hi = Num(Huge(-1, math.inf)), Num(Huge(1, math.inf))
    lo_c = hi_c = False
    var = None
    for terms, op in rel:
        if op not in ("<", "\\le"):
            return None
        t = dict(terms)
        lin = [k for k in t if k]
        if len(lin) != 1 or len(lin[0]) != 1 or lin[0][0][1] != 1 or (var is not None and lin[0][0][0] != var):
            return None
        if not re.fullmatch(r"[A-Za-z]", lin[0][0][0]):  # "\\sqrt2 < 3", "\\pi > 3": constants, no variable
            return None
        var = lin[0][0][0]
        c, k = t[lin[0]], t.get((), Fraction(0))
        bound = Num(Poly.const(-k / c))
        if c > 0:  # x + k < 0: an upper bound
            hi, hi_c = bound, op == "\\le"
        else:  # -x + k < 0: a lower bound
            lo, lo_c = bound, op == "\\le"
    return lo, hi, lo_c, hi_c, var


def constant_relation(rel: list[tuple[tuple, str]]) -> bool:
    """Whether every relation of ``rel`` is between constants (no letter variable): ``\\sqrt2 < 3``."""
    return all(not re.fullmatch(r"[A-Za-z]", x) for terms, _ in rel for m, _ in terms for x, _ in m)


# ---------------------------------------------------------------------------- the sets inequalities describe

_OR = re.compile(r"\s++or\s++|\s*+\\(?:lor|vee)(?![A-Za-z])\s*+")
_ABS = re.compile(r"(?<!\\)\|\s*+([A-Za-z])\s*+\|")
_CALL = re.compile(r"(?<![\\A-Za-z])[A-Za-z]\(\s*+[A-Za-z]\s*+\)")
_SPECIAL = re.compile(r"\s++or\s++|\\lor(?![A-Za-z])|\\vee(?![A-Za-z])|\||(?<![\\A-Za-z])[A-Za-z]\(\s*+[A-Za-z]\s*+\)")
_ERRORS = (Unsupported, Invalid, ValueError, ZeroDivisionError, OverflowError, RecursionError)


def _interval(lo: Num, hi: Num, lo_closed: bool, hi_closed: bool) -> Seq:
    return Seq("tuple", [lo, hi], ("[" if lo_closed else "(") + ("]" if hi_closed else ")"))


def _abs_set(lo: Num, hi: Num, lo_c: bool, hi_c: bool) -> Seq | None:
    """The values of v for which |v| lies between lo and hi."""
    lo_f = _float(lo)
    hi_f = _float(hi)
    if lo_f is None or hi_f is None or hi_f < 0 or hi_f < lo_f:
        return None
    if lo_f < 0 or (lo_f == 0 and lo_c):  # no lower bound on |v| beyond 0
        return _interval(Num(negate(hi.value)), hi, hi_c, hi_c)
    return Seq("union", [_interval(Num(negate(hi.value)), Num(negate(lo.value)), hi_c, lo_c),
                         _interval(lo, hi, lo_c, hi_c)])


def _float(n: Num) -> float | None:
    v = n.value
    if isinstance(v, Huge):
        return v.sign * math.inf if math.isinf(v.log10) else None
    return float(v.value()) if v.is_const() else None


def relation_set(s: str, max_depth: int) -> Seq | None:
    """The set that ``s`` (inequalities on one variable, possibly joined by "or") describes; None if it is
    not such a description."""
    if "," in s or "\\in" in s:
        return None
    used = set(re.findall(r"[A-Za-z]", s))
    free = next((c for c in "wvutsrqp" if c not in used), None)
    parts, var, pieces = _OR.split(s), None, []
    for part in parts:
        absolute = _ABS.search(part)
        subject = absolute.group(0) if absolute else (_CALL.search(part) or [None])[0]
        if subject is not None:
            if free is None:
                return None
            part = part.replace(subject, f" {free} ")
        try:
            rel = relations(part, max_depth)
        except _ERRORS:
            return None
        iv = relations_as_interval(rel) if rel else None
        if iv is None or not re.fullmatch(r"[A-Za-z]", iv[4] or "") or (var is not None and (iv[4], subject) != var):
            return None
        var = (iv[4], subject)
        piece = _abs_set(*iv[:4]) if absolute else _interval(*iv[:4])
        if piece is None:
            return None
        pieces.extend(piece.items if piece.kind == "union" else [piece])
    return pieces[0] if len(pieces) == 1 else Seq("union", pieces)


def relation_sets_equal(pn: str, gn: str, max_depth: int) -> bool | None:
    """Whether two answers describe the same set of reals when one (or both) is written as inequalities
    with "or", ``|v|`` or ``f(x)`` (or the other is a union); None when this rule does not apply."""
    if not (_SPECIAL.search(pn) or _SPECIAL.search(gn) or "\\cup" in pn or "\\cup" in gn):
        return None
    sp, sg = relation_set(pn, max_depth), relation_set(gn, max_depth)
    if sp is None and sg is None:
        return None
    try:
        sp = sp if sp is not None else parse_structure(pn, max_depth)
        sg = sg if sg is not None else parse_structure(gn, max_depth)
    except _ERRORS:
        return None
    if not (isinstance(sp, Seq) and isinstance(sg, Seq)):
        return None
    ca, cb = canonical_union(sp), canonical_union(sg)
    if ca is None or cb is None:
        return None
    return ca == cb
