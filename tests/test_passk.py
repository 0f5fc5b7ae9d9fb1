"""pass@k and eval statistics against hand values, brute-force enumeration and published worked examples.

References: Chen et al. (2021) eq. 1 and its numpy estimator; Newcombe (1998a) Wilson examples;
Newcombe (1998b) paired method 10 (formula, with statsmodels Wilson limits as an independent
building block); Fagerland, Lydersen & Laake (2017) worked paired example; the README's own
HumanEval comparison. Mutation score: ``bench/mutation.py passk``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from fractions import Fraction

import numpy as np
import pytest

from rewardlab.eval import passk

Z95 = passk.Z95
newcombe_paired_interval = passk.newcombe_paired_interval
paired_difference = passk.paired_difference
pass_at_k = passk.pass_at_k
sign_test_p = passk.sign_test_p
summarize = passk.summarize
wilson_interval = passk.wilson_interval


@pytest.mark.parametrize(
    "n,c,k,expected",
    [
        (5, 2, 1, 2 / 5),  # pass@1 is the fraction correct
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5) = 11/12
        (3, 1, 2, 1 - 1 / 3),  # 1 - C(2,2)/C(3,2)
        (200, 1, 100, 0.5),  # 1 - C(199,100)/C(200,100) = 1 - 100/200
        (4, 0, 2, 0.0),  # nothing correct
        (4, 3, 2, 1.0),  # n - c < k: every k-subset holds a correct sample
        (1, 1, 1, 1.0),  # greedy, right
        (1, 0, 1, 0.0),  # greedy, wrong
        (20, 20, 10, 1.0),  # all correct
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_equals_subset_enumeration():
    # pass@k = P(a uniformly random k-subset of the n samples holds at least one correct one).
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                hit = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(hit, abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n,c,k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_summarize_binary_uses_wilson():
    s = summarize([1.0, 0.0, 1.0, 1.0])
    assert s.value == pytest.approx(0.75)
    assert s.stderr == pytest.approx(0.25)  # sd(ddof=1) = 0.5, / sqrt(4)
    assert s.ci_method == "wilson"
    assert (s.ci_low, s.ci_high) == pytest.approx((0.3006, 0.9544), abs=1e-4)  # Wilson 3/4 table value


def test_summarize_zero_of_fifty_has_an_honest_upper_bound():
    s = summarize([0.0] * 50)
    assert s.value == 0.0 and s.stderr == 0.0
    assert s.ci_low == 0.0
    assert s.ci_high == pytest.approx(3.8415 / 53.8415, abs=1e-4)  # z^2 / (n + z^2) ~ 7.1%


def test_summarize_fractional_uses_normal():
    s = summarize([0.5, 0.25, 0.75])
    assert s.ci_method == "normal"
    assert s.value == pytest.approx(0.5)
    assert s.stderr == pytest.approx(0.25 / math.sqrt(3))
    assert s.ci_low == pytest.approx(0.5 - 1.959964 * 0.25 / math.sqrt(3), abs=1e-6)


def test_wilson_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(1 - 3.8415 / 13.8415, abs=1e-4)


def test_paired_difference_hand_values():
    a = [0, 0, 1, 1, 0]
    b = [1, 0, 1, 0, 1]
    d = paired_difference(a, b)
    assert d.a == pytest.approx(0.4) and d.b == pytest.approx(0.6)
    assert d.delta == pytest.approx(0.2)
    assert d.stderr == pytest.approx(math.sqrt(0.7) / math.sqrt(5))  # diffs 1,0,0,-1,1: var 2.8/4
    # Newcombe method 10 by hand: Wilson(3/5) = [0.2307, 0.8824], Wilson(2/5) = [0.1176, 0.7693],
    # phi = (1*1 - 2*1) / sqrt(3*2*2*3) = -1/6 -> [0.2 - 0.5641, 0.2 + 0.4313]
    assert d.ci_method == "newcombe"
    assert (d.ci_low, d.ci_high) == pytest.approx((-0.3641, 0.6313), abs=1e-3)
    assert (d.improved, d.regressed) == (2, 1)
    assert d.p_value == pytest.approx(1.0)  # 2 * (C(3,0)+C(3,1)) / 8 = 1


def test_paired_difference_identical_runs_keep_an_honest_interval():
    d = paired_difference([0] * 16, [0] * 16)
    assert d.delta == 0 and d.stderr == 0 and d.p_value == 1.0
    w = 3.8415 / (16 + 3.8415)  # the Wilson upper bound of 0/16 on each side
    assert (d.ci_low, d.ci_high) == pytest.approx((-w, w), abs=1e-4)


def test_paired_difference_fractional_uses_normal():
    d = paired_difference([0.5, 0.25, 0.0], [0.75, 0.25, 0.5])
    assert d.ci_method == "normal"
    assert d.delta == pytest.approx(0.25)
    se = math.sqrt(((0.0) ** 2 + 0.25**2 + 0.25**2) / 2) / math.sqrt(3)  # diffs .25, 0, .5
    assert d.stderr == pytest.approx(se)
    assert d.ci_low == pytest.approx(0.25 - 1.959964 * se, abs=1e-6)


def test_paired_difference_needs_equal_lengths():
    with pytest.raises(ValueError):
        paired_difference([1, 0], [1])


@pytest.mark.parametrize(
    "improved,regressed,p",
    [
        (5, 0, 2 / 32),  # all five discordant problems improved
        (0, 0, 1.0),  # no discordant problem
        (3, 1, 2 * (1 + 4) / 16),  # 2 * P(X <= 1), X ~ Bin(4, 1/2)
        (10, 10, 1.0),
    ],
)
def test_sign_test(improved, regressed, p):
    assert sign_test_p(improved, regressed) == pytest.approx(p)


# ----------------------------------------------------------------------------------------------
# Known answers from references outside this module. Each test below also kills mutants that
# survived the hand-value tests above (bench/mutation.py passk lists the survivors).
# ----------------------------------------------------------------------------------------------


def _comb_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Chen et al. (2021) eq. 1 with exact binomials: 1 - C(n-c, k) / C(n, k)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def _codex_numpy_pass_at_k(n: int, c: int, k: int) -> float:
    """The numerically stable estimator printed in Chen et al. (2021), Figure 3, verbatim in numpy."""
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@pytest.mark.parametrize("n", [1, 2, 5, 10, 20, 50, 100, 200])
def test_pass_at_k_equals_exact_binomials_and_the_codex_estimator(n):
    for c in sorted({0, 1, 2, n // 3, n // 2, n - 1, n} & set(range(n + 1))):
        for k in sorted({1, 2, 5, 10, 50, 100, n} & set(range(1, n + 1))):
            got = pass_at_k(n, c, k)
            assert got == pytest.approx(float(_comb_pass_at_k(n, c, k)), rel=1e-12, abs=1e-15), (n, c, k)
            assert got == pytest.approx(_codex_numpy_pass_at_k(n, c, k), rel=1e-12, abs=1e-15), (n, c, k)


def test_pass_at_k_is_exactly_one_when_every_k_subset_has_a_correct_sample():
    # the early return; without it the product still reaches exactly 0 (the factor i = k is 1 - k/k)
    assert pass_at_k(10, 9, 2) == 1.0 and pass_at_k(10, 10, 10) == 1.0 and pass_at_k(5, 1, 5) == 1.0


def test_pass_at_k_error_messages_name_the_arguments():
    with pytest.raises(ValueError, match=r"0 <= c <= n, got n=5, c=6"):
        pass_at_k(5, 6, 1)
    with pytest.raises(ValueError, match=r"1 <= k <= n, got k=7, n=5"):
        pass_at_k(5, 2, 7)


# Newcombe RG (1998), "Two-sided confidence intervals for the single proportion: comparison of seven
# methods", Statistics in Medicine 17:857-872, Table II, method 3 (Wilson score, no continuity
# correction), 95%: the paper's worked examples, to its 4 decimals.
NEWCOMBE_1998_WILSON = [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0000, 0.1611),
    (1, 29, 0.0061, 0.1718),
]


@pytest.mark.parametrize("x,n,lo,hi", NEWCOMBE_1998_WILSON)
def test_wilson_matches_newcombe_1998_worked_examples(x, n, lo, hi):
    got = wilson_interval(x, n)
    assert (round(got[0], 4), round(got[1], 4)) == (lo, hi)


def test_wilson_equals_statsmodels_for_every_count_and_two_levels():
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    norm = pytest.importorskip("scipy.stats").norm
    for alpha in (0.05, 0.01):
        z = float(norm.ppf(1 - alpha / 2))
        for n in (1, 2, 3, 7, 29, 50, 164):
            lo, hi = proportion.proportion_confint(np.arange(n + 1), n, alpha=alpha, method="wilson")
            for x in range(n + 1):
                got = wilson_interval(x, n) if alpha == 0.05 else wilson_interval(x, n, z)
                assert got == pytest.approx((lo[x], hi[x]), abs=1e-12), (x, n, alpha)
    assert Z95 == pytest.approx(float(norm.ppf(0.975)), abs=1e-15)


def test_wilson_one_trial_and_exact_ends():
    w = Z95**2 / (1 + Z95**2)  # 0/1: [0, z^2 / (1 + z^2)]
    assert wilson_interval(0, 1) == (0.0, pytest.approx(w, abs=1e-12))
    assert wilson_interval(1, 1) == (pytest.approx(1 - w, abs=1e-12), 1.0)
    assert wilson_interval(0, -3) == (0.0, 1.0)


def _newcombe_reference(a: int, b: int, c: int, d: int, alpha: float = 0.05, cc: bool = True) -> tuple[float, float]:
    """Newcombe (1998b) method 10 from its published formula, with statsmodels' Wilson limits.

    Newcombe RG (1998), "Improved confidence intervals for the difference between binomial proportions
    based on paired data", Statistics in Medicine 17:2635-2650: a = both succeed, b = first only,
    c = second only, d = neither; theta = (b - c) / n; phi = (ad - bc) / sqrt(efgh), with ad - bc
    replaced by max(ad - bc - n/2, 0) when positive, and phi = 0 when any margin is 0.
    """
    from statsmodels.stats.proportion import proportion_confint

    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = proportion_confint(a + b, n, alpha=alpha, method="wilson")
    l2, u2 = proportion_confint(a + c, n, alpha=alpha, method="wilson")
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    num = a * d - b * c
    if cc and num > 0:
        num = max(num - n / 2, 0.0)
    phi = num / math.sqrt(margins) if margins else 0.0
    theta = p1 - p2
    lo = theta - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    hi = theta + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return lo, hi


def _pairs(both: int, first_only: int, second_only: int, neither: int) -> tuple[list[int], list[int]]:
    """(a, b) run scores for paired_difference(a, b), which reports b - a: b is Newcombe's first."""
    b = [1] * both + [1] * first_only + [0] * second_only + [0] * neither
    a = [1] * both + [0] * first_only + [1] * second_only + [0] * neither
    return a, b


