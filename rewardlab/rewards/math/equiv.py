"""Fast, exact answer equivalence in pure Python: the part of the math reward that runs on the caller's thread.
Most GSM8K/MATH answers are integers, decimals, fractions, percentages or short arithmetic; this
module decides those without any LaTeX parser or sympy, exactly (``fractions.Fraction``), in tens of
microseconds, and with guards that make every step linear or bounded (power towers, huge factorials
and 5,000-digit literals are compared by magnitude, never expanded). What it cannot decide it
reports as undecided, and the reward sends the pair to a worker process (:mod:`.slow`).

Pipeline for one (pred, gold) pair of extracted answers:

* :func:`normalize`: strip math delimiters, spacing, ``\\left``/``\\right``, ``\\text`` wrappers,
  trailing units, degrees, currency, thousands separators; ``\\dfrac`` -> ``\\frac``; ``percent`` -> ``%``.
* string rule: equal normalized strings (and case-insensitive text answers, choice letters).
* assignments: ``x = 5`` vs ``5`` compares the right-hand side when the left side has no digits.
* values: an exact evaluator for numbers and polynomials with rational coefficients
  (``+ - * / ^ !``, ``\\frac``, ``\\sqrt`` of perfect powers, implicit products, ``\\pi``), lists
  (bare lists and ``\\{...\\}`` compare as multisets; ``(..)``/``[..]`` as ordered tuples).

Try it: ``rewardlab reward math --completion PRED --gold GOLD`` prints the decision and the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rewardlab.rewards.math.bounded import decimal, parse_int, repeating
from rewardlab.rewards.math.forms import rewrite_forms
from rewardlab.rewards.math.identity import as_complex, numeric_identity
from rewardlab.rewards.math.reading import ANSWER_WORDS
from rewardlab.rewards.math.relations import (
    constant_relation,
    relation_sets_equal,
    relations,
    relations_as_interval,
)
from rewardlab.rewards.math.structures import (
    RELATION,
    Seq,
    parse_structure,
    simple_lhs,
    split_assignment,
    split_items,
    strip_outer,
    structures_equal,
    top_level_split,
)
from rewardlab.rewards.math.values import (
    Huge,
    Invalid,
    Num,
    Unsupported,
    parse_scalar,
    scalars_equal,
)

FAST_MAX_CHARS = 400
"""Longest extracted answer (or gold) compared on the caller's thread; longer ones go to a worker (the math
reward's fast path, :mod:`rewardlab.rewards.math`, which re-exports this name)."""


# ---------------------------------------------------------------------------- normalization

_TEXT_CMDS = ("\\textbf", "\\textit", "\\textnormal", "\\textrm", "\\text", "\\mbox", "\\mathrm", "\\mathbf",
              "\\mathit", "\\operatorname")
_KEEP_WORDS = {"pi", "e", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "inf", "infty", "and",
               "or", "i", "mod", "pmod"}
