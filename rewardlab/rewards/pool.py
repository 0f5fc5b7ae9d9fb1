"""Batch scoring with hard per-item deadlines: persistent worker processes, killed when they overrun.

``score_batch(reward, completions, references)`` is the one call the trainer and the eval suite
make. It works for any picklable reward (plain functions, :class:`~rewardlab.rewards.math.MathReward`,
composites) and guarantees:

* results come back in input order, one :class:`RewardResult` per item, never an exception: a reward
  that raises gives ``status="error"``; one that overruns gives ``status="timeout"`` (score
  ``reward.timeout_score`` when the reward has one, else 0.0) and ``info["phase"]`` says which limit;
* **two limits per item.** ``deadline`` is a budget of the *worker's CPU seconds* (read from
  ``/proc/<pid>/stat`` while the call runs), so a legitimate answer gets the same verdict on an idle
  machine and on one loaded at several times its cores. ``wall_cap`` (default
  :data:`WALL_CAP`, 5 s) is the hang guard: no item returns later than that after it starts, whatever
  happens - a cold pool, a dead worker, a starved machine. Both figures are in ``info``
  (``cpu_s``/``wall_s`` on every pooled result, ``deadline_s``/``wall_cap_s`` on timeouts);
* the deadline is enforced from outside: the worker process that overran is SIGKILLed and replaced
  (no ``signal.alarm``, so this works from the main thread, worker threads and asyncio alike);
* workers are started with the ``forkserver`` method (``spawn`` where there is none), never by forking
  the caller, which may be a trainer holding gigabytes of tensors; the fork server preloads and warms
  sympy and math-verify once, so a replacement worker is ready in milliseconds;
* the reward is pickled once per batch and sent once to each worker, not once per item;
* the pool alone decides where each part of a reward runs (the protocol is in
  :mod:`rewardlab.rewards.base`): a reward's ``fast(completion, reference, **meta)`` gets a first
  pass on the caller's thread, and whatever it decides there (most math answers, in microseconds)
  never crosses a process; what it leaves undecided goes to a worker, which runs the reward's
  ``slow`` part (or its whole call, for rewards without one, e.g. plain functions). ``fast`` paths
  are linear-time by construction (see ``tests/test_fuzz_rewards.py``);
* **one deadline**: the ``deadline`` given to :func:`score_batch` (the trainer's
  ``--reward-deadline``, the eval suite's grader deadline) is the budget of every item, whatever
  the reward; in particular it also governs rewards called directly from inside a batch (the
  components of an isolated ``Combined``). ``MathReward(timeout=...)`` is only the default of
  direct calls outside any batch, through :func:`score_one`;
* rewards with ``isolated = True`` (the code reward isolates itself in its sandbox and enforces its
  own limits) and rewards defined in ``__main__`` (which workers cannot import) run in threads of the
  calling process instead; a ``__main__`` reward that overruns the wall cap is abandoned (its daemon
  thread is left to finish) and reported as a timeout.

**Cold start.** Workers are only ever started by a background thread: the first start of a process
launches the fork server, which imports and warms sympy (about 2 s of CPU, several times that in
wall time on a loaded machine). A call that arrives before any worker is ready waits for one, up to
its wall cap, and otherwise returns ``status="timeout"`` with ``phase="startup"`` - it never blocks
past the cap, and the start goes on in the background for the next call. A *batch*
(:func:`score_batch`) on a cold pool instead waits once, up to ``startup_wait`` (default
:data:`STARTUP_WAIT`, 60 s), for its workers to start and hold the reward, so that the first batch
of a process is graded like every other one; ``startup_wait=0`` gives it the single-call rule. The warm-up time is never
charged to an item's CPU budget. Loading the reward into a worker (unpickling imports its module)
is start-up too: it finishes in the background and the call answers at its cap. ``prewarm(reward)``
starts the workers and loads the reward into them ahead of time (``rewardlab train`` and ``rewardlab
eval`` do so while the model loads); the trainer then waits for that, at most ``STARTUP_TIMEOUT``
once, before its first batch, so that no training step is graded on a cold pool. ``warmup()`` waits
for the workers alone.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing import spawn as _mp_spawn
from contextvars import ContextVar
from typing import Any, Callable, Sequence

from rewardlab.rewards.base import (
    RewardResult,
    as_result,
    explain_failure,
    fast_part,
    has_slow_part,
    is_isolated,
    slow_part,
    timeout_score_of,
)

_WORKER_SIDE = False
# True inside a pool worker process: score_one runs slow parts inline there (the pool that sent the
# call enforces its budget). Only this module reads it.
_BATCH_LIMITS: ContextVar[tuple[float, float] | None] = ContextVar("rewardlab_batch_limits", default=None)
# (deadline, wall cap) of the score_batch whose in-process item is being scored on this thread, so a
# reward called directly inside it (an isolated Combined's math component) gets the batch's deadline.

PRELOAD = ["rewardlab.rewards.math.slow"]
"""Modules the fork server imports once, so that every worker starts with them loaded."""
WORKER_MEMORY_BYTES = 4 << 30
"""Address-space limit of a worker (a pathological expression fails with MemoryError instead of swapping)."""
STARTUP_TIMEOUT = 120.0
"""How long the background starter waits for a new worker to report ready (no caller waits this long)."""
STARTUP_WAIT = 60.0
"""How long :func:`score_batch` waits, once, for a cold pool to start and load its reward."""
WALL_CAP = 5.0
"""Default wall-clock cap of one call, in seconds: the hang guard, from the call's start to its return."""
WORKER_NAME = "rewardlab-reward-worker"
_POLL_S = 0.02  # how often a running call's CPU time is checked (replies are read the moment they arrive)