def test_newcombe_matches_fagerland_lydersen_laake_worked_example():
    # Fagerland MW, Lydersen S, Laake P (2017), "Statistical Analysis of Contingency Tables", ch. 8:
    # complete response before/after consolidation therapy (Cavo et al. 2012), [[59, 6], [16, 80]];
    # the Newcombe square-and-add interval printed there is -0.0621 (95% CI -0.1186 to -0.0046).
    # ad - bc > n/2 here, so the continuity correction on phi moves both limits (without it:
    # -0.1174 to -0.0059).
    a, b = _pairs(59, 6, 16, 80)
    d = paired_difference(a, b)
    assert d.ci_method == "newcombe"
    assert round(d.delta, 4) == -0.0621
    assert (round(d.ci_low, 4), round(d.ci_high, 4)) == (-0.1186, -0.0046)


def test_newcombe_reproduces_the_readme_humaneval_comparison():
    # README, "Before/after training": humaneval (164), A 6.1% (10/164), B 4.3% (7/164), improved 2,
    # regressed 5, B-A -1.8 [-5.9, +1.9], sign-test p 0.45. Without the continuity correction on phi
    # the interval would read [-5.8, +1.7].
    a, b = _pairs(5, 2, 5, 152)
    d = paired_difference(a, b)
    assert (round(100 * d.a, 1), round(100 * d.b, 1), round(100 * d.delta, 1)) == (6.1, 4.3, -1.8)
    assert (round(100 * d.ci_low, 1), round(100 * d.ci_high, 1)) == (-5.9, 1.9)
    assert (d.improved, d.regressed, round(d.p_value, 2)) == (2, 5, 0.45)
    # and the gsm8k / math500 rows: 1/50 -> 0/50, -2.0 [-10.5, +5.3], 0/1, p 1.00
    d = paired_difference([1] + [0] * 49, [0] * 50)
    assert (round(100 * d.ci_low, 1), round(100 * d.ci_high, 1), d.improved, d.regressed, d.p_value) == (
        -10.5, 5.3, 0, 1, 1.0)


