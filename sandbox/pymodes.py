"""The Python job modes of the checker: function-call tests, legacy tests, stdin/stdout programs (stdlib only)."""

from __future__ import annotations

import ast
import builtins
import os
import re
import select
import time

import wire
from checker import (Abort, Checker, Deadline, OutputLimit, ProtocolError, TestGlobals, fmt_exc, instrument,
                     to_worker, valid_status)
from worker import DETAIL_CAP

_TOP = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)|^(\w+)\s*[:=]|^(?:from\s+\S+\s+)?import\s+([^\n#;]+)", re.M)


def _uses_helpers(prelude: str, tests: str, entry: str) -> bool:
    """Do the tests mention a top-level name (function, class, variable, import) of the
    prelude other than the entry point? Only then is the prelude executed in the checker."""
    names: set[str] = set()
    for fn, var, imported in _TOP.findall(prelude):
        if fn or var:
            names.add(fn or var)
        for part in imported.replace("(", " ").replace(")", " ").replace("\\", " ").split(","):
            words = part.split()
            if words:
                names.add(words[-1].split(".")[0])
    names.discard(entry)
    used = set(re.findall(r"[A-Za-z_]\w*", tests))
    return bool(names & used)


def run_function(ck: Checker, body: dict, legacy: bool) -> dict:
    entry = body.get("entry_point")
    g = TestGlobals(ck, set())
    code = None
    res: dict = {}
    if not entry:
        return {"status": "sandbox_error", "error": "function-style job without entry_point"}
    tests_src = body.get("tests") or ""
    if legacy:  # the tests run in W; here they are only checked, while W loads the solution
        err = _legacy_tests_problem(tests_src, entry)
        if err:
            return {"status": "sandbox_error", "error": err}
    else:  # prepare the tests while the worker loads the solution
        g["__name__"] = "__tests__"
        g["__builtins__"] = builtins
        prelude = body.get("prelude")
        if prelude and _uses_helpers(prelude, tests_src, entry):  # else the prompt is not needed here
            try:
                exec(compile(prelude, "prelude.py", "exec"), g)  # the task's own trusted helpers (prompt)
            except Exception as e:  # noqa: BLE001
                res["prelude_note"] = f"prelude not used: {type(e).__name__}: {e}"[:300]
        g[entry] = ck.proxy(entry)
        g["__rl_Abort"] = Abort
        g["__rl_record"] = ck.record
        try:  # counting every assert needs the instrumented tree; pass/fail compiles the source directly
            code = compile(instrument(tests_src) if ck.partial else tests_src, "tests.py", "exec")
        except SyntaxError as e:
            return {"status": "sandbox_error", "error": f"tests do not compile: {e}"}
    msg = ck.recv()
    if type(msg) is not list or len(msg) != 3 or msg[0] != "ready" or not valid_status(msg[1]) \
            or type(msg[2]) is not list:
        raise ProtocolError("bad load report")
    status, names = msg[1], {str(n) for n in msg[2]}
    if status[0] == "load_error":
        tname = str(status[1])
        st = "memory" if status[4] == "MemoryError" else "error"
        return {"status": st, "error": f"{tname}: {status[2]}"[:DETAIL_CAP],
                "traceback": str(status[3])[-DETAIL_CAP:]}
    if legacy:
        return _run_legacy(ck, status, entry, tests_src)
    g._remote = names
    try:
        exec(code, g)
        check = g.get("check")
        if not callable(check):
            return {"status": "sandbox_error", "error": "tests do not define check(candidate)"}
        if entry not in names:
            raise NameError(f"the solution does not define {entry!r}")
        check(g[entry])
    except Abort:
        raise
    except BaseException as e:  # noqa: BLE001 - every failure of the tests is a fail
        if ck.first_failure is not e:
            ck.failed += 1
            if ck.first_failure is None:
                ck.first_failure = e
    ok = ck.failed == 0 and ck.first_failure is None
    if ck.partial:
        res.update(tests_passed=ck.passed, tests_total=ck.passed + ck.failed)
    else:
        res.update(tests_passed=int(ok), tests_total=1)
    res.update(status="pass" if ok else "fail", passed=ok)
    if ck.first_failure is not None:
        res["error"], res["traceback"] = fmt_exc(ck.first_failure)
    return res


def _legacy_tests_problem(tests: str, entry: str) -> str | None:
    """Why legacy ``tests`` cannot run (our side: a ``sandbox_error``), or None."""
    if not entry.isidentifier():
        return f"entry point {entry!r} is not a Python name"
    try:
        tree = ast.parse(tests, "tests.py")
    except SyntaxError as e:
        return f"tests do not compile: {e}"
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "check" for n in tree.body):
        return "tests do not define check(candidate)"
    return None


def _raw_frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "little") + payload


