"""The log stage: one ``metrics.jsonl`` row per step (the names are API: docs/algorithms.md)."""

from __future__ import annotations

import math
import time
from typing import Any


from rewardlab import algos
from rewardlab.rewards import RewardResult
from rewardlab.rewards.judge import JUDGE_REWARDS, judge_metrics
from rewardlab.train import distributed
from rewardlab.train.feedback import critic_step, feedback_metrics
from rewardlab.train.memory import peak_gpu_mb, peak_rss_mb
from rewardlab.train.runtime import combine_mismatch, mean_or_none
from rewardlab.train.samples import Batch, Sample
from rewardlab.train.state import Run
from rewardlab.train.update import Update


def step_metrics(run: Run, batch: Batch, update: Update, t_step: float, cpu_step: float) -> dict[str, Any]:
    """One metrics.jsonl row (names are API: docs/algorithms.md)."""
    kept = batch.kept
    lengths = [s.model_tokens for s in kept]  # the model's own tokens (tool observations excluded)
    scores = [s.score for s in kept]
    mean_r = mean_or_none(scores) or 0.0
    metrics: dict[str, Any] = {
        "reward/mean": mean_r,
        "reward/std": math.sqrt(sum((x - mean_r) ** 2 for x in scores) / max(1, len(scores) - 1)),
    }
    for name in sorted({k for s in kept for k in s.components}):
        metrics[f"rewards/{name}/mean"] = mean_or_none([float(s.components[name]) for s in kept
                                                        if s.components.get(name) is not None])
    metrics.update(reward_status_counts(batch.generated, run.main_reward))
    metrics.update(judge_step_metrics(batch.generated, run.main_reward))
    metrics.update(gen_metrics(run, batch))
    metrics.update(tool_metrics(run, batch.generated))
    metrics.update(feedback_metrics(batch.generated, trained_critic=critic_step(run, batch.step)))
    metrics.update({
        "response_len/mean": mean_or_none([float(x) for x in lengths]),
        "response_len/min": min(lengths),
        "response_len/max": max(lengths),
        "truncation_rate": sum(s.finish_reason == "length" for s in kept) / len(kept),
        "overlong_penalty/mean": mean_or_none([s.overlong for s in kept]),
    })
    combined = algos.combine_metrics([m for part in distributed.gather_objects(update.loss_metrics) for m in part])
    for k in ("loss", "pg_loss"):  # summed per optimizer step; report the mean over them
        if k in combined:
            combined[k] /= max(1, len(update.grad_norms))  # optimizer steps taken (fewer on a partial batch)
    combined.pop("tokens", None)
    combined.pop("seqs", None)
    metrics.update(combined)
    if update.mismatch_on:
        metrics.update(combine_mismatch([x for part in distributed.gather_objects(update.mismatch) for x in part]))
    if update.correction:  # --- rollout correction (--correction): verl's metric names, token-weighted over ranks ---
        parts = [x for part in distributed.gather_objects(update.correction) for x in part]
        total = sum(n for n, _ in parts) or 1.0
        for name in sorted({k for _, m in parts for k in m}):
            metrics[f"rollout_corr/{name}"] = sum(n * m.get(name, 0.0) for n, m in parts) / total
    for obj in (run.clip_adapt, run.reward_norm):  # the write-ups' options: their state, every step
        if obj is not None:
            metrics.update(obj.metrics())
    if run.group_sizes is not None:
        sizes: dict[int, int] = {}
        for s in kept:
            sizes[s.group] = sizes.get(s.group, 0) + 1
        metrics.update({"group_size/mean": sum(sizes.values()) / len(sizes), "group_size/max": max(sizes.values()),
                        "group_size/min": min(sizes.values())})
    metrics["memory/peak_rss_mb"] = peak_rss_mb()
    if (gpu := peak_gpu_mb(run.device)) is not None:
        metrics["memory/peak_gpu_mb"] = gpu
    for key in ("rss_mb", "gpu_mb"):  # the update's largest micro-batch peak (the token budget bounds it)
        if update.micro_peaks and key in update.micro_peaks[0]:
            metrics[f"memory/micro_batch_peak_{key}"] = max(p[key] for p in update.micro_peaks)
    if run.cfg.packing == "auto":  # the layout this step ran in: a trial, then the one chosen
        metrics["packing/layout"] = update.layout
    metrics["grad_norm"] = mean_or_none(update.grad_norms)
    metrics["lr"] = run.scheduler.get_last_lr()[0]
    metrics.update(batch.timings)
    metrics["time/step"] = time.perf_counter() - t_step
    metrics["time/step_cpu"] = time.process_time() - cpu_step  # this process's CPU seconds (shared machines)
    metrics["tokens/s"] = batch.generated_tokens / max(1e-9, batch.timings["time/generate"])
    return metrics


