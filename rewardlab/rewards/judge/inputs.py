"""What the judge is shown: the question (from the row's meta), the reference as text, and the
candidate's *extracted* final answer (the ``extract`` defence), never the whole completion.

    question_of({"prompt": [{"role": "user", "content": "2+2?"}]})   # "2+2?"
    extract_judge_answer("... so the answer is \\\\boxed{4}", "math")  # ("4", {"extraction": "boxed"})
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any, Callable

from rewardlab.rewards.math.extract import ExtractionPolicy, extract_answer

__all__ = ["question_of", "reference_of", "answer_sentence", "extract_judge_answer", "words_of"]

_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SENTENCE_RE = re.compile(r"\b(?:final answer|answer)\s*(?:is|:|=)[ \t:]*([^\n]*)", re.IGNORECASE)


def words_of(s: str) -> str:
    """The words of ``s``, case-folded, joined by single spaces (punctuation dropped)."""
    return " ".join(_WORD_RE.findall(s.casefold()))


def question_of(meta: dict[str, Any]) -> str | None:
    """The question of a row: ``meta["question"]``, else ``"prompt"`` or ``"problem"``; a chat prompt
    (a list of messages) gives its last user message (multimodal parts: their text)."""
    for key in ("question", "prompt", "problem"):
        q = meta.get(key)
        if q is None:
            continue
        if isinstance(q, list):  # chat messages: the last user turn
            users = [m.get("content") for m in q if isinstance(m, dict) and m.get("role") == "user"]
            q = users[-1] if users else None
            if isinstance(q, list):  # multimodal content parts
                q = " ".join(p.get("text", "") for p in q if isinstance(p, dict))
        if q is not None:
            return str(q)
    return None


def reference_of(reference: Any) -> str | None:
    """The reference as text: a string as is, ``{"answer"|"gold": ...}`` its value, lists and dicts
    as JSON, anything else by ``str``; None stays None (a reference-free template is used)."""
    if reference is None:
        return None
    if isinstance(reference, dict):
        reference = reference.get("answer", reference.get("gold"))
        if reference is None:
            return None
    if isinstance(reference, str):
        return reference
    return json.dumps(reference, ensure_ascii=False) if isinstance(reference, (list, dict)) else str(reference)


def answer_sentence(completion: str) -> str | None:
    """The text after the last "answer is" / "answer:" marker, to the end of its line (linear time)."""
    last = None
    for m in _SENTENCE_RE.finditer(completion[-20_000:]):
        last = m
    if last is None:
        return None
    text = last.group(1).strip().rstrip(".").strip()
    return text or None


def _math_or_text(completion: str, mode: str, hedge_defence: bool = True) -> tuple[str | None, dict[str, Any]]:
    """The ``"math"`` / ``"text"`` extraction (see :func:`extract_judge_answer`). The math reward's commitment
    rule runs first; its ``hedge`` (several different final answers) is this judge's ``hack_hedge`` defence,
    so disabling that defence also extracts without the commitment rule."""
    info: dict[str, Any] = {}
    ex = extract_answer(completion, None if hedge_defence else ExtractionPolicy(commitment=False))
    answer = ex.answer
    info["extraction"] = ex.method
    if answer is None and ex.problem not in (None, "no_answer"):
        info["extraction_problem"] = "hack_hedge" if ex.problem == "hedge" else ex.problem
    sentence = answer_sentence(completion) if ex.method in ("phrase", "none") else None
    if sentence is not None and answer is None and ex.problem in (None, "no_answer"):
        answer = sentence  # "The answer is <words>": the words, which the math extractor does not take
        info["extraction"] = "phrase_text"
    elif sentence is not None and answer is not None and words_of(sentence) != words_of(answer):
        info["answer_sentence"] = sentence[:300]  # checked by the pre-filters too
    if answer is not None and mode == "text" and ex.method not in ("boxed", "hash", "phrase"):
        answer = None  # marker-less: the last paragraph below, not a number picked from it
    if answer is None and mode == "text" and ex.problem in (None, "no_answer"):
        paras = [p.strip() for p in re.split(r"\n\s*\n", completion[-20_000:]) if p.strip()]
        if paras:
            answer = paras[-1]
            info["extraction"] = "last_paragraph"
    return answer, info


def extract_judge_answer(completion: str, extract: str | Callable[[str], str | None], *,
                         disabled: Collection[str] = (), max_chars: int = 4000) -> tuple[str | None, dict[str, Any]]:
    """``(answer or None, info)``: the final answer the judge is shown.

    ``extract="math"``: boxed, ``####``, "the answer is", a bare answer; a "the answer is <words>"
    sentence without a value is the answer, and one around a value is kept in
    ``info["answer_sentence"]`` for the pre-filters. ``"text"``: those markers, else the last
    paragraph. A callable ``completion -> str | None`` is used as is. With ``"extract"`` in
    ``disabled``, the whole completion is the answer when none is found. An answer over
    ``max_chars`` keeps its last ``max_chars`` characters (``info["answer_truncated"]``)."""
    if callable(extract):
        answer = extract(completion)
        info: dict[str, Any] = {"extraction": getattr(extract, "__name__", "custom")}
    else:
        answer, info = _math_or_text(completion, extract, hedge_defence="hedge" not in disabled)
    if answer is None and "extract" in disabled:
        answer = completion
        info["extraction"] = "whole_completion"
    if answer is not None and len(answer) > max_chars:
        answer = answer[-max_chars:]
        info["answer_truncated"] = True
    return answer, info
