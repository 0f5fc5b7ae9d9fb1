"""Stdin/stdout test suites in any sandbox language: output comparison modes, checkers, budgets.

    from rewardlab.rewards.code_suite import compare_output, run_suite
    compare_output("0.3333334\\n", "0.333333\\n", "float")      # (True, "")
    compare_output("1 2\\n", "2 1\\n", "unordered_tokens")       # (True, "")

Comparison modes (``compare=``; the reference's ``compare`` field, else the default ``whitespace``):

* ``exact``: byte-for-byte equal text.
* ``whitespace`` (default): line by line after removing trailing ASCII whitespace of each line
  and the empty lines at the end (CRLF ends accepted); leading or doubled spaces, extra, missing
  or reordered lines or tokens are mismatches. The same rule as Python stdio jobs always had.
* ``tokens``: the same whitespace-separated tokens in the same order, any layout.
* ``float``: tokens in order; where the expected token is a decimal number, the actual one must be
  a number within ``abs_tol`` or ``rel_tol * |expected|`` (either suffices; defaults 1e-6 each);
  ``nan``/``inf`` must match exactly; other tokens must be equal.
* ``unordered_tokens`` / ``unordered_lines``: the same multiset of tokens / of lines (normalised
  as in ``whitespace``, empty lines ignored).
* ``checker``: a program of the task decides (testlib convention): it runs as its own sandbox job,
  after the solution's job is over (outside the solution's sandbox: the solution's processes are
  dead and it never sees the checker or the expected answer), as
  ``checker input.txt output.txt answer.txt`` with the test's input, the solution's output and the
  expected answer; exit status 0 accepts, 1 (wrong answer) and 2 (presentation error) reject,
  anything else (or a crash, a timeout, or a Python checker's uncaught exception) is a checker
  failure: score ``None``, status ``checker_error``. Its first output line is the reason. A Python callable
  ``checker(input, expected, actual) -> bool | (bool, reason)`` runs in-process instead.
Control bytes (before any mode or checker): the program's stdout is text (UTF-8; invalid bytes
become U+FFFD). A C0 control character other than tab, line feed, vertical tab, form feed and
carriage return (``0x00``-``0x08``, ``0x0e``-``0x1f``), or DEL (``0x7f``), that the expected
answer does not contain makes the test a ``fail`` with the byte and its position as the reason;
no comparison mode and no checker ever sees such output (a C checker reading it with ``fgets`` /
``strlen`` would see ``"\\0..."`` as an empty string).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rewardlab.sandbox.languages import Program, compile_program, run_program

COMPARE_MODES = ("exact", "whitespace", "tokens", "float", "unordered_tokens", "unordered_lines", "checker")
_TRAILING_WS = " \t\r\f\v"
# linear: one optional sign, digit runs and one optional exponent, anchored at both ends
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NONFINITE = re.compile(r"[+-]?(?:nan|inf|infinity)\Z", re.I)


def _norm_lines(s: str) -> list[str]:
    lines = [ln.rstrip(_TRAILING_WS) for ln in s.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _show(s: str, n: int = 60) -> str:
    return repr(s if len(s) <= n else s[:n] + "...")


def _first_diff(a: list[str], e: list[str], what: str) -> str:
    for i, (x, y) in enumerate(zip(a, e)):
        if x != y:
            return f"{what} {i + 1}: expected {_show(y)}, got {_show(x)}"
    return f"expected {len(e)} {what}s, got {len(a)}"


def _num(tok: str) -> float | None:
    if _NUMBER.match(tok) or _NONFINITE.match(tok):
        try:
            return float(tok)
        except (ValueError, OverflowError):
            return None
    return None


def _close(a: str, e: str, abs_tol: float, rel_tol: float) -> bool:
    """Tokens ``a`` (actual) and ``e`` (expected) under ``compare: "float"``: two integer tokens
    are compared exactly, as integers (their difference within ``abs_tol``; ``rel_tol`` would
    pay an off-by-one above 10^6); other numbers within ``abs_tol`` or ``rel_tol``."""
    if _INTEGER.fullmatch(a) and _INTEGER.fullmatch(e) and len(a) <= 4000 and len(e) <= 4000:
        return abs(int(a) - int(e)) <= abs_tol
    ev = _num(e)
    if ev is None:
        return a == e
    av = _num(a)
    if av is None:
        return False
    if math.isnan(ev) or math.isnan(av):
        return math.isnan(ev) and math.isnan(av)
    if math.isinf(ev) or math.isinf(av):
        return av == ev
    d = abs(av - ev)
    return d <= abs_tol or d <= rel_tol * abs(ev)


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def control_byte_problem(actual: str, expected: str) -> str | None:
    """Why ``actual`` is refused before any comparison (a control byte the expected answer does not
    hold, see the module docstring), or None. Linear in the output's length."""
    allowed: dict[str, bool] = {}
    for m in _CONTROL.finditer(actual):
        c = m.group()
        if c not in allowed:
            allowed[c] = c in expected
        if not allowed[c]:
            return (f"output contains control byte 0x{ord(c):02x} at character {m.start()} "
                    "(not in the expected answer; never passed to a comparison or checker)")
    return None


