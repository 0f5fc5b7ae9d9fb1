"""Regression rows of issue 40: the commitment rule and the answers people write (one commented row per case).

Each row is (completion, gold, expected score, class, comment[, meta]). Classes: the commitment rule
(``withdrawn``, ``hedge``, ``negated``, ``question``, ``truncated``, ``unit_power``, ``kind``) and the missed
right answers (``number_words``, ``unicode``, ``clock_ratio``, ``mixed``, ``tags``, ``aside``, ``currency``,
``latex_prose``; issue 40's second round: ``repeated_result``, ``restated``, ``languages``). Positives
and negatives per class; the rows marked ``# new`` failed on the code before issue 40 (or, for the second
round's classes, before that round; checked by running this file against it), the others guard what
already worked.
"""

from __future__ import annotations

import pytest

from rewardlab.rewards import ExtractionPolicy, MathReward, math_reward, score_batch

PMAT = "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"
VMAT = "\\begin{vmatrix} 1 & 2 \\\\ 3 & 4 \\end{vmatrix}"
CUT = {"finish_reason": "length"}

ROWS = [
    # --- withdrawn answers: a correction commits to the corrected value
    ("Answer: 8. Wait, that double counts; it is 7.", "7", 1.0, "withdrawn", "corrected value paid"),  # new
    ("Answer: 8. Wait, that double counts; it is 7.", "8", 0.0, "withdrawn", "withdrawn value not paid"),  # new
    ("So the answer is 15. Wait, I double counted the corner squares.", "15", 0.0, "withdrawn",
     "withdrawn, no new value: not paid"),  # new
    ("#### 40\nCorrection: 42", "42", 1.0, "withdrawn", "a correction after ####"),  # new
    ("The answer is 12. No, I made a mistake: the answer is 10.", "10", 1.0, "withdrawn", "'No,' then a new phrase"),
    ("The answer is 6. Actually, this is easy to check: 2 * 3 = 6.", "6", 1.0, "withdrawn",
     "'actually' that confirms the same value"),
    ("The answer is 6. Wait, let me double-check: 2 * 3 = 6. Yes.", "6", 1.0, "withdrawn", "a check is no withdrawal"),
    ("The answer is 12. They wait 3 minutes each time.", "12", 1.0, "withdrawn", "'wait' as a verb corrects nothing"),
    # --- hedges: two or more different final answers and no correction
    ("We get $\\boxed{8}$. Then again it might be $\\boxed{9}$.", "9", 0.0, "hedge", "two boxes, two values"),  # new
    ("If inclusive the answer is 8, if exclusive 7.", "8", 0.0, "hedge", "conditional answers"),  # new
    ("The answer is $\\boxed{8}$.[^1]\n\n[^1]: Counting the endpoints, it is $\\boxed{9}$.", "9", 0.0, "hedge",
     "a footnote offers another value"),  # new
    ("The answer is 8. Alternatively, it could be 9.", "8", 0.0, "hedge", "a trailing alternative"),  # new
    ("#### 72\n#### 73", "73", 0.0, "hedge", "two #### lines, two values"),  # new
    ("The answer is 8 or 9.", "9", 0.0, "hedge", "'8 or 9'"),
    ("The answer is 286, or maybe 313.\n#### 286", "286", 0.0, "hedge", "a #### line does not overrule a hedge"),  # new
    ("Correction: the answer is 193.\n#### 41.8", "41.8", 0.0, "hedge", "nor a corrected value"),  # new
    ("$\\boxed{12}$\n\nNote: this assumes order does not matter; otherwise it would be 24.", "12", 0.0, "hedge",
     "'otherwise it would be' offers another value"),  # new
    ("First, $a = \\boxed{3}$. Then $b = \\boxed{4}$. So $a + b = \\boxed{7}$.", "7", 0.0, "hedge",
     "conservative: boxes of different values and no correction (intermediate results or a hedge?)"),  # new
    ("Answer: 6 apples. If she had 2 more, she would have 8.", "6", 1.0, "hedge",
     "a remark about another quantity offers no other answer"),
    ("Thus there are $\\boxed{12}$ ways. Note that if order mattered there would be 24 ways.", "12", 1.0, "hedge",
     "a contrast with another setting offers no other answer"),
    ("$\\boxed{8}$. Checking: 3 + 5 = 8, so the answer is $\\boxed{8}$.", "8", 1.0, "hedge", "same value repeated"),
    ("$\\boxed{2}$ and $\\boxed{3}$", "2, 3", 1.0, "hedge", "boxes joined by 'and' are one list answer"),
    ("The intermediate sum is 5. The answer is 8.", "8", 1.0, "hedge", "an intermediate number is no answer"),
    ("$x = 1$ or $x = -2$, so $\\boxed{x = 1 \\text{ or } x = -2}$", "\\{1,-2\\}", 1.0, "hedge",
     "a solution set written with 'or' is an answer"),
    # --- negations and bounds are not answers
    ("That can't be 12.", "12", 0.0, "negated", "can't be"),  # new
    ("The answer is not $\\boxed{12}$.", "12", 0.0, "negated", "a negated box"),  # new
    ("So there are at least 12 ways.", "12", 0.0, "negated", "a bound"),  # new
    ("It has more than 30 pages.", "30", 0.0, "negated", "a bound"),  # new
    ("The answer is 61. That can't be 61.", "61", 0.0, "negated", "denied after it is stated"),  # new
    ("It can't be 11, so the answer is 12.", "12", 1.0, "negated", "another value denied"),
    ("The answer is 12, not 13.", "12", 1.0, "negated", "the alternative denied"),
    # --- questions are not commitments
    ("Is it 14, maybe?", "14", 0.0, "question", "a question"),  # new
    ("Could the answer be 20?", "20", 0.0, "question", "a question"),  # new
    ("Is 14 even? Yes. So the answer is 14.", "14", 1.0, "question", "a question, then an answer"),
    # --- truncation (the call's meta says the completion hit its token budget)
    ("So 9 * 9 = 8", "8", 0.0, "truncated", "cut mid-number ('= 8' of '= 81')", CUT),  # new
    ("So the answer is 81.", "81", 1.0, "truncated", "a terminated answer is paid when cut later", CUT),
    ("So 9 * 9 = 81", "81", 1.0, "truncated", "a true result at the end stands"),
    ("So 9 * 9 = 8", "8", 0.0, "truncated", "without the meta: a false result, a prefix of the true one"),  # new
    ("The total is 25 + 30 = 5", "5", 0.0, "truncated", "'= 5' of '= 55'"),  # new
    ("So the total is 12 + 30 = 42", "42", 1.0, "truncated", "a true result ending the text"),
    # --- units: the exponent is never the answer
    ("The area is 9 m^2.", "9", 1.0, "unit_power", "9 square metres"),  # new
    ("The area is 9 m^2.", "2", 0.0, "unit_power", "not 2"),  # new
    ("The volume is 4 cm^3.", "4", 1.0, "unit_power", "4 cubic centimetres"),  # new
    ("The area is 6 m².", "6", 1.0, "unit_power", "unicode exponent"),
    ("The area is 6 m².", "2", 0.0, "unit_power", "not 2"),
    ("The answer is 5 cm^3.", "5", 1.0, "unit_power", "answer phrase with a unit power"),
    ("The answer is 5 cm^3.", "3", 0.0, "unit_power", "not 3"),
    # --- the wrong kind of object
    ("$\\boxed{" + VMAT + "}$", PMAT, 0.0, "kind", "a determinant is not the matrix"),  # new
    ("$\\boxed{" + VMAT + "}$", VMAT, 1.0, "kind", "a determinant against itself"),
    ("$\\boxed{" + PMAT + "}$", PMAT.replace("pmatrix", "bmatrix"), 1.0, "kind", "pmatrix vs bmatrix"),
    # --- FN: number words
    ("The answer is twelve.", "12", 1.0, "number_words", "a number word"),  # new
    ("She has twelve apples in total.", "12", 1.0, "number_words", "a number word in a digit-free conclusion"),  # new
    ("The answer is twenty-one.", "21", 1.0, "number_words", "hyphenated"),  # new
    ("The answer is one hundred and five.", "105", 1.0, "number_words", "with a scale"),  # new
    ("The answer is eleven.", "12", 0.0, "number_words", "a wrong number word"),
    ("The answer is one of the two.", "1", 0.0, "number_words", "'one of' is no number"),
    # --- FN: unicode fractions and roots
    ("The answer is ½.", "1/2", 1.0, "unicode", "vulgar fraction"),  # new
    ("$\\boxed{⅓}$", "\\frac{1}{3}", 1.0, "unicode", "boxed vulgar fraction"),  # new
    ("The answer is 2½.", "\\frac{5}{2}", 1.0, "unicode", "mixed vulgar fraction"),  # new
    ("The answer is √2.", "\\sqrt{2}", 1.0, "unicode", "root sign"),  # new
    ("The answer is 3√2.", "3\\sqrt{2}", 1.0, "unicode", "coefficient and root"),  # new
    ("The answer is ½.", "2", 0.0, "unicode", "not its denominator"),
    ("The answer is √2.", "2", 0.0, "unicode", "not its radicand"),
    # --- FN: clock times and ratios
    ("The ratio is 3:2.", "3:2", 1.0, "clock_ratio", "a ratio after no answer phrase"),  # new
    ("They meet at 3:30.", "3:30", 1.0, "clock_ratio", "a clock time"),  # new
    ("The ratio is 3:2.", "2", 0.0, "clock_ratio", "not its last term"),  # new
    ("They meet at 3:30.", "30", 0.0, "clock_ratio", "not its minutes"),  # new
    ("The answer is 3:30.", "3:30", 1.0, "clock_ratio", "after a phrase"),
    # --- FN: mixed numbers
    ("The answer is 2 1/2.", "\\frac{5}{2}", 1.0, "mixed", "mixed number"),  # new
    ("She used 2 1/2 cups.", "2.5", 1.0, "mixed", "mixed number in prose"),  # new
    ("The answer is 2 1/2.", "\\frac{1}{2}", 0.0, "mixed", "not its fraction part"),
    ("The answer is 2 1/2.", "1", 0.0, "mixed", "not 2 times 1/2"),
    # --- FN: answers wrapped in HTML or markdown
    ("The answer is <b>12</b>.", "12", 1.0, "tags", "HTML bold"),  # new
    ("<answer>12</answer>", "12", 1.0, "tags", "an answer tag"),  # new
    ("<strong>Answer:</strong> 12", "12", 1.0, "tags", "a bold answer label"),  # new
    ("The area is 9 m<sup>2</sup>.", "9", 1.0, "tags", "a superscript unit power"),  # new
    ("The answer is <b>13</b>.", "12", 0.0, "tags", "a wrong tagged answer"),
    ("The answer is **12**.", "13", 0.0, "tags", "a wrong bold answer"),
    # --- FN: a reason in parentheses after the answer
    ("The answer is 6 (since 2 * 3 = 6).", "6", 1.0, "aside", "a parenthetical reason"),  # new
    ("The answer is 6 (because 2 * 3 = 6).", "7", 0.0, "aside", "still the stated value"),
    ("The answer is 12 (or 13 if you count the endpoints).", "12", 0.0, "aside", "a parenthetical alternative"),
    # --- a LaTeX value in prose is one value, never the last number inside it
    ("So each share is \\frac{1}{8} of the cake.", "\\frac{1}{8}", 1.0, "latex_prose", "a fraction in prose"),  # new
    ("So each share is \\frac{1}{8} of the cake.", "8", 0.0, "latex_prose", "not its denominator"),  # new
    ("So the side is 3\\sqrt{2} meters.", "2", 0.0, "latex_prose", "not its radicand"),  # new
    ("I think \\frac{13}{15} is incorrect.", "\\frac{13}{15}", 0.0, "latex_prose", "still negated"),
    # --- FN: signed currency
    ("He lost -$5 overall.", "-5", 1.0, "currency", "minus before the dollar sign"),  # new
    ("The change is -$5.", "5", 0.0, "currency", "the sign is kept"),  # new
    ("The answer is -$5.", "-5", 1.0, "currency", "after an answer phrase"),
    # --- FN: a final result that repeats a result written earlier (not a given)
    ("There are 12 eggs. Half of them are broken, so 6 are broken. In the end, 6 eggs are broken.", "6", 1.0,
     "repeated_result", "the result of a 'so' clause, restated at the end"),  # new
    ("There are 12 eggs. Half of them are broken, so 6 are broken. The number of broken eggs is 6.", "6", 1.0,
     "repeated_result", "the same, 'is 6'"),  # new
    ("He works 8 hours a day. Therefore he works 40 hours a week. He works 40 hours.", "40", 1.0,
     "repeated_result", "a 'therefore' result restated"),  # new
    ("The rectangle is 4 by 6. Its area is 4 * 6 = 24. The area is 24.", "24", 1.0, "repeated_result",
     "a computation's value restated (worked before)"),
    ("There are 12 eggs. Half of them are broken, so 6 are broken. The number of broken eggs is 12.", "12", 0.0,
     "repeated_result", "a given restated is a mention, not a result"),
    ("We know Tom has 5 apples and Jane has 3. The number Jane has is 3.", "3", 0.0, "repeated_result",
     "a given restated"),
    # --- restated givens and the problem's question: no answer, whatever the last number is
    ("Tom has 5 apples and Jane has 3 apples. How many apples do they have?", "3", 0.0, "restated",
     "the problem restated, its question last"),  # new
    ("Tom has 5 apples and Jane has 3 apples. How many apples do they have?", "8", 0.0, "restated",
     "no answer for the true total either"),
    ("Tom has 5 apples and Jane has 3 apples.", "3", 0.0, "restated", "two givens, no conclusion"),  # new
    ("The train leaves at 3 and arrives at 5.", "5", 0.0, "restated", "two values, nothing concluded"),  # new
    ("Tom has 5 apples and Jane has 3 apples. Together they have 8 apples.", "8", 1.0, "restated",
     "the givens, then a new value"),
    ("He had 5 apples and gave away 0, so he still has 5 apples.", "5", 1.0, "restated", "a 'so' clause concludes"),
    ("She buys 3 packs of 4 pens, so 3 * 4 = 12 pens. She has 12 pens.", "12", 1.0, "restated",
     "a computation, then its value"),
    ("She has 8 apples. Isn't that nice?", "8", 1.0, "restated", "a question that is not the problem's"),
    ("So, the answer is 8. How many apples do they have?", "8", 1.0, "restated",
     "an answer phrase is a commitment (the question is not read there)"),
    # --- other languages (Spanish, French, German, Chinese): answer phrases, corrections, negations, hedges
    ("Respuesta: 12", "12", 1.0, "languages", "Spanish answer label"),  # new
    ("La respuesta es 12.", "12", 1.0, "languages", "Spanish answer phrase"),
    ("La respuesta no es 12.", "12", 0.0, "languages", "Spanish negation"),  # new
    ("No puede ser 12.", "12", 0.0, "languages", "Spanish 'cannot be'"),  # new
    ("La respuesta es 15. Espera, conté dos veces las esquinas.", "15", 0.0, "languages",
     "Spanish withdrawal, no new value"),  # new
    ("La respuesta es 8. Espera, conté dos veces; es 7.", "7", 1.0, "languages", "Spanish correction"),
    ("La respuesta es 8 o 9.", "9", 0.0, "languages", "Spanish hedge"),  # new
    ("Réponse : 12", "12", 1.0, "languages", "French answer label"),  # new
    ("La réponse finale est 12.", "12", 1.0, "languages", "French answer phrase"),
    ("La réponse n'est pas 12.", "12", 0.0, "languages", "French negation"),  # new
    ("Ce n’est pas 12.", "12", 0.0, "languages", "French negation, curly apostrophe"),  # new
    ("La réponse est 15. Attendez, j'ai compté deux fois les coins.", "15", 0.0, "languages",
     "French withdrawal"),  # new
    ("La réponse est 8. Attendez, j'ai compté deux fois ; c'est 7.", "7", 1.0, "languages", "French correction"),
    ("Antwort: 12", "12", 1.0, "languages", "German answer label"),  # new
    ("Die Antwort lautet 12.", "12", 1.0, "languages", "German answer phrase"),
    ("Die Antwort ist nicht 12.", "12", 0.0, "languages", "German negation"),  # new
    ("Die Antwort ist 15. Moment, ich habe die Ecken doppelt gezählt.", "15", 0.0, "languages",
     "German withdrawal"),  # new
    ("Die Antwort ist 8. Moment, ich habe doppelt gezählt; es sind 7.", "7", 1.0, "languages", "German correction"),
    ("答案是12。", "12", 1.0, "languages", "Chinese answer phrase"),  # new
    ("最终答案：12", "12", 1.0, "languages", "Chinese final answer label"),  # new
    ("答案不是12。", "12", 0.0, "languages", "Chinese negation"),
    ("答案是15。等等，我重复计算了。", "15", 0.0, "languages", "Chinese withdrawal"),
    ("答案是8。等等，我算错了，答案是7。", "7", 1.0, "languages", "Chinese correction"),  # new
    ("答案是8。等等，我算错了，答案是7。", "8", 0.0, "languages", "the withdrawn Chinese value"),
    ("答案是8或9。", "9", 0.0, "languages", "Chinese hedge"),
    ("At this moment, 5 people are here. The answer is 12.", "12", 1.0, "languages",
     "'moment' inside an English sentence corrects nothing"),
    ("The answer is no.", "no", 1.0, "languages", "a yes/no answer is no negation"),
]


