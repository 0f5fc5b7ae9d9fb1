"""Calls into code rewardlab does not control (an environment's reset, tools and reward), bounded in time, their
failures returned as values.

    bounded(lambda: env.increment(step=2), 2.0)        # its value; Hung after 2 s; Raised if it raised anything
    bounded_all([open_a, open_b], 5.0)                 # in parallel, one deadline: a value, Hung or Raised each

Each call runs in a daemon thread. Whatever it raises, ``SystemExit`` and ``KeyboardInterrupt`` included, comes
back as :class:`Raised`, its text taken inside the call's own time (an exception whose ``__str__`` raises or
hangs is described by its type). A call still running at its deadline is :class:`Hung`, and so is one that
returned after it (a C call holding the GIL blocks the waiting thread too). Python cannot stop a thread: a hung
call is left running, holding its thread and whatever CPU it uses, and the process exits without waiting for it.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any, Callable


class Hung(Exception):
    """The call did not return within its time."""


class Raised(Exception):
    """The call raised; the message is ``Type: text``."""


def describe(e: BaseException) -> str:
    """``Type: text`` of an exception, whatever its ``__str__`` does (at most 300 characters)."""
    try:
        text = str(e)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = "(its message could not be read)"
    return f"{type(e).__name__}: {text}"[:300]


def _run(fn: Callable[[], Any], box: dict[str, Any]) -> None:
    try:
        out = fn()
        box["value"] = asyncio.run(out) if inspect.isawaitable(out) else out
    except BaseException as e:  # noqa: BLE001 - every failure is handed back as a value
        box["error"] = Raised(describe(e))
    box["end"] = time.monotonic()


def bounded_all(fns: list[Callable[[], Any]], seconds: float) -> list[Any]:
    """Every ``fn()`` in its own thread, all under one deadline ``seconds`` from now: each one's value (awaited
    when it is a coroutine), or a :class:`Hung` (still running at the deadline, or done only after it) or
    :class:`Raised` instance in its place."""
    start = time.monotonic()
    boxes: list[dict[str, Any]] = [{} for _ in fns]
    threads = [threading.Thread(target=_run, args=(fn, box), name="rewardlab-bounded", daemon=True)
               for fn, box in zip(fns, boxes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, start + seconds - time.monotonic()))
    out: list[Any] = []
    for box in boxes:
        end = box.get("end")  # read once: the thread may finish while we look
        if end is None:
            out.append(Hung(f"no answer within {seconds:g} s"))
        elif end - start > seconds:  # it returned, but after its time (a C call held the interpreter lock)
            out.append(Hung(f"returned after {end - start:.1f} s, over its {seconds:g} s"))
        else:
            out.append(box.get("error", box.get("value")))
    return out


def bounded(fn: Callable[[], Any], seconds: float) -> Any:
    """``fn()``'s value; raises :class:`Hung` when it did not return within ``seconds``, :class:`Raised` when it
    raised anything."""
    (out,) = bounded_all([fn], seconds)
    if isinstance(out, (Hung, Raised)):
        raise out
    return out


__all__ = ["bounded"]