def compare_output(actual: str, expected: str, mode: str = "whitespace", *, abs_tol: float = 1e-6,
                   rel_tol: float = 1e-6) -> tuple[bool, str]:
    """``(ok, reason)``: does ``actual`` match ``expected`` under ``mode`` (not ``checker``)?"""
    if mode == "exact":
        if actual == expected:
            return True, ""
        i = next((k for k, (x, y) in enumerate(zip(actual, expected)) if x != y), min(len(actual), len(expected)))
        line = expected.count("\n", 0, i) + 1
        return False, f"not exactly equal: first difference at character {i} (line {line}): " \
                      f"expected {_show(expected[i:i + 20])}, got {_show(actual[i:i + 20])}"
    if mode == "whitespace":
        a, e = _norm_lines(actual), _norm_lines(expected)
        return (True, "") if a == e else (False, _first_diff(a, e, "line"))
    if mode == "tokens":
        a, e = actual.split(), expected.split()
        return (True, "") if a == e else (False, _first_diff(a, e, "token"))
    if mode == "float":
        a, e = actual.split(), expected.split()
        if len(a) != len(e):
            return False, f"expected {len(e)} tokens, got {len(a)}"
        for i, (x, y) in enumerate(zip(a, e)):
            if not _close(x, y, abs_tol, rel_tol):
                return False, (f"token {i + 1}: expected {_show(y)}, got {_show(x)} "
                               f"(abs_tol {abs_tol:g}, rel_tol {rel_tol:g})")
        return True, ""
    if mode == "unordered_tokens":
        a, e = sorted(actual.split()), sorted(expected.split())
        return (True, "") if a == e else (False, "the tokens differ as a multiset"
                                          + (f" (expected {len(e)} tokens, got {len(a)})" if len(a) != len(e) else ""))
    if mode == "unordered_lines":
        a = sorted(ln for ln in _norm_lines(actual) if ln)
        e = sorted(ln for ln in _norm_lines(expected) if ln)
        return (True, "") if a == e else (False, "the lines differ as a multiset"
                                          + (f" (expected {len(e)} lines, got {len(a)})" if len(a) != len(e) else ""))
    raise ValueError(f"unknown comparison mode {mode!r}; use one of {', '.join(COMPARE_MODES)}")


# ------------------------------------------------------------------------------ checkers
class CheckerError(Exception):
    """The checker itself failed (did not compile, crashed, timed out, exited with another status)."""


def checker_program(spec: Any, *, compile_timeout: float = 60.0, pool=None) -> Program | Callable:
    """A checker from a reference's ``checker`` field: ``{"language", "code"}`` (compiled once,
    cached) or a Python callable. Python checkers run as ``python3 -I checker.py ...``."""
    if callable(spec):
        return spec
    if not isinstance(spec, dict) or not isinstance(spec.get("code"), str):
        raise CheckerError("checker must be {'language': ..., 'code': ...} or a callable")
    lang = str(spec.get("language") or "python")
    if lang.lower() in ("python", "python3", "py"):
        return Program("python", True, "ok", ["/usr/bin/python3", "-I", "checker.py"],
                       {"checker.py": {"b64": __import__("base64").b64encode(spec["code"].encode()).decode(),
                                       "mode": 0o644}}, spec["code"])
    prog = compile_program(lang, spec["code"], timeout=compile_timeout, pool=pool)
    if not prog.ok:
        raise CheckerError(f"checker {prog.status}: {prog.info.get('error')}")
    return prog


