"""The sandbox fork server: the program that runs *inside* isolation (stdlib only).

Started by ``rewardlab.sandbox`` as ``python -I -S <real path>/server.py`` (inside bubblewrap in
tier A, as a dedicated non-root uid in tier B). It talks to its parent over stdin/stdout with
length-prefixed JSON frames (see ``wire.py``) and runs one job at a time:

    server (long-lived, trusted, child subreaper)
      └─ checker C  (forked per job; trusted: reads the tests, decides the verdict)
           └─ worker W  (forked by C *before* C reads the job; untrusted: runs the solution)

* W drops to hard rlimits, a nested Landlock domain (file allow-list, no TCP, cannot signal or
  ptrace C or the server) and a seccomp deny-list, reports ``["confined"]`` (the only moment a
  ``"fatal"`` frame is believed: no untrusted code exists yet), then executes the solution. For
  function-style jobs it only answers ``call(name, args)`` requests; arguments and results
  cross the pipe as tagged plain data (``wire.encode``/``wire.decode_json``) and are rebuilt as
  fresh builtins in C, so objects with a forged ``__eq__``, patched assertion helpers, exit
  codes, ``atexit`` or ``SystemExit`` cannot influence the verdict: C runs ``check(candidate)``
  itself, with ``candidate`` a proxy to W. W never holds the tests. Exceptions of the candidate
  are rebuilt as their nearest builtin class (``SystemExit``/``KeyboardInterrupt`` stay
  non-``Exception``s; ``StopIteration`` becomes ``RuntimeError``, as PEP 479 does). Any frame
  our W code never sends (the solution wrote to the pipe) is an ``error``, never a pass and
  never a ``sandbox_error``.
* C's own stdin/stdout are the server's channel to the parent: C puts ``/dev/null`` on fds
  0-2 as soon as it has read the job, so tests that print (e.g. a value the solution returned)
  or read input reach nothing.
* For stdin/stdout jobs C feeds stdin and captures stdout up to a cap. The program's end is
  CPython's: flush, wait for non-daemon threads, run its ``atexit`` handlers (their output
  counts, their exceptions are ignored), flush; then W reports the end once and exits 0. C
  requires exactly that report, then W's exit with status 0, then nothing more on the channel
  (a forged report followed by a crash is a crash). Exit status: ``SystemExit`` with ``None``
  / an int whose low 8 bits are 0 is a normal end, as in CPython; ``os._exit`` never is
  (it skips the end of the program). Stdout matches the expected text line by line after
  removing trailing ASCII whitespace of each line and empty lines at the end (``_norm_out``).
* ``legacy`` jobs run the tests inside W, in the solution's interpreter (for tests that need
  object identity or custom classes); their verdict is flagged ``integrity: legacy``. The
  solution's top level runs first, alone; a ``SystemExit`` there means the tests never ran
  (fail). Then C sends the tests; W's harness runs them with builtins copied before the
  solution ran and the solution's globals minus names that shadow builtins (the names the
  tests define are added to the solution's globals, as when both were one module), and only when
  ``check(entry_point)`` *returned* does it say so; C then makes a random nonce and the pass is
  W's harness echoing it. The harness reads and writes those frames with C functions captured
  before the solution ran (``os.read``/``os.write``, ``compile``, ``exec``), so patching
  ``json``, ``wire``, ``builtins`` or this module does not change the tests or the words.
  Exit codes, ``SystemExit``/``KeyboardInterrupt``/other ``BaseException``s at any point,
  ``os._exit``, ``atexit`` handlers, excepthooks, printing and frames written blindly to the
  pipes are never a pass. **What legacy mode trusts**: that the solution does not tamper with
  the interpreter it shares with the tests. It can still fake a pass by returning objects
  whose ``__eq__`` (or other dunder the tests use) lies, patching modules the tests import
  (``math.isclose``, ...), mutating builtin types through ``gc``/``ctypes``, installing
  trace/profile hooks or threads that rewrite the tests' frames, reading the tests' expected
  values through ``gc``/frames, or driving the harness protocol by hand (reading the nonce off
  its pipe). Use it only where the tests need it.
* After each job the server SIGKILLs every descendant (walking ``/proc/*/task/*/children``;
  orphans come back to it because it is a child subreaper) and removes the job's scratch dir.

Parent -> server frames: ``config`` (once), then per job a small ``header`` (limits only) read by
the server and a ``body`` (solution, tests) read by C. Server -> parent: ``hello``, one verdict per
job. The server exits on EOF, on ``{"op": "stop"}``, on SIGTERM, or after any anomaly.
"""

from __future__ import annotations

import sys

sys.path.insert(0, __file__.rpartition("/")[0])  # -I does not put the script's folder on sys.path

import ast  # noqa: E402
import atexit  # noqa: E402
import builtins  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import confine  # noqa: E402
import scrub  # noqa: E402
import wire  # noqa: E402

