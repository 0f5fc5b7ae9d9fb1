"""Differential fuzzing of the math reward for false positives: perturbed golds against an independent oracle.

A grader's worst bug is paying for a wrong answer (a false positive, FP): the policy learns to emit
it. This module builds (gold, prediction) pairs by *perturbing real golds* (GSM8K, MATH-500, the
public equivalence corpus) with small named families - a decimal comma, a changed digit, a sign
flip, x10, another locale's thousands separator, a LaTeX respelling, junk around the right number,
the right number inside a wrong sentence, ... - and judges every pair twice:

* by the reward under test (``rewardlab.rewards.math_reward`` through ``score_batch``);
* by an **independent oracle** that never imports rewardlab's comparator: judge A (:func:`read`)
  reads each raw string into its possible values with its own rules (exact ``Fraction`` for number
  literals, every plausible locale reading of a separator, sympy for expressions, evaluated to 50
  digits with ``mpmath``), judge B is math-verify (``parse``/``verify`` on the answer strings).

Verdicts: ``equal`` / ``different`` when every reading of one side agrees with every reading of the
other (``"0,500"`` can only be 0.5 or the pair (0, 500): neither is 500, so it is *different*;
``"0,5"`` is 0.5 or (0, 5): against 0.5 that is *undecided*); ``undecided`` otherwise, and such
pairs are not counted. Judge A is the precise judge: a pair it cannot read is decided ``equal``
only when math-verify says so, and a pair it reads as two different clean values while math-verify
says equal is ``contested`` (listed, not counted). A text that offers no unique answer (several
distinct numbers in junk, a negated number) is ``different`` from any gold (``no_answer``).

An FP is a pair the reward pays (score 1.0) that the oracle calls different; an FN is one the
oracle calls equal that the reward does not pay. Equal-preserving families (the same value
rewritten) are there so that FN are measured too.

    from fuzz_diff import load_golds, make_pairs, run_differential
    pairs = make_pairs(load_golds(), 5000, seed=0)
    report = run_differential(pairs)          # report.fp: the pairs the reward wrongly paid

The bench is ``bench/fuzz_rewards.py --differential``; the default test is
``tests/test_fuzz_differential.py`` (a bounded run that must find no FP, plus the regression table).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import time
import unicodedata
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterable

# ============================================================================ golds

BUILTIN_GOLDS: tuple[tuple[str, str], ...] = tuple(("builtin", g) for g in (
    "5", "12", "500", "1000", "1,234", "-7", "0", "72", "18", "3600", "250000", "0.75", "3.14", "0.5", "12.5",
    "\\frac{3}{4}", "\\frac{1}{8}", "\\dfrac{17}{50}", "-\\frac{2}{3}", "\\sqrt{2}", "2\\sqrt{5}",
    "\\frac{\\sqrt{21}}{5}",
    "288 \\pi", "(6,31,-1)", "(-\\sqrt{3}, \\sqrt{3})", "x^2+7x+10", "p - q", "10\\%", "\\$18.90", "(1, 2)",
    "[0, \\infty)",
))
"""Golds used when no data folder is present (a small mix of every shape the datasets hold)."""


def _last_boxed(text: str) -> str | None:
    k = text.rfind("\\boxed")
    if k < 0:
        return None
    j = text.find("{", k)
    if j < 0:
        return None
    depth = 0
    for t in range(j, len(text)):
        if text[t] == "{":
            depth += 1
        elif text[t] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:t].strip()
    return None


def _data_dir() -> Path | None:
    d = os.environ.get("REWARDLAB_DATA_DIR")
    if d and Path(d).is_dir():
        return Path(d)
    guess = Path(__file__).resolve().parents[3] / "shared" / "data"
    return guess if guess.is_dir() else None


def _corpus_path() -> Path | None:
    p = Path(__file__).resolve().parents[3] / "shared" / "bench" / "math_equiv_public.jsonl"
    return p if p.is_file() else None


def load_golds(data_dir: str | Path | None = None, corpus: str | Path | None = None) -> list[tuple[str, str]]:
    """``(source, gold answer)`` for GSM8K test+train (after ``####``), MATH-500 (``answer``) and the
    public corpus (its golds, boxed or ``####`` ones extracted); read at run time, never copied.
    Falls back to :data:`BUILTIN_GOLDS` when none of those files is present."""
    d = Path(data_dir) if data_dir else _data_dir()
    c = Path(corpus) if corpus else _corpus_path()
    out: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(src: str, g: str | None) -> None:
        if g is None:
            return
        g = g.strip()
        if g and len(g) <= 200 and "\n" not in g and (src, g) not in seen:
            seen.add((src, g))
            out.append((src, g))

    if d is not None:
        for split in ("test", "train"):
            p = d / "gsm8k" / f"{split}.jsonl"
            if p.is_file():
                for line in p.open(encoding="utf-8"):
                    a = json.loads(line)["answer"]
                    add(f"gsm8k-{split}", a[a.rfind("####") + 4:])
        p = d / "math" / "math500_test.jsonl"
        if p.is_file():
            for line in p.open(encoding="utf-8"):
                add("math500", json.loads(line)["answer"])
    if c is not None:
        for line in c.open(encoding="utf-8"):
            if not line.strip():
                continue
            g = json.loads(line)["gold"]
            if "####" in g:
                g = g[g.rfind("####") + 4:]
            elif "\\boxed" in g:
                g = _last_boxed(g)
            add("corpus", g)
    return out or list(BUILTIN_GOLDS)


# ============================================================================ perturbation families

_INT = re.compile(r"-?\d{1,3}(?:,\d{3})+|-?\d+")
_DEC = re.compile(r"-?\d*\.\d+")
_FRAC = re.compile(r"(-?)\\[dt]?frac\{(-?\d+)\}\{(\d+)\}|(-?\d+)/(\d+)")


def gold_number(g: str) -> Fraction | None:
    """The value of a gold that is a plain number (``1,234``, ``-7``, ``0.75``, ``\\frac{3}{4}``, ``3/4``)."""
    g = g.strip()
    if _INT.fullmatch(g) or _DEC.fullmatch(g):
        return Fraction(g.replace(",", ""))
    m = _FRAC.fullmatch(g)
    if m:
        if m.group(2) is not None:
            v = Fraction(int(m.group(2)), int(m.group(3)) or 1)
            return -v if m.group(1) else v
        return Fraction(int(m.group(4)), int(m.group(5)) or 1)
    return None


def fmt_number(v: Fraction) -> str:
    """A plain decimal when ``v`` terminates within 12 places, else ``\\frac{p}{q}``."""
    if v.denominator == 1:
        return str(v.numerator)
    for k in range(1, 13):
        if (v * 10 ** k).denominator == 1:
            s = f"{abs(v.numerator) * 10 ** k // v.denominator:0{k + 1}d}"
            out = s[:-k] + "." + s[-k:]
            return ("-" if v < 0 else "") + out
    sign = "-" if v < 0 else ""
    return f"{sign}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"


def _digits_of(g: str) -> str | None:
    """The digit string of a non-negative integer gold (commas dropped)."""
    v = gold_number(g)
    if v is None or v.denominator != 1 or v < 0:
        return None
    return str(v.numerator)


def _group(s: str, sep: str) -> str:
    """``1234567`` -> ``1<sep>234<sep>567``."""
    head = len(s) % 3 or 3
    return s[:head] + "".join(sep + s[i:i + 3] for i in range(head, len(s), 3))


JUNK_PIECES = ("\ufffd", "qI", "(G", "ing", "▁the", "Ġ", "ĊĊ", "ab", "Z", "answer", "is", " ", "  ", "\ufffd\ufffd",
               "!",
               ")", "(", "{", "}", "$", "_", "|", "é", "\u200b", "ANS", "ĠThe", "x", "=", ":", "#", "\\")
UNITS = ("cm", "m", "km", "kg", "g", "mph", "miles", "meters", "dollars", "cents", "hours", "minutes", "seconds",
         "inches", "feet", "apples", "pounds", "liters", "units", "days", "cm^2", "square feet")
SCALE_WORDS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "dozen": 12}


def _choice(rng: random.Random, options: list) -> tuple:
    options = [o for o in options if o is not None and o[0] is not None]
    return rng.choice(options) if options else (None, "")


def _wrong(v: Fraction, rng: random.Random) -> Fraction:
    """A nearby different value."""
    return v + rng.choice((1, -1, 2, 10, -10)) if v.denominator == 1 else v + Fraction(1, v.denominator)


# Each family: fn(gold, rng) -> (prediction, variant) or (None, "") when it does not apply to that gold.

def fam_decimal_comma(g: str, rng: random.Random):
    """A comma where a decimal point or nothing belongs: ``0,500`` / ``5,00`` / ``50,0`` vs 500, ``0,75`` vs 0.75."""
    s = _digits_of(g)
    opts = []
    if s is not None:
        opts.append((f"0,{s}", "0,N"))
        opts.append((f"{s},0", "N,0"))
        opts.append((f"{s},00", "N,00"))
        opts.append((f"{s},000", "N,000"))
        if len(s) >= 2:
            ks = [k for k in range(1, len(s)) if (len(s) - k) % 3 != 0]
            if ks:
                k = rng.choice(ks)
                opts.append((s[:k] + "," + s[k:], "misplaced comma"))
    if _DEC.fullmatch(g.strip()):
        opts.append((g.strip().replace(".", ","), "decimal comma"))
    return _choice(rng, opts)


def fam_leading_zeros(g: str, rng: random.Random):
    """Leading zeros: ``007`` vs 7 (same value), ``01,000`` vs 1000 (not a thousands group)."""
    s = _digits_of(g)
    opts = []
    if s is not None:
        opts += [("0" + s, "0N"), ("00" + s, "00N")]
        if len(s) >= 4:
            opts.append(("0" + _group(s, ","), "0-prefixed grouping"))
            opts.append(("00" + _group(s, ","), "00-prefixed grouping"))
    if _DEC.fullmatch(g.strip()) and not g.strip().startswith("-"):
        opts.append(("0" + g.strip(), "0 before a decimal"))
    return _choice(rng, opts)


def fam_digit_changed(g: str, rng: random.Random):
    """One digit of the gold changed, dropped or doubled (any gold with a digit)."""
    pos = [i for i, c in enumerate(g) if c.isdigit()]
    if not pos:
        return None, ""
    i = rng.choice(pos)
    op = rng.choice(("change", "change", "drop", "double"))
    if op == "change":
        d = rng.choice([c for c in "0123456789" if c != g[i]])
        return g[:i] + d + g[i + 1:], "digit changed"
    if op == "drop" and len(pos) > 1:
        return g[:i] + g[i + 1:], "digit dropped"
    return g[:i] + g[i] + g[i:], "digit doubled"


def fam_sign_flip(g: str, rng: random.Random):
    """The opposite sign: ``-5`` vs 5, ``5`` vs -5, ``-(...)`` around an expression."""
    s = g.strip()
    s = s.strip("$").strip() or s
    if s.startswith("-"):
        return s[1:].lstrip(), "sign dropped"
    v = gold_number(s)
    if v == 0:
        return None, ""
    if v is not None:
        return (rng.choice(((f"-{s}", "minus added"), (f"−{s}", "unicode minus added"))) if s[0] != "\\"
                else (f"-{s}", "minus added"))
    if re.search(r"\d|\\pi|\\sqrt", s) and not re.search(r"[,=<>]|\\le|\\ge", s):
        return f"-({s})", "-(expr)"
    return None, ""


def fam_scale10(g: str, rng: random.Random):
    """The value times or over a power of ten (a slipped decimal point)."""
    v = gold_number(g)
    if v is None or v == 0:
        return None, ""
    k = rng.choice((10, 100, 1000, Fraction(1, 10), Fraction(1, 100), Fraction(1, 1000)))
    return fmt_number(v * k), f"x{k}"


def fam_percent(g: str, rng: random.Random):
    """Percent spellings of the value and of a wrong one (``5%`` vs 50; ``50\\%`` vs 0.5)."""
    v = gold_number(g)
    if v is None:
        return None, ""
    s = fmt_number(v)
    return _choice(rng, [
        (f"{s}%", "N%"), (f"{s}\\%", "N\\%"), (f"{s} percent", "N percent"),
        (f"{fmt_number(v * 10)}%", "10N%"), (f"{fmt_number(v / 10)}%", "N/10 %"),
        (f"{fmt_number(v * 100)}\\%", "100N\\%") if abs(v) < 10 else None,
        (f"{fmt_number(_wrong(v, rng))}%", "wrong%"),
    ])


def fam_units(g: str, rng: random.Random):
    """Units around the right and a wrong value; scale words (``5 thousand`` vs 5) and currency."""
    v = gold_number(g)
    if v is None:
        return None, ""
    s = fmt_number(v)
    u = rng.choice(UNITS)
    w = fmt_number(_wrong(v, rng))
    word, mult = rng.choice(list(SCALE_WORDS.items()))
    return _choice(rng, [
        (f"{s} {u}", "N unit"), (f"{s}\\text{{ {u}}}", "N \\text{unit}"), (f"\\${s}", "\\$N"), (f"${s}", "$N"),
        (f"{w} {u}", "wrong unit"), (f"{s} {word}", "N scale-word"),
        ((f"{fmt_number(v / mult)} {word}", "N/scale scale-word") if (v / mult) * 10**6 == int((v / mult) * 10**6)
         else None),
        (f"{s}\\text{{{u.split('^')[0]}}}^2", "N \\text{unit}^2"),
    ])


def fam_thousands_locale(g: str, rng: random.Random):
    """Thousands separators of other locales (``1.000``, ``1 000``, ``1'000``, ``1\\,000``, ``1{,}000``)
    and wrong groupings (``10,00``, ``1,0000``)."""
    s = _digits_of(g)
    if s is None or len(s) < 4:
        return None, ""
    opts = [(_group(s, "."), "dot groups"), (_group(s, " "), "space groups"), (_group(s, "'"), "apostrophe groups"),
            (_group(s, "\\,"), "\\, groups"), (_group(s, "{,}"), "{,} groups"), (_group(s, "\\ "), "\\  groups"),
            (_group(s, ","), "comma groups"), (_group(s, "\u202f"), "narrow nbsp groups")]
    k = rng.choice([k for k in range(1, len(s)) if (len(s) - k) % 3 != 0] or [1])
    opts.append((s[:k] + "," + s[k:], "wrong comma grouping"))
    opts.append((s[:k] + " " + s[k:], "wrong space grouping"))
    opts.append((s[:k] + "." + s[k:] if (len(s) - k) % 3 else None, "wrong dot grouping"))
    return _choice(rng, opts)


def _frac_parts(g: str) -> tuple[str, int, int] | None:
    v = gold_number(g)
    if v is None:
        return None
    return ("-" if v < 0 else "", abs(v.numerator), v.denominator)


def fam_latex_frac(g: str, rng: random.Random):
    """``\\frac{a}{b}`` vs ``a/b``, ``\\dfrac``, ``\\tfrac``, ``\\frac ab``, scaled terms (same value), and
    swapped or shifted terms (a different value)."""
    p = _frac_parts(g)
    if p is None:
        return None, ""
    sg, a, b = p
    k = rng.randint(2, 5)
    opts = [(f"{sg}\\frac{{{a}}}{{{b}}}", "\\frac"), (f"{sg}\\dfrac{{{a}}}{{{b}}}", "\\dfrac"),
            (f"{sg}\\tfrac{{{a}}}{{{b}}}", "\\tfrac"), (f"{sg}{a}/{b}", "a/b"),
            (f"{sg}\\frac{{{k * a}}}{{{k * b}}}", "scaled"),
            (f"\\frac{{{sg}{a}}}{{{b}}}", "sign inside"), (f"{sg}{a} \\div {b}", "\\div"),
            (f"{sg}\\frac{a}{b}" if a < 10 and b < 10 else None, "\\frac ab"),
            (f"{sg}\\frac{{{b}}}{{{a}}}" if a != b and a else None, "swapped"),
            (f"{sg}\\frac{{{a + 1}}}{{{b}}}", "numerator+1"), (f"{sg}\\frac{{{a}}}{{{b + 1}}}", "denominator+1"),
            (f"{sg}{a}/{b}0", "a/b0"), (f"{sg}\\frac{{{a}}}{{{b}}}0" if b > 1 else None, "\\frac{a}{b}0")]
    return _choice(rng, opts)


def fam_same_value(g: str, rng: random.Random):
    """Equal-preserving rewrites: ``N.0``, ``+N``, ``$N$``, ``\\boxed{N}``, "The answer is N.", a fraction
    as a decimal and back, ``.5``, ``0.50`` (FN measurement)."""
    s = g.strip().strip("$").strip() or g.strip()
    v = gold_number(s)
    opts = [(f"${s}$", "$g$"), (f"\\boxed{{{s}}}", "\\boxed{g}"), (f"The answer is {s}.", "answer phrase"),
            (f"\\({s}\\)", "\\(g\\)"), (f"The final answer is $\\boxed{{{s}}}$.", "final answer boxed"),
            (f"#### {s}", "#### g"), (f"**{s}**", "bold")]
    if v is not None:
        f = fmt_number(v)
        opts += [(f + ".0" if v.denominator == 1 else f + "0", "trailing zero"), ("+" + f if v >= 0 else None, "+N"),
                 (f"{v.numerator}/{v.denominator}" if v.denominator != 1 else f"{2 * v.numerator}/2", "a/b"),
                 (f, "decimal form"), (f"x = {f}", "x = N")]
        if v.denominator != 1 and f.startswith("0."):
            opts.append((f[1:], ".N"))
    else:
        opts += [(re.sub(r"\s+", "", s), "spaces removed"), (re.sub(r"([+\-=,])", r" \1 ", s), "spaces added")]
    return _choice(rng, opts)


def fam_arithmetic(g: str, rng: random.Random):
    """The value as short arithmetic (``2+3`` vs 5) and as a slightly wrong sum."""
    v = gold_number(g)
    if v is None or v.denominator != 1:
        return None, ""
    n = v.numerator
    a = rng.randint(1, 9)
    return _choice(rng, [(f"{n - a}+{a}", "a+b"), (f"{n + a}-{a}", "a-b"),
                         (f"2\\cdot {fmt_number(Fraction(n, 2))}", "2*(n/2)"),
                         (f"{n}\\times 1", "n*1"), (f"{n - a}+{a + 1}", "wrong sum"), (f"{n}\\cdot 10", "n*10")])


def fam_sci(g: str, rng: random.Random):
    """Scientific notation of the value and of a wrong exponent (``5e2``, ``5\\times10^{2}`` vs 500)."""
    v = gold_number(g)
    if v is None or v == 0 or v.denominator != 1:
        return None, ""
    n = abs(v.numerator)
    k = len(str(n)) - len(str(n).rstrip("0"))
    if k == 0:
        return None, ""
    sg = "-" if v < 0 else ""
    m = n // 10 ** k
    e = rng.choice((k, k, k + 1, k - 1))
    tag = "right exponent" if e == k else "wrong exponent"
    return _choice(rng, [(f"{sg}{m}e{e}", f"me{{e}} {tag}"), (f"{sg}{m}\\times10^{{{e}}}", f"\\times10^e {tag}"),
                         (f"{sg}{m} \\cdot 10^{e}" if e < 10 else None, f"\\cdot 10^e {tag}")])


def _junk(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(JUNK_PIECES) for _ in range(n))


def fam_junk_around(g: str, rng: random.Random):
    """The right number inside random-model junk: sub-words, ``\\ufffd``, stray brackets, other digits
    (``" 3\\ufffdqI 4(Ganswer\\ufffd00\\ufffd\\ufffd"`` vs 4)."""
    s = g.strip()
    other = str(rng.choice((0, 1, 2, 3, 00, 7, 9, 10)))
    if rng.random() < 0.5:
        other = rng.choice(("00", "0", "3", "1", "9", "12"))
    shapes = [
        (f" {other}{_junk(rng, 2)} {s}{_junk(rng, 3)}{rng.choice(('00', '0', '1'))}{_junk(rng, 2)}",
         "junk, digits on both sides"),
        (f"{_junk(rng, 3)}{s}{_junk(rng, 3)}", "junk around, no other digit"),
        (f"{s}\ufffd{other}", "N\\ufffdM"),
        (f"{other}\ufffd{s}", "M\\ufffdN"),
        (f"{_junk(rng, 4)} {other} {_junk(rng, 2)} {s}", "junk, other number first"),
        (f"{s}{_junk(rng, 1)}{other}{_junk(rng, 1)}", "N junk M junk"),
    ]
    return rng.choice(shapes)


def fam_several_numbers(g: str, rng: random.Random):
    """Several candidates with the right one among them (``4 5``, ``4, 40``, ``3 or 4``, ``between 3 and 4``)."""
    v = gold_number(g)
    s = g.strip()
    if v is None:
        return None, ""
    w = fmt_number(_wrong(v, rng))
    return rng.choice([(f"{s} {w}", "N M"), (f"{w} {s}", "M N"), (f"{s}, {w}", "N, M"), (f"{w}, {s}", "M, N"),
                       (f"{s} or {w}", "N or M"), (f"{w} or {s}", "M or N"), (f"between {w} and {s}", "between"),
                       (f"{s} and {w}", "N and M"), (f"{s}/{w}", "N/M"), (f"{s} {s} {w}", "N N M")])


def fam_wrong_sentence(g: str, rng: random.Random):
    """The right number in a sentence that says it is wrong ("The answer is not 4."), and in a right one."""
    s = g.strip()
    v = gold_number(s.strip("$"))
    w = fmt_number(_wrong(v, rng)) if v is not None else (fam_digit_changed(s, rng)[0] or "7")
    return rng.choice([(f"The answer is not {s}.", "not N"), (f"It is not {s}, it is {w}.", "not N, it is M"),
                       (f"{s} is wrong, the answer is {w}.", "N is wrong, M"),
                       (f"I think {s} is incorrect.", "N incorrect"),
                       (f"If it were {s} we would be done, but the answer is {w}.", "if N, answer M"),
                       (f"Not {s}.", "Not N"), (f"The answer is {s}.", "right sentence"),
                       (f"So the answer is {s}.", "right sentence (so)")])


def fam_unicode(g: str, rng: random.Random):
    """Unicode spellings of the same value: fullwidth and Arabic-Indic digits, a zero-width space,
    a unicode minus (and a fullwidth wrong digit)."""
    s = g.strip()
    if not re.fullmatch(r"-?[\d.]+", s):
        return None, ""
    full = "".join(chr(ord(c) + 0xFEE0) if c.isdigit() else c for c in s)
    arab = "".join(chr(0x0660 + int(c)) if c.isdigit() else c for c in s)
    zw = s[0] + "\u200b" + s[1:] if len(s) > 1 else None
    wrong = fam_digit_changed(s, rng)[0]
    wrong_full = "".join(chr(ord(c) + 0xFEE0) if c.isdigit() else c for c in wrong) if wrong else None
    return _choice(rng, [(full, "fullwidth"), (arab, "arabic-indic"), (zw, "zero-width space"),
                         ("\u2212" + s[1:] if s.startswith("-") else None, "unicode minus"),
                         (wrong_full, "fullwidth wrong digit")])


def _brace_group(s: str, j: int) -> int:
    """Index just past the ``}`` matching the ``{`` at ``j`` (-1 if unbalanced)."""
    depth = 0
    for t in range(j, len(s)):
        if s[t] == "{":
            depth += 1
        elif s[t] == "}":
            depth -= 1
            if depth == 0:
                return t + 1
    return -1


def _swap_first_frac(s: str) -> str | None:
    k = s.find("\\frac{")
    if k < 0:
        k = s.find("\\dfrac{")
        if k < 0:
            return None
    a0 = s.find("{", k)
    a1 = _brace_group(s, a0)
    if a1 < 0 or a1 >= len(s) or s[a1] != "{":
        return None
    b1 = _brace_group(s, a1)
    if b1 < 0 or s[a0:a1] == s[a1:b1]:
        return None
    return s[:a0] + s[a1:b1] + s[a0:a1] + s[b1:]


def fam_latex_spelling(g: str, rng: random.Random):
    """LaTeX respellings of an expression gold (``\\dfrac``/``\\tfrac``/``\\frac``, ``\\left(``, ``\\cdot``
    for ``\\times``, ``\\sqrt3``, ``^2`` for ``^{2}``) and a swapped fraction (a different value)."""
    s = g.strip()
    if "\\" not in s and "^" not in s:
        return None, ""
    opts = [(s.replace("\\frac", "\\dfrac"), "\\dfrac") if "\\frac" in s else None,
            (s.replace("\\dfrac", "\\frac"), "\\frac") if "\\dfrac" in s else None,
            (s.replace("\\frac", "\\tfrac"), "\\tfrac") if "\\frac" in s else None,
            (s.replace("\\left", "").replace("\\right", ""), "no \\left\\right") if "\\left" in s else None,
            (s.replace("(", "\\left(").replace(")", "\\right)"), "\\left(") if "(" in s and "\\left" not in s else None,
            (s.replace("\\times", "\\cdot"), "\\cdot") if "\\times" in s else None,
            (re.sub(r"\\sqrt\{(\d)\}", r"\\sqrt\1", s), "\\sqrtN") if re.search(r"\\sqrt\{\d\}", s) else None,
            (re.sub(r"\^\{(\d)\}", r"^\1", s), "^N") if re.search(r"\^\{\d\}", s) else None,
            ("\\displaystyle " + s, "\\displaystyle"),
            (_swap_first_frac(s), "swapped \\frac"),
            (s.replace("\\pi", "π"), "unicode pi") if "\\pi" in s else None,
            (s.replace("\\sqrt", "\\sqrt[3]", 1), "sqrt -> cube root") if "\\sqrt{" in s else None,
            (s.replace("\\pi", ""), "pi dropped") if "\\pi" in s and re.search(r"\d\s*\\pi", s) else None]
    return _choice(rng, opts)


FAMILIES: dict[str, Callable[[str, random.Random], tuple[str | None, str]]] = {
    "decimal_comma": fam_decimal_comma,
    "leading_zeros": fam_leading_zeros,
    "digit_changed": fam_digit_changed,
    "sign_flip": fam_sign_flip,
    "scale10": fam_scale10,
    "percent": fam_percent,
    "units": fam_units,
    "thousands_locale": fam_thousands_locale,
    "latex_frac": fam_latex_frac,
    "latex_spelling": fam_latex_spelling,
    "same_value": fam_same_value,
    "arithmetic": fam_arithmetic,
    "sci": fam_sci,
    "junk_around": fam_junk_around,
    "several_numbers": fam_several_numbers,
    "wrong_sentence": fam_wrong_sentence,
    "unicode": fam_unicode,
}
"""Every perturbation family, by name (each a small function ``fn(gold, rng) -> (pred, variant)``)."""


@dataclass(frozen=True)
class Pair:
    gold: str
    pred: str
    family: str
    variant: str
    source: str


def make_pairs(golds: list[tuple[str, str]], n: int, seed: int = 0,
               families: Iterable[str] | None = None) -> list[Pair]:
    """``n`` distinct pairs: a gold drawn with equal weight per source, then a family that applies.
    Deterministic for a given ``seed``."""
    rng = random.Random(seed)
    fams = [(name, FAMILIES[name]) for name in (families or FAMILIES)]
    by_src: dict[str, list[str]] = defaultdict(list)
    for src, g in golds:
        by_src[src].append(g)
    srcs = sorted(by_src)
    out: list[Pair] = []
    seen: set[tuple[str, str]] = set()
    tries = 0
    while len(out) < n and tries < 20 * n + 1000:
        tries += 1
        src = rng.choice(srcs)
        g = rng.choice(by_src[src])
        name, fn = rng.choice(fams)
        pred, variant = fn(g, rng)
        if pred is None or (g, pred) in seen:
            continue
        seen.add((g, pred))
        out.append(Pair(g, pred, name, variant, src))
    return out


# ============================================================================ the oracle (independent)
# Nothing below imports rewardlab: judge A is this module's own reader + sympy/mpmath, judge B is
# math-verify. Readings are tuples:
#   ("n", Fraction)             an exact rational
#   ("r", re, im)               a number known to 50 digits (mpmath mpf parts)
#   ("f", symbols, values)      an expression in free symbols, by its values at fixed rational points
#   ("inf", sign)               +-infinity
#   ("p", reading)              a percentage of a reading (compared as-is with another percentage;
#                               against a plain value it may mean the value or the value / 100)
#   ("t", brackets, items)      an ordered tuple/interval; ("s", items) an unordered list or set

_DPS = 50
_MAX_LEN = 300

_MARKER = re.compile(r"^(?:so\s*,?\s*)?(?:the\s+)?(?:final\s+)?answer\s*(?:is|:|=)\s*:?\s*", re.IGNORECASE)
_MARKER_ANY = re.compile(r"answer\s*(?:is|:)\s*:?|####", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|isn't|wrong|incorrect|never)\b|\bno\b", re.IGNORECASE)
_NUMTOK = re.compile(r"\d+(?:[.,]\d+)*")
_UNIT_WORDS = {u for u in UNITS if " " not in u and "^" not in u} | {
    "cm", "mm", "m", "km", "kg", "g", "mg", "l", "ml", "s", "sec", "min", "h", "hr", "hrs", "mi", "ft", "in", "yd",
    "lb", "lbs",
    "oz", "dollar", "cent", "hour", "minute", "second", "inch", "foot", "mile", "meter", "pound", "liter", "unit",
    "day",
    "week", "weeks", "year", "years", "month", "months", "people", "students", "cookies", "points", "square", "degrees",
    "degree", "euros", "euro", "yards", "gallons", "ounces", "grams", "kilograms", "centimeters", "kilometers"}

_NUM_EN = re.compile(r"[+-]?(?:\d+(?:\.\d+)?|\.\d+)")
_NUM_EN_GROUPS = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
_NUM_SEP_GROUPS = re.compile(r"([+-]?[1-9]\d{0,2})((?:(?: |'|\\,|\\ |\\;|\\!|,\\!|\{,\}|\u2009|\u202f)\d{3})+)"
                             r"([.,]\d+)?")
_NUM_EU_GROUPS = re.compile(r"[+-]?[1-9]\d{0,2}(?:\.\d{3})+(?:,\d+)?")
_NUM_EU_DEC = re.compile(r"[+-]?\d+,\d+")
_NUM_SCI = re.compile(r"([+-]?\d+(?:\.\d+)?)[eE]([+-]?\d{1,3})")
_NUM_SCI_TEX = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([+-]?\d{1,3})\s*\}?")


_RENDER_ONLY = re.compile(r"\\(?:left|right|displaystyle|textstyle|bigl|bigr|Bigl|Bigr|big|Big)(?![A-Za-z])")


def _strip_wrappers(s: str) -> str:
    s = _RENDER_ONLY.sub("", s)
    s = re.sub(r"\{\s*,\s*\}", "{,}", s)  # math mode ignores spaces: "14{ , }916" is "14{,}916"
    for _ in range(6):
        t = s.strip()
        if len(t) > 2 and t[0] == "$" and t[-1] == "$":
            t = re.sub(r"(?<!\\)\$", "", t)  # math-mode toggles only: "$\\boxed{$x$}$" is x (a "\\$" stays)
        if t.endswith(".") and not re.search(r"\d\.$", t[-2:] + "") or re.search(r"[^\d]\.$", t):
            t = t[:-1].rstrip()
        elif re.search(r"\d\.$", t) and not re.search(r"\d\.\d", t[-3:]):
            t = t[:-1].rstrip()  # "is 5." ends the sentence
        for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**")):
            if len(t) > len(a) + len(b) and t.startswith(a) and t.endswith(b) and a not in t[len(a):-len(b)]:
                t = t[len(a):-len(b)].strip()
        if t.startswith("\\boxed{") and _brace_group(t, 6) == len(t):
            t = t[7:-1].strip()
        if t.startswith("####"):
            t = t[4:].strip()
        m = _MARKER.match(t)
        if m:
            t = t[m.end():]
        if t == s:
            break
        s = t
    return s.strip()


def _top_split(s: str, sep: str = ",") -> list[str] | None:
    parts, depth, last = [], 0, 0
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(s[last:i])
            last = i + 1
        i += 1
    if not parts:
        return None
    parts.append(s[last:])
    return parts


def _literal(t: str) -> list[tuple] | None:
    """Every reading of a number literal (several when locales disagree), or None when it is none."""
    out: list[Fraction] = []
    if len(t) > 80:
        return None
    if _NUM_EN.fullmatch(t):
        out.append(Fraction(t))
    if _NUM_EN_GROUPS.fullmatch(t):
        out.append(Fraction(t.replace(",", "")))
    m = _NUM_SEP_GROUPS.fullmatch(t)
    if m:
        groups = re.sub(r"\D", "", m.group(2))
        dec = (m.group(3) or "").replace(",", ".")
        out.append(Fraction(m.group(1) + groups + dec))
    if _NUM_EU_GROUPS.fullmatch(t):
        out.append(Fraction(t.replace(".", "").replace(",", ".")))
    if _NUM_EU_DEC.fullmatch(t) and not _NUM_EN_GROUPS.fullmatch(t):
        out.append(Fraction(t.replace(",", ".")))
    m = _NUM_SCI.fullmatch(t) or _NUM_SCI_TEX.fullmatch(t)
    if m:
        out.append(Fraction(m.group(1)) * Fraction(10) ** int(m.group(2)))
    if not out:
        return None
    m = re.fullmatch(r"[+-]?\d*\.(\d+)", t)
    d = len(m.group(1)) if m else None
    return [("n", v, d) if d is not None and v == out[0] else ("n", v) for v in dict.fromkeys(out)]


# -- expressions: LaTeX / plain text -> a sympy string, with bounded sizes

_TOK = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?|\.\d+)|(?P<cmd>\\[A-Za-z]+|\\[,;:! ]|\\[{}])|(?P<letter>[A-Za-z])|"
                  r"(?P<op>[-+*/^(){}\[\]!])|(?P<uni>[π√]))")
_SKIP_CMDS = {"\\left", "\\right", "\\displaystyle", "\\,", "\\;", "\\:", "\\!", "\\ ", "\\big", "\\Big", "\\bigl",
              "\\bigr"}
_FUNC_CMDS = {"\\sin": "sin", "\\cos": "cos", "\\tan": "tan", "\\sec": "sec", "\\csc": "csc", "\\cot": "cot",
              "\\ln": "log",
              "\\exp": "exp", "\\arcsin": "asin", "\\arccos": "acos", "\\arctan": "atan"}


_STOPWORDS = {"or", "and", "is", "of", "to", "in", "at", "it", "no", "be", "an", "as", "on", "by", "if", "so", "we"}


class _NoParse(Exception):
    pass


class _InvalidNumeral(Exception):
    """A base numeral whose digits or base are impossible (``204_1``, ``52_88``): it states no value."""


class _Ambiguous(Exception):
    """The text has two standard readings that differ (``2\\frac{1}{2}``: 2.5 or 1)."""


def _tokens(s: str) -> list[tuple[str, str]]:
    bare = re.sub(r"\\[A-Za-z]+", " ", s)
    if re.search(r"[A-Za-z]{3,}", bare) or _STOPWORDS & {w.lower() for w in re.findall(r"[A-Za-z]+", bare)}:
        raise _NoParse("a word")  # "not 5" is prose, not n*o*t*5; "16 or 11" is not 16*o*r*11
    toks, pos = [], 0
    while pos < len(s):
        m = _TOK.match(s, pos)
        if not m or m.end() == pos:
            if not s[pos:].strip():
                break
            raise _NoParse(f"character {s[pos]!r}")
        toks.append((m.lastgroup, m.group(m.lastgroup)))
        pos = m.end()
    return toks


class _Conv:
    """Recursive descent from tokens to a sympy expression string with explicit products."""

    def __init__(self, toks: list[tuple[str, str]]):
        self.toks, self.i, self.depth = toks, 0, 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def group(self) -> str:
        """A ``{...}`` group, or a single token (one digit of a number, as LaTeX reads ``\\frac12``)."""
        kind, val = self.peek()
        if val == "{":
            self.i += 1
            return "(" + self.seq("}") + ")"
        if kind == "num":
            self.i += 1
            if len(val) == 1:
                return val
            if not val[1].isdigit():
                raise _NoParse("unbraced decimal argument")
            self.i -= 1
            self.toks[self.i] = ("num", val[1:])  # \\frac34: the first digit is the argument
            return val[0]
        if kind == "letter":
            self.i += 1
            return val
        if kind == "cmd" and val == "\\pi":
            self.i += 1
            return "pi"
        raise _NoParse(f"argument {val!r}")

    def seq(self, closer: str | None) -> str:
        self.depth += 1
        if self.depth > 30:
            raise _NoParse("nesting")
        out: list[tuple[str, str]] = []  # (kind, text): kind "atom", "lit" (a number literal) or "op"
        while True:
            kind, val = self.peek()
            if val is None:
                if closer is not None:
                    raise _NoParse("unclosed")
                break
            if val == closer:
                self.i += 1
                break
            if val in (")", "}", "]"):
                raise _NoParse("unbalanced")
            self.i += 1
            if kind == "num":
                if len(val.replace(".", "")) > 30:
                    raise _NoParse("long literal")
                if out and out[-1][0] == "lit":
                    raise _NoParse("two numbers side by side")  # "4 5" is two answers, not 20
                out.append(("lit", f"Rational('{val}')" if "." in val else val))
            elif kind == "letter":
                if val in "eiEI":
                    raise _NoParse("e or i: a constant or a variable")
                out.append(("atom", val))
            elif kind == "uni":
                if val == "π":
                    out.append(("atom", "pi"))
                else:
                    out.append(("atom", f"sqrt{self.group()}"))
            elif kind == "op" and val == "!":
                if not out or out[-1][0] not in ("lit", "atom"):
                    raise _NoParse("factorial of nothing")
                k, text = out.pop()
                if k == "lit" and not (text.isdigit() and int(text) <= 1500):
                    raise _NoParse("factorial too large")
                if k == "atom" and not re.fullmatch(r"\(*\d{1,4}\)*", text):
                    raise _NoParse("factorial of an expression")
                out.append(("atom", f"factorial({text})"))
            elif kind == "op":
                if val in "({":
                    out.append(("atom", "(" + self.seq(")" if val == "(" else "}") + ")"))
                elif val == "[":
                    raise _NoParse("bracket")
                elif val == "^":
                    kind2, val2 = self.peek()
                    if kind2 == "num" and len(val2) > 1:
                        raise _NoParse("unbraced multi-digit exponent")
                    if val2 in ("+", "-"):
                        raise _NoParse("signed unbraced exponent")
                    out.append(("op", "**"))
                    out.append(("atom", "(" + self.group() + ")"))
                else:
                    out.append(("op", val))
            else:  # cmd
                if val in _SKIP_CMDS:
                    continue
                if val in ("\\frac", "\\dfrac", "\\tfrac", "\\cfrac"):
                    mixed = bool(out) and out[-1][0] == "lit"
                    a = self.group()
                    b = self.group()
                    if mixed and a.strip("()").isdigit() and b.strip("()").isdigit():
                        raise _Ambiguous("a mixed number or a product")
                    out.append(("atom", f"(({a})/({b}))"))
                elif val == "\\sqrt":
                    if self.peek()[1] == "[":
                        self.i += 1
                        kind2, n = self.peek()
                        if kind2 != "num" or self.toks[self.i + 1][1] != "]" if self.i + 1 < len(self.toks) else True:
                            raise _NoParse("root index")
                        self.i += 2
                        out.append(("atom", f"root({self.group()}, {n})"))
                    else:
                        out.append(("atom", f"sqrt({self.group()})"))
                elif val == "\\pi":
                    out.append(("atom", "pi"))
                elif val == "\\infty":
                    out.append(("atom", "oo"))
                elif val in ("\\cdot", "\\times"):
                    out.append(("op", "*"))
                elif val == "\\div":
                    out.append(("op", "/"))
                elif val in _FUNC_CMDS:
                    arg_kind, arg = self.peek()
                    if arg not in ("(", "{"):
                        raise _NoParse("function without parentheses")
                    self.i += 1
                    inner = self.seq(")" if arg == "(" else "}")
                    out.append(("atom", f"{_FUNC_CMDS[val]}({inner})"))
                else:
                    raise _NoParse(f"command {val}")
        self.depth -= 1
        parts: list[str] = []
        prev = None
        for kind, text in out:
            kind = "atom" if kind == "lit" else kind
            if kind == "atom" and prev == "atom":
                parts.append("*")
            parts.append(text)
            prev = kind
        return " ".join(parts)


def _sample_value(name: str, point: int):
    import sympy

    k = ord(name[0]) % 23
    return sympy.Rational(7 + 3 * k + 11 * point, 13 + 2 * point + k % 5)


def _to_mp(v) -> tuple | None:
    import mpmath

    re_, im_ = v.as_real_imag()
    if not (re_.is_number and im_.is_number):
        return None
    try:
        with mpmath.workdps(_DPS + 10):
            a, b = mpmath.mpf(str(re_.evalf(_DPS))), mpmath.mpf(str(im_.evalf(_DPS)))
    except (TypeError, ValueError):
        return None
    if not (mpmath.isfinite(a) and mpmath.isfinite(b)):
        return None
    return a, b


_GLOBALS: dict = {}


def _sympy_globals() -> dict:
    """sympy's names (what parse_expr's generated code calls) and no builtins."""
    if not _GLOBALS:
        import sympy

        _GLOBALS.update({k: getattr(sympy, k) for k in dir(sympy) if not k.startswith("_")})
        _GLOBALS["__builtins__"] = {}
    return _GLOBALS


def _bounded(raw) -> bool:
    """Whether an unevaluated expression is safe to evaluate: every power's exponent is a small number
    or a power-free expression in symbols (no towers such as ``10^{10^{10}}``, no ``2^{100000}``)."""
    import sympy

    for node in sympy.preorder_traversal(raw):
        if isinstance(node, sympy.Pow):
            ex = node.exp
            if any(isinstance(a, sympy.Pow) and not (a.exp.is_Number and abs(a.exp) <= 3)
                   for a in sympy.preorder_traversal(ex)):
                return False  # a tower (1/2 is 1*2**-1, allowed)
            if ex.free_symbols:
                continue
            try:
                v = float(sympy.N(ex, 15))
            except (TypeError, ValueError):
                return False
            if not math.isfinite(v) or abs(v) > 200:
                return False
        elif isinstance(node, sympy.Number) and node.is_Integer and abs(node) > 10**4000:
            return False
    return True


def _expr(t: str) -> list[tuple] | None:
    """An expression read with this module's converter and sympy, to its value (or values at points)."""
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    try:
        text = _Conv(_tokens(t)).seq(None)
    except (_NoParse, IndexError):
        return None
    if not text.strip():
        return None
    ns = {"Rational": sympy.Rational, "sqrt": sympy.sqrt, "factorial": sympy.factorial, "root": sympy.root,
          "pi": sympy.pi, "oo": sympy.oo,
          "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "sec": sympy.sec, "csc": sympy.csc, "cot": sympy.cot,
          "log": sympy.log, "exp": sympy.exp, "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan}
    for c in set(re.findall(r"\b[a-zA-Z]\b", text)):
        ns.setdefault(c, sympy.Symbol(c))
    gd = _sympy_globals()
    try:
        raw = parse_expr(text, local_dict=ns, global_dict=gd, evaluate=False)
    except Exception:  # noqa: BLE001 - anything sympy cannot read is "cannot read"
        return None
    if not _bounded(raw):
        return None
    try:
        e = parse_expr(text, local_dict=ns, global_dict=gd)
    except Exception:  # noqa: BLE001
        return None
    if e in (sympy.oo, -sympy.oo):
        return [("inf", 1 if e == sympy.oo else -1)]
    if e.has(sympy.oo, sympy.zoo, sympy.nan):
        return None
    syms = sorted(str(x) for x in e.free_symbols)
    if not syms:
        if e.is_Rational:
            return [("n", Fraction(int(e.p), int(e.q)))]
        mp = _to_mp(e)
        return None if mp is None else [("r", *mp)]
    vals = []
    for point in range(3):
        sub = e.subs({sympy.Symbol(x): _sample_value(x, point) for x in syms})
        mp = _to_mp(sub)
        if mp is None:
            return None
        vals.append(mp)
    return [("f", tuple(syms), tuple(vals))]


def _strip_units(t: str) -> tuple[str, int]:
    """A trailing unit word or ``\\text{unit}`` (dropped) or scale word (returned as a multiplier)."""
    m = re.fullmatch(r"(.*?\d\}?)\s*(?:\\(?:text|mbox|mathrm)\s*\{\s*([A-Za-z ]+?)\s*(?:\^\s*\{?[23]\}?)?\s*\}|"
                     r"([A-Za-z]+(?:\s+[A-Za-z]+)?))"
                     r"\s*(?:\^\s*\{?[23]\}?)?", t, re.S)
    if not m:
        return t, 1
    word = (m.group(2) or m.group(3)).lower()
    if len(word) == 1 and word in _UNIT_WORDS and not m.group(2):
        raise _Ambiguous("a one-letter unit or a variable")  # "5 m": five metres, or 5m
    if word in SCALE_WORDS:
        return m.group(1), SCALE_WORDS[word]
    if word in _UNIT_WORDS or all(w in _UNIT_WORDS for w in word.split()):
        return m.group(1), 1
    return t, 1


def _read_value(t: str, depth: int = 0) -> list[tuple] | None:
    t = t.strip()
    if not t or len(t) > _MAX_LEN or depth > 3:
        return None
    m = re.fullmatch(r"[A-Za-z]\s*=\s*(.+)", t, re.S)
    if m:
        t = m.group(1).strip()
    pct = False
    m = re.fullmatch(r"(.+?)\s*(?:\\%|%|\s+percent|\s+pct)", t, re.S)
    if m:
        pct, t = True, m.group(1).strip()
    t = re.sub(r"\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°)$", "", t)
    if t.startswith("\\$"):
        t = t[2:].strip()
    elif t.startswith("$") and "$" not in t[1:]:
        t = t[1:].strip()
    t, scale = _strip_units(t)
    m = re.fullmatch(r"([0-9A-Za-z]+)_\{?(\d{1,2})\}?", t)
    if m and len(m.group(1)) <= 60 and (m.group(1).isdigit() or 11 <= int(m.group(2)) <= 36):
        try:
            if not 2 <= int(m.group(2)) <= 36:
                raise ValueError
            return [("n", Fraction(int(m.group(1), int(m.group(2)))))]
        except ValueError:
            raise _InvalidNumeral(t) from None
    readings = list(_literal(t) or [])
    lst = _read_list(t, depth)
    if lst is not None:
        readings += lst
    elif not readings and t.startswith("\\{") and t.endswith("\\}"):
        inner = _read_value(t[2:-2], depth + 1)
        readings = [("s", (x,)) for x in inner] if inner else []
    if not readings and _top_split(t, ",") is None and not _NUM_EU_DEC.search(t):
        readings = _expr(t) or []
    if not readings:
        return None
    if scale != 1:
        if any(r[0] != "n" for r in readings):
            return None
        readings = [("n", r[1] * scale) for r in readings]
    if pct:
        readings = [("p", r) for r in readings]
    return readings


def _read_list(t: str, depth: int) -> list[tuple] | None:
    """The tuple / interval / set / bare-list reading of a comma-separated text (None if it is not one)."""
    brackets = ""
    parts = _top_split(t, ",")
    if t[:1] in ("(", "[") and t[-1:] in (")", "]"):
        inner = _top_split(t[1:-1], ",")
        if inner is not None and parts is None:
            brackets, parts = t[0] + t[-1], inner
    elif t.startswith("\\{") and t.endswith("\\}"):
        inner = _top_split(t[2:-2], ",")
        if inner is not None:
            brackets, parts = "{}", inner
    if parts is None or len(parts) < 2:
        return None
    if not brackets and all(re.fullmatch(r"(?:\\[!,;]|\s)*\d{3}(?:\.\d+)?", p) for p in parts[1:]):
        return None  # "1,000" / "12,345,678" are thousands groups, never a list
    items = []
    for p in parts:
        r = _read_value(p, depth + 1)
        if r is None:
            return None
        items.append(r)
    combos = [()]
    for r in items:
        combos = [c + (x,) for c in combos for x in r]
        if len(combos) > 16:
            return None
    if brackets in ("()", "[]", "(]", "[)"):
        return [("t", brackets, c) for c in combos]
    return [("s", c) for c in combos]


_READINGS: dict[str, tuple] = {}
"""Judge A's readings by string: filled by :func:`read`, and by :func:`run_differential` with the
readings its worker processes computed (the oracle's per-string cache)."""


def read(s: str) -> tuple[str, tuple]:
    """Judge A's reading of one raw string: ``("values", readings)``, ``("no_answer", why)`` (junk with
    several numbers, a negated number) or ``("abstain", why)`` (cannot read it). Cached per string."""
    r = _READINGS.get(s) if isinstance(s, str) else None
    if r is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # sympy's deprecation notes on odd trees
                r = _read(s)
        except (_OracleTimeout, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - a reader that fails on a string cannot tell
            r = ("abstain", (f"oracle error {type(e).__name__}",))
        if len(_READINGS) > 500_000:
            _READINGS.clear()
        if isinstance(s, str):
            _READINGS[s] = r
    return r


def _read(s: str) -> tuple[str, tuple]:
    if not isinstance(s, str):
        return ("abstain", ("not text",))
    s = unicodedata.normalize("NFKC", s)
    s = s.replace("\u2212", "-").replace("\u200b", "").replace("\ufeff", "").replace("\xa0", " ")
    s = re.sub(r"[\u0660-\u0669]", lambda m: str(ord(m.group(0)) - 0x660), s)
    if len(s) > 2000:
        return ("abstain", ("too long",))
    t = _strip_wrappers(s)
    try:
        r = _read_value(t)
    except _Ambiguous as e:
        return ("ambiguous", (str(e),))
    except _InvalidNumeral as e:
        return ("no_answer", (f"invalid base numeral {e}",))
    if r is not None:
        return ("values", tuple(r))
    try:
        if t and _Conv(_tokens(t.replace("$", ""))).seq(None):
            return ("abstain", ("math this reader cannot evaluate",))
    except (_NoParse, _Ambiguous, IndexError):
        pass
    last = None
    for m in _MARKER_ANY.finditer(s):
        last = m
    if last is not None:
        tail = re.split(r"(?<=[^\d])\.(?:\s|$)|\.\s", s[last.end():], maxsplit=1)[0]
        try:
            r = _read_value(_strip_wrappers(tail))
        except _Ambiguous as e:
            return ("ambiguous", (str(e),))
        except _InvalidNumeral as e:
            return ("no_answer", (f"invalid base numeral {e}",))
        if r is not None and not _NEGATION.search(s[last.end():]):
            return ("values", tuple(r))
    nums = _distinct_numbers(s)
    if _NEGATION.search(s) and nums:
        return ("no_answer", ("negated",))
    if len(nums) >= 2:
        return ("no_answer", ("several numbers",))
    return ("abstain", ("unreadable",))


APPROX_DIGITS = 6
"""A decimal literal with this many fractional digits or more, within one unit of its last digit of
the other side, is a rounded approximation: whether it is paid is policy, so the oracle says 'cannot tell'."""


def _approximation(x: tuple, y: tuple) -> bool:
    for a, b in ((x, y), (y, x)):
        d = a[2] if a[0] == "n" and len(a) > 2 else None
        if d is not None and d >= APPROX_DIGITS and b[0] in ("n", "r"):
            bv = b[1] if b[0] == "n" else None
            if bv is not None:
                if abs(a[1] - bv) <= Fraction(1, 10 ** d):
                    return True
            else:
                import mpmath

                with mpmath.workdps(_DPS + 10):
                    av = mpmath.mpf(a[1].numerator) / a[1].denominator
                    if abs(av - b[1]) <= mpmath.mpf(10) ** -d and abs(b[2]) < mpmath.mpf(10) ** -d:
                        return True
    return False


def _distinct_numbers(s: str) -> set[str]:
    """The distinct numbers a text offers; a math segment, fraction or root counts as one, exponents
    and subscripts as none (``\\frac{63}{400}`` is one number, ``15 cm^2`` offers only 15)."""
    s = s.replace("\\$", " ").replace("$$", "$")
    s = re.sub(r"\$[^$]{0,300}?\$",
               lambda m: " M" + str(hash(m.group(0)) % 10**9) + " " if re.search(r"\d", m.group(0)) else " ", s)
    s = re.sub(r"\\[dt]?frac\s*\{[^{}]*\}\s*\{[^{}]*\}|\\sqrt\s*\{[^{}]*\}",
               lambda m: " F" + str(hash(m.group(0)) % 10**9) + " ", s)
    s = re.sub(r"[\^_]\s*(?:\{[^{}]*\}|\d)", " ", s)
    nums = {n.lstrip("0") or "0" for n in _NUMTOK.findall(re.sub(r"[MF]\d+", " ", s))}
    return nums | set(re.findall(r"[MF]\d+", s))


def _num_cmp(x: tuple, y: tuple) -> bool | None:
    r = _num_cmp_exact(x, y)
    if r is False and _approximation(x, y):
        return None
    return r


def _num_cmp_exact(x: tuple, y: tuple) -> bool | None:
    import mpmath

    if x[0] == "n" and y[0] == "n":
        return x[1] == y[1]
    if x[0] == "inf" or y[0] == "inf":
        return x[0] == y[0] and x[1] == y[1]
    if x[0] == "f" or y[0] == "f":
        if x[0] != y[0] or x[1] != y[1]:
            return False
        res = [_mp_cmp(a, b) for a, b in zip(x[2], y[2])]
        return True if all(r is True for r in res) else (False if any(r is False for r in res) else None)
    with mpmath.workdps(_DPS + 10):
        a = (mpmath.mpf(x[1].numerator) / x[1].denominator, mpmath.mpf(0)) if x[0] == "n" else (x[1], x[2])
        b = (mpmath.mpf(y[1].numerator) / y[1].denominator, mpmath.mpf(0)) if y[0] == "n" else (y[1], y[2])
        return _mp_cmp(a, b)


def _mp_cmp(a: tuple, b: tuple) -> bool | None:
    import mpmath

    with mpmath.workdps(_DPS + 10):
        d = mpmath.sqrt((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2)
        scale = max(mpmath.mpf(1), abs(a[0]) + abs(a[1]), abs(b[0]) + abs(b[1]))
        if d <= scale * mpmath.mpf(10) ** -(_DPS - 10):
            return True
        if d > scale * mpmath.mpf(10) ** -25:
            return False
        return None


def compare_readings(x: tuple, y: tuple) -> bool | None:
    """One reading against one: True / False / None (cannot tell)."""
    if x[0] == "p" and y[0] == "p":
        return compare_readings(x[1], y[1])
    if x[0] == "p" or y[0] == "p":
        p, o = (x, y) if x[0] == "p" else (y, x)
        v = p[1]
        res = [compare_readings(v, o)]
        if v[0] == "n":
            res.append(compare_readings(("n", v[1] / 100), o))
        if all(r is False for r in res):
            return False
        return None  # "50%" against 50 or against 0.5: which one was meant is the question's business
    seq_x, seq_y = x[0] in "ts", y[0] in "ts"
    if not seq_x and not seq_y:
        return _num_cmp(x, y)
    if seq_x != seq_y:
        seq = x if seq_x else y
        one = y if seq_x else x
        items = seq[-1]
        if len(items) >= 2:
            return False
        return compare_readings(items[0], one) if seq[0] == "s" else None
    ix, iy = x[-1], y[-1]
    if len(ix) != len(iy):
        return False
    if x[0] == "t" and y[0] == "t":
        res = [compare_readings(a, b) for a, b in zip(ix, iy)]
        if any(r is False for r in res):
            return False
        if all(r is True for r in res):
            return True if x[1] == y[1] else None
        return None
    if x[0] == "s" and y[0] == "s":
        used = [False] * len(iy)
        undecided = False
        for a in ix:
            hit = False
            for j, b in enumerate(iy):
                if not used[j]:
                    r = compare_readings(a, b)
                    if r is True:
                        used[j] = hit = True
                        break
                    if r is None:
                        undecided = True
            if not hit:
                return None if undecided else False
        return True
    return None  # an ordered tuple against an unordered list


def judge_a(gold: str, pred: str) -> tuple[str, str]:
    """Judge A: ``("equal"|"different"|"ambiguous"|"abstain"|"no_answer", why)``."""
    rg, rp = read(gold), read(pred)
    if "ambiguous" in (rg[0], rp[0]):
        return ("ambiguous", (rg if rg[0] == "ambiguous" else rp)[1][0])
    if rg[0] != "values":
        return ("abstain", "gold unreadable")
    if rp[0] == "no_answer":
        return ("no_answer", rp[1][0])
    if rp[0] != "values":
        return ("abstain", "prediction unreadable")
    res = [compare_readings(p, g) for p in rp[1] for g in rg[1]]
    if all(r is True for r in res):
        return ("equal", "")
    if all(r is False for r in res):
        exact = all(x[0] == "n" for x in rp[1] + rg[1])
        return ("different", "exact" if exact else "")
    return ("ambiguous", f"{len(rp[1])} x {len(rg[1])} readings disagree")


_PROSE = re.compile(r"[\ufffd\u0120\u2581\u010a]|\b(?:not|isn't|wrong|incorrect|never|no)\b", re.IGNORECASE)


def judge_b(gold: str, pred: str) -> bool | None:
    """Judge B: math-verify on the two answer strings, each read as one math expression (``$`` signs
    removed, then the whole string in ``$...$``), both ways round; None when it fails or when either
    string is prose or junk (negations, replacement characters, sub-word markers), which math-verify
    would read past."""
    from math_verify import parse, verify

    if "_" in gold + pred:
        return None  # math-verify drops subscripts: 4210_{4} "equals" 4210_{5}
    if re.search(r"\d\s+[\d\\]", pred):
        return None  # "1 \\frac{3}{4}": a mixed number or a product; math-verify picks one
    if _PROSE.search(gold) or _PROSE.search(pred) or re.search(r"[A-Za-z]{3,}", re.sub(r"\\[A-Za-z]+", " ", pred)):
        return None
    try:
        g = parse("$" + gold.replace("$", "") + "$")
        p = parse("$" + pred.replace("$", "") + "$")
        if not g or not p:
            return None
        # 50 digits, not math-verify's default 6: 1/2004! is not 0
        kw = {"float_rounding": 50, "numeric_precision": 60}
        return bool(verify(g, p, **kw)) and bool(verify(p, g, **kw))
    except Exception:  # noqa: BLE001 - a judge that fails has no opinion
        return None


def verdict(a: tuple[str, str], b: bool | None) -> str:
    """The oracle's verdict from both judges: ``equal``, ``different``, ``contested`` or ``undecided``."""
    kind = a[0]
    if kind == "equal":
        return "equal"  # B's False is no evidence (math-verify misses rewrites); B cannot make an FP here
    if kind == "different":
        # exact rational arithmetic is a proof; math-verify's rounding (1/1004! "equals" -1/1004!) is not
        return "contested" if b is True and a[1] != "exact" else "different"
    if kind == "no_answer":
        return "different"  # math-verify finding a number in junk is the laxness we are measuring
    if kind == "abstain":
        return "equal" if b is True else "undecided"
    return "undecided"


def oracle(gold: str, pred: str) -> str:
    """The full oracle on one pair (both judges always run)."""
    a = judge_a(gold, pred)
    return verdict(a, judge_b(gold, pred) if a[0] in ("different", "abstain") else None)


# ============================================================================ the run

@dataclass
class FamilyStats:
    tried: int = 0
    decided: int = 0
    equal: int = 0
    different: int = 0
    fp: int = 0
    fn: int = 0
    fn_mv: int = 0
    """FN where only math-verify said equal (judge A could not read the pair): weaker evidence."""
    contested: int = 0
    undecided: int = 0


@dataclass
class Report:
    pairs: int = 0
    families: dict[str, FamilyStats] = field(default_factory=dict)
    fp: list[dict] = field(default_factory=list)
    fn: list[dict] = field(default_factory=list)
    contested: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    oracle_b_calls: int = 0

    def total(self) -> FamilyStats:
        t = FamilyStats()
        for s in self.families.values():
            for k in vars(t):
                setattr(t, k, getattr(t, k) + getattr(s, k))
        return t

    def table(self) -> str:
        rows = [f"{'family':18s} {'tried':>7s} {'decided':>8s} {'equal':>7s} {'diff':>7s} {'FP':>5s} {'FN':>6s} "
                f"{'FN(mv)':>6s} {'contest':>7s} {'undec':>6s}"]
        for name, s in sorted(self.families.items()) + [("TOTAL", self.total())]:
            rows.append(f"{name:18s} {s.tried:7d} {s.decided:8d} {s.equal:7d} {s.different:7d} {s.fp:5d} {s.fn:6d} "
                        f"{s.fn_mv:6d} {s.contested:7d} {s.undecided:6d}")
        return "\n".join(rows)


ORACLE_CALL_S = 5.0
"""The oracle's own hang guard: a reading or a math-verify call that takes longer is 'cannot tell'."""


class _OracleTimeout(Exception):
    pass


def _bounded_call(fn, *args, default=None):
    """``fn(*args)`` under a SIGALRM timer of :data:`ORACLE_CALL_S` (main thread only; else unbounded)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return fn(*args)

    def on_alarm(signum, frame):
        raise _OracleTimeout()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, ORACLE_CALL_S)
    try:
        return fn(*args)
    except (_OracleTimeout, MemoryError, RecursionError):
        return default
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _judge_a_strings(strings: list[str]) -> list[tuple]:
    return [_bounded_call(read, s, default=("abstain", ("oracle timeout",))) for s in strings]


def _judge_b_pairs(pairs: list[tuple[str, str]]) -> list[bool | None]:
    return [_bounded_call(judge_b, g, p) for g, p in pairs]


def _limit_worker() -> None:
    """Oracle workers: at most 4 GB of address space (a blow-up raises MemoryError, not swap)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _parallel(fn, items: list, workers: int, chunk: int) -> list:
    """``fn`` over chunks of ``items`` in ``workers`` forkserver processes (in-process when workers <= 1)."""
    chunks = [items[i:i + chunk] for i in range(0, len(items), chunk)]
    if workers <= 1 or len(chunks) <= 1:
        return [y for c in chunks for y in fn(c)]
    import multiprocessing as mp

    with mp.get_context("forkserver").Pool(workers, initializer=_limit_worker) as pool:
        return [y for part in pool.imap(fn, chunks) for y in part]


def run_differential(pairs: list[Pair], reward=None, *, workers: int = 2, deadline: float = 1.0,
                     batch: int = 5000, progress: Callable[[str], None] | None = None) -> Report:
    """Score every pair with ``reward`` (default ``math_reward``, through ``score_batch``) and with the
    oracle; judge B runs only where it can change a counted verdict (judge A abstains, or A says
    different where the reward paid)."""
    from rewardlab.rewards import math_reward, score_batch

    reward = reward or math_reward
    say = progress or (lambda _m: None)
    rep = Report(pairs=len(pairs))
    t0 = time.perf_counter()
    results = []
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        results += score_batch(reward, [p.pred for p in chunk], [p.gold for p in chunk], deadline=deadline)
        say(f"  reward: {len(results)}/{len(pairs)} scored ({time.perf_counter() - t0:.1f} s)")
    rep.timings["reward_s"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    strings = sorted({p.gold for p in pairs} | {p.pred for p in pairs})
    _READINGS.update(zip(strings, _parallel(_judge_a_strings, strings, workers, 500)))
    a_verdicts = {(p.gold, p.pred): judge_a(p.gold, p.pred) for p in pairs}
    rep.timings["oracle_a_s"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    need = sorted({(p.gold, p.pred) for p, r in zip(pairs, results)
                   if a_verdicts[(p.gold, p.pred)][0] == "abstain"
                   or (a_verdicts[(p.gold, p.pred)][0] == "different" and r.score == 1.0)})
    b = dict(zip(need, _parallel(_judge_b_pairs, need, workers, 100)))
    rep.oracle_b_calls = len(need)
    rep.timings["oracle_b_s"] = time.perf_counter() - t2

    for p, r in zip(pairs, results):
        s = rep.families.setdefault(p.family, FamilyStats())
        s.tried += 1
        a = a_verdicts[(p.gold, p.pred)]
        v = verdict(a, b.get((p.gold, p.pred)))
        row = {"gold": p.gold, "pred": p.pred, "family": p.family, "variant": p.variant, "source": p.source,
               "score": r.score, "oracle": v, "judge_a": a[0], "why": a[1],
               "info": {k: r.info.get(k) for k in ("status", "rule", "pred", "pred_parsed", "gold_parsed", "extraction")
                        if r.info.get(k) is not None}}
        if v == "contested":
            s.contested += 1
            if r.score == 1.0:
                rep.contested.append(row)
            continue
        if v == "undecided":
            s.undecided += 1
            continue
        if r.score is None:
            s.undecided += 1
            continue
        s.decided += 1
        if v == "equal":
            s.equal += 1
            if r.score != 1.0:
                s.fn += 1
                if a[0] == "abstain":
                    s.fn_mv += 1
                    row["by"] = "math-verify only"
                rep.fn.append(row)
        else:
            s.different += 1
            if r.score == 1.0:
                s.fp += 1
                rep.fp.append(row)
    rep.timings["total_s"] = time.perf_counter() - t0
    return rep


def summary(rep: Report) -> dict:
    return {"pairs": rep.pairs, "families": {k: vars(v) for k, v in sorted(rep.families.items())},
            "total": vars(rep.total()), "timings_s": {k: round(v, 2) for k, v in rep.timings.items()},
            "oracle_b_calls": rep.oracle_b_calls, "fp": rep.fp, "fn_count": len(rep.fn), "contested": rep.contested}


def family_table(families: Iterable[str] | None = None) -> str:
    """One line per family: its name and what it does (the first line of its docstring)."""
    return "\n".join(f"  {name:18s} {(FAMILIES[name].__doc__ or '').strip().splitlines()[0]}"
                     for name in (families or FAMILIES))