def test_newcombe_equals_the_published_formula_on_every_small_table():
    pytest.importorskip("statsmodels")
    for n in range(1, 11):
        for both in range(n + 1):
            for first in range(n + 1 - both):
                for second in range(n + 1 - both - first):
                    neither = n - both - first - second
                    a, b = _pairs(both, first, second, neither)
                    got = newcombe_paired_interval(a, b)
                    ref = _newcombe_reference(both, first, second, neither)
                    assert got == pytest.approx(ref, abs=1e-12), (both, first, second, neither)


def test_newcombe_at_99_percent_uses_the_given_z():
    pytest.importorskip("statsmodels")
    z99 = 2.5758293035489004
    for table in [(59, 6, 16, 80), (5, 2, 5, 152), (3, 4, 1, 2), (0, 0, 3, 5)]:
        a, b = _pairs(*table)
        assert newcombe_paired_interval(a, b, z99) == pytest.approx(_newcombe_reference(*table, alpha=0.01), abs=1e-9)


def test_newcombe_margins_and_correlation_edge_cases():
    # ad - bc = 1 (<= n/2): the corrected phi is 0, the interval is the plain square-and-add one
    a, b = _pairs(2, 1, 1, 1)
    w_lo, w_hi = wilson_interval(3, 5)
    half = math.sqrt((0.6 - w_lo) ** 2 + (w_hi - 0.6) ** 2)
    assert newcombe_paired_interval(a, b) == pytest.approx((-half, half), abs=1e-12)
    # (0, 1, 1, 0): phi = -1 exactly, so the two half-widths add
    a, b = _pairs(0, 1, 1, 0)
    lo1, hi1 = wilson_interval(1, 2)
    assert newcombe_paired_interval(a, b) == pytest.approx((-(hi1 - lo1), hi1 - lo1), abs=1e-12)
    # a zero margin (no first-run success): phi = 0
    a, b = _pairs(0, 0, 3, 5)
    l2, u2 = wilson_interval(3, 8)
    _, u1 = wilson_interval(0, 8)
    assert newcombe_paired_interval(a, b) == pytest.approx(
        (-3 / 8 - (u2 - 3 / 8), -3 / 8 + math.sqrt(u1**2 + (3 / 8 - l2) ** 2)), abs=1e-12)


