"""The in-process runner of the reward pool: items on daemon threads, abandoned at a wall-clock cap.

:func:`rewardlab.rewards.pool.score_batch` runs the undecided items of a batch through
:func:`run_bounded`: pooled items (each thread waits on a worker process, which enforces the limits)
and in-process ones (isolated rewards and rewards defined in ``__main__``, which run here).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def run_bounded(fn: Callable[[int], T], items: list[int], nthreads: int, cap: float | None,
                on_overrun: Callable[[int], T]) -> dict[int, T]:
    """Run ``fn(i)`` for every ``i`` on ``nthreads`` daemon threads. With a ``cap``, an item still
    running ``cap`` seconds after it started is given ``on_overrun(i)`` and its thread is abandoned
    (daemon threads never hold up the interpreter's exit); a replacement thread keeps the rest going."""
    todo: "queue.SimpleQueue[int]" = queue.SimpleQueue()
    for i in items:
        todo.put(i)
    done: dict[int, T] = {}
    started: dict[int, float] = {}
    abandoned: set[int] = set()
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

    def spawn() -> None:
        threading.Thread(target=runner, daemon=True, name="rewardlab-score").start()

    for _ in range(max(1, min(nthreads, len(items)))):
        spawn()
    with cond:
        while len(done) < len(items):
            wait = 0.5
            if cap is not None:
                wait = _abandon_overruns(started, done, abandoned, cap, on_overrun, spawn)
            cond.wait(wait)
    return done


def _abandon_overruns(started: dict[int, float], done: dict, abandoned: set[int], cap: float,
                      on_overrun: Callable[[int], T], spawn: Callable[[], None]) -> float:
    """Give every item running for ``cap`` seconds its overrun result and a replacement thread;
    return how long to wait until the next item could overrun (the caller holds the lock)."""
    now = time.monotonic()
    for i, t in started.items():
        if i not in done and now - t >= cap:
            done[i] = on_overrun(i)
            abandoned.add(i)
            spawn()
    running = [t for i, t in started.items() if i not in done]
    return max(0.0, min(running) + cap - now) + 0.001 if running else 0.5
