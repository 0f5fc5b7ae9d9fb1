"""The run's plumbing, kept out of the loop's page: threads and seeds, the prompt stream, the scored
sample, what the stages share (``Run``, ``Batch``), the reward a run grades with, the run folder's name, Ctrl-C handling, rollout rows.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rewardlab import algos
from rewardlab.errors import RewardlabError
from rewardlab.logging import JsonlWriter
from rewardlab.models import DEFAULT_MODEL
from rewardlab.rewards import get_reward
from rewardlab.rewards.combine import Combined
from rewardlab.rollout.vllm import logprob_mismatch  # imports torch only; vLLM itself loads when an engine starts
from rewardlab.train import distributed
from rewardlab.train.config import Derived, TrainConfig
from rewardlab.train.logprobs import FrozenPrefix


def default_threads() -> int | None:
    """1 thread on machines with <= 4 cores (extra OpenMP threads there fight other processes and
    run 5-10x slower, see docs/platform.md); otherwise None = leave torch's default."""
    n = os.cpu_count() or 1
    return 1 if n <= 4 else None


def set_threads(threads: int | None) -> int | None:
    """Fix the CPU thread count of this process (and, through the environment, of the processes it
    starts: reward workers, a vLLM engine); call it before torch does any work."""
    n = threads if threads is not None else default_threads()
    if n is None:
        return None
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # only settable once per process, before any inter-op work
        pass
    return n


def seed_everything(seed: int) -> None:
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
    advantage: float | list[float] = 0.0
    """One advantage for every token (group z-score, RLOO, ...) or one per token (REINFORCE++ with gamma < 1)."""
    gen_round: int = 0
    baseline: float | None = None
    """ReMax: the reward of the prompt's greedy completion (the baseline subtracted from the score)."""
    values: list[float] | None = None
    """PPO: the critic's value before each response token, before the update (the clipped value loss's anchor)."""
    returns: list[float] | None = None
    """PPO: GAE's per-token returns (the value targets)."""
    bog: bool = False
    """Best-of-group option: this is its group's unique best completion (its NLL joins the loss)."""
    group_mean: float = 0.0
    """The mean reward of the sample's group (the value_group_coef option's target)."""
    loss_mask: list[int] | None = None
    """Tool rollouts: 1 at each token the model sampled, 0 at inserted observation tokens (None: all sampled)."""
    turns: list[dict] | None = None
    """Tool rollouts: the trajectory's turns (token spans, code, tool status; ``rewardlab.rollout.multiturn``)."""
    tool_calls: int = 0
    first_score: float | None = None
    """--feedback: the task reward of the first answer (before the critic's feedback)."""
    answer: str | None = None
    """Tool rollouts: the model's last turn, the text the reward graded (None: ``text``)."""
    rollout_logprobs: list[float] | None = None
    """The rollout engine's log-prob of each token in ``token_ids`` under the distribution it sampled
    from. Logged against the trainer's own log-probs (``rollout/*`` metrics); rollout correction
    weights the loss by their ratio, and bypass mode uses them as old log-probs."""

    @property
    def model_tokens(self) -> int:
        """Tokens the model sampled (a tool rollout's observations excluded): what lengths and budgets count."""
        return len(self.token_ids) if self.loss_mask is None else sum(self.loss_mask)



@dataclass
class Run:
    """What the stages share: the settings, the resume point, and (after :func:`load`) the model and its tools."""

    cfg: TrainConfig
    algo: algos.Algo
    sizes: Derived
    dist: distributed.DistInfo
    run_dir: Path
    rows: list[Any]
    reward_fn: Any
    main_reward: str
    ckpt: Path | None
    state: dict[str, Any] | None
    start_step: int
    model: Any = None
    tok: Any = None
    ref_model: Any = None
    prefix: FrozenPrefix | None = None
    autocast: Any = None
    device: Any = None
    optimizer: Any = None
    scheduler: Any = None
    engine: Any = None
    stream: PromptStream | None = None
    log: Any = None
    rollout_log: JsonlWriter | None = None
    correction: Any = None
    """``--correction``: the ``rewardlab.algos.correction.Correction`` in force (None = off), resolved once."""
    critic: Any = None
    """PPO's value model (``rewardlab.train.critic.ValueModel``), with its own optimizer ``critic_opt``."""
    critic_opt: Any = None
    clip_adapt: Any = None
    """``--clip-adapt kl``: the KL-adaptive clip range (``rewardlab.algos.extras.AdaptiveClip``)."""
    reward_norm: Any = None
    """``--reward-norm ema``: the global EMA reward normaliser (``rewardlab.algos.extras.EmaRewardNorm``)."""
    group_sizes: Any = None
    """``--group-size-policy variance``: per-prompt group sizes (``rewardlab.algos.extras.GroupSizePolicy``)."""

    @property
    def main(self) -> bool:
        return self.dist.is_main

    def say(self, msg: str) -> None:
        if self.main:
            print(msg, flush=True)


@dataclass
class Batch:
    """One step's completions: every one generated, and those kept for the update."""

    target: int
    kept: list[Sample] = field(default_factory=list)
    generated: list[Sample] = field(default_factory=list)
    gen_round: int = 0
    groups_seen: int = 0
    groups_zero_std: int = 0
    generated_tokens: int = 0
    step: int = 0
    timings: dict[str, float] = field(default_factory=lambda: {"time/generate": 0.0, "time/reward": 0.0})


def oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"


