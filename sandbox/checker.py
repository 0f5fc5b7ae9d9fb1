"""The trusted side of a job (C): its guard, its view of the worker, the rebuilt exceptions (stdlib only).

The checker forks W, reads the job only then, and decides the verdict from what it sees: W's
frames (tagged plain data), W's exit, its captured output. ``Guard`` accounts for what rlimits
cannot (the job's total resident memory and disk); the job modes are in ``pymodes.py`` (Python
functions, legacy, stdin/stdout) and ``execjob.py`` (exec jobs).
"""

from __future__ import annotations

import ast
import builtins
import errno
import json
import os
import signal
import time
import traceback

import scrub
import wire
from worker import BUILTINS, DETAIL_CAP


class Abort(BaseException):
    """Stops the tests: the worker cannot answer any more."""


class Deadline(Abort):
    pass


class WorkerGone(Abort):
    pass


class OutputLimit(Abort):
    pass


class DiskLimit(Abort):
    pass


class ProtocolError(Abort):
    """The worker sent a frame that our side of it never sends (the solution wrote to the pipe)."""


class MemoryLimit(Abort):
    pass


def _proc_text(path: str) -> str | None:
    """A /proc file of a job's process; None when the process is gone. Any other failure (no fd
    left: a job that lowered its checker's RLIMIT_NOFILE where no filter stops it) is not "no
    memory": the guard fails closed and the job is stopped as over the cap."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ESRCH):
            return None
        raise _unmeasurable(e) from None


def _unmeasurable(e: OSError) -> MemoryLimit:
    return MemoryLimit(f"the guard could not measure the job's memory ({e}): counted as over the cap")


def _kids(pid: int) -> list[int]:
    out: list[int] = []
    for t in _tids(pid):
        out += [int(x) for x in (_proc_text(f"/proc/{pid}/task/{t}/children") or "").split()]
    return out


def _statm_rss(pid: int) -> int:
    """``pid``'s resident memory. A process whose main thread exited alone (``SYS_exit`` on the leader, its
    other threads running on) shows an empty ``statm`` while those threads hold its memory: then a live
    thread's is read (the red-team pass of issue 41: 3 such processes held 1.5 GiB under a 960 MiB guard)."""
    rss = _rss_of(f"/proc/{pid}/statm")
    if rss:
        return rss
    for tid in _tids(pid):
        rss = _rss_of(f"/proc/{pid}/task/{tid}/statm")
        if rss:
            return rss
    return 0


def _rss_of(path: str) -> int:
    text = _proc_text(path)
    try:
        return int(text.split()[1]) * _PAGE if text else 0
    except (ValueError, IndexError):
        return 0


def _tids(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ESRCH):
            return []
        raise _unmeasurable(e) from None


def _held_deleted(pid: int, dev: int, seen: set) -> tuple[int, bool]:
    """``(bytes, complete)``: the blocks of files on ``dev`` that ``pid`` holds open after deleting them (a
    directory walk cannot see them: the red-team pass held 240 MiB that way under a 16 MiB disk cap).
    ``seen`` dedups files held by several fds. ``complete`` is False when ``pid``'s fds cannot be read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as e:
        return 0, e.errno in (errno.ENOENT, errno.ESRCH)
    total = 0
    for fd in fds:
        try:
            if not os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)"):
                continue
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ESRCH):
                continue  # closed (or the process ended) meanwhile
            return total, False
        if st.st_dev == dev and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total, _no_unmeasured_mapping(pid, dev, seen)


def _no_unmeasured_mapping(pid: int, dev: int, seen: set) -> bool:
    """Whether ``pid`` maps no deleted file on ``dev`` that no fd holds: a file written, mapped, closed and deleted
    keeps its blocks, and its size cannot be read without CAP_SYS_ADMIN (``/proc/PID/map_files``), so such a
    mapping makes the measurement incomplete (over the cap)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            lines = [ln for ln in fh if ln.rstrip().endswith(" (deleted)")]
    except OSError as e:
        return e.errno in (errno.ENOENT, errno.ESRCH)
    for ln in lines:
        f = ln.split(None, 5)
        major, minor = (int(x, 16) for x in f[3].split(":"))
        if os.makedev(major, minor) == dev and (dev, int(f[4])) not in seen:
            return False
    return True


_PAGE = os.sysconf("SC_PAGE_SIZE")


