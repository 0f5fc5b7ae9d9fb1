"""Exec jobs (compilers, compiled programs, other interpreters): the checker's side (stdlib only).

W, confined, execs ``argv`` with the job's files in its scratch dir (``worker.exec_program``); C
feeds stdin, captures stdout and stderr and waits for W's exit: the verdict is what C sees.
"""

from __future__ import annotations

import os
import select
import signal
import time

import wire
from checker import Checker, Deadline, OutputLimit, to_worker

VERDICT_CAP = 160 << 20  # exec jobs return their stdout, stderr and collected files (compiled programs)


def verdict_cap(hdr: dict) -> int:
    """The largest verdict frame of a job: JSON writes a control byte of the captured stdout as
    ``\\u00XX`` (6 bytes), so a stdout at its cap full of them must still fit; else the job's own
    output would turn its verdict into a ``sandbox_error``."""
    return VERDICT_CAP + 6 * int(hdr.get("output_cap") or 0)
_FILES_CAP = 64 << 20
_ERR_CAP = 64 << 10
_OOM_WORDS = ("OutOfMemoryError", "std::bad_alloc", "heap out of memory", "Cannot allocate memory",
              "memory allocation of", "out of memory", "MemoryError", "cannot allocate memory")


def _write_job_files(job_dir: str, files: dict) -> None:
    """The job's input files (a source, a compiled program, a checker's three texts), written by
    C before W may run anything. Names are plain file names; ``{"b64", "mode"}`` each."""
    import base64

    for name, spec in files.items():
        if type(name) is not str or not name or "/" in name or name in (".", "..") or "\0" in name:
            raise ValueError(f"bad file name {name!r}")
        data = base64.b64decode(spec["b64"])
        fd = os.open(os.path.join(job_dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     int(spec.get("mode", 0o644)) & 0o755)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def _collect_files(job_dir: str, patterns: list) -> dict:
    """Regular files (never links) directly in the job dir whose names match ``patterns``."""
    import base64
    import fnmatch

    out, total = {}, 0
    for name in sorted(os.listdir(job_dir)):
        if not any(fnmatch.fnmatchcase(name, str(p)) for p in patterns):
            continue
        try:
            fd = os.open(os.path.join(job_dir, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not (st.st_mode & 0o170000 == 0o100000) or total + st.st_size > _FILES_CAP:
                continue
            chunks, got = [], 0
            while got < st.st_size:
                b = os.read(fd, min(1 << 20, st.st_size - got))
                if not b:
                    break
                chunks.append(b)
                got += len(b)
            total += got
            out[name] = {"b64": base64.b64encode(b"".join(chunks)).decode(), "mode": st.st_mode & 0o755}
        finally:
            os.close(fd)
    return out


def run_exec(ck: Checker, body: dict, job_dir: str, in_w: int, out_r: int, err_r: int, cap: int) -> dict:
    """An exec job: W execs ``argv`` (a compiler, a compiled program, an interpreter) with the
    job's files in its scratch dir. C feeds stdin, captures stdout (capped: more is an
    ``output_limit``) and the first 64 KiB of stderr, and waits for W's exit. Status ``ran`` is a
    normal exit with status 0; the caller compares the output. Non-zero status: ``error``
    (``memory`` when stderr says the program ran out of memory); a signal: ``crash``
    (SIGXCPU: ``timeout``)."""
    try:
        _write_job_files(job_dir, body.get("files") or {})
    except (ValueError, KeyError, OSError, TypeError) as e:
        return {"status": "sandbox_error", "error": f"cannot write the job's files: {e}"}
    to_worker(ck.c2w_w, {"kind": "exec", "argv": body["argv"], "env": body.get("env") or {}}, ck.deadline)
    status, out, err = _pump(ck, (body.get("stdin") or "").encode(), in_w, out_r, err_r, cap)
    stdout = out.decode("utf-8", errors="replace")
    stderr = err.decode("utf-8", errors="replace")
    res = {"tests_total": 1, "stdout": stdout, "stderr": stderr, "exit_code": None, "signal": None,
           "passed": False}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        res["signal"] = sig
        if sig == signal.SIGXCPU:
            return dict(res, status="timeout", error="CPU time limit")
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        oom = sig == signal.SIGABRT and any(w in stderr for w in _OOM_WORDS)
        return dict(res, status="memory" if oom else "crash", error=f"killed by signal {sig} ({name})")
    code = os.WEXITSTATUS(status)
    res["exit_code"] = code
    if code != 0:
        head = "; ".join(ln for ln in stderr.strip().splitlines()[:3])[:500]
        st = "memory" if any(w in stderr for w in _OOM_WORDS) else "error"
        return dict(res, status=st, error=f"exited with status {code}" + (f": {head}" if head else ""))
    if body.get("collect"):
        res["files"] = _collect_files(job_dir, list(body["collect"]))
    return dict(res, status="ran")


def _pump(ck: Checker, stdin: bytes, in_w: int, out_r: int, err_r: int, cap: int) -> tuple[int, bytes, bytes]:
    """Feed stdin, read stdout (over ``cap``: ``OutputLimit``) and the start of stderr until W has
    exited and its output is read (or 0.5 s after its exit, when a child of it holds the pipes).
    Returns W's wait status, stdout and stderr."""
    in_w, data = wire.open_feed(in_w, stdin)
    out_chunks, size, err_chunks, err_size = [], 0, [], 0
    open_fds = {out_r, err_r}
    status, exited_at = None, None
    try:  # readable once W exits: its end wakes the select below instead of a polling interval
        pidfd = os.pidfd_open(ck.wpid)
    except (AttributeError, OSError):
        pidfd = -1
    while open_fds or status is None:
        now = time.monotonic()
        if status is None:
            try:
                pid, st = os.waitpid(ck.wpid, os.WNOHANG)
            except ChildProcessError:
                pid, st = ck.wpid, 0x7F00  # vanished
            if pid:
                ck.reaped, status, exited_at = True, st, now
                if not open_fds:
                    break  # ended and its output is all read: no wait
        if status is not None and open_fds and now - exited_at > 0.5:
            break  # the program ended; a child of it still holds its output: that output is not waited for
        if now >= ck.deadline:
            raise Deadline()
        if wire.TICK is not None:
            wire.TICK()
        wl = [in_w] if in_w >= 0 else []
        rl = list(open_fds) + ([pidfd] if pidfd >= 0 and status is None else [])
        r, w, _ = select.select(rl, wl, [], min(ck.deadline - now, 0.02 if status is None and pidfd < 0 else 0.1))
        r = [fd for fd in r if fd != pidfd]  # W's end: the waitpid above reaps it next
        if w:
            in_w, data = wire.feed(in_w, data)
        for fd in r:
            b = os.read(fd, 65536)
            if not b:
                open_fds.discard(fd)
            elif fd == out_r:
                size += len(b)
                if size > cap:
                    raise OutputLimit()
                out_chunks.append(b)
            elif err_size < _ERR_CAP:
                err_chunks.append(b[:_ERR_CAP - err_size])
                err_size += len(b)
    if in_w >= 0:
        os.close(in_w)
    if pidfd >= 0:
        os.close(pidfd)
    return status, b"".join(out_chunks), b"".join(err_chunks)