_SIMPLE_SUBS = [
    ("\\displaystyle", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"),
    ("\\left\\{", "\\{"), ("\\right\\}", "\\}"), ("\\left.", ""), ("\\right.", ""),
    ("\\left", ""), ("\\right", ""), ("\\bigl", ""), ("\\bigr", ""), ("\\Bigl", ""), ("\\Bigr", ""),
    ("\\big", ""), ("\\Big", ""),
    ("\\!", ""), ("\\,", " "), ("\\;", " "), ("\\:", " "), ("\\ ", " "), ("~", " "),
    ("\\qquad", " "), ("\\quad", " "), ("\\$", ""), ("$", ""), ("\\(", ""), ("\\)", ""),
    ("\\[", ""), ("\\]", ""), ("€", ""), ("£", ""), ("\\%", "%"), ("\\lt", "<"), ("\\gt", ">"),
    ("\\leq", "\\le"), ("\\geq", "\\ge"), ("\\neq", "\\ne"), ("<=", "\\le"), (">=", "\\ge"), ("!=", "\\ne"),
    ("≤", "\\le"), ("≥", "\\ge"), ("−", "-"), ("×", "\\times"), ("·", "\\cdot"), ("÷", "\\div"),
    ("\\emptyset", "\\{\\}"), ("\\varnothing", "\\{\\}"), ("{,}", ","), ("\\mathrm{e}", "e"),
]


def _unwrap_text(s: str, cmds: tuple[str, ...] = _TEXT_CMDS) -> tuple[str, bool]:
    """Replace ``\\text{X}``-style wrappers by `` X ``; report whether any was present."""
    found = False
    for cmd in cmds:
        pos = 0
        while True:
            k = s.find(cmd + "{", pos)
            if k < 0:
                break
            j = k + len(cmd)
            depth, e = 0, -1
            for t in range(j, min(len(s), j + 500)):
                if s[t] == "{":
                    depth += 1
                elif s[t] == "}":
                    depth -= 1
                    if depth == 0:
                        e = t
                        break
            if e < 0:
                pos = j
                continue
            found = True
            s = s[:k] + " " + s[j + 1:e] + " " + s[e + 1:]
            pos = k
    return s, found


# Why none of these patterns can blow up (tests/test_fuzz_rewards.py checks them with regexploit and a
# fuzzer). On the caller's thread they only ever see answers of at most FAST_MAX_CHARS characters
# (rewardlab/rewards/math.py sends longer ones to a killable worker), so a pattern that is linear per
# start position is at worst quadratic in 400 characters. What must never happen is backtracking that
# is exponential (or polynomial of high degree) in a run: every quantifier that meets a neighbour
# able to match the same characters is possessive (``*+``, ``++``), so it never gives back what it took.
#   _UNIT_TAIL: words are possessive runs of letters, so "abab" cannot be re-split as "ab"+"ab"
#     (the original ``(?:[A-Za-z]{2,}\.?\s*)+`` was exponential: 22 s at 38 characters).
#   _ORDINAL, _DEGREE, _TEXT_UNIT, _THOUSANDS_BANG: each ``\s*`` is possessive and is followed by a
#     literal that whitespace cannot match; _DEGREE/_PERCENT start only at the first space of a run.
#   _THOUSANDS(_MULTI): the look-behind forbids a start inside a digit group; the groups are
#     delimited by literal commas (linear backtracking per start).
#   _REPEAT: fixed literals between disjoint classes.
_UNIT_TAIL = re.compile(r"(?<=[\d})\s])\s*+((?:[A-Za-z]{2,}+\.?+\s*+)++)(?:\^\s*+\{?(\d)\}?)?\s*+$")
_ORDINAL = re.compile(r"\^\s*+\{\s*+(?:st|nd|rd|th)\s*+\}|(?<=\d)(?:st|nd|rd|th)\b")
_DEGREE = re.compile(r"\^\s*+\{?\s*+\\circ\s*+\}?|\\circ|°|\\degree|(?<!\s)\s*+\bdegrees?\b")
_PERCENT = re.compile(r"(?<!\s)\s*+(?:\bpercentage\b|\bpercent\b|\bpct\b)")
# A thousands-separated integer never starts with 0: "0,500" and "01,000" are not 500 and 1000.
_THOUSANDS = re.compile(r"(?<![\d.,])([1-9]\d{0,2}(?:,\d{3})+)(?![\d,])")
_THOUSANDS_MULTI = re.compile(r"(?<![\d.,])([1-9]\d{0,2}(?:,\d{3}){2,})(?![\d,])")
# What is left of "digits,digits" once thousands separators are gone ("0,5", "1000,99", "0,500")
# is a decimal comma when the other side is a single value, and a pair when it is a list.
_DECIMAL_COMMA = re.compile(r"-?\d++,\d++%?")
_REPEAT = re.compile(r"(-?)(\d*)\.(\d*)\\overline\{(\d+)\}")
_THOUSANDS_BANG = re.compile(r"(?<=\d),\\!\s*+(?=\d{3})|(?<=\d)\{,\}(?=\d{3})")
_TEXT_UNIT = re.compile(r"(?<=[\d}\s])\s*+\\(?:text|mbox|mathrm|textnormal|textrm)\s*+\{\s*+([A-Za-z][A-Za-z ./]{0,30})"
                        r"\}\s*+(?:\^\s*+\{?(\d)\}?)?\s*+\.?\s*+$")


def _drop_text_unit(flags: dict):
    def sub(m: re.Match) -> str:
        words = m.group(1).lower().split()
        if any(w in _KEEP_WORDS for w in words) or not re.search(r"\d", m.string[: m.start()]):
            return m.group(0)
        flags["unit"] = " ".join(words)
        flags["unit_power"] = m.group(2) or "1"
        return ""

    return sub


_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")


def _repeating(m: re.Match) -> str:
    sign, ip, fp, rp = m.groups()
    fr = repeating(ip, fp, rp)
    return f"{sign}\\frac{{{fr.numerator}}}{{{fr.denominator}}}"


def _ascii_to_latex(s: str) -> str:
    """Plain-text math (``pi/2``, ``exp(16)``, ``-2*pi``) into the LaTeX both paths read."""
    if "\\" in s:
        return s
    s = re.sub(r"\bexp\(([^()]{0,200})\)", r"e^{\1}", s)
    s = re.sub(r"\b(sqrt|sin|cos|tan|cot|sec|csc|ln|log)\(", r"\\\1(", s)
    s = re.sub(r"\bpi\b", r"\\pi ", s)
    s = s.replace("**", "^").replace("*", " \\cdot ")
    return s


_SCALE_WORDS = {"dozen": 12, "hundred": 10**2, "thousand": 10**3, "million": 10**6, "billion": 10**9,
                "trillion": 10**12}


def _scaled(num: str, scale: int) -> str | None:
    """``"0.5"`` and 1000 -> ``"500"``: a plain decimal of at most 30+30 digits times a scale word, when
    the product is a whole number (else None: the words stay, and are not paid as the bare number)."""
    if not re.fullmatch(r"-?\d{1,30}(?:\.\d{1,30})?", num):
        return None
    v = decimal(num) * scale
    return str(v.numerator) if v.denominator == 1 else None


# A unit word's case: "miles", "Km", "KB", or an SI prefix and symbol ("kPa", "MeV", "mmHg"); a case change
# inside a word otherwise ("qIis", "xZab") is a random model's sub-word junk, kept so that it is never dropped
# as a unit of the right number.
_SI_UNIT = re.compile(r"(?:da|[yzafpnumcdhkMGTPEZY])?(?:Pa|Hz|Wb|Wh|Gy|Sv|Bq|eV|Ah|Hg|dB|Np|[WVANJCTHSFLKB])s?")


def _unit_like(word: str) -> bool:
    """Whether ``word`` is cased as a unit is: no lower-to-upper change, or an SI prefix and symbol."""
    return not re.search(r"[a-z][A-Z]", word) or bool(_SI_UNIT.fullmatch(word) or word in ("mmHg", "pH", "kWh", "mAh"))


def normalize(ans: str) -> tuple[str, dict]:
    """Canonical text of an extracted answer, and flags (``percent``, ``text``)."""
    flags: dict = {}
    s = ans.strip().replace("²", "^2").replace("³", "^3")  # a unit's power (commit.normalize_surface)
    s = _THOUSANDS_BANG.sub(",", s)
    s = re.sub(r"(?<=\d)\s*+\{\s*+,\s*+\}\s*+(?=\d{3})", ",", s)
    s = re.sub(r"\{\s*+,\s*+\}", ",", s)
    s = _TEXT_UNIT.sub(_drop_text_unit(flags), s)
    for a, b in _SIMPLE_SUBS:
        if a in s:
            s = s.replace(a, b)
    s = rewrite_forms(s)
    s, _ = _unwrap_text(s, ("\\boxed", "\\fbox"))
    s, flags["text"] = _unwrap_text(s)
    s = _ORDINAL.sub("", s)
    s2 = _DEGREE.sub("", s)
    if s2 != s:
        flags["degrees"] = True
        s = s2
    s = _PERCENT.sub("%", s)
    s = _ascii_to_latex(s)
    s = " ".join(s.split())
    s = s.strip().rstrip(".,;:").strip()
    # trailing unit words after a number: "125 miles", "15 cm^2", "7 kg"
    m = _UNIT_TAIL.search(s)
    if m and re.search(r"\d", s[:m.start()]):
        words = [w.lower().rstrip(".") for w in re.findall(r"[A-Za-z]+", m.group(1))]
        if words[0] in _SCALE_WORDS:  # "234 thousand" is 234000, never 234; "x thousand" stays words
            scaled = _scaled(s[:m.start()].strip(), _SCALE_WORDS[words[0]])
            if scaled is not None:
                s = scaled
                if words[1:]:
                    flags["unit"] = " ".join(words[1:])
        elif not any(w in _KEEP_WORDS for w in words) and all(map(_unit_like, re.findall(r"[A-Za-z]+", m.group(1)))):
            s = s[:m.start()].strip()
            flags["unit"] = " ".join(words)
            flags["unit_power"] = m.group(2) or "1"
    s = s.replace("+-", "-").replace("+ -", "-")
    if "\\overline" in s:
        s = _REPEAT.sub(_repeating, s)
    if re.fullmatch(r"-?[1-9]\d{0,2}(?: \d{3})+(?:\.\d+)?", s):
        s = s.replace(" ", "")
    if not re.search(r"[(\[]|\\\{", s):  # inside brackets "12,102" is a pair, not a number
        s = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), s)
    else:
        s = _THOUSANDS_MULTI.sub(lambda m: m.group(1).replace(",", ""), s)
    m = _CHOICE.match(s)
    if m:
        s = m.group(1).upper()
        flags["choice"] = True
    # redundant outer grouping: {{x}} / ((x)) - iteratively, linear per layer
    s = strip_outer(s)
    return s, flags


