"""Format rewards: regression tables (one commented row per case), configuration errors, registry."""

from __future__ import annotations

import pickle

import pytest

from rewardlab.rewards import get_reward
from rewardlab.rewards.format import OneAnswer, RegexReward, ThinkAnswerFormat, find_boxed, find_hash_answers

WELL = "<think>2 + 2 is 4</think>\n<answer>4</answer>"

# (completion, strict score, lenient score, reason under strict)
THINK_ANSWER_ROWS = [
    (WELL, 1.0, 1.0, "well_formed"),  # the canonical shape
    ("  \n" + WELL + "\n\n", 1.0, 1.0, "well_formed"),  # surrounding whitespace is fine
    ("<think>\nstep\n</think><answer>\n4\n</answer>", 1.0, 1.0, "well_formed"),  # newlines inside blocks
    ("Sure! " + WELL, 0.0, 1.0, "text_outside_tags"),  # chatter before: lenient only
    (WELL + " Hope this helps.", 0.0, 1.0, "text_outside_tags"),  # chatter after: lenient only
    ("<think>a</think> so <answer>4</answer>", 0.0, 1.0, "text_outside_tags"),  # text between the blocks
    ("<answer>4</answer><think>a</think>", 0.0, 0.0, "wrong_order"),  # answer before think
    ("<think>a</think>", 0.0, 0.0, "missing_tag"),  # no answer block
    ("<answer>4</answer>", 0.0, 0.0, "missing_tag"),  # no think block
    ("", 0.0, 0.0, "missing_tag"),  # empty completion
    ("<think>a</think><answer>4</answer><answer>5</answer>", 0.0, 0.0, "repeated_tag"),  # answer spam
    ("<think>a</think><think>b</think><answer>4</answer>", 0.0, 0.0, "repeated_tag"),  # two think blocks
    ("<think>a</think><answer>  </answer>", 0.0, 0.0, "empty_answer"),  # blank answer
    ("<think></think><answer>4</answer>", 0.0, 1.0, "empty_think"),  # empty reasoning: strict refuses
    ("<think>a<answer>4</answer></think>", 0.0, 0.0, "wrong_order"),  # answer nested inside think
    ("<think>a</think><answer>4", 0.0, 0.0, "missing_tag"),  # truncated before </answer>
    ("<THINK>a</THINK><ANSWER>4</ANSWER>", 0.0, 0.0, "missing_tag"),  # tags are case-sensitive
]


@pytest.mark.parametrize("completion,strict_score,lenient_score,reason", THINK_ANSWER_ROWS)
def test_think_answer_table(completion, strict_score, lenient_score, reason):
    strict = ThinkAnswerFormat(strict=True)(completion, None)
    lenient = ThinkAnswerFormat()(completion, None)
    assert strict.score == strict_score
    assert lenient.score == lenient_score
    assert strict.info["reason"] == reason
    assert strict.ok and lenient.ok  # a badly formatted completion is graded, not an error


def test_think_answer_extracts_answer_and_custom_tags():
    r = ThinkAnswerFormat()(WELL, None)
    assert r.info["answer"] == "4"
    custom = ThinkAnswerFormat("reasoning", "final", strict=True, name="tags")
    assert custom.name == "tags"
    assert custom("<reasoning>x</reasoning><final>7</final>", None).score == 1.0
    assert custom(WELL, None).score == 0.0


def test_think_opened_in_prompt():
    f = ThinkAnswerFormat(strict=True, think_opened_in_prompt=True)
    assert f("I add them.</think><answer>4</answer>", None).score == 1.0
    # re-opening the think block the template already opened is a format error
    assert f("<think>I add them.</think><answer>4</answer>", None).info["reason"] == "repeated_tag"


@pytest.mark.parametrize("tags", [("", "answer"), ("think", "think"), ("a b", "answer"), ("think", "<answer>")])
def test_think_answer_rejects_bad_tags(tags):
    with pytest.raises(ValueError):
        ThinkAnswerFormat(*tags)


