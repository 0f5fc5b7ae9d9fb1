"""maj@k over equivalence classes, avg@n with its standard error, the solve-rate histogram: hand-worked cases."""

from __future__ import annotations

import math
import random

import pytest

from rewardlab.eval.graders import class_correctness, math_answer_classes
from rewardlab.eval.passk import (
    MAJ_EXACT_LIMIT,
    avg_at_n,
    benchmark_majk,
    maj_at_k,
    majority_correct,
    solve_rate_histogram,
)

RIGHT_WRONG = {0: True, 1: False}


@pytest.mark.parametrize("labels,k,expected", [
    # samples a a b (a right): k=1: 2 of 3 singletons right; k=2: {a,a} a; {a,b} tie -> first vote a;
    # {a,b} again a; so 3/3; k=3: a has 2 votes
    ([0, 0, 1], 1, 2 / 3), ([0, 0, 1], 2, 1.0), ([0, 0, 1], 3, 1.0),
    # a b b: k=2: {a,b} tie -> a (first) right, {a,b} right, {b,b} wrong -> 2/3; k=3: b wins
    ([0, 1, 1], 1, 1 / 3), ([0, 1, 1], 2, 2 / 3), ([0, 1, 1], 3, 0.0),
    # b a a b: k=2 subsets (01)(02)(03)(12)(13)(23): tie->b, tie->b, b, a, tie->a, tie->a = 3/6
    ([1, 0, 0, 1], 2, 0.5),
    # k=3 (012) a (013) b (023) b? (0:b,2:a,3:b) b -> wrong; (123) a,a,b -> a; so (012) a,(013) b,(023) b,(123) a = 2/4
    ([1, 0, 0, 1], 3, 0.5),
    # abstentions: - - a: k=1 1/3; k=2: (01) nobody voted -> wrong, (02) a, (12) a -> 2/3
    ([None, None, 0], 1, 1 / 3), ([None, None, 0], 2, 2 / 3), ([None, None, 0], 3, 1.0),
    # no correct class: 0
    ([1, 1, None], 2, 0.0),
])
def test_hand_worked_maj_at_k(labels, k, expected):
    value, method = maj_at_k(labels, RIGHT_WRONG, k)
    assert value == pytest.approx(expected)
    assert method == "exact"


def test_tie_rule_is_first_vote_in_sample_order():
    assert majority_correct([0, 1], RIGHT_WRONG) is True
    assert majority_correct([1, 0], RIGHT_WRONG) is False
    assert majority_correct([1, 0, 0, 1], RIGHT_WRONG) is False  # 2-2: b voted first
    assert majority_correct([1, 0, 0], RIGHT_WRONG) is True
    assert majority_correct([None, None], RIGHT_WRONG) is False


def test_tie_rule_matches_lm_evals_majority_vote_filter():
    sel = pytest.importorskip("lm_eval.filters.selection")
    rnd = random.Random(0)
    for _ in range(500):
        answers = [rnd.choice("abcd") for _ in range(rnd.randint(1, 9))]
        (lm_winner,) = list(sel.MajorityVoteFilter().apply([answers], [{}]))[0]  # one vote per doc, as a list
        order = list(dict.fromkeys(answers))
        labels = [order.index(a) for a in answers]
        assert majority_correct(labels, {i: a == lm_winner for i, a in enumerate(order)}), (answers, lm_winner)


def test_equivalent_answers_are_one_vote():
    # gold 1/2; three ways of writing it against "3" twice: by string, "3" would win 2 to 1
    answers = ["0.5", "\\frac12", "3", "1/2", "3"]
    (labels,) = math_answer_classes([answers])
    assert labels == [0, 0, 1, 0, 1]
    correct = [True, True, False, True, False]
    classes, mixed = class_correctness(labels, correct)
    assert classes == {0: True, 1: False} and mixed == 0
    assert maj_at_k(labels, classes, 5) == (1.0, "exact")
    string_labels = [list(dict.fromkeys(answers)).index(a) for a in answers]
    string_classes, _ = class_correctness(string_labels, correct)
    assert maj_at_k(string_labels, string_classes, 5)[0] == 0.0  # what a string vote would say
    # maj@3: subsets of 5 choose 3 = 10; the half class {0,1,3} has 3 members, "3" has {2,4}.
    # wrong exactly when both 3s are drawn: 3 subsets ({0,2,4}, {1,2,4}, {2,3,4}) -> 7/10
    assert maj_at_k(labels, classes, 3) == (pytest.approx(0.7), "exact")


