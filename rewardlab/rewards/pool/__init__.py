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
* **one deadline**: the ``deadline`` given to :func:`score_batch` (default :data:`DEADLINE`; the trainer's
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

The package is split by concern: :mod:`.worker` (the child process's code, and what is sent to it),
:mod:`.process` (the parent's process manager and the shared limits), :mod:`.threads` (the
in-process thread runner) and :mod:`.batch` (the calls above, and the one dispatch rule every item
follows). Import from here: ``from rewardlab.rewards.pool import score_batch``.
"""

from __future__ import annotations

from rewardlab.rewards.pool.batch import ascore_batch, prewarm, score_batch, score_one
from rewardlab.rewards.pool.process import (DEADLINE, STARTUP_TIMEOUT, WALL_CAP, WorkerPool, get_pool, limits,
                                            shutdown_pool)

__all__ = ["DEADLINE", "STARTUP_TIMEOUT", "WALL_CAP", "WorkerPool", "ascore_batch", "get_pool", "limits", "prewarm",
           "score_batch", "score_one", "shutdown_pool"]