# (completion, forms, score, reason)
ONE_ANSWER_ROWS = [
    (r"so the answer is \boxed{4}.", ("boxed", "hash"), 1.0, "one_answer"),  # one box
    ("48 + 24 = 72\n#### 72", ("boxed", "hash"), 1.0, "one_answer"),  # one GSM8K line
    (r"\boxed{\frac{1}{2}}", ("boxed",), 1.0, "one_answer"),  # nested braces
    (r"\fbox{3}", ("boxed",), 1.0, "one_answer"),  # \fbox counts as a box
    (r"\boxed {5}", ("boxed",), 1.0, "one_answer"),  # space before the brace
    (r"\boxed{4} or maybe \boxed{5}", ("boxed", "hash"), 0.0, "multiple_answers"),  # hedging with two boxes
    (r"\boxed{4} \boxed{4}", ("boxed",), 0.0, "multiple_answers"),  # the same box twice is still spam
    ("#### 3\n#### 4", ("hash",), 0.0, "multiple_answers"),  # two #### lines
    ("\\boxed{4}\n#### 4", ("boxed", "hash"), 0.0, "multiple_answers"),  # box plus #### line
    ("\\boxed{4}\n#### 4", ("boxed",), 1.0, "one_answer"),  # #### not an accepted form here: ignored
    ("the answer is 4", ("boxed", "hash"), 0.0, "no_answer"),  # no final-answer marker
    ("#### 4", ("boxed",), 0.0, "no_answer"),  # wrong form
    (r"\boxed{}", ("boxed",), 0.0, "empty_answer"),  # empty box
    ("####   \n", ("hash",), 0.0, "empty_answer"),  # empty #### line
    (r"\boxed{\frac{1}{2}", ("boxed",), 0.0, "unbalanced_braces"),  # truncated box
    ("x ##### 4", ("hash",), 0.0, "no_answer"),  # not at line start, five hashes
    ("  #### 12", ("hash",), 1.0, "one_answer"),  # indented #### line
    ("", ("boxed", "hash"), 0.0, "no_answer"),  # empty completion
    ("\\boxed{" * 20000 + "}" * 20000, ("boxed",), 0.0, "multiple_answers"),  # nested box bomb (was quadratic)
    ("x" * 100000 + "\\boxed{" + "{" * 20000, ("boxed",), 0.0, "unbalanced_braces"),  # long unclosed box
]


@pytest.mark.parametrize("completion,forms,score,reason", ONE_ANSWER_ROWS)
def test_one_answer_table(completion, forms, score, reason):
    r = OneAnswer(forms)(completion, None)
    assert (r.score, r.info["reason"]) == (score, reason)
    assert r.ok


def test_one_answer_reports_answer_and_validates_forms():
    assert OneAnswer()(r"\boxed{ 42 }", None).info["answer"] == "42"
    assert OneAnswer("hash").forms == ("hash",)
    for bad in [(), ("box",), "latex"]:
        with pytest.raises(ValueError):
            OneAnswer(bad)


def test_find_helpers():
    assert find_boxed(r"a \boxed{1} b \boxed{x^{2}} c \boxed{") == ["1", "x^{2}", None]
    assert find_hash_answers("a\n#### 1\nb\n####2") == ["1", "2"]


# (pattern, mode, flags, completion, score)
REGEX_ROWS = [
    (r"Answer: \d+", "search", "", "so. Answer: 12", 1.0),  # found anywhere
    (r"Answer: \d+", "match", "", "so. Answer: 12", 0.0),  # match anchors at the start
    (r"Answer: \d+", "fullmatch", "", "Answer: 12", 1.0),  # whole string
    (r"Answer: \d+", "fullmatch", "", "Answer: 12 ok", 0.0),  # trailing text refused
    (r"answer: \d+", "search", "i", "ANSWER: 3", 1.0),  # case-insensitive flag
    (r"^a.b$", "search", "s", "a\nb", 1.0),  # dotall flag
    (r"^b$", "search", "m", "a\nb\nc", 1.0),  # multiline flag
]


@pytest.mark.parametrize("pattern,mode,flags,completion,score", REGEX_ROWS)
def test_regex_table(pattern, mode, flags, completion, score):
    assert RegexReward(pattern, mode=mode, flags=flags)(completion, None).score == score


def test_regex_pattern_from_meta_and_errors():
    r = RegexReward()
    assert r("abc", None, pattern="b").score == 1.0
    missing = r("abc", None)
    assert missing.score is None and missing.status == "no_pattern"
    bad = r("abc", None, pattern="(")
    assert bad.score is None and bad.status == "bad_pattern"
    with pytest.raises(Exception):
        RegexReward("(")
    with pytest.raises(ValueError):
        RegexReward("a", mode="find")
    with pytest.raises(ValueError):
        RegexReward("a", flags="q")


@pytest.mark.parametrize("name", ["format", "one_answer", "regex"])
def test_registered_and_picklable(name):
    reward = get_reward(name)
    assert reward.name == name
    clone = pickle.loads(pickle.dumps(reward))
    sample = WELL + "\n\\boxed{4}"
    assert clone(sample, None, pattern="4").to_dict() == reward(sample, None, pattern="4").to_dict()


def test_fast_paths():
    assert ThinkAnswerFormat().fast(WELL, None).score == 1.0
    assert OneAnswer().fast(r"\boxed{1}", None).score == 1.0
    # a user regex may backtrack for minutes: no fast path, so the pool runs it under a deadline
    assert not hasattr(RegexReward("a"), "fast")