# Light modules solutions commonly import: loading them here makes forked workers start warm.
# Heavy ones (decimal, hashlib, statistics, dataclasses, ...) are left out on purpose: every
# megabyte of this process makes each fork and exit slower.
for _m in ("typing", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
           "operator", "copy"):
    try:
        __import__(_m)
    except ImportError:
        pass

_MAX_BODY = 64 << 20
_DETAIL_CAP = 2000


# ============================================================================ process control
def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as fh:
                out += [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            pass
    return out


def kill_descendants(in_namespace: bool) -> None:
    """SIGKILL every descendant and reap them all (orphans are re-parented to us: subreaper)."""
    if in_namespace:
        try:
            os.kill(-1, signal.SIGKILL)  # everything in our PID namespace except us and its init
        except OSError:
            pass
    me = os.getpid()
    while True:
        stack, seen = _children(me), set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
            stack += _children(p)
        try:
            os.waitpid(-1, 0)  # at least one child changes state (killed ones die promptly)
        except ChildProcessError:
            return
        except InterruptedError:
            pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                return


_uid_count = (0.0, 0)


def uid_task_count() -> int:
    """Tasks (threads included) of our real uid visible in /proc, cached for a second:
    RLIMIT_NPROC counts them all, so the worker's limit is this plus its allowance."""
    global _uid_count
    now = time.monotonic()
    if now - _uid_count[0] < 1.0:
        return _uid_count[1]
    uid, n = os.getuid(), 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{d}/task"))
            except OSError:
                pass
    _uid_count = (now, n)
    return n


# ============================================================================ worker (untrusted)
def _close_all_but(keep: set[int]) -> None:
    lo = 3
    for fd in sorted(k for k in keep if k >= 3):
        if fd > lo:
            os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 1 << 20)


def _builtin_base(e: BaseException) -> str:
    """Name of the nearest builtin class in the MRO of ``e``'s type (what ``except`` clauses of
    the tests would see in-process: ``class E(ValueError)`` is caught by ``except ValueError``)."""
    try:
        for c in type(e).__mro__:
            if c.__module__ == "builtins" and _BUILTINS.get(c.__name__) is c:
                return c.__name__
    except BaseException:  # noqa: BLE001 - a hostile metaclass
        pass
    return "BaseException"


def _exc_info(e: BaseException) -> list:
    try:
        msg = str(e)[:_DETAIL_CAP]
    except BaseException:
        msg = "<unprintable>"
    try:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-_DETAIL_CAP:]
    except BaseException:
        tb = ""
    try:
        name = str(type(e).__name__)[:200]
    except BaseException:
        name = "BaseException"
    return ["exc", name, msg, tb, _builtin_base(e)]


def _send_frame(fd: int, obj) -> None:
    try:
        data = json.dumps(obj, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError) as e:
        data = json.dumps(["exc", "NotPlain", str(e)[:_DETAIL_CAP], "", "TypeError"]).encode()
    wire.write_all(fd, len(data).to_bytes(4, "little") + data, None)


# Legacy-mode frames are read and written in W with builtin (C) functions captured before the
# solution runs and with no global name lookups, so a solution that patches ``json``, ``wire``,
# ``builtins`` or this module cannot change the tests W runs or the words W sends for them.
def _legacy_read(fd: int, read) -> bytes | None:
    head = b""
    while head.__len__() < 4:
        b = read(fd, 4 - head.__len__())
        if not b:
            return None
        head += b
    n, got, parts = head[0] | head[1] << 8 | head[2] << 16 | head[3] << 24, 0, []
    while got < n:
        b = read(fd, n - got)
        if not b:
            return None
        parts.append(b)
        got += b.__len__()
    return b"".join(parts)


def _legacy_write(fd: int, payload: bytes, write) -> None:
    data = payload.__len__().to_bytes(4, "little") + payload
    while data:
        data = data[write(fd, data):]