def oom_error(where: str) -> RewardlabError:
    return RewardlabError(
        f"out of memory during {where}; lower --micro-batch-size or --max-new-tokens, "
        "add --gradient-checkpointing, or train fewer layers with --train-top-layers"
    )


def build_reward(cfg: TrainConfig, rows: list[Any]) -> tuple[Any, str]:
    """The reward the run scores with: the task's (or --reward) main reward, plus optional format
    component, combined with weights. Returns ``(reward, main component name)``."""
    name = cfg.reward or (rows[0].meta or {}).get("reward")
    if not name:
        raise RewardlabError(f"task {cfg.task!r} names no default reward; pass --reward math (or code, or a dotted path)")
    main = get_reward(name)
    if cfg.format_weight == 0:
        return main, name
    parts = {name: (main, 1.0), "format": (get_reward("format"), cfg.format_weight)}
    return Combined(parts), name


def run_dir_of(cfg: TrainConfig) -> Path:
    """The run directory: ``--output-dir``, else ``runs/<algo>-<task>-<model>``."""
    return Path(cfg.output_dir or Path("runs") / _run_name(cfg))


def _run_name(cfg: TrainConfig) -> str:
    """``<algo>-<task>-<model>``: runs of different models never share a default run directory
    (``runs/x/checkpoints/step-000020`` as the model reads ``x-step-000020``)."""
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


class StopFlag:
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

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def mean_or_none(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def rank_rng(state: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    """This rank's saved RNG state: its own when the checkpoint was written with the same world
    size, else rank 0's on every rank (after a world-size change the global streams cannot match the
    original run anyway; they feed only dropout, since sampling is seeded per step and rank)."""
    per_rank = state.get("rng_per_rank")
    if per_rank is not None and len(per_rank) == world_size:
        return per_rank[rank]
    return state["rng"]


def _mean_advantage(adv: float | list[float]) -> float:
    """A row's advantage for rollouts.jsonl: the value, or the mean of per-token advantages."""
    return sum(adv) / len(adv) if isinstance(adv, list) and adv else float(adv or 0.0)


def logprobs_of(completion: Any) -> list[float] | None:
    """The engine's sampled-token log-probs of a completion (vLLM sets ``logprobs``), else None."""
    lps = getattr(completion, "logprobs", None)
    return None if lps is None else [float(x) for x in lps]


def micro_mismatch(train_lp: Any, micro: list[Sample], mask: Any) -> tuple[float, dict[str, float]]:
    """``(masked token count, rewardlab.rollout.vllm.logprob_mismatch(...))`` for one micro-batch."""
    return float(mask.sum()), logprob_mismatch(train_lp, [s.rollout_logprobs or [] for s in micro], mask)


def combine_mismatch(parts: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Token-weighted means (max for the max) of per-micro-batch mismatch metrics."""
    total = sum(n for n, _ in parts)
    if total <= 0:
        return {}
    return {
        "rollout/logp_abs_diff": sum(n * m["rollout/logp_abs_diff"] for n, m in parts) / total,
        "rollout/logp_max_abs_diff": max(m["rollout/logp_max_abs_diff"] for n, m in parts if n > 0),
        "rollout/ratio_mean": sum(n * m["rollout/ratio_mean"] for n, m in parts) / total,
    }


def rollout_rows(step: int, samples: list[Sample], kept: list[Sample]) -> list[dict[str, Any]]:
    """The ``rollouts.jsonl`` rows of one step: every generated completion, kept (trained on) or dropped."""
    kept_ids = {id(s) for s in kept}
    return [
        {
            "step": step, "gen_round": s.gen_round, "group": s.group, "row_id": s.row.id,
            "prompt": s.prompt_text, "completion": s.text, "reference": _jsonable(s.row.reference),
            "reward": s.score, "components": s.components, "overlong_penalty": s.overlong,
            "advantage": _mean_advantage(s.advantage) if id(s) in kept_ids else None, "kept": id(s) in kept_ids,
            "finish_reason": s.finish_reason, "length": len(s.token_ids), "info": s.info,
            **({} if s.turns is None else {"answer": s.answer, "model_tokens": s.model_tokens,
                                           "tool_calls": s.tool_calls, "turns": turn_rows(s)}),
        }
        for s in samples
    ]


def turn_rows(s: Sample) -> list[dict[str, Any]]:
    """A tool rollout's turns for rollouts.jsonl: each model turn's sampled token ids, then its tool call
    (code, status, the observation's inserted token ids)."""
    out: list[dict[str, Any]] = []
    for turn in s.turns or []:
        a, b = turn["sampled"]
        out.append({"role": "model", "token_ids": s.token_ids[a:b]})
        if turn.get("feedback") is not None:  # --feedback: the critic's turn, inserted
            o0, o1 = turn["observation"]
            out.append({"role": "critic", "feedback": turn["feedback"], "token_ids": s.token_ids[o0:o1]})
        elif turn.get("observation") is not None:
            o0, o1 = turn["observation"]
            out.append({"role": "tool", "code": turn["code"], "status": turn["status"],
                        "truncated": turn.get("truncated", False), "token_ids": s.token_ids[o0:o1]})
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, (str, int, float, bool, type(None), list, dict)):
        return x
    return str(x)


__all__ = ["Batch", "Interrupted", "PromptStream", "Run", "Sample", "StopFlag", "build_reward", "default_threads", "run_dir_of",
           "seed_everything", "set_threads"]
