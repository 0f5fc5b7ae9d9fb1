"""The run's state, typed: a frozen :class:`Plan` (what was decided before any model loads), a
:class:`Trainer` (what was built from it) and :class:`Run`, the two with the run's logs, which every
stage takes. :mod:`rewardlab.train.build` makes them; nothing here is ``None`` unless the run has no
such part (no reference model without a KL term, no critic without PPO, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rewardlab.algos import Algo
from rewardlab.algos.correction import Correction
from rewardlab.algos.extras import AdaptiveClip, EmaRewardNorm, GroupSizePolicy
from rewardlab.logging import MetricsLogger
from rewardlab.rewards.base import Reward, RewardResult
from rewardlab.rewards.pool import score_batch
from rewardlab.rollout.base import Completion, RolloutEngine, SamplingParams
from rewardlab.tasks import Row
from rewardlab.train.config import TrainConfig
from rewardlab.train.sizes import Derived, Layouts
from rewardlab.train.critic import ValueModel
from rewardlab.train.distributed import DistInfo
from rewardlab.train.logprobs import FrozenPrefix, packed_logprobs, shared_prompt_logprobs
from rewardlab.train.samples import PromptStream, RolloutLog, Sample

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def run_sampling(cfg: TrainConfig, *, seed: int | None = None, max_new_tokens: int | None = None) -> SamplingParams:
    """The run's sampling settings, which are also its behaviour distribution: every log-prob of the run (the
    engines' recorded ones, the trainer's current / old / reference ones, the entropy) is under it
    (:mod:`rewardlab.rollout.behaviour`)."""
    return SamplingParams(max_new_tokens=max_new_tokens or cfg.max_new_tokens, temperature=cfg.temperature,
                          top_p=cfg.top_p, top_k=cfg.top_k, support=cfg.logprob_support, seed=seed)


@dataclass(frozen=True)
class Plan:
    """Everything decided before a model loads: settings, algorithm, sizes, ranks, paths, the resume point."""

    cfg: TrainConfig
    algo: Algo
    """The algorithm in force (``resolve_algo(cfg)``, resolved once)."""
    sizes: Derived
    dist: DistInfo
    device: torch.device
    run_dir: Path
    rows: list[Row]
    """The task's training rows."""
    reward_fn: Reward
    main_reward: str
    """The name of the task reward among the reward's components."""
    ckpt: Path | None
    """The checkpoint resumed from (None: a fresh run)."""
    state: dict[str, Any] | None
    """That checkpoint's trainer state (optimizer, scheduler, RNG, data position, options)."""
    start_step: int
    correction: Correction | None
    """``--correction``: the rollout correction in force (None = off)."""
    layouts: Layouts
    """The layout of each update step (``--packing``; ``auto`` measures them on the first steps)."""

    @property
    def main(self) -> bool:
        return self.dist.is_main

    def say(self, msg: str) -> None:
        if self.main:
            print(msg, flush=True)


@dataclass(frozen=True)
class Options:
    """The write-ups' stateful options (docs/algorithms.md, "Ideas from popular descriptions"); None = off."""

    clip_adapt: AdaptiveClip | None = None
    """``--clip-adapt kl``: the KL-adaptive clip range."""
    reward_norm: EmaRewardNorm | None = None
    """``--reward-norm ema``: the global EMA reward normaliser."""
    group_sizes: GroupSizePolicy | None = None
    """``--group-size-policy variance``: per-prompt group sizes."""

    def states(self) -> dict[str, Any]:
        """The options on, by name: what a checkpoint carries."""
        named = {"clip_adapt": self.clip_adapt, "reward_norm": self.reward_norm, "group_sizes": self.group_sizes}
        return {k: v for k, v in named.items() if v is not None}


@dataclass(frozen=True)
class Critic:
    """PPO's value model and its own optimizer."""

    model: ValueModel
    optimizer: torch.optim.Optimizer


@dataclass(frozen=True)
class Sampler:
    """How the stages call the engine, chosen once at setup: under FSDP with the HF engine the full weights
    are gathered while it samples; with ``--feedback`` the critic is shown each row's question."""

    engine: RolloutEngine
    gather: Callable[[], AbstractContextManager[Any]]
    question: Callable[[Row], str] | None = None
    rows: bool = False
    """The engine opens each prompt's episodes on its row (a multi-turn environment's episode engine)."""

    def __call__(self, prompts: list[str], rows: list[Row], n: int, sampling: SamplingParams) -> list[Completion]:
        """``n`` completions of each prompt (``rows[i]`` is prompt i's row), prompt-major."""
        with self.gather():
            if self.question is not None:
                return self.engine.generate(prompts, n, sampling, questions=[self.question(r) for r in rows])
            if self.rows:
                return self.engine.generate(prompts, n, sampling, rows=rows)
            return self.engine.generate(prompts, n, sampling)


@dataclass(frozen=True)
class Trainer:
    """What the plan built: the policy and its tokenizer, the reference, optimizer and schedule, the
    rollout engine, PPO's critic, the options, and the prompt stream (at the resume point)."""

    model: torch.nn.Module
    """The training model (PEFT-wrapped with LoRA, FSDP2-sharded under torchrun)."""
    tok: PreTrainedTokenizerBase
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    engine: RolloutEngine
    sampler: Sampler
    render: Callable[[Row], str]
    """A row's prompt as the model sees it (system prompt, tool hint, chat template)."""
    stream: PromptStream
    ref_model: torch.nn.Module | None = None
    """The frozen reference, only when the KL term (or DPO) needs it."""
    prefix: FrozenPrefix | None = None
    """``--train-top-layers`` off-policy: the frozen blocks' output replayed across optimizer steps."""
    autocast: torch.autocast | None = None
    """bf16 autocast on CUDA with ``--dtype auto``."""
    critic: Critic | None = None
    options: Options = field(default_factory=Options)
    grade_first: Callable[[Run, list[Sample]], None] | None = None
    """``--feedback``: grade each sample's first answer too (``rewardlab.train.feedback.grade_first_attempts``)."""
    multiturn: Any = None
    """How the training rollouts' engine is wrapped for multi-turn rollouts (``rewardlab.train.build.Multiturn``;
    None: single-turn): the ``--async-steps`` worker wraps its own engine so."""


