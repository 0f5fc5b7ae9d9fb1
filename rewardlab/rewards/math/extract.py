"""Final-answer extraction for the math reward: from a model's text (or a dataset's gold) to one answer string.

Pure Python, linear time in the input, no LaTeX parser: safe to run on the caller's thread on any
input (1 MB strings, binary junk, unbalanced braces). The policy is explicit and configurable through
:class:`ExtractionPolicy`:

1. cut the text at chat-template stop tokens and drop a closed ``<think>...</think>`` block;
2. the last group of ``\\boxed{}`` / ``\\fbox{}`` wins; boxes separated only by commas, ``and``/``or``,
   spacing or ``\\quad`` form one group, whose answer is the list of the boxed items;
3. else the last GSM8K ``#### N``;
4. else the last "final answer is / the answer is / Answer:" phrase, up to the end of its sentence;
5. else (``fallback="last"``) the text itself when it is a bare answer, or its last number or
   math segment.

Over every stage, the commitment rule (:mod:`.commit`, ``ExtractionPolicy.commitment``, on by default)
pays only an answer the completion commits to: corrections, hedges, negations, bounds, questions.

Reward-hacking guards (on by default): more than ``max_distinct_boxes`` different boxed answers
("box_spam"), an answer phrase or final sentence that offers several numbers with "or" / "between"
/ "either" ("ambiguous"), and an answer that hides among many bare numbers ("number_spam") are
refused with a reason instead of being graded.

Try it: ``rewardlab reward math --completion TEXT --gold G`` shows the extracted answer (``pred``).
"""

from __future__ import annotations

import re

from rewardlab.rewards.math.boxes import box_groups, find_boxes
from rewardlab.rewards.math.commit import committed, normalize_surface, number_words_conclusion, words_to_number
from rewardlab.rewards.math.givens import asks_the_problem, repeats_a_result, restates_givens
from rewardlab.rewards.math.reading import ANSWER_WORDS  # noqa: F401 - re-exported: its home was here
from rewardlab.rewards.math.reading import (
    ANSWER_PHRASE, MATH_SEG, NEGATED_START, NUM_FIND, PLACEHOLDERS, RESULT, RESULT_NUM, Extraction,
    ExtractionPolicy, answer_in_region, digits_key, first_sentence, is_bare_answer, numbers_in, sentence_pieces,
)

STOP_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>", "</s>")
MAX_ANSWER_CHARS = 20_000
"""Extracted answers longer than this are truncated (and will not compare equal to a short gold)."""


_ESCAPE_ARTEFACTS = {0x07: "\\a", 0x08: "\\b", 0x0B: "\\v", 0x0C: "\\f"}
"""Control characters that only appear in math text as a LaTeX command eaten by a string escape
(``"\\frac"`` typed as ``"\frac"`` is form feed + ``rac``; ``\b`` of ``\boxed`` / ``\begin`` is backspace)."""


def clean_text(text: str, strip_thinking: bool = True) -> str:
    """Cut at the first chat-template stop token and drop a closed reasoning block."""
    for tok in STOP_TOKENS:
        k = text.find(tok)
        if k >= 0:
            text = text[:k]
    if "\x08" in text or "\x0c" in text or "\x07" in text or "\x0b" in text:
        text = text.translate(_ESCAPE_ARTEFACTS)  # "\x0crac" is "\\frac" written through a string escape
    if strip_thinking:
        k = text.rfind("</think>")
        if k >= 0:
            text = text[k + len("</think>"):]
    return text


_HASH = re.compile(r"####")
# Anchored at the start and bounded ({0,40}): it cannot blow up (the patterns of .reading say why they cannot).
_LEADING_WORDS = re.compile(r"^[A-Za-z][A-Za-z ]{0,40}:?\s*+(?=\$|\\\(|\\\[)")
_CONTINUED = re.compile(r"\s*+(?:(?:[-+*/×^]|\\times|\\cdot)\s*+\d|=)")  # "= 8 + 2", "= 7 = 11": a step, not the result

