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

import os  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import confine  # noqa: E402
import scrub  # noqa: E402
import wire  # noqa: E402
from checker import (Abort, Checker, Deadline, DiskLimit, Guard, MemoryLimit, OutputLimit, ProtocolError,  # noqa: E402
                     await_confined, to_worker, worker_death)
from execjob import run_exec, verdict_cap  # noqa: E402
from pymodes import run_function, run_stdio  # noqa: E402
from worker import MAX_BODY, worker_main  # noqa: E402

# Light modules solutions commonly import: loading them here makes forked workers start warm.
# Heavy ones (decimal, hashlib, statistics, dataclasses, ...) are left out on purpose: every
# megabyte of this process makes each fork and exit slower.
for _m in ("typing", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
           "operator", "copy"):
    try:
        __import__(_m)
    except ImportError:
        pass


# ============================================================================ process control
def kill_descendants(in_namespace: bool) -> None:
    """SIGKILL every descendant and reap them all (orphans are re-parented to us: subreaper)."""
    if in_namespace:
        try:
            os.kill(-1, signal.SIGKILL)  # everything in our PID namespace except us and its init
        except OSError:
            pass
    me = os.getpid()
    while True:
        confine.kill_children(me)
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
    body = wire.recv(0, time.monotonic() + 30, cap=MAX_BODY)  # the job: only now do tests exist here
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
    wire.TICK = Guard(job_dir, int(hdr.get("disk_mb", 256)) << 20, int(hdr["memory_mb"]) * 5 << 18,
                      private_fs=cfg.get("tier") == "A")
    ck = Checker(c2w_w, w2c_r, wpid, deadline, int(hdr["result_cap"]))
    ck.partial = bool(body.get("partial"))
    try:
        fatal = await_confined(ck)
        if fatal is not None:
            out.update(fatal)
        elif kind == "stdio":
            out.update(run_stdio(ck, body, in_w, out_r, int(hdr["output_cap"])))
        elif kind == "exec":
            out.update(run_exec(ck, body, job_dir, in_w, out_r, err_r, int(hdr["output_cap"])))
        else:
            # legacy too: W gets the solution alone; the tests follow once its top level has run
            to_worker(c2w_w, {"kind": "function", "program": body["solution"], "legacy": legacy}, deadline)
            out.update(run_function(ck, body, legacy))
    except (Abort, wire.Late, wire.Closed) as e:
        out.update(_abort_verdict(e, kind, timeout, wpid), passed=False)
    if not ck.reaped:
        try:
            os.kill(wpid, signal.SIGKILL)
        except OSError:
            pass
    if ck.memory_error and not out["passed"] and out["status"] in ("fail", "error"):
        out["status"] = "memory"
    out["elapsed"] = round(time.monotonic() - t0, 6)
    return out


def _abort_verdict(e: BaseException, kind: str, timeout: float, wpid: int) -> dict:
    """Status and error of a job whose tests stopped early (the worker can answer no more)."""
    if isinstance(e, (Deadline, wire.Late)):
        return {"status": "timeout", "error": f"wall-clock deadline of {timeout:g}s passed"}
    if isinstance(e, OutputLimit):
        what = "stdout" if kind == "exec" else "the worker's answer"
        return {"status": "output_limit", "error": f"{what} exceeded the output cap"}
    if isinstance(e, DiskLimit):
        return {"status": "output_limit", "error": str(e) or "the worker's files exceeded the disk cap"}
    if isinstance(e, MemoryLimit):
        return {"status": "memory", "error": str(e) or "the job's processes together exceeded the memory cap"}
    if isinstance(e, ProtocolError):
        return {"status": "error", "error": f"the worker broke the sandbox protocol (forged frames?): {e}"}
    st, why = worker_death(wpid)  # WorkerGone, wire.Closed
    return {"status": st, "error": why}


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


def await_verdict(vr: int, checker: int, cfg: dict, hdr: dict, job_dir: str):
    """C's verdict, read once C starts to send it. Until then the server runs the job's guard itself, every
    100 ms, beside C's own: the server is outside the job (in tier A outside the job's user namespace; under
    the filter no job process can signal it or change its limits), so a job that stops or blinds its checker
    is still stopped at the memory and disk caps, within 100 ms, instead of holding memory until the deadline."""
    deadline = time.monotonic() + float(hdr["timeout"]) + 2.0
    guard = Guard(job_dir, int(hdr.get("disk_mb", 256)) << 20, int(hdr["memory_mb"]) * 5 << 18,
                  checker=checker, server=os.getpid(), private_fs=cfg.get("tier") == "A")
    while not select.select([vr], [], [], 0.1)[0]:
        if time.monotonic() > deadline:
            raise wire.Late("no verdict by the deadline")
        try:
            guard()
        except (MemoryLimit, DiskLimit, OSError) as e:  # a measurement that fails counts as over the cap
            if isinstance(e, OSError):
                e = DiskLimit(f"the server's guard could not measure the job's files ({e})")
            v = _abort_verdict(e, "exec", float(hdr["timeout"]), 0)
            return {**v, "passed": False, "error": f"{v['error']} (the server's guard)"}
    return wire.recv(vr, deadline, cap=verdict_cap(hdr))


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
        verdict = await_verdict(vr, pid, cfg, hdr, job_dir)
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
