"""The commitment rule of the math reward, and the surface forms people write answers in.

**The commitment rule** (``ExtractionPolicy.commitment``, on by default): a completion is paid only for an
answer it commits to. Every extraction stage (boxes, ``####``, answer phrases, the marker-less fallback)
goes through :func:`committed`:

* a correction ("Wait,", "actually", "no,", "correction", "I made a mistake", "on second thought", ...)
  after an answer commits to the corrected value ("wait" as a verb, "they wait 3 minutes", is none); an
  answer withdrawn with no new value stated ("Answer: 8. Wait, that double counts.") is ``withdrawn``;
* two or more different final answers without a correction (two boxes with different values, "8 or 9",
  "if inclusive 8, if exclusive 7", a footnote that offers another value) are a ``hedge``; the same value
  repeated is one answer; every box group is a final-answer statement (a box is the prompt's format for
  one), and an explicit "final answer" outranks earlier plain ones;
* a negated answer ("That can't be 12.", "The answer is not $\\boxed{12}$.") is ``negated``; a bound
  ("at least 12", "more than 12") is ``bound``; a question ("Is it 14, maybe?") is ``question``;
* a completion cut by its token budget (``finish_reason="length"`` or ``truncated=True`` in the call's
  meta) whose answer is the number it ends on is ``truncated``: the number may be cut ("= 8" of "= 81");
  without the meta, a completion that ends unpunctuated on a false result whose true value starts with
  the stated digits ("So 9 * 9 = 8") is ``truncated`` too.

Where careful graders could disagree (several boxes with no correction: intermediate results or a
hedge?), the conservative reading is taken: not paid, with the reason in ``info``.

**Surface forms** (always on, :func:`normalize_surface`): HTML tags around answers (``<b>12</b>``),
``<sup>``, unit exponents (``9 m^2`` is 9 square metres, never 2), signed currency (``-$5`` is -5),
unicode fractions and roots (``½``, ``2⅓``, ``√2``); :func:`words_to_number` reads an answer written in
words ("twelve", "one hundred five").
"""

from __future__ import annotations

import re
from typing import Callable

from rewardlab.rewards.math.bounded import parse_int
from rewardlab.rewards.math.boxes import box_groups, find_boxes
from rewardlab.rewards.math.equiv import FAST_MAX_CHARS, fast_compare
from rewardlab.rewards.math.reading import (
    ANSWER_PHRASE, PLACEHOLDERS, RESULT, Extraction, answer_in_region, first_sentence, is_bare_answer, numbers_in,
    sentence_pieces,
)

# ---------------------------------------------------------------------------- surface forms

_TAG = re.compile(r"</?(?:b|strong|i|em|u|mark|span|p|div|code|answer|final_answer|final|result|br|tt)\b[^<>]{0,80}>",
                  re.IGNORECASE)
_SUP = re.compile(r"<sup>\s*([^<>]{1,10}?)\s*</sup>", re.IGNORECASE)
_UNITS = (r"(?:cm|mm|km|dm|m|in|inches|inch|ft|feet|foot|yd|yards?|mi|miles?|meters?|metres?|centimeters?|"
          r"centimetres?|units?|sq|cu)")
# a unit then its exponent ("9 m^2", "4 cm^3", "5\,\text{cm}^3", "6 m²"): the exponent belongs to the unit.
# A one-letter unit needs a space or a \text wrapper ("4m^2" is a polynomial).
_UNIT_POWER = re.compile(r"(\d)(\s*+(?:\\[,;: ]|~)?\s*+)(\\(?:text|mathrm|mbox|textrm)\s*+\{\s*+)?"
                         r"(" + _UNITS + r")(\s*+\})?\s*+(\^\s*+\{?\s*+[23]\s*+\}?|[²³])(?![\d\w])")
_SIGNED_CURRENCY = re.compile(r"(?<![\w$\\])[-\u2212]\s?\\?\$\s?(?=\d)")
_VULGAR = {"½": "1/2", "⅓": "1/3", "⅔": "2/3", "¼": "1/4", "¾": "3/4", "⅕": "1/5", "⅖": "2/5", "⅗": "3/5",
           "⅘": "4/5", "⅙": "1/6", "⅚": "5/6", "⅛": "1/8", "⅜": "3/8", "⅝": "5/8", "⅞": "7/8", "⅐": "1/7",
           "⅑": "1/9", "⅒": "1/10"}