def _marker_answer(text: str, policy: ExtractionPolicy, last_phrase: re.Match | None) -> Extraction | None:
    """The answer after the last ``####`` or answer phrase, whichever comes last; None if neither."""
    k = text.rfind("####") if policy.use_hash else -1
    if k >= 0 and (last_phrase is None or k >= last_phrase.start()):
        line = text[k + 4:].lstrip("# \t").split("\n", 1)[0].strip()
        if line:
            return Extraction(line[:MAX_ANSWER_CHARS], "hash")
    if last_phrase is not None:
        region = first_sentence(text[last_phrase.end():])
        region = region.strip().strip("*").strip()
        if region.startswith('\\"') or region.startswith('"'):
            region = region.strip('\\"').strip()
        ex = answer_in_region(region, policy, "phrase")
        if ex.answer is not None or ex.problem in ("ambiguous", "negated"):
            return ex
    return None


def extract_answer(text: object, policy: ExtractionPolicy | None = None) -> Extraction:
    """Extract the final answer from a completion according to ``policy``."""
    policy = policy or ExtractionPolicy()
    if not isinstance(text, str):
        return Extraction(None, "none", "no_answer")
    text = clean_text(text, policy.strip_thinking)
    if "\x00" in text:
        text = text.replace("\x00", "")
    stray_invisible = bool(_STRAY_ZERO_WIDTH.search(text))
    text = _ZERO_WIDTH.sub("", text)  # invisible: "5\u200b40" is 540
    if not text.strip():
        return Extraction(None, "none", "no_answer")
    text = normalize_surface(text)
    if policy.commitment:
        ex = committed(text, policy, lambda t, p: _core(t, p, stray_invisible))
    else:
        ex = _core(text, policy, stray_invisible)
    if ex.answer is not None and not re.search(r"\d", ex.answer):
        n = words_to_number(ex.answer)
        if n is not None:  # "The answer is twelve."
            ex.answer = str(n)
    elif ex.problem == "no_answer" and not re.search(r"\d", text):
        ex = number_words_conclusion(text) or ex  # "She has twelve apples in total."
    return ex


