"""List, tuple, interval, set and matrix answers: split at the top level, parsed into values, compared.

``parse_structure`` reads an answer into a scalar (:class:`~rewardlab.rewards.math.values.Num`), a
:class:`Seq` (a bare list or ``\\{..\\}`` is an unordered "set"; ``(..)`` and ``[..]`` are ordered
tuples that remember their brackets, so an interval keeps its open and closed ends) or a matrix;
``structures_equal`` compares two of them, exactly, or says it cannot (None). Every split is one
linear pass over the string with a bracket-depth counter: nothing here backtracks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from rewardlab.rewards.math.values import Huge, Num, Poly, Unsupported, parse_scalar, scalars_equal

RELATION = re.compile(r"\\le|\\ge|\\ne|<|>")


def matching_closers(s: str) -> dict[int, int]:
    """Map opening bracket index -> matching closing index for (), {}, [] (one linear pass)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    opener = {")": "(", "}": "{", "]": "["}
    for i, c in enumerate(s):
        if c in "({[":
            if i > 0 and s[i - 1] == "\\":
                continue
            stack.append(i)
        elif c in ")}]":
            if i > 0 and s[i - 1] == "\\":
                continue
            if stack and s[stack[-1]] == opener[c]:
                pairs[stack.pop()] = i
            else:
                return pairs
    return pairs


def strip_outer(s: str) -> str:
    if not s or s[0] not in "({":
        return s
    pairs = matching_closers(s)
    lo, hi = 0, len(s) - 1
    checks = 0
    while lo < hi and s[lo] in "({" and pairs.get(lo) == hi:
        inner = s[lo + 1:hi]
        if s[lo] == "(" and "," in inner:
            checks += 1
            if checks > 20 or top_level_split(inner, ","):
                break  # a tuple (or too deep to check cheaply), not redundant grouping
        lo, hi = lo + 1, hi - 1
        while lo < hi and s[lo] == " ":
            lo += 1
        while hi > lo and s[hi] == " ":
            hi -= 1
    return s[lo:hi + 1]


def top_level_split(s: str, sep: str) -> list[str] | None:
    """Split on ``sep`` outside brackets; None when there is no top-level separator."""
    parts, depth, last = [], 0, 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[last:i])
            last = i + len(sep)
            i = last
            continue
        i += 1
    if not parts:
        return None
    parts.append(s[last:])
    return parts



# ---------------------------------------------------------------------------- structure: lists, tuples, sets

@dataclass
class Seq:
    """A list answer: ``kind`` is "set" (unordered: bare lists, ``\\{..\\}``) or "tuple" with its brackets."""

    kind: str
    items: list
    brackets: str = ""


_GLUED_CONNECTOR = re.compile(r"(?<=[)\]}])\s*+(?:or|and)\s*+(?=[(\[{\\])")  # starts only after a closer


def split_items(s: str) -> list[str] | None:
    s = _GLUED_CONNECTOR.sub(", ", s)
    parts = top_level_split(s, ";") or top_level_split(s, ",")
    if parts is None:
        for word in (" and ", " or "):
            parts = top_level_split(s, word)
            if parts is not None:
                break
    if parts is None:
        return None
    out: list[str] = []
    for p in parts:
        sub = split_items(p.strip()) if (" and " in p or " or " in p) else None
        for q in sub or [p]:
            q = q.strip()
            q = re.sub(r"^(?:and|or)\s+", "", q).strip()
            asg = split_assignment(q)
            if asg and simple_lhs(asg[0]):
                q = asg[1]
            if q:
                out.append(q)
    return out


_ELLIPSIS = {"\\ldots", "\\cdots", "\\dots", "...", "…"}


_INF = {"\\infty": 1, "+\\infty": 1, "-\\infty": -1, "\\inf": 1, "-\\inf": -1, "∞": 1, "-∞": -1, "oo": 1, "-oo": -1}
_MATRIX = re.compile(r"^\[?\s*\\begin\{([pbvBV]?matrix|array)\}(\{[^}]*\})?(.*)\\end\{\1\}\s*\]?$", re.DOTALL)


def _parse_matrix(s: str, max_depth: int):
    m = _MATRIX.match(s)
    if not m:
        return None
    body = m.group(3).strip()
    rows = [r for r in re.split(r"\\\\|\\(?=\s)", body) if r.strip()]
    parsed = [Seq("tuple", [parse_structure(c, max_depth) for c in r.split("&")], "row") for r in rows]
    return Seq("matrix", parsed, "matrix")


