"""The code reward: run a completion's code against the task's tests in the sandbox.

    from rewardlab.rewards import code_reward
    ref = {"tests": "def check(candidate):\\n    assert candidate(2, 3) == 5",
           "entry_point": "add", "prompt": "def add(a, b):\\n"}
    code_reward("```python\\ndef add(a, b):\\n    return a + b\\n```", ref).score   # 1.0
    code_reward("print(int(input()) * 2)", {"cases": [{"stdin": "2\\n", "stdout": "4\\n"}]})

Reference formats:

* function style ``{"tests": str defining check(candidate), "entry_point": str, "prompt": str|None}``:
  the program is ``prompt + completion`` (HumanEval style) unless the completion defines the
  entry point itself (then ``prompt`` + a blank line + the code, so the prompt's imports and
  helpers stay available). The prompt also runs, trusted, inside the checker, so helpers the
  tests call come from the task and not from the policy.
* stdio style ``{"cases": [{"stdin": str, "stdout": str}, ...]}``: one sandboxed run per case.

Options (keyword arguments or ``meta``): ``timeout`` (seconds per run, default 5),
``partial`` (score = fraction of asserts / cases passed instead of 1/0), ``legacy`` (flagged
legacy mode for tests that need object identity or custom classes: the tests then run in the
solution's interpreter; exit codes cannot fake a pass there, a solution that tampers with that
interpreter can; see ``sandbox/server.py``).

What passes, mode by mode, is pinned down row by row in ``tests/test_code_verdicts.py``.

``info``: ``status`` ("ok" when graded, else the sandbox status such as "timeout", "memory",
"crash", "output_limit", "error", or "no_answer" when the completion holds no code),
``sandbox_status``, ``passed`` / ``total`` (asserts, or cases for stdio, with ``partial=True``;
otherwise 1/1 or 0/1 for function style), ``error`` (first failure), ``tier``.
The reward isolates itself (``isolated = True``): batch scorers call it from threads.
"""

from __future__ import annotations

import re
from typing import Any

from rewardlab.rewards.base import RewardResult, register
from rewardlab.sandbox import execute