class Guard:
    """Checks, at most every 100 ms, what rlimits cannot: the total size of the files the worker
    left in its scratch dir (a cheap statvfs check triggers an exact ``du``) and the total
    resident memory of every process of the job (RLIMIT_AS is per process; a tree of forked
    children could otherwise add up). Raises to stop the run."""

    def __init__(self, root: str, disk_limit: int, mem_limit: int, checker: int = 0, server: int = 0,
                 private_fs: bool = False) -> None:
        """In the checker by default; the server runs one too, with ``checker`` the job's checker pid and
        ``server`` its own: the same job (every descendant of the server but the checker itself).
        ``private_fs`` (tier A: the server's own tmpfs, one job at a time): every byte the free space drops
        by is the job's, counted whatever holds it (a name, an fd, a mapping, an fd in flight in a socket)."""
        self.root, self.disk_limit, self.mem_limit, self.next = root, disk_limit, mem_limit, 0.0
        self.private_fs = private_fs
        self.free0 = self._free()
        self.me, self.server = checker or os.getpid(), server or os.getppid()

    def _free(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    def _job_pids(self) -> list[int]:
        """Every process of the job: the server's descendants but the checker itself."""
        stack, seen = [p for p in _kids(self.server) if p != self.me] + _kids(self.me), {}
        while stack:
            p = stack.pop()
            if p not in seen:
                seen[p] = None
                stack += _kids(p)
        return list(seen)

    def _job_disk(self, pids: list[int]) -> tuple[int, bool]:
        """The job's files: below its scratch dir, and those its processes ``pids`` hold open after deleting them."""
        used, complete = scrub.disk_usage(self.root)
        dev, seen = os.stat(self.root).st_dev, set()
        for p in pids:
            held, whole = _held_deleted(p, dev, seen)
            used, complete = used + held, complete and whole
        return used, complete

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + 0.1
        pids = self._job_pids()  # one walk of the job's tree per check, for the disk and the memory
        if self.free0 - self._free() > self.disk_limit:  # then measured exactly, at any depth
            if self.private_fs:
                raise DiskLimit("the job's files (named or not) exceeded the disk cap")
            used, complete = self._job_disk(pids)
            if used > self.disk_limit or not complete:  # hidden (unreadable) files count as over
                raise DiskLimit()
        if sum(_statm_rss(p) for p in pids) > self.mem_limit:
            raise MemoryLimit()


class CandidateError(Exception):
    """The candidate raised an exception the checker cannot rebuild as a builtin one."""


class CandidateBaseError(BaseException):
    """The candidate raised a ``BaseException`` that is not an ``Exception`` and cannot be rebuilt:
    like in-process, the tests' ``except Exception`` does not catch it."""


_BUILTIN_EXC = {n: c for n, c in BUILTINS.items() if isinstance(c, type) and issubclass(c, BaseException)}


def _rebuild(tname: str, base: str, text: str) -> BaseException:
    """The checker-side exception for a candidate's ``tname`` (nearest builtin class ``base``):
    a fresh builtin of that class, so the tests' ``except`` clauses match as they would
    in-process (``SystemExit`` / ``KeyboardInterrupt`` stay ``BaseException``s and are not caught by
    ``except Exception``). ``StopIteration`` becomes a ``RuntimeError``, as PEP 479 does in
    generators: raised through ``all(map(lambda ..: candidate(..) == .., cases))`` it would
    otherwise end the iteration early and make the ``all`` true."""
    cls = _BUILTIN_EXC.get(base)
    if cls is None:
        return CandidateError(f"{tname}: {text}")
    if issubclass(cls, (StopIteration, StopAsyncIteration)):
        return RuntimeError(f"the candidate raised {tname}: {text}")
    try:
        exc = cls(text)
    except Exception:  # noqa: BLE001 - exotic constructors (UnicodeError subclasses, groups)
        return (CandidateError if issubclass(cls, Exception) else CandidateBaseError)(f"{tname}: {text}")
    if tname != base and hasattr(exc, "add_note"):
        exc.add_note(f"raised by the candidate as {tname} (a subclass of {base})")
    return exc


class Checker:
    def __init__(self, c2w_w: int, w2c_r: int, wpid: int, deadline: float, result_cap: int):
        self.c2w_w, self.w2c_r, self.wpid, self.deadline, self.cap = c2w_w, w2c_r, wpid, deadline, result_cap
        self.memory_error = False
        self.passed = 0
        self.failed = 0
        self.first_failure: BaseException | None = None
        self.partial = False
        self.reaped = False  # W was waited for (its pid may be reused: do not signal it then)

    def recv(self):
        try:
            return wire.decode_json(wire.recv_raw(self.w2c_r, self.deadline, cap=self.cap))
        except wire.Late:
            raise Deadline() from None
        except wire.Oversize:
            raise OutputLimit() from None
        except wire.Closed:
            raise WorkerGone() from None
        except wire.WireError as e:  # a malformed frame: not ours
            raise ProtocolError(str(e)) from None

    def call(self, name: str, args: tuple, kwargs: dict):
        try:
            payload = json.dumps(["call", name, wire.encode(list(args)), wire.encode(kwargs)],
                                 separators=(",", ":")).encode()
        except wire.NotPlain as e:
            raise TypeError(f"{e} (tests that pass non-plain arguments need legacy mode)") from None
        try:
            wire.write_all(self.c2w_w, len(payload).to_bytes(4, "little") + payload, self.deadline)
        except wire.Late:
            raise Deadline() from None
        except OSError:
            raise WorkerGone() from None
        msg = self.recv()
        if type(msg) is list and len(msg) == 2 and msg[0] == "ok":
            return msg[1]
        if type(msg) is list and len(msg) == 5 and msg[0] == "exc":
            tname, text, base = str(msg[1]), str(msg[2]), str(msg[4])
            if base == "MemoryError":
                self.memory_error = True
            raise _rebuild(tname, base, text)
        raise ProtocolError("unexpected answer to a call")

    def proxy(self, name: str):
        checker = self

        def candidate(*args, **kwargs):
            return checker.call(name, args, kwargs)

        candidate.__name__ = candidate.__qualname__ = name
        return candidate

    def record(self, ok: bool, exc: BaseException | None) -> None:
        if ok:
            self.passed += 1
            return
        self.failed += 1
        if self.first_failure is None:
            self.first_failure = exc
        if not self.partial:
            raise exc


class TestGlobals(dict):
    """Test namespace: names the tests do not define resolve to the solution's functions (remote)."""

    def __init__(self, checker: Checker, remote_names: set[str]):
        super().__init__()
        self._checker, self._remote = checker, remote_names

    def __missing__(self, key):
        if key in self._remote and not hasattr(builtins, key):
            fn = self._checker.proxy(key)
            self[key] = fn
            return fn
        raise KeyError(key)


def instrument(tests: str) -> ast.Module:
    """Wrap every assert inside ``check`` so that passes and failures are counted."""
    tree = ast.parse(tests, "tests.py")

    class T(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert):
            rec = lambda ok, e: ast.Expr(ast.Call(ast.Name("__rl_record", ast.Load()),  # noqa: E731
                                                  [ast.Constant(ok), e], []))
            new = ast.Try(
                body=[node],
                handlers=[ast.ExceptHandler(ast.Name("__rl_Abort", ast.Load()), None, [ast.Raise()]),
                          ast.ExceptHandler(ast.Name("BaseException", ast.Load()), "__rl_e",
                                            [rec(False, ast.Name("__rl_e", ast.Load()))])],
                orelse=[rec(True, ast.Constant(None))], finalbody=[])
            return ast.copy_location(new, node)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "check":
            T().visit(node)
    return ast.fix_missing_locations(tree)


def fmt_exc(e: BaseException) -> tuple[str, str]:
    line = f"{type(e).__name__}: {e}"[:DETAIL_CAP] if str(e) else type(e).__name__
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-DETAIL_CAP:]
    return line, tb