def parse_structure(s: str, max_depth: int = 40):
    """A :class:`Num`, or a :class:`Seq` of parsed items. Raises Unsupported / Invalid."""
    s = s.strip()
    if s in _ELLIPSIS:
        return Num(Poly({(("…", 1),): Fraction(1)}))
    if s in _INF:
        return Num(Huge(_INF[s], math.inf))  # a true infinity, not a magnitude
    if s in ("\\mathbb{R}", "\\mathbb R", "\\R"):
        return Seq("tuple", [Num(Huge(-1, math.inf)), Num(Huge(1, math.inf))], "()")
    if "\\begin" in s:
        mat = _parse_matrix(s, max_depth)
        if mat is None:
            raise Unsupported("matrix layout")
        return mat
    diff = top_level_split(s, "\\setminus")
    if diff is not None and len(diff) == 2:  # [0, 2] \setminus \{1\}: an interval (or union) without points
        return _minus_points(parse_structure(diff[0], max_depth), parse_structure(diff[1], max_depth))
    union = top_level_split(s, "\\cup")
    if union is not None:
        return Seq("union", [parse_structure(x, max_depth) for x in union])
    pm = top_level_split(s, "\\pm")
    if pm is not None and len(pm) == 2:
        a, b = pm[0].strip(), pm[1].strip()
        return Seq("set", [parse_structure(f"{a}+({b})" if a else b, max_depth),
                           parse_structure(f"{a}-({b})" if a else f"-({b})", max_depth)])
    ratio = top_level_split(s, ":")
    if ratio is not None and len(ratio) >= 2 and "=" not in s:
        return Seq("tuple", [parse_structure(x, max_depth) for x in ratio], "::")
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2].strip()
        items = split_items(inner) or ([inner] if inner else [])
        return Seq("set", [parse_structure(x, max_depth) for x in items])
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        pairs = matching_closers(s)
        mixed = s[0] + s[-1] in ("[)", "(]") and len(matching_closers(s[1:-1])) == sum(s[1:-1].count(c) for c in "([{")
        if pairs.get(0) == len(s) - 1 or mixed:
            items = top_level_split(s[1:-1], ",") or top_level_split(s[1:-1], ";")
            if items is not None and len(items) >= 2:
                return Seq("tuple", [parse_structure(x, max_depth) for x in items], s[0] + s[-1])
    items = split_items(s)
    if items is not None and len(items) >= 2:
        return Seq("set", [parse_structure(x, max_depth) for x in items])
    return parse_scalar(s, max_depth)


def _endpoint(n) -> float | None:
    if not isinstance(n, Num) or n.literal is not None or n.percent:
        return None
    v = n.value
    if isinstance(v, Huge):
        return v.sign * math.inf if math.isinf(v.log10) else None
    if v.is_const():
        return float(v.value())
    z = v.numeric()
    return z.real if z is not None and abs(z.imag) < 1e-12 else None


def _minus_points(left, right) -> Seq:
    """``left`` (an interval or a union of intervals) without the points of ``right`` (a value or a set)."""
    pieces = left.items if isinstance(left, Seq) and left.kind == "union" else [left]
    points = right.items if isinstance(right, Seq) and right.kind == "set" else [right]
    for p in points:
        x = _endpoint(p)
        if x is None or not math.isfinite(x):
            raise Unsupported("set difference with a point that is no number")
        out = []
        for q in pieces:
            if not (isinstance(q, Seq) and q.kind == "tuple" and len(q.items) == 2
                    and q.brackets in ("()", "[]", "[)", "(]")):
                raise Unsupported("set difference of something that is no interval")
            lo, hi = _endpoint(q.items[0]), _endpoint(q.items[1])
            if lo is None or hi is None:
                raise Unsupported("interval endpoints that are no numbers")
            b0, b1 = q.brackets
            if lo < x < hi:
                out += [Seq("tuple", [q.items[0], p], b0 + ")"), Seq("tuple", [p, q.items[1]], "(" + b1)]
            elif x == lo or x == hi:
                out.append(Seq("tuple", q.items, ("(" if x == lo else b0) + (")" if x == hi else b1)))
            else:
                out.append(q)
        pieces = out
    return Seq("union", pieces)


