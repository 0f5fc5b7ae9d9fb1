"""The parent side of the reward pool: persistent worker processes, their limits, and the process-wide pool.

:class:`WorkerPool` starts workers (always from a background thread), hands each call to an idle one,
watches the call's CPU time in ``/proc`` and SIGKILLs and replaces a worker that overruns its
budget or its wall cap. :func:`get_pool` is the one pool of a process (a fork-started child gets
its own). The limits every caller shares are here too: :data:`DEADLINE`, :data:`WALL_CAP` and
:func:`limits`.
"""

from __future__ import annotations

import atexit
import hashlib
import multiprocessing as mp
import os
import pickle
import threading
import time
from dataclasses import dataclass
from typing import Any

from rewardlab import forkserver
from rewardlab.rewards.pool.worker import PRELOAD, WORKER_NAME, worker_main

DEADLINE = 1.0
"""Default budget of one item, in worker CPU seconds (every ``deadline`` default of the pool)."""
WALL_CAP = 5.0
"""Default wall-clock cap of one call, in seconds: the hang guard, from the call's start to its return."""
STARTUP_TIMEOUT = 120.0
"""How long the background starter waits for a new worker to report ready (no caller waits this long)."""
_POLL_S = 0.02  # how often a running call's CPU time is checked (replies are read the moment they arrive)


def limits(deadline: float | None, wall_cap: float | None) -> tuple[float, float]:
    """``(deadline, wall cap)`` with the defaults filled in: :data:`DEADLINE`, and ``max(WALL_CAP, deadline)``."""
    deadline = DEADLINE if deadline is None else float(deadline)
    return deadline, (max(WALL_CAP, deadline) if wall_cap is None else float(wall_cap))


def default_workers() -> int:
    """The pool size: ``$REWARDLAB_REWARD_WORKERS``, else the CPU count between 2 and 8."""
    env = os.environ.get("REWARDLAB_REWARD_WORKERS")
    if env:
        return max(1, int(env))
    return max(2, min(8, os.cpu_count() or 2))


try:
    _CLK_TCK = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _CLK_TCK = 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``); None where unavailable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()  # after "pid (comm) ": field 3 (state) is index 0
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # fields 14 and 15: utime, stime
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Outcome:
    """What one :meth:`WorkerPool.call` came to."""

    status: str
    """``"ok"``, ``"timeout"`` or ``"error"``."""
    value: Any = None
    """The function's return value (ok), or a one-line reason (timeout, error)."""
    cpu_s: float | None = None
    """Worker CPU seconds the call used (None when it never ran)."""
    wall_s: float = 0.0
    """Wall seconds from the call's start to its return, waiting for a worker included."""
    phase: str | None = None
    """For timeouts, the limit that was hit: ``"startup"`` (no worker ready yet), ``"queue"`` (all
    workers busy), ``"cpu"`` (the CPU budget) or ``"wall"`` (the wall-clock cap while running)."""

    def info(self) -> dict[str, Any]:
        """The timing figures, as they go into a result's ``info``."""
        out: dict[str, Any] = {"wall_s": round(self.wall_s, 4)}
        if self.cpu_s is not None:
            out["cpu_s"] = round(self.cpu_s, 4)
        if self.phase:
            out["phase"] = self.phase
        return out


class Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, preload: list[str]):
        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        self.proc = ctx.Process(target=worker_main, args=(child, preload), daemon=True, name=WORKER_NAME)
        self.proc.start()  # with a cold fork server this blocks until its preload is done (background thread)
        child.close()
        self.ready = False
        self.loaded: set[str] = set()

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the worker's ``ready``; whether it came."""
        if self.ready:
            return True
        if self.conn.poll(timeout):
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return False
            self.ready = msg[0] == "ready"
        return self.ready

    def alive(self) -> bool:
        return self.proc.is_alive()

    def cpu(self) -> float | None:
        """CPU seconds the worker process has used so far (None where ``/proc`` is unavailable)."""
        return process_cpu_seconds(self.proc.pid) if self.proc.pid else None

    def kill(self) -> None:
        """SIGKILL the worker and close its pipe (never raises)."""
        try:
            self.proc.kill()
        except Exception:  # noqa: BLE001
            pass
        self.proc.join(timeout=5)
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass


