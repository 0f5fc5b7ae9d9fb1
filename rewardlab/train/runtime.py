"""The run's plumbing, kept out of the loop's page: the reward a run grades with, the run folder's name,
this rank's RNG state on resume, the engine-vs-trainer log-prob mismatch.

The rest of the plumbing has a module per subject: :mod:`~rewardlab.train.state` (``Plan``, ``Trainer``,
``Run``), :mod:`~rewardlab.train.samples` (``PromptStream``, ``Sample``, ``Batch``, rollout rows),
:mod:`~rewardlab.train.process` (threads, seeds, Ctrl-C, out-of-memory errors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rewardlab import envs
from rewardlab.errors import RewardlabError
from rewardlab.models import DEFAULT_MODEL
from rewardlab.rewards import get_reward
from rewardlab.rewards.combine import Combined
from rewardlab.rewards.judge import JUDGE_REWARDS, build_judge
from rewardlab.rollout.vllm import logprob_mismatch  # imports torch only; vLLM itself loads when an engine starts
from rewardlab.train.config import TrainConfig, judge_of
from rewardlab.train.samples import Sample


def build_reward(cfg: TrainConfig, rows: list[Any]) -> tuple[Any, str]:
    """The reward the run scores with: the task's (or --reward) main reward, plus optional format
    component, combined with weights. Returns ``(reward, main component name)``. ``--reward judge``
    (or ``hybrid``: ``--judge-rule`` first) is an LLM judge built from the ``--judge-*`` settings."""
    name = cfg.reward or (rows[0].meta or {}).get("reward")
    if not name:
        raise RewardlabError(f"task {cfg.task!r} names no default reward; pass --reward math (or code, or a dotted "
                             "path)")
    if name in JUDGE_REWARDS:
        main = build_judge(name, judge_of(cfg))
    else:
        main = get_reward(name)
        if not cfg.reward and isinstance(getattr(main, "name", None), str):
            name = main.name  # a row's scorer (an environment's, by dotted path) names its metrics: rewards/openenv/...
    if cfg.format_weight == 0:
        return main, name
    parts = {name: (main, 1.0), "format": (get_reward("format"), cfg.format_weight)}
    return Combined(parts), name


def run_dir_of(cfg: TrainConfig) -> Path:
    """The run directory: ``--output-dir``, else ``runs/<algo>-<task>-<model>``."""
    return Path(cfg.output_dir or Path("runs") / run_name(cfg))


def run_name(cfg: TrainConfig) -> str:
    """``<algo>-<task>-<model>``: runs of different models never share a default run directory
    (``runs/x/checkpoints/step-000020`` as the model reads ``x-step-000020``)."""
    model = Path(str(cfg.model or DEFAULT_MODEL).rstrip("/\\"))
    tag = model.name or "model"
    if model.parent.name == "checkpoints" and model.parent.parent.name:
        tag = f"{model.parent.parent.name}-{tag}"
    task = Path(cfg.task).name if cfg.task.endswith((".jsonl", ".jsonl.gz")) else cfg.task
    task = envs.short_name(task) if envs.is_env(task) else task
    return f"{cfg.algo}-{task}-{tag}".replace("/", "_").replace(":", "_")


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


def micro_mismatch(train_lp: torch.Tensor, micro: list[Sample], mask: torch.Tensor) -> tuple[float, dict[str, float]]:
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


__all__ = ["build_reward", "combine_mismatch", "mean_or_none", "micro_mismatch", "rank_rng", "run_dir_of"]
