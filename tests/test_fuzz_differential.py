"""Differential fuzzing of the math reward: perturbed golds, an independent oracle, no false positive.

``bench/fuzz_diff.py`` perturbs real golds (GSM8K, MATH-500, the public corpus; the
built-in golds when no data folder is present) with named families and judges each pair with the
reward (``score_batch(math_reward, ...)``) and with an oracle that never imports rewardlab's comparator
(its own reader with exact rationals and sympy/mpmath at 50 digits, plus math-verify). A pair the
reward pays and the oracle calls different is a false positive (FP).

1. a bounded run (3,000 pairs, seed 0) must find no FP;
2. the regression table: every FP a differential run found, as (gold, pred, expected verdict, why);
   each row checks the oracle's verdict and the reward's score;
3. the oracle itself: verdicts on hand-made pairs, and its independence from rewardlab (by its imports).

The long run: ``REWARDLAB_DATA_DIR=../shared/data .venv/bin/python bench/fuzz_rewards.py --differential``
(100,000 pairs in about four minutes on two cores).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from rewardlab.rewards import math_reward, score_batch
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fuzz_diff  # noqa: E402  (bench/fuzz_diff.py: test machinery, not part of the reward)
from fuzz_diff import FAMILIES, load_golds, make_pairs, oracle, run_differential  # noqa: E402

PAIRS = 3000


@pytest.fixture(scope="module")
def report():
    pairs = make_pairs(load_golds(), PAIRS, seed=0)
    return run_differential(pairs, workers=1)


def _rows(rows: list[dict]) -> str:
    return "\n".join(f"  [{r['family']}/{r['variant']}] gold={r['gold']!r} pred={r['pred']!r} info={r['info']}"
                     for r in rows)


def test_bounded_differential_run_finds_no_false_positive(report) -> None:
    assert not report.fp, (f"{len(report.fp)} false positives (the reward paid, the oracle says different):\n"
                           + _rows(report.fp))


def test_the_run_is_not_vacuous(report) -> None:
    total = report.total()
    assert total.tried == PAIRS
    assert total.decided >= 0.75 * PAIRS, report.table()
    assert total.equal >= 0.2 * PAIRS and total.different >= 0.4 * PAIRS, report.table()
    assert set(report.families) == set(FAMILIES), "every family produced pairs"


# ---------------------------------------------------------------------------- 2. regression rows

# (gold, pred, oracle verdict, why). Every false positive a differential run found goes here, one
# minimal row per cause; the reward must not pay any "different" row. Found by
# `bench/fuzz_rewards.py --differential --pairs 100000 --seed 0` unless said otherwise.
REGRESSIONS = [
    # reported by the outside grammar fuzzer (issue 22)
    ("500", "0,500", "different", "a decimal comma: 0.5 (or the pair 0, 500), never 500"),
    ("1000", "01,000", "different", "a leading-zero group is no thousands separator: 1.0 in a decimal-comma locale"),
    ("4", " 3\ufffdqI 4(Ganswer\ufffd00\ufffd\ufffd", "different",
     "random-model junk offering 3, 4 and 00 states no answer"),
    # scale words are dropped as if they were units
    ("5", "5 thousand", "different", "'thousand' multiplies: 5000, not a unit word to drop"),
    ("12", "12 dozen", "different", "12 dozen is 144"),
    ("2", "2 million", "different", "2 million is 2,000,000"),
    ("\\frac{5}{3}", "\\frac{5}{3} billion", "different", "a scale word after a fraction, same cause"),
    # a number the text says is wrong is paid (last-number fallback, answer phrase)
    ("1125", "I think 1125 is incorrect.", "different",
     "the completion rejects 1125; the fallback takes its last number"),
    ("9", "Not $9$.", "different", "'Not 9.' is no answer of 9"),
    ("$n=2, 3, 4$", "The answer is not $n=2, 3, 4$.", "different", "'not n' is read as the name of the left-hand side"),
    # whitespace inside digits is dropped by the string rule
    ("2800", "280 0", "different", "'280 0' is two numbers, not a thousands grouping (1-digit group)"),
    ("1128", "11 28", "different", "two numbers separated by a space, not 1128"),
    # juxtaposed numbers are multiplied
    ("2", "1 2", "different", "two numbers side by side: not the product 1*2"),
    ("0", "-1 0", "different", "-1 and 0 offered together; the product is 0"),
    ("14400", "14400 1!", "different", "14400 then 1!: not the product"),
    ("2/3", "1 2/3", "different", "a mixed number (5/3) or two answers, not 1*(2/3)"),
    ("530", "530 1 ", "different", "junk digit after the answer: 530*1"),
    # math-verify (slow path) drops subscripts: impossible base numerals are paid as their digits
    ("204_5", "204_1", "different", "there is no base 1; 204_5 is 54"),
    ("52_8", "52_88", "different", "there is no base 88; 52_8 is 42"),
    ("230", "230_0 ", "different", "base 0 is no base"),
    # junk around the right value, with another number in it
    ("\\frac{13}{6}", "\\frac{13}{6}  7\\", "different", "13/6 and then 7: two candidates"),
    ("\\frac{13}{18}", "\\frac{13}{18}$12\\", "different", "13/18 and 12 across a '$' (normalize drops the '$')"),
    ("600", "600|1|", "different", "600 and |1|: math-verify multiplies them"),
    ("16 \\sqrt{3}", "16 \\sqrt{3}:1 ", "different", "a ratio x:1 is not the value x"),
    ("10\\%", "10\\% 0!", "different", "10% then 0!: side by side across a percent sign"),
    # sub-words glued to symbols, with hardly a word of prose: the last number of junk is no answer
    ("3360", "answer{xZ 1 )ing 3360", "different", "glued sub-words (answer{, )ing, xZ), two numbers"),
    ("4800", "ANS$ising 3 answer   4800", "different", "ANS$ising: a sub-word glued to '$'"),
    ("595", "( éanswer 0 answer= 595", "different", "'answer=' inside junk is no answer phrase"),
    ("1", " 1ĠANS 1ĠThe)_00▁the(G", "different", "tokenizer artefacts with digit runs 1 and 00"),
    ("-\\frac{2}{3}", "éxANSanswer 1 ing: -\\frac{2}{3}", "different",
     "words around two values: math-verify picks one"),
    ("440", " 3ingANS 440_ANSqI1ingx", "different", "digits glued to sub-words (3ing, qI1)"),
    ("160", "\\#\\= 00 é= 160", "different", "an accented letter glued to '='"),
    ("842", "é(x{ 3 == 842", "different", "a bare line whose brackets never close"),
    # a chain of equalities between different numbers, not headed by a variable
    ("2928", ":_Z= 3   = 2928", "different", "'3 = 2928' is no derivation"),
    ("34", "inganswer  = 1 =  34", "different", "'1 = 34' is no derivation"),
    # negation that the last-number fallback ignored
    ("36^\\circ", "I think 36^\\circ is incorrect.", "different", "a unit between the number and 'is incorrect'"),
    ("\\$18.90", "It is not \\$18.90, it is \\$18.900.", "different",
     "denies the value it then asserts (18.90 = 18.900)"),
    ("52_8", "It is not 52_8, it is 42_8.", "different",
     "the last number is the base numeral 42_8 (34), never its digits 42"),
    ("6,600", "The answer is not 6,600.", "different",
     "'answer is not N': the phrase is negated, never the fallback's last number"),
    # found by --pairs 100000 --seed 2
    ("\\frac{\\sqrt{21}}{5}", " | | 1 || \\frac{\\sqrt{21}}{5}", "different",
     "1 and the fraction across bars: not |1| times it"),
    ("420", "ingis:  2 =  420", "different",
     "an equation whose left side is junk with a number: math-verify compared its right side"),
    ("-9", "-9_00  ", "different", "a signed numeral with base 00: no base, never -9"),
    ("15\\mbox{ cm}^2", "15\\mbox{ cm}^2 is wrong, the answer is 15\\mbox{ cm}^4.", "different",
     "cm^4 is not cm^2: both units dropped"),
    # found by --pairs 100000 --seed 3
    ("y = 2x + 3", "={$) 12 |: y = 2x + 3", "different",
     "a bare line whose braces do not pair: math-verify took the equation"),
    ("11,800", "is\u200b = 1 !  11,800", "different", "1! and 11,800 side by side: not the product"),
    ("6000", "ANSé$ab 00 $ab 6000", "different", "no word of prose: the last number of junk"),
    ("624", "ab ANS: 0 (is 624", "different", "no word of prose: the last number of junk"),
    # found by --pairs 100000 --seed 4
    ("68000", "68000_10ing", "different", "a digit subscript that is no base numeral"),
    ("6r^2-4r-24", "6r^2-4r-24_9  ", "different", "math-verify drops the subscript 9"),
    ("\\frac{1}{16}", "\\frac{1}{16}_00\\", "different", "a fraction subscripted 00"),
    # found by --pairs 100000 --seed 5
    ("0", "0qI1:", "different", "letters glued to digits: not the product 0*q*I*1"),
    ("0", "0is1is", "different", "same: sub-words between digits"),
    ("\\frac{5}{13}", "\\frac{5}{13}x1\\", "different", "a dangling backslash: cut junk, math-verify read 5/13"),
    ("255", "|={\u200b 1 }  255", "different", "1 and 255 side by side across a brace"),
    ("78", "=)\\ab 9 (= 78", "different", "a bare line that opens with a closing bracket"),
    # found by --pairs 100000 --seed 6
    ("86", "answer  :\u200b 7  = 86", "different", "'7 = 86' is a false equation, not a derivation ending in 86"),
    ("570", "!ab  answer 3 answer 570", "different", "two bare 'answer N' with different N: no single answer"),
    ("11\\sqrt2", "answeranswer$11\\sqrt2qIis  ", "different", "'qIis' is sub-word junk, not a unit to drop"),
    # found by --pairs 100000 --seeds 7, 8 and 9
    ("15,620", "15,620_10:", "different", "a thousands separator inside a base numeral: no numeral"),
    ("232", "ing   ab 9 (GZ 232", "different", "fewer than 3 plain words around two numbers: junk, not prose"),
    ("1125", "answer  ing\u200b 0  ab 1125", "different", "same, with a zero-width space"),
    ("168000", "answer\u00e9(is 12 Zanswer 168000", "different", "same, sub-words glued to an accent and a bracket"),
    ("204_5", "=:\\\\ 9 #= 204_5", "different", "a lone '#' and '=:' in a bare line: junk, math-verify read 204"),
    ("41", "=#\\  12 _= 41", "different", "a subscripted '=': junk, math-verify read 41"),
    ("0", "0Z2:", "different", "a capital letter between digits: not the product 0*Z*2"),
    # found by --pairs 100000 --seed 5 (issue 40; both predate it, on main too)
    ("\\frac{13}{15}", "answer  inganswer 12 =ab \\frac{13}{15}", "different",
     "'inganswer': sub-words glued to 'answer', fewer than 3 plain words around two numbers: junk"),
    ("15\\mbox{ cm}^2", "15\\mbox{ cm}^2 is wrong, the answer is 15\\mbox{ cm}^1.", "different",
     "cm^1 is not cm^2: the unit's power was dropped from both sides before they were compared"),
]


@pytest.mark.parametrize("gold,pred,expected,why", REGRESSIONS, ids=[r[3][:60] for r in REGRESSIONS])
def test_regression_rows(gold: str, pred: str, expected: str, why: str) -> None:
    assert oracle(gold, pred) == expected, "the oracle's verdict changed"
    r = score_batch(math_reward, [pred], [gold], deadline=1.0)[0]
    want = 1.0 if expected == "equal" else 0.0
    assert r.score == want, f"{why}: scored {r.score}, info {r.info}"


# ---------------------------------------------------------------------------- 3. the oracle

ORACLE_CASES = [
    ("500", "0,500", "different"), ("0.5", "0,5", "undecided"), ("1000", "1,000", "equal"),
    ("1000", "1.000", "undecided"),
    ("1000", "1 000", "equal"), ("1000", "1'000", "equal"), ("1000", "1\\,000", "equal"),
    ("12345678", "12.345.678", "equal"),
    ("5000", "5 thousand", "equal"), ("50", "5%", "different"), ("0.5", "50%", "undecided"), ("7", "007", "equal"),
    ("\\frac{3}{4}", "\\dfrac34", "equal"), ("\\frac{3}{4}", "0.75", "equal"),
    ("\\frac{3}{4}", "\\frac{4}{3}", "different"),
    ("\\frac{\\sqrt{21}}{5}", "\\sqrt{21}/5", "equal"), ("x^2+7x+10", "(x+2)(x+5)", "equal"),
    ("p - q", "q - p", "different"),
    ("(6,31,-1)", "(6, 31, 1)", "different"), ("[0, \\infty)", "[0,\\infty)", "equal"),
    ("5", "The answer is not 5.", "different"),
    ("5", "The answer is 5.", "equal"), ("\\frac{1}{3}", "0.333333", "undecided"),
    ("2\\frac{1}{2}", "2.5", "undecided"),
    ("\\sqrt{2}", "2^{1/2}", "equal"), ("54", "204_5", "equal"), ("4", "4 or 5", "different"), ("5", "５", "equal"),
]


@pytest.mark.parametrize("gold,pred,expected", ORACLE_CASES)
def test_oracle_verdicts(gold: str, pred: str, expected: str) -> None:
    assert oracle(gold, pred) == expected


def test_the_oracle_is_bounded_on_hostile_values() -> None:
    for s in ("1e99999999", "10^{10^{10}}", "2^{100000}", "99999!", "\\binom{10^9}{5}"):
        assert fuzz_diff.read(s)[0] in ("abstain", "no_answer", "values")  # returns at all, quickly


def test_the_oracle_does_not_import_rewardlab() -> None:
    """Only run_differential (which runs the reward under test) may import rewardlab."""
    tree = ast.parse(Path(fuzz_diff.__file__).read_text())
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.Import, ast.ImportFrom)):
            names = [fn.module or ""] if isinstance(fn, ast.ImportFrom) else [a.name for a in fn.names]
            assert not any(n.startswith("rewardlab") for n in names) or _inside(tree, fn,
                                                                                "run_differential"), ast.dump(fn)


def _inside(tree: ast.AST, node: ast.AST, name: str) -> bool:
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == name and any(n is node for n in ast.walk(fn)):
            return True
    return False


def test_every_family_is_a_named_small_function_with_a_docstring() -> None:
    import random

    for name, fn in FAMILIES.items():
        assert fn.__doc__, name
        pred, variant = fn("1200", random.Random(0))
        assert pred is None or isinstance(pred, str)
