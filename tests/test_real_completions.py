"""The math reward on real completions of the embedded model, labelled by eye (issue 22).

``tests/data/real_completions.jsonl``: 900 completions of the embedded SmolLM2-135M-Instruct, Dec 2026
(``OMP_NUM_THREADS=1 nice -n 10``, 1 thread, about 18 CPU minutes in all), each with ``id``, ``source``,
``problem_id``, ``gold``, ``completion``, ``label``, ``note``, ``reviewed``, ``finish_reason`` and the
prompt's user ``template`` (the default SmolLM system prompt applies to every row). No question text is
stored; completions that copy the question keep what the model wrote.

=======================  ====  ==========================================================================
source                   rows  command (REWARDLAB_DATA_DIR=../shared/data, output under /tmp)
=======================  ====  ==========================================================================
eval:arith:t1.0           256  ``rewardlab eval default --suite arith --limit 64 --n 4 --temperature 1.0
                               --max-new-tokens 64``
eval:arith:greedy         128  ``rewardlab eval default --suite arith --limit 128 --n 1 --temperature 0 --max-new-tokens
                               64``
eval:gsm8k:t1.0           120  ``rewardlab eval default --suite gsm8k --limit 30 --n 4 --temperature 1.0
                               --max-new-tokens 160``
eval:gsm8k:greedy          60  ``rewardlab eval default --suite gsm8k --limit 60 --n 1 --temperature 0 --max-new-tokens
                               160``
eval:gsm8k_train:t0.8      80  a spec naming task gsm8k, split train (same prompt), ``--limit 40``, n=2, temperature
                               0.8, 160 tokens
train:arith                96  ``rewardlab.train.loop`` rollouts.jsonl of ``rewardlab train --steps 3 --max-new-tokens
                               64``
train:arith:seed1         128  ``rewardlab train --steps 4 --seed 1 --max-new-tokens 48`` (rollouts.jsonl)
train:gsm8k                32  ``rewardlab train --task gsm8k --steps 2 --prompts-per-step 4 --max-new-tokens 128``
=======================  ====  ==========================================================================

The arith template is ``{question} Answer with just the number.``; the GSM8K one ends "put your final
answer within \\boxed{}" (an empty box, no ``\\boxed{N}`` placeholder). Every completion that any of the
three graders of ``bench/real_completions.py`` pays (rewardlab, lm-eval GSM8K flexible-extract,
math-verify) and every one that contains the gold number (digits, thousands commas, ``.0``, or the
number word up to twenty) was read by eye: 285 rows, ``reviewed: true``, labelled by what the
completion states as its final answer (never committing is incorrect even when the gold appears; an
answer stated then withdrawn counts by the last committed one; ambiguous ones take the strictest
reasonable reading, with a note). The other 615 rows contain no gold number and no grader pays them:
``reviewed: false``, labelled incorrect. 199 rows are correct.

The counts below are a ratchet: lower the ceilings when the extractor improves (issue 22's done
criterion: FP at most a fifth of the first figure and below lm-eval's 12 on this set, FN halved).
``OMP_NUM_THREADS=1 .venv/bin/python bench/real_completions.py`` prints the three graders side by side
and every rewardlab FP and FN with its info.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rewardlab.rewards import math_reward, score_batch

DATA = Path(__file__).parent / "data" / "real_completions.jsonl"

# First measured (Dec 2026, before the issue-22 extractor changes): FP 13 / 701 (1.9%), FN 23 / 199
# (11.6%). lm-eval flexible-extract on the same rows: FP 12, FN 13; math-verify: FP 43, FN 12.
# After the issue-22 extractor (result statements, conclusion sentences, unevaluated expressions,
# answer-phrase fillers and leading values): FP 7 (1.0%), FN 6 (3.0%). After its second pass (a result
# withdrawn by what follows it, a formula cut mid-way, an answer announced at the very end, a number
# offered with a second one in words, negations, junk): FP 2 (0.3%), FN 6 (3.0%). The remaining rows:
#   FP: "8 + 6 is 14 ... usually 14, but to simplify, ..." (strict: 'but' withdraws it; 'but' alone is no
#       retraction, see the "3 + 6 is 9, but" row of tests/test_math_reward.py) |
#       "1. Exactly, 1. So there's only one solution to the equation 5 + 1 = 6." (strict: its answer is 1)
#   FN: "2 + 9 = 11, ... (1" (a junk number after the result) | "(2+4) or 6 which is 6" (ambiguous) |
#       "5 + 6 equals⇔11" (a junk symbol in the verb) | "5 + 8 = 13 ... Fascine 12." (a new junk number) |
#       "3 + 1 = 4 ... 1-10" (a junk expression) | "8 + 1 = 9. However, ... around a 2 decimal" (truncated aside)
MAX_FP = 2
MAX_FN = 6
FIRST_FP, FIRST_FN, LM_EVAL_FLEXIBLE_FP = 13, 23, 12


def test_the_ceilings_meet_issue_22() -> None:
    """Done when: false positives at most a fifth of the first figure and below lm-eval flexible-extract's
    on the same rows; false negatives halved (the ceilings are enforced on the data below)."""
    assert MAX_FP <= FIRST_FP / 5 and MAX_FP < LM_EVAL_FLEXIBLE_FP
    assert MAX_FN <= FIRST_FN / 2

# Regression rows: every rewardlab error of the first measurement, by class (pred / extraction).
# False positives (paid, label false):
#   never answers; paid through its last number (often copied from the question or an aside):
#     eval:gsm8k:greedy:gsm8k/test/4:0              '20' last_number: truncated working, 20 is the flock size
#     eval:gsm8k:t1.0:gsm8k/test/25:3               '2'  bare: a rambling list, no result
#     eval:arith:t1.0:arith/test/1/0/57:3           '8'  last_number: "an additional negative edge case, 8"
#     train:arith:seed1:arith/train/1/1/208:s2g1r11x3  '6' last_number: 'You know, the "6" way.' then junk
#     eval:arith:t1.0:arith/test/1/0/7:2            '14' last_number: "usually 14, but to simplify, ..." (strict)
#     eval:arith:t1.0:arith/test/1/0/61:1           '10' last_number: "(8 + 2 = 10), is somewhat misleading" (strict)
#     train:arith:arith/train/1/0/1002:s2g1r11x0    '8'  last_number: "the most important example is ... 4 + 4 = 8, 8 x"
#                                                        (strict)
#     train:arith:arith/train/1/0/1961:s1g1r1x1     '6'  last_number: "Three is indeed 6 and ten." (strict)
#   the restated question, evaluated:
#     eval:arith:t1.0:arith/test/1/0/8:3            '2+9'   bare: "So the answer written below is:\n\n2+9"
#     eval:arith:t1.0:arith/test/1/0/53:1           '4 + 2' phrase: "The answer is: 4 + 2"
#   a later number overriding the stated answer:
#     train:arith:seed1:arith/train/1/1/3565:s3g1r16x0  '16' last_number: "57\n57 = 16 in Roman numeral form."
#     train:gsm8k:gsm8k/train/5594:s2g1r4x1         '5'  last_number: answers "1", later "When you round up to 5"
#     train:arith:seed1:arith/train/1/1/3421:s1g1r4x0  '6' last_number: "1. Exactly, 1. So there's only one solution to
#                                                      5 + 1 = 6." (strict)
# False negatives (not paid, label true):
#   "a + b equals N" / "is N" / a sentence around the equation, read as text (rule text_vs_number / math_verify):
#     eval:arith:t1.0:arith/test/1/0/0:1            "3 + 1 equals 4."
#     eval:arith:t1.0:arith/test/1/0/11:3           "1 + 8 equals 9."
#     eval:arith:t1.0:arith/test/1/0/37:2           "6 + 1 equals 7"
#     eval:arith:t1.0:arith/test/1/0/40:2           "2 + 2, equal 4."
#     train:arith:seed1:arith/train/1/1/3345:s1g1r1x0  "2 + 3 equals 5"
#     train:arith:arith/train/1/0/1363:s3g1r21x2    "1 + 8 is 9"
#     eval:arith:t1.0:arith/test/1/0/6:2            "A PITLACEY, just: 9 + 9 = 18"
#     train:arith:arith/train/1/0/3193:s1g1r3x0     "... Formally, 5 + 6 equals⇔11.\n\nYes, that is correct"
#     train:arith:arith/train/1/0/581:s1g1r6x2      "... Therefore, 3 + 8 equals 11."
#     eval:arith:greedy:arith/test/1/0/89:0         "... So, 6 + 9 = 15.\n\n"
#     train:arith:seed1:arith/train/1/1/2091:s4g1r30x2 "Three is a very mathematical number. So, 4 + 3 = 7."
#   the stated answer, then a later number or junk wins (last_number / last piece):
#     eval:arith:t1.0:arith/test/1/0/38:1           "4 + 7 = 11\n\nJust with the number, I added 4 (...) and 7 (...)."
#     train:arith:arith/train/1/0/87:s2g1r12x0      '7 + 9 = 16\n\n... Add a soft link with "9" at the end.'
#     train:arith:seed1:arith/train/1/1/3565:s3g1r16x1 "7 + 9 = 16 In my app, where I recommended7 + 9, ..."
#     train:arith:seed1:arith/train/1/1/868:s4g1r27x2  "6 + 4 = 10\n... 6 + 4 = 10.\n\n... interpretation of 6 + 4: It"
#     train:arith:seed1:arith/train/1/1/3783:s1g1r6x1  "The most direct solution is 8 + 1 = 9. However, ... around a 2
#                                                      decimal"
#     train:arith:arith/train/1/0/2631:s3g1r16x1    "... 5 + 8 = 13.\n\n... We have now added the H. Fascine 12."
#     train:arith:arith/train/1/0/634:s3g1r18x1     "3 + 1 = 4\n\nhold-nine\n\n1-10"
#     eval:arith:t1.0:arith/test/1/0/43:3           "2 + 9 = 11, \n<verse>\n(1 "
#     eval:arith:t1.0:arith/test/1/0/40:0           "... I add them together to get 4. ...\n\n(2 + 2) - (2 + 2) = "
#   the answer phrase's last number wins:
#     eval:arith:t1.0:arith/test/1/0/16:0           "So the answer is 14, because ... (like adding a seven to 2)."
#   refused as ambiguous on a harmless "or":
#     eval:arith:t1.0:arith/test/1/0/38:3           "You have 4 plus 7, or 4 + 7 equals 11 and that is how the number 9
#                                                   ..."
#     eval:arith:t1.0:arith/test/1/0/53:3           "... is simply (2+4) or 6 which is 6 ..."
# The placeholder-box class ("\boxed{N} is 8 + 2, a total of 10") does not occur here: the model
# rarely writes \boxed, and its 9 completions that mention it leave it empty.


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_set_is_what_the_docstring_says(rows) -> None:
    assert len(rows) >= 500
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert {"id", "source", "gold", "completion", "label", "reviewed"} <= r.keys(), r["id"]
        assert isinstance(r["label"], bool) and isinstance(r["reviewed"], bool), r["id"]
        assert r["reviewed"] or not r["label"], f"{r['id']}: an unread row must be labelled false"
    assert sum(r["reviewed"] for r in rows) >= 285
    assert Counter(r["source"].split(":")[0] for r in rows).keys() == {"eval", "train"}


def test_false_positives_and_negatives_at_most_the_ceilings(rows) -> None:
    res = score_batch(math_reward, [r["completion"] for r in rows], [r["gold"] for r in rows], deadline=5.0)
    paid = [x.score == 1.0 for x in res]
    fp = [(r, x) for r, p, x in zip(rows, paid, res) if p and not r["label"]]
    fn = [(r, x) for r, p, x in zip(rows, paid, res) if not p and r["label"]]

    def show(items) -> str:
        return "\n".join(f"  {r['id']} (reviewed={r['reviewed']}) gold={r['gold']!r} pred={x.info.get('pred')!r} "
                         f"extraction={x.info.get('extraction')} status={x.info.get('status')}: "
                         f"{r['completion'][:160]!r}"
                         for r, x in items)

    assert len(fp) <= MAX_FP, f"{len(fp)} false positives (ceiling {MAX_FP}):\n{show(fp)}"
    assert len(fn) <= MAX_FN, f"{len(fn)} false negatives (ceiling {MAX_FN}):\n{show(fn)}"
    # A paid row nobody has read (it holds no gold number, so it is an FP) must be read and labelled.
    unread = [(r, x) for r, x in fp if not r["reviewed"]]
    assert not unread, f"paid rows that were never read: label them by eye\n{show(unread)}"
