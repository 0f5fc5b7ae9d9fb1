"""The RL loop: GRPO, Dr. GRPO, DAPO and GSPO for Hugging Face causal LMs, in one readable file.

    rewardlab train --algo gspo                       # embedded SmolLM2-135M-Instruct on "arith", CPU
    rewardlab train --algo dapo --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k --steps 200
    torchrun --nproc_per_node 8 -m rewardlab train --algo grpo --model ... --task math

Each step reads top to bottom:

    rollout     sample G completions for each of P prompts (HF generate, or vLLM)
    reward      score every completion in the worker pool (task reward + optional format component),
                plus DAPO's overlong shaping; DAPO dynamic sampling drops zero-variance groups and
                generates again until P groups survive, at most --max-gen-batches rounds (then it
                trains on the groups it kept, or skips the step if it kept none)
    advantage   group z-score (or r - mean) per prompt id
    update      old log-probs recomputed by the training model when the step is off-policy, then
                mini-batches x epochs optimizer steps, each accumulated over micro-batches whose
                loss uses the whole optimizer step's token / sequence counts (all ranks)
    log         metrics.jsonl (names from docs/algorithms.md), rollouts.jsonl, progress bar
    checkpoint  atomic save every N steps; rerunning the same command resumes

What it simplifies on purpose: one process drives generation and training (no actor/rollout
split, no Ray); the HF engine samples from the live training model, so there is no weight copy.
The algorithm is plain data from ``rewardlab.algos`` presets; the few places where algorithms
differ are marked branches.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from rewardlab.config import (Derived, TrainConfig, check_model, derive, describe_diff, resolve_algo, resolve_device,
                              save_yaml, settings_diff, to_dict)
from rewardlab.errors import RewardlabError
from rewardlab.locks import FolderLock


# ----------------------------------------------------------------------------------------------
# small helpers (threads, seeding, data order, batching)
# ----------------------------------------------------------------------------------------------


def default_threads() -> int | None:
    """1 thread on machines with <= 4 cores (extra OpenMP threads there fight other processes and
    run 5-10x slower, see docs/platform.md); otherwise None = leave torch's default."""
    n = os.cpu_count() or 1
    return 1 if n <= 4 else None


def set_threads(threads: int | None) -> int | None:
    """Fix the CPU thread count; call before torch does any work (and before a vLLM engine starts)."""
    n = threads if threads is not None else default_threads()
    if n is None:
        return None
    if "torch" not in sys.modules:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(n)
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # only settable once per process, before any inter-op work
        pass
    return n


def seed_everything(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


@dataclass
class PromptStream:
    """An endless, seeded, epoch-shuffled stream of task rows whose position is checkpointable."""

    num_rows: int
    seed: int
    epoch: int = 0
    index: int = 0
    drawn: int = 0
    """Prompts drawn so far; also the source of unique group (prompt) ids."""
    _order: list[int] = field(default_factory=list, repr=False)

    def _perm(self) -> list[int]:
        import numpy as np

        return np.random.RandomState((self.seed * 1_000_003 + self.epoch) % (2**32)).permutation(self.num_rows).tolist()

    def take(self, k: int) -> list[tuple[int, int]]:
        """The next ``k`` prompts as ``(row index, group id)``."""
        out = []
        for _ in range(k):
            if not self._order:
                self._order = self._perm()
            if self.index >= self.num_rows:
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._perm()
            out.append((self._order[self.index], self.drawn))
            self.index += 1
            self.drawn += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "drawn": self.drawn}

    def load(self, state: dict[str, int]) -> None:
        self.epoch, self.index, self.drawn = state["epoch"], state["index"], state["drawn"]
        self._order = self._perm()


@dataclass
class Sample:
    """One scored completion, as the update stage sees it."""

    group: int
    row: Any
    prompt_text: str
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    score: float  # total reward incl. shaping
    task_score: float | None  # the task reward alone (dynamic sampling's metric)
    components: dict[str, float | None]
    info: dict[str, Any]
    overlong: float = 0.0
    advantage: float = 0.0
    gen_round: int = 0
    rollout_logprobs: list[float] | None = None
    """The rollout engine's log-prob of each token in ``token_ids`` (vLLM reports them; HF does
    not). Logged against the trainer's own log-probs (``rollout/*`` metrics), never used as old_logp."""


def freeze_to_top_layers(model: Any, n: int) -> int:
    """Train only the top ``n`` decoder blocks and the final norm (n = 0 trains everything).

    Returns the number of trainable parameters. Embeddings and (tied) LM head stay frozen, which
    keeps a CPU step cheap: the backward pass stops at the lowest trained block.
    """
    if n <= 0:
        for p in model.parameters():
            p.requires_grad_(True)
        return sum(p.numel() for p in model.parameters())
    blocks = decoder_blocks(model)
    if blocks is None:
        raise RewardlabError("--train-top-layers: cannot find the model's decoder blocks; use --train-top-layers 0")
    for p in model.parameters():
        p.requires_grad_(False)
    for block in list(blocks)[-n:]:
        for p in block.parameters():
            p.requires_grad_(True)
    base = getattr(model, "base_model", None) or getattr(model, "model", None)
    norm = getattr(base, "norm", None) or getattr(base, "final_layernorm", None) or getattr(base, "ln_f", None)
    if norm is not None:
        for p in norm.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def decoder_blocks(model: Any) -> Any:
    """The model's stack of transformer blocks (the longest ``nn.ModuleList``), or None."""
    import torch

    blocks = None
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) > 0 and (blocks is None or len(mod) > len(blocks)):
            blocks = mod
    return blocks