def _default_workers() -> int:
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


def _hide_main_from_workers() -> None:
    """Workers must not re-import the caller's ``__main__`` script (a trainer script without an
    ``if __name__ == "__main__"`` guard would run again in every worker). multiprocessing describes
    ``__main__`` to spawn/forkserver children in ``spawn.get_preparation_data``; drop that part for
    our workers only, by their process name. (Swapping ``sys.modules["__main__"]`` instead would hide
    it from the caller's other threads for as long as a cold fork server takes to start.)"""
    orig = _mp_spawn.get_preparation_data
    if getattr(orig, "_rewardlab", False):
        return

    def get_preparation_data(name: str) -> dict:
        d = orig(name)
        if name == WORKER_NAME:
            d.pop("init_main_from_path", None)
            d.pop("init_main_from_name", None)
        return d

    get_preparation_data._rewardlab = True  # type: ignore[attr-defined]
    _mp_spawn.get_preparation_data = get_preparation_data


_hide_main_from_workers()


# ---------------------------------------------------------------------------- worker side

def _worker_main(conn: Any, preload: list[str]) -> None:
    """Entry point of a worker process: load functions once, run calls, reply. Exits on EOF."""
    global _WORKER_SIDE
    _WORKER_SIDE = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the trainer
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    for mod in preload:
        try:
            __import__(mod)
        except Exception:  # noqa: BLE001 - a missing optional module only slows the first call
            pass
    fns: dict[str, Callable[..., Any]] = {}
    try:
        conn.send(("ready", os.getpid()))
    except (BrokenPipeError, EOFError, OSError):
        return  # the parent went away while this worker was starting (e.g. a run that exits early)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        op = msg[0]
        if op == "load":
            _, key, payload = msg
            try:
                fns[key] = pickle.loads(payload)
                conn.send(("ok", None, 0.0))
            except BaseException as e:  # noqa: BLE001
                conn.send(("err", f"cannot unpickle the reward: {type(e).__name__}: {e}", 0.0))
        elif op == "call":
            _, key, args, kwargs = msg
            c0 = time.process_time()
            try:
                out = fns[key](*args, **kwargs)
                conn.send(("ok", out, time.process_time() - c0))
            except BaseException as e:  # noqa: BLE001 - everything becomes a result
                try:
                    conn.send(("err", f"{type(e).__name__}: {str(e)[:500]}", time.process_time() - c0))
                except Exception:  # noqa: BLE001
                    return
        elif op == "stop":
            return


# ---------------------------------------------------------------------------- parent side

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


