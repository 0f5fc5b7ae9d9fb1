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

Reward-hacking guards (on by default): more than ``max_distinct_boxes`` different boxed answers
("box_spam"), an answer phrase or final sentence that offers several numbers with "or" / "between"
/ "either" ("ambiguous"), and an answer that hides among many bare numbers ("number_spam") are
refused with a reason instead of being graded.

Try it: ``rewardlab reward math --completion TEXT --gold G`` shows the extracted answer (``pred``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STOP_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>", "</s>")
BOX_COMMANDS = ("\\boxed", "\\fbox")
MAX_ANSWER_CHARS = 20_000
"""Extracted answers longer than this are truncated (and will not compare equal to a short gold)."""


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


@dataclass
class Extraction:
    """The extracted answer (or why there is none) and how it was found."""

    answer: str | None
    method: str
    """"boxed", "hash", "phrase", "bare", "last_number", "last_math", or "none"."""
    problem: str | None = None
    """None, or a reason code: "no_answer", "box_spam", "ambiguous", "number_spam", "empty_box"."""
    n_boxes: int = 0


def clean_text(text: str, strip_thinking: bool = True) -> str:
    """Cut at the first chat-template stop token and drop a closed reasoning block."""
    for tok in STOP_TOKENS:
        k = text.find(tok)
        if k >= 0:
            text = text[:k]
    if strip_thinking:
        k = text.rfind("</think>")
        if k >= 0:
            text = text[k + len("</think>"):]
    return text


def _closing_braces(text: str) -> dict[int, int]:
    """Map each unescaped ``{`` to the index just past its closing ``}`` (unbalanced ones are absent).

    One linear pass for the whole text: matching each box's brace on its own would rescan to the end
    of the text for every unbalanced ``\\boxed{`` (quadratic in a completion of 10,000 of them)."""
    out: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            out[stack.pop()] = i + 1
        i += 1
    return out


def find_boxes(text: str) -> list[tuple[int, int, str]]:
    """Outermost ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed N`` spans as (start, end, content)."""
    out: list[tuple[int, int, str]] = []
    pos = 0
    n = len(text)
    nxt = {cmd: text.find(cmd) for cmd in BOX_COMMANDS}  # next occurrence of each command
    closers: dict[int, int] | None = None
    while True:
        for cmd in BOX_COMMANDS:
            if 0 <= nxt[cmd] < pos:
                nxt[cmd] = text.find(cmd, pos)
        starts = [(k, cmd) for cmd, k in nxt.items() if k >= 0]
        if not starts:
            break
        s, cmd = min(starts)
        j = s + len(cmd)
        if j < n and text[j].isalpha():  # \boxedx... is another command
            pos = j
            continue
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == "{":
            if closers is None:
                closers = _closing_braces(text)
            e = closers.get(j, -1)
            if e < 0:  # unbalanced: take the rest of the line, without the brace
                nl = text.find("\n", j)
                e = n if nl < 0 else nl
                content = text[j + 1:e]
            else:
                content = text[j + 1:e - 1]
        else:  # \boxed 5
            m = re.match(r"[^\s$]+", text[j:j + 200])
            if not m:
                pos = j
                continue
            e = j + m.end()
            content = m.group(0)
        out.append((s, e, content))
        pos = max(e, s + 1)
    return out


_WORD = re.compile(r"[A-Za-z]+")
_CONNECTOR_WORDS = {"and", "or"}


def _is_connector(sep: str) -> bool:
    """Whether the text between two boxes joins them into one list answer."""
    if len(sep) > 80 or "." in sep.replace("\\.", ""):
        return False
    s = re.sub(r"\\(?:quad|qquad|text|textbf|mathrm|mbox|,|;|!| )", " ", sep)
    s = re.sub(r"\\[\[\]()]|[${}]", " ", s)
    words = [w.lower() for w in _WORD.findall(s)]
    if not words:
        return True
    has_conn = any(w in _CONNECTOR_WORDS for w in words)
    others = [w for w in words if w not in _CONNECTOR_WORDS]
    return has_conn and len(others) <= 3


def _box_groups(text: str, boxes: list[tuple[int, int, str]]) -> list[list[str]]:
    groups: list[list[str]] = []
    prev_end = -1
    for s, e, content in boxes:
        if groups and _is_connector(text[prev_end:s]):
            groups[-1].append(content)
        else:
            groups.append([content])
        prev_end = e
    return groups


_HASH = re.compile(r"####")
# Why these cannot blow up (tests/test_fuzz_rewards.py runs regexploit and a fuzzer over them):
#   _PHRASE runs over the whole completion. Each start needs the literal "answer", "final" or "the";
#     every whitespace run next to an optional part is possessive, so a match attempt is linear in
#     the run it meets and never re-splits it (the original ``\s*(?:\*\*)?\s*`` was quadratic in a
#     run of spaces after "answer").
#   _NUM_FIND cannot start inside a number (look-behind); comma groups are delimited by literal
#     commas; the fraction part is possessive. _MATH_SEG scans at most 2,000 characters per opening
#     delimiter. Both only see a sentence (<= 600 chars) or the last 4,000 characters.
#   _LEADING_WORDS is anchored at the start and bounded ({0,40}).
_PHRASE = re.compile(
    r"(?:final\s++answer|\banswer)s?\s*+(?:\*\*)?\s*+(?:is|are|:|=)\s*+(?::|\*\*)?\s*+"
    r"|\bthe\s++(?:final\s++)?(?:result|solution)\s++is\s*+:?\s*+",
    re.IGNORECASE,
)
_NUM_FIND = re.compile(r"(?<![\w.])-?(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d])|\d+)(?:\.\d+)?(?:\s*+/\s*+\d+)?%?|(?<![\w.])-?\.\d+")
_HEDGE = re.compile(r"\b(?:or|either|between|maybe|possibly|perhaps)\b", re.IGNORECASE)
_HEDGE_STRONG = re.compile(r"\b(?:either|between|maybe|possibly|perhaps)\b", re.IGNORECASE)
_MATH_SEG = re.compile(r"\$\$(.{1,2000}?)\$\$|\$(.{1,2000}?)\$|\\\((.{1,2000}?)\\\)|\\\[(.{1,2000}?)\\\]", re.DOTALL)
_LEADING_WORDS = re.compile(r"^[A-Za-z][A-Za-z ]{0,40}:?\s*+(?=\$|\\\(|\\\[)")
_BARE_OK_WORDS = {"and", "or", "pct", "percent", "percentage", "of", "to"}


def _sentence(region: str) -> str:
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
    return [w.lower() for w in re.findall(r"[A-Za-z]{2,}", s)]


def is_bare_answer(s: str) -> bool:
    """Whether ``s`` as a whole reads like an answer rather than prose (at most two plain words)."""
    if len(s) > 400:
        return False
    words = [w for w in _words_outside_commands(s) if w not in _BARE_OK_WORDS]
    return len(words) <= 2


def _numbers(s: str) -> list[str]:
    return [m.group(0) for m in _NUM_FIND.finditer(s)]


def _from_region(region: str, policy: ExtractionPolicy, method: str) -> Extraction:
    """Pick the answer inside a region that follows a marker (or a whole marker-less text)."""
    sent = region.strip()
    if not sent:
        return Extraction(None, method, "no_answer")
    nums = _numbers(sent)
    if policy.refuse_ambiguous and len(set(nums)) >= 2 and _HEDGE_STRONG.search(re.sub(r"\$[^$]*\$", " ", sent)):
        return Extraction(None, method, "ambiguous")
    if is_bare_answer(sent):
        return Extraction(sent, method if method != "fallback" else "bare")
    if policy.refuse_ambiguous and len(set(nums)) >= 2 and _HEDGE.search(re.sub(r"\$[^$]*\$", " ", sent)):
        return Extraction(None, method, "ambiguous")
    last_math = None
    for m in _MATH_SEG.finditer(sent):
        last_math = m
    last_num = None
    for m in _NUM_FIND.finditer(sent):
        if last_math is None or not (last_math.start() <= m.start() < last_math.end()):
            last_num = m
    if last_math is not None and (last_num is None or last_math.end() >= last_num.end()):
        inner = next(g for g in last_math.groups() if g is not None)
        return Extraction(inner.strip(), "last_math" if method == "fallback" else method)
    if last_num is not None:
        return Extraction(last_num.group(0), "last_number" if method == "fallback" else method)
    return Extraction(None, method, "no_answer")


def _marker_answer(text: str, policy: ExtractionPolicy, last_phrase: re.Match | None) -> Extraction | None:
    """The answer after the last ``####`` or answer phrase, whichever comes last; None if neither."""
    k = text.rfind("####") if policy.use_hash else -1
    if k >= 0 and (last_phrase is None or k >= last_phrase.start()):
        line = text[k + 4:].lstrip("# \t").split("\n", 1)[0].strip()
        if line:
            return Extraction(line[:MAX_ANSWER_CHARS], "hash")
    if last_phrase is not None:
        region = _sentence(text[last_phrase.end():])
        region = region.strip().strip("*").strip()
        if region.startswith('\\"') or region.startswith('"'):
            region = region.strip('\\"').strip()
        ex = _from_region(region, policy, "phrase")
        if ex.answer is not None or ex.problem == "ambiguous":
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
    if not text.strip():
        return Extraction(None, "none", "no_answer")

    last_phrase = None
    if policy.use_phrase:
        for m in _PHRASE.finditer(text):
            last_phrase = m
    if policy.use_boxed:
        boxes = find_boxes(text)
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
            groups = _box_groups(text, boxes)
            distinct = {tuple(" ".join(c.split()) for c in g) for g in groups}
            if policy.max_distinct_boxes and len(distinct) > policy.max_distinct_boxes:
                return Extraction(None, "boxed", "box_spam", n_boxes=len(boxes))
            last = [c.strip() for c in groups[-1]]
            if not any(last):
                return Extraction(None, "boxed", "empty_box", n_boxes=len(boxes))
            ans = ", ".join(c for c in last if c) if len(last) > 1 else last[0]
            return Extraction(ans[:MAX_ANSWER_CHARS], "boxed", n_boxes=len(boxes))

    ex = _marker_answer(text, policy, last_phrase)
    if ex is not None:
        return ex

    if policy.fallback == "none":
        return Extraction(None, "none", "no_answer")
    stripped = text.strip()
    lead = _LEADING_WORDS.match(stripped)
    if lead and is_bare_answer(stripped):
        stripped = stripped[lead.end():].strip()
    if is_bare_answer(stripped):
        nums = _numbers(stripped)
        if policy.max_bare_numbers and len(nums) > policy.max_bare_numbers and len(set(nums)) > policy.max_bare_numbers:
            return Extraction(None, "bare", "number_spam")
        return Extraction(stripped[:MAX_ANSWER_CHARS], "bare")
    # Prose: the last sentence that contains a number or math.
    tail = stripped[-4000:]
    pieces = re.split(r"(?<=[.!?])\s+|\n+", tail)
    for piece in reversed(pieces):
        if _NUM_FIND.search(piece) or _MATH_SEG.search(piece):
            return _from_region(piece.rstrip(". "), policy, "fallback")
    return Extraction(None, "none", "no_answer")


def extract_gold(gold: object) -> Extraction:
    """The answer in a dataset's gold: last box, GSM8K ``####``, an answer phrase, or the whole string."""
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        return Extraction(repr(gold) if isinstance(gold, float) else str(gold), "bare")
    if not isinstance(gold, str) or not gold.strip():
        return Extraction(None, "none", "no_answer")
    lenient = ExtractionPolicy(max_distinct_boxes=0, refuse_ambiguous=False, max_bare_numbers=0)
    text = clean_text(gold)
    boxes = find_boxes(text)
    if boxes:
        last = [c.strip() for c in _box_groups(text, boxes)[-1]]
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