def _skip_block() -> Any:
    """A module that stands in for a frozen block whose output is replayed: returns its input."""
    import torch

    class SkippedBlock(torch.nn.Module):
        def forward(self, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
            return hidden_states

    return SkippedBlock()


class FrozenPrefix:
    """Compute the frozen bottom blocks once per step, not once per pass.

    With ``--train-top-layers N`` the hidden states entering the lowest trained block depend only
    on frozen weights, so they are the same for the old-log-prob pass and for every mini-batch and
    epoch of the update. :meth:`capture` records them during the (no-grad) old-log-prob forward;
    :meth:`replay` runs later forwards with the frozen blocks skipped and the recorded states fed
    into the first trained block. On a CPU with 4 of 30 blocks trained this removes most of the
    update's forward cost. Used only in one process with an off-policy step (where passes repeat).
    """

    def __init__(self, blocks: Any, n_top: int):
        self.blocks = blocks
        self.first = len(blocks) - n_top

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[Any]]:
        out: list[Any] = []

        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            out.append((args[0] if args else kwargs["hidden_states"]).detach())

        handle = self.blocks[self.first].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield out
        finally:
            handle.remove()

    @contextlib.contextmanager
    def replay(self, hidden: Any) -> Iterator[None]:
        def hook(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if args:
                return (hidden,) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": hidden}

        saved = [self.blocks._modules[str(i)] for i in range(self.first)]
        handle = self.blocks[self.first].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            skip = _skip_block()
            for i in range(self.first):
                self.blocks._modules[str(i)] = skip
            yield
        finally:
            for i, mod in enumerate(saved):
                self.blocks._modules[str(i)] = mod
            handle.remove()


def pad_batch(samples: list[Sample], pad_id: int, device: Any) -> dict[str, Any]:
    """Left-pad prompts and right-pad responses, so the response occupies the last R positions.

    Returns ``input_ids``/``attention_mask``/``position_ids`` (B, P+R), ``response_ids`` and
    ``response_mask`` (B, R). Position ids count real tokens only, as HF ``generate`` does with
    left padding, so training log-probs match the sampling distribution.
    """
    import torch

    P = max(len(s.prompt_ids) for s in samples)
    R = max(1, max(len(s.token_ids) for s in samples))
    B = len(samples)
    ids = torch.full((B, P + R), pad_id, dtype=torch.long)  # (B, P+R)
    attn = torch.zeros((B, P + R), dtype=torch.long)  # (B, P+R)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.token_ids)
        ids[i, P - p : P] = torch.tensor(s.prompt_ids)
        attn[i, P - p : P] = 1
        if r:
            ids[i, P : P + r] = torch.tensor(s.token_ids)
            attn[i, P : P + r] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P+R)
    return {
        "input_ids": ids.to(device),
        "attention_mask": attn.to(device),
        "position_ids": pos.to(device),
        "response_ids": ids[:, P:].to(device),  # (B, R)
        "response_mask": attn[:, P:].float().to(device),  # (B, R)
        "R": R,
    }


def token_logprobs(model: Any, batch: dict[str, Any], *, with_entropy: bool = False, autocast: Any = None):
    """Log-probs of the response tokens under ``model`` (B, R), and optionally the entropy (B, R).

    Only the last R+1 positions go through the LM head (``logits_to_keep``), which on a 49k-word
    vocabulary is most of the saving over computing logits for the prompt too.
    """
    import torch

    R = batch["R"]
    ctx = autocast if autocast is not None else contextlib.nullcontext()
    with ctx:
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            logits_to_keep=R + 1,
            use_cache=False,
        )
    logits = out.logits[:, :-1, :].float()  # (B, R, V): position t predicts response token t
    lse = torch.logsumexp(logits, dim=-1)  # (B, R)
    lp = torch.gather(logits, -1, batch["response_ids"].unsqueeze(-1)).squeeze(-1) - lse  # (B, R)
    ent = None
    if with_entropy:
        probs = torch.softmax(logits, dim=-1)  # (B, R, V)
        ent = lse - (probs * logits).sum(-1)  # (B, R)
    return lp, ent


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument of ``model.forward`` (``cache`` in transformers 5, else ``past_key_values``)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def shared_prompt_logprobs(model: Any, samples: list[Sample], pad_id: int, device: Any, *,
                           prefix: FrozenPrefix | None = None, autocast: Any = None, grad: bool = False,
                           with_entropy: bool = False) -> tuple[Any, Any, Any]:
    """Log-probs of the response tokens, running each distinct prompt once (not G times).

    The G completions of a group share their prompt, and under causal attention the prompt's keys
    and values do not depend on the completion. So the distinct prompts go through the model once
    (U rows), their KV cache is gathered to the B rows, and only the responses are run on top of
    it. Same numbers as :func:`token_logprobs` on :func:`pad_batch` (up to float rounding), at a
    fraction of the cost when prompts are long and answers short. With ``grad=True`` gradients
    flow through the gathered cache back into the shared prompt pass (each prompt's gradient is
    the sum over its rows, as in the padded forward). Returns ``(logp (B, R), entropy (B, R) or
    None, hidden)``; with ``prefix``, ``hidden`` is the input of the first trained block laid out
    like ``pad_batch`` (B, P+R, H), for :meth:`FrozenPrefix.replay`; else None.
    """
    import torch

    slot: dict[int, int] = {}
    prompts: list[list[int]] = []
    for s in samples:
        if s.group not in slot:
            slot[s.group] = len(prompts)
            prompts.append(s.prompt_ids)
    idx = torch.tensor([slot[s.group] for s in samples], device=device)  # (B,) row -> distinct prompt
    P = max(len(p) for p in prompts)
    R = max(1, max(len(s.token_ids) for s in samples))
    U, B = len(prompts), len(samples)
    pids = torch.full((U, P), pad_id, dtype=torch.long)  # (U, P) left-padded
    pmask = torch.zeros((U, P), dtype=torch.long)  # (U, P)
    for u, p in enumerate(prompts):
        pids[u, P - len(p):] = torch.tensor(p)
        pmask[u, P - len(p):] = 1
    rids = torch.full((B, R), pad_id, dtype=torch.long)  # (B, R) right-padded
    rmask = torch.zeros((B, R), dtype=torch.long)  # (B, R)
    for i, s in enumerate(samples):
        if s.token_ids:
            rids[i, : len(s.token_ids)] = torch.tensor(s.token_ids)
            rmask[i, : len(s.token_ids)] = 1
    pids, pmask, rids, rmask = pids.to(device), pmask.to(device), rids.to(device), rmask.to(device)
    full_mask = torch.cat([pmask[idx], rmask], dim=1)  # (B, P+R)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P+R)
    key = _cache_kwarg(model)
    ctx = autocast if autocast is not None else contextlib.nullcontext()
    grad_ctx = contextlib.nullcontext() if grad else torch.no_grad()
    with grad_ctx, (prefix.capture() if prefix else contextlib.nullcontext([])) as cap, ctx:
        out = model(input_ids=pids, attention_mask=pmask, position_ids=(pmask.cumsum(-1) - 1).clamp(min=0),
                    use_cache=True, logits_to_keep=1)
        cache = getattr(out, "cache", None) or out.past_key_values
        cache.reorder_cache(idx)  # (U, ...) -> (B, ...): every row gets its prompt's keys/values
        out2 = model(input_ids=rids, attention_mask=full_mask, position_ids=pos[:, P:], use_cache=True,
                     **{key: cache})
    first = out.logits[:, -1, :].float()[idx]  # (B, V): predicts the first response token
    logits = torch.cat([first[:, None, :], out2.logits[:, :-1, :].float()], dim=1)  # (B, R, V)
    lse = torch.logsumexp(logits, dim=-1)  # (B, R)
    lp = torch.gather(logits, -1, rids.unsqueeze(-1)).squeeze(-1) - lse  # (B, R)
    ent = None
    if with_entropy:
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # (B, R)
    hidden = None
    if prefix is not None and len(cap) == 2:
        hidden = torch.cat([cap[0][idx], cap[1]], dim=1).detach()  # (B, P+R, H)
    return lp, ent, hidden


