"""Batch scoring with hard per-item deadlines: persistent worker processes, killed when they overrun.

``score_batch(reward, completions, references)`` is the one call the trainer and the eval suite
make. It works for any picklable reward (plain functions, :class:`~rewardlab.rewards.math.MathReward`,
composites) and guarantees:

* results come back in input order, one :class:`RewardResult` per item, never an exception: a reward
  that raises gives ``status="error"``; one that overruns its deadline gives ``status="timeout"``
  (score ``reward.timeout_score`` when the reward has one, else 0.0);
* the deadline is enforced from outside: the worker process that overran is SIGKILLed and replaced
  (no ``signal.alarm``, so this works from the main thread, worker threads and asyncio alike);
* workers are started with the ``forkserver`` method (``spawn`` where there is none), never by forking
  the caller, which may be a trainer holding gigabytes of tensors; the fork server preloads sympy and
  math-verify once, so a replacement worker is ready in milliseconds;
* the reward is pickled once per batch and sent once to each worker, not once per item;
* a reward with a ``fast(completion, reference, **meta)`` method gets a first pass on the caller's
  thread: whatever it decides there (most math answers, in microseconds) never crosses a process;
* rewards with ``isolated = True`` (the code reward isolates itself in its sandbox) and rewards defined
  in ``__main__`` (which workers cannot import) run in threads of the calling process instead.

The pool is created on first use and shut down at exit. ``get_pool().warmup()`` starts it ahead of
time (the first start imports sympy: about a second).
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from rewardlab.rewards.base import RewardResult, as_result

IN_WORKER = False
"""True inside a pool worker process: rewards then run their slow paths inline (the pool kills them)."""
PRELOAD = ["rewardlab.rewards.math_slow"]
"""Modules the fork server imports once, so that every worker starts with them loaded."""
WORKER_MEMORY_BYTES = 4 << 30
"""Address-space limit of a worker (a pathological expression fails with MemoryError instead of swapping)."""
STARTUP_TIMEOUT = 120.0
"""How long to wait for a new worker to report ready (not counted against item deadlines)."""


def _default_workers() -> int:
    env = os.environ.get("REWARDLAB_REWARD_WORKERS")
    if env:
        return max(1, int(env))
    return max(2, min(8, os.cpu_count() or 2))


# ---------------------------------------------------------------------------- worker side

def _worker_main(conn: Any, preload: list[str]) -> None:
    """Entry point of a worker process: load functions once, run calls, reply. Exits on EOF."""
    global IN_WORKER
    IN_WORKER = True
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
    conn.send(("ready", os.getpid()))
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
                conn.send(("ok", None))
            except BaseException as e:  # noqa: BLE001
                conn.send(("err", f"cannot unpickle the reward: {type(e).__name__}: {e}"))
        elif op == "call":
            _, key, args, kwargs = msg
            try:
                out = fns[key](*args, **kwargs)
                conn.send(("ok", out))
            except BaseException as e:  # noqa: BLE001 - everything becomes a result
                try:
                    conn.send(("err", f"{type(e).__name__}: {str(e)[:500]}"))
                except Exception:  # noqa: BLE001
                    return
        elif op == "stop":
            return


# ---------------------------------------------------------------------------- parent side

_START_LOCK = threading.Lock()


class _Worker:
    def __init__(self, ctx: Any, preload: list[str]):
        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        self.proc = ctx.Process(target=_worker_main, args=(child, preload), daemon=True, name="rewardlab-reward-worker")
        with _START_LOCK:
            # multiprocessing re-imports the caller's __main__ script in spawn/forkserver children (a
            # trainer script without an ``if __name__ == "__main__"`` guard would run again). Workers
            # need nothing from __main__, so hide it while the process is described and started.
            real_main = sys.modules.get("__main__")
            sys.modules["__main__"] = types.ModuleType("__main__")
            try:
                self.proc.start()
            finally:
                if real_main is not None:
                    sys.modules["__main__"] = real_main
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
    """Persistent worker processes with per-call deadlines. Thread-safe; see the module docstring."""

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
        self._all: set[_Worker] = set()
        self._closed = False
        self._pending = 0  # replacements being started in the background
        self.stats = {"started": 0, "killed": 0, "calls": 0}

    # -- worker management
    def _new_worker(self) -> _Worker:
        w = _Worker(self.ctx, PRELOAD)
        self.stats["started"] += 1
        return w

    def _acquire(self, timeout: float | None) -> tuple[_Worker | None, float]:
        """A free worker (starting one if below max) and the seconds spent waiting for a busy one."""
        end = None if timeout is None else time.monotonic() + timeout
        waited = 0.0
        with self._lock:
            while True:
                if self._closed:
                    raise RuntimeError("the reward pool is shut down")
                if self._idle:
                    return self._idle.pop(), waited
                if len(self._all) + self._pending < self.max_workers:
                    w = self._new_worker()
                    self._all.add(w)
                    return w, waited
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None, waited
                t = time.monotonic()
                self._lock.wait(left)
                waited += time.monotonic() - t

    def _release(self, w: _Worker, broken: bool) -> None:
        if broken:
            w.kill()
            self.stats["killed"] += 1
        with self._lock:
            if broken:
                self._all.discard(w)
                if not self._closed:
                    # start the replacement now, in the background, so that neither this call nor the
                    # next one waits for the fork
                    self._pending += 1
                    threading.Thread(target=self._replace, daemon=True, name="rewardlab-pool-replace").start()
            elif self._closed:
                w.kill()
                self._all.discard(w)
            else:
                self._idle.append(w)
            self._lock.notify()

    def _replace(self) -> None:
        try:
            nw = self._new_worker()
        except Exception:  # noqa: BLE001 - the next _acquire starts one itself
            nw = None
        with self._lock:
            self._pending -= 1
            if nw is not None:
                if self._closed:
                    nw.kill()
                else:
                    self._all.add(nw)
                    self._idle.append(nw)
            self._lock.notify()

    def warmup(self, n: int | None = None) -> None:
        """Start ``n`` workers (default all) and wait until they are ready."""
        ws = [self._acquire(None)[0] for _ in range(min(n or self.max_workers, self.max_workers))]
        for w in ws:
            ok = w is not None and w.wait_ready(STARTUP_TIMEOUT)
            if w is not None:
                self._release(w, broken=not ok)

    def call(self, fn: Any, args: tuple = (), kwargs: dict | None = None, *, deadline: float = 1.0,
             key: str | None = None, payload: bytes | None = None) -> tuple[str, Any]:
        """Run ``fn(*args, **kwargs)`` in a worker within ``deadline`` seconds of compute.

        Returns ``("ok", value)``, ``("timeout", None)`` or ``("error", message)``. ``fn`` is pickled
        (by reference for module-level functions) once per worker; pass ``key``/``payload`` to reuse a
        pickle made by the caller. Waiting for a busy worker counts against the deadline; starting a
        worker and loading the reward into it do not (they are bounded by ``STARTUP_TIMEOUT``;
        replacements are forked from the warm fork server in the background, in milliseconds).
        """
        if payload is None:
            payload = pickle.dumps(fn)
        if key is None:
            key = hashlib.sha1(payload).hexdigest()
        w, queued = self._acquire(deadline)  # waiting for a busy worker counts against the deadline
        if w is None:
            return "timeout", "no worker became free within the deadline"
        broken = False
        try:
            # Starting a worker and loading the reward are not the input's doing: they are bounded by
            # STARTUP_TIMEOUT, not by the item's deadline (a slow import must not cascade into kills).
            if not w.wait_ready(STARTUP_TIMEOUT):
                broken = True
                return "error", "reward worker failed to start"
            if key not in w.loaded:
                w.conn.send(("load", key, payload))
                if not w.conn.poll(STARTUP_TIMEOUT):
                    broken = True
                    return "error", "reward worker did not load the reward"
                status, msg = w.conn.recv()
                if status != "ok":
                    return "error", msg
                w.loaded.add(key)
            t0 = time.monotonic()
            self.stats["calls"] += 1
            w.conn.send(("call", key, args, kwargs or {}))
            if not w.conn.poll(max(deadline - queued - (time.monotonic() - t0), 0.0)):
                broken = True
                return "timeout", None
            status, value = w.conn.recv()
            return ("ok", value) if status == "ok" else ("error", value)
        except (EOFError, OSError, BrokenPipeError) as e:
            broken = True
            return "error", f"reward worker died: {type(e).__name__}"
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            return "error", f"cannot send the call to a worker: {type(e).__name__}: {e}"
        finally:
            self._release(w, broken or not w.alive())

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

def _timeout_result(reward: Any, deadline: float, detail: Any = None) -> RewardResult:
    info = {"status": "timeout", "deadline_s": deadline}
    if detail:
        info["detail"] = detail
    return RewardResult(float(getattr(reward, "timeout_score", 0.0)), info)


def _error_result(message: str) -> RewardResult:
    return RewardResult(0.0, {"status": "error", "error": message})


def _coerce(out: Any) -> RewardResult:
    try:
        return as_result(out)
    except TypeError as e:
        return _error_result(str(e))


def _in_process(reward: Any) -> bool:
    if getattr(reward, "isolated", False):
        return True
    mod = getattr(reward, "__module__", None) or getattr(type(reward), "__module__", None)
    return mod == "__main__"


def _call_safely(reward: Any, c: Any, ref: Any, meta: dict) -> RewardResult:
    try:
        return _coerce(reward(c, ref, **meta))
    except Exception as e:  # noqa: BLE001
        return _error_result(f"{type(e).__name__}: {str(e)[:500]}")


def score_batch(
    reward: Callable[..., RewardResult],
    completions: Sequence[Any],
    references: Sequence[Any],
    metas: Sequence[dict] | None = None,
    *,
    deadline: float = 1.0,
    workers: int | None = None,
) -> list[RewardResult]:
    """Score ``completions[i]`` against ``references[i]`` (with ``**metas[i]``) in parallel, in input order.

    ``deadline`` is per item, in seconds of worker time; ``workers`` caps the parallelism (default:
    the pool size, CPU count up to 8). Never raises for a bad item: see the module docstring.
    """
    n = len(completions)
    if len(references) != n or (metas is not None and len(metas) != n):
        raise ValueError(f"score_batch: {n} completions but {len(references)} references"
                         + ("" if metas is None else f" and {len(metas)} metas"))
    metas = list(metas) if metas is not None else [{} for _ in range(n)]
    results: list[RewardResult | None] = [None] * n

    in_process = _in_process(reward)
    if in_process:
        payload = key = None
        pool = None
        nthreads = workers or _default_workers()
    else:
        try:
            payload = pickle.dumps(reward)  # once for the whole batch; each worker unpickles it once
        except Exception as e:  # noqa: BLE001
            raise ValueError(f"score_batch: the reward {reward!r} cannot be pickled ({e}); "
                             "define it at module level or set isolated = True") from None
        key = hashlib.sha1(payload).hexdigest()
        pool = get_pool(workers)
        nthreads = workers or pool.max_workers

    def one(i: int) -> RewardResult:
        meta = metas[i] or {}
        if pool is None:
            return _call_safely(reward, completions[i], references[i], meta)
        status, value = pool.call(reward, (completions[i], references[i]), meta,
                                  deadline=deadline, key=key, payload=payload)
        if status == "ok":
            return _coerce(value)
        if status == "timeout":
            return _timeout_result(reward, deadline, value)
        return _error_result(str(value))

    fast = getattr(reward, "fast", None)
    with ThreadPoolExecutor(max_workers=max(1, nthreads), thread_name_prefix="rewardlab-score") as ex:
        futures = {}
        for i in range(n):
            r = None
            if callable(fast):
                try:
                    r = fast(completions[i], references[i], **(metas[i] or {}))
                except Exception:  # noqa: BLE001 - the full call will report it
                    r = None
            if r is not None:
                results[i] = r
            else:  # undecided here: start it now, while the caller keeps deciding the rest
                futures[i] = ex.submit(one, i)
        for i, fut in futures.items():
            results[i] = fut.result()
    return results  # type: ignore[return-value]


async def ascore_batch(reward: Callable[..., RewardResult], completions: Sequence[Any], references: Sequence[Any],
                       metas: Sequence[dict] | None = None, *, deadline: float = 1.0,
                       workers: int | None = None) -> list[RewardResult]:
    """:func:`score_batch` for asyncio code: runs in a thread, so the event loop keeps running."""
    return await asyncio.to_thread(score_batch, reward, completions, references, metas,
                                   deadline=deadline, workers=workers)