def _exit_status(code) -> int:
    """The process exit status ``SystemExit(code)`` gives in CPython (None: 0, int: its low 8
    bits, anything else is printed and gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        try:
            c = int(code)
        except BaseException:  # noqa: BLE001 - an int subclass with a hostile __int__
            return 1
        return c & 0xFF if -(1 << 63) <= c < (1 << 63) else 255
    return 1


def worker_main(cfg: dict, hdr: dict, job_dir: str, c2w_r: int, w2c_w: int, in_r: int, out_w: int, nproc: int,
                err_w: int = -1) -> None:
    """Runs in W. Never returns; everything before ``exec`` of the solution is ours."""
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    ruleset = cfg.get("_ruleset", -1)
    _close_all_but({c2w_r, w2c_w, in_r, out_w, err_w, ruleset})
    os.setsid()
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    os.chdir(job_dir)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": job_dir, "TMPDIR": job_dir,
                       "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
    tempfile.tempdir = None
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail with EFBIG instead of killing
    try:  # confine now, while the checker reads the job: nothing below runs unconfined
        timeout = float(hdr["timeout"])
        # as_mb: address space of exec jobs whose runtime reserves more than it uses (JVM, V8);
        # the resident memory of the whole job stays capped by memory_mb (the checker's guard)
        as_mb = int(hdr.get("as_mb") or hdr["memory_mb"])
        confine.set_rlimits(memory_bytes=as_mb << 20, cpu_seconds=int(math.ceil(timeout)) + 1,
                            file_bytes=int(hdr["file_mb"]) << 20, nofile=int(hdr["nofile"]), nproc=nproc)
        if cfg.get("landlock"):
            confine.landlock_restrict(ruleset)
            os.close(ruleset)
        if cfg.get("seccomp"):  # no IPC namespace of the job's own: SysV IPC and mqueues refused
            confine.apply_seccomp(deny_ipc=not cfg.get("_ipc_private"))
        elif cfg.get("tier") != "unsafe":
            confine.no_new_privs()
    except (OSError, ValueError) as e:
        _send_frame(w2c_w, ["fatal", f"confinement failed: {e}"])
        os._exit(0)
    # the first frame, sent before any untrusted code exists here: later "fatal" frames are forged
    _send_frame(w2c_w, ["confined"])
    setup = wire.recv(c2w_r, None, cap=_MAX_BODY)
    kind = setup["kind"]
    legacy = bool(setup.get("legacy"))
    if kind == "exec":
        _exec_program(setup, job_dir, c2w_r, w2c_w, in_r, out_w, err_w)
    if kind == "stdio":
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
    os.close(in_r)
    os.close(out_w)
    # Captured before the solution runs: C functions it can neither redefine nor patch.
    _exit, _read, _write, _compile, _exec = os._exit, os.read, os.write, compile, exec
    legacy_read, legacy_write = _legacy_read, _legacy_write
    clean_builtins = dict(builtins.__dict__) if legacy else None  # the builtins the tests will see
    run_exitfuncs = atexit._run_exitfuncs
    atexit._clear()  # only the program's own exit handlers run at its end (stdio)
    sys.argv = ["solution.py"]
    ns = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": builtins}
    program = setup["program"]
    del setup
    try:  # dont_inherit: the program is compiled as a fresh module (no future imports of ours)
        code = _compile(program, "solution.py", "exec", 0, True)
        del program
        _exec(code, ns)
        status = ["loaded", None]
    except SystemExit as e:  # function style: exit codes mean nothing, the namespace so far is tested
        status = ["exited", _exit_status(e.code)]
    except BaseException as e:  # noqa: BLE001 - any failure of untrusted code is reported
        status = ["load_error"] + _exc_info(e)[1:]
    if kind == "stdio":
        _end_of_program(run_exitfuncs)
        _send_frame(w2c_w, ["done"] + status)
        _exit(0)
    names = [k for k, v in list(ns.items()) if type(k) is str and callable(v) and not k.startswith("__")][:1000]
    _send_frame(w2c_w, ["ready", status, names])
    if legacy:
        # The tests arrive only now, after the solution's top level ran, as a raw frame
        # "<entry point>\n<tests>". They run with a copy of the solution's globals (minus names
        # that shadow builtins) and the builtins as they were before the solution ran.
        failure = None
        try:
            data = legacy_read(c2w_r, _read)
            if data is None:
                _exit(0)
            entry, _, tests = data.decode("utf-8").partition("\n")
            tg = {}
            for k, v in ns.items():
                if k == entry or k not in clean_builtins:
                    tg[k] = v
            tg["__builtins__"] = clean_builtins
            tg["__name__"] = "__tests__"
            tests_code = _compile(tests, "tests.py", "exec", 0, True, 0)  # optimize=0: asserts stay
        except BaseException as e:  # noqa: BLE001
            failure = e
        if failure is None:
            try:
                _exec(tests_code, tg)
                for k in tg:  # helpers the tests define (a ListNode, ...) are seen by the solution too
                    if k not in ns:
                        ns[k] = tg[k]
                tg["check"](tg[entry])
            except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, ...: not a completion
                failure = e
        if failure is None:
            # check() returned. Only now does the checker make the nonce; echoing it is the pass.
            legacy_write(w2c_w, b'["checked"]', _write)
            nonce = legacy_read(c2w_r, _read)
            if nonce is not None and nonce.__len__() == 32 and nonce.isalnum():
                legacy_write(w2c_w, b'["passed","' + nonce + b'"]', _write)
            _exit(0)
        try:
            _send_frame(w2c_w, ["failed"] + _exc_info(failure)[1:])
        finally:
            _exit(0)
    while True:
        try:
            msg = wire.decode_json(wire.recv_raw(c2w_r, None, cap=_MAX_BODY))
        except wire.WireError:
            _exit(0)
        if not (type(msg) is list and msg and msg[0] == "call"):
            _exit(0)
        _, name, args, kwargs = msg
        fn = ns.get(name)
        try:
            if not callable(fn):
                raise NameError(f"name {name!r} is not defined by the solution")
            out = ["ok", wire.encode(fn(*args, **kwargs))]
        except BaseException as e:  # noqa: BLE001
            out = _exc_info(e)
        _send_frame(w2c_w, out)


def _exec_program(setup: dict, job_dir: str, c2w_r: int, w2c_w: int, in_r: int, out_w: int, err_w: int) -> None:
    """Exec job (compilers, compiled programs, other interpreters): W, confined, becomes the
    program. Its stdin/stdout/stderr are C's pipes; the channel to C is closed first, so the
    program has no way to talk to the checker: its verdict is what C sees (exit status, output)."""
    argv = [str(a) for a in setup["argv"]]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": job_dir, "TMPDIR": job_dir, "LANG": "C.UTF-8"}
    env.update({str(k): str(v).replace("{job}", job_dir) for k, v in (setup.get("env") or {}).items()})
    argv = [a.replace("{job}", job_dir) for a in argv]
    os.dup2(in_r, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w if err_w >= 0 else out_w, 2)
    for fd in {c2w_r, w2c_w, in_r, out_w, err_w} - {-1, 0, 1, 2}:
        os.close(fd)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        os.execve(argv[0], argv, env)
    except BaseException as e:  # noqa: BLE001 - reported as the program's own failure (exit 127)
        try:
            os.write(2, f"cannot execute {argv[0]}: {e}\n".encode())
        finally:
            os._exit(127)


def _end_of_program(run_exitfuncs) -> None:
    """What CPython does when a program ends, in its order: flush stdout, wait for non-daemon
    threads, run the ``atexit`` handlers (their output counts; their exceptions are ignored),
    flush again. An ``os._exit`` anywhere in there skips the end-of-program report: no pass."""
    for step in ("flush", "threads", "atexit", "flush"):
        try:
            if step == "flush":
                for s in (sys.stdout, sys.__stdout__):
                    if s is not None:
                        s.flush()
            elif step == "threads":
                t = sys.modules.get("threading")
                if t is not None:
                    t._shutdown()
            else:
                run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass


# ============================================================================ checker (trusted)
class _Abort(BaseException):
    """Stops the tests: the worker cannot answer any more."""


class _Deadline(_Abort):
    pass


class _WorkerGone(_Abort):
    pass


class _OutputLimit(_Abort):
    pass


class _DiskLimit(_Abort):
    pass


class _Protocol(_Abort):
    """The worker sent a frame that our side of it never sends (the solution wrote to the pipe)."""


def _du(root: str) -> int:
    total = 0
    for d, dirs, files in os.walk(root):
        for f in dirs + files:
            try:
                total += os.lstat(os.path.join(d, f)).st_blocks * 512
            except OSError:
                pass
    return total


class _MemoryLimit(_Abort):
    pass


def _statm_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE")


class _Guard:
    """Checks, at most every 100 ms, what rlimits cannot: the total size of the files the worker
    left in its scratch dir (a cheap statvfs check triggers an exact ``du``) and the total
    resident memory of every process of the job (RLIMIT_AS is per process; a tree of forked
    children could otherwise add up). Raises to stop the run."""

    def __init__(self, root: str, disk_limit: int, mem_limit: int) -> None:
        self.root, self.disk_limit, self.mem_limit, self.next = root, disk_limit, mem_limit, 0.0
        self.free0 = self._free()
        self.me, self.server = os.getpid(), os.getppid()

    def _free(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    def _job_rss(self) -> int:
        total, stack, seen = 0, [p for p in _children(self.server) if p != self.me] + _children(self.me), set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            total += _statm_rss(p)
            stack += _children(p)
        return total

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + 0.1
        if self.free0 - self._free() > self.disk_limit and _du(self.root) > self.disk_limit:
            raise _DiskLimit()
        if self._job_rss() > self.mem_limit:
            raise _MemoryLimit()


class CandidateError(Exception):
    """The candidate raised an exception the checker cannot rebuild as a builtin one."""


class CandidateBaseError(BaseException):
    """The candidate raised a ``BaseException`` that is not an ``Exception`` and cannot be rebuilt:
    like in-process, the tests' ``except Exception`` does not catch it."""


