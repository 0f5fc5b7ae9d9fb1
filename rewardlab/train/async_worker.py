"""The generation worker of ``--async-steps``: an HF engine in its own process, on its own copy of the policy.

    worker = GenerationWorker(policy, tok, version=0, batch_size=64, threads=1)
    rid = worker.submit(prompts, n, sampling)        # queued; the worker generates while the trainer trains
    worker.push(policy, version=1)                   # after an optimizer step: a snapshot of the trained weights
    res = worker.result()                            # Result(rid, version, completions, gen_s, idle_s)
    worker.close()

Streaming: the engine sends each chunk of a request's completions (``batch_size`` rows) as soon as it
is decoded, while it decodes the next; a reader thread in the trainer receives them and hands each
chunk to ``on_part(rid, context, completions)`` (the pipeline grades it there, in the reward pool, while the
trainer updates), then assembles the request's :class:`Result` for :meth:`GenerationWorker.result`.

Why a process and not a thread: the HF engine seeds and restores torch's *global* random generator
around each ``generate`` (``rollout.decode.seeded``); in a thread that would race the trainer's own
draws (dropout) and the RNG state a checkpoint saves. A process has its own generator, its own
copy of the weights and no GIL shared with the update.

Versioned weights, never torn: :meth:`GenerationWorker.push` clones the trainable parameters
(the only ones an update changes) into shared memory at once, so later in-place optimizer steps
cannot reach the message, and the worker reads its one queue in order, so a weight message is
applied only between two generation requests, never during one. Every result carries the version
its completions were sampled with. The worker answers in submission order.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams
from rewardlab.rollout.hf import HFEngine

START_TIMEOUT = 300.0
"""Seconds the first result may take (the worker imports torch and transformers and receives the model)."""


@dataclass
class Result:
    """One generation request's answer."""

    rid: int
    version: int
    """The policy version (training steps done) whose weights sampled every completion."""
    completions: list[Completion] | None
    gen_s: float
    """Seconds the engine spent generating this request."""
    idle_s: float
    """Seconds the worker waited for work before this request (queue empty)."""
    error: str | None = None


@dataclass
class Part:
    """One decoded chunk of request ``rid``'s completions, in order (the worker streams them)."""

    rid: int
    completions: list[Completion]


OnPart = Callable[[int, Any, list[Completion]], None]
"""``on_part(rid, context, completions)``: called on the reader thread for each streamed chunk of request
``rid``, in order (``context``: what :meth:`GenerationWorker.submit` was given)."""


class _Stopped(Exception):
    """Raised between two chunks when the trainer closes the worker (the request in flight is dropped)."""


def _serve(model: Any, tokenizer: Any, version: int, batch_size: int, threads: int, requests: Any,
           results: Any, stop: Any) -> None:
    """The worker process: weight messages and generation requests, strictly in queue order, until ``stop``
    is set (checked between messages and between chunks, so it never exits halfway through a message)."""
    torch.set_num_threads(threads)
    engine = HFEngine(model, tokenizer, batch_size=batch_size)
    idle = 0.0
    while True:
        t0 = time.perf_counter()
        msg = requests.get()
        idle += time.perf_counter() - t0
        if msg[0] == "stop" or stop.is_set():
            return
        if msg[0] == "weights":  # between requests only: this loop is the only reader of the weights
            _, version, params = msg
            unexpected = model.load_state_dict(params, strict=False).unexpected_keys
            if unexpected:
                results.put(Result(-1, version, None, 0.0, 0.0, f"unknown weights {unexpected[:3]}"))
                return
            continue
        _, rid, prompts, n, sampling = msg
        t1 = time.perf_counter()

        def send(done: list[Completion], rid: int = rid) -> None:
            if stop.is_set():
                raise _Stopped
            results.put(Part(rid, done))

        try:  # each chunk goes out as soon as it is decoded; the Result closes the request
            engine.generate(prompts, n, sampling, on_chunk=send)
            error = None
        except _Stopped:
            return
        except Exception as e:  # reported to the trainer, which raises it there
            error = f"{type(e).__name__}: {e}"
        results.put(Result(rid, version, None, time.perf_counter() - t1, idle, error))
        idle = 0.0


def trainable_snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the parameters an update can change (``requires_grad``), by state-dict name."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters() if p.requires_grad}


