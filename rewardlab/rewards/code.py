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
  tests call come from the task and not from the policy. Optional ``suffix``: task code appended
  after the solution's (in the worker, with it), e.g. ``def maxSum(*a): return Solution().maxSum(*a)``
  so that LeetCode-style ``class Solution`` answers have a top-level entry point (see
  :mod:`rewardlab.rewards.code_rows`).
* stdio style ``{"cases": [{"stdin": str, "stdout": str, "timeout": s?}, ...]}``: one sandboxed
  run per case, in any sandbox language (:mod:`rewardlab.sandbox.languages`: python, c, cpp,
  java, javascript, bash, go, rust). The language is the fenced block's tag (```` ```cpp ````),
  else the reference's ``language`` field, else Python; with a ``language`` field, blocks of that
  language (then untagged ones) are preferred. Optional fields (each also a keyword argument,
  which wins): ``language``, ``allowed_languages`` (others score 0, status ``wrong_language``),
  ``time_limit`` (seconds per test), ``total_time`` (the problem's budget), ``compare`` (exact,
  whitespace [default], tokens, float, unordered_tokens, unordered_lines, checker; see
  :mod:`rewardlab.rewards.code_suite`), ``abs_tol`` / ``rel_tol`` (float mode), ``checker``
  (``{"language", "code"}``, testlib style, run as its own sandbox job), ``compile_timeout``.
  Compiled languages compile once inside the sandbox (cached by language, flags and source
  hash); a compiler failure scores 0 with ``status="compile_error"`` and the compiler's first
  lines in ``info["error"]``.

Options (keyword arguments or ``meta``): ``timeout`` (seconds per run, default 5),
``partial`` (score = fraction of asserts / cases passed instead of 1/0), ``early_exit`` (stdio:
stop at the first failing test, default True, the training setting; ``early_exit=False`` runs
every test, as an eval wants; ``partial`` runs them all too; also a reference field), ``legacy`` (flagged
legacy mode for tests that need object identity or custom classes: the tests then run in the
solution's interpreter; exit codes cannot fake a pass there, a solution that tampers with that
interpreter can; see ``sandbox/server.py``).

What passes, mode by mode, is pinned down row by row in ``tests/test_code_verdicts.py``.