_BUILTINS = dict(builtins.__dict__)  # taken at import, in the trusted server
_BUILTIN_EXC = {n: c for n, c in _BUILTINS.items() if isinstance(c, type) and issubclass(c, BaseException)}


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


class _Checker:
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
            raise _Deadline() from None
        except wire.Oversize:
            raise _OutputLimit() from None
        except wire.Closed:
            raise _WorkerGone() from None
        except wire.WireError as e:  # a malformed frame: not ours
            raise _Protocol(str(e)) from None

    def call(self, name: str, args: tuple, kwargs: dict):
        try:
            payload = json.dumps(["call", name, wire.encode(list(args)), wire.encode(kwargs)],
                                 separators=(",", ":")).encode()
        except wire.NotPlain as e:
            raise TypeError(f"{e} (tests that pass non-plain arguments need legacy mode)") from None
        try:
            wire.write_all(self.c2w_w, len(payload).to_bytes(4, "little") + payload, self.deadline)
        except wire.Late:
            raise _Deadline() from None
        except OSError:
            raise _WorkerGone() from None
        msg = self.recv()
        if type(msg) is list and len(msg) == 2 and msg[0] == "ok":
            return msg[1]
        if type(msg) is list and len(msg) == 5 and msg[0] == "exc":
            tname, text, base = str(msg[1]), str(msg[2]), str(msg[4])
            if base == "MemoryError":
                self.memory_error = True
            raise _rebuild(tname, base, text)
        raise _Protocol("unexpected answer to a call")

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