def _core(text: str, policy: ExtractionPolicy, stray_invisible: bool = False) -> Extraction:
    """Every extraction stage, without the commitment rule."""
    last_phrase = None
    if policy.use_phrase:
        for m in ANSWER_PHRASE.finditer(text):
            last_phrase = m
    if policy.use_boxed:
        boxes = find_boxes(text)
        # a box that holds only the prompt's placeholder ("\\boxed{N} is 8 + 2, a total of 10") is no answer
        if boxes and all(" ".join(c.split()).lower() in PLACEHOLDERS for _, _, c in boxes):
            for s, e, _ in reversed(boxes):
                text = text[:s] + text[e:]
            boxes = []
        # A box wins unless an answer phrase or #### comes after it (intermediate results boxed).
        after = boxes and (
            (last_phrase is not None and last_phrase.start() >= boxes[-1][1])
            or (policy.use_hash and text.rfind("####") >= boxes[-1][1])
        )
        if boxes and after:
            later = _marker_answer(text, policy, last_phrase)
            # "... so our answer is correct." after the box is not an answer
            if later is not None and later.answer is not None and re.search(r"[\d\\]", later.answer):
                later.n_boxes = len(boxes)
                return later
        if boxes:
            groups = box_groups(text, boxes)
            distinct = {tuple(" ".join(c.split()) for c in g) for g in groups}
            if policy.max_distinct_boxes and len(distinct) > policy.max_distinct_boxes:
                return Extraction(None, "boxed", "box_spam", n_boxes=len(boxes))
            last = [c.strip() for c in groups[-1]]
            if not any(last):
                return Extraction(None, "boxed", "empty_box", n_boxes=len(boxes))
            ans = ", ".join(c for c in last if c) if len(last) > 1 else last[0]
            return Extraction(ans[:MAX_ANSWER_CHARS], "boxed", n_boxes=len(boxes))

    if _ANNOUNCE_AT_END.search(text.rstrip(" \t\n.:*")):
        return Extraction(None, "phrase", "no_answer")
    if _is_junk(text.strip()):  # "( éanswer 0 answer= 595": an answer word in junk is no answer phrase
        return Extraction(None, "none", "junk")
    ex = _marker_answer(text, policy, last_phrase)
    if ex is not None:
        return ex

    if policy.fallback == "none":
        return Extraction(None, "none", "no_answer")
    stripped = text.strip()
    if ("\n" not in stripped and NEGATED_START.match(stripped) and is_bare_answer(stripped)
            and len(set(numbers_in(stripped))) == 1):  # "Not $9$."; not "not it's not 10 it's 1,000.99"
        return Extraction(None, "bare", "negated")
    lead = _LEADING_WORDS.match(stripped)
    if lead and is_bare_answer(stripped):
        stripped = stripped[lead.end():].strip()
    if "\n" not in stripped and is_bare_answer(stripped):
        nums = numbers_in(stripped)
        if policy.max_bare_numbers and len(nums) > policy.max_bare_numbers and len(set(nums)) > policy.max_bare_numbers:
            return Extraction(None, "bare", "number_spam")
        results = [r for r in RESULT.finditer(stripped) if _final_result(stripped, r)]
        if results:  # "3 + 1 equals 4." is the statement of a result, not a text answer
            return Extraction(_rhs(results[-1]), "result")
        return Extraction(stripped[:MAX_ANSWER_CHARS], "bare")
    words = len(_PLAIN_WORD.findall(text[-4000:]))
    if words < MIN_PROSE_WORDS:  # "ab ANS: 0 (is 624": no prose, no bare answer
        return Extraction(None, "none", "no_answer")
    if words < MIN_WORDS_AROUND_NUMBERS and _sub_words_around_numbers(stripped[-4000:], stray_invisible):
        return Extraction(None, "none", "junk")  # "ing   ab 9 (GZ 232": sub-words around numbers, no sentence
    if len({digits_key(m.group(1)) for m in _ANSWER_THEN_NUMBER.finditer(stripped[-4000:])}) >= 2:
        return Extraction(None, "none", "ambiguous")  # "!ab answer 3 answer 570": two answers, none chosen
    return _conclusion(stripped[-4000:], policy)


# The word "answer" right before a number, without a phrase's verb ("answer 3", "answer: 570"); two of them
# with different numbers in a marker-less text state no single answer.
_ANSWER_THEN_NUMBER = re.compile(r"\banswers?+\s*+[:=]?\s*+(-?\d[\d.,]*+)", re.IGNORECASE)
# Tokenizer artefacts in decoded text (byte-level BPE's Ġ/Ċ, SentencePiece's ▁, a broken UTF-8 byte, a
# zero-width space): a marker-less text holding one and several numbers is a random model's junk, whose
# last number is no answer.
_ARTEFACT = re.compile("[\ufffd\u0120\u010a\u2581]")
# Sub-words glued as no prose or formula writes them: "answer0", "qI1", "3ingANS", "650ANS", "0_ing", "is#ab",
# an accent against a digit or "=" ("é1", "é="), "answer" inside a run of letters ("inganswer", "answeris").
_JUNK_GLUE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}\d|\d[a-z]+[A-Z]|\d[A-Z]{3,}|\d_[A-Za-z]{2,}|[A-Za-z\d]#[A-Za-z]"
                        r"|(?<=[a-z]{2})(?<!un)answer|answer(?!s\b|ed\b|ing\b|able\b)[a-z]"
                        "|[\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f][\\d=]|\\d[\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]")
_PLAIN_WORD = re.compile(r"(?<!\S)[A-Za-z][a-z]{2,}+[.,;:!?]?(?!\S)")
_CALL = re.compile(r"(?:sin|cos|tan|cot|sec|csc|log|ln|exp|sqrt|max|min|gcd|lcm|det|mod|abs)\(", re.IGNORECASE)
_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")