class WorkerPool:
    """Persistent worker processes with per-call CPU budgets and wall caps. Thread-safe; see the package docstring."""

    def __init__(self, max_workers: int | None = None, start_method: str | None = None):
        self.max_workers = max_workers or default_workers()
        method = start_method or os.environ.get("REWARDLAB_POOL_START") or (
            "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        )
        self.ctx = mp.get_context(method)
        if method == "forkserver":
            forkserver.preload(*PRELOAD)  # a fork server already running keeps its own list
        self.owner_pid = os.getpid()
        self._lock = threading.Condition()
        self._idle: list[Worker] = []
        self._all: set[Worker] = set()  # ready workers, idle or busy
        self._closed = False
        self._starting = 0  # workers being started by background threads
        self.start_error: str | None = None
        self.stats = {"started": 0, "killed": 0, "calls": 0}

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` has run."""
        return self._closed

    # -- worker management: every start happens on a background thread
    def _start_async(self) -> None:
        """Start one worker in the background (caller holds the lock)."""
        self._starting += 1
        threading.Thread(target=self._start_one, daemon=True, name="rewardlab-pool-start").start()

    def _start_one(self) -> None:
        w = None
        try:
            w = Worker(self.ctx, PRELOAD)
            ok = w.wait_ready(STARTUP_TIMEOUT)
            error = None if ok else "a reward worker did not become ready"
        except Exception as e:  # noqa: BLE001 - reported to the callers that wait
            ok, error = False, f"cannot start a reward worker: {type(e).__name__}: {e}"
        with self._lock:
            self._starting -= 1
            if ok and not self._closed:
                self.stats["started"] += 1
                self._all.add(w)  # type: ignore[arg-type]
                self._idle.append(w)  # type: ignore[arg-type]
                self.start_error = None
            else:
                if w is not None:
                    w.kill()
                self.start_error = error or self.start_error
            self._lock.notify_all()

    def _grow(self, n: int = 1) -> None:
        """Start up to ``n`` more workers, within ``max_workers`` (caller holds the lock)."""
        for _ in range(n):
            if self._closed or len(self._all) + self._starting >= self.max_workers:
                return
            self._start_async()

    def _acquire(self, until: float) -> tuple[Worker | None, str]:
        """An idle worker, waiting until the monotonic time ``until``; else (None, why)."""
        with self._lock:
            asked = False
            while True:
                if self._closed:
                    raise RuntimeError("the reward pool is shut down")
                if self._idle:
                    return self._idle.pop(), ""
                if not asked:
                    self._grow(1)
                    asked = True
                left = until - time.monotonic()
                if left <= 0:
                    return None, "queue" if self._all else "startup"
                self._lock.wait(left)

    def _release(self, w: Worker, broken: bool) -> None:
        if broken:
            w.kill()
            self.stats["killed"] += 1
        with self._lock:
            if broken or self._closed:
                if not broken:
                    w.kill()
                self._all.discard(w)
                if broken:
                    self._grow(1)  # the replacement forks from the warm fork server, in the background
            else:
                self._idle.append(w)
            self._lock.notify_all()

    def warmup_async(self, n: int | None = None) -> None:
        """Start ``n`` workers (default all) in the background and return at once. Idempotent."""
        with self._lock:
            self._grow(min(n or self.max_workers, self.max_workers) - len(self._all) - self._starting)

    def warmup(self, n: int | None = None, timeout: float = STARTUP_TIMEOUT) -> bool:
        """Start ``n`` workers (default all) and wait until they are ready; False if they were not in time."""
        want = min(n or self.max_workers, self.max_workers)
        end = time.monotonic() + timeout
        with self._lock:
            self._grow(want - len(self._all) - self._starting)
            while len(self._all) < want and time.monotonic() < end:
                if not self._starting:  # a start failed: try again until the timeout
                    self._grow(want - len(self._all))
                self._lock.wait(min(0.5, max(end - time.monotonic(), 0.0)))
            return len(self._all) >= want

    # -- calls
    def call(self, fn: Any, args: tuple = (), kwargs: dict | None = None, *, deadline: float = DEADLINE,
             wall_cap: float | None = None, key: str | None = None, payload: bytes | None = None) -> Outcome:
        """Run ``fn(*args, **kwargs)`` in a worker: at most ``deadline`` worker CPU seconds, and back
        within ``wall_cap`` wall seconds (default ``max(WALL_CAP, deadline)``) of this call, always.

        ``fn`` is pickled (by reference for module-level functions) once per worker; pass
        ``key``/``payload`` to reuse a pickle made by the caller. Waiting for a worker (cold start,
        busy pool) counts against the wall cap only.
        """
        t0 = time.monotonic()
        cap = max(WALL_CAP, deadline) if wall_cap is None else wall_cap
        until = t0 + cap
        if payload is None:
            payload = pickle.dumps(fn)
        if key is None:
            key = hashlib.sha1(payload).hexdigest()
        w, phase = self._acquire(until)
        if w is None:
            why = {"startup": ("no reward worker was ready yet (cold start)"
                               + (f": {self.start_error}" if self.start_error else "")),
                   "queue": "every reward worker stayed busy"}[phase]
            return Outcome("timeout", f"{why} within the {cap:g} s wall-clock cap", None, time.monotonic() - t0, phase)
        broken = handed_off = False
        try:
            if key not in w.loaded:
                out, handed_off = self._load_for_call(w, key, payload, until, cap, t0)
                if out is not None:
                    return out
            out, broken = self._run(w, key, args, kwargs or {}, deadline, until, t0)
            return out
        except (EOFError, OSError, BrokenPipeError) as e:
            broken = True
            return Outcome("error", f"reward worker died: {type(e).__name__}", None, time.monotonic() - t0)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            return Outcome("error", f"cannot send the call to a worker: {type(e).__name__}: {e}", None,
                           time.monotonic() - t0)
        finally:
            if not handed_off:
                self._release(w, broken or not w.alive())

    def _load_for_call(self, w: Worker, key: str, payload: bytes, until: float, cap: float,
                       t0: float) -> tuple[Outcome | None, bool]:
        """Load the reward into ``w`` within the call's cap: ``(None, False)`` once loaded, else the
        call's outcome and whether ``w`` was handed to a background thread that finishes the load."""
        w.conn.send(("load", key, payload))
        if not w.conn.poll(max(until - time.monotonic(), 0.0)):
            # Unpickling imports the reward's module (a trainer script's imports, say): that is
            # start-up, not the input's doing. The load finishes in the background and the
            # worker then serves the next call; this one answers at its cap.
            threading.Thread(target=self._finish_load, args=(w, key), daemon=True,
                             name="rewardlab-pool-load").start()
            return Outcome("timeout", "the reward was still loading into a worker (start-up) at the "
                           f"{cap:g} s wall-clock cap", None, time.monotonic() - t0, "startup"), True
        status, msg, _ = w.conn.recv()
        if status != "ok":
            return Outcome("error", msg, None, time.monotonic() - t0), False
        w.loaded.add(key)
        return None, False

    def _run(self, w: Worker, key: str, args: tuple, kwargs: dict, deadline: float, until: float,
             t0: float) -> tuple[Outcome, bool]:
        """Run one call of the loaded reward ``key`` in ``w``, watching its CPU time; ``(outcome,
        broken)``, where broken means ``w`` overran and must be killed."""
        self.stats["calls"] += 1
        cpu0 = w.cpu()
        w.conn.send(("call", key, args, kwargs))
        t_run = time.monotonic()
        while True:
            left = until - time.monotonic()
            if left <= 0:
                cpu = w.cpu()
                cpu_used = None if cpu is None or cpu0 is None else cpu - cpu0
                return Outcome("timeout", None, cpu_used, time.monotonic() - t0, "wall"), True
            if w.conn.poll(min(_POLL_S, left)):
                break
            cpu = w.cpu()
            if cpu is not None and cpu0 is not None:
                over = cpu - cpu0 > deadline
            else:  # no /proc here: the budget falls back to wall time while running
                cpu, over = None, time.monotonic() - t_run > deadline
            if over:
                return Outcome("timeout", None, None if cpu is None else cpu - cpu0, time.monotonic() - t0, "cpu"), True
        status, value, cpu_used = w.conn.recv()
        if cpu_used > deadline:  # finished, but past its budget between two checks
            return Outcome("timeout", None, cpu_used, time.monotonic() - t0, "cpu"), False
        return Outcome("ok" if status == "ok" else "error", value, cpu_used, time.monotonic() - t0), False

    def _load(self, w: Worker, key: str, timeout: float) -> bool:
        """Wait for a load already sent to ``w``; True when the reward is now loaded there."""
        try:
            if not w.conn.poll(timeout):
                return False
            status, _, _ = w.conn.recv()
        except (EOFError, OSError):
            return False
        if status == "ok":
            w.loaded.add(key)
        return True  # a reward that cannot be unpickled is reported by the next call, not by a kill

    def _finish_load(self, w: Worker, key: str) -> None:
        ok = self._load(w, key, STARTUP_TIMEOUT)
        self._release(w, broken=not ok or not w.alive())

    def holds(self, key: str) -> bool:
        """Whether every worker the pool may run is started and has the reward ``key`` loaded."""
        with self._lock:
            return len(self._all) >= self.max_workers and all(key in w.loaded for w in self._all)

    def preload_async(self, key: str, payload: bytes) -> threading.Event:
        """Start the workers and load a pickled reward into each of them, in the background, so
        that the first batch pays neither the start nor the import of the reward's module. The
        event is set when every worker has it (or the attempt ended: a failed start, a timeout)."""
        done = threading.Event()

        def run() -> None:
            try:
                self._preload(key, payload)
            finally:
                done.set()

        threading.Thread(target=run, daemon=True, name="rewardlab-pool-preload").start()
        return done

    def _preload(self, key: str, payload: bytes) -> None:
        """The body of :meth:`preload_async`: every worker started, then loaded one idle worker at a time."""
        if not self.warmup():
            return
        end = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < end:
            with self._lock:
                if self._closed or all(key in x.loaded for x in self._all):
                    return
                todo = [x for x in self._idle if key not in x.loaded]
                if not todo:
                    self._lock.wait(0.5)  # the others are busy (and load it on their first call)
                    continue
                w = todo[0]
                self._idle.remove(w)
            try:
                w.conn.send(("load", key, payload))
                ok = self._load(w, key, STARTUP_TIMEOUT)
            except (OSError, BrokenPipeError):
                ok = False
            self._release(w, broken=not ok or not w.alive())

    def shutdown(self) -> None:
        """Stop every worker (idempotent)."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._lock.notify_all()
        for w in workers:
            try:
                w.conn.send(("stop",))
            except Exception:  # noqa: BLE001
                pass
        for w in workers:
            w.proc.join(timeout=0.5)
            if w.proc.is_alive():
                w.kill()

    def pids(self) -> list[int]:
        """The process ids of the ready workers."""
        with self._lock:
            return [w.proc.pid for w in self._all if w.proc.pid is not None]


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool(workers: int | None = None) -> WorkerPool:
    """The process-wide pool (created on first use, grown if ``workers`` asks for more)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.owner_pid != os.getpid():
            # A fork-started child (e.g. a DataLoader worker) must not share its parent's pipes, and
            # cannot use its parent's fork server: it gets a pool of its own, started with spawn.
            _POOL = WorkerPool(workers, start_method="spawn")
        elif _POOL is None or _POOL.closed:
            _POOL = WorkerPool(workers)
        elif workers and workers > _POOL.max_workers:
            _POOL.max_workers = workers
        return _POOL


def shutdown_pool() -> None:
    """Stop the process-wide pool's workers (also runs at interpreter exit)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL.owner_pid == os.getpid():
            _POOL.shutdown()
        _POOL = None


atexit.register(shutdown_pool)