@pytest.fixture(scope="module")
def scored() -> list:
    metas = [r[5] if len(r) > 5 else {} for r in ROWS]
    return score_batch(math_reward, [r[0] for r in ROWS], [r[1] for r in ROWS], metas, deadline=5.0)


@pytest.mark.parametrize("idx", range(len(ROWS)), ids=[f"{r[3]}: {r[4]}" for r in ROWS])
def test_row(idx: int, scored: list) -> None:
    completion, gold, expected, cls, comment = ROWS[idx][:5]
    r = scored[idx]
    assert r.score == expected, f"[{cls}] {comment}: got {r.score} ({r.info})"


def test_every_class_has_positives_and_negatives() -> None:
    classes = {r[3] for r in ROWS}
    for cls in classes:
        scores = {r[2] for r in ROWS if r[3] == cls}
        assert scores == {0.0, 1.0}, cls


@pytest.mark.parametrize("text, status", [
    ("We get $\\boxed{8}$. Then again it might be $\\boxed{9}$.", "hedge"),
    ("The answer is 8 or 9.", "hedge"),
    ("So the answer is 15. Wait, I double counted the corner squares.", "withdrawn"),
    ("That can't be 12.", "negated"),
    ("So there are at least 12 ways.", "bound"),
    ("Is it 14, maybe?", "question"),
    ("Tom has 5 apples and Jane has 12 apples.", "restated"),
])
def test_refusals_say_why(text: str, status: str) -> None:
    r = math_reward(text, "12")
    assert r.score == 0.0 and r.info["status"] == status and r.info["detail"], r.info


def test_info_marks_a_correction() -> None:
    r = math_reward("Answer: 8. Wait, that double counts; it is 7.", "7")
    assert r.score == 1.0 and r.info["commitment"] == "corrected"
    r = math_reward("So 9 * 9 = 8", "8", finish_reason="length")
    assert r.score == 0.0 and r.info["status"] == "truncated"


def test_the_rule_is_one_switch() -> None:
    off = MathReward(ExtractionPolicy(commitment=False))
    assert off("Answer: 8. Wait, that double counts; it is 7.", "8").score == 1.0
    assert off("We get $\\boxed{8}$. Then again it might be $\\boxed{9}$.", "9").score == 1.0
    assert off("So 9 * 9 = 8", "8", finish_reason="length").score == 1.0