_LATEX_NAMES = re.compile(r"\\(?:begin|end)\s*+\{[^{}]{0,40}\}(?:\{[^{}]{0,40}\})?|\\(?:text|mathrm|textbf|mathbf|"
                          r"operatorname)\s*+\{[^{}]{0,80}\}|\\[A-Za-z]+")
# A sub-word glued to a symbol or a digit (``answer{``, ``)ing``, ``is=``, ``3ing``) or with a lower-to-upper
# case change (``qI``, ``xZ``), once LaTeX names are removed: junk, not prose or a formula.
# (Three letters before the symbol say the same as "three or more" for a search, in linear time: ``{3,}`` there made a
# run of thousands of letters quadratic, 126 ms on 3,800 of them, found by bench/fuzz_coverage.py.)
_GLUED = re.compile(r"[A-Za-z]{3}[{}()|$#!=:_<>\d]|[{}()|$#!=:_<>\d][A-Za-z]{3}|[a-z][A-Z]|(?<![A-Za-z])"
                    r"[A-Za-z]{2}[{}()|$#!=:_<>]")


_JUNK_SYMBOLS = re.compile(r"(?<!#)#(?!#)|_(?=[\s=:#])|=\s*+[:#]|[:#]\s*+=")


def _junk_token(tok: str) -> bool:
    """Whether one whitespace-free token is junk (``answer{xZ``); ``f(x)``, ``sin(x)``, ``x=5``, ``2ab``,
    ``\\frac{10}{9}`` and ``\\begin{pmatrix}`` are not."""
    tok = _LATEX_NAMES.sub("", tok.lstrip("([\"'*").rstrip(".,;:!?)\"'*"))
    if not re.search(r"[A-Za-z]{2}", tok) or _CALL.match(tok):
        return False
    return bool(_GLUED.search(tok))


def _is_junk(text: str) -> bool:
    """A text (without a box) that is junk around numbers: tokenizer artefacts; sub-words glued to digits
    or symbols with hardly a word of prose (fewer than 3); or one bare line whose brackets do not close
    (``é(x{ 3 == 842``); each with at least two different numbers in it."""
    tail = text[-4000:]
    if _ARTEFACT.search(tail) and len(set(re.findall(r"\d++", tail))) >= 2:
        return True  # " 1ĠANS 1ĠThe)_00▁the(G": digit runs count, glued or not
    if len(set(numbers_in(tail))) < 2:
        return False
    if len(_PLAIN_WORD.findall(tail)) < 3 and (_JUNK_GLUE.search(tail)
                                               or any(_junk_token(t) for t in _LATEX_NAMES.sub(" ", tail).split())):
        return True  # prose has typos ("recommended7"); junk has no prose
    if "\n" in text or not is_bare_answer(text):
        return False
    # brackets that never close, braces that do not pair, or an odd "$": "={$) 12 |: y = 2x + 3"
    if _JUNK_SYMBOLS.search(text):
        return True  # "=#\\  12 _= 41": a lone "#", a subscripted "=" or a space, "=:" - no formula writes them
    return (sum(text.count(c) for c in "([{") != sum(text.count(c) for c in ")]}")
            or bool(re.match(r"[=\s]*[)\]}]", text))
            or text.count("{") != text.count("}") or text.replace("\\$", "").count("$") % 2 == 1)


def _rhs(m: re.Match) -> str:
    return m.group("rhs") if m.group("rhs") is not None else m.group("got")


def _final_result(text: str, m: re.Match) -> bool:
    """A result statement whose number is not continued by an operator ("= 8 + 2" is a step)."""
    return not _CONTINUED.match(text, m.end())


_WORDS_AFTER = re.compile(r"[A-Za-z]{2,}")
_BARE_NUMBER = re.compile(r"\(?" + RESULT_NUM + r"\)?\.?")
_UNFINISHED = re.compile(r"(?:[-+*/=×^]|\\times|\\cdot)\s*+$")
_CONCLUDING = re.compile(r"(?:so|thus|therefore|hence|finally|in\s++total|altogether|in\s++all|overall)\b",
                         re.IGNORECASE)
