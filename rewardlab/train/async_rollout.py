"""``--async-steps k``: the rollouts of steps t+1..t+k are generated while step t trains.

    rewardlab train --async-steps 1 --correction decoupled_token_is     # one step overlapped, IS-corrected

The loop asks :func:`start` for its rollout stage once: with k = 0 it calls ``loop.rollout_and_score``
as the loop would (the synchronous loop, unchanged); with k >= 1 an :class:`AsyncRollout`, which runs the same
stage with its generation replaced by :meth:`AsyncRollout.generate`. That keeps k + 1 requests queued
on a :class:`~rewardlab.train.async_worker.GenerationWorker` (the ``--rollout`` engine, HF or vLLM, in its
own process, on its own copy of the policy) and, at the start of step t, pushes the weights after step t - 1 (version
t - 1), queues step t + k's prompts, and takes step t's completions. Step t's request was queued
after version ``t - 1 - k`` (or the start's) was pushed, so its staleness, ``(t - 1) - version``, is
at most k. Requests answer in order; advantages and the update run in the trainer as before, on the
engine's completions and log-probs (``Sample.rollout_logprobs``: the behaviour policy, which
``--correction`` weighs against the trainer's).

Streaming rewards: the worker sends each chunk of completions (``--rollout-batch-size`` rows) as soon
as it is decoded, and the worker's reader thread grades it at once with the loop's own ``grade``
(the reward pool, the same calls in the same order as the synchronous loop), while the engine
decodes the next chunk and the trainer runs its update. A step takes its batch as soon as its last
chunk is graded (``async/grade_s``: the seconds its grading took on the reader thread).

A step whose completions are more than ``--max-staleness`` versions old drops them (counted in
``async/dropped``) and asks again for the same prompts and seed: the new request samples with the
newest weights. Each sample's version is ``info["policy_version"]`` (in ``rollouts.jsonl``). The
step's ``async/*`` figures travel in ``batch.timings`` (they reach the metrics row like its times):
``async/staleness_mean|max``, ``async/dropped``, ``async/trainer_idle_s`` (the step waited for its
completions), ``async/engine_idle_s`` (the worker waited for work before them), ``async/overlap``
(the share of their generation time the trainer did not wait for), ``async/push_s``, ``async/grade_s``.

Prompts come from a copy of the prompt stream that runs k steps ahead; the run's own stream advances
only when a step takes its completions, so a checkpoint records the position of the first prompts in
flight. Resuming discards the in-flight rollouts and generates them again from the same prompts and
seeds, with the checkpoint's weights (README, "Asynchronous training").
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from rewardlab.algos import Algo
from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import RewardResult
from rewardlab.rollout import ENGINES, Completion, SamplingParams
from rewardlab.train.async_worker import GenerationWorker, Result
from rewardlab.train.config import ASYNC_CORRECTION, TrainConfig
from rewardlab.train.samples import Batch, rollout_seed
from rewardlab.train.state import run_sampling

if TYPE_CHECKING:
    from rewardlab.train.state import Run

Prompts = list[tuple[int, int]]
"""A step's prompts as the prompt stream gives them: ``(row index, group id)``."""
RolloutStage = Callable[..., Batch]
"""``loop.rollout_and_score(run, step, gen=None)``: one step's generation rounds, scored."""
Grade = Callable[["Run", Prompts, list[Completion]], list[RewardResult]]
"""``loop.grade(run, mine, completions)``: the reward's results for completions of the prompts ``mine``."""


def why_not(cfg: TrainConfig, algo: Algo, world_size: int = 1) -> str | None:
    """Why ``--async-steps k >= 1`` cannot run ``algo`` with ``cfg``, or None when it can."""
    if algo.estimator.needs_greedy_baseline:
        return "remax's baseline is a greedy rollout of the current policy"
    if algo.dynamic_sampling:
        return "dynamic sampling's extra generation rounds depend on the step's rewards (not pipelined yet)"
    if algo.group_size_policy != "fixed":
        return "--group-size-policy variance sizes groups from the rewards of the steps before"
    if cfg.feedback != "none":
        return "--feedback rollouts are not pipelined yet"
    if world_size > 1:
        return "the generation worker serves one process (not torchrun)"
    return None