def canonical_union(x) -> list | None:
    """Intervals with numeric endpoints, sorted and merged: [(lo, hi, lo_closed, hi_closed), ...]."""
    parts = x.items if x.kind == "union" else [x]
    ivs = []
    for p in parts:
        if not (isinstance(p, Seq) and p.kind == "tuple" and len(p.items) == 2
                and p.brackets in ("()", "[]", "[)", "(]")):
            return None
        lo, hi = _endpoint(p.items[0]), _endpoint(p.items[1])
        if lo is None or hi is None or lo > hi:
            return None
        ivs.append([lo, hi, p.brackets[0] == "[", p.brackets[1] == "]"])
    ivs.sort(key=lambda t: (t[0], not t[2]))
    out: list = []
    for iv in ivs:
        if out and (iv[0] < out[-1][1] or (iv[0] == out[-1][1] and (iv[2] or out[-1][3]))):
            last = out[-1]
            if iv[1] > last[1] or (iv[1] == last[1] and iv[3]):
                last[1], last[3] = iv[1], iv[3] or (iv[1] == last[1] and last[3])
        else:
            out.append(iv)
    return [tuple(t) for t in out]


def _dedupe(items: list) -> list:
    """Set semantics: drop items equal to an earlier one (undecidable pairs are kept)."""
    out: list = []
    for x in items:
        if not any(structures_equal(x, y) is True for y in out):
            out.append(x)
    return out


def structures_equal(a, b) -> bool | None:
    """Compare parsed answers; None when undecidable here."""
    if isinstance(a, Num) and isinstance(b, Num):
        return scalars_equal(a, b)
    if isinstance(a, Seq) and isinstance(b, Seq):
        if a.kind == "set" and b.kind == "set":
            a, b = Seq("set", _dedupe(a.items)), Seq("set", _dedupe(b.items))
            if len(a.items) != len(b.items):
                return False
            if any(isinstance(x, Num) and isinstance(x.value, Poly)
                   and "…" in x.value.symbols() for x in a.items + b.items):
                res = [structures_equal(x, y) for x, y in zip(a.items, b.items)]  # a pattern: order matters
                return True if all(r is True for r in res) else (False if any(r is False for r in res) else None)
            used = [False] * len(b.items)
            for x in a.items:
                hit = False
                for j, y in enumerate(b.items):
                    if not used[j] and structures_equal(x, y):
                        used[j] = hit = True
                        break
                if not hit:
                    return None if any(structures_equal(x, y) is None for y in b.items) else False
            return True
        if a.kind == "union" or b.kind == "union":
            ca, cb = canonical_union(a), canonical_union(b)
            if ca is None or cb is None:
                return (structures_equal(Seq("set", a.items), Seq("set", b.items))
                        if a.kind == b.kind == "union" else None)
            return ca == cb
        if a.kind == b.kind and a.kind in ("tuple", "matrix"):
            if len(a.items) != len(b.items):
                return False
            res = [structures_equal(x, y) for x, y in zip(a.items, b.items)]
            # "(a, b)" vs "[a, b]" may be a vector vs an interval; "[a, b)" is always an interval
            interval = {a.brackets, b.brackets} & {"[)", "(]"}
            if all(r is True for r in res):
                return True if a.brackets == b.brackets else (False if interval else None)
            if any(r is False for r in res) and (a.brackets == b.brackets or interval):
                return False
            return None
        if ({a.kind, b.kind} == {"set", "tuple"} and len(a.items) == len(b.items)
                and "::" not in (a.brackets, b.brackets)):
            ordered = [structures_equal(x, y) for x, y in zip(a.items, b.items)]
            if all(r is False or r is True for r in ordered) and not all(ordered):
                return False  # "{1, 3}" is not the ordered pair "(3, 1)"
        return None
    # scalar vs list: a list of several values never equals one value
    seq = a if isinstance(a, Seq) else b
    one = b if isinstance(a, Seq) else a
    if seq.kind == "set":
        items = _dedupe(seq.items)
        if len(items) == 1:  # "15\\frac{39}{40}, or \\frac{639}{40}": one value written twice
            return structures_equal(items[0], one)
    if len(seq.items) >= 2 and isinstance(one, Num) and isinstance(one.value, Poly) and one.value.is_const():
        return False
    return None


def split_assignment(s: str) -> tuple[str, str] | None:
    """``lhs = rhs`` (the last segment of a chain ``a = b = c``) when there is one top-level ``=``."""
    if "=" not in s or RELATION.search(s):
        return None
    items = split_items(s)
    if items is not None and len(items) >= 2:
        return None
    parts = top_level_split(s, "=")
    if parts is None or len(parts) < 2:
        return None
    return parts[0].strip(), parts[-1].strip()


def simple_lhs(lhs: str) -> bool:
    """Whether ``lhs`` of ``lhs = rhs`` names the value (``x``, ``a_{10}``, ``total``): short, no digits."""
    return bool(lhs) and len(lhs) <= 40 and not re.search(r"\d", re.sub(r"_\{[^}]*\}|_\w", "", lhs))