# A result statement withdrawn by what follows it: "9 + 4 is 13. I've made a mistake ...",
# "(8 + 2 = 10), is somewhat misleading" ("but" is too common to be one: "3 + 6 is 9, but ...")
_RETRACT = re.compile(r"\b(?:mistakes?|wrong|incorrect|errors?|misleading|oops|sorry"
                      r"|not\s++(?:correct|right|possible|true))\b", re.IGNORECASE)
# not "=": "(2 + 2) - (2 + 2) = " after "to get 4"
_UNFINISHED_TAIL = re.compile(r"(?:[-+*/×^]|\\times|\\cdot|\bx)\s*+$")
# A completion that ends announcing its answer ("So, the answer would actually") was cut before stating
# it: whatever it said before is not its final answer.
_ANNOUNCE_AT_END = re.compile(r"\banswer\s++(?:would|will|is|should|must|might|could)\b"
                             r"(?:\s++(?:actually|then|now|probably|likely|really|simply|just|be|going|to|therefore|"
                             r"thus))*+$",
                             re.IGNORECASE)
MAX_WORDS_AFTER_ANSWER = 3
"""A marker-less final sentence answers with its last number only when at most this many words follow it
("In total she sold 72 clips."); "20 chickens, we need to multiply the total amount of feed by" does not."""
MIN_PROSE_WORDS = 1
"""A marker-less text that is not a bare answer answers only as prose: with at least this many words of
three letters or more ("We find that $x < 3$."); sub-word junk around numbers ("ab ANS: 0 (is 624") has none."""
MAX_TRAILING_PIECES = 2
"""Number-free sentences allowed after the answer sentence ("Let me know if you need more help!")."""
MIN_WORDS_AROUND_NUMBERS = 3
"""A marker-less text with fewer plain words than this, two or more different numbers, no math segment, and a
bracket that never closes or a stray zero-width character ("ing   ab 9 (GZ 232", "answer  ing\u200b 0  ab 1125")
is a random model's sub-words around numbers; "not it's not 10 it's 1,000.99" is still read."""
_STRAY_ZERO_WIDTH = re.compile("(?<!\\d)[\u200b\u200c\u200d\u2060\ufeff]|[\u200b\u200c\u200d\u2060\ufeff](?!\\d)")


def _sub_words_around_numbers(text: str, stray_invisible: bool) -> bool:
    """See MIN_WORDS_AROUND_NUMBERS (the caller has counted the words)."""
    if len(set(numbers_in(text))) < 2 or MATH_SEG.search(text):
        return False
    unbalanced = sum(text.count(c) for c in "([{") != sum(text.count(c) for c in ")]}")
    return unbalanced or stray_invisible


