"""pass@k and eval statistics against values computed by hand (and by brute-force enumeration)."""

from __future__ import annotations

import itertools
import math

import pytest

from rewardlab.passk import paired_difference, pass_at_k, sign_test_p, summarize, wilson_interval


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