_CODE_LANGS = {"", "python", "python3", "py", "py3"}
_LANG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(lang, body)`` of every fenced block, in order, in one left-to-right pass.

    A fence is three backticks, optional spaces/tabs, a language tag (letters, digits, ``_+.-``),
    anything up to the end of that line; the body runs to the next three backticks or, for an
    unclosed fence, to the end of the text; the search goes on after the closing backticks.
    (Same blocks as the regex ``(?s)```[ \\t]*([A-Za-z0-9_+.-]*)[^\\n]*\\n(.*?)(?:```|\\Z)`` it
    replaces, which retried its fence line at every backtick: ~18 s on ``"`" * 100000``.)"""
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        # linear: each find below starts where the previous one stopped, so no character is rescanned
        start = text.find("```", pos)
        if start < 0:
            return out
        eol = text.find("\n", start + 3)
        if eol < 0:  # a fence line needs its newline; no later fence has one either
            return out
        i = start + 3
        while i < eol and text[i] in " \t":
            i += 1
        j = i
        while j < eol and text[j] in _LANG_CHARS:
            j += 1
        close = text.find("```", eol + 1)
        if close < 0:  # unclosed (truncated) fence: the body runs to the end
            out.append((text[i:j], text[eol + 1:]))
            return out
        out.append((text[i:j], text[eol + 1:close]))
        pos = close + 3


def _def_pattern(name: str, indented: bool) -> re.Pattern:
    """``def name(`` (or ``async def``) at the start of a line, after indentation if ``indented``."""
    # linear: "^" tries once per line and [^\S\n]* cannot leave it (the old ^\s* rescanned every later blank line)
    lead = r"[^\S\n]*" if indented else ""
    # linear: each \s run follows a fixed word ("async", "def", the name), so it is scanned from one start
    return re.compile(rf"^{lead}(async\s+)?def\s+{re.escape(name)}\s*\(", re.M)


def extract_code(completion: str, entry_point: str | None = None) -> tuple[str, bool]:
    """The code in ``completion``: a fenced block when there is one (the last block defining
    ``entry_point``, else the last Python block; an unclosed fence runs to the end), else the
    raw text. Returns ``(code, from_fence)``."""
    py = [code for lang, code in _fenced_blocks(completion) if lang.lower() in _CODE_LANGS]
    if not py:
        return completion, False
    if entry_point:
        pat = _def_pattern(entry_point, indented=True)
        defining = [c for c in py if pat.search(c)]
        if defining:
            return defining[-1], True
    return py[-1], True


def _defines(code: str, name: str) -> bool:
    return _def_pattern(name, indented=False).search(code) is not None


def _info(status: str, **kw: Any) -> dict[str, Any]:
    graded = status in ("pass", "fail")
    return {"status": "ok" if graded else status, "sandbox_status": status, **kw}


@register("code")
def code_reward(completion: str, reference: Any, timeout: float | None = None, partial: bool | None = None,
                legacy: bool | None = None, **meta: Any) -> RewardResult:
    """1.0 when the completion's code passes the reference tests, else 0.0 (or the fraction
    passed with ``partial=True``). ``score`` is None only when the sandbox itself failed."""
    timeout = float(timeout if timeout is not None else meta.get("timeout_s", 5.0))
    partial = bool(partial)
    if not isinstance(reference, dict):
        return RewardResult(None, {"status": "bad_reference", "error": "reference must be a dict"})
    if "cases" in reference:
        return _stdio(completion, reference["cases"], timeout, partial, execute)
    tests, entry = reference.get("tests"), reference.get("entry_point")
    if not tests or not entry:
        return RewardResult(None, {"status": "bad_reference",
                                   "error": "reference needs 'tests' and 'entry_point', or 'cases'"})
    prompt = reference.get("prompt") or ""
    code, fenced = extract_code(completion, entry)
    if not code.strip():
        return RewardResult(0.0, {"status": "no_answer", "sandbox_status": None, "passed": 0, "total": 0})
    if _defines(code, entry):
        program = f"{prompt}\n\n{code}" if prompt else code
    else:
        program = prompt + code
    r = execute(program, tests=tests, entry_point=entry, timeout=timeout, prelude=prompt or None,
                legacy=bool(legacy), partial=partial)
    passed, total = int(r.details.get("tests_passed", 0)), int(r.details.get("tests_total", 0))
    if r.status == "sandbox_error":
        score = None
    elif partial:
        score = passed / total if total and r.status in ("pass", "fail") else (1.0 if r.passed else 0.0)
    else:
        score = 1.0 if r.passed else 0.0
    info = _info(r.status, passed=passed, total=total, tier=r.details.get("tier"), fenced=fenced)
    if r.details.get("error"):
        info["error"] = r.details["error"]
    if r.details.get("integrity") == "legacy":
        info["integrity"] = "legacy"
    return RewardResult(score, info)


def _stdio(completion: str, cases: list, timeout: float, partial: bool, execute) -> RewardResult:
    code, fenced = extract_code(completion)
    if not code.strip():
        return RewardResult(0.0, {"status": "no_answer", "sandbox_status": None, "passed": 0, "total": len(cases)})
    if not cases:
        return RewardResult(None, {"status": "bad_reference", "error": "no stdio cases"})
    passed, worst, first_error, tier = 0, "pass", None, None
    for case in cases:
        r = execute(code, stdin=case.get("stdin", ""), expected_stdout=case.get("stdout", ""), timeout=timeout)
        tier = r.details.get("tier")
        if r.passed:
            passed += 1
            continue
        if worst == "pass" or (worst == "fail" and r.status != "fail"):
            worst = r.status
        first_error = first_error or r.details.get("error")
        if r.status == "sandbox_error" or not partial:
            break
    total = len(cases)
    if worst == "sandbox_error":
        score = None
    else:
        score = passed / total if partial else float(passed == total)
    info = _info(worst, passed=passed, total=total, tier=tier, fenced=fenced)
    if first_error:
        info["error"] = first_error
    return RewardResult(score, info)


code_reward.isolated = True  # type: ignore[attr-defined]
