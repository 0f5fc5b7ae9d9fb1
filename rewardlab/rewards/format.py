"""Format rewards: is the completion shaped the way the prompt asked?

Three rewards, each a small picklable class with a stable ``name`` and a default instance in the
registry::

    ThinkAnswerFormat()   "format"      <think>...</think> then <answer>...</answer> (tags configurable;
                                        strict = nothing else around them, lenient = text allowed around)
    OneAnswer()           "one_answer"  exactly one final answer in the expected form (\\boxed{...} or a
                                        "#### ..." line); several boxes or #### lines are not paid
    RegexReward(pattern)  "regex"       the completion matches a custom regular expression

All three return 1.0 or 0.0 with ``info["status"] == "ok"`` (a badly formatted completion is graded
normally, it just earns 0) and ``info["reason"]`` saying why. Try one from Python::

    from rewardlab.rewards.format import OneAnswer
    OneAnswer()("so \\\\boxed{4} and \\\\boxed{5}", None).info   # {'status': 'ok', 'reason': 'multiple_answers', ...}

A format reward is meant to be combined with a small weight next to a correctness reward
(``rewardlab.rewards.combine.Combined``): on its own it is easy to hack.
"""

from __future__ import annotations

import re
from typing import Any

from rewardlab.rewards.base import CheapReward, RewardResult, register

__all__ = ["ThinkAnswerFormat", "OneAnswer", "RegexReward", "boxed_spans", "find_boxed", "find_hash_answers"]