def worker_death(wpid: int) -> tuple[str, str]:
    """Status for a worker that stopped answering."""
    pid, st, until = 0, 0, time.monotonic() + 0.5
    while pid == 0 and time.monotonic() < until:  # its pipe closes a moment before it becomes a zombie
        try:
            pid, st = os.waitpid(wpid, os.WNOHANG)
        except ChildProcessError:
            return "crash", "worker vanished"
        if pid == 0:
            time.sleep(0.001)
    if pid == 0:
        os.kill(wpid, signal.SIGKILL)
        return "crash", "worker closed its channel"
    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        if sig == signal.SIGXCPU:
            return "timeout", "CPU time limit"
        return "crash", f"worker killed by signal {sig} ({signal.Signals(sig).name})"
    return "crash", f"worker exited with status {os.WEXITSTATUS(st)} during the run"




def await_confined(ck: Checker) -> dict | None:
    """W's first frame: ``["confined"]``, or ``["fatal", why]`` when it could not confine itself
    (our side failed: ``sandbox_error``). No untrusted code has run yet, so this is not forgeable."""
    msg = ck.recv()
    if type(msg) is list and len(msg) == 2 and msg[0] == "fatal":
        return {"status": "sandbox_error", "passed": False, "error": str(msg[1])[:DETAIL_CAP]}
    if msg != ["confined"]:
        raise ProtocolError("no confinement report")
    return None


def valid_status(s) -> bool:
    """The program's end as W reports it: ["loaded", None], ["exited", int] or
    ["load_error", type, message, traceback, builtin base]."""
    if type(s) is not list or not s:
        return False
    if s[0] == "loaded":
        return len(s) == 2 and s[1] is None
    if s[0] == "exited":
        return len(s) == 2 and type(s[1]) is int
    return s[0] == "load_error" and len(s) == 5 and all(type(x) is str for x in s[1:])


def to_worker(fd: int, setup: dict, deadline: float) -> None:
    try:
        wire.send(fd, setup, deadline)
    except OSError:
        pass  # the worker is gone; reading its channel next tells why ("fatal" frame or EOF)