def worker_engine_kwargs(cfg: TrainConfig) -> dict[str, object]:
    """The generation worker's engine settings: its ``rollout.ENGINES`` row's ``worker_keywords`` (vLLM: the
    trainer's memory share and seed, sleep mode off: the worker's engine generates while the trainer trains)."""
    return ENGINES[cfg.rollout].worker_keywords(cfg)


def refuse(cfg: TrainConfig, algo: Algo, world_size: int) -> None:
    """``--async-steps`` with what it cannot run: one line, at start-up (before any model loads)."""
    why = None if cfg.async_steps == 0 else why_not(cfg, algo, world_size)
    if why is not None:
        raise RewardlabError(f"--async-steps {cfg.async_steps} cannot run here: {why}; use --async-steps 0")


def start(run: Run, rollout_and_score: RolloutStage, grade: Grade) -> Synchronous | AsyncRollout:
    """The loop's rollout stage, a context manager (leaving it stops the worker): ``rollout_and_score``
    itself (k = 0), or the async pipeline around it, grading with ``grade`` as completions stream in."""
    if run.cfg.async_steps == 0:
        return Synchronous(rollout_and_score)
    return AsyncRollout(run, rollout_and_score, grade)


class Synchronous:
    """k = 0: the loop's own stage, called exactly as the loop would call it."""

    def __init__(self, stage: RolloutStage):
        self._stage = stage

    def __call__(self, run: Run, step: int) -> Batch:
        return self._stage(run, step)

    def __enter__(self) -> Synchronous:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class AsyncRollout:
    """The rollout stage with generation k steps ahead on a :class:`GenerationWorker`."""

    def __init__(self, run: Run, rollout_and_score: RolloutStage, grade: Grade):
        cfg = run.cfg
        self.k = cfg.async_steps
        self.bound = self.k if cfg.max_staleness is None else cfg.max_staleness
        self._stage, self._grade, self._run = rollout_and_score, grade, run
        self.worker = GenerationWorker(run.model, run.tok, version=run.start_step, batch_size=cfg.rollout_batch_size,
                                       threads=torch.get_num_threads(), on_part=self._grade_part,
                                       engine=cfg.rollout, engine_kwargs=worker_engine_kwargs(cfg),
                                       multiturn=run.trainer.multiturn)
        self._ahead = copy.deepcopy(run.stream)  # takes the prompts of the steps in flight
        self._requests: dict[int, tuple[int, Prompts, list[str], SamplingParams, list | None]] = {}  # step -> request
        self._answers: dict[int, Result] = {}  # rid -> answer not taken yet
        self._graded: dict[int, tuple[list[RewardResult], list[float]]] = {}  # rid -> results, grading seconds
        self._pushed = self._queued = run.start_step
        self._step: dict[str, float] = {}
        corr = run.algo.correction if run.algo.correction not in (None, "disabled") else None
        run.say(f"  async rollout               {self.k} step(s) ahead in a worker process, max staleness "
                f"{self.bound}, " + (f"correction {corr}" + (" (the async default)" if corr == ASYNC_CORRECTION
                                                            and run.cfg.correction is None else "")
                                     if corr else "no correction: stale samples are weighted as on-policy"))

    def __enter__(self) -> AsyncRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the generation worker (in-flight rollouts are discarded)."""
        self.worker.close()

    def __call__(self, run: Run, step: int) -> Batch:
        """Step ``step``'s batch (the synchronous stage, generating through :meth:`generate`), stamped."""
        self._step = {"dropped": 0.0, "idle": 0.0, "engine_idle": 0.0, "gen": 0.0, "grade": 0.0,
                      "version": float(step - 1)}
        push0 = self.worker.push_s
        batch = self._stage(run, step, self.generate)
        version = int(self._step["version"])  # one request per step: every sample has its version
        for s in batch.generated:
            s.info = {**s.info, "policy_version": version}
        gen, staleness = self._step["gen"], float(step - 1 - version)
        batch.timings.update({
            "async/staleness_mean": staleness, "async/staleness_max": staleness,
            "async/dropped": self._step["dropped"], "async/trainer_idle_s": self._step["idle"],
            "async/grade_s": self._step["grade"],
            "async/engine_idle_s": self._step["engine_idle"], "async/push_s": self.worker.push_s - push0,
            "async/overlap": min(1.0, max(0.0, 1.0 - self._step["idle"] / gen)) if gen > 0 else 0.0,
        })
        return batch

    def generate(self, run: Run, step: int,
                 batch: Batch) -> tuple[Prompts, list[str], list[Completion], list[RewardResult]]:
        """``loop.generate`` for the pipeline: push version step - 1, queue up to step + k, take step's answer
        (its completions graded already, as they streamed in)."""
        cfg = run.cfg
        if step - 1 > self._pushed:  # the weights after the last update, before anything queued from now on
            self.worker.push(run.model, step - 1)
            self._pushed = step - 1
        while self._queued < min(step + self.k, cfg.steps):  # never a step past the run's last
            self._queue(run, self._queued + 1)
        t0 = time.perf_counter()
        rid, mine, prompt_texts, sampling, rows = self._requests.pop(step)
        res = self._answer(rid)
        while step - 1 - res.version > self.bound:  # too stale: drop, ask again (queued after the newest weights)
            self._step["dropped"] += len(res.completions or [])
            self._graded.pop(res.rid, None)
            res = self._answer(self.worker.submit(prompt_texts, cfg.group_size, sampling, context=mine, rows=rows))
        graded, seconds = self._graded.pop(res.rid, ([], []))
        self._step["idle"] += time.perf_counter() - t0
        self._step.update(version=float(res.version), engine_idle=self._step["engine_idle"] + res.idle_s,
                          gen=self._step["gen"] + res.gen_s)
        if run.stream.take(cfg.prompts_per_step) != mine:  # the run's stream: consumed prompts (checkpointed)
            raise RewardlabError("async rollout: the prompt stream and the prompts in flight disagree")
        batch.timings["time/generate"] += res.gen_s
        self._step["grade"] += sum(seconds)
        return mine, prompt_texts, list(res.completions or []), graded

    def _queue(self, run: Run, step: int) -> None:
        """Queue step ``step``'s prompts, seeded as the synchronous loop seeds them."""
        cfg = run.cfg
        mine = self._ahead.take(cfg.prompts_per_step)
        prompt_texts = [run.trainer.render(run.rows[i]) for i, _ in mine]
        sampling = run_sampling(cfg, seed=rollout_seed(cfg.seed, step))
        rows = [run.rows[i] for i, _ in mine] if getattr(run.trainer.multiturn, "takes_rows", False) else None
        rid = self.worker.submit(prompt_texts, cfg.group_size, sampling, context=mine, rows=rows)
        self._requests[step] = (rid, mine, prompt_texts, sampling, rows)
        self._queued = step

    def _grade_part(self, rid: int, mine: Prompts, completions: list[Completion]) -> None:
        """On the worker's reader thread: grade one streamed chunk of request ``rid`` (``loop.grade``), in order.
        The chunk's results are in the request's entry before its Result is answered (one thread does both)."""
        t0 = time.perf_counter()
        results = self._grade(self._run, mine, completions)
        graded, seconds = self._graded.setdefault(rid, ([], []))
        graded.extend(results)
        seconds.append(time.perf_counter() - t0)

    def _answer(self, rid: int) -> Result:
        """Request ``rid``'s answer; answers to later requests that come first are kept for their steps."""
        while rid not in self._answers:
            res = self.worker.result()
            self._answers[res.rid] = res
        return self._answers.pop(rid)


__all__ = ["AsyncRollout", "Synchronous", "refuse", "start", "why_not", "worker_engine_kwargs"]