_VULGAR_RE = re.compile("(\\d?)([" + "".join(_VULGAR) + "])")
_ROOT = re.compile(r"([√∛∜])\s*+(\d+(?:\.\d+)?|\([^()]{1,60}\)|\{[^{}]{1,60}\}|[A-Za-z])")
_ROOT_INDEX = {"√": "", "∛": "[3]", "∜": "[4]"}


_MIXED = re.compile(r"(?<![\d.,/^])(\d{1,6}) (\d{1,6})/(\d{1,6})(?![\d/]|\.\d)")


def _mixed(m: re.Match) -> str:
    """"2 1/2" (a whole number, one space, a proper fraction) is the mixed number 5/2: written so."""
    a, b = parse_int(m.group(2)), parse_int(m.group(3))
    return f"{parse_int(m.group(1)) * b + a}/{b}" if 0 < a < b else m.group(0)


def _unit_power(m: re.Match) -> str:
    """``9 m^2`` -> ``9 \\text{m}²``: the power is kept as a superscript character, which no number
    pattern reads (the exponent is never the answer) and the comparison reads as the unit's power (cm²
    is not cm³)."""
    unit = m.group(4)
    power = "²" if "2" in m.group(6) or m.group(6) == "²" else "³"
    if len(unit) == 1:
        # "9 m" would read as the product 9m: keep the unit a unit
        return m.group(0) if not (m.group(2) or m.group(3)) else m.group(1) + " \\text{" + unit + "}" + power
    return m.group(1) + " " + unit + power


def _root(m: re.Match) -> str:
    arg = m.group(2)
    if arg[0] in "({":
        arg = arg[1:-1]
    return f"\\sqrt{_ROOT_INDEX[m.group(1)]}{{{arg}}}"


_CJK_PUNCT = str.maketrans({"。": ". ", "：": ": ", "，": ", ", "！": "! ", "？": "? ", "；": "; ", "（": " (",
                            "）": ") ", "＄": "$", "’": "'"})


def normalize_surface(text: str) -> str:
    """Rewrite the surface forms listed in the module doc; linear, bounded patterns only."""
    if any(c in text for c in "。：，！？；（）＄’"):  # full-width punctuation ends sentences as ". " does
        text = text.translate(_CJK_PUNCT)
    if "<" in text:
        text = _SUP.sub(r"^\1", text)
        text = _TAG.sub(" ", text)
    if "^" in text or "²" in text or "³" in text:
        text = _UNIT_POWER.sub(_unit_power, text)
    if "$" in text:
        text = _SIGNED_CURRENCY.sub("-", text)
    if any(c in text for c in "√∛∜"):
        text = _ROOT.sub(_root, text)
    if _VULGAR_RE.search(text):
        text = _VULGAR_RE.sub(lambda m: (m.group(1) + " " if m.group(1) else "") + _VULGAR[m.group(2)], text)
    if "/" in text:
        text = _MIXED.sub(_mixed, text)
    return text


_SMALL = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10 ** 6, "billion": 10 ** 9}
_NOT_UNITS = {"of", "or", "and", "to", "more", "less", "than", "times", "plus", "minus", "over", "is", "the", "a"}
_WORDS_ANSWER = re.compile(r"(?:(?:negative|minus)\s++)?[a-z]++(?:[\s-]++[a-z]++){0,7}", re.IGNORECASE)