def _run_legacy(ck: Checker, status: list, entry: str, tests: str) -> dict:
    """Legacy mode: the tests run in W, in the solution's interpreter. The verdict is a pass only
    when W's harness reports that ``check`` returned and then echoes a nonce made here only after
    that report: exit codes, ``SystemExit``, ``atexit`` and frames written blindly to the pipes
    before the tests ran are never a pass. What legacy mode trusts: see the module docstring."""
    fail = {"status": "fail", "passed": False, "tests_passed": 0, "tests_total": 1}
    if status != ["loaded", None]:  # e.g. sys.exit() at the top level: the tests never ran
        return dict(fail, error=f"program ended with {status} before the tests ran")
    try:
        wire.write_all(ck.c2w_w, _raw_frame(f"{entry}\n{tests}".encode()), ck.deadline)
    except wire.Late:
        raise Deadline() from None
    except OSError:
        pass  # W is gone: reading its channel tells why
    msg = ck.recv()
    if msg == ["checked"]:
        nonce = os.urandom(16).hex()
        try:
            wire.write_all(ck.c2w_w, _raw_frame(nonce.encode()), ck.deadline)
        except wire.Late:
            raise Deadline() from None
        except OSError:
            pass
        if ck.recv() == ["passed", nonce]:
            return {"status": "pass", "passed": True, "tests_passed": 1, "tests_total": 1}
        raise ProtocolError("wrong answer to the legacy harness's nonce")
    if type(msg) is list and len(msg) == 5 and msg[0] == "failed":
        if msg[4] == "MemoryError":
            ck.memory_error = True
        return dict(fail, error=f"{msg[1]}: {msg[2]}"[:DETAIL_CAP], traceback=str(msg[3])[-DETAIL_CAP:])
    raise ProtocolError("unexpected frame from the legacy harness")


_TRAILING_WS = " \t\r\f\v"


def _norm_out(s: str) -> list[str]:
    """Lines with trailing ASCII whitespace removed, without the empty lines at the end. Stdout
    matches when these are equal: trailing spaces, a missing or extra final newline and CRLF
    line ends are accepted; extra, missing or reordered lines or tokens, leading blank lines,
    leading or doubled spaces and other (Unicode) whitespace are not."""
    lines = [ln.rstrip(_TRAILING_WS) for ln in s.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _reap_after_done(ck: Checker) -> tuple[str, str] | None:
    """W's own code exits with status 0 right after its one end-of-program report; anything else
    means the program forged the report and kept going (then crashed, or wrote more)."""
    while True:
        try:
            pid, st = os.waitpid(ck.wpid, os.WNOHANG)
        except ChildProcessError:
            return "crash", "the worker vanished after its end-of-program report"
        if pid:
            ck.reaped = True
            break
        if time.monotonic() >= ck.deadline:
            raise Deadline()
        if wire.TICK is not None:
            wire.TICK()
        time.sleep(0.001)
    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        return "crash", f"the program went on after reporting its end and was killed by signal {sig}"
    if os.WEXITSTATUS(st) != 0:
        return "error", f"the program went on after reporting its end and exited with status {os.WEXITSTATUS(st)}"
    r, _, _ = select.select([ck.w2c_r], [], [], 0)
    if r and os.read(ck.w2c_r, 1):
        return "error", "more than one end-of-program report (a forged frame)"
    return None


def run_stdio(ck: Checker, body: dict, in_w: int, out_r: int, cap: int) -> dict:
    to_worker(ck.c2w_w, {"kind": "stdio", "program": body["solution"]}, ck.deadline)
    in_w, data = wire.open_feed(in_w, (body.get("stdin") or "").encode())
    chunks, size, eof, done = [], 0, False, None
    ctl = ck.w2c_r
    while not (eof and done is not None):
        rem = ck.deadline - time.monotonic()
        if done is not None:
            rem = min(rem, 0.5)  # the program ended; its stdout may still be held by a child
        if rem <= 0:
            if done is not None:
                break
            raise Deadline()
        rl = [out_r] if not eof else []
        if done is None:
            rl.append(ctl)
        wl = [in_w] if in_w >= 0 else []
        if wire.TICK is not None:
            wire.TICK()
        r, w, _ = select.select(rl, wl, [], min(rem, 0.1))
        if w:
            in_w, data = wire.feed(in_w, data)
        if out_r in r:
            b = os.read(out_r, 65536)
            if not b:
                eof = True
            else:
                size += len(b)
                if size > cap:
                    raise OutputLimit()
                chunks.append(b)
        if ctl in r:
            msg = ck.recv()
            if type(msg) is not list or not msg or msg[0] != "done" or not valid_status(msg[1:]):
                raise ProtocolError("bad end-of-program report")
            done = msg
    stdout = b"".join(chunks).decode("utf-8", errors="replace")
    res = {"tests_total": 1, "stdout": stdout if body.get("full_stdout") else stdout[:1000]}
    bad_end = _reap_after_done(ck)
    if bad_end is not None:
        return dict(res, status=bad_end[0], error=bad_end[1])
    status = done[1:]
    if status[0] == "load_error":
        st = "memory" if status[4] == "MemoryError" else "error"
        return dict(res, status=st, error=f"{status[1]}: {status[2]}"[:DETAIL_CAP],
                    traceback=str(status[3])[-DETAIL_CAP:])
    if status[0] == "exited" and status[1] != 0:
        return dict(res, status="error", error=f"program exited with status {status[1]}")
    ok = _norm_out(stdout) == _norm_out(body.get("expected_stdout") or "")
    return dict(res, status="pass" if ok else "fail", passed=ok, tests_passed=int(ok),
                error=None if ok else "stdout differs from the expected output")

