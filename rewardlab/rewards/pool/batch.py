"""The batch API of the reward pool: :func:`score_batch`, :func:`ascore_batch`, :func:`score_one`, :func:`prewarm`.

Every item goes the same way (:class:`_Dispatch`): the reward's ``fast`` part on the caller's
thread, then what it left undecided either in a worker process (:mod:`.process`) or, for isolated
rewards and rewards defined in ``__main__``, in this process (:mod:`.threads`). Failures come back
as results in the reward's own shape (:func:`rewardlab.rewards.base.explain_failure`).
"""

from __future__ import annotations

import asyncio
import os
import hashlib
import pickle
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rewardlab.rewards.base import (
    RewardResult,
    as_result,
    explain_failure,
    fast_part,
    is_isolated,
    slow_part,
    timeout_score_of,
)
from rewardlab.rewards.pool.process import DEADLINE, Outcome, WorkerPool, default_workers, get_pool, limits
from rewardlab.rewards.pool.threads import run_bounded
from rewardlab.rewards.pool.worker import in_worker, worker_callable

STARTUP_WAIT = 60.0
"""How long :func:`score_batch` waits, once, for a cold pool to start and load its reward."""

_BATCH_LIMITS: ContextVar[tuple[float, float] | None] = ContextVar("rewardlab_batch_limits", default=None)
# (deadline, wall cap) of the score_batch whose in-process item is being scored on this thread, so a
# reward called directly inside it (an isolated Combined's math component) gets the batch's deadline.


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


def _pooled_result(reward: Any, out: Outcome, deadline: float, cap: float, completion: Any, reference: Any,
                   meta: dict) -> RewardResult:
    """A worker's :class:`Outcome` as the item's result (failures in the reward's own shape)."""
    if out.status == "ok":
        r = _coerce(out.value)
        r.info.update({k: v for k, v in out.info().items() if k not in r.info})
        return r
    failed = _timeout_result(reward, deadline, cap, out) if out.status == "timeout" else _error_result(str(out.value))
    return explain_failure(reward, failed, completion, reference, meta)


@dataclass(frozen=True)
class _Dispatch:
    """Where one reward's items run, under which limits: the "fast part first, then the worker" rule."""

    reward: Any
    deadline: float
    cap: float
    in_process: bool
    """Run the slow part on this thread (isolated and ``__main__`` rewards, and inside a worker)."""
    scope_limits: bool = False
    """In-process: let rewards called directly from inside the call see this deadline (batches)."""
    pool: WorkerPool | None = None
    """The pool (None: the process-wide one, looked up at the call)."""
    key: str | None = None
    payload: bytes | None = None
    """The reward's pickle made once for a batch (None: the pool pickles it per call)."""

    def fast(self, completion: Any, reference: Any, meta: dict) -> RewardResult | None:
        """The ``fast`` part's verdict, or None when it has none (or raised: the slow part reports it)."""
        fast = fast_part(self.reward)
        if fast is None:
            return None
        try:
            r = fast(completion, reference, **meta)
        except Exception:  # noqa: BLE001 - the slow part reports it
            return None
        return None if r is None else _coerce(r)

    def slow(self, completion: Any, reference: Any, meta: dict) -> RewardResult:
        """The slow part's result, in this process or in a worker. Never raises."""
        if self.in_process:
            if not self.scope_limits:
                return _call_safely(slow_part(self.reward), completion, reference, meta)
            token = _BATCH_LIMITS.set((self.deadline, self.cap))
            try:
                return _call_safely(slow_part(self.reward), completion, reference, meta)
            finally:
                _BATCH_LIMITS.reset(token)
        try:
            pool = self.pool or get_pool()
            fn = None if self.payload is not None else worker_callable(self.reward)
            out = pool.call(fn, (completion, reference), meta, deadline=self.deadline, wall_cap=self.cap,
                            key=self.key, payload=self.payload)
        except Exception as e:  # noqa: BLE001 - e.g. no process could be started here
            out = Outcome("error", f"{type(e).__name__}: {e}")
        return _pooled_result(self.reward, out, self.deadline, self.cap, completion, reference, meta)

    def overrun(self, completion: Any, reference: Any, meta: dict) -> RewardResult:
        """The result of an in-process item abandoned at the wall cap."""
        out = Outcome("timeout", "abandoned at the wall-clock cap", None, self.cap, "wall")
        return explain_failure(self.reward, _timeout_result(self.reward, self.deadline, self.cap, out),
                               completion, reference, meta)

    def score(self, completion: Any, reference: Any, meta: dict) -> RewardResult:
        """One item: the fast part's verdict, else the slow part's."""
        r = self.fast(completion, reference, meta)
        return r if r is not None else self.slow(completion, reference, meta)