``info``: ``status`` ("ok" when graded, else the sandbox status such as "timeout", "memory",
"crash", "output_limit", "error", or "no_answer" when the completion holds no code),
``sandbox_status``, ``passed`` / ``total`` (asserts, or cases for stdio, with ``partial=True``;
otherwise 1/1 or 0/1 for function style), ``error`` (first failure), ``tier``; for stdio also
``language``, ``failed_test`` (index of the first failing test), ``tests`` (per test run:
status, time, reason), ``compile`` (``cached``, ``compile_s``).
The reward isolates itself (``isolated = True``): batch scorers call it from threads.
"""

from __future__ import annotations

import re
from typing import Any

from rewardlab.rewards.base import RewardResult, register
from rewardlab.sandbox import execute
from rewardlab.sandbox.languages import compile_program, get_language

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


def defines_function(code: str, name: str) -> bool:
    return _def_pattern(name, indented=False).search(code) is not None


def _info(status: str, **kw: Any) -> dict[str, Any]:
    graded = status in ("pass", "fail")
    return {"status": "ok" if graded else status, "sandbox_status": status, **kw}


@register("code")
def code_reward(completion: str, reference: Any, timeout: float | None = None, partial: bool | None = None,
                legacy: bool | None = None, early_exit: bool | None = None, **meta: Any) -> RewardResult:
    """1.0 when the completion's code passes the reference tests, else 0.0 (or the fraction
    passed with ``partial=True``). ``score`` is None only when the sandbox (or the task's
    checker, or a missing toolchain) failed."""
    explicit_timeout = timeout is not None
    timeout = float(timeout if timeout is not None else meta.get("timeout_s", 5.0))
    partial = bool(partial)
    if not isinstance(reference, dict):
        return RewardResult(None, {"status": "bad_reference", "error": "reference must be a dict"})
    if "cases" in reference:
        if not explicit_timeout and reference.get("time_limit"):
            timeout = float(reference["time_limit"])
        if early_exit is None:  # keyword, then the reference's field, then True (training)
            early_exit = bool(reference.get("early_exit", True))
        return _stdio(completion, reference, timeout, partial, bool(early_exit), meta)
    tests, entry = reference.get("tests"), reference.get("entry_point")
    if not tests or not entry:
        return RewardResult(None, {"status": "bad_reference",
                                   "error": "reference needs 'tests' and 'entry_point', or 'cases'"})
    prompt = reference.get("prompt") or ""
    code, fenced = extract_code(completion, entry)
    if not code.strip():
        return RewardResult(0.0, {"status": "no_answer", "sandbox_status": None, "passed": 0, "total": 0})
    if defines_function(code, entry):
        program = f"{prompt}\n\n{code}" if prompt else code
    else:
        program = prompt + code
    if reference.get("suffix"):  # the task's code after the solution's, e.g. an entry point calling Solution()
        program = f"{program}\n\n{reference['suffix']}"
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


def select_code(completion: str, reference: dict | None = None) -> tuple[str, str, bool]:
    """``(language, code, from_fence)`` for a stdio problem: see the module docstring."""
    named = (reference or {}).get("language")
    want = get_language(named)
    blocks = _fenced_blocks(completion)
    if named and want is None:  # a language this sandbox does not know: reported, never run as another
        same = [b for tag, b in blocks if tag.lower() == str(named).lower() or not tag]
        return str(named).lower(), (same[-1] if same else completion), bool(same)
    known = [(get_language(tag).name, body) for tag, body in blocks if tag and get_language(tag) is not None]
    if want is not None and want.name != "python":
        same = [b for name, b in known if name == want.name]
        if same:
            return want.name, same[-1], True
        untagged = [b for tag, b in blocks if not tag]
        if untagged:
            return want.name, untagged[-1], True
        if known:
            return known[-1][0], known[-1][1], True
        return want.name, completion, False
    if any(tag.lower() in _CODE_LANGS for tag, _ in blocks) or not known:
        code, fenced = extract_code(completion)
        return "python", code, fenced
    return known[-1][0], known[-1][1], True


def _opt(name: str, meta: dict, reference: dict, default: Any) -> Any:
    v = meta.get(name)
    if v is None:
        v = reference.get(name)
    return default if v is None else v


def _stdio(completion: str, reference: dict, timeout: float, partial: bool, early_exit: bool,
           meta: dict) -> RewardResult:
    from rewardlab.rewards.code_suite import COMPARE_MODES, CheckerError, checker_program, run_suite

    cases = reference["cases"]
    lang, code, fenced = select_code(completion, reference)
    base = {"passed": 0, "total": len(cases) if isinstance(cases, list) else 0, "language": lang, "fenced": fenced}
    if not code.strip():
        return RewardResult(0.0, dict(base, status="no_answer", sandbox_status=None))
    if not cases or not isinstance(cases, list):
        return RewardResult(None, {"status": "bad_reference", "error": "no stdio cases"})
    allowed = _opt("allowed_languages", meta, reference, None)
    if allowed:
        names = {(get_language(a).name if get_language(a) else str(a)) for a in allowed}
        if lang not in names:
            return RewardResult(0.0, dict(base, status="wrong_language", sandbox_status="wrong_language",
                                          error=f"{lang} is not one of {sorted(names)}"))
    checker_spec = meta.get("checker") if meta.get("checker") is not None else reference.get("checker")
    compare = str(_opt("compare", meta, reference, "checker" if checker_spec is not None else "whitespace"))
    if compare not in COMPARE_MODES:
        return RewardResult(None, {"status": "bad_reference", "error": f"unknown compare mode {compare!r}"})
    compile_timeout = float(_opt("compile_timeout", meta, reference, 60.0))
    prog = compile_program(lang, code, timeout=compile_timeout)
    comp = {"cached": prog.cached, "compile_s": prog.info.get("compile_s")}
    if prog.status in ("unavailable", "sandbox_error"):
        return RewardResult(None, dict(base, status=prog.status, sandbox_status=prog.status,
                                       error=prog.info.get("error")))
    if prog.status == "compile_error":
        return RewardResult(0.0, dict(base, status="compile_error", sandbox_status="compile_error",
                                      error=prog.info.get("error"), compile=comp))
    checker = None
    if compare == "checker":
        if checker_spec is None:
            return RewardResult(None, {"status": "bad_reference", "error": "compare='checker' without a checker"})
        try:
            checker = checker_program(checker_spec, compile_timeout=compile_timeout)
        except CheckerError as e:
            return RewardResult(None, dict(base, status="checker_error", sandbox_status="checker_error", error=str(e)))
    total_time = _opt("total_time", meta, reference, None)
    suite = run_suite(prog, cases, time_limit=timeout, total_time=None if total_time is None else float(total_time),
                      early_exit=early_exit and not partial, compare=compare,
                      abs_tol=float(_opt("abs_tol", meta, reference, 1e-6)),
                      rel_tol=float(_opt("rel_tol", meta, reference, 1e-6)), checker=checker,
                      checker_timeout=float(_opt("checker_timeout", meta, reference, 10.0)))
    worst = suite.status
    if worst in ("sandbox_error", "checker_error"):
        score = None
    else:
        score = suite.passed / suite.total if partial else float(suite.passed == suite.total)
    info = _info(worst, **dict(base, passed=suite.passed, total=suite.total), tier=suite.tier, compile=comp,
                 compare=compare, tests=suite.tests[:200], elapsed=suite.elapsed)
    if suite.first_failure:
        ff = suite.first_failure
        info["failed_test"] = ff["test"]
        info["error"] = f"test {ff['test']}: {ff['status']}: {ff['reason']}"
    return RewardResult(score, info)


code_reward.isolated = True  # type: ignore[attr-defined]