class _Globals(dict):
    """Test namespace: names the tests do not define resolve to the solution's functions (remote)."""

    def __init__(self, checker: _Checker, remote_names: set[str]):
        super().__init__()
        self._checker, self._remote = checker, remote_names

    def __missing__(self, key):
        if key in self._remote and not hasattr(builtins, key):
            fn = self._checker.proxy(key)
            self[key] = fn
            return fn
        raise KeyError(key)


def _instrument(tests: str) -> ast.Module:
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


def _fmt(e: BaseException) -> tuple[str, str]:
    line = f"{type(e).__name__}: {e}"[:_DETAIL_CAP] if str(e) else type(e).__name__
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-_DETAIL_CAP:]
    return line, tb


def _worker_death(wpid: int) -> tuple[str, str]:
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


def checker_main(cfg: dict, hdr: dict, job_dir: str, vw: int, nproc: int) -> dict:
    """Runs in C: fork W, read the job, drive W, return the verdict dict."""
    c2w_r, c2w_w = os.pipe()
    w2c_r, w2c_w = os.pipe()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wpid = os.fork()
    if wpid == 0:
        try:
            os.close(vw)
            for fd in (c2w_w, w2c_r, in_w, out_r, err_r):
                os.close(fd)
            worker_main(cfg, hdr, job_dir, c2w_r, w2c_w, in_r, out_w, nproc, err_w)
        finally:
            os._exit(0)
    for fd in (c2w_r, w2c_w, in_r, out_w, err_w):
        os.close(fd)
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    body = wire.recv(0, time.monotonic() + 30, cap=_MAX_BODY)  # the job: only now do tests exist here
    # fds 0/1 are the server's channel to the parent: a test that prints (perhaps a value the
    # solution returned, crafted to look like a verdict frame) or reads input must not reach it
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    t0 = time.monotonic()
    timeout = float(hdr["timeout"])
    deadline = t0 + timeout
    kind = body.get("kind", "function")
    legacy = bool(body.get("legacy"))
    out = {"status": "error", "passed": False, "tests_passed": 0, "tests_total": 0, "error": None,
           "traceback": None, "integrity": "legacy" if legacy else "checker"}
    # all processes of the job together may use the worker's own address-space limit, plus 25%
    wire.TICK = _Guard(job_dir, int(hdr.get("disk_mb", 256)) << 20, int(hdr["memory_mb"]) * 5 << 18)
    ck = _Checker(c2w_w, w2c_r, wpid, deadline, int(hdr["result_cap"]))
    ck.partial = bool(body.get("partial"))
    try:
        fatal = _await_confined(ck)
        if fatal is not None:
            out.update(fatal)
        elif kind == "stdio":
            out.update(_run_stdio(ck, body, in_w, out_r, int(hdr["output_cap"])))
        elif kind == "exec":
            out.update(_run_exec(ck, body, job_dir, in_w, out_r, err_r, int(hdr["output_cap"])))
        else:
            # legacy too: W gets the solution alone; the tests follow once its top level has run
            _to_worker(c2w_w, {"kind": "function", "program": body["solution"], "legacy": legacy}, deadline)
            out.update(_run_function(ck, body, legacy))
    except _Deadline:
        out.update(status="timeout", passed=False, error=f"wall-clock deadline of {timeout:g}s passed")
    except _OutputLimit:
        what = "stdout" if kind == "exec" else "the worker's answer"
        out.update(status="output_limit", passed=False, error=f"{what} exceeded the output cap")
    except _DiskLimit:
        out.update(status="output_limit", passed=False, error="the worker's files exceeded the disk cap")
    except _MemoryLimit:
        out.update(status="memory", passed=False, error="the job's processes together exceeded the memory cap")
    except _Protocol as e:
        out.update(status="error", passed=False, error=f"the worker broke the sandbox protocol (forged frames?): {e}")
    except _WorkerGone:
        st, why = _worker_death(wpid)
        out.update(status=st, passed=False, error=why)
    except wire.Late:
        out.update(status="timeout", passed=False, error=f"wall-clock deadline of {timeout:g}s passed")
    except wire.Closed:
        st, why = _worker_death(wpid)
        out.update(status=st, passed=False, error=why)
    if not ck.reaped:
        try:
            os.kill(wpid, signal.SIGKILL)
        except OSError:
            pass
    if ck.memory_error and not out["passed"] and out["status"] in ("fail", "error"):
        out["status"] = "memory"
    out["elapsed"] = round(time.monotonic() - t0, 6)
    return out


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