def _conclusion(tail: str, policy: ExtractionPolicy) -> Extraction:
    """The answer of a marker-less prose completion, or ``no_answer`` when it states none.

    1. The last sentence that holds a number, when it states a result ("So, 6 + 9 = 15."): its result.
    2. Else that sentence's number, when the sentence concludes the text (at most
       MAX_TRAILING_PIECES number-free sentences after it, and it opens with "So", "Therefore", ...
       or has at most MAX_WORDS_AFTER_ANSWER words after the number) and the number is new: a number the completion
       already wrote is a mention (an
       operand, a quantity of the question), not an answer.
    3. Else the last result statement, when everything after it only repeats numbers written before
       ("4 + 7 = 11. I added 4 and 7.").
    4. Else no answer: the completion never commits to one, and its last number is not paid.
    """
    pieces = sentence_pieces(tail)
    results = [r for r in RESULT.finditer(tail) if _final_result(tail, r)]
    for idx in range(len(pieces) - 1, -1, -1):
        start, piece = pieces[idx]
        if NUM_FIND.search(piece) or MATH_SEG.search(piece):
            break
    else:
        return Extraction(None, "none", "no_answer")
    end = start + len(piece)
    if asks_the_problem([p for _, p in pieces[idx + 1:]]):  # "Tom has 5 ... How many do they have?"
        return Extraction(None, "none", "restated")
    if _UNFINISHED_TAIL.search(tail):  # "... 4 + 4 = 8, 8 x": cut mid-formula, no answer stated
        return Extraction(None, "none", "no_answer")
    retracted = {_rhs(r) for r in results if _RETRACT.search(tail, r.end())}
    results = [r for r in results if not _RETRACT.search(tail, r.end())]
    inside = [r for r in results if start <= r.start() < end]
    ex = answer_in_region(piece.rstrip(". "), policy, "fallback")
    if inside:
        at = piece.rfind(ex.answer) if ex.answer is not None else -1
        later = at >= 0 and inside[-1].end() - start < at + len(ex.answer)
        if later and ex.answer not in set(numbers_in(tail[:start + at])):
            return ex  # "... = 6 So, the ordered pair is $(7, 6)$": the sentence's last, new answer
        return Extraction(_rhs(inside[-1]), "result")
    if ex.answer is None and ex.problem == "ambiguous":
        return ex
    if (ex.answer is not None and ex.answer not in retracted and len(pieces) - 1 - idx <= MAX_TRAILING_PIECES
            and _concludes(piece, ex.answer)):
        if restates_givens(tail, piece, ex.answer, numbers_in(piece)):  # "Tom has 5 apples and Jane has 3 apples."
            return Extraction(None, "fallback", "restated")
        if ex.answer not in set(numbers_in(tail[:start])) or repeats_a_result(
                tail[:start], ex.answer, {_rhs(r) for r in results if r.end() <= start}, numbers_in):
            return ex
    if results:
        last = results[-1]
        before = set(numbers_in(tail[:last.end()]))
        if set(numbers_in(tail[last.end():])) <= before:
            return Extraction(_rhs(last), "result")
    return Extraction(None, ex.method if ex.answer is not None else "none", "no_answer")


def _concludes(piece: str, answer: str) -> bool:
    """Whether ``answer`` ends ``piece``: the piece is the bare answer, or few words follow the answer."""
    p = piece.strip()
    if _BARE_NUMBER.fullmatch(p):
        return True
    if answer == p.rstrip(". ") and is_bare_answer(answer):  # the sentence is the answer, unless unfinished
        return (not _UNFINISHED.search(answer) and answer.count("(") == answer.count(")")
                and answer.count("{") == answer.count("}"))
    if _CONCLUDING.match(p):  # "Therefore, there are 12 distinct sequences that ..."
        return True
    k = piece.rfind(answer)
    if k < 0:
        return False
    after = piece[k + len(answer):]
    words_before = _WORDS_AFTER.findall(piece[:k])
    return bool(words_before or MATH_SEG.search(piece)) and len(_WORDS_AFTER.findall(after)) <= MAX_WORDS_AFTER_ANSWER


def extract_gold(gold: object) -> Extraction:
    """The answer in a dataset's gold: last box, GSM8K ``####``, an answer phrase, or the whole string."""
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        return Extraction(repr(gold) if isinstance(gold, float) else str(gold), "bare")
    if not isinstance(gold, str) or not gold.strip():
        return Extraction(None, "none", "no_answer")
    lenient = ExtractionPolicy(max_distinct_boxes=0, refuse_ambiguous=False, max_bare_numbers=0, commitment=False)
    text = normalize_surface(clean_text(gold))
    boxes = find_boxes(text)
    if boxes:
        last = [c.strip() for c in box_groups(text, boxes)[-1]]
        if not any(last):
            return Extraction(None, "boxed", "no_answer")
        return Extraction(", ".join(c for c in last if c) if len(last) > 1 else last[0], "boxed", n_boxes=len(boxes))
    k = text.rfind("####")
    if k >= 0:
        return Extraction(text[k + 4:].lstrip("# \t").split("\n", 1)[0].strip(), "hash")
    if (len(text) > 300 or "\n" in text.strip()) and len(text.split()) > 3:
        ex = extract_answer(text, lenient)
        if ex.answer is not None:
            return ex
    return Extraction(text.strip(), "bare")