# ---------------------------------------------------------------------------- the fast decision

@dataclass
class Decision:
    """The outcome of comparing an extracted prediction with a gold answer."""

    equal: bool | None
    """None: undecided here (send to the slow path)."""
    rule: str
    pred_norm: str = ""
    gold_norm: str = ""
    detail: str = ""

    def decide(self, equal: bool, rule: str, detail: str = "") -> "Decision":
        """Set the verdict (and why) and return self: ``return d.decide(False, "junk", "...")``."""
        self.equal, self.rule = equal, rule
        if detail:
            self.detail = detail
        return self


_IN_PREFIX = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*\\in\s+(?=[(\[]|\\\{|\\mathbb)")
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?%?")
# "4 + 2" for a gold of 6: the restated question, not its result (fractions and powers are answers)
_UNEVALUATED = re.compile(r"\(?-?\d++(?:\.\d++)?\)?(?:\s*+(?:[-+]|\\cdot|\\times)\s*+\(?-?\d++(?:\.\d++)?\)?)++")


def _past_simple_lhs(s: str) -> str:
    """``total = 2 + 3 = 5`` -> ``2 + 3 = 5``: a left-hand side of words names the value, it is not junk."""
    k = s.find("=")
    return s[k + 1:] if k > 0 and re.fullmatch(r"\s*+[A-Za-z][A-Za-z_ ]{0,39}", s[:k]) else s


def _false_chain(s: str) -> bool:
    """``:_Z = 3 = 2928``: a chain of equalities, not headed by a variable, with two different plain numbers
    in it is no derivation (junk, or a false claim)."""
    if "=" not in s:
        return False
    parts = top_level_split(s, "=") or []
    if len(parts) == 2 and all(_PLAIN_NUMBER.fullmatch(p.strip()) and "%" not in p for p in parts):
        return decimal(parts[0].strip()) != decimal(parts[1].strip())  # "7 = 86"
    if len(parts) < 3 or re.fullmatch(r"\s*+[A-Za-z](?:_\{?\w{1,8}\}?)?\s*+", parts[0]):
        return False  # "x = 5+5+1 = 7 = 11": a variable's derivation, compared by its last member
    nums = {decimal(p.strip()) for p in parts if _PLAIN_NUMBER.fullmatch(p.strip()) and "%" not in p}
    return len(nums) >= 2


def _canon(s: str) -> str:
    """Whitespace dropped, except between two digits: ``16 50`` is not ``1650`` (``normalize`` has already
    joined valid ``1 650`` groupings)."""
    return re.sub(r"\s+", "", re.sub(r"(?<=\d)\s+(?=\d)", "\u2423", s))


def _is_text_word(s: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z ]*[A-Za-z]", s)) and s.lower() not in _KEEP_WORDS


def _compare_relations(pn: str, gn: str, d: Decision, max_depth: int) -> Decision:
    """Equations and inequalities: equal up to a (positive, for inequalities) factor; chains as sets."""
    eq = relation_sets_equal(pn, gn, max_depth)
    if eq is not None:  # "x \\le -3 or x \\ge 2", "1 \\le |z| \\le 2", "0 < f(x) < 1" as sets
        return d.decide(eq, "fast_interval")
    try:
        rp = relations(pn, max_depth)
        rg = relations(gn, max_depth)
    except (Unsupported, Invalid, ValueError, ZeroDivisionError, OverflowError, RecursionError) as e:
        d.detail = f"{type(e).__name__}: {e}"
        return d
    if rp is not None and rg is not None:
        d.equal, d.rule = set(rp) == set(rg), "fast_relation"
        return d
    if (rp is None) != (rg is None):  # an inequality against an interval: x < 3 vs (-\\infty, 3)
        rel, other = (rp, gn) if rp is not None else (rg, pn)
        iv = relations_as_interval(rel)
        if iv is None and constant_relation(rel):
            return d.decide(False, "constant_relation", "a relation between constants (\\sqrt2 < 3) describes no set")
        try:
            st = parse_structure(other, max_depth)
        except (Unsupported, Invalid, ValueError, ZeroDivisionError, OverflowError, RecursionError):
            st = None
        if (iv is not None and isinstance(st, Seq) and st.kind == "tuple" and len(st.items) == 2
                and st.brackets[0] in "([" and st.brackets[1] in ")]"):
            lo, hi, lo_closed, hi_closed, _ = iv
            res = [scalars_equal(lo, st.items[0]) if isinstance(st.items[0], Num) else None,
                   scalars_equal(hi, st.items[1]) if isinstance(st.items[1], Num) else None]
            if None not in res:
                d.equal = all(res) and lo_closed == (st.brackets[0] == "[") and hi_closed == (st.brackets[1] == "]")
                d.rule = "fast_interval"
                return d
    pa, ga = split_assignment(pn), split_assignment(gn)
    if ga and not simple_lhs(ga[0]) and "=" not in pn and not RELATION.search(pn):
        # the gold is an equation such as "2x + z = 1": a bare value does not answer it
        try:
            parse_scalar(pn, max_depth)
            d.equal, d.rule = False, "value_vs_equation"
        except (Unsupported, Invalid, ValueError, ZeroDivisionError, OverflowError, RecursionError):
            pass
        return d
    if pa and not RELATION.search(gn) and "=" not in gn and not RELATION.search(pn):
        # a derivation ending in the value: "\\frac12 = \\frac{10}{9}" -> compare its last member
        sub = fast_compare(pa[1], gn, max_depth)
        sub.rule = sub.rule if sub.equal is None else sub.rule + "_last_member"
        return sub
    return d


# \sum/\prod whose upper bound has a letter, a power, a factorial or 5+ digits: sympy would loop or
# expand for ever, so such answers are compared textually only.
_BIG_OP = re.compile(r"\\(?:sum|prod)\s*_\s*(?:\{(?:[^{}]|\{[^{}]*\})*\}|\S)\s*\^\s*(\{(?:[^{}]|\{[^{}]*\})*\}|\S)")


def unbounded_operator(s: str) -> bool:
    """Whether ``s`` holds a sum or product whose bound is symbolic or huge."""
    if "\\sum" not in s and "\\prod" not in s:
        return False
    return any(re.search(r"[A-Za-z^!]|\d{5}", m.group(1)) for m in _BIG_OP.finditer(s))


def _decimal_comma(s: str, other: str) -> str:
    """``0,5`` -> ``0.5`` when ``s`` is one number with a comma that is not a thousands separator and
    ``other`` is not a list (then ``1,5`` is the pair 1, 5)."""
    if "," in s and _DECIMAL_COMMA.fullmatch(s) and split_items(other) is None:
        return s.replace(",", ".")
    return s


# also "600|1|", "\frac{13}{18}$12", "\frac23:1"
# "1 11", "\frac{13}{6}  7"; "\frac{1} {2}" has a brace before its digit
_JUXTAPOSED = re.compile(r"\d(?:\s*+\}|\\?%|\s*+!)*+(?:\s++\d|\s*+[|$:]++\s*+(?:\d|\\[dt]?frac|\\sqrt))")
def _juxtaposed(s: str) -> bool:
    """Two numbers side by side, sub- and superscripts aside (``\\log_2 8`` is one value)."""
    return bool(_JUXTAPOSED.search(_SCRIPT.sub("@", s)))


_DOLLAR_BETWEEN = re.compile(r"\d\}*+\s*+\$\s*+\d")  # "\frac{13}{18}$12": normalize drops the "$"
_SCRIPT = re.compile(r"[\^_]\s*+(?:\{[^{}]*+\}|\S)")
_ATOM = re.compile(r"\\[dt]?frac\s*+\{[^{}]*+\}\s*+\{[^{}]*+\}|\\sqrt\s*+(?:\[[^\]]*+\])?\{[^{}]*+\}|[\^_]\s*+"
                   r"(?:\{[^{}]*+\}|\S)")
_ENVIRONMENT = re.compile(r"\\(?:begin|end|mathrm|operatorname|text|textbf|mathbf)\s*+\{[A-Za-z* ]*+\}")


def _words_and_values(s: str) -> bool:
    """Whether an answer is words around two or more different values (``éxANSanswer 1 ing: -\\frac{2}{3}``):
    junk or a sentence, whose value math-verify would pick on its own. Fractions, roots, powers and
    subscripts count as one value; LaTeX command names, environment names and products of one or two
    letters (``2ab``) are not words."""
    if not re.search(r"[A-Za-z]{2}", s):
        return False
    t = _ATOM.sub(" 0 ", _ENVIRONMENT.sub(" ", s))
    words = {w.lower() for w in re.findall(r"[A-Za-z]{3,}", re.sub(r"\\[A-Za-z]+", " ", t))} - ANSWER_WORDS
    return bool(words) and len(set(re.findall(r"\d+(?:[.,]\d+)*", t))) >= 2


_DIGITS36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_GLUED_LETTERS = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}\d")  # "0qI1", "0is1is"; "\log2" is a command
_DANGLING_BACKSLASH = re.compile(r"(?<!\\)\\\s*$")  # "\frac{5}{13}x1\": cut junk, not LaTeX
_LETTER_BETWEEN_DIGITS = re.compile(r"\d[A-DF-WYZ]\d")  # "0Z2"; "2X3" and "1E5" are a product and a power
_SUBSCRIPTED_NUMBER = re.compile(r"[\d}]_\{?\d")  # "68000_10ing", "\frac{1}{16}_00": never the bare value
_BASE_NUMERAL = re.compile(r"-?+(\d[0-9A-Z]{0,63})_\{?(\d{1,2})\}?")


def _base_numeral(s: str) -> int | None | bool:
    """``204_5`` -> 54; None when ``s`` is not a numeral with a base subscript; False when it is one
    that cannot be (``204_55``'s base, ``29_8``'s digit): never read as 204 or 29."""
    m = _BASE_NUMERAL.fullmatch(s)
    if not m:
        return None
    digits, base = m.group(1), parse_int(m.group(2))
    if not 2 <= base <= 36 or any(_DIGITS36.index(c) >= base for c in digits):
        return False
    return -parse_int(digits, base) if s.startswith("-") else parse_int(digits, base)


def fast_compare(pred: str, gold: str, max_depth: int = 40) -> Decision:
    """Decide equivalence of two extracted answers without sympy; ``equal=None`` when undecided."""
    pn, pf = normalize(pred)
    gn, gf = normalize(gold)
    d = Decision(None, "undecided", pn, gn)
    if not pn:
        return d.decide(False, "empty")
    refused = _refuse_raw(pred, gold, pn, pf, gf)
    if refused:
        return d.decide(False, *refused)
    if _canon(pn) == _canon(gn):
        return d.decide(True, "string")
    if unbounded_operator(pn) or unbounded_operator(gn):
        return d.decide(False, "unsupported", "a sum/product with a symbolic or huge bound is compared textually only")
    # membership: "x \\in [-2, 7]" is the set itself
    pn = _IN_PREFIX.sub("", pn)
    gn = _IN_PREFIX.sub("", gn)
    if _words_and_values(_past_simple_lhs(pn)) and not _words_and_values(gn):
        return d.decide(False, "words_and_values", "words around two or more values: no single value to compare")
    if _false_chain(pn) and not _false_chain(gn):
        return d.decide(False, "false_chain", "a chain a = b = c whose members are different numbers")
    sides = _right_hand_sides(pn, gn)
    if sides is None:
        return _compare_relations(pn, gn, d, max_depth)
    pn, gn = _decimal_comma(sides[0], sides[1]), _decimal_comma(sides[1], sides[0])
    pb, gb = _base_numeral(pn), _base_numeral(gn)
    if pb is False or gb is False:
        return d.decide(False, "base_numeral", "a digit not below its base (or a base outside 2..36)")
    d.pred_norm, d.gold_norm = pn, gn = (str(pb) if pb is not None else pn), (str(gb) if gb is not None else gn)
    if _canon(pn) == _canon(gn):
        return d.decide(True, "string")
    refused = _refuse_normalized(pred, gold, pn, gn)
    if refused:
        return d.decide(False, *refused)
    # text answers: "Evelyn", "odd", "(C)"
    if ((pf.get("text") or gf.get("text") or pf.get("choice") or gf.get("choice"))
            and _is_text_word(pn) and _is_text_word(gn)):
        return d.decide(pn.lower() == gn.lower(), "text")
    if len(pn) >= 3 and len(gn) >= 3 and _is_text_word(pn) and _is_text_word(gn) and " " in pn + gn:
        return d.decide(pn.lower() == gn.lower(), "text")
    return _compare_values(pn, gn, d, max_depth)


def _refuse_raw(pred: str, gold: str, pn: str, pf: dict, gf: dict) -> tuple[str, str] | None:
    """(rule, detail) when the prediction's raw text is junk or its unit differs: it is never the gold."""
    if (_GLUED_LETTERS.search(pred) or _DANGLING_BACKSLASH.search(pred)) and not (
            _GLUED_LETTERS.search(gold) or _DANGLING_BACKSLASH.search(gold)):
        return "junk", "letters glued to digits (0qI1) or a dangling backslash: no formula"
    if _LETTER_BETWEEN_DIGITS.search(pred) and not _LETTER_BETWEEN_DIGITS.search(gold):
        return "junk", "a capital letter between two digits (0Z2): no product a formula writes"
    if (_SUBSCRIPTED_NUMBER.search(pred) and not (_BASE_NUMERAL.fullmatch(pn) and "unit" not in pf and "," not in pred)
            and not _SUBSCRIPTED_NUMBER.search(gold)):
        return "base_numeral", "a number with a digit subscript that is no base numeral"
    if pf.get("unit_power", "1") != gf.get("unit_power", "1") and "unit" in pf and "unit" in gf:
        return "unit_power", "the units differ in power (cm^2 vs cm^4)"
    return None


def _right_hand_sides(pn: str, gn: str) -> tuple[str, str] | None:
    """The two sides to compare once assignments are read (``x = 5`` vs ``5``; ``(p,q)=(3,2)`` vs ``(3,2)``;
    ``S:T = 7:32`` vs ``7:32``); None when either side is a relation to compare as one."""
    pa, ga = split_assignment(pn), split_assignment(gn)
    if pa and ga and _canon(pa[0]) == _canon(ga[0]) and simple_lhs(pa[0]):
        return pa[1], ga[1]
    if pa and not ga and simple_lhs(pa[0]):
        return pa[1], gn
    if ga and not pa and simple_lhs(ga[0]):
        return pn, ga[1]
    if pa or ga or RELATION.search(pn) or RELATION.search(gn):
        return None
    return pn, gn


def _refuse_normalized(pred: str, gold: str, pn: str, gn: str) -> tuple[str, str] | None:
    """(rule, detail) when the normalized prediction holds no single value where the gold has one."""
    if _words_and_values(pn) and not _words_and_values(gn):
        return "words_and_values", "words around two or more values: no single value to compare"
    if (_juxtaposed(pn) or _DOLLAR_BETWEEN.search(pred)) and not (_juxtaposed(gn) or _DOLLAR_BETWEEN.search(gold)):
        return "juxtaposed", "two numbers side by side (\"1 11\", \"\\frac{13}{6} 7\"): a list or junk, no value"
    if _UNEVALUATED.fullmatch(pn) and _PLAIN_NUMBER.fullmatch(gn):
        return "unevaluated", "an arithmetic expression is not the number it comes to"
    return None


def _compare_values(pn: str, gn: str, d: Decision, max_depth: int) -> Decision:
    """Parse both sides into values or structures and compare them exactly; undecided when that fails."""
    try:
        a = parse_structure(pn, max_depth)
        b = parse_structure(gn, max_depth)
    except Invalid as e:
        return d.decide(False, "invalid", str(e))
    except (Unsupported, ValueError, ZeroDivisionError, OverflowError, RecursionError) as e:
        d.detail = f"{type(e).__name__}: {e}"
        if "a word" in str(e) and (_PLAIN_NUMBER.fullmatch(pn) or _PLAIN_NUMBER.fullmatch(gn)):
            d.equal, d.rule = False, "text_vs_number"  # "AZYUK2A" or "answer" is not 2
        elif "function of a variable" in str(e):
            ident = numeric_identity(pn, gn, _evaluate)
            if ident is not None:  # sec^2 y vs tan^2 y + 1: evaluated at points on both sides of 0
                return d.decide(ident, "fast_identity")
        return d
    try:
        eq = structures_equal(a, b)
    except (Unsupported, ValueError, ZeroDivisionError, OverflowError, RecursionError) as e:
        eq, d.detail = None, f"{type(e).__name__}: {e}"  # e.g. a value too large for a float check
    if eq is None:
        d.detail = "values not comparable here"
        return d
    return d.decide(eq, _rule_name(a, b))


def _evaluate(s: str) -> complex | None:
    n = parse_scalar(s, 40)
    if n.percent or n.literal is not None:
        return None
    return as_complex(n.value)


def _rule_name(a, b) -> str:
    if isinstance(a, Seq) or isinstance(b, Seq):
        return "fast_list"
    for x in (a, b):
        if isinstance(x.value, Huge) or x.literal is not None:
            return "fast_magnitude"
    if a.percent or b.percent:
        return "fast_percent"
    va, vb = a.value, b.value
    if not (va.is_const() and vb.is_const()):
        return "fast_poly"
    if va.value().denominator == 1 and vb.value().denominator == 1:
        return "fast_int"
    return "fast_fraction"

