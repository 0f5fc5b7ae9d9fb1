"""Run untrusted code safely and fast: the parent side of the code sandbox.

    from rewardlab.sandbox import execute
    r = execute(solution, tests="def check(candidate):\\n    assert candidate(2, 3) == 5",
                entry_point="add", timeout=5.0)
    r.passed, r.status, r.details        # True, "pass", {"tier": "A", "tests_passed": 1, ...}
    execute("print(sum(map(int, input().split())))", stdin="2 3\\n", expected_stdout="5\\n")

A :class:`SandboxPool` keeps up to two warm fork servers per core (``sandbox/server.py``, started
under the isolation tier of :mod:`rewardlab.sandbox.isolation`); each execution forks a fresh trusted
checker and a fresh untrusted worker *inside* that server, so a run costs a few milliseconds
and the trainer process is never forked (servers are spawned with ``posix_spawn``/``vfork``
from one long-lived thread, so the parent-death signal is tied to a thread that outlives them).

Verdict integrity: the tests run in the trusted checker; the worker only answers calls of the
entry point with plain data (see ``sandbox/wire.py``). Exit codes, ``atexit``, excepthooks,
``SystemExit`` / ``KeyboardInterrupt`` and what anyone prints mean nothing; frames the solution
writes to the sandbox's pipes are an ``error``. Stdio programs must end normally (as CPython
ends a program: threads joined, ``atexit`` handlers run and their output counted; ``os._exit``
is not a normal end) and their stdout must equal the expected text up to trailing whitespace
of each line and empty lines at the end. ``legacy=True`` runs the tests in the worker, in the
solution's interpreter, for tests that need object identity or custom classes; such verdicts
carry ``details["integrity"] == "legacy"``: exit codes and blind protocol forgery still cannot
pass there, but a solution that tampers with that interpreter (lying ``__eq__``, patched
modules, ``gc``/frame/trace tricks) can. The full account is in ``sandbox/server.py``.

Statuses: ``pass``, ``fail``, ``timeout``, ``memory``, ``crash``, ``output_limit``, ``error``
(the solution does not load or exits abnormally), ``sandbox_error`` (our side failed).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.sandbox.isolation import Tier, detect_tier, load_runtime_module

wire = load_runtime_module("wire")
scrub = load_runtime_module("scrub")

STATUSES = ("pass", "fail", "timeout", "memory", "crash", "output_limit", "error", "sandbox_error")


@dataclass
class Limits:
    """Per-execution resource limits (applied to the untrusted worker)."""

    memory_mb: int = 768
    """Address-space limit (RLIMIT_AS) of the worker; all processes of a run together may keep
    1.25x this resident (checked every 100 ms)."""
    file_mb: int = 32
    """Largest file the worker may write (RLIMIT_FSIZE)."""
    nofile: int = 256
    nproc: int = 32
    """Processes/threads the worker may add (RLIMIT_NPROC on top of what its uid already runs)."""
    disk_mb: int = 256
    """Total size of the files the worker may leave in its scratch dir."""
    output_kb: int = 1024
    """stdout captured for stdin/stdout problems; more is an ``output_limit``."""
    result_kb: int = 16 << 10
    """Largest encoded return value of one call."""


@dataclass
class ExecutionResult:
    """Outcome of one execution."""

    passed: bool
    status: str
    details: dict[str, Any] = field(default_factory=dict)


class _Spawner:
    """One long-lived daemon thread that starts every server process.

    PR_SET_PDEATHSIG (bubblewrap's --die-with-parent, our tier-B servers) fires when the *thread*
    that spawned a process exits; spawning from short-lived scoring threads would kill servers."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, name="rewardlab-sandbox-spawner", daemon=True).start()

    def _loop(self) -> None:
        while True:
            argv, env, box = self._q.get()
            try:
                box["proc"] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.DEVNULL, env=env, close_fds=True,
                                               start_new_session=True, cwd="/")
            except BaseException as e:  # noqa: BLE001 - handed to the requesting thread
                box["error"] = e
            box["done"].set()

    def spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        box: dict[str, Any] = {"done": threading.Event()}
        self._q.put((argv, env, box))
        box["done"].wait()
        if "error" in box:
            raise box["error"]
        return box["proc"]


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def _get_spawner() -> _Spawner:
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner.pid != os.getpid():  # a forked child needs its own thread
            _spawner = _Spawner()
        return _spawner