@dataclass(frozen=True)
class Run:
    """What the stages share: the plan, the trainer, and the run's logs. The plan's and the trainer's
    fields read as the run's own (``run.cfg``, ``run.model``, ...)."""

    plan: Plan
    trainer: Trainer
    log: MetricsLogger
    rollout_log: RolloutLog

    @property
    def cfg(self) -> TrainConfig:
        return self.plan.cfg

    @property
    def algo(self) -> Algo:
        return self.plan.algo

    @property
    def sizes(self) -> Derived:
        return self.plan.sizes

    @property
    def dist(self) -> DistInfo:
        return self.plan.dist

    @property
    def packing(self) -> str:
        """The micro-batch layout of this update step (a key of :data:`rewardlab.train.sizes.LAYOUT_COST`)."""
        return self.plan.layouts.current

    @property
    def device(self) -> torch.device:
        return self.plan.device

    @property
    def run_dir(self) -> Path:
        return self.plan.run_dir

    @property
    def behaviour(self) -> SamplingParams:
        """The distribution every log-prob of the run is under (:func:`run_sampling`)."""
        return run_sampling(self.cfg)

    @property
    def rows(self) -> list[Row]:
        return self.plan.rows

    @property
    def reward_fn(self) -> Reward:
        return self.plan.reward_fn

    @property
    def main_reward(self) -> str:
        return self.plan.main_reward

    @property
    def state(self) -> dict[str, Any] | None:
        return self.plan.state

    @property
    def start_step(self) -> int:
        return self.plan.start_step

    @property
    def correction(self) -> Correction | None:
        return self.plan.correction

    @property
    def main(self) -> bool:
        return self.plan.main

    @property
    def model(self) -> torch.nn.Module:
        return self.trainer.model

    @property
    def tok(self) -> PreTrainedTokenizerBase:
        return self.trainer.tok

    @property
    def ref_model(self) -> torch.nn.Module | None:
        return self.trainer.ref_model

    @property
    def prefix(self) -> FrozenPrefix | None:
        return self.trainer.prefix

    @property
    def autocast(self) -> torch.autocast | None:
        return self.trainer.autocast

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.trainer.optimizer

    @property
    def scheduler(self) -> torch.optim.lr_scheduler.LambdaLR:
        return self.trainer.scheduler

    @property
    def engine(self) -> RolloutEngine:
        return self.trainer.engine

    @property
    def stream(self) -> PromptStream:
        return self.trainer.stream

    @property
    def clip_adapt(self) -> AdaptiveClip | None:
        return self.trainer.options.clip_adapt

    @property
    def reward_norm(self) -> EmaRewardNorm | None:
        return self.trainer.options.reward_norm

    @property
    def group_sizes(self) -> GroupSizePolicy | None:
        return self.trainer.options.group_sizes

    @property
    def critic(self) -> ValueModel | None:
        """PPO's value model (None without a critic)."""
        return None if self.trainer.critic is None else self.trainer.critic.model

    @property
    def critic_opt(self) -> torch.optim.Optimizer | None:
        return None if self.trainer.critic is None else self.trainer.critic.optimizer

    def logprobs(self, model: Any, micro: list[Sample], *, grad: bool = False, with_entropy: bool = False,
                 prefix: FrozenPrefix | None = None) -> tuple[Any, Any, Any]:
        """``(lp (B, R), entropy (B, R) or None, frozen-prefix hidden or None)`` of a micro-batch's response tokens
        under the run's behaviour distribution, in the ``--packing`` layout: padded rows with each distinct prompt
        run once (none), one packed row (sequences), or each prompt once followed by its responses (groups)."""
        kw = dict(autocast=self.autocast, grad=grad, with_entropy=with_entropy, behaviour=self.behaviour)
        if self.packing == "none":
            return shared_prompt_logprobs(model, micro, self.tok.pad_token_id, self.device, prefix=prefix, **kw)
        return (*packed_logprobs(model, micro, self.device, groups=self.packing == "groups", **kw), None)

    def grade(self, rows: list[Row], texts: list[str], reward: Reward | None = None,
              episodes: list[dict | None] | None = None) -> list[RewardResult]:
        """The run's one grading path (the loop's rewards, the feedback critic's first answers, ``--eval-every``):
        ``reward`` (default the run's) of each text against its row's reference, with the row's meta (its
        ``reward`` name dropped) and, for an environment's episodes, the episode's verdict (``episode``), in the
        reward pool under ``--reward-deadline`` and ``--reward-workers``."""
        metas = [{k: v for k, v in (row.meta or {}).items() if k != "reward"} for row in rows]
        for meta, episode in zip(metas, episodes or []):
            if episode is not None:
                meta["episode"] = episode
        return score_batch(self.reward_fn if reward is None else reward, texts, [row.reference for row in rows],
                           metas, deadline=self.cfg.reward_deadline, workers=self.cfg.reward_workers)

    def say(self, msg: str) -> None:
        self.plan.say(msg)


__all__ = ["Critic", "Options", "Plan", "Run", "Sampler", "Trainer", "run_sampling"]