def test_paired_difference_empty_and_single_pair():
    d = paired_difference([], [])
    assert all(math.isnan(getattr(d, f)) for f in ("a", "b", "delta", "stderr", "ci_low", "ci_high"))
    assert (d.improved, d.regressed, d.p_value, d.n, d.ci_method) == (0, 0, 1.0, 0, "normal")
    d = paired_difference([0], [1])
    assert (d.a, d.b, d.delta, d.stderr, d.n, d.improved, d.regressed) == (0.0, 1.0, 1.0, 0.0, 1, 1, 0)
    assert d.ci_method == "newcombe" and d.p_value == 1.0
    assert (d.ci_low, d.ci_high) == pytest.approx(_newcombe_reference(0, 1, 0, 0), abs=1e-12)


def test_paired_difference_normal_interval_both_ends_and_counts():
    a, b = [0.5, 0.25, 0.0, 1.0], [0.75, 0.25, 0.5, 0.5]
    d = paired_difference(a, b)
    diffs = [0.25, 0.0, 0.5, -0.5]
    se = statistics.stdev(diffs) / math.sqrt(4)
    assert d.ci_method == "normal" and d.n == 4
    assert (d.ci_low, d.ci_high) == pytest.approx((0.0625 - Z95 * se, 0.0625 + Z95 * se), abs=1e-12)
    assert (d.improved, d.regressed) == (2, 1)
    assert d.to_dict() == {
        "a": 0.4375, "b": 0.5, "delta": 0.0625, "stderr": se, "ci_low": d.ci_low, "ci_high": d.ci_high,
        "improved": 2, "regressed": 1, "p_value": 1.0, "n": 4, "ci_method": "normal",
    }


def test_paired_difference_length_message():
    with pytest.raises(ValueError, match=r"equal lengths, got 2 and 1"):
        paired_difference([1, 0], [1])