class _Server:
    """One warm fork server (a process tree living inside the tier's isolation)."""

    def __init__(self, tier: Tier, max_runs: int) -> None:
        self.tier = tier
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        self.proc = _get_spawner().spawn(tier.argv(), env)
        self.win, self.rout = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        self.scratch: str | None = None
        try:
            cfg = dict(tier.server_config(), max_runs=max_runs)
            wire.send(self.win, cfg, time.monotonic() + 30)
            hello = wire.recv(self.rout, time.monotonic() + 60, cap=1 << 16)
        except (wire.WireError, OSError) as e:
            self.kill()
            raise RewardlabError(f"the sandbox server did not start ({tier.summary()}): {e}") from None
        if not isinstance(hello, dict) or not hello.get("hello"):
            self.kill()
            raise RewardlabError(f"the sandbox server refused to start: {hello}")
        if tier.name != "A":
            self.scratch = hello.get("scratch")
        self.runs = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Stop the server and everything under it (SIGTERM lets it clean up, then SIGKILL)."""
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        except OSError:
            pass
        if self.scratch and os.path.isdir(self.scratch):
            try:  # not shutil.rmtree: a job's chmod 000 dirs or deep trees must not survive or raise here
                scrub.remove_tree(self.scratch)
            except Exception:  # noqa: BLE001 - cleanup never fails the caller
                pass


TIER_GAPS_SAID: set[str] = set()
"""The tier summaries whose gaps this process has logged (once each); a test removes one to hear it again."""


class SandboxPool:
    """Up to ``workers`` warm fork servers, shared by threads. The default, two per core, keeps
    the cores busy: a run is latency-bound (process hand-offs and pipe round trips), not CPU-bound."""

    def __init__(self, workers: int | None = None, *, tier: str | None = None, max_runs: int = 2000,
                 limits: Limits | None = None) -> None:
        self.tier = detect_tier(tier)
        if self.tier.name != "A" and self.tier.summary() not in TIER_GAPS_SAID:  # what this tier does not give, once
            TIER_GAPS_SAID.add(self.tier.summary())
            logging.getLogger("rewardlab.sandbox").warning("%s", self.tier.summary())
        self.pid = os.getpid()
        self.size = max(1, workers or 2 * (os.cpu_count() or 1))
        self.max_runs = max_runs
        self.limits = limits or Limits()
        self._idle: list[_Server] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False

    # -------------------------------------------------------------- server management
    def _acquire(self) -> _Server:
        with self._cond:
            while True:
                if self._closed:
                    raise RewardlabError("the sandbox pool is closed")
                while self._idle:
                    srv = self._idle.pop()  # LIFO: reuse the warmest server
                    if srv.alive():
                        return srv
                    self._count -= 1
                    srv.kill()
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return _Server(self.tier, self.max_runs)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, srv: _Server, healthy: bool) -> None:
        with self._cond:
            if healthy and not self._closed and srv.alive():
                self._idle.append(srv)
                self._cond.notify()
                return
            self._count -= 1
            self._cond.notify()
        srv.kill()

    def warm(self, n: int | None = None) -> None:
        """Start ``n`` servers now (default: all), in parallel."""
        n = min(self.size, n or self.size)
        got: list[_Server] = []
        errors: list[BaseException] = []

        def one() -> None:
            try:
                srv = self._acquire()
                got.append(srv)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=one) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for srv in got:
            self._release(srv, True)
        if errors and not got:
            raise errors[0]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for srv in idle:
            srv.kill()

    # -------------------------------------------------------------- execution
    def execute(self, solution: str, *, tests: str | None = None, entry_point: str | None = None,
                stdin: str | None = None, expected_stdout: str | None = None, timeout: float = 5.0,
                prelude: str | None = None, legacy: bool = False, partial: bool = False,
                limits: Limits | None = None) -> ExecutionResult:
        """Run one solution; see :func:`execute`."""
        lim = limits or self.limits
        if expected_stdout is not None:
            kind = "stdio"
        elif tests is not None and entry_point:
            kind = "function"
        else:
            raise RewardlabError("execute() needs tests and entry_point (function style) or expected_stdout (stdio)")
        timeout = float(timeout)
        if not timeout > 0:
            raise RewardlabError("timeout must be positive")
        header = {"op": "run", "timeout": timeout, "memory_mb": lim.memory_mb, "file_mb": lim.file_mb,
                  "nofile": lim.nofile, "nproc": lim.nproc, "disk_mb": lim.disk_mb,
                  "result_cap": lim.result_kb << 10, "output_cap": lim.output_kb << 10}
        body = {"kind": kind, "solution": str(solution), "tests": tests, "entry_point": entry_point,
                "prelude": prelude, "stdin": stdin, "expected_stdout": expected_stdout,
                "legacy": bool(legacy), "partial": bool(partial)}
        t0 = time.monotonic()
        for attempt in (0, 1):
            try:
                srv = self._acquire()
            except RewardlabError as e:  # a server failed to start: a result, not a crash of the caller
                return self._result({"status": "sandbox_error", "passed": False, "error": str(e)}, t0)
            sent = False
            try:
                wire.send(srv.win, header, time.monotonic() + 10)
                sent = True
                wire.send(srv.win, body, time.monotonic() + 30)
                srv.runs += 1
                verdict = wire.recv(srv.rout, time.monotonic() + timeout + 15, cap=1 << 20)
            except wire.Late:
                self._release(srv, False)
                return self._result({"status": "timeout", "passed": False,
                                     "error": "the sandbox server missed its deadline and was killed"}, t0)
            except (wire.WireError, OSError) as e:
                self._release(srv, False)
                if not sent and attempt == 0:
                    continue  # the server died while idle: retry once on a fresh one
                return self._result({"status": "sandbox_error", "passed": False,
                                     "error": f"sandbox server failed: {e}"}, t0)
            if not isinstance(verdict, dict) or verdict.get("status") not in STATUSES:
                self._release(srv, False)
                return self._result({"status": "sandbox_error", "passed": False,
                                     "error": "malformed verdict"}, t0)
            self._release(srv, not verdict.pop("recycle", False))
            return self._result(verdict, t0)
        raise AssertionError("unreachable")

    def _result(self, verdict: dict, t0: float) -> ExecutionResult:
        status = str(verdict.pop("status"))
        passed = bool(verdict.pop("passed", False)) and status == "pass"
        details = {k: v for k, v in verdict.items() if v is not None}
        details["tier"] = self.tier.name
        details["wall"] = round(time.monotonic() - t0, 6)
        return ExecutionResult(passed, status, details)


_pools: dict[str, SandboxPool] = {}
_pools_lock = threading.Lock()


def get_pool(tier: str | None = None) -> SandboxPool:
    """The process-wide pool for ``tier`` (None: ``REWARDLAB_SANDBOX_TIER`` or auto)."""
    key = tier or os.environ.get("REWARDLAB_SANDBOX_TIER") or "auto"
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or pool.pid != os.getpid():  # after a fork the parent's servers are not ours
            pool = _pools[key] = SandboxPool(tier=key)
        return pool


@atexit.register
def _close_pools() -> None:
    with _pools_lock:
        for pool in _pools.values():
            if pool.pid == os.getpid():
                pool.close()
        _pools.clear()


def execute(solution: str, *, tests: str | None = None, entry_point: str | None = None,
            stdin: str | None = None, expected_stdout: str | None = None, timeout: float = 5.0,
            prelude: str | None = None, legacy: bool = False, partial: bool = False,
            limits: Limits | None = None, pool: SandboxPool | None = None) -> ExecutionResult:
    """Run ``solution`` in the sandbox and grade it.

    Function style: ``tests`` defines ``check(candidate)``; the checker calls
    ``check(<entry_point of solution>)``. ``prelude`` (e.g. a HumanEval prompt) is trusted task
    code executed in the checker, so helpers the tests use come from the task, not the solution.
    ``partial=True`` keeps going after a failed ``assert`` and reports ``tests_passed`` /
    ``tests_total`` over all of them. Stdio style: ``stdin`` is fed to the program, whose stdout
    must equal ``expected_stdout`` line by line after a normal end (trailing spaces/tabs/CR of
    each line and empty lines at the end are ignored; extra, missing or changed lines or tokens
    are not).
    """
    return (pool or get_pool()).execute(solution, tests=tests, entry_point=entry_point, stdin=stdin,
                                        expected_stdout=expected_stdout, timeout=timeout, prelude=prelude,
                                        legacy=legacy, partial=partial, limits=limits)


def attack_executor(solution: str, test: str | None, entry_point: str | None, timeout: float,
                    stdin: str | None, expected_stdout: str | None, kind: str, *, tier: str | None = None) -> dict:
    """Adapter for ``shared/bench/sandbox_attacks/run_attacks.py --executor`` (auto tier)."""
    pool = get_pool(tier)
    if kind == "stdio":
        r = pool.execute(solution, stdin=stdin, expected_stdout=expected_stdout or "", timeout=timeout)
    else:
        r = pool.execute(solution, tests=test or "", entry_point=entry_point, timeout=timeout)
    return {"passed": r.passed, "status": r.status}


def attack_executor_tier_b(solution: str, test: str | None, entry_point: str | None, timeout: float,
                           stdin: str | None, expected_stdout: str | None, kind: str) -> dict:
    """Same as :func:`attack_executor`, forcing tier B (no namespaces)."""
    return attack_executor(solution, test, entry_point, timeout, stdin, expected_stdout, kind, tier="B")
