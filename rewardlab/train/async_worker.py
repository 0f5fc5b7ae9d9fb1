"""The generation worker of ``--async-steps``: an HF or vLLM engine in its own process, on its own copy of the policy.

    worker = GenerationWorker(policy, tok, version=0, batch_size=64, threads=1)   # engine="vllm": a VLLMEngine
    rid = worker.submit(prompts, n, sampling)        # queued; the worker generates while the trainer trains
    worker.push(policy, version=1)                   # after an optimizer step: a snapshot of the trained weights
    res = worker.result()                            # Result(rid, version, completions, gen_s, idle_s)
    worker.close()

Streaming: the engine sends each chunk of a request's completions (``batch_size`` rows) as soon as it
is decoded, while it decodes the next; a reader thread in the trainer receives them and hands each
chunk to ``on_part(rid, context, completions)`` (the pipeline grades it there, in the reward pool, while the
trainer updates), then assembles the request's :class:`Result` for :meth:`GenerationWorker.result`.

Multi-turn rollouts (``--tools python``, environment episodes, environments that drive the policy through a loopback
endpoint the worker serves): ``Spec.multiturn`` wraps the worker's engine as the trainer wraps its own, a request
carries the rows its episodes open on, and its completions come back as one chunk (no per-chunk callback there).

Why a process and not a thread: the HF engine seeds and restores torch's *global* random generator
around each ``generate`` (``rollout.decode.seeded``); in a thread that would race the trainer's own
draws (dropout) and the RNG state a checkpoint saves. A process has its own generator, its own
copy of the weights and no GIL shared with the update.

Versioned weights, never torn: :meth:`GenerationWorker.push` clones the trainable parameters
(the only ones an update changes) into shared memory at once, so later in-place optimizer steps
cannot reach the message, and the worker reads its one queue in order, so a weight message is
applied only between two generation requests, never during one. Every result carries the version
its completions were sampled with. The worker answers in submission order.

``engine="vllm"``: the worker builds a :class:`~rewardlab.rollout.vllm.VLLMEngine` over its policy copy
(in-process ``vllm.LLM``, ``engine_kwargs`` as the trainer's ``build_engine`` passes them), applies each
weights message to the copy and then ``engine.load_weights(copy)`` before the next request (skipped when
no message came: the engine compares version counters), so vLLM samples the pushed version. vLLM has no
per-chunk callback: a request's completions come back as one :class:`Part`, then its :class:`Result`.
Where the trainer's weights are on a GPU, the snapshot stays there (a device-side clone, no copy to the
host on the trainer's side): ``torch.multiprocessing`` sends CUDA tensors as CUDA IPC handles, the worker's
policy copy lives on that device, and the trainer keeps each snapshot alive until an answer shows the
worker has applied it (the CUDA IPC rule: the sender keeps the memory while the receiver may read it). On
CPU the snapshot is shared memory, as for the HF engine. Only a GPU exercises the CUDA IPC path.
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

from rewardlab import forkserver
from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Collectives, Completion, SamplingParams
from rewardlab.rollout.engines import ENGINES, LIVE_ENGINE
from rewardlab.train.lora import full_state_dict_for_engine

START_TIMEOUT = 300.0
"""Seconds the first result may take (the worker imports torch and transformers and receives the model;
with vLLM it also starts the engine, 15-60 s on CPU)."""
GENERATION_PRELOAD = ("rewardlab.train.async_worker",)
"""What the fork server imports for a generation worker (torch, transformers, the engines); the model's own
class module is added when a worker starts. A trainer adds these before its reward pool starts the server
(:mod:`rewardlab.forkserver`)."""


@dataclass(frozen=True)
class Spec:
    """How the worker process builds its engine."""

    engine: str
    """A name of ``rollout.ENGINES``."""
    batch_size: int
    """HF: rows per decoded chunk (``--rollout-batch-size``)."""
    threads: int
    """torch threads in the worker."""
    device: str
    """Where the worker's policy copy lives: ``"cpu"`` (HF, and vLLM on CPU) or the trainer's CUDA device (vLLM)."""
    engine_kwargs: dict[str, Any]
    """vLLM: :class:`~rewardlab.rollout.vllm.VLLMEngine` keyword arguments (memory share, seed, ...)."""
    multiturn: Any = None
    """Multi-turn rollouts (the Python tool, environment episodes): ``wrap(model, tokenizer, engine, engine_name)``
    wraps the worker's engine as the trainer wraps its own (``rewardlab.train.build.Multiturn``); None: single-turn."""


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


