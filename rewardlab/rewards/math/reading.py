"""The reading primitives of the math reward, shared by extraction (:mod:`.extract`) and the commitment rule
(:mod:`.commit`): what an extraction is and its policy, the answer phrases, numbers and math segments, a
region's first sentence, a text's sentences, and the answer inside the region that follows a marker.

Pure Python, linear time in the input, no LaTeX parser (see :mod:`.extract`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ExtractionPolicy:
    """How the final answer is found in a completion, and what counts as gaming the extractor."""

    use_boxed: bool = True
    """Take the last ``\\boxed{}``/``\\fbox{}`` group when there is one."""
    use_hash: bool = True
    """Take the last GSM8K ``#### N`` line."""
    use_phrase: bool = True
    """Take the last "the answer is ..." / "Answer: ..." phrase."""
    fallback: str = "last"
    """When no marker is found: ``"last"`` (bare answer, else last number or math segment) or ``"none"``."""
    strip_thinking: bool = True
    """Ignore everything up to a closing ``</think>``."""
    max_distinct_boxes: int = 3
    """More distinct boxed answers than this is box spam (not paid). 0 disables the check."""
    refuse_ambiguous: bool = True
    """Refuse an answer phrase that offers several numbers ("3 or 4", "between 1 and 10")."""
    max_bare_numbers: int = 12
    """A marker-less completion whose tail is just a run of more numbers than this is number spam."""
    commitment: bool = True
    """The commitment rule (:mod:`.commit`): pay only an answer the completion commits to (corrections
    commit to the corrected value; hedges, negations, bounds, questions and withdrawn answers are refused)."""


@dataclass
class Extraction:
    """The extracted answer (or why there is none) and how it was found."""

    answer: str | None
    method: str
    """"boxed", "hash", "phrase", "bare", "last_number", "last_math", or "none"."""
    problem: str | None = None
    """None, or a reason code: "no_answer", "box_spam", "ambiguous", "number_spam", "empty_box", "negated", "junk",
    or one of the commitment rule's: "hedge", "withdrawn", "bound", "question"."""
    n_boxes: int = 0
    corrected: bool = False
    """The answer follows a correction of an earlier one (the commitment rule)."""


# Why these cannot blow up (tests/test_fuzz_rewards.py runs regexploit and a fuzzer over them):
#   ANSWER_PHRASE runs over the whole completion. Each start needs the literal "answer", "final" or "the";
#     every whitespace run next to an optional part is possessive, so a match attempt is linear in
#     the run it meets and never re-splits it (the original ``\s*(?:\*\*)?\s*`` was quadratic in a
#     run of spaces after "answer").
#   NUM_FIND cannot start inside a number (look-behind); comma groups are delimited by literal
#     commas; the fraction part is possessive. MATH_SEG scans at most 2,000 characters per opening
#     delimiter. Both only see a sentence (<= 600 chars) or the last 4,000 characters.
ANSWER_PHRASE = re.compile(
    r"(?:final\s++answer|\banswer)s?\s*+(?:\*\*)?\s*+(?:is|are|:|=|(?:would|should|will|must)\s++be)\s*+(?::|\*\*)?\s*+"
    r"|\bthe\s++(?:final\s++)?(?:result|solution)\s++is\s*+:?\s*+"
    # Spanish, French, German, Chinese (see .commit for their corrections and negations)
    r"|\brespuesta(?:\s++final)?\s*+(?:es|:)\s*+:?\s*+|\bréponse(?:\s++finale)?\s*+(?:est|:)\s*+:?\s*+"
    r"|\bantwort\s*+(?:ist|lautet|:)\s*+:?\s*+|\b(?:resultado|résultat|ergebnis)\s++(?:es|est|ist|lautet)\s*+:?\s*+"
    r"|答案\s*+(?:应该|应|就)?(?:是|为|:)\s*+:?\s*+|答案(?=\s*+(?:不是|不等于|不可能是))",
    re.IGNORECASE,
)
NUM_FIND = re.compile(r"(?<![\w.])(?<!\d,)-?(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d])|\d+(?::\d+)?)(?:\.\d+)?(?:\s*+/\s*+\d+|"
                      r"_\{?+\d{1,2}\}?+)?%?"
                      r"|(?<![\w.])-?\.\d+")  # "42_8" whole: a base numeral is never its digits