def run_checker(checker: Program | Callable, stdin: str, expected: str, actual: str, *, timeout: float = 10.0,
                pool=None) -> tuple[bool, str]:
    """``(accepted, reason)`` from the checker; raises CheckerError when the checker fails."""
    if callable(checker):
        try:
            out = checker(stdin, expected, actual)
        except Exception as e:  # noqa: BLE001 - the task's checker is broken
            raise CheckerError(f"checker raised {type(e).__name__}: {e}") from None
        ok, why = (out if isinstance(out, tuple) else (out, ""))
        return bool(ok), str(why or ("" if ok else "rejected by the checker"))
    r = run_program(checker, "", timeout=timeout, pool=pool,
                    extra_files={"input.txt": stdin, "output.txt": actual, "answer.txt": expected},
                    argv_extra=["input.txt", "output.txt", "answer.txt"])
    said = next((ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()), "")[:300]
    if r.status == "ran":
        return True, said
    if checker.language == "python" and "Traceback (most recent call last)" in r.stderr:
        last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:]
        # exit 1 of a crashed checker is no verdict
        raise CheckerError(f"checker raised: {last[0] if last else r.error}")
    if r.status == "error" and r.exit_code in (1, 2):
        kind = "wrong answer" if r.exit_code == 1 else "presentation error"
        return False, f"checker: {kind}" + (f": {said}" if said else "")
    raise CheckerError(f"checker {r.status}: {r.error or said}")


# ------------------------------------------------------------------------------ suites
@dataclass
class SuiteResult:
    passed: int
    total: int
    # worst run status: pass, fail, timeout, memory, crash, error, output_limit, sandbox_error, checker_error
    status: str
    tests: list[dict] = field(default_factory=list)  # per test run: {"test", "status", "time", "reason"?}
    first_failure: dict | None = None  # {"test", "status", "reason"}
    elapsed: float = 0.0
    tier: str | None = None


def run_suite(program: Program, cases: list[dict], *, time_limit: float = 5.0, total_time: float | None = None,
              early_exit: bool = True, compare: str = "whitespace", abs_tol: float = 1e-6, rel_tol: float = 1e-6,
              checker: Program | Callable | None = None, checker_timeout: float = 10.0, pool=None) -> SuiteResult:
    """Run ``program`` on every case (``{"stdin", "stdout", "timeout"?}``) in order.

    Each run gets ``min(case timeout or time_limit, what is left of total_time)``; once the total
    budget is spent the remaining tests are ``timeout`` ("total time budget exhausted").
    ``early_exit`` stops at the first failing test; otherwise every test runs (eval). The first
    failing test and why are in ``first_failure``."""
    if compare not in COMPARE_MODES:
        raise ValueError(f"unknown comparison mode {compare!r}; use one of {', '.join(COMPARE_MODES)}")
    if compare == "checker" and checker is None:
        raise ValueError("compare='checker' needs a checker")
    res = SuiteResult(0, len(cases), "pass")
    t_start = time.monotonic()
    spent = 0.0
    for i, case in enumerate(cases):
        limit = float(case.get("timeout") or time_limit)
        if total_time is not None:
            left = float(total_time) - spent
            if left <= 0.001:
                _fail(res, {"test": i, "status": "timeout", "time": 0.0,
                            "reason": f"total time budget of {float(total_time):g}s exhausted"})
                if early_exit:
                    break
                continue
            limit = min(limit, left)
        stdin, expected = str(case.get("stdin") or ""), str(case.get("stdout") or "")
        r = run_program(program, stdin, timeout=limit, pool=pool)
        res.tier = r.tier or res.tier
        spent += r.elapsed
        row = {"test": i, "time": round(r.elapsed, 4)}
        if r.status == "ran":
            bad = control_byte_problem(r.stdout, expected)
            if bad is not None:
                _fail(res, dict(row, status="fail", reason=bad))
                if early_exit:
                    break
                continue
            try:
                if compare == "checker":
                    ok, why = run_checker(checker, stdin, expected, r.stdout, timeout=checker_timeout, pool=pool)
                else:
                    ok, why = compare_output(r.stdout, expected, compare, abs_tol=abs_tol, rel_tol=rel_tol)
            except CheckerError as e:
                _fail(res, dict(row, status="checker_error", reason=str(e)))
                break
            if ok:
                res.passed += 1
                res.tests.append(dict(row, status="pass"))
                continue
            _fail(res, dict(row, status="fail", reason=why or "rejected"))
        else:
            why = r.error or r.status
            if r.status == "timeout":
                why = f"time limit of {limit:g}s exceeded" + (f" ({r.error})" if r.error and "CPU" in r.error else "")
            _fail(res, dict(row, status=r.status, reason=why))
            if r.status == "sandbox_error":
                break
        if early_exit:
            break
    res.elapsed = round(time.monotonic() - t_start, 4)
    return res


_SEVERE = ("sandbox_error", "checker_error")


def _fail(res: SuiteResult, row: dict) -> None:
    res.tests.append(row)
    if res.first_failure is None:
        res.first_failure = {k: row[k] for k in ("test", "status", "reason")}
    st = row["status"]
    if res.status == "pass" or (res.status == "fail" and st != "fail") or st in _SEVERE:
        res.status = st