def _await_confined(ck: _Checker) -> dict | None:
    """W's first frame: ``["confined"]``, or ``["fatal", why]`` when it could not confine itself
    (our side failed: ``sandbox_error``). No untrusted code has run yet, so this is not forgeable."""
    msg = ck.recv()
    if type(msg) is list and len(msg) == 2 and msg[0] == "fatal":
        return {"status": "sandbox_error", "passed": False, "error": str(msg[1])[:_DETAIL_CAP]}
    if msg != ["confined"]:
        raise _Protocol("no confinement report")
    return None


def _valid_status(s) -> bool:
    """The program's end as W reports it: ["loaded", None], ["exited", int] or
    ["load_error", type, message, traceback, builtin base]."""
    if type(s) is not list or not s:
        return False
    if s[0] == "loaded":
        return len(s) == 2 and s[1] is None
    if s[0] == "exited":
        return len(s) == 2 and type(s[1]) is int
    return s[0] == "load_error" and len(s) == 5 and all(type(x) is str for x in s[1:])


def _to_worker(fd: int, setup: dict, deadline: float) -> None:
    try:
        wire.send(fd, setup, deadline)
    except OSError:
        pass  # the worker is gone; reading its channel next tells why ("fatal" frame or EOF)


def _run_function(ck: _Checker, body: dict, legacy: bool) -> dict:
    entry = body.get("entry_point")
    g = _Globals(ck, set())
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
        g["__rl_Abort"] = _Abort
        g["__rl_record"] = ck.record
        try:  # counting every assert needs the instrumented tree; pass/fail compiles the source directly
            code = compile(_instrument(tests_src) if ck.partial else tests_src, "tests.py", "exec")
        except SyntaxError as e:
            return {"status": "sandbox_error", "error": f"tests do not compile: {e}"}
    msg = ck.recv()
    if type(msg) is not list or len(msg) != 3 or msg[0] != "ready" or not _valid_status(msg[1]) \
            or type(msg[2]) is not list:
        raise _Protocol("bad load report")
    status, names = msg[1], {str(n) for n in msg[2]}
    if status[0] == "load_error":
        tname = str(status[1])
        st = "memory" if status[4] == "MemoryError" else "error"
        return {"status": st, "error": f"{tname}: {status[2]}"[:_DETAIL_CAP],
                "traceback": str(status[3])[-_DETAIL_CAP:]}
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
    except _Abort:
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
        res["error"], res["traceback"] = _fmt(ck.first_failure)
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


def _run_legacy(ck: _Checker, status: list, entry: str, tests: str) -> dict:
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
        raise _Deadline() from None
    except OSError:
        pass  # W is gone: reading its channel tells why
    msg = ck.recv()
    if msg == ["checked"]:
        nonce = os.urandom(16).hex()
        try:
            wire.write_all(ck.c2w_w, _raw_frame(nonce.encode()), ck.deadline)
        except wire.Late:
            raise _Deadline() from None
        except OSError:
            pass
        if ck.recv() == ["passed", nonce]:
            return {"status": "pass", "passed": True, "tests_passed": 1, "tests_total": 1}
        raise _Protocol("wrong answer to the legacy harness's nonce")
    if type(msg) is list and len(msg) == 5 and msg[0] == "failed":
        if msg[4] == "MemoryError":
            ck.memory_error = True
        return dict(fail, error=f"{msg[1]}: {msg[2]}"[:_DETAIL_CAP], traceback=str(msg[3])[-_DETAIL_CAP:])
    raise _Protocol("unexpected frame from the legacy harness")


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


def _reap_after_done(ck: _Checker) -> tuple[str, str] | None:
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
            raise _Deadline()
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