def _oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"


def _oom_error(where: str) -> RewardlabError:
    return RewardlabError(
        f"out of memory during {where}; lower --micro-batch-size or --max-new-tokens, "
        "add --gradient-checkpointing, or train fewer layers with --train-top-layers"
    )


def build_reward(cfg: TrainConfig, rows: list[Any]) -> tuple[Any, str]:
    """The reward the run scores with: the task's (or --reward) main reward, plus optional format
    component, combined with weights. Returns ``(reward, main component name)``."""
    from rewardlab.rewards import get_reward

    name = cfg.reward or (rows[0].meta or {}).get("reward")
    if not name:
        raise RewardlabError(f"task {cfg.task!r} names no default reward; pass --reward math (or code, or a dotted path)")
    main = get_reward(name)
    if cfg.format_weight == 0:
        return main, name
    from rewardlab.rewards.combine import Combined

    parts = {name: (main, 1.0), "format": (get_reward("format"), cfg.format_weight)}
    return Combined(parts), name


def _run_name(cfg: TrainConfig) -> str:
    """``<algo>-<task>-<model>``: runs of different models never share a default run directory
    (``runs/x/checkpoints/step-000020`` as the model reads ``x-step-000020``)."""
    from rewardlab.models import DEFAULT_MODEL

    model = Path(str(cfg.model or DEFAULT_MODEL).rstrip("/\\"))
    tag = model.name or "model"
    if model.parent.name == "checkpoints" and model.parent.parent.name:
        tag = f"{model.parent.parent.name}-{tag}"
    task = Path(cfg.task).name if cfg.task.endswith((".jsonl", ".jsonl.gz")) else cfg.task
    return f"{cfg.algo}-{task}-{tag}".replace("/", "_").replace(":", "_")


class Interrupted(KeyboardInterrupt):
    """Raised by :func:`train` after a Ctrl-C (or SIGTERM) stop, once the checkpoint is saved.

    ``exit_code`` is the shell's convention for the signal: 130 for Ctrl-C, 143 for SIGTERM.
    """

    def __init__(self, signum: int, step: int, run_dir: Path):
        super().__init__(f"stopped after step {step} with its checkpoint saved; rerun the same command to resume"
                         f" from {run_dir}")
        self.signum, self.step, self.run_dir = signum, step, run_dir
        self.exit_code = 128 + int(signum)


def _hard_exit(code: int, why: str) -> None:
    """Leave now: flush what was printed, then ``os._exit`` (no cleanup that could hang)."""
    try:
        sys.stdout.flush()
        sys.stderr.write(f"aborted ({why})\n")
        sys.stderr.flush()
    finally:
        os._exit(code)