def test_classes_by_union_find_and_abstentions():
    labels = math_answer_classes([["x^2+1", None, "1+x^2", "", "2", "2.0"], [None], []])
    assert labels == [[0, None, 0, None, 1, 1], [None], []]


def _hypergeom_tail(N: int, K: int, n: int, at_least: int) -> float:
    return sum(math.comb(K, x) * math.comb(N - K, n - x) for x in range(at_least, n + 1)) / math.comb(N, n)


def test_exact_enumeration_equals_the_hypergeometric_formula():
    # 4 wrong samples first, 8 right after: a 5-subset is right when it holds >= 3 right ones
    # (no tie is possible with two classes and k odd)
    labels = [1] * 4 + [0] * 8
    value, method = maj_at_k(labels, RIGHT_WRONG, 5)
    assert method == "exact" and math.comb(12, 5) <= MAJ_EXACT_LIMIT
    assert value == pytest.approx(_hypergeom_tail(12, 8, 5, 3))


def test_monte_carlo_when_enumeration_is_too_big_and_seeded():
    # 10 wrong samples first, then 20 right; maj@10 (C(30,10) = 30M subsets): a 5-5 tie goes to
    # the wrong class (its first vote is earlier), so right = P(>= 6 right of 10)
    labels = [1] * 10 + [0] * 20
    v1, m1 = maj_at_k(labels, RIGHT_WRONG, 10, seed=3, key="p1")
    v2, _ = maj_at_k(labels, RIGHT_WRONG, 10, seed=3, key="p1")
    v3, _ = maj_at_k(labels, RIGHT_WRONG, 10, seed=4, key="p1")
    assert m1 == "monte_carlo" and v1 == v2 and v1 != v3
    exact = _hypergeom_tail(30, 20, 10, 6)
    assert abs(v1 - exact) < 4 * math.sqrt(exact * (1 - exact) / 2000)


def test_benchmark_majk_reports_the_method():
    labels = [[0, 0, 1, 1], [1, 0, 0, 0]]
    classes = [RIGHT_WRONG, RIGHT_WRONG]
    out = benchmark_majk(labels, classes, [1, 2, 4, 8], ids=["a", "b"])
    assert set(out["metrics"]) == {"maj@1", "maj@2", "maj@4"}  # k=8 > n is skipped
    # problem a: maj@4: 2-2 tie -> class 0 first -> right; b: 0 has 3 -> right
    assert out["metrics"]["maj@4"].value == 1.0
    # maj@1 = mean correctness: a 2/4, b 3/4
    assert out["metrics"]["maj@1"].value == pytest.approx((0.5 + 0.75) / 2)
    # maj@2: a: (01)r (02)tie->0 r (03)r (12)tie->0 r (13)r (23) w -> 5/6;
    #        b: (01)(02)(03) tie -> 1 (first) w, (12)(13)(23) r -> 3/6
    assert out["metrics"]["maj@2"].value == pytest.approx((5 / 6 + 3 / 6) / 2)
    assert out["how"]["maj@2"]["method"] == "exact"
    assert "tie" in out["how"]["maj@2"]["tie_rule"]


def test_avg_at_n_and_its_stderr():
    records = [{"scores": [1.0, 0.0, 0.0, 1.0]}, {"scores": [1.0] * 4}, {"scores": [0.0, 0.0, None, 0.0]}]
    s = avg_at_n(records)
    assert s.value == pytest.approx(0.5)
    # per-problem means 0.5, 1, 0: sd (ddof=1) = 0.5, stderr = 0.5 / sqrt(3)
    assert s.stderr == pytest.approx(0.5 / math.sqrt(3))
    assert s.n == 3 and s.ci_method == "normal"


def test_solve_rate_histogram():
    records = [{"scores": [1.0, 0.0, 0.0, 1.0]}, {"scores": [1.0] * 4}, {"scores": [0.0] * 4},
               {"scores": [0.0, 1.0, 1.0, 1.0]}]
    assert solve_rate_histogram(records) == {"0/4": 1, "1/4": 0, "2/4": 1, "3/4": 1, "4/4": 1}
    assert (solve_rate_histogram([{"scores": [1.0]}, {"scores": [0.0, 1.0]}])
            == {"0/1": 0, "1/1": 1, "0/2": 0, "1/2": 1, "2/2": 0})


def test_mixed_classes_are_counted():
    classes, mixed = class_correctness([0, 0, 1, None], [True, False, False, True])
    assert classes == {0: True, 1: False} and mixed == 1