def _run_stdio(ck: _Checker, body: dict, in_w: int, out_r: int, cap: int) -> dict:
    _to_worker(ck.c2w_w, {"kind": "stdio", "program": body["solution"]}, ck.deadline)
    data = memoryview((body.get("stdin") or "").encode())
    os.set_blocking(in_w, False)
    if not data:
        os.close(in_w)
        in_w = -1
    chunks, size, eof, done = [], 0, False, None
    ctl = ck.w2c_r
    while not (eof and done is not None):
        rem = ck.deadline - time.monotonic()
        if done is not None:
            rem = min(rem, 0.5)  # the program ended; its stdout may still be held by a child
        if rem <= 0:
            if done is not None:
                break
            raise _Deadline()
        rl = [out_r] if not eof else []
        if done is None:
            rl.append(ctl)
        wl = [in_w] if in_w >= 0 else []
        if wire.TICK is not None:
            wire.TICK()
        r, w, _ = select.select(rl, wl, [], min(rem, 0.1))
        if w:
            try:
                n = os.write(in_w, data[:65536])
                data = data[n:]
            except (BrokenPipeError, BlockingIOError):
                data = data[:0]
            if not data:
                os.close(in_w)
                in_w = -1
        if out_r in r:
            b = os.read(out_r, 65536)
            if not b:
                eof = True
            else:
                size += len(b)
                if size > cap:
                    raise _OutputLimit()
                chunks.append(b)
        if ctl in r:
            msg = ck.recv()
            if type(msg) is not list or not msg or msg[0] != "done" or not _valid_status(msg[1:]):
                raise _Protocol("bad end-of-program report")
            done = msg
    stdout = b"".join(chunks).decode("utf-8", errors="replace")
    res = {"tests_total": 1, "stdout": stdout if body.get("full_stdout") else stdout[:1000]}
    bad_end = _reap_after_done(ck)
    if bad_end is not None:
        return dict(res, status=bad_end[0], error=bad_end[1])
    status = done[1:]
    if status[0] == "load_error":
        st = "memory" if status[4] == "MemoryError" else "error"
        return dict(res, status=st, error=f"{status[1]}: {status[2]}"[:_DETAIL_CAP],
                    traceback=str(status[3])[-_DETAIL_CAP:])
    if status[0] == "exited" and status[1] != 0:
        return dict(res, status="error", error=f"program exited with status {status[1]}")
    ok = _norm_out(stdout) == _norm_out(body.get("expected_stdout") or "")
    return dict(res, status="pass" if ok else "fail", passed=ok, tests_passed=int(ok),
                error=None if ok else "stdout differs from the expected output")


_VERDICT_CAP = 160 << 20  # exec jobs return their stdout, stderr and collected files (compiled programs)
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


def _run_exec(ck: _Checker, body: dict, job_dir: str, in_w: int, out_r: int, err_r: int, cap: int) -> dict:
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
    _to_worker(ck.c2w_w, {"kind": "exec", "argv": body["argv"], "env": body.get("env") or {}}, ck.deadline)
    data = memoryview((body.get("stdin") or "").encode())
    os.set_blocking(in_w, False)
    if not data:
        os.close(in_w)
        in_w = -1
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
            raise _Deadline()
        if wire.TICK is not None:
            wire.TICK()
        wl = [in_w] if in_w >= 0 else []
        rl = list(open_fds) + ([pidfd] if pidfd >= 0 and status is None else [])
        r, w, _ = select.select(rl, wl, [], min(ck.deadline - now, 0.02 if status is None and pidfd < 0 else 0.1))
        r = [fd for fd in r if fd != pidfd]  # W's end: the waitpid above reaps it next
        if w:
            try:
                n = os.write(in_w, data[:65536])
                data = data[n:]
            except (BrokenPipeError, BlockingIOError):
                data = data[:0]
            if not data:
                os.close(in_w)
                in_w = -1
        for fd in r:
            b = os.read(fd, 65536)
            if not b:
                open_fds.discard(fd)
            elif fd == out_r:
                size += len(b)
                if size > cap:
                    raise _OutputLimit()
                out_chunks.append(b)
            elif err_size < _ERR_CAP:
                err_chunks.append(b[:_ERR_CAP - err_size])
                err_size += len(b)
    if in_w >= 0:
        os.close(in_w)
    if pidfd >= 0:
        os.close(pidfd)
    stdout = b"".join(out_chunks).decode("utf-8", errors="replace")
    stderr = b"".join(err_chunks).decode("utf-8", errors="replace")
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


# ============================================================================ server loop
_RLIMITS = [getattr(resource, n) for n in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC",
                                            "RLIMIT_STACK", "RLIMIT_DATA", "RLIMIT_CORE", "RLIMIT_MEMLOCK",
                                            "RLIMIT_RSS", "RLIMIT_NICE", "RLIMIT_RTPRIO", "RLIMIT_MSGQUEUE",
                                            "RLIMIT_SIGPENDING") if hasattr(resource, n)]


def own_state() -> tuple:
    """This server's rlimits, nice value, scheduling policy and CPU affinity: what a job must not
    change (the seccomp filter refuses it; this is checked after every job all the same)."""
    return (tuple(resource.getrlimit(r) for r in _RLIMITS), os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getscheduler(0), frozenset(os.sched_getaffinity(0)))


def restore_state(want: tuple) -> bool:
    """Put back what a job changed, as far as an unprivileged process can; False when something
    stays changed (a lowered hard limit, a higher nice value): the server must then be replaced."""
    if own_state() == want:
        return True
    limits, nice, policy, cpus = want
    for r, v in zip(_RLIMITS, limits):
        try:
            resource.setrlimit(r, v)
        except (OSError, ValueError):
            pass
    for fix in (lambda: os.sched_setscheduler(0, policy, os.sched_param(0)), lambda: os.sched_setaffinity(0, cpus),
                lambda: os.setpriority(os.PRIO_PROCESS, 0, nice)):
        try:
            fix()
        except OSError:
            pass
    return own_state() == want


