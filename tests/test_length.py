"""Length rewards: DAPO overlong (formula and verl's reference numbers), cosine scaling, repetition."""

from __future__ import annotations

import json
import math
import pickle

import pytest

from conftest import shared_dir
from rewardlab.rewards import get_reward
from rewardlab.rewards.length import CosineLength, Overlong, RepetitionPenalty, token_count


def dapo_formula(n: int, max_len: int, cache_len: int, factor: float) -> float:
    """algorithms.md: penalty = min(-(n - (L_max - L_cache)) / L_cache * factor, 0)."""
    return min(-(n - (max_len - cache_len)) / cache_len * factor, 0.0)


@pytest.mark.parametrize("max_len,cache_len,factor", [(20, 8, 1.0), (16, 4, 0.5), (100, 100, 2.0), (10, 1, 1.0)])
def test_overlong_equals_formula(max_len, cache_len, factor):
    reward = Overlong(max_len, cache_len, factor=factor)
    for n in range(0, max_len + 5):
        got = reward("", None, completion_tokens=n).score
        assert got == pytest.approx(dapo_formula(n, max_len, cache_len, factor), abs=1e-12)
    # shape: 0 up to L_max - L_cache, -factor at L_max
    assert reward("", None, completion_tokens=max_len - cache_len).score == 0.0
    assert reward("", None, completion_tokens=max_len).score == pytest.approx(-factor)


def test_overlong_matches_verl_reference():
    shared = shared_dir()
    path = shared / "fixtures" / "verl_reference.json" if shared else None
    if path is None or not path.is_file():
        pytest.skip("../shared/fixtures/verl_reference.json not present")
    ref = json.loads(path.read_text())["dapo_overlong"]
    reward = Overlong(ref["max_resp_len(L_max)"], ref["overlong_buffer_len(L_cache)"], factor=ref["penalty_factor"])
    for n, want, total in zip(ref["response_lengths"], ref["overlong_reward"], ref["total_reward_per_seq"]):
        got = reward("", None, num_tokens=n).score
        assert got == pytest.approx(want, abs=1e-12)
        assert ref["task_score"] + got == pytest.approx(total, abs=1e-12)


def test_overlong_length_and_params_from_meta():
    r = Overlong()
    assert r("", None, completion_ids=list(range(16)), max_len=20, cache_len=8).score == pytest.approx(-0.5)
    assert r("", None, response_length=13, max_new_tokens=20, overlong_buffer_len=8).score == pytest.approx(-0.125)
    no_len = Overlong(20, 8)("some text", None)
    assert no_len.score is None and no_len.status == "no_length"  # never a silent 0
    no_cfg = r("", None, completion_tokens=3)
    assert no_cfg.score is None and no_cfg.status == "config_error"
    bad_cfg = r("", None, completion_tokens=3, max_len=4, cache_len=8)
    assert bad_cfg.status == "config_error"
    for max_len, cache_len in [(10, 0), (10, 11), (10, -1)]:
        with pytest.raises(ValueError):
            Overlong(max_len, cache_len)


def test_token_count_keys():
    assert token_count({"completion_tokens": 3}) == 3
    assert token_count({"num_tokens": "7"}) == 7
    assert token_count({"completion_ids": [1, 2]}) == 2
    assert token_count({}) is None
    assert token_count({"num_tokens": True}) is None  # a bool is not a length


def cosine(t: float, T: float, start: float, end: float) -> float:
    return end + 0.5 * (start - end) * (1 + math.cos(math.pi * t / T))


def test_cosine_length_shape():
    r = CosineLength(100, correct=(1.0, 0.5), wrong=(-1.0, 0.0), exceed=-2.0)
    right = [r("", None, completion_tokens=n, correct=True).score for n in (0, 25, 50, 75, 100)]
    wrong = [r("", None, completion_tokens=n, correct=False).score for n in (0, 25, 50, 75, 100)]
    assert right[0] == pytest.approx(1.0) and right[-1] == pytest.approx(0.5)
    assert wrong[0] == pytest.approx(-1.0) and wrong[-1] == pytest.approx(0.0)
    assert right == sorted(right, reverse=True)  # correct: shorter is better
    assert wrong == sorted(wrong)  # wrong: longer is better
    assert min(right) > max(wrong)  # any correct answer beats any wrong one
    assert right[1] == pytest.approx(cosine(25, 100, 1.0, 0.5))
    over = r("", None, completion_tokens=101, correct=True)
    assert over.score == -2.0 and over.info["reason"] == "exceed"


