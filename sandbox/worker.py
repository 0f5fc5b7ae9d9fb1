"""The untrusted side of a job (W): confine itself, then run the solution (stdlib only).

Forked by the checker (``checker.py``) before the checker reads the job. W drops to hard rlimits,
a Landlock domain and the seccomp filter and reports ``["confined"]`` (the only moment a
``"fatal"`` frame is believed: no untrusted code exists yet); then it runs the solution as a
function-call server, a stdin/stdout program, a legacy test run, or execs a program (exec jobs).
Frames and modes: ``README.md`` in this folder; the trust argument: ``server.py``'s docstring.
"""

from __future__ import annotations

import atexit
import builtins
import json
import math
import os
import signal
import sys
import tempfile
import traceback

import confine
import wire

MAX_BODY = 64 << 20
DETAIL_CAP = 2000
BUILTINS = dict(builtins.__dict__)  # taken at import, in the trusted server


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
            if c.__module__ == "builtins" and BUILTINS.get(c.__name__) is c:
                return c.__name__
    except BaseException:  # noqa: BLE001 - a hostile metaclass
        pass
    return "BaseException"


def _exc_info(e: BaseException) -> list:
    try:
        msg = str(e)[:DETAIL_CAP]
    except BaseException:
        msg = "<unprintable>"
    try:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-DETAIL_CAP:]
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
        data = json.dumps(["exc", "NotPlain", str(e)[:DETAIL_CAP], "", "TypeError"]).encode()
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


def _confine_self(cfg: dict, hdr: dict, job_dir: str, keep: set[int], nproc: int) -> None:
    """Everything W does before any untrusted code exists: fds, session, environment, limits,
    Landlock, seccomp. Raises OSError / ValueError when confinement fails."""
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    ruleset = cfg.get("_ruleset", -1)
    _close_all_but(keep | {ruleset})
    os.setsid()
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    os.chdir(job_dir)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": job_dir, "TMPDIR": job_dir,
                       "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
    tempfile.tempdir = None
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail with EFBIG instead of killing
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
    # W is the job: dumpable like any program it execs (the server's non-dumpable flag came through fork), so
    # the guard, of the same uid, can read its /proc/PID/fd (a job that makes itself non-dumpable counts as over
    # the disk cap once the free space drops past it); its Landlock domain keeps other jobs out
    confine.prctl(confine.PR_SET_DUMPABLE, 1)


def worker_main(cfg: dict, hdr: dict, job_dir: str, c2w_r: int, w2c_w: int, in_r: int, out_w: int, nproc: int,
                err_w: int = -1) -> None:
    """Runs in W. Never returns; everything before ``exec`` of the solution is ours."""
    try:  # confine now, while the checker reads the job: nothing below runs unconfined
        _confine_self(cfg, hdr, job_dir, {c2w_r, w2c_w, in_r, out_w, err_w}, nproc)
    except (OSError, ValueError) as e:
        _send_frame(w2c_w, ["fatal", f"confinement failed: {e}"])
        os._exit(0)
    # the first frame, sent before any untrusted code exists here: later "fatal" frames are forged
    _send_frame(w2c_w, ["confined"])
    setup = wire.recv(c2w_r, None, cap=MAX_BODY)
    kind = setup["kind"]
    legacy = bool(setup.get("legacy"))
    if kind == "exec":
        exec_program(setup, job_dir, c2w_r, w2c_w, in_r, out_w, err_w)
    if kind == "stdio":
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
    os.close(in_r)
    os.close(out_w)
    # Captured before the solution runs: C functions it can neither redefine nor patch, and the
    # legacy harness (a function object held here, called with everything it uses as arguments).
    _exit, _read, _write, _compile, _exec = os._exit, os.read, os.write, compile, exec
    harness = (_legacy_tests, _legacy_read, _legacy_write, _read, _write, _compile, _exec, _exit)
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
        failure = harness[0](ns, clean_builtins, c2w_r, w2c_w, *harness[1:])
        try:
            _send_frame(w2c_w, ["failed"] + _exc_info(failure)[1:])
        finally:
            _exit(0)
    _serve_calls(ns, c2w_r, w2c_w, _exit)


def _legacy_tests(ns, clean_builtins, c2w_r, w2c_w, legacy_read, legacy_write, _read, _write, _compile, _exec, _exit):
    """Legacy mode, after the solution's top level ran. The tests arrive only now, as a raw frame
    "<entry point>\n<tests>". They run with a copy of the solution's globals (minus names that
    shadow builtins) and the builtins as they were before the solution ran. Uses no global name:
    every function it calls was captured before the solution ran. Returns the failure (or exits)."""
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
    return failure


def _serve_calls(ns: dict, c2w_r: int, w2c_w: int, _exit) -> None:
    """Function style: answer the checker's ``call`` frames until it closes the channel."""
    while True:
        try:
            msg = wire.decode_json(wire.recv_raw(c2w_r, None, cap=MAX_BODY))
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


def exec_program(setup: dict, job_dir: str, c2w_r: int, w2c_w: int, in_r: int, out_w: int, err_w: int) -> None:
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