_HEDGE = re.compile(r"\b(?:or|either|between|maybe|possibly|perhaps)\b", re.IGNORECASE)
_HEDGE_STRONG = re.compile(r"\b(?:either|between|maybe|possibly|perhaps)\b", re.IGNORECASE)
MATH_SEG = re.compile(r"\$\$(.{1,2000}?)\$\$|\$(.{1,2000}?)\$|\\\((.{1,2000}?)\\\)|\\\[(.{1,2000}?)\\\]", re.DOTALL)
ANSWER_WORDS = {"and", "or", "pct", "percent", "percentage", "of", "to"}
"""Words an answer may hold and still be one (``3 and 4``, ``5 percent``): not prose, and not junk around values."""
_FILLER = re.compile(r"^(?:(?:simply|just|exactly|clearly|indeed|actually|obviously|basically|therefore|thus|then|now)"
                     r"\b[\s,:]*+)+",
                     re.IGNORECASE)
# A result statement: an arithmetic expression of numbers, a result verb, and the number it comes to
# ("4 + 6 equals 10", "9 + 4 is 13", "3 * 3 = 9"), or "... to get 4". Operands are numbers, operators
# are literals, every space run is possessive: one match attempt is linear in what it reads.
_OPERAND = r"\(?\s*+-?\d++(?:\.\d++)?\s*+\)?"
_OPERATOR = r"(?:[-+*/×x·]|\\times|\\cdot|plus|minus|times|divided\s++by)"
RESULT_NUM = r"-?(?:[1-9]\d{0,2}(?:,\d{3})++(?!\d)|\d++)(?:\.\d++)?%?"
RESULT = re.compile(
    r"(?<![\w.^/_])" + _OPERAND + r"(?:\s*+" + _OPERATOR + r"\s*+" + _OPERAND + r")++\s*+,?\s*+"
    r"(?:=|equals?+|is\s++equal\s++to|is|makes|gives|(?:for\s++)?a\s++total\s++of)\s*+(?P<rhs>" + RESULT_NUM + r")"
    r"|\b(?:to|we|you|I|they)\s++get\s++(?P<got>" + RESULT_NUM + r")",
    re.IGNORECASE,
)
# A value the text itself rejects: "I think 15 is incorrect.", "The answer is not $9$."
_NEGATED_AFTER = re.compile(r"(?:\^\s*+\{?\\circ\}?|\\?%|\s++(?!(?:is|was|are|were|would|seems)\b)"
                            r"[A-Za-z]++)?\s*+\$?+\)?+\s*+(?:is|was|are|were|would\s++be|seems)\s++(?:not\b|incorrect|"
                            r"wrong|false|a\s++mistake)",
                            re.IGNORECASE)
_NOT_VALUE = re.compile(r"\bnot\s++(?:\\?\$\s*+)?(" + r"-?\d[\d,]{0,30}(?:\.\d{1,30})?" + r")")


def digits_key(num: str) -> str:
    """``"018.900"`` -> ``"18.9"``: a plain decimal without commas, leading zeros or trailing fractional zeros."""
    num = num.replace(",", "")
    if "." in num:
        num = num.rstrip("0").rstrip(".")
    neg = num.startswith("-")
    num = num.lstrip("-").lstrip("0") or "0"
    return ("-" if neg else "") + num


NEGATED_START = re.compile(r"(?:not|isn't|is\s++not|never|nicht|keine?|no\s++(?:es|son)|pas)\b"
                           r"|\s*+(?:不是|不等于|不可能是)", re.IGNORECASE)
PLACEHOLDERS = {"n", "x", "answer", "your answer", "final answer", "the answer", "...", "\\ldots", "?",
                "\\text{answer}"}


def first_sentence(region: str) -> str:
    """The first sentence (or line) of ``region``: up to a period followed by space, or a newline."""
    region = region.lstrip()
    out = []
    in_math = False
    i = 0
    n = min(len(region), 600)
    while i < n:
        c = region[i]
        if c == "$":
            in_math = not in_math
        elif c == "\n" and not in_math:
            if out and (i + 1 >= n or region[i + 1] == "\n" or "".join(out).strip()):
                break
        elif c == "." and not in_math and (i + 1 >= n or region[i + 1].isspace()):
            break
        elif not in_math and region.startswith("I hope", i):
            break
        out.append(c)
        i += 1
    return "".join(out).strip()


def _words_outside_commands(s: str) -> list[str]:
    s = re.sub(r"\\[A-Za-z]+", " ", s)
    s = re.sub(r"_\{[^}]*\}|_\w", " ", s)
    return [w.lower() for w in re.findall(r"[A-Za-z]{2,}|[\u4e00-\u9fff]{2}", s)]  # two ideographs: a word