def test_cosine_length_correctness_sources():
    def exact(completion, reference, **meta):
        from rewardlab.rewards.base import RewardResult

        if reference is None:
            return RewardResult(None, {"status": "no_reference"})
        return RewardResult(float(completion.strip() == reference), {})

    wrapped = CosineLength(10, reward=exact)
    assert wrapped("4", "4", completion_tokens=0).score == pytest.approx(1.0)
    assert wrapped("5", "4", completion_tokens=0).score == pytest.approx(-1.0)
    skipped = wrapped("5", None, completion_tokens=0)
    assert skipped.score is None and skipped.status == "no_reference"  # propagates the inner status
    by_score = CosineLength(10)
    assert by_score("", None, completion_tokens=10, score=1.0).score == pytest.approx(0.5)
    assert by_score("", None, completion_tokens=10, score=0.0).score == pytest.approx(0.0)
    unknown = by_score("", None, completion_tokens=3)
    assert unknown.score is None and unknown.status == "no_correctness"
    assert by_score("", None, correct=True).status == "no_length"
    assert CosineLength()("", None, completion_tokens=3, correct=True).status == "config_error"
    assert CosineLength()("", None, completion_tokens=3, correct=True, max_len=6).score == pytest.approx(0.75)


def test_cosine_length_wraps_registry_name_and_pickles():
    r = CosineLength(8, reward="one_answer")
    assert r(r"\boxed{3}", None, completion_tokens=8).score == pytest.approx(0.5)
    assert r("no answer", None, completion_tokens=8).score == pytest.approx(0.0)
    clone = pickle.loads(pickle.dumps(r))
    assert clone(r"\boxed{3}", None, completion_tokens=4).score == r(r"\boxed{3}", None, completion_tokens=4).score


# (text, ngram, expected penalty)
REPETITION_ROWS = [
    ("", 3, 0.0),  # empty
    ("one two", 3, 0.0),  # shorter than one n-gram
    ("a b c d e f", 3, 0.0),  # no repeated trigram
    ("a b c a b c", 3, -(1 - 3 / 4)),  # abc, bca, cab, abc: one repeat among 4
    ("go go go go go", 1, -(1 - 1 / 5)),  # unigram spam
    ("Go go GO", 1, -(1 - 1 / 3)),  # case-insensitive
]


@pytest.mark.parametrize("text,ngram,want", REPETITION_ROWS)
def test_repetition_table(text, ngram, want):
    assert RepetitionPenalty(ngram)(text, None).score == pytest.approx(want)


def test_repetition_approaches_minus_weight():
    spam = " ".join(["the answer is 4"] * 200)
    score = RepetitionPenalty(3, weight=0.5)(spam, None).score
    assert -0.5 < score < -0.49
    with pytest.raises(ValueError):
        RepetitionPenalty(0)


@pytest.mark.parametrize("name", ["overlong", "cosine_length", "repetition"])
def test_registered_and_picklable(name):
    reward = get_reward(name)
    assert reward.name == name
    clone = pickle.loads(pickle.dumps(reward))
    meta = {"completion_tokens": 9, "max_len": 10, "cache_len": 4, "correct": True}
    assert clone("a b c a b c", None, **meta).to_dict() == reward("a b c a b c", None, **meta).to_dict()


def test_fast_paths():
    # cheap rewards decide on the caller's thread (pool.score_batch's first pass)
    assert Overlong(20, 8).fast("", None, completion_tokens=16).score == pytest.approx(-0.5)
    assert RepetitionPenalty(1).fast("a a", None).score == pytest.approx(-0.5)
    assert CosineLength(10).fast("", None, completion_tokens=0, correct=True).score == pytest.approx(1.0)
    wrapped = CosineLength(10, reward="one_answer")  # OneAnswer has a fast path: decided here too
    assert wrapped.fast(r"\boxed{1}", None, completion_tokens=10).score == pytest.approx(0.5)

    def no_fast(completion, reference, **meta):
        from rewardlab.rewards.base import RewardResult

        return RewardResult(1.0, {})

    assert CosineLength(10, reward=no_fast).fast("x", None, completion_tokens=1) is None