def _build(spec: Spec, model: Any, tokenizer: Any) -> Any:
    """The worker's engine over its policy copy ``model`` (an engine that samples the live model decodes in
    chunks of ``batch_size`` rows; one that holds a copy gets ``engine_kwargs``)."""
    row = ENGINES[spec.engine]
    if row.live_weights:
        engine = row.build(model, tokenizer, batch_size=spec.batch_size)
    else:  # one process, no group: the local collectives, but the trainer's merged state dict under LoRA
        collectives = Collectives(full_state_dict=full_state_dict_for_engine(model))
        engine = row.build(model, tokenizer, collectives=collectives, **spec.engine_kwargs)
    return engine


def _generate(spec: Spec, engine: Any, model: Any, request: tuple, send: Callable[[list[Completion]], None]) -> None:
    """One request ``(prompts, n, sampling, rows)``: an engine that holds a weight copy (vLLM) first takes the
    weights applied since its last request (a no-op when none came); a streaming engine (HF, single-turn) sends
    each chunk to ``send`` as it is decoded, another sends all its completions as one chunk. ``rows``: the
    prompts' rows, for an engine that opens each prompt's environment episodes on its row (else None)."""
    prompts, n, sampling, rows = request
    row = ENGINES[spec.engine]
    if not row.live_weights:
        engine.load_weights(model)
    if row.streams_chunks and spec.multiturn is None:
        engine.generate(prompts, n, sampling, on_chunk=send)
        return
    send(engine.generate(prompts, n, sampling) if rows is None else engine.generate(prompts, n, sampling, rows=rows))


def _serve(tokenizer: Any, version: int, spec: Spec, requests: Any, results: Any, stop: Any) -> None:
    """The worker process: its policy copy (the queue's first message), then weight messages and generation
    requests, strictly in queue order, until ``stop`` is set (checked between messages and between chunks,
    so it never exits halfway through a message)."""
    torch.set_num_threads(spec.threads)
    _, model = requests.get()  # not a Process argument: the forkserver passes those with at most ~250 fds
    model = model.to(spec.device)  # vLLM on a GPU: the copy sits by the snapshots (device-to-device loads)
    owners: list[Any] = []  # each closes its own resources: the wrapper's (a loopback endpoint), the engine's (vLLM's)
    try:
        owners.append(_build(spec, model, tokenizer))
        if spec.multiturn is not None:
            owners.insert(0, spec.multiturn.wrap(model, tokenizer, owners[0], spec.engine))
    except Exception as e:  # e.g. vLLM missing or out of memory: one line in the trainer, not a dead process
        results.put(Result(-1, version, None, 0.0, 0.0, f"starting the {spec.engine} engine: {type(e).__name__}: {e}"))
        _close(owners)
        return
    try:
        _loop(spec, owners[0], model, version, requests, results, stop)
    finally:
        _close(owners)


def _close(owners: list[Any]) -> None:
    """Close each of ``owners`` that has resources of its own, the next one even when one fails."""
    if not owners:
        return
    try:
        if callable(getattr(owners[0], "close", None)):
            owners[0].close()
    finally:
        _close(owners[1:])


def _loop(spec: Spec, engine: Any, model: Any, version: int, requests: Any, results: Any, stop: Any) -> None:
    """:func:`_serve`'s message loop."""
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
            del msg, params  # a CUDA snapshot's IPC handles are released here, not at the next message
            if unexpected:
                results.put(Result(-1, version, None, 0.0, 0.0, f"unknown weights {unexpected[:3]}"))
                return
            continue
        _, rid, *request = msg
        t1 = time.perf_counter()

        def send(done: list[Completion], rid: int = rid) -> None:
            if stop.is_set():
                raise _Stopped
            results.put(Part(rid, done))

        try:  # each chunk goes out as soon as it is decoded; the Result closes the request
            _generate(spec, engine, model, tuple(request), send)
            error = None
        except _Stopped:
            return
        except Exception as e:  # reported to the trainer, which raises it there
            error = f"{type(e).__name__}: {e}"
        results.put(Result(rid, version, None, time.perf_counter() - t1, idle, error))
        idle = 0.0


def trainable_snapshot(model: torch.nn.Module, *, on_device: bool = False) -> dict[str, torch.Tensor]:
    """A copy of the parameters an update can change (``requires_grad``), by state-dict name: on the CPU, or
    with ``on_device`` where each parameter lives (a GPU clone, sent by CUDA IPC; on CPU the same CPU copy)."""
    trainable = [(name, p.detach()) for name, p in model.named_parameters() if p.requires_grad]
    if on_device:
        return {name: p.clone() for name, p in trainable}
    return {name: p.to("cpu", copy=True) for name, p in trainable}


