"""Marker-less completions that restate the problem, and final results that repeat an earlier result (issue 40).

The marker-less rule of :mod:`.extract` (``_conclusion``) pays a concluding sentence's number only when
it is new: a number the completion already wrote is a mention (an operand, a quantity copied from the
question). Two refinements, each read as a careful grader reads it:

* **Restated givens are no answer** (``restated``): a completion whose text after its last number asks
  the problem's question ("Tom has 5 apples and Jane has 3 apples. How many apples do they have?"), or
  whose last sentence lists two or more different plain values, with no conclusion word, in a text that
  computes nothing ("Tom has 5 apples and Jane has 3 apples.": which one would be the answer?), states no
  answer, whatever its last number is. Graders could read "3 boxes hold 36 eggs." as an answer; the
  conservative reading (not paid) is taken.
* **A final result may repeat a result** (FN before): "Half of them are broken, so 6 are broken. 6 eggs
  are broken." concludes with 6, which the text wrote before *as a result* (after "so" / "therefore",
  or as the value of a computation), not as a given: it is paid. A repeated given ("We know Jane has 3.
  So Jane has 3.") stays a mention.

Every pattern is anchored at a word and bounded; each function reads one sentence or the text once.
"""

from __future__ import annotations

import re
from typing import Callable

# the problem's own question, after the last number: "How many apples do they have?", "What is the total?"
_PROBLEM_QUESTION = re.compile(
    r"\b(?:how\s++(?:many|much|long|far|old|often|fast)|what\s++(?:is|was|are|were|will|would|did|does)"
    r"|which|find|calculate|compute|determine)\b[^?]{0,300}\?", re.IGNORECASE)
_CONCLUSION_WORD = re.compile(r"\b(?:so|thus|therefore|hence|finally|total|altogether|overall|in\s++all|result)\b",
                              re.IGNORECASE)
_COMPUTATION = re.compile(r"[=+*/×÷$&\\]|\s-\s|\b(?:plus|minus|times|divided|equals?|makes|gives|add\w*|sum|total"
                          r"|product|differen\w*|subtract\w*|multipl\w*|not|which|n't)\b", re.IGNORECASE)
_PLAIN_NUMBER = re.compile(r"-?[\d,]+(?:\.\d+)?")
# a clause that concludes with a value: "so 6 are broken", "therefore she has 12"
_CONCLUDED = re.compile(r"\b(?:so|thus|therefore|hence)\b,?+([^.!?\n]{0,200})", re.IGNORECASE)


def asks_the_problem(after: list[str]) -> bool:
    """Whether a sentence after the answer's asks the problem's question (the text restates the problem)."""
    return any(_PROBLEM_QUESTION.search(p) for p in after)


def restates_givens(text: str, piece: str, answer: str, numbers: list[str]) -> bool:
    """Whether a marker-less final sentence lists different plain values and concludes nothing, in a text that
    computes nothing (no operator, no math, no "added", no "not ... which is")."""
    return (len(set(numbers)) >= 2 and _PLAIN_NUMBER.fullmatch(answer) is not None
            and not _CONCLUSION_WORD.search(piece) and not _COMPUTATION.search(text))


def repeats_a_result(before: str, answer: str, results: set[str], numbers: Callable[[str], list[str]]) -> bool:
    """Whether ``answer`` was written in ``before`` as a result: a computation's value (``results``) or the one
    value of a clause opened by "so" / "therefore" ("so 6 are broken")."""
    if answer in results:
        return True
    return any(numbers(m.group(1)) == [answer] for m in _CONCLUDED.finditer(before))