def score_one(reward: Any, completion: Any, reference: Any, *, deadline: float | None = None,
              wall_cap: float | None = None, **meta: Any) -> RewardResult:
    """Score one item exactly as :func:`score_batch` scores each of its items: ``fast`` on this
    thread, then the slow part in a worker under ``deadline`` worker CPU seconds (default
    :data:`~rewardlab.rewards.pool.process.DEADLINE`) and the wall cap. Never raises.

    This is the entry point of direct calls: ``MathReward.__call__`` returns
    ``score_one(self, ..., deadline=self.timeout, wall_cap=self.wall_cap)``. Inside a batch (an
    in-process item of :func:`score_batch` on this thread) the batch's deadline and cap win over
    the ones given here; inside a pool worker the slow part runs inline, under the budget of the
    call that worker is running. Only rewards that have a ``slow`` part may call this from their
    ``__call__`` (for the others, the slow part is the call itself).
    """
    batch = _BATCH_LIMITS.get()
    deadline, cap = batch if batch is not None else limits(deadline, wall_cap)
    route = _Dispatch(reward, deadline, cap, in_process=in_worker() or _in_process(reward))
    if not route.in_process and batch is None:
        _warm_for_direct_calls(reward)
    return route.score(completion, reference, meta)


_DIRECT_WARMED: dict[int, set[str]] = {}
"""Per process id: the rewards (by type and name) whose workers a direct call has started."""


def _warm_for_direct_calls(reward: Any) -> None:
    """The first direct call of a reward in a process starts its workers in the background
    (:func:`prewarm`) and returns at once, so that a per-call user (verl's naive manager calls
    ``compute_score`` once per sample) finds a warm worker at its first undecided answer instead of
    paying the fork server's start (about 2 s of CPU) on it. Not at import: importing
    ``rewardlab.rewards`` must not start processes (the CLI, a DataLoader worker, a process that only
    uses the code reward or never grades would each pay it)."""
    done = _DIRECT_WARMED.setdefault(os.getpid(), set())
    key = f"{type(reward).__qualname__}:{getattr(reward, 'name', '')}"
    if key in done:
        return
    done.add(key)
    try:
        prewarm(reward)
    except Exception:  # noqa: BLE001 - warming is best effort; the call itself reports a failing pool
        pass


def _pickled(reward: Any) -> tuple[bytes, str]:
    """What :func:`score_batch` sends to the workers for ``reward``, and its key."""
    payload = pickle.dumps(worker_callable(reward))
    return payload, hashlib.sha1(payload).hexdigest()


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
        payload, key = _pickled(reward)  # exactly what score_batch sends
    except Exception:  # noqa: BLE001 - score_batch reports an unpicklable reward itself
        get_pool(workers).warmup_async()
        return None
    return get_pool(workers).preload_async(key, payload)


def _batch_dispatch(reward: Any, deadline: float, cap: float, workers: int | None,
                    startup_wait: float) -> tuple[_Dispatch, int]:
    """The dispatch of one batch and its thread count; a cold pool is started (and waited for,
    up to ``startup_wait``, once per process and reward) here."""
    if _in_process(reward):
        return _Dispatch(reward, deadline, cap, in_process=True, scope_limits=True), workers or default_workers()
    try:
        payload, key = _pickled(reward)  # once for the batch; each worker unpickles it once
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"score_batch: the reward {reward!r} cannot be pickled ({e}); "
                         "define it at module level or set isolated = True") from None
    pool = get_pool(workers)
    pool.warmup_async()  # a cold pool starts every worker now, not one per waiting item
    if startup_wait > 0 and not pool.holds(key) and pool.start_error is None:
        pool.preload_async(key, payload).wait(startup_wait)
    return _Dispatch(reward, deadline, cap, in_process=False, pool=pool, key=key, payload=payload), \
        workers or pool.max_workers


def score_batch(
    reward: Callable[..., RewardResult],
    completions: Sequence[Any],
    references: Sequence[Any],
    metas: Sequence[dict] | None = None,
    *,
    deadline: float = DEADLINE,
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
    for a bad item: see the package docstring.
    """
    n = len(completions)
    if len(references) != n or (metas is not None and len(metas) != n):
        raise ValueError(f"score_batch: {n} completions but {len(references)} references"
                         + ("" if metas is None else f" and {len(metas)} metas"))
    meta = [m or {} for m in metas] if metas is not None else [{} for _ in range(n)]
    deadline, cap = limits(deadline, wall_cap)
    route, nthreads = _batch_dispatch(reward, deadline, cap, workers, startup_wait)
    results: list[RewardResult | None] = [route.fast(completions[i], references[i], meta[i]) for i in range(n)]
    slow = [i for i in range(n) if results[i] is None]
    if slow:
        # Pooled calls enforce the cap themselves; in-process ones are abandoned at it, except
        # isolated rewards, which enforce their own limits (the code reward's sandbox kills its runs).
        guard = None if not route.in_process or is_isolated(reward) else cap
        done = run_bounded(lambda i: route.slow(completions[i], references[i], meta[i]), slow, nthreads, guard,
                           lambda i: route.overrun(completions[i], references[i], meta[i]))
        for i, r in done.items():
            results[i] = r
    return results  # type: ignore[return-value]


async def ascore_batch(reward: Callable[..., RewardResult], completions: Sequence[Any], references: Sequence[Any],
                       metas: Sequence[dict] | None = None, *, deadline: float = DEADLINE,
                       wall_cap: float | None = None, workers: int | None = None,
                       startup_wait: float = STARTUP_WAIT) -> list[RewardResult]:
    """:func:`score_batch` for asyncio code: runs in a thread, so the event loop keeps running."""
    return await asyncio.to_thread(score_batch, reward, completions, references, metas,
                                   deadline=deadline, wall_cap=wall_cap, workers=workers, startup_wait=startup_wait)