class ThinkAnswerFormat(CheapReward):
    """1.0 when the completion is ``<think>reasoning</think>`` followed by ``<answer>answer</answer>``.

    ``strict=True``: only whitespace may surround and separate the two blocks, each tag appears
    exactly once, and both blocks are non-empty. ``strict=False`` (lenient): text before, between
    and after the blocks is allowed, but each tag still appears exactly once, in order, and the
    answer is non-empty (so repeating ``<answer>`` to fish for credit is not paid).

    ``think_opened_in_prompt=True`` is for chat templates that already end the prompt with
    ``<think>`` (DeepSeek-R1 style): the completion must then *not* open the think block again.
    """

    def __init__(
        self,
        think_tag: str = "think",
        answer_tag: str = "answer",
        *,
        strict: bool = False,
        think_opened_in_prompt: bool = False,
        name: str | None = None,
    ) -> None:
        for tag in (think_tag, answer_tag):
            if not tag or not re.fullmatch(r"[A-Za-z_][\w\-.:]*", tag):
                raise ValueError(f"tag names must be plain identifiers like 'think', got {tag!r}")
        if think_tag == answer_tag:
            raise ValueError("think_tag and answer_tag must differ")
        self.think_tag = think_tag
        self.answer_tag = answer_tag
        self.strict = strict
        self.think_opened_in_prompt = think_opened_in_prompt
        self.name = name or "format"

    def __repr__(self) -> str:
        return (
            f"ThinkAnswerFormat(think_tag={self.think_tag!r}, answer_tag={self.answer_tag!r}, "
            f"strict={self.strict}, name={self.name!r})"
        )

    def __call__(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        t, a = self.think_tag, self.answer_tag
        text = completion or ""
        counts = {
            f"<{t}>": text.count(f"<{t}>"),
            f"</{t}>": text.count(f"</{t}>"),
            f"<{a}>": text.count(f"<{a}>"),
            f"</{a}>": text.count(f"</{a}>"),
        }
        expected = dict.fromkeys(counts, 1)
        if self.think_opened_in_prompt:
            expected[f"<{t}>"] = 0
        info: dict[str, Any] = {"tags": counts, "strict": self.strict}
        if counts != expected:
            missing = [k for k, n in counts.items() if n < expected[k]]
            return _fail(info, "missing_tag" if missing else "repeated_tag")

        open_t = "" if self.think_opened_in_prompt else re.escape(f"<{t}>")
        body = (
            rf"{open_t}(?P<think>.*?){re.escape(f'</{t}>')}(?P<between>.*?)"
            rf"{re.escape(f'<{a}>')}(?P<answer>.*?){re.escape(f'</{a}>')}"
        )
        # Linear: each of the four tags occurs exactly once (checked above), so every lazy ``.*?``
        # has a single place where the next literal tag can match, and no split is ever retried.
        m = re.fullmatch(rf"(?P<before>.*?){body}(?P<after>.*?)", text, flags=re.DOTALL)
        if m is None:
            return _fail(info, "wrong_order")
        if self.strict and any(m.group(g).strip() for g in ("before", "between", "after")):
            return _fail(info, "text_outside_tags")
        think, answer = m.group("think").strip(), m.group("answer").strip()
        info["answer"] = answer
        if not answer:
            return _fail(info, "empty_answer")
        if self.strict and not think:
            return _fail(info, "empty_think")
        info["reason"] = "well_formed"
        return RewardResult(1.0, info)


# Linear: _BOXED starts only at a backslash and its one ``\s*`` is followed by a literal brace;
# _HASH_LINE starts only at a line start, and ``[^\n]*`` runs to a ``$`` that always matches.
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*+\{")
_HASH_LINE = re.compile(r"^[ \t]*+####(?!#)[ \t]*+(?P<ans>[^\n]*)$", re.MULTILINE)


def boxed_spans(text: str) -> list[tuple[int, int] | None]:
    """``(start, end)`` of the contents of every ``\\boxed{...}`` / ``\\fbox{...}``, in order;
    ``None`` for an unbalanced one.

    Linear time: brace pairs are matched once for the whole text (a completion of 50,000 nested
    boxes must not cost quadratic time), and no contents are copied.
    """
    matches = list(_BOXED.finditer(text))
    if not matches:
        return []
    closing: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closing[stack.pop()] = i
    spans: list[tuple[int, int] | None] = []
    for m in matches:
        start = m.end() - 1  # the opening brace
        end = closing.get(start)
        spans.append((start + 1, end) if end is not None else None)
    return spans


def find_boxed(text: str) -> list[str | None]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}`` in order; ``None`` for an unbalanced one."""
    return [None if span is None else text[span[0] : span[1]] for span in boxed_spans(text)]


def find_hash_answers(text: str) -> list[str]:
    """The text after each GSM8K-style ``#### answer`` line, stripped."""
    return [m.group("ans").strip() for m in _HASH_LINE.finditer(text)]


class OneAnswer(CheapReward):
    """1.0 when the completion gives exactly one non-empty final answer in an accepted form.

    ``forms`` is any of ``"boxed"`` (``\\boxed{...}``) and ``"hash"`` (a ``#### answer`` line, GSM8K
    style). Answers are counted across all accepted forms, so two boxes, two ``####`` lines, or a
    box plus a ``####`` line all score 0 (``reason="multiple_answers"``): spamming candidate
    answers is not paid. An unbalanced or empty box is malformed and scores 0.
    """

    FORMS = ("boxed", "hash")

    def __init__(self, forms: tuple[str, ...] | list[str] | str = ("boxed", "hash"), *, name: str | None = None):
        forms = (forms,) if isinstance(forms, str) else tuple(forms)
        bad = [f for f in forms if f not in self.FORMS]
        if bad or not forms:
            raise ValueError(f"forms must be a non-empty subset of {self.FORMS}, got {forms!r}")
        self.forms = forms
        self.name = name or "one_answer"

    def __repr__(self) -> str:
        return f"OneAnswer(forms={self.forms!r}, name={self.name!r})"

    def __call__(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        text = completion or ""
        spans = boxed_spans(text) if "boxed" in self.forms else []
        hashes = find_hash_answers(text) if "hash" in self.forms else []
        info: dict[str, Any] = {"forms": list(self.forms), "count": len(spans) + len(hashes)}
        if info["count"] == 0:
            return _fail(info, "no_answer")
        if info["count"] > 1:
            return _fail(info, "multiple_answers")
        if hashes:
            answer: str | None = hashes[0]
        else:
            span = spans[0]
            answer = text[span[0] : span[1]] if span is not None else None
        if answer is None:
            return _fail(info, "unbalanced_braces")
        if not answer.strip():
            return _fail(info, "empty_answer")
        info["answer"] = answer.strip()
        info["reason"] = "one_answer"
        return RewardResult(1.0, info)


_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


class RegexReward:
    """1.0 when the completion matches ``pattern`` (``mode``: ``"search"``, ``"match"`` or ``"fullmatch"``).

    ``pattern=None`` takes the pattern per sample from ``meta["pattern"]`` (a dataset column), so
    one registered reward serves datasets whose rows each name their own format; a row without one
    is not gradable (``None``, ``status="no_pattern"``). ``flags`` is a string of ``i m s x``.
    It has no ``fast`` path on purpose: a user pattern can backtrack for minutes, so the worker
    pool runs it under its deadline.
    """

    def __init__(
        self, pattern: str | None = None, *, mode: str = "search", flags: str = "", name: str | None = None
    ) -> None:
        if mode not in ("search", "match", "fullmatch"):
            raise ValueError(f"mode must be search, match or fullmatch, got {mode!r}")
        bad = set(flags) - set(_FLAGS)
        if bad:
            raise ValueError(f"unknown regex flags {''.join(sorted(bad))!r}; use any of 'imsx'")
        self.pattern = pattern
        self.mode = mode
        self.flags = flags
        self.name = name or "regex"
        if pattern is not None:
            self._compile(pattern)  # fail at construction, not at the first sample

    def __repr__(self) -> str:
        return f"RegexReward(pattern={self.pattern!r}, mode={self.mode!r}, flags={self.flags!r}, name={self.name!r})"

    def _compile(self, pattern: str) -> re.Pattern[str]:
        flags = 0
        for f in self.flags:
            flags |= _FLAGS[f]
        return re.compile(pattern, flags)  # re caches compiled patterns, and this stays picklable

    def __call__(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        pattern = self.pattern if self.pattern is not None else meta.get("pattern")
        if not pattern:
            return RewardResult(None, {"status": "no_pattern"})
        try:
            rx = self._compile(pattern)
        except re.error as e:
            return RewardResult(None, {"status": "bad_pattern", "error": str(e)})
        m = getattr(rx, self.mode)(completion or "")
        info: dict[str, Any] = {"pattern": pattern, "mode": self.mode}
        if m is None:
            return _fail(info, "no_match")
        info["match"] = m.group(0)
        info["reason"] = "match"
        return RewardResult(1.0, info)


def _fail(info: dict[str, Any], reason: str) -> RewardResult:
    info["reason"] = reason
    return RewardResult(0.0, info)


format_reward = register("format")(ThinkAnswerFormat())
one_answer_reward = register("one_answer")(OneAnswer())
regex_reward = register("regex")(RegexReward())