def run_job(cfg: dict, hdr: dict, scratch_root: str) -> tuple[dict, bool]:
    job_dir = tempfile.mkdtemp(prefix="job-", dir=scratch_root)
    if cfg.get("landlock"):  # per job: its own dir is writable, the scratch root not even listable
        cfg["_ruleset"] = confine.landlock_ruleset(cfg["_ll_reads"], [job_dir, "/dev/null"], abi=cfg["_abi"])
    try:
        return _run_job(cfg, hdr, scratch_root, job_dir)
    finally:
        if cfg.get("_ruleset", -1) >= 0:
            os.close(cfg.pop("_ruleset"))


def _run_job(cfg: dict, hdr: dict, scratch_root: str, job_dir: str) -> tuple[dict, bool]:
    timeout = float(hdr["timeout"])
    nproc = int(hdr["nproc"]) + (uid_task_count() if cfg.get("nproc_mode") == "uid" else 8)
    vr, vw = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(vr)
            if cfg.get("ipc_ns"):  # SysV IPC and mqueues of this job die with it, seen by no other job
                try:
                    confine.private_ipc_namespace()
                    cfg["_ipc_private"] = True
                except OSError:
                    pass
            verdict = checker_main(cfg, hdr, job_dir, vw, nproc)
            wire.send(vw, verdict, time.monotonic() + 5)
        except BaseException:  # noqa: BLE001 - the server reports a missing verdict
            code = 1
        finally:
            os._exit(code)
    os.close(vw)
    healthy = True
    try:  # a missing verdict may leave the job's body unread in our stdin: recycle then
        verdict = wire.recv(vr, time.monotonic() + timeout + 2.0, cap=_VERDICT_CAP)
        if not isinstance(verdict, dict) or "status" not in verdict:
            raise wire.WireError("bad verdict")
    except wire.Late:
        verdict = {"status": "timeout", "passed": False, "error": f"checker exceeded {timeout:g}s"}
        healthy = False
    except wire.WireError as e:
        verdict = {"status": "sandbox_error", "passed": False, "error": f"checker failed: {e}"}
        healthy = False
    os.close(vr)
    kill_descendants(cfg.get("tier") == "A")
    if not scrub.empty_dir(scratch_root):  # never run a job over another job's leftovers
        healthy = False
    if not restore_state(cfg["_state"]):  # the next job must start from this server's own limits
        healthy = False
    return verdict, healthy


def main() -> int:
    confine.prctl(confine.PR_SET_CHILD_SUBREAPER, 1)
    parent = os.getppid()
    cfg = wire.recv(0, time.monotonic() + 60, cap=1 << 20)
    if cfg.get("tier") != "A":
        confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGTERM)  # our parent: the pool's spawner thread
        if os.getppid() != parent:
            return 0
    try:
        confine.prctl(confine.PR_SET_DUMPABLE, 0)  # same-uid code cannot ptrace us or open /proc/<us>/mem
    except OSError:
        pass
    os.umask(0o077)
    scratch_root = tempfile.mkdtemp(prefix="rewardlab-sbx-", dir=cfg.get("scratch_parent") or None)

    def on_term(signum, frame):
        kill_descendants(cfg.get("tier") == "A")
        scrub.remove_tree(scratch_root)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    abi = confine.landlock_abi()
    seccomp_ok = confine.seccomp_arch() is not None
    if cfg.get("landlock") and abi < 1:
        wire.send(1, {"error": "Landlock is required but unavailable"})
        return 1
    if cfg.get("landlock"):
        # checked once here; each job then gets a ruleset whose only writable dir is its own
        cfg["_ll_reads"] = list(cfg["read_paths"]) + ["/dev/urandom", "/dev/zero"]
        cfg["_abi"] = abi
        os.close(confine.landlock_ruleset(cfg["_ll_reads"], [scratch_root, "/dev/null"], abi=abi))  # usable?
    if cfg.get("seccomp") and seccomp_ok:
        confine.prepare_seccomp()
    if cfg.get("seccomp") and not seccomp_ok:
        wire.send(1, {"error": "seccomp filter unsupported on this architecture"})
        return 1
    wire.send(1, {"hello": True, "pid": os.getpid(), "uid": os.getuid(), "landlock_abi": abi,
                  "seccomp": seccomp_ok, "scratch": scratch_root})
    cfg["_state"] = own_state()
    runs, max_runs = 0, int(cfg.get("max_runs") or 0)
    import gc

    gc.collect()
    gc.freeze()  # forked checkers/workers then never touch (copy) the server's objects to collect them
    try:
        while True:
            try:
                hdr = wire.recv(0, None, cap=1 << 16)
            except wire.WireError:
                break
            if not isinstance(hdr, dict) or hdr.get("op") != "run":
                break
            verdict, healthy = run_job(cfg, hdr, scratch_root)
            runs += 1
            verdict["recycle"] = (not healthy) or (max_runs > 0 and runs >= max_runs)
            wire.send(1, verdict)
            if verdict["recycle"]:
                break
    finally:
        kill_descendants(cfg.get("tier") == "A")
        scrub.remove_tree(scratch_root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
