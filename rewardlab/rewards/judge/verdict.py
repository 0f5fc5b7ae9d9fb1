"""The judge's reply: the strict two-line verdict parser, and the ``restate`` defence's check that the
judge restated the very answer it was shown.

    parse_verdict("FINAL ANSWER: 7\\nVERDICT: CORRECT")      # ("7", True)
    restatement_matches("\\\\frac{1}{2}", "0.5")              # True (the math reward's fast comparison)
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rewardlab.rewards.math.equiv import fast_compare

__all__ = ["VerdictError", "VERDICT_REGEX", "parse_verdict", "normalize_answer", "restatement_matches"]


class VerdictError(ValueError):
    """A judge reply that is not in the verdict format (the message says how)."""


_VERDICT_LINE = re.compile(r"VERDICT: (CORRECT|INCORRECT)")
VERDICT_REGEX = r"FINAL ANSWER: [^\n]{1,200}\nVERDICT: (CORRECT|INCORRECT)"
"""The verdict format as a regular expression, for servers that constrain decoding to one (vLLM)."""
_ANSWER_LINE = re.compile(r"FINAL ANSWER: (\S.*)")


def parse_verdict(text: Any, *, allow_preamble: bool = False) -> tuple[str, bool]:
    """``(restated answer, correct)`` from a judge reply in the fixed format, else :class:`VerdictError`.

    The reply (surrounding blank space stripped) must be exactly ``FINAL ANSWER: <answer>`` then
    ``VERDICT: CORRECT`` or ``VERDICT: INCORRECT`` on the next line; with ``allow_preamble``, free
    text may come before the two lines, but no other line may start with ``FINAL ANSWER`` or
    ``VERDICT``."""
    if not isinstance(text, str):
        raise VerdictError(f"the reply is {type(text).__name__}, not text")
    lines = [ln.strip() for ln in text.strip().splitlines()]
    if len(lines) < 2:
        raise VerdictError("the reply has fewer than two lines")
    if not allow_preamble and len(lines) != 2:
        raise VerdictError(f"the reply has {len(lines)} lines, not exactly two")
    for ln in lines[:-2]:
        if re.match(r"\W*(FINAL\s*ANSWER|VERDICT)\b", ln, re.IGNORECASE):
            raise VerdictError("more than one FINAL ANSWER / VERDICT line")
    m_answer = _ANSWER_LINE.fullmatch(lines[-2])
    m_verdict = _VERDICT_LINE.fullmatch(lines[-1])
    if m_answer is None:
        raise VerdictError("the line before the verdict is not 'FINAL ANSWER: <answer>'")
    if m_verdict is None:
        raise VerdictError("the last line is not 'VERDICT: CORRECT' or 'VERDICT: INCORRECT'")
    restated = m_answer.group(1).strip()
    if _VERDICT_LINE.search(restated) or "FINAL ANSWER:" in restated:
        raise VerdictError("the restated answer holds a verdict")
    return restated, m_verdict.group(1) == "CORRECT"


def normalize_answer(s: str) -> str:
    """An answer without its wrapping (``$...$``, ``\\(...\\)``, ``\\boxed{}``, quotes, a final full
    stop, ``\\text{}``), case and blank space: what two restatements of one answer share."""
    s = unicodedata.normalize("NFKC", s).strip()
    for _ in range(3):
        s = s.strip().rstrip(".").strip()
        m = re.fullmatch(r"\$+(.*?)\$+|\\\((.*)\\\)|\\boxed\{(.*)\}|\"(.*)\"|'(.*)'|`(.*)`", s, re.DOTALL)
        if not m:
            break
        s = next(g for g in m.groups() if g is not None)
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    return re.sub(r"\s+", "", s.casefold())


def restatement_matches(restated: str, answer: str) -> bool:
    """Whether the judge's restatement is the answer it was shown: equal after
    :func:`normalize_answer`, equal by the math reward's fast comparison, or, for answers over 80
    characters, a verbatim part of it (at least 8 characters)."""
    a, r = normalize_answer(answer), normalize_answer(restated)
    if not r:
        return False
    if a == r:
        return True
    if len(a) <= 400 and len(r) <= 400:
        try:
            if fast_compare(restated, answer).equal is True:
                return True
        except Exception:  # noqa: BLE001 - a failed comparison is no match
            pass
    return len(a) > 80 and len(r) >= 8 and r in a