class _StopFlag:
    """First Ctrl-C (or SIGTERM): finish the current step, save, exit 130 (143). Second Ctrl-C: abort
    now (KeyboardInterrupt, and a hard exit if unwinding has not finished ``ABORT_GRACE_S`` later, e.g.
    because a hung reward thread holds up the exit). A third Ctrl-C exits at once."""

    ABORT_GRACE_S = 5.0

    def __init__(self, log: Any):
        self.requested = False
        self.signum: int | None = None
        self._aborting = False
        self._log = log
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            if self._aborting:
                _hard_exit(130, "third Ctrl-C")
            self._aborting = True
            import threading

            timer = threading.Timer(self.ABORT_GRACE_S, _hard_exit,
                                    (130, f"shutdown did not finish within {self.ABORT_GRACE_S:g} s of the second Ctrl-C"))
            timer.daemon = True
            timer.start()
            raise KeyboardInterrupt
        if self.requested:
            return
        self.requested, self.signum = True, signum
        self._log("stopping after this step and saving a checkpoint (Ctrl-C again to abort without saving)")

    def agreed(self, reduce_max: Any) -> bool:
        """Whether any rank was asked to stop (``reduce_max`` = ``distributed.all_reduce_max``): all
        ranks leave the loop after the same step, so the final save's collectives match."""
        if bool(reduce_max(int(self.requested))) and not self.requested:
            self.requested, self.signum = True, signal.SIGINT
        return self.requested

    def __enter__(self) -> "_StopFlag":
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


_ADVANTAGE_SIGN = 1.0
"""TEST-ONLY, not a setting: the factor every advantage is multiplied by (always +1.0).
``tests/test_learning.py`` monkeypatches it to -1.0 to check that a reversed update makes the reward
fall, i.e. that the learning tests can tell a correct update from a wrong one."""