def reward_status_counts(samples: list[Sample], main_reward: str) -> dict[str, int]:
    """``rewards/<component>/status/<status>``: how many generated completions (every generation round)
    each component graded with each non-``ok`` status, the scheme of ``rewards.combine.reward_metrics``."""
    counts: dict[str, int] = {}
    for s in samples:
        for name, info in (s.info.get("component_info") or {main_reward: s.info}).items():
            status = str((info or {}).get("status", "ok"))
            if status != "ok":
                counts[f"rewards/{name}/status/{status}"] = counts.get(f"rewards/{name}/status/{status}", 0) + 1
    return dict(sorted(counts.items()))


def judge_step_metrics(samples: list[Sample], main_reward: str) -> dict[str, Any]:
    """``judge/*`` over every generated completion (every generation round) when the main reward is a
    judge (``--reward judge`` / ``hybrid``, or any reward whose results say ``judged``), else {}: the
    judged share, cache hits and hit rate, token totals, HTTP attempts, latency p50/max and
    ``judge/status/<status>`` counts (``judge_error``, ``judge_timeout``, ...), from
    :func:`rewardlab.rewards.judge.judge_metrics`; a figure with nothing to measure is None."""
    infos = [(s.info.get("component_info") or {main_reward: s.info}).get(main_reward) or {} for s in samples]
    if main_reward not in JUDGE_REWARDS and not any("judged" in info for info in infos):
        return {}
    out = judge_metrics(RewardResult(None, info) for info in infos)
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}


def tool_metrics(run: Run, samples: list[Sample]) -> dict[str, Any]:
    """``tools/*`` over every generated tool rollout or environment episode ({} without either): how often and how
    well the tools were used (a call: a turn's python block, or one ``<tool_call>`` of an episode's turn)."""
    trajs = [s for s in samples if s.turns is not None]
    episodes = [c for s in trajs for t in s.turns for c in t.get("calls") or []]
    if (run.cfg.tools == "none" and not any("calls" in t for s in trajs for t in s.turns)) or not trajs:
        return {}
    calls = [t for s in trajs for t in s.turns if t.get("code") is not None] + episodes
    out: dict[str, Any] = {
        "tools/calls_mean": sum(s.tool_calls for s in trajs) / len(trajs),
        "tools/use_rate": sum(s.tool_calls > 0 for s in trajs) / len(trajs),
        "tools/ok_rate": (sum(t["status"] == "ok" for t in calls) / len(calls)) if calls else None,
        "tools/turns_mean": sum(len(s.turns) for s in trajs) / len(trajs),
        "tools/max_turns_rate": sum(s.finish_reason == "max_turns" for s in trajs) / len(trajs),
        "tools/observation_tokens_mean": sum(len(s.token_ids) - s.model_tokens for s in trajs) / len(trajs),
    }
    for status in sorted({str(t["status"]) for t in calls} - {"ok"}):
        out[f"tools/status/{status}"] = sum(str(t["status"]) == status for t in calls)
    return out


def gen_metrics(run: Run, batch: Batch) -> dict[str, Any]:
    """What generation cost this step (it differs from a plain step only under dynamic sampling);
    ``completions/branches``: earlier branches of environment traces trained beside the kept completions
    (``branches=all``; absent when none)."""
    branches = sum(len(s.branches) for s in batch.kept)
    return ({"completions/branches": branches} if branches else {}) | {
        "num_gen_batches": batch.gen_round,
        "completions/generated": len(batch.generated),
        "completions/kept": len(batch.kept),
        "gen_budget_exhausted": int(len(batch.kept) < batch.target),
        "skipped": int(not batch.kept),
        "reward/generated_mean": mean_or_none([s.score for s in batch.generated]),
        "frac_zero_std_groups": batch.groups_zero_std / max(1, batch.groups_seen),
        "logprob_support": run.behaviour.support,  # the convention every log-prob of the step is under
    }


__all__ = ["gen_metrics", "judge_step_metrics", "tool_metrics", "reward_status_counts", "step_metrics"]