class _Worker:
    def __init__(self, ctx: Any, preload: list[str]):
        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        self.proc = ctx.Process(target=_worker_main, args=(child, preload), daemon=True, name=WORKER_NAME)
        self.proc.start()  # with a cold fork server this blocks until its preload is done (background thread)
        child.close()
        self.ready = False
        self.loaded: set[str] = set()

    def wait_ready(self, timeout: float) -> bool:
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
        return process_cpu_seconds(self.proc.pid) if self.proc.pid else None

    def kill(self) -> None:
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
    """Persistent worker processes with per-call CPU budgets and wall caps. Thread-safe; see the module docstring."""

    def __init__(self, max_workers: int | None = None, start_method: str | None = None):
        self.max_workers = max_workers or _default_workers()
        method = start_method or os.environ.get("REWARDLAB_POOL_START") or (
            "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        )
        self.ctx = mp.get_context(method)
        if method == "forkserver":
            try:
                self.ctx.set_forkserver_preload(PRELOAD)
            except Exception:  # noqa: BLE001 - a fork server already running keeps its preload
                pass
        self.owner_pid = os.getpid()
        self._lock = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()  # ready workers, idle or busy
        self._closed = False
        self._starting = 0  # workers being started by background threads
        self.start_error: str | None = None
        self.stats = {"started": 0, "killed": 0, "calls": 0}

    # -- worker management: every start happens on a background thread
    def _start_async(self) -> None:
        """Start one worker in the background (caller holds the lock)."""
        self._starting += 1
        threading.Thread(target=self._start_one, daemon=True, name="rewardlab-pool-start").start()

    def _start_one(self) -> None:
        w = None
        try:
            w = _Worker(self.ctx, PRELOAD)
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

    def _acquire(self, until: float) -> tuple[_Worker | None, str]:
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

    def _release(self, w: _Worker, broken: bool) -> None:
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

    def call(self, fn: Any, args: tuple = (), kwargs: dict | None = None, *, deadline: float = 1.0,
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
            why = {"startup": "no reward worker was ready yet (cold start)" + (f": {self.start_error}" if self.start_error else ""),
                   "queue": "every reward worker stayed busy"}[phase]
            return Outcome("timeout", f"{why} within the {cap:g} s wall-clock cap", None, time.monotonic() - t0, phase)
        broken = handed_off = False
        cpu_used: float | None = None
        try:
            if key not in w.loaded:
                w.conn.send(("load", key, payload))
                if not w.conn.poll(max(until - time.monotonic(), 0.0)):
                    # Unpickling imports the reward's module (a trainer script's imports, say): that is
                    # start-up, not the input's doing. The load finishes in the background and the
                    # worker then serves the next call; this one answers at its cap.
                    handed_off = True
                    threading.Thread(target=self._finish_load, args=(w, key), daemon=True,
                                     name="rewardlab-pool-load").start()
                    return Outcome("timeout", "the reward was still loading into a worker (start-up) at the "
                                   f"{cap:g} s wall-clock cap", None, time.monotonic() - t0, "startup")
                status, msg, _ = w.conn.recv()
                if status != "ok":
                    return Outcome("error", msg, None, time.monotonic() - t0)
                w.loaded.add(key)
            self.stats["calls"] += 1
            cpu0 = w.cpu()
            w.conn.send(("call", key, args, kwargs or {}))
            t_run = time.monotonic()
            while True:
                left = until - time.monotonic()
                if left <= 0:
                    broken = True
                    cpu = w.cpu()
                    cpu_used = None if cpu is None or cpu0 is None else cpu - cpu0
                    return Outcome("timeout", None, cpu_used, time.monotonic() - t0, "wall")
                if w.conn.poll(min(_POLL_S, left)):
                    break
                cpu = w.cpu()
                if cpu is not None and cpu0 is not None:
                    over = cpu - cpu0 > deadline
                else:  # no /proc here: the budget falls back to wall time while running
                    cpu, over = None, time.monotonic() - t_run > deadline
                if over:
                    broken = True
                    return Outcome("timeout", None, None if cpu is None else cpu - cpu0, time.monotonic() - t0, "cpu")
            status, value, cpu_used = w.conn.recv()
            if cpu_used > deadline:  # finished, but past its budget between two checks
                return Outcome("timeout", None, cpu_used, time.monotonic() - t0, "cpu")
            return Outcome("ok" if status == "ok" else "error", value, cpu_used, time.monotonic() - t0)
        except (EOFError, OSError, BrokenPipeError) as e:
            broken = True
            return Outcome("error", f"reward worker died: {type(e).__name__}", cpu_used, time.monotonic() - t0)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            return Outcome("error", f"cannot send the call to a worker: {type(e).__name__}: {e}", None,
                           time.monotonic() - t0)
        finally:
            if not handed_off:
                self._release(w, broken or not w.alive())

    def _load(self, w: _Worker, key: str, timeout: float) -> bool:
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

    def _finish_load(self, w: _Worker, key: str) -> None:
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
                preload()
            finally:
                done.set()

        def preload() -> None:
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

        threading.Thread(target=run, daemon=True, name="rewardlab-pool-preload").start()
        return done

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
        elif _POOL is None or _POOL._closed:
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


# ---------------------------------------------------------------------------- batch API

def _timeout_result(reward: Any, deadline: float, cap: float, outcome: Outcome | None = None) -> RewardResult:
    info: dict[str, Any] = {"status": "timeout", "deadline_s": deadline, "wall_cap_s": cap}
    if outcome is not None:
        info.update(outcome.info())
        if outcome.value:
            info["detail"] = outcome.value
    return RewardResult(timeout_score_of(reward), info)


def _error_result(message: str) -> RewardResult:
    return RewardResult(0.0, {"status": "error", "error": message})


def _coerce(out: Any) -> RewardResult:
    try:
        return as_result(out)
    except TypeError as e:
        return _error_result(str(e))


def _in_process(reward: Any) -> bool:
    if is_isolated(reward):
        return True
    mod = getattr(reward, "__module__", None) or getattr(type(reward), "__module__", None)
    return mod == "__main__"


def _call_safely(reward: Any, c: Any, ref: Any, meta: dict) -> RewardResult:
    try:
        return _coerce(reward(c, ref, **meta))
    except Exception as e:  # noqa: BLE001
        return _error_result(f"{type(e).__name__}: {str(e)[:500]}")


def _run_bounded(fn: Callable[[int], RewardResult], items: list[int], nthreads: int, cap: float | None,
                 on_overrun: Callable[[int], RewardResult]) -> dict[int, RewardResult]:
    """Run ``fn(i)`` for every ``i`` on ``nthreads`` daemon threads. With a ``cap``, an item still
    running ``cap`` seconds after it started is given ``on_overrun(i)`` and its thread is abandoned
    (daemon threads never hold up the interpreter's exit); a replacement thread keeps the rest going."""
    todo: "queue.SimpleQueue[int]" = queue.SimpleQueue()
    for i in items:
        todo.put(i)
    done: dict[int, RewardResult] = {}
    started: dict[int, float] = {}
    cond = threading.Condition()

    def runner() -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            with cond:
                started[i] = time.monotonic()
            r = fn(i)
            with cond:
                done.setdefault(i, r)
                cond.notify_all()
                if i in abandoned:
                    return  # a replacement took this thread's place

    abandoned: set[int] = set()

    def spawn() -> None:
        threading.Thread(target=runner, daemon=True, name="rewardlab-score").start()

    for _ in range(max(1, min(nthreads, len(items)))):
        spawn()
    with cond:
        while len(done) < len(items):
            now = time.monotonic()
            wait = 0.5
            if cap is not None:
                for i, t in started.items():
                    if i not in done and now - t >= cap:
                        done[i] = on_overrun(i)
                        abandoned.add(i)
                        spawn()
                running = [t for i, t in started.items() if i not in done]
                if running:
                    wait = max(0.0, min(running) + cap - now) + 0.001
            cond.wait(wait)
    return done


class _SlowPart:
    """What a worker runs for a reward that has a ``slow`` part (picklable when the reward is)."""

    def __init__(self, reward: Any):
        self.reward = reward

    def __call__(self, completion: Any, reference: Any, **meta: Any) -> Any:
        return self.reward.slow(completion, reference, **meta)


def _worker_callable(reward: Any) -> Any:
    return _SlowPart(reward) if has_slow_part(reward) else reward


def _pooled_result(reward: Any, out: Outcome, deadline: float, cap: float, completion: Any, reference: Any,
                   meta: dict) -> RewardResult:
    """A worker's :class:`Outcome` as the item's result (failures in the reward's own shape)."""
    if out.status == "ok":
        r = _coerce(out.value)
        r.info.update({k: v for k, v in out.info().items() if k not in r.info})
        return r
    failed = _timeout_result(reward, deadline, cap, out) if out.status == "timeout" else _error_result(str(out.value))
    return explain_failure(reward, failed, completion, reference, meta)


def _limits(deadline: float | None, wall_cap: float | None) -> tuple[float, float]:
    deadline = 1.0 if deadline is None else float(deadline)
    return deadline, (max(WALL_CAP, deadline) if wall_cap is None else float(wall_cap))


def score_one(reward: Any, completion: Any, reference: Any, *, deadline: float | None = None,
              wall_cap: float | None = None, **meta: Any) -> RewardResult:
    """Score one item exactly as :func:`score_batch` scores each of its items: ``fast`` on this
    thread, then the slow part in a worker under ``deadline`` worker CPU seconds (default 1.0) and
    the wall cap. Never raises.

    This is the entry point of direct calls: ``MathReward.__call__`` returns
    ``score_one(self, ..., deadline=self.timeout, wall_cap=self.wall_cap)``. Inside a batch (an
    in-process item of :func:`score_batch` on this thread) the batch's deadline and cap win over
    the ones given here; inside a pool worker the slow part runs inline, under the budget of the
    call that worker is running. Only rewards that have a ``slow`` part may call this from their
    ``__call__`` (for the others, the slow part is the call itself).
    """
    batch = _BATCH_LIMITS.get()
    deadline, cap = batch if batch is not None else _limits(deadline, wall_cap)
    fast = fast_part(reward)
    if fast is not None:
        try:
            r = fast(completion, reference, **meta)
        except Exception:  # noqa: BLE001 - the slow part reports it
            r = None
        if r is not None:
            return _coerce(r)
    if _WORKER_SIDE or _in_process(reward):
        return _call_safely(slow_part(reward), completion, reference, meta)
    try:
        out = get_pool().call(_worker_callable(reward), (completion, reference), meta, deadline=deadline, wall_cap=cap)
    except Exception as e:  # noqa: BLE001 - e.g. no process could be started here
        out = Outcome("error", f"{type(e).__name__}: {e}")
    return _pooled_result(reward, out, deadline, cap, completion, reference, meta)


def prewarm(reward: Any, workers: int | None = None) -> threading.Event | None:
    """Start the workers ``reward`` will need and load it into them, in the background (a no-op
    for in-process rewards).

    Call it when a job starts (``rewardlab train`` and ``eval`` do, before loading the model), so
    that the fork server's import of sympy and each worker's import of the reward's module overlap
    the model load instead of the first batch. Returns an event that is set once the workers are
    ready with the reward (None for in-process rewards): a job that must not grade its first batch
    on a cold pool (the trainer) waits on it, bounded, before that batch."""
    if _in_process(reward):
        return None
    try:
        payload = pickle.dumps(_worker_callable(reward))  # exactly what score_batch sends
    except Exception:  # noqa: BLE001 - score_batch reports an unpicklable reward itself
        get_pool(workers).warmup_async()
        return None
    return get_pool(workers).preload_async(hashlib.sha1(payload).hexdigest(), payload)


def score_batch(
    reward: Callable[..., RewardResult],
    completions: Sequence[Any],
    references: Sequence[Any],
    metas: Sequence[dict] | None = None,
    *,
    deadline: float = 1.0,
    wall_cap: float | None = None,
    workers: int | None = None,
    startup_wait: float = STARTUP_WAIT,
) -> list[RewardResult]:
    """Score ``completions[i]`` against ``references[i]`` (with ``**metas[i]``) in parallel, in input order.

    ``deadline`` is per item, in worker CPU seconds; ``wall_cap`` (default ``max(WALL_CAP, deadline)``)
    bounds each item's wall time from its start. ``workers`` caps the parallelism (default: the pool
    size, CPU count up to 8). On a cold pool (the first batch of a process), the batch first waits
    up to ``startup_wait`` seconds (default :data:`STARTUP_WAIT`) for its workers to start and hold
    the reward, charged to no item, so that the first batch is graded like every other one;
    ``startup_wait=0`` answers such items at their cap instead (``phase="startup"``). Never raises
    for a bad item: see the module docstring.
    """
    n = len(completions)
    if len(references) != n or (metas is not None and len(metas) != n):
        raise ValueError(f"score_batch: {n} completions but {len(references)} references"
                         + ("" if metas is None else f" and {len(metas)} metas"))
    metas = list(metas) if metas is not None else [{} for _ in range(n)]
    deadline, cap = _limits(deadline, wall_cap)
    results: list[RewardResult | None] = [None] * n

    in_process = _in_process(reward)
    if in_process:
        payload = key = None
        pool = None
        nthreads = workers or _default_workers()
    else:
        try:
            payload = pickle.dumps(_worker_callable(reward))  # once for the batch; each worker unpickles it once
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"score_batch: the reward {reward!r} cannot be pickled ({e}); "
                             "define it at module level or set isolated = True") from None
        key = hashlib.sha1(payload).hexdigest()
        pool = get_pool(workers)
        pool.warmup_async()  # a cold pool starts every worker now, not one per waiting item
        nthreads = workers or pool.max_workers
        if startup_wait > 0 and not pool.holds(key) and pool.start_error is None:
            pool.preload_async(key, payload).wait(startup_wait)  # once per process and reward

    def one(i: int) -> RewardResult:
        meta = metas[i] or {}
        if pool is None:  # in-process: the slow part here; rewards it calls directly get this batch's limits
            token = _BATCH_LIMITS.set((deadline, cap))
            try:
                return _call_safely(slow_part(reward), completions[i], references[i], meta)
            finally:
                _BATCH_LIMITS.reset(token)
        out = pool.call(None, (completions[i], references[i]), meta,  # fn: the pickled payload
                        deadline=deadline, wall_cap=cap, key=key, payload=payload)
        return _pooled_result(reward, out, deadline, cap, completions[i], references[i], meta)

    fast = fast_part(reward)
    slow: list[int] = []
    for i in range(n):
        r = None
        if fast is not None:
            try:
                r = fast(completions[i], references[i], **(metas[i] or {}))
            except Exception:  # noqa: BLE001 - the slow part will report it
                r = None
        if r is not None:
            results[i] = _coerce(r)
        else:
            slow.append(i)
    if slow:
        # Pooled calls enforce the cap themselves; in-process ones are abandoned at it, except
        # isolated rewards, which enforce their own limits (the code reward's sandbox kills its runs).
        guard = None if pool is not None or is_isolated(reward) else cap

        def overrun(i: int) -> RewardResult:
            out = Outcome("timeout", "abandoned at the wall-clock cap", None, cap, "wall")
            return explain_failure(reward, _timeout_result(reward, deadline, cap, out), completions[i], references[i],
                                   metas[i] or {})

        for i, r in _run_bounded(one, slow, nthreads, guard, overrun).items():
            results[i] = r
    return results  # type: ignore[return-value]


async def ascore_batch(reward: Callable[..., RewardResult], completions: Sequence[Any], references: Sequence[Any],
                       metas: Sequence[dict] | None = None, *, deadline: float = 1.0, wall_cap: float | None = None,
                       workers: int | None = None, startup_wait: float = STARTUP_WAIT) -> list[RewardResult]:
    """:func:`score_batch` for asyncio code: runs in a thread, so the event loop keeps running."""
    return await asyncio.to_thread(score_batch, reward, completions, references, metas,
                                   deadline=deadline, wall_cap=wall_cap, workers=workers, startup_wait=startup_wait)