def words_to_number(s: str) -> int | None:
    """``"twelve"`` -> 12, ``"one hundred and five"`` -> 105, ``"negative three"`` -> -3; None when ``s`` is
    not a number written in words (at most two trailing words, a unit: "twelve apples")."""
    s = s.strip().strip("*").rstrip(".!").strip()
    if not s or len(s) > 80 or not _WORDS_ANSWER.fullmatch(s):
        return None
    words = [w.lower() for w in re.split(r"[\s-]+", s) if w]
    sign = 1
    if words[0] in ("negative", "minus"):
        sign, words = -1, words[1:]
    total, current, seen, k = 0, 0, False, 0
    for k, w in enumerate(words):
        if w in _SMALL:
            current += _SMALL[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w == "hundred" and seen:
            current *= 100
        elif w in _SCALES and seen:
            total, current = total + current * _SCALES[w], 0
        elif w == "and" and seen:
            continue
        else:
            k -= 1
            break
        seen = True
    else:
        k = len(words) - 1
    rest = words[k + 1:]
    if not seen or len(rest) > 2 or any(w in _SMALL or w in _TENS or w in _SCALES or w in _NOT_UNITS for w in rest):
        return None
    return sign * (total + current)


_NUMBER_WORD = ("(?:" + "|".join(sorted(list(_SMALL) + list(_TENS) + list(_SCALES), key=len, reverse=True))
                + ")")
_WORD_RUN = re.compile(r"\b" + _NUMBER_WORD + r"(?:[\s-]++(?:and\s++)?" + _NUMBER_WORD + r")*\b", re.IGNORECASE)


def number_words_conclusion(text: str):
    """A digit-free completion whose last sentence states one number in words ("So she has twelve apples.")."""
    pieces = [p for p in re.split(r"(?<=[.!])\s+|\n+", text.strip()[-2000:]) if p.strip()]
    if not pieces or pieces[-1].rstrip().endswith("?"):
        return None
    runs = {words_to_number(m.group(0)) for m in _WORD_RUN.finditer(pieces[-1])} - {None}
    words = re.findall(r"[A-Za-z]{2,}", pieces[-1])
    if len(runs) != 1 or len(words) > 12 or re.search(r"\b(?:not|or|n't)\b", pieces[-1], re.IGNORECASE):
        return None
    return Extraction(str(runs.pop()), "number_words")


# ---------------------------------------------------------------------------- the commitment rule

_CORRECTION = re.compile(
    r"\b(?:wait(?=\s*+[,.!:;\u2014-]|\s++(?:a\s++(?:moment|minute|second|sec)|no|actually|let)\b)"
    r"|actually|correction|oops|scratch\s++that|on\s++second\s++thought|no\s++wait"
    r"|I\s++(?:made|have\s++made|'ve\s++made)\s++(?:a\s++)?(?:mistake|an?\s++error)|I\s++was\s++wrong"
    r"|let\s++me\s++(?:re-?check|recompute|redo|recalculate|reconsider|correct\s++(?:that|this|myself))"
    # Spanish, French, German: "espera", "en realidad"; "attends", "en fait"; "warte", "eigentlich", "Moment,"
    r"|espera|en\s++realidad|correcci[oó]n|me\s++equivoqu[eé]|attends|attendez|en\s++fait|je\s++me\s++suis\s++tromp[eé]"
    r"|warte|eigentlich|korrektur|ich\s++habe\s++mich\s++(?:verrechnet|geirrt))\b"
    r"|(?:^|(?<=[.!?:;])\s*+|\n\s*+)(?:no|nein|non)\s*+[,.!:]|(?:^|(?<=[.!?:;])\s*+|\n\s*+)moment\s*+[,!:]"
    r"|等等|不对|更正|纠正|其实|实际上",  # Chinese: "wait", "that's wrong", "correction", "actually"
    re.IGNORECASE)
_IT_IS = re.compile(r"^(?:it|that|this)\s++(?:is|was|'s|should\s++be|must\s++be)\s++(?=[-$\\\d])", re.IGNORECASE)
_WEAK = re.compile(r"actually|en\s++realidad|en\s++fait|eigentlich|其实|实际上", re.IGNORECASE)
_RETRACTION = re.compile(r"\b(?:mistakes?|wrong|incorrect|errors?|double[-\s]?count\w*|over-?count\w*|under-?count\w*"
                         r"|miscount\w*|not\s++(?:right|correct)|doesn't\s++work|is\s++off"
                         r"|incorrect[oa]|equivoqu\w*|cont[eé]\s++dos\s++veces|faux|erreur|tromp\w*|compt[eé]\s++deux\s++fois"
                         r"|falsch|fehler|doppelt\s++gez[aä]hlt|verrechnet)\b|算错|错了|不对|重复计算", re.IGNORECASE)
_NEG_BEFORE = re.compile(r"(?:\bnot|n't|\bnever|\bcannot|\bno\s++longer)(?:\s++(?:be|equal(?:\s++to)?|exactly))?\s*+$"
                         # Spanish "no es", French "n'est pas", German "ist nicht", Chinese "不是"
                         r"|(?:\bno\s++(?:es|son|puede\s++ser|será|sería|era|vale|da)|\bn'(?:est|était|a)\s++pas(?:\s++de)?"
                         r"|\bne\s++(?:peut|sont|vaut|fait|sera)\s++pas(?:\s++être)?|\bnicht|\bkeine?"
                         r"|不是|不等于|不可能是|不会是)\s*+(?:igual\s++a|égal\s++à|gleich)?\s*+$",
                         re.IGNORECASE)
_BOUND = (r"\b(?:at\s++(?:least|most)|(?:no\s++)?(?:more|less|fewer|greater|smaller|larger)\s++than"
          r"|upwards\s++of)")
_BOUND_BEFORE = re.compile(_BOUND + r"\s*+$", re.IGNORECASE)
_BOUND_START = re.compile(_BOUND + r"\s", re.IGNORECASE)
_OPENERS = re.compile(r"(?:\s|\$|\*|\\\(|\\\[|\\boxed\s*+\{|\\fbox\s*+\{|\{|\(|=|:)*$")
_CONDITION = re.compile(r"\b(?:if|when|unless|otherwise|else)\b", re.IGNORECASE)
# a later sentence that offers another value for the answer: "Alternatively, it could be 9", "otherwise it would be
# 24", "[^1]: If you count the endpoints, it is 9"; not a remark about another quantity ("If she had 2 more, she
# would have 8", "if order mattered there would be 24 ways")
_ALTERNATIVE = re.compile(r"\b(?:alternatively|otherwise|or\s++(?:maybe|perhaps|possibly)|(?:could|might)\s++also\s++be"
                          r"|(?:it|this|that|the\s++answer)\s++(?:would|could|might|may)\s++(?:also\s++)?be"
                          r"|(?:it|the\s++answer)\s++is|it's)\b", re.IGNORECASE)
_FINAL = re.compile(r"final", re.IGNORECASE)
MAX_STATEMENTS = 16
"""Answer phrases (and ``####`` lines) read as statements: the last this many."""
_ANSWER_METHODS = ("boxed", "hash", "phrase", "result")
Core = Callable[[str, object], object]


def _same(a: str, b: str) -> bool:
    """Whether two stated values are the same answer. Runs on the caller's thread, so the fast comparison
    sees at most ``FAST_MAX_CHARS`` characters (the rule of the math reward's fast path); longer values that
    differ as text count as different (conservative: a hedge is not paid)."""
    if " ".join(a.split()) == " ".join(b.split()):
        return True
    if len(a) > FAST_MAX_CHARS or len(b) > FAST_MAX_CHARS:
        return False
    try:
        d = fast_compare(a, b)
    except Exception:  # noqa: BLE001 - undecidable here: different strings are different answers
        return False
    return bool(d.equal)


def _denied_before(head: str) -> str | None:
    """``negated`` / ``bound`` when ``head`` (the text just before a value) denies or bounds it."""
    opener = _OPENERS.search(head)
    head = head[:opener.start()] if opener else head
    if _NEG_BEFORE.search(head):
        return "negated"
    return "bound" if _BOUND_BEFORE.search(head) else None


def _box_statements(text: str) -> list[tuple[int, str, bool]]:
    """Every box group states an answer (a box is the prompt's "final answer" format)."""
    boxes = [b for b in find_boxes(text) if " ".join(b[2].split()).lower() not in PLACEHOLDERS]
    if not boxes:
        return []
    out: list[tuple[int, str, bool]] = []
    groups = box_groups(text, boxes)
    i = 0
    for g in groups:
        start = boxes[i][0]
        i += len(g)
        value = ", ".join(c.strip() for c in g if c.strip())
        if not value:
            continue
        head = text[max(0, start - 80):start]
        if _denied_before(head):
            continue  # "The answer is not $\\boxed{12}$" states nothing
        phrase = None
        for m in ANSWER_PHRASE.finditer(head):
            phrase = m
        introduced = phrase is not None and _OPENERS.fullmatch(head[phrase.end():]) is not None
        out.append((start, value, bool(introduced and _FINAL.search(phrase.group(0)))))
    return out


def statements(text: str, policy) -> list[tuple[int, str, bool]]:
    """Every final-answer statement of ``text``: (position, value, says "final")."""
    lenient = type(policy)(refuse_ambiguous=False, max_distinct_boxes=0, commitment=False)
    # the last MAX_STATEMENTS of each kind: bounded work on a completion of 10,000 answer phrases
    phrases = list(ANSWER_PHRASE.finditer(text))[-MAX_STATEMENTS:] if policy.use_phrase else []
    hashes = [m.start() for m in re.finditer("####", text)][-MAX_STATEMENTS:] if policy.use_hash else []
    out = _box_statements(text) if policy.use_boxed else []
    for p in phrases:
        region = first_sentence(text[p.end():]).strip().strip("*").strip()
        if not region or re.match(r"\$?\s*+\\(?:boxed|fbox)", region):
            continue  # the box is the statement
        window = text[_sentence_start(text, p.start()):p.end()] + region
        nums = set(numbers_in(window)) if len(_CONDITION.findall(window)) >= 2 else set()
        if len(nums) >= 2:  # "if included it is 8; if not, 7"
            out.extend((p.start(), n, False) for n in sorted(nums))
            continue
        ex = answer_in_region(region, lenient, "phrase")
        if _BOUND_START.match(region):
            continue  # "at least 12" states no answer
        strict = answer_in_region(region, policy, "phrase")
        if strict.problem == "ambiguous" or (ex.answer is not None and _or_values(ex.answer)):
            out.extend((p.start(), n, False) for n in sorted(set(numbers_in(region))))
            continue
        if ex.answer is not None and re.search(r"\d", ex.answer) and (
                is_bare_answer(region) or re.match(r"[-$\d\\(]", region)):
            out.append((p.start(), ex.answer, bool(_FINAL.search(p.group(0)))))
    for k in hashes:
        line = text[k + 4:].lstrip("# \t").split("\n", 1)[0].strip()
        if line:
            out.append((k, line, False))  # "####" marks an answer; it does not overrule a different one
    return sorted(out)


_OR_SPLIT = re.compile(r"\s*+(?:,\s*+(?:or\s++)?|\\text\s*+\{\s*+or\s*+\}|\b(?:or|o|ou|oder)\b|或)\s*+")


def _or_values(answer: str) -> bool:
    """"8 or 9", "$5$, $6$ or $7$": different values offered as alternatives (solution sets such as
    "x = 1 or x = -2" are answers, not hedges)."""
    if not re.search(r"\b(?:or|o|ou|oder)\b|或", answer) or "=" in answer:
        return False
    parts = [p.strip().strip("$").strip() for p in _OR_SPLIT.split(answer)]
    if len(parts) < 2 or not all(re.fullmatch(r"-?[\d.,/]+%?|\\frac\{\d+\}\{\d+\}", p) for p in parts):
        return False
    return any(not _same(parts[0], p) for p in parts[1:])


def _hedged(text: str, policy) -> bool:
    """Two or more different final answers (an explicit "final answer" outranks earlier plain ones)."""
    st = statements(text, policy)
    finals = [s for s in st if s[2]]
    if finals:
        st = finals + [s for s in st if s[0] > finals[-1][0] and not s[2]]
    values: list[str] = []
    for _, v, _ in st:
        if not any(_same(v, w) for w in values):
            values.append(v)
            if len(values) >= 2:
                return True
    return False


def _answer_span(text: str, ex) -> tuple[int, int] | None:
    """Where the extracted answer stands in ``text`` (its last occurrence; the last box group's box)."""
    if ex.method == "boxed":
        boxes = find_boxes(text)
        same = [b for b in boxes if b[2].strip() == ex.answer.strip()] or boxes[-1:]
        if same:
            return same[-1][0], same[-1][1]
    k = -1
    if ex.method in ("phrase", "hash"):  # the value right after its marker, not a later mention
        marks = [m.start() for m in ANSWER_PHRASE.finditer(text)] if ex.method == "phrase" else [text.rfind("####")]
        k = text.find(ex.answer, max(marks, default=0))
    k = k if k >= 0 else text.rfind(ex.answer)
    return (k, k + len(ex.answer)) if k >= 0 else None


_END = re.compile(r"[.!?](?=\s|$)|\n")
_BOUNDARY = re.compile(r"[.!?](?=\s)|\n")


def _sentence_start(text: str, at: int) -> int:
    """Where the sentence holding ``at`` starts, looking back at most 600 characters (bounded work per statement:
    a text with no sentence boundary once made every answer phrase rescan it from the start)."""
    start = max(0, at - 600)
    for m in _BOUNDARY.finditer(text, start, at):
        start = m.end()
    return start


def _sentence_end(text: str, at: int) -> int:
    m = _END.search(text, at)
    return m.end() if m else len(text)


def _position_problem(text: str, ex) -> str | None:
    """``negated`` / ``bound`` / ``question`` / ``hedge`` read around the answer where it stands."""
    if _BOUND_START.match(ex.answer):
        return "bound"
    span = _answer_span(text, ex)
    if span is None:
        return None
    s, e = span
    denied = _denied_before(text[max(0, s - 80):s])
    if denied:
        return denied
    end = _sentence_end(text, e)
    if text[end - 1:end] == "?":
        return "question"
    start = _sentence_start(text, s)
    window = text[start:end]
    nums = {x for x in numbers_in(window)}
    if len(nums) >= 2 and len(_CONDITION.findall(window)) >= 2:
        return "hedge"  # "If inclusive the answer is 8, if exclusive 7."
    return _trailing_alternative(text[end:], ex.answer) or _denied_later(text[end:], ex.answer)


def _denied_later(after: str, answer: str) -> str | None:
    """The same value denied after it is stated ("The answer is 61. That can't be 61."): negated."""
    answer = answer.strip().strip("$").strip()
    if not answer:
        return None
    k = after.find(answer)
    while 0 <= k < 4000:
        if _denied_before(after[max(0, k - 80):k]) == "negated":
            return "negated"
        k = after.find(answer, k + 1)
    return None


def _trailing_alternative(after: str, answer: str) -> str | None:
    """A later sentence that offers another value ("...; if you count the ends it would be 9"): a hedge."""
    for _, piece in sentence_pieces(after[:2000]):
        if not _ALTERNATIVE.search(piece):
            continue
        for n in numbers_in(piece):
            if not _same(n, answer) and not re.search(r"\[\^?" + re.escape(n) + r"\]", piece):
                return "hedge"
    return None


_WORD_OPS = (("divided by", "/"), ("plus", "+"), ("minus", "-"), ("times", "*"), ("×", "*"), ("·", "*"), (" x ", " * "))


def cut_result(text: str) -> bool:
    """A completion that ends, unpunctuated, on a false result whose value starts with the stated digits
    ("So 9 * 9 = 8" of "= 81"): cut mid-number by its budget, whatever the meta says."""
    from rewardlab.rewards.math.values import parse_scalar

    tail = text.rstrip()
    if not tail or not tail[-1].isdigit():
        return False
    last = None
    for last in RESULT.finditer(tail[-300:]):
        pass
    if last is None or last.group("rhs") is None or last.end() != len(tail[-300:]):
        return False
    lhs = last.group(0)[:last.start("rhs") - last.start()]
    lhs = re.sub(r"\s*+,?\s*+(?:=|equals?|is\s++equal\s++to|is|makes|gives|(?:for\s++)?a\s++total\s++of)\s*+$", "", lhs)
    for word, op in _WORD_OPS:
        lhs = lhs.replace(word, op)
    try:
        value = parse_scalar(lhs).value
        exact = value.value() if value.is_const() else None
    except Exception:  # noqa: BLE001 - not evaluable here: no claim
        return False
    if exact is None or exact.denominator != 1 or exact < 0:
        return False
    rhs = last.group("rhs").replace(",", "")
    return str(exact) != rhs and str(exact).startswith(rhs)


def truncated(text: str, answer: str | None) -> bool:
    """A completion cut by its budget whose answer is the number it ends on (it may be cut mid-number)."""
    if not answer or not isinstance(text, str):
        return False
    tail = text.rstrip()
    return bool(tail) and tail[-1].isdigit() and tail.endswith(answer.strip().rstrip("$").strip())


def _judge(text: str, policy, core: Core, first=None):
    """One text without corrections: the core extraction (``first`` when already made), then the commitment
    checks."""
    ex = _undenied(text, policy, core, first)
    if ex.answer is None:
        return ex
    if _hedged(text, policy) or _or_values(ex.answer):
        return type(ex)(None, ex.method, "hedge", n_boxes=ex.n_boxes)
    problem = _position_problem(text, ex) or ("truncated" if ex.method == "result" and cut_result(text) else None)
    if problem is not None:
        return type(ex)(None, ex.method, problem, n_boxes=ex.n_boxes)
    return ex


def _denied_at(text: str, ex) -> int | None:
    """Where the statement ``ex`` was read from starts, when it denies or bounds its value; else None."""
    if ex.method == "phrase" and (ex.answer is None and ex.problem == "negated"
                                  or ex.answer is not None and _BOUND_START.match(ex.answer)):
        last = None
        for last in ANSWER_PHRASE.finditer(text):
            pass
        return last.start() if last is not None else None
    if ex.method == "boxed" and ex.answer is not None:
        boxes = find_boxes(text)
        if boxes and _denied_before(text[max(0, boxes[-1][0] - 80):boxes[-1][0]]):
            return boxes[-1][0]
    return None


def _undenied(text: str, policy, core: Core, first=None):
    """The core extraction; when the statement it read denies its value ("The answer is 58. The answer is at
    least 13.2."), the answer stated before that statement (a few steps back at most)."""
    ex = first if first is not None else core(text, policy)
    cut_text = text
    for _ in range(4):
        at = _denied_at(cut_text, ex)
        if at is None:
            return ex
        cut_text = cut_text[:at]
        earlier = core(cut_text, policy) if cut_text.strip() else None
        if earlier is None or earlier.answer is None or not re.search(r"[\d\\]", earlier.answer):
            break  # "Die Antwort ist nicht 12.": the word before the phrase ("Die") states nothing
        ex = earlier
    if ex.answer is None:
        return ex
    problem = "bound" if _BOUND_START.match(ex.answer) else "negated"
    return type(ex)(None, ex.method, problem, n_boxes=ex.n_boxes)


_REFUSED = ("hedge", "negated", "bound", "question", "ambiguous", "box_spam", "number_spam")


def committed(text: str, policy, core: Core):
    """The answer ``text`` commits to (see the module doc); ``core`` is the extraction without the rule."""
    whole = core(text, policy)
    if whole.problem in ("box_spam", "number_spam"):
        return whole  # a correction does not launder spam
    marker = None
    for m in _CORRECTION.finditer(text):
        marker = m
    if marker is not None:
        head, tail = text[:marker.start()], text[marker.end():].lstrip(" :,.!")
        tail = _IT_IS.sub("", tail, count=1)  # "it is 7." states 7
        before = core(head, policy) if re.search(r"\d", head) else None
        if before is not None and (before.answer is not None or before.problem != "no_answer"):
            out = _judge(tail, policy, core)
            strong = not _WEAK.fullmatch(marker.group(0).strip())
            retracts = _RETRACTION.search(tail[:300]) is not None
            if out.answer is not None and (strong or retracts or out.method in _ANSWER_METHODS):
                out.corrected = True
                return out
            if out.answer is None and out.problem in _REFUSED:
                return out
            if out.answer is None and retracts:
                return type(out)(None, "none", "withdrawn")
    return _judge(text, policy, core, whole)