def is_bare_answer(s: str) -> bool:
    """Whether ``s`` as a whole reads like an answer rather than prose (at most two plain words)."""
    if len(s) > 400:
        return False
    words = [w for w in _words_outside_commands(s) if w not in ANSWER_WORDS]
    return len(words) <= 2


def numbers_in(s: str) -> list[str]:
    """Every number of ``s``, as written, in order."""
    return [m.group(0) for m in NUM_FIND.finditer(s)]


_LEADING_VALUE = re.compile(
    r"(" + RESULT_NUM + r"|\$[^$]{1,200}\$)\s*+(?:[,;]\s*+(?=[A-Za-z])|\s(?=(?:because|since|as|which|so|and\s+that)"
    r"\b)|(?<=\s)(?=\((?:since|because|as|from|by|using|which|i\.e\.|e\.g\.)\b))")  # "6 (since 2 * 3 = 6)"


_LATEX_VALUE = re.compile(r"-?\d*+\\(?:[dt]?frac\s*+\{[^{}]{1,40}\}\s*+\{[^{}]{1,40}\}"
                          r"|sqrt\s*+(?:\[\d+\])?\{[^{}]{1,40}\})")
# The answer offered with a second value in words: "Three is indeed 6 and ten."
_AND_WORD_NUMBER = re.compile(r"\s++(?:and|or)\s++(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven"
                              r"|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|hundred"
                              r"|thousand)\b",
                              re.IGNORECASE)


def answer_in_region(region: str, policy: ExtractionPolicy, method: str) -> Extraction:
    """Pick the answer inside a region that follows a marker (or a whole marker-less text)."""
    sent = region.strip()
    if not sent:
        return Extraction(None, method, "no_answer")
    if method == "phrase" and NEGATED_START.match(sent):  # "The answer is not $n=2, 3, 4$."
        return Extraction(None, method, "negated")
    nums = numbers_in(sent)
    if policy.refuse_ambiguous and len(set(nums)) >= 2 and _HEDGE_STRONG.search(re.sub(r"\$[^$]*\$", " ", sent)):
        return Extraction(None, method, "ambiguous")
    if method == "phrase":
        sent = _FILLER.sub("", sent).strip() or sent
        lead = _LEADING_VALUE.match(sent)
        if lead:  # "14, because adding 8 and 2 ..." -> 14 (the phrase's number, not the sentence's last)
            return Extraction(lead.group(1), method)
    if is_bare_answer(sent):
        return Extraction(sent, method if method != "fallback" else "bare")
    if policy.refuse_ambiguous and len(set(nums)) >= 2 and _HEDGE.search(re.sub(r"\$[^$]*\$", " ", sent)):
        return Extraction(None, method, "ambiguous")
    last_math = None
    for m in MATH_SEG.finditer(sent):
        last_math = m
    last_num = None
    for m in NUM_FIND.finditer(sent):
        if last_math is None or not (last_math.start() <= m.start() < last_math.end()):
            last_num = m
    if last_math is not None and (last_num is None or last_math.end() >= last_num.end()):
        if _NEGATED_AFTER.match(sent, last_math.end()):
            return Extraction(None, method, "negated")
        inner = next(g for g in last_math.groups() if g is not None)
        return Extraction(inner.strip(), "last_math" if method == "fallback" else method)
    for m in _LATEX_VALUE.finditer(sent):
        if last_num is not None and m.start() < last_num.start() < m.end():  # "it is \frac{1}{8}" is not 8
            if _NEGATED_AFTER.match(sent, m.end()):
                return Extraction(None, method, "negated")
            return Extraction(m.group(0), "last_math" if method == "fallback" else method)
    if last_num is not None:
        if _NEGATED_AFTER.match(sent, last_num.end()):
            return Extraction(None, method, "negated")
        if policy.refuse_ambiguous and _AND_WORD_NUMBER.match(sent, last_num.end()):
            return Extraction(None, method, "ambiguous")
        if any(digits_key(m.group(1)) == digits_key(last_num.group(0))
               for m in _NOT_VALUE.finditer(sent, 0, last_num.start())):
            return Extraction(None, method, "negated")  # "It is not $18.90, it is $18.900.": denies what it asserts
        return Extraction(last_num.group(0), "last_number" if method == "fallback" else method)
    return Extraction(None, method, "no_answer")


_PIECE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def sentence_pieces(text: str) -> list[tuple[int, str]]:
    """The sentences (or lines) of ``text`` that hold more than space, with where each starts."""
    out, start = [], 0
    for m in _PIECE_END.finditer(text):
        if text[start:m.start()].strip():
            out.append((start, text[start:m.start()]))
        start = m.end()
    if text[start:].strip():
        out.append((start, text[start:]))
    return out