def test_summarize_empty_single_and_two_values():
    s = summarize([])
    assert all(math.isnan(getattr(s, f)) for f in ("value", "stderr", "ci_low", "ci_high"))
    assert (s.ci_method, s.n) == ("none", 0)
    s = summarize([0.5])
    assert s.to_dict() == {"value": 0.5, "stderr": 0.0, "ci_low": 0.5, "ci_high": 0.5, "ci_method": "normal", "n": 1}
    s = summarize([1.0])
    assert (s.value, s.stderr, s.ci_method, s.n) == (1.0, 0.0, "wilson", 1)
    assert (s.ci_low, s.ci_high) == wilson_interval(1, 1)
    s = summarize([0.25, 0.75])  # two values: sd(ddof=1) = sqrt(0.125), not 0
    assert s.stderr == pytest.approx(math.sqrt(0.125) / math.sqrt(2), abs=1e-15)
    assert (s.ci_low, s.ci_high) == pytest.approx((0.5 - Z95 * s.stderr, 0.5 + Z95 * s.stderr), abs=1e-12)


def test_summarize_normal_interval_is_clamped_to_the_unit_range():
    s = summarize([1.0, 1.0, 0.5])
    se = statistics.stdev([1.0, 1.0, 0.5]) / math.sqrt(3)
    assert s.stderr == pytest.approx(se, abs=1e-15) and s.n == 3
    assert s.ci_high == 1.0 and s.ci_low == pytest.approx(2.5 / 3 - Z95 * se, abs=1e-12)
    s = summarize([0.0, 0.0, 0.5])
    assert s.ci_low == 0.0 and s.ci_high == pytest.approx(0.5 / 3 + Z95 * se, abs=1e-12)


def test_summarize_wilson_matches_statsmodels():
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    s = summarize([1.0] * 10 + [0.0] * 154)  # 10/164, the README's humaneval A row: 6.1% [3.3, 10.9]
    ref = proportion.proportion_confint(10, 164, method="wilson")
    assert (s.ci_low, s.ci_high) == pytest.approx(ref, abs=1e-12)
    assert (round(100 * s.value, 1), round(100 * s.ci_low, 1), round(100 * s.ci_high, 1)) == (6.1, 3.3, 10.9)
    assert s.n == 164 and s.ci_method == "wilson"


@pytest.mark.parametrize("improved,regressed", [(i, r) for i in range(9) for r in range(9)])
def test_sign_test_equals_scipy_binomtest(improved, regressed):
    stats = pytest.importorskip("scipy.stats")
    ref = 1.0 if improved + regressed == 0 else stats.binomtest(improved, improved + regressed, 0.5).pvalue
    assert sign_test_p(improved, regressed) == pytest.approx(ref, abs=1e-12)


# The per-record helpers (moved here from rewardlab.evaluate; skipped until that move is committed).
needs_records = pytest.mark.skipif(not hasattr(passk, "benchmark_metrics"), reason="record helpers not in passk yet")


@needs_records
def test_is_correct_only_for_a_full_score():
    assert passk.is_correct(1.0) and passk.is_correct(1.0 - 1e-10) and passk.is_correct(2.0)
    assert passk.is_correct(1.0 - 1e-9)  # the tolerance itself is included
    assert not passk.is_correct(None) and not passk.is_correct(0.999) and not passk.is_correct(1.0 - 2e-9)
    assert not passk.is_correct(0.0)


@needs_records
def test_problem_passk_and_benchmark_metrics():
    rec = {"scores": [1.0, 0.0, None, 1.0, 0.5]}  # 2 correct of 5 (None and 0.5 are wrong)
    assert passk.problem_passk(rec, [1, 2, 5]) == {
        "pass@1": pytest.approx(2 / 5), "pass@2": pytest.approx(1 - 3 / 10), "pass@5": 1.0}
    records = [rec, {"scores": [0.0] * 5}, {"scores": [1.0] * 5}]
    m = passk.benchmark_metrics(records, [1, 5])
    assert list(m) == ["pass@1", "pass@5"]
    assert m["pass@1"] == summarize([0.4, 0.0, 1.0]) and m["pass@1"].ci_method == "normal"
    assert m["pass@5"] == summarize([1.0, 0.0, 1.0]) and m["pass@5"].ci_method == "wilson"
    empty = passk.benchmark_metrics([], [1])["pass@1"]
    assert (empty.n, empty.ci_method) == (0, "none") and math.isnan(empty.value)