# ----------------------------------------------------------------------------------------------
# the loop
# ----------------------------------------------------------------------------------------------


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) training as configured; returns the run directory.

    The run directory is locked for the whole run (a second ``train`` on it fails at once). After
    Ctrl-C or SIGTERM the current step finishes, a checkpoint is saved and :class:`Interrupted`
    (a ``KeyboardInterrupt``) is raised; ``rewardlab train`` then exits 130 (143 for SIGTERM).
    """
    locks: list[FolderLock] = []
    try:
        return _train(cfg, locks)
    except BaseException:
        for lock in locks:
            lock.release(failed=True)  # a run directory this start created and left empty is removed
        raise
    finally:
        for lock in locks:
            lock.release()


def _train(cfg: TrainConfig, _locks: list[FolderLock]) -> Path:
    threads = set_threads(cfg.threads)  # before anything else touches torch's thread pools

    import torch

    from rewardlab import algos, distributed, models, tasks
    from rewardlab.checkpoint import (
        clean_partial,
        latest_checkpoint,
        load_trainer_state,
        load_weights,
        rng_state,
        save_checkpoint,
        set_rng_state,
    )
    from rewardlab.logging import JsonlWriter, MetricsLogger, truncate_jsonl
    from rewardlab.rewards.pool import prewarm, score_batch
    from rewardlab.rollout import SamplingParams, format_prompt, make_engine
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # HF's load/save bars would break into our progress line

    # --- setup: sizes, run directory, resume point ---
    device_name = resolve_device(cfg.device)  # --device cuda without CUDA: one line, before anything heavy
    dist = distributed.init()
    algo = resolve_algo(cfg)
    sizes: Derived = derive(cfg, world_size=dist.world_size, mini_batches=int(algo["mini_batches"]))
    run_dir = Path(cfg.output_dir or Path("runs") / _run_name(cfg))
    main = dist.is_main

    def say(msg: str) -> None:
        if main:
            print(msg, flush=True)

    # Everything a typo can break is checked before the run directory is created or touched.
    check_model(cfg.model)
    rows = tasks.load_task(cfg.task, "train", limit=cfg.task_limit, seed=cfg.seed)
    if not rows:
        raise RewardlabError(f"task {cfg.task!r} has no training rows")
    for r in rows:
        if r.prompt in (None, "", []) or r.reference is None:
            raise RewardlabError(f"task {cfg.task!r} row {r.id!r} has no {'prompt' if not r.prompt else 'reference'}; "
                                 "every row needs a prompt and a reference answer")
    reward_fn, main_reward = build_reward(cfg, rows)

    ckpt = None
    lock_error = None
    if main:  # one writer per run directory, for the whole run (the kernel drops the lock on any exit)
        try:
            _locks.append(FolderLock(run_dir, "training run",
                                     hint="wait for it to finish (rerun then to resume), or pick another --output-dir"))
        except RewardlabError as e:
            lock_error = str(e)
    lock_error = distributed.broadcast_object(lock_error)
    if lock_error:
        raise RewardlabError(lock_error)
    if main:
        clean_partial(run_dir)
    distributed.barrier()
    ckpt = latest_checkpoint(run_dir)
    state: dict[str, Any] | None = load_trainer_state(ckpt) if ckpt is not None else None
    start_step = int(state["step"]) if state else 0
    if state is not None:
        changed = settings_diff(state.get("config", {}), cfg)
        if changed:
            raise RewardlabError(
                f"{run_dir} holds a run with different settings ({describe_diff(changed)}); "
                "rerun with the saved settings to resume, or pick a new --output-dir"
            )
        if start_step >= cfg.steps:
            say(f"{run_dir}: already trained {start_step} steps (--steps {cfg.steps}); nothing to do")
            return run_dir

    device = torch.device(device_name)
    if device.type == "cuda" and dist.world_size > 1:
        device = dist.device
    say(f"rewardlab train: {cfg.algo} on {cfg.task}, model {cfg.model or models.DEFAULT_MODEL}, "
        f"{dist.world_size} rank(s) on {device.type}, threads {threads or torch.get_num_threads()}")
    say(sizes.describe())
    say(f"  run directory               {run_dir}" + (f"  (resuming from {ckpt.name})" if ckpt else ""))

    # --- setup: model, reference, optimizer, engine, data, reward ---
    prewarm(reward_fn, cfg.reward_workers)  # reward workers start while the model loads (not before the lock)
    seed_everything(cfg.seed + dist.rank)
    # bf16 on GPU: fp32 master weights + bf16 autocast (dtype auto); --dtype bfloat16 = pure bf16 weights
    weight_dtype = "float32" if cfg.dtype == "auto" else cfg.dtype
    model, tok = models.load_model(cfg.model, dtype=weight_dtype, device="cpu")
    if main:  # after the model loads: a start that fails before this leaves a new run directory empty (removed)
        save_yaml(run_dir / "config.yaml", cfg, derived=sizes, algo=algo)
    autocast = None
    if device.type == "cuda" and cfg.dtype == "auto":
        autocast = torch.autocast("cuda", dtype=torch.bfloat16)
    ref_model = None
    if float(algo["beta"]) > 0:  # reference model only when the KL term is on
        ref_model = copy.deepcopy(model).eval().requires_grad_(False).to(device)
    if ckpt is not None:
        load_weights(model, ckpt)
    n_trainable = freeze_to_top_layers(model, cfg.train_top_layers)
    prefix = None
    if cfg.train_top_layers and sizes.off_policy and dist.world_size == 1:
        blocks = decoder_blocks(model)
        if blocks is not None and cfg.train_top_layers < len(blocks):
            prefix = FrozenPrefix(blocks, cfg.train_top_layers)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if dist.world_size > 1:
        model = distributed.wrap_model(model, dist)  # FSDP2, one shard per rank
    else:
        model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                  weight_decay=cfg.weight_decay)
    warm = max(0, cfg.warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / (warm + 1)) if warm else 1.0)
    if state is not None:
        # collective under FSDP: every rank loads, rank 0's full state is broadcast and sharded
        distributed.load_optimizer_state_dict(model, optimizer, state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    say(f"  trainable parameters        {n_trainable / 1e6:.2f} M"
        + (f" (top {cfg.train_top_layers} blocks + final norm)" if cfg.train_top_layers else " (all)"))

    if cfg.rollout == "hf":
        engine_kw: dict[str, Any] = {"batch_size": cfg.rollout_batch_size}
    else:
        engine_kw = {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
                     "enable_sleep_mode": cfg.vllm_sleep_mode, "seed": cfg.seed}
    engine = make_engine(cfg.rollout, model, tok, **engine_kw)

    stream = PromptStream(len(rows), cfg.seed)
    if state is not None:
        stream.load(state["data"])

    def render(row: Any) -> str:
        prompt = row.prompt
        if cfg.system_prompt:
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            prompt = [{"role": "system", "content": cfg.system_prompt}] + msgs
        return format_prompt(tok, prompt)

    sampling_base = dict(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                         top_k=cfg.top_k)
    overlong_on = bool(algo["overlong"]) and float(algo["overlong_factor"]) > 0
    overlong_filter = bool(algo["overlong_filter"])
    ratio_level = algo["ratio"]
    if cfg.eval_before_after and start_step == 0:
        _eval(cfg, run_dir / "eval" / "before", cfg.model or "default", say, main)

    if main:
        truncate_jsonl(run_dir / "metrics.jsonl", start_step)
        truncate_jsonl(run_dir / "rollouts.jsonl", start_step)
    rollout_log = JsonlWriter(run_dir / "rollouts.jsonl") if main else None
    log = MetricsLogger(run_dir, total_steps=cfg.steps, start_step=start_step, enabled=main,
                        progress=cfg.progress, tensorboard=cfg.tensorboard, wandb=cfg.wandb, config=to_dict(cfg))
    if state is not None:  # last: nothing above may shift the random streams on resume
        set_rng_state(_rank_rng(state, dist.rank, dist.world_size))

    def checkpoint(step: int) -> None:
        # The three gathers are collective: every rank runs them, rank 0 writes the files.
        full = distributed.full_state_dict(model) if dist.world_size > 1 else None
        optim_state = distributed.optimizer_state_dict(model, optimizer)  # unsharded, keyed by name
        rngs = distributed.gather_objects(rng_state())  # one per rank: ranks draw different streams
        trainer_state = {
            "step": step,
            "optimizer": optim_state,
            "scheduler": scheduler.state_dict(),
            "rng": rngs[0],
            "rng_per_rank": rngs,
            "data": stream.state(),
            "config": to_dict(cfg),
            "world_size": dist.world_size,
        }
        if main:
            save_checkpoint(run_dir, step, model, tok, trainer_state, state_dict=full, keep=cfg.keep_checkpoints)
        distributed.barrier()

    step = start_step
    last_saved = start_step
    t_run = time.perf_counter()
    try:
        with _StopFlag(log.message if main else (lambda m: None)) as stop:
            while step < cfg.steps and not stop.agreed(distributed.all_reduce_max):
                step += 1
                t_step, cpu_step = time.perf_counter(), time.process_time()
                timings = {"time/generate": 0.0, "time/reward": 0.0}
                kept: list[Sample] = []
                all_samples: list[Sample] = []
                groups_seen = groups_zero_std = 0
                gen_round = 0
                generated_tokens = 0
                target = cfg.prompts_per_step * cfg.group_size
                while len(kept) < target and gen_round < cfg.max_gen_batches:  # one round unless DAPO filters
                    gen_round += 1

                    # --- rollout ---
                    t0 = time.perf_counter()
                    picks = stream.take(cfg.prompts_per_step)  # same on every rank
                    mine = distributed.shard(picks, dist)  # this rank's prompts
                    prompt_texts = [render(rows[i]) for i, _ in mine]
                    seed = (cfg.seed * 1_000_003 + step * 1_009 + gen_round * 17 + dist.rank) % (2**31)
                    # FSDP + HF engine: full weights while sampling (vLLM holds its own copy)
                    gather = distributed.gathered_params(model) if cfg.rollout == "hf" else contextlib.nullcontext()
                    try:
                        with gather:
                            outs = engine.generate(prompt_texts, cfg.group_size, SamplingParams(seed=seed, **sampling_base))
                    except RuntimeError as e:
                        if _oom(e):
                            raise _oom_error("generation") from None
                        raise
                    timings["time/generate"] += time.perf_counter() - t0

                    # --- reward ---
                    t0 = time.perf_counter()
                    refs, metas, texts = [], [], []
                    for c in outs:
                        row = rows[mine[c.prompt_index][0]]
                        refs.append(row.reference)
                        metas.append({k: v for k, v in (row.meta or {}).items() if k != "reward"})
                        texts.append(c.text)
                    results = score_batch(reward_fn, texts, refs, metas, deadline=cfg.reward_deadline,
                                          workers=cfg.reward_workers)
                    local: list[Sample] = []
                    for c, res in zip(outs, results):
                        row_idx, group = mine[c.prompt_index]
                        comps = dict(res.info.get("components") or {main_reward: res.score})
                        task_score = comps.get(main_reward, res.score)
                        local.append(Sample(
                            group=group, row=rows[row_idx], prompt_text=prompt_texts[c.prompt_index],
                            prompt_ids=list(c.prompt_ids), token_ids=list(c.token_ids), text=c.text,
                            finish_reason=c.finish_reason, score=float(res.score or 0.0),
                            task_score=task_score, components=comps, info=res.info, gen_round=gen_round,
                            rollout_logprobs=_logprobs_of(c),
                        ))
                    batch = [s for part in distributed.gather_objects(local) for s in part]  # every rank: all
                    generated_tokens += sum(len(s.token_ids) for s in batch)
                    if overlong_on:  # DAPO soft overlong punishment, added to the reward
                        lengths = torch.tensor([len(s.token_ids) for s in batch], dtype=torch.float32)  # (N,)
                        pen = algos.overlong_penalty(lengths, cfg.max_new_tokens, int(algo["overlong_cache"]),
                                                     factor=float(algo["overlong_factor"]))  # (N,)
                        for s, p in zip(batch, pen.tolist()):
                            s.overlong = p
                            s.score += p
                    all_samples.extend(batch)
                    group_ids = torch.tensor([s.group for s in batch])  # (N,)
                    metric = torch.tensor([float(s.task_score or 0.0) for s in batch])  # (N,)
                    keep_groups = algos.dynamic_sampling_keep(metric, group_ids)  # (N,) bool
                    n_groups = len(set(group_ids.tolist()))
                    n_keep = len({g for g, k in zip(group_ids.tolist(), keep_groups.tolist()) if k})
                    groups_seen += n_groups
                    groups_zero_std += n_groups - n_keep
                    timings["time/reward"] += time.perf_counter() - t0
                    if not algo["dynamic_sampling"]:
                        kept = batch
                        break
                    # DAPO dynamic sampling: keep groups with reward variance, generate more if short
                    kept.extend(s for s, k in zip(batch, keep_groups.tolist()) if k)
                if algo["dynamic_sampling"]:
                    kept = kept[:target]  # whole groups: prompt-major order
                    if len(kept) < target:  # round budget spent: train on the whole groups kept, ranks evenly
                        unit = cfg.group_size * dist.world_size
                        kept = kept[: len(kept) // unit * unit]
                gen_metrics = {
                    "num_gen_batches": gen_round,
                    "completions/generated": len(all_samples),
                    "completions/kept": len(kept),
                    "gen_budget_exhausted": int(len(kept) < target),
                    "skipped": int(not kept),
                    "reward/generated_mean": _mean([s.score for s in all_samples]),
                    "frac_zero_std_groups": groups_zero_std / max(1, groups_seen),
                }
                if not kept:  # DAPO: no group with reward variance within the budget; skip the update, say why
                    reason = (f"no group had reward variance in {gen_round} generation round(s) of {cfg.prompts_per_step} "
                              f"prompts (--max-gen-batches {cfg.max_gen_batches}); no update this step")
                    log.message(f"step {step}: skipped: {reason}")
                    log.log(step, {**gen_metrics, "skip_reason": reason, "lr": scheduler.get_last_lr()[0], **timings,
                                   "time/step": time.perf_counter() - t_step})
                    if rollout_log is not None:
                        rollout_log.write_many(_rollout_rows(step, all_samples, kept))
                    if step % cfg.save_every == 0 or step == cfg.steps:
                        checkpoint(step)
                        last_saved = step
                    continue

                # --- advantage ---
                rewards_t = torch.tensor([s.score for s in kept], dtype=torch.float32)  # (N,)
                gids_t = torch.tensor([s.group for s in kept])  # (N,)
                adv = algos.group_advantages(rewards_t, gids_t, scale=algo["advantage"])  # (N,)
                adv = adv * _ADVANTAGE_SIGN  # +1 always, except in tests/test_learning.py's negative control
                for s, a in zip(kept, adv.tolist()):
                    s.advantage = a

                # --- update ---
                t0 = time.perf_counter()
                per_mb = sizes.completions_per_mini_batch  # global; each rank trains on its shard of it
                minis = [distributed.shard(kept[i : i + per_mb], dist) for i in range(0, len(kept), per_mb)]
                old_lp: dict[tuple[int, int], Any] = {}
                ref_lp: dict[tuple[int, int], Any] = {}
                frozen_h: dict[tuple[int, int], Any] = {}
                want_entropy = float(cfg.entropy_coef) > 0
                # engine-vs-trainer log-prob mismatch: only when the engine gave every sampled token's log-prob
                mismatch_on = all(s.rollout_logprobs is not None and len(s.rollout_logprobs) == len(s.token_ids)
                                  for s in kept)
                mismatch: list[tuple[float, dict[str, float]]] = []  # (tokens, metrics) per micro-batch
                try:
                    if sizes.off_policy or ref_model is not None:
                        # Off-policy (several optimizer steps per rollout): lp_old comes from the training
                        # model before any update, never from the inference engine.
                        model.eval()
                        with torch.no_grad():
                            for mi, mb in enumerate(minis):
                                for ui in range(0, len(mb), sizes.micro_batch_size):
                                    micro = mb[ui : ui + sizes.micro_batch_size]
                                    if sizes.off_policy:
                                        lp_old, _, hidden = shared_prompt_logprobs(model, micro, tok.pad_token_id, device,
                                                                                   prefix=prefix, autocast=autocast)
                                        old_lp[mi, ui] = lp_old  # (B, R)
                                        if hidden is not None:
                                            frozen_h[mi, ui] = hidden  # (B, P+R, H) input of the first trained block
                                    if ref_model is not None:
                                        ref_lp[mi, ui] = shared_prompt_logprobs(ref_model, micro, tok.pad_token_id, device,
                                                                                autocast=autocast)[0]  # (B, R)
                    model.train()
                    loss_metrics: list[dict[str, float]] = []
                    grad_norms: list[float] = []
                    for epoch in range(cfg.epochs):
                        for mi, mb in enumerate(minis):
                            # the whole optimizer step's denominators, across micro-batches and ranks
                            n_tok = sum(len(s.token_ids) for s in mb if not (overlong_filter and s.finish_reason == "length"))
                            n_seq = sum(1 for s in mb if s.token_ids and not (overlong_filter and s.finish_reason == "length"))
                            num_tokens = max(1.0, float(distributed.all_reduce_sum(float(n_tok))))
                            num_seqs = max(1.0, float(distributed.all_reduce_sum(float(n_seq))))
                            for ui in range(0, len(mb), sizes.micro_batch_size):
                                micro = mb[ui : ui + sizes.micro_batch_size]
                                b = pad_batch(micro, tok.pad_token_id, device)
                                mask = b["response_mask"]  # (B, R)
                                if overlong_filter:  # DAPO overlong filtering: truncated rows leave the loss
                                    keep_rows = torch.tensor([s.finish_reason != "length" for s in micro],
                                                             dtype=mask.dtype, device=device)  # (B,)
                                    mask = mask * keep_rows[:, None]  # (B, R)
                                if (mi, ui) in frozen_h:  # frozen blocks: replay their cached output
                                    with prefix.replay(frozen_h[mi, ui]):
                                        lp, ent = token_logprobs(model, b, with_entropy=True, autocast=autocast)  # (B, R)
                                elif not cfg.gradient_checkpointing:  # each distinct prompt once, with grad
                                    lp, ent, _ = shared_prompt_logprobs(model, micro, tok.pad_token_id, device,
                                                                        autocast=autocast, grad=True, with_entropy=True)
                                else:
                                    lp, ent = token_logprobs(model, b, with_entropy=True, autocast=autocast)  # (B, R)
                                old = old_lp[mi, ui] if sizes.off_policy else lp.detach()  # (B, R)
                                if mismatch_on and epoch == 0:  # old = the policy that sampled, before any update
                                    mismatch.append(_logprob_mismatch(old, micro, b["response_mask"]))
                                a = torch.tensor([s.advantage for s in micro], device=device)  # (B,)
                                loss, m = algos.policy_loss(
                                    lp, old, a, mask,
                                    ratio=ratio_level, eps_low=float(algo["eps_low"]), eps_high=float(algo["eps_high"]),
                                    clip_ratio_c=algo["clip_ratio_c"], agg=algo["agg"], max_len=cfg.max_new_tokens,
                                    ref_logp=ref_lp.get((mi, ui)), beta=float(algo["beta"]), kl=algo["kl"],
                                    entropy=ent if want_entropy else ent.detach(), entropy_coef=float(cfg.entropy_coef),
                                    num_tokens=num_tokens, num_seqs=num_seqs,
                                )
                                loss.backward()
                                loss_metrics.append({k: float(v) for k, v in m.items()})
                            grad_norms.append(distributed.clip_grad_norm(model, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")))
                            optimizer.step()
                            scheduler.step()
                            optimizer.zero_grad(set_to_none=True)
                    engine.load_weights(model)
                except RuntimeError as e:
                    if _oom(e):
                        raise _oom_error("the update") from None
                    raise
                timings["time/update"] = time.perf_counter() - t0

                # --- log ---
                lengths = [len(s.token_ids) for s in kept]
                scores = [s.score for s in kept]
                mean_r = _mean(scores) or 0.0
                metrics: dict[str, Any] = {
                    "reward/mean": mean_r,
                    "reward/std": math.sqrt(sum((x - mean_r) ** 2 for x in scores) / max(1, len(scores) - 1)),
                }
                comp_names = sorted({k for s in kept for k in s.components})
                for name in comp_names:
                    vals = [float(s.components[name]) for s in kept if s.components.get(name) is not None]
                    metrics[f"rewards/{name}/mean"] = _mean(vals)
                status_counts: dict[str, int] = {}
                for s in all_samples:
                    infos = (s.info.get("component_info") or {main_reward: s.info}).values()
                    for inf in infos:
                        st = str((inf or {}).get("status", "ok"))
                        status_counts[st] = status_counts.get(st, 0) + 1
                for st, n in sorted(status_counts.items()):
                    metrics[f"reward_status/{st}"] = n
                metrics.update(gen_metrics)
                metrics.update({
                    "response_len/mean": _mean([float(x) for x in lengths]),
                    "response_len/min": min(lengths),
                    "response_len/max": max(lengths),
                    "truncation_rate": sum(s.finish_reason == "length" for s in kept) / len(kept),
                    "overlong_penalty/mean": _mean([s.overlong for s in kept]),
                })
                gathered = [m for part in distributed.gather_objects(loss_metrics) for m in part]
                combined = algos.combine_metrics(gathered)
                for k in ("loss", "pg_loss"):  # summed per optimizer step; report the mean over them
                    if k in combined:
                        combined[k] /= max(1, len(grad_norms))  # optimizer steps taken (fewer on a partial batch)
                combined.pop("tokens", None)
                combined.pop("seqs", None)
                metrics.update(combined)
                if mismatch_on:
                    metrics.update(_combine_mismatch([x for part in distributed.gather_objects(mismatch) for x in part]))
                metrics["grad_norm"] = _mean(grad_norms)
                metrics["lr"] = scheduler.get_last_lr()[0]
                metrics.update(timings)
                metrics["time/step"] = time.perf_counter() - t_step
                metrics["time/step_cpu"] = time.process_time() - cpu_step  # this process's CPU seconds (shared machines)
                metrics["tokens/s"] = generated_tokens / max(1e-9, timings["time/generate"])
                log.log(step, metrics)
                if rollout_log is not None:
                    rollout_log.write_many(_rollout_rows(step, all_samples, kept))

                # --- checkpoint ---
                if step % cfg.save_every == 0 or step == cfg.steps:
                    checkpoint(step)
                    last_saved = step
            if stop.requested and last_saved != step:
                checkpoint(step)
                last_saved = step
    finally:
        log.close()
        if rollout_log is not None:
            rollout_log.close()

    wall = time.perf_counter() - t_run
    say(f"trained steps {start_step + 1}..{step} in {wall:.0f} s; checkpoint {run_dir / 'checkpoints'}")
    if stop.requested:  # Ctrl-C / SIGTERM: saved above; no plots or after-eval, exit 130 (143)
        distributed.destroy()
        raise Interrupted(stop.signum or signal.SIGINT, step, run_dir)
    if main and cfg.plots:
        from rewardlab.plots import plot_run

        plot_run(run_dir)
    if cfg.eval_before_after and step >= cfg.steps:
        from rewardlab.checkpoint import checkpoint_dir

        _eval(cfg, run_dir / "eval" / "after", str(checkpoint_dir(run_dir, step)), say, main)
    distributed.destroy()
    return run_dir


def _rank_rng(state: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    """This rank's saved RNG state: its own when the checkpoint was written with the same world
    size, else rank 0's on every rank (after a world-size change the global streams cannot match the
    original run anyway; they feed only dropout, since sampling is seeded per step and rank)."""
    per_rank = state.get("rng_per_rank")
    if per_rank is not None and len(per_rank) == world_size:
        return per_rank[rank]
    return state["rng"]


def _logprobs_of(completion: Any) -> list[float] | None:
    """The engine's sampled-token log-probs of a completion (vLLM sets ``logprobs``), else None."""
    lps = getattr(completion, "logprobs", None)
    return None if lps is None else [float(x) for x in lps]