class GenerationWorker:
    """An :class:`~rewardlab.rollout.hf.HFEngine` in its own process over a copy of ``model``.

    The process forks from multiprocessing's forkserver, a clean process started on first use that has
    imported this module and the model's class once: a worker starts in well under a second after the
    first (a spawned one pays about 4 s of imports each time), and never inherits the trainer's threads."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, version: int, batch_size: int, threads: int,
                 on_part: OnPart | None = None):
        ctx = mp.get_context("forkserver")  # a clean process (no trainer threads); later workers fork from it
        preload = ["rewardlab.train.async_worker"] + [m for m in [type(model).__module__] if m != "__main__"]
        ctx.set_forkserver_preload(preload)  # the imports are paid once per trainer process
        self._requests, self._results, self._stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        policy = copy.deepcopy(model).to("cpu").eval().requires_grad_(False)  # the worker's own copy
        self._proc = ctx.Process(target=_serve, daemon=True, name="rewardlab-generation",
                                 args=(policy, tokenizer, version, batch_size, threads, self._requests, self._results,
                                       self._stop))
        self._proc.start()
        self._next = 0
        self._answered = 0
        self.push_s = 0.0
        """Seconds spent snapshotting and sending weights (the trainer's side of the sync)."""
        self._on_part = on_part
        self._contexts: dict[int, Any] = {}  # rid -> submit's context, until its Result
        self._done: queue.Queue[Result] = queue.Queue()  # assembled answers, in order
        self._closing = threading.Event()
        self._reading = False  # the reader holds a message (result() waits for it before calling the worker dead)
        self._reader = threading.Thread(target=self._read, daemon=True, name="rewardlab-generation-reader")
        self._reader.start()

    def submit(self, prompts: list[str], n: int, sampling: SamplingParams, context: Any = None) -> int:
        """Queue ``n`` completions of each prompt; returns the request id (answers come in this order).
        ``context`` is handed to ``on_part`` with each of the request's chunks."""
        rid = self._next
        self._next += 1
        self._contexts[rid] = context  # before the request exists: its first chunk may come at once
        self._requests.put(("generate", rid, list(prompts), n, sampling))
        return rid

    def _read(self) -> None:
        """The reader thread: chunks to ``on_part`` as they come, then each request's assembled Result."""
        parts: dict[int, list[Completion]] = {}
        failed: dict[int, str] = {}
        while not self._closing.is_set():
            try:
                msg = self._results.get(timeout=0.5)
            except queue.Empty:
                continue
            except (EOFError, OSError):  # the worker's end closed: result() reports the dead process
                return
            self._reading = True
            self._take(msg, parts, failed)
            self._reading = False

    def _take(self, msg: Part | Result, parts: dict[int, list[Completion]], failed: dict[int, str]) -> None:
        """One message from the worker: a chunk (graded now, kept for its request) or a request's end."""
        if isinstance(msg, Part):
            parts.setdefault(msg.rid, []).extend(msg.completions)
            if self._on_part is not None and msg.rid not in failed:
                try:
                    self._on_part(msg.rid, self._contexts.get(msg.rid), msg.completions)
                except Exception as e:  # the step that takes this request raises it
                    failed[msg.rid] = f"grading its completions: {type(e).__name__}: {e}"
            return
        done = parts.pop(msg.rid, [])
        self._contexts.pop(msg.rid, None)
        error = msg.error or failed.pop(msg.rid, None)
        self._done.put(Result(msg.rid, msg.version, None if error else done, msg.gen_s, msg.idle_s, error))

    def push(self, model: torch.nn.Module, version: int) -> None:
        """Send the trained weights as ``version``; requests queued after this one sample with them."""
        t0 = time.perf_counter()
        self._requests.put(("weights", version, trainable_snapshot(model)))
        self.push_s += time.perf_counter() - t0

    def result(self) -> Result:
        """The next answer, in submission order; a dead or failing worker is a one-line error, never a hang."""
        waited, limit = 0.0, START_TIMEOUT if self._answered == 0 else float("inf")
        while True:
            try:
                res = self._done.get(timeout=1.0)
                break
            except queue.Empty:
                waited += 1.0
                if not self._reader.is_alive():
                    raise RewardlabError("the generation worker's reader thread stopped") from None
                if not self._proc.is_alive() and not self._reading and self._results.empty():  # nothing left to read
                    raise RewardlabError(f"the generation worker died (exit code {self._proc.exitcode})") from None
                if waited > limit:
                    raise RewardlabError(f"the generation worker gave no answer in {limit:g} s") from None
        self._answered += 1
        if res.error is not None:
            raise RewardlabError(f"the generation worker failed: {res.error}")
        return res

    def close(self) -> None:
        """Stop the worker at its next message or chunk (requests in flight and weights not applied are dropped);
        killed if it has not stopped 10 s later. Never mid-message: a kill while it receives shared tensors
        would break the trainer's side of the transfer."""
        if self._proc.is_alive():
            self._stop.set()
            self._requests.put(("stop",))  # wakes a worker waiting for work
            self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)
        self._closing.set()
        self._reader.join(5)
        self._requests.cancel_join_thread()
        self._results.cancel_join_thread()


__all__ = ["GenerationWorker", "OnPart", "Part", "Result", "trainable_snapshot"]