class GenerationWorker:
    """An :class:`~rewardlab.rollout.hf.HFEngine` (``engine="hf"``) or a
    :class:`~rewardlab.rollout.vllm.VLLMEngine` (``engine="vllm"``, built with ``engine_kwargs``) in its own
    process over a copy of ``model``.

    The process forks from the process's fork server (:mod:`rewardlab.forkserver`), a clean process started
    on first use that has imported :data:`GENERATION_PRELOAD` once: a worker starts in well under a second
    after the first (a spawned one pays about 4 s of imports each time), and never inherits the trainer's
    threads. A server already started without them (by the reward pool) costs those 4 s at every start."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, version: int, batch_size: int, threads: int,
                 on_part: OnPart | None = None, engine: str = LIVE_ENGINE, engine_kwargs: dict[str, Any] | None = None,
                 multiturn: Any = None):
        if engine not in ENGINES:
            raise RewardlabError(f"the generation worker runs {' or '.join(ENGINES)}, not {engine!r}")
        trainer_device = next(model.parameters()).device
        # vLLM on a GPU: snapshots and the worker's copy stay on the trainer's device (CUDA IPC); else CPU
        self._on_device = ENGINES[engine].copy_on_device and trainer_device.type == "cuda"
        spec = Spec(engine, batch_size, threads, str(trainer_device) if self._on_device else "cpu",
                    dict(engine_kwargs or {}), multiturn)
        ctx = mp.get_context("forkserver")  # a clean process (no trainer threads); later workers fork from it
        forkserver.preload(*GENERATION_PRELOAD, type(model).__module__)  # paid once per trainer process
        self._requests, self._results, self._stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        policy = copy.deepcopy(model).to("cpu").eval().requires_grad_(False)  # the worker's own copy (shared memory)
        self._proc = ctx.Process(target=_serve, daemon=True, name="rewardlab-generation",
                                 args=(tokenizer, version, spec, self._requests, self._results, self._stop))
        self._proc.start()
        self._requests.put(("model", policy))  # one shared-memory handle per tensor, through the queue
        self._next = 0
        self._answered = 0
        self.push_s = 0.0
        """Seconds spent snapshotting and sending weights (the trainer's side of the sync)."""
        self._on_part = on_part
        self._held: dict[int, dict[str, torch.Tensor]] = {}  # version -> CUDA snapshot the worker may still read
        self._held_lock = threading.Lock()
        self._contexts: dict[int, Any] = {}  # rid -> submit's context, until its Result
        self._done: queue.Queue[Result] = queue.Queue()  # assembled answers, in order
        self._closing = threading.Event()
        self._reading = False  # the reader holds a message (result() waits for it before calling the worker dead)
        self._reader = threading.Thread(target=self._read, daemon=True, name="rewardlab-generation-reader")
        self._reader.start()

    def submit(self, prompts: list[str], n: int, sampling: SamplingParams, context: Any = None,
               rows: list[Any] | None = None) -> int:
        """Queue ``n`` completions of each prompt; returns the request id (answers come in this order).
        ``context`` is handed to ``on_part`` with each of the request's chunks; ``rows`` (environment episodes:
        each prompt's row, on which the worker's engine opens its episodes) go to the engine."""
        rid = self._next
        self._next += 1
        self._contexts[rid] = context  # before the request exists: its first chunk may come at once
        self._requests.put(("generate", rid, list(prompts), n, sampling, None if rows is None else list(rows)))
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
        with self._held_lock:  # an answer sampled with version v: every snapshot up to v is applied and released
            for v in [v for v in self._held if v <= msg.version]:
                del self._held[v]
        done = parts.pop(msg.rid, [])
        self._contexts.pop(msg.rid, None)
        error = msg.error or failed.pop(msg.rid, None)
        self._done.put(Result(msg.rid, msg.version, None if error else done, msg.gen_s, msg.idle_s, error))

    def push(self, model: torch.nn.Module, version: int) -> None:
        """Send the trained weights as ``version``; requests queued after this one sample with them."""
        t0 = time.perf_counter()
        snapshot = trainable_snapshot(model, on_device=self._on_device)
        if any(t.is_cuda for t in snapshot.values()):  # CUDA IPC: alive here until the worker has applied it
            with self._held_lock:
                self._held[version] = snapshot
        self._requests.put(("weights", version, snapshot))
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


__all__ = [ "GenerationWorker", "OnPart", "Part", "Result", "Spec", "trainable_snapshot"]
