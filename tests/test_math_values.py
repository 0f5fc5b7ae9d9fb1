"""The math fast path's value comparison (``scalars_equal`` and friends in rewardlab.rewards.math.values).

What is tested is the comparison of already-evaluated values, built directly as ``Num`` objects so
that these tests do not depend on the LaTeX tokenizer; a few rows go through ``parse_scalar`` on
plain inputs (``0.333338``, ``\\frac{1}{3}``) to pin the behaviour a reader of the README sees.

The decimal-approximation rule: a decimal written with d >= 6 fractional digits equals an exact
value whose expansion does not terminate within d digits when they differ by at most one unit in
the d-th digit (10^-d). So 0.333333 and 0.333334 are paid for 1/3, 0.333338 is not, and 0.250001 is
never paid for 1/4 (which a 6-digit decimal can write exactly). Mutation score:
``bench/mutation.py math_values``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from rewardlab.rewards.math.bounded import ASTRONOMICAL, Huge, terminates_within
from rewardlab.rewards.math.bounded import huge as _huge
from rewardlab.rewards.math.values import (
    APPROX_MIN_DIGITS,
    Num,
    Poly,
    vals_equal,
    parse_scalar,
    scalars_equal,
)


def dec(text: str) -> Num:
    """A plain decimal literal as the parser records it: its exact value and its fractional digits."""
    digits = len(text.split(".", 1)[1]) if "." in text else None
    return Num(Poly.const(Fraction(text)), decimal_digits=digits)


def q(num: int, den: int = 1, *, percent: bool = False) -> Num:
    return Num(Poly.const(Fraction(num, den)), percent=percent)


def sqrt(m: int, coef: Fraction | int = 1) -> Num:
    return Num(Poly({((f"√{m}", 1),): Fraction(coef)}))


def opaque(desc: str, value: float) -> Num:
    return Num(Poly({((f"#{desc}:{complex(value)!r}", 1),): Fraction(1)}))


def sym(name: str) -> Num:
    return Num(Poly.sym(name))


def both_ways(a: Num, b: Num):
    """scalars_equal in both argument orders; they must agree."""
    ab, ba = scalars_equal(a, b), scalars_equal(b, a)
    assert ab is ba, (ab, ba)
    return ab


# ---------------------------------------------------------------------------------------- decimals


@pytest.mark.parametrize("text,exact,expected", [
    ("0.333333", Fraction(1, 3), True),  # truncated
    ("0.333334", Fraction(1, 3), True),  # rounded up past the true value: 6.7e-7 away
    ("0.333332", Fraction(1, 3), False),  # 1.33e-6 away: more than one unit in the 6th digit
    ("0.333338", Fraction(1, 3), False),  # 4.67e-6 away: a 5x looser tolerance would pay it
    ("0.333337", Fraction(1, 3), False),  # 3.67e-6 away
    ("0.33333", Fraction(1, 3), False),  # 5 digits: below APPROX_MIN_DIGITS, exact comparison only
    ("0.3333333333", Fraction(1, 3), True),  # 10 digits, 3.3e-11 away
    ("0.3333333343", Fraction(1, 3), False),  # 10 digits, 9.7e-10 away: the tolerance shrinks with d
    ("0.142857", Fraction(1, 7), True),
    ("0.142858", Fraction(1, 7), True),  # 8.6e-7 away
    ("0.142859", Fraction(1, 7), False),  # 1.86e-6 away
    ("0.666667", Fraction(2, 3), True),
    ("0.666666", Fraction(2, 3), True),
    ("-0.333333", Fraction(-1, 3), True),
    ("-0.333333", Fraction(1, 3), False),
    ("0.250001", Fraction(1, 4), False),  # 1/4 terminates within 6 digits: no approximation
    ("0.2500000", Fraction(1, 4), True),  # equal values, 7 digits
    ("0.1250001", Fraction(1, 8), False),  # 1/8 = 0.125 terminates within 7 digits
    ("0.0000001", Fraction(1, 10**7), True),  # exactly equal
    ("0.000001", Fraction(1, 3 * 10**6), True),  # 3.3e-7 vs 1e-6: within one unit, and 1/(3e6) repeats
])
def test_decimal_approximates_an_exact_non_terminating_value(text, exact, expected):
    assert both_ways(dec(text), Num(Poly.const(exact))) is expected


def test_the_decimal_rule_through_parse_scalar():
    third = parse_scalar("\\frac{1}{3}")
    assert parse_scalar("0.333338").decimal_digits == 6
    assert both_ways(parse_scalar("0.333338"), third) is False  # the review's loosened-tolerance mutant
    assert both_ways(parse_scalar("0.333334"), third) is True
    assert both_ways(parse_scalar("0.333333"), parse_scalar("1/3")) is True
    assert both_ways(parse_scalar("0.33333"), third) is False


def test_the_tolerance_is_exactly_one_unit_in_the_last_digit():
    third = Fraction(1, 3)
    for d in range(APPROX_MIN_DIGITS, 13):
        unit = Fraction(1, 10**d)
        below = Fraction(int(third * 10**d), 10**d)  # truncation: 0.333...3
        for k, expected in ((0, True), (1, True), (2, False), (5, False)):
            approx = below + k * unit  # k = 1 is within one unit (above the true value)
            text = f"{approx.numerator * 10**d // approx.denominator:0{d}d}"
            assert both_ways(dec("0." + text), Num(Poly.const(third))) is expected, (d, k)


def test_terminates_within():
    assert terminates_within(Fraction(1, 4), 2) and not terminates_within(Fraction(1, 4), 1)
    assert terminates_within(Fraction(1, 8), 3) and not terminates_within(Fraction(1, 8), 2)
    assert not terminates_within(Fraction(1, 3), 50)
    assert terminates_within(Fraction(7), 0) and terminates_within(Fraction(-3, 20), 2)


def test_two_decimals_compare_exactly():
    # both are decimals: neither is a non-terminating exact value, so only equal values are equal
    assert both_ways(dec("0.333333"), dec("0.333334")) is False
    assert both_ways(dec("0.500000"), dec("0.5")) is True
    assert both_ways(dec("2.000000"), q(2)) is True
    assert both_ways(q(1, 3), q(2, 6)) is True
    assert both_ways(q(1, 3), q(1, 4)) is False


# ---------------------------------------------------------------------------------------- percent


def test_percent_equals_its_number_and_its_fraction():
    assert both_ways(q(50, percent=True), dec("0.5")) is True  # 50% = 0.5
    assert both_ways(q(50, percent=True), q(50)) is True  # "50%" for a gold of 50
    assert both_ways(q(50, percent=True), dec("0.4")) is False
    assert both_ways(q(50, percent=True), q(50, percent=True)) is True
    assert both_ways(q(50, percent=True), q(1, 2, percent=True)) is False  # both percent: no rescaling
    # 33.3333% is 0.333333 after scaling, not a 6-digit decimal itself: no approximation of 1/3
    assert both_ways(Num(Poly.const(Fraction("33.3333")), percent=True, decimal_digits=4), q(1, 3)) is False


def test_percent_tries_the_number_then_the_fraction():
    close = Fraction(14142135623731, 10**13)  # sqrt(2) to 1e-14, written without decimal digits
    # c% vs sqrt(2): (unscaled c) or (c / 100); "undecided" and "unequal" combine as Python's `or`
    assert both_ways(Num(Poly.const(close * 100), percent=True), sqrt(2)) is None  # False or None
    assert both_ways(Num(Poly.const(close), percent=True), sqrt(2)) is False  # None or False
    # a percent decimal approximating sqrt(2) after scaling is paid (141.421356% = 1.41421356)
    assert both_ways(Num(Poly.const(Fraction("141.421356")), percent=True, decimal_digits=6), sqrt(2)) is True


# ---------------------------------------------------------------------------------------- radicals and opaque constants


@pytest.mark.parametrize("text,value,expected", [
    ("4.123106", sqrt(17), True),  # 3.7e-7 away
    ("4.123105", sqrt(17), True),  # 6.3e-7 away
    ("4.123104", sqrt(17), False),  # 1.6e-6 away
    ("4.123111", sqrt(17), False),  # 5.4e-6 away: a 5x looser tolerance would pay it
    ("1.414214", sqrt(2), True),
    ("1.41421", sqrt(2), False),  # 5 digits
    ("2.828427", sqrt(2, 2), True),
    ("0.841471", opaque("sin(1)", math.sin(1)), True),
    ("0.841475", opaque("sin(1)", math.sin(1)), False),
])
def test_decimal_approximates_a_radical_or_an_opaque_constant(text, value, expected):
    assert both_ways(dec(text), value) is expected


def test_radicals_compare_numerically_and_only_decide_unequal():
    six = sqrt(6)
    two_three = Num(Poly({(("√2", 1), ("√3", 1)): Fraction(1)}))
    assert both_ways(six, two_three) is None  # equal to 1e-9: undecided here (the slow path decides)
    assert both_ways(six, sqrt(7)) is False
    assert both_ways(six, q(2)) is False  # 2.449... vs 2
    assert both_ways(sqrt(2), sqrt(2)) is True  # same polynomial
    assert both_ways(opaque("x", 2.0), q(2)) is None  # within 1e-9 of 2
    assert both_ways(opaque("x", 2.0 + 1e-8), q(2)) is False  # 1e-8 relative: unequal
    assert both_ways(opaque("x", 1e6), opaque("y", 1e6 + 1e-4)) is None  # 1e-10 relative
    assert both_ways(opaque("x", 1e6), opaque("y", 1e6 + 1e-2)) is False  # 1e-8 relative
    # a radical next to a free symbol has no numeric value: undecided
    assert both_ways(Num(Poly.sym("x") + Poly({(("√2", 1),): Fraction(1)})), sym("y")) is None


def test_independent_symbols_are_unequal_as_polynomials():
    assert both_ways(sym("x"), sym("y")) is False
    assert both_ways(sym("x"), q(1)) is False
    assert both_ways(Num(Poly.sym("x") + Poly.sym("x")), Num(Poly.const(2) * Poly.sym("x"))) is True
    assert both_ways(dec("3.141593"), sym("pi")) is False  # pi is an independent symbol here


# ---------------------------------------------------------------------------------------- magnitudes


def test_huge_values_compare_by_magnitude_and_never_claim_equality():
    a, b = Num(_huge(1, 6000.0)), Num(_huge(1, 6000.0))
    assert both_ways(a, b) is None  # same magnitude: cannot say equal without the digits
    assert both_ways(a, Num(_huge(1, 6000.1))) is False
    assert both_ways(a, Num(_huge(1, 6000.0 * (1 + 2e-6)))) is False  # relative 2e-6 > 1e-6
    assert both_ways(a, Num(_huge(1, 6000.0 * (1 + 5e-7)))) is None  # relative 5e-7 <= 1e-6
    assert both_ways(a, Num(_huge(-1, 6000.0))) is False  # opposite signs
    assert both_ways(a, q(0)) is False  # zero has log10 -inf
    assert both_ways(Num(_huge(-1, 6000.0)), q(0)) is False  # zero counts as positive: signs differ
    assert both_ways(a, q(10**6)) is False  # log10 6 vs 6000
    assert both_ways(Num(_huge(1, 2.0)), q(100)) is None  # the same magnitude as an exact value
    assert both_ways(Num(_huge(1, 2.0)), q(-100)) is False
    assert both_ways(Num(_huge(1, 0.5)), q(3)) is False  # 0.5 vs log10(3) = 0.477
    assert both_ways(Num(_huge(1, 0.0)), q(1)) is None  # log10 0 vs log10 1: within the tolerance
    assert both_ways(a, sym("x")) is None  # a magnitude against a polynomial: undecided
    assert both_ways(Num(Huge(1, -math.inf)), q(0)) is None  # two zeros by magnitude: undecided


def test_astronomical_magnitudes():
    top = Num(_huge(1, 1e400))
    assert top.value.log10 == ASTRONOMICAL
    assert both_ways(top, Num(_huge(1, ASTRONOMICAL))) is None
    assert both_ways(top, Num(_huge(-1, ASTRONOMICAL))) is False


def test_true_infinities():
    inf, minus_inf = Num(Huge(1, math.inf)), Num(Huge(-1, math.inf))
    assert both_ways(inf, Num(Huge(1, math.inf))) is True
    assert both_ways(inf, minus_inf) is False
    assert both_ways(inf, Num(_huge(1, ASTRONOMICAL))) is False  # infinity is not a magnitude
    assert both_ways(inf, q(5)) is False
    assert both_ways(Num(Huge(1, math.inf), percent=True), inf) is None  # "inf%": undecided
    assert both_ways(Num(Huge(1, math.inf), literal="1"), inf) is None


# ---------------------------------------------------------------------------------------- literals too long to convert


def test_long_literals_compare_as_text():
    lit = Num(Poly.const(0), literal="1" * 2500)
    assert both_ways(lit, Num(Poly.const(0), literal="1" * 2500)) is True
    assert both_ways(lit, Num(Poly.const(0), literal="1" * 2499 + "2")) is False
    assert both_ways(lit, Num(Poly.const(0), percent=True, literal="1" * 2500)) is False
    assert both_ways(lit, q(7)) is False  # over 60 integer digits: no number written here is that long
    short_int = Num(Poly.const(0), literal="1" * 60 + "." + "0" * 2000)
    assert both_ways(short_int, q(7)) is None  # could be a long way of writing a short number
    assert both_ways(lit, sym("x")) is None
    assert both_ways(lit, Num(_huge(1, 2500.0))) is None


def test_long_literal_through_parse_scalar():
    big = parse_scalar("9" * 2500)
    assert big.literal == "9" * 2500
    assert both_ways(big, parse_scalar("-" + "0" + "9" * 2500)) is True  # sign and leading zeros dropped
    assert both_ways(big, parse_scalar("12")) is False


# ---------------------------------------------------------------------------------------- vals_equal directly


def test_vals_equal_scales_only_the_first_argument():
    assert vals_equal(q(50), dec("0.5"), Fraction(1, 100)) is True
    assert vals_equal(dec("0.5"), q(50), Fraction(1, 100)) is False
    assert vals_equal(q(50), q(50), Fraction(1)) is True


# ---------------------------------------------------------------------------------------- edges of each tolerance


def test_numeric_tolerances_at_their_edges():
    zero = q(0)
    assert both_ways(opaque("x", 1e-9), zero) is None  # |diff| = 1e-9 * max(1, ...): not above the tolerance
    assert both_ways(opaque("x", 1.5e-9), zero) is False
    assert both_ways(opaque("x", 1e-12), zero) is None  # the absolute floor of 1 applies near zero
    assert both_ways(dec("0.000001"), opaque("sin(0)", 0.0)) is True  # exactly one unit in the 6th digit
    # one side has no numeric value (a free symbol beside a radical): undecided, not an error
    assert both_ways(Num(Poly.sym("x") + Poly({(("√2", 1),): Fraction(1)})), sqrt(2)) is None
    # an upper-case letter is a free symbol like any other, compared as a polynomial
    assert both_ways(sym("X"), sym("Y")) is False


def test_magnitude_tolerances_at_their_edges():
    base = Num(_huge(1, 0.0))
    assert both_ways(base, Num(_huge(1, 1e-6))) is None  # |diff| = 1e-6 * max(1, ...): not above
    assert both_ways(base, Num(_huge(1, 1.5e-6))) is False
    assert both_ways(base, Num(_huge(1, 1e-7))) is None  # the absolute floor of 1 applies to small logs
    assert both_ways(q(-100), Num(_huge(-1, 2.0))) is None  # both negative: same sign, same magnitude
    assert both_ways(q(-100), Num(_huge(1, 2.0))) is False


def test_long_literal_integer_part_limit():
    other = q(7)
    assert both_ways(Num(Poly.const(0), literal="1" * 61 + "." + "0" * 2000), other) is False  # > 60 digits
    assert both_ways(Num(Poly.const(0), literal="1" * 60 + "." + "0" * 2000), other) is None