def _logprob_mismatch(train_lp: Any, micro: list[Sample], mask: Any) -> tuple[float, dict[str, float]]:
    """``(masked token count, rewardlab.vllm_engine.logprob_mismatch(...))`` for one micro-batch."""
    from rewardlab.vllm_engine import logprob_mismatch  # imports torch only; vLLM itself stays lazy

    return float(mask.sum()), logprob_mismatch(train_lp, [s.rollout_logprobs or [] for s in micro], mask)


def _combine_mismatch(parts: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Token-weighted means (max for the max) of per-micro-batch mismatch metrics."""
    total = sum(n for n, _ in parts)
    if total <= 0:
        return {}
    return {
        "rollout/logp_abs_diff": sum(n * m["rollout/logp_abs_diff"] for n, m in parts) / total,
        "rollout/logp_max_abs_diff": max(m["rollout/logp_max_abs_diff"] for n, m in parts if n > 0),
        "rollout/ratio_mean": sum(n * m["rollout/ratio_mean"] for n, m in parts) / total,
    }


def _rollout_rows(step: int, samples: list[Sample], kept: list[Sample]) -> list[dict[str, Any]]:
    """The ``rollouts.jsonl`` rows of one step: every generated completion, kept (trained on) or dropped."""
    kept_ids = {id(s) for s in kept}
    return [
        {
            "step": step, "gen_round": s.gen_round, "group": s.group, "row_id": s.row.id,
            "prompt": s.prompt_text, "completion": s.text, "reference": _jsonable(s.row.reference),
            "reward": s.score, "components": s.components, "overlong_penalty": s.overlong,
            "advantage": s.advantage if id(s) in kept_ids else None, "kept": id(s) in kept_ids,
            "finish_reason": s.finish_reason, "length": len(s.token_ids), "info": s.info,
        }
        for s in samples
    ]


def _jsonable(x: Any) -> Any:
    if isinstance(x, (str, int, float, bool, type(None), list, dict)):
        return x
    return str(x)


def _eval(cfg: TrainConfig, out_dir: Path, model_ref: str, say: Any, main: bool) -> None:
    """Run the eval suite (``rewardlab.evaluate.run_eval``) on ``model_ref`` into ``out_dir``."""
    try:
        from rewardlab.evaluate import run_eval
    except ImportError:
        raise RewardlabError("--eval-before-after needs rewardlab.evaluate, which this installation lacks") from None
    if not main:
        return
    suite = [s.strip() for s in str(cfg.eval_before_after).split(",") if s.strip()]
    say(f"eval {','.join(suite)} on {model_ref} -> {out_dir}")
    run_eval(None if model_ref == "default" else model_ref, suite, out_dir, limit=cfg.eval_limit)


__all__ = ["Interrupted", "PromptStream", "freeze_to_top_layers", "pad_batch", "set_threads", "token_logprobs", "train"]
