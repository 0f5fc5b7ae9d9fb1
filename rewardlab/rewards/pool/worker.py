"""The child side of the reward pool: what runs inside a worker process, and what is sent there.

A worker is started by :class:`rewardlab.rewards.pool.process.WorkerPool` (``forkserver``, or
``spawn`` where there is none) with :func:`worker_main` as its target. It loads pickled rewards
once (``("load", key, payload)``), runs calls on them (``("call", key, args, kwargs)``) and replies
``(status, value, cpu_s)``; it never enforces a limit itself - the parent kills it when it overruns.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from multiprocessing import spawn as mp_spawn
from typing import Any, Callable

from rewardlab.rewards.base import has_slow_part

PRELOAD = ["rewardlab.rewards.math.slow"]
"""Modules the fork server imports once, so that every worker starts with them loaded."""
WORKER_MEMORY_BYTES = 4 << 30
"""Address-space limit of a worker (a pathological expression fails with MemoryError instead of swapping)."""
WORKER_NAME = "rewardlab-reward-worker"
"""The process name of every worker (multiprocessing's ``name``; see :func:`hide_main_from_workers`)."""

_worker_side = False
# True inside a pool worker process: score_one runs slow parts inline there (the pool that sent the
# call enforces its budget). Read through in_worker().


def in_worker() -> bool:
    """Whether this process is a pool worker (set by :func:`worker_main`)."""
    return _worker_side


def hide_main_from_workers() -> None:
    """Workers must not re-import the caller's ``__main__`` script (a trainer script without an
    ``if __name__ == "__main__"`` guard would run again in every worker). multiprocessing describes
    ``__main__`` to spawn/forkserver children in ``spawn.get_preparation_data``; drop that part for
    our workers only, by their process name. (Swapping ``sys.modules["__main__"]`` instead would hide
    it from the caller's other threads for as long as a cold fork server takes to start.) Idempotent."""
    orig = mp_spawn.get_preparation_data
    if getattr(orig, "_rewardlab", False):
        return

    def get_preparation_data(name: str) -> dict:
        d = orig(name)
        if name == WORKER_NAME:
            d.pop("init_main_from_path", None)
            d.pop("init_main_from_name", None)
        return d

    get_preparation_data._rewardlab = True  # type: ignore[attr-defined]
    mp_spawn.get_preparation_data = get_preparation_data


hide_main_from_workers()


class SlowPart:
    """What a worker runs for a reward that has a ``slow`` part (picklable when the reward is)."""

    def __init__(self, reward: Any):
        self.reward = reward

    def __call__(self, completion: Any, reference: Any, **meta: Any) -> Any:
        return self.reward.slow(completion, reference, **meta)


def worker_callable(reward: Any) -> Any:
    """What is pickled and sent to the workers for ``reward``: its slow part, or the reward itself."""
    return SlowPart(reward) if has_slow_part(reward) else reward


def _set_up_process(preload: list[str]) -> None:
    """Signals, recursion and memory limits, and the preloaded modules of a fresh worker."""
    global _worker_side
    _worker_side = True
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


def _load(conn: Any, fns: dict[str, Callable[..., Any]], key: str, payload: bytes) -> None:
    try:
        fns[key] = pickle.loads(payload)
        conn.send(("ok", None, 0.0))
    except BaseException as e:  # noqa: BLE001
        conn.send(("err", f"cannot unpickle the reward: {type(e).__name__}: {e}", 0.0))


def _call(conn: Any, fns: dict[str, Callable[..., Any]], key: str, args: tuple, kwargs: dict) -> bool:
    """Run one call of the loaded ``fns[key]`` and reply; False when the reply cannot be sent (the
    worker then exits)."""
    c0 = time.process_time()
    try:
        out = fns[key](*args, **kwargs)
        conn.send(("ok", out, time.process_time() - c0))
    except BaseException as e:  # noqa: BLE001 - everything becomes a result
        try:
            conn.send(("err", f"{type(e).__name__}: {str(e)[:500]}", time.process_time() - c0))
        except Exception:  # noqa: BLE001
            return False
    return True


def worker_main(conn: Any, preload: list[str]) -> None:
    """Entry point of a worker process: load functions once, run calls, reply. Exits on EOF."""
    _set_up_process(preload)
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
            _load(conn, fns, msg[1], msg[2])
        elif op == "call":
            _, key, args, kwargs = msg
            if not _call(conn, fns, key, args, kwargs):
                return
        elif op == "stop":
            return
