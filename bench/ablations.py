"""Every preset (and rollout correction under a simulated engine mismatch) on one task at one budget.

Each run is rewardlab's real loop (``rewardlab.train.train``) with the same model, task, prompts,
P x G, max new tokens, learning rate and steps; only ``--algo`` (or the correction) changes.
Several seeds per row; the table prints the gain (mean task reward of the last 3 steps minus the
first 3, over every generated completion) as mean +- sd over seeds, and the median seconds per step.

    .venv/bin/python bench/ablations.py --model tiny --seeds 0,1,2              # all presets, ~4 min
    .venv/bin/python bench/ablations.py --model embedded --presets grpo,rloo,cispo --seeds 0,1,2
    .venv/bin/python bench/ablations.py --model tiny --mismatch 2.0 --seeds 0,1,2
    .venv/bin/python bench/ablations.py --model tiny --options --lr 2e-3 --seeds 0,1,2   # the write-ups' ideas

``--options``: each idea of docs/algorithms.md "Ideas from popular descriptions" against its base
preset (a critic with GAE, the group-mean value term, KL-adaptive clip, EMA reward normalisation,
variance-driven group size, the best-of-group NLL, online DPO), on 8 prompts that recur every 2
steps (so per-prompt statistics have something to track).

Tasks: as ``bench/learning.py`` (``letters`` on the tiny random model, ``strict`` arith on the
embedded SmolLM2-135M-Instruct).

``--mismatch TEMP``: the engine samples at temperature TEMP while the trainer's policy is the
model at temperature 1 (the trainer does not divide logits by the temperature), which is a real
engine/trainer mismatch: the samples come from another policy than the one whose gradient is
taken. The HF engine reports the log-probs of the distribution it sampled from, so rollout
correction sees the gap. Rows: no correction at temperature 1 (reference), no correction at TEMP,
and TEMP with each correction of ``--corrections``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# (bench/learning.py: the same tasks)
from learning import _Reward, embedded_model_dir, letters_score, strict_score  # noqa: E402

strict = _Reward("strict", strict_score)
letters = _Reward("letters", letters_score)


def run(model_dir: str, args: argparse.Namespace, seed: int, work: Path, algo: str, **over) -> dict:
    from rewardlab.logging import read_jsonl
    from rewardlab.train import build_config, train

    tag = "-".join([algo, *(f"{k}={v}" for k, v in sorted(over.items())), str(seed)])
    out = work / tag
    settings = {
        "algo": algo, "model": model_dir, "task": "arith", "steps": args.steps,
        "prompts_per_step": args.prompts, "group_size": args.group, "max_new_tokens": args.max_new_tokens,
        "micro_batch_size": args.prompts * args.group, "rollout_batch_size": args.prompts * args.group,
        "lr": args.lr, "train_top_layers": 0, "overlong_weight": 0, "reward": f"{__name__}.{args.task}",
        "reward_workers": 1, "threads": args.threads, "output_dir": str(out), "progress": False, "plots": False,
        "save_every": 10_000, "seed": seed, "max_gen_batches": 2,
    }
    if args.task_limit:
        settings["task_limit"] = args.task_limit
    settings.update(over)
    with contextlib.redirect_stdout(io.StringIO()):
        train(build_config(None, settings))
    by_step: dict[int, list[float]] = {}
    for r in read_jsonl(out / "rollouts.jsonl"):
        by_step.setdefault(int(r["step"]), []).append(float(r["components"][f"{__name__}.{args.task}"] or 0.0))
    metrics = read_jsonl(out / "metrics.jsonl")
    curve = [statistics.fmean(v) for _, v in sorted(by_step.items())]
    extra = {k: statistics.fmean(float(m[k]) for m in metrics if k in m)
             for k in ("rollout_corr/kl", "rollout_corr/rollout_is_mean", "rollout_corr/rollout_rs_masked_fraction")
             if any(k in m for m in metrics)}
    return {"curve": curve, "gain": statistics.fmean(curve[-3:]) - statistics.fmean(curve[:3]),
            "s_per_step": statistics.median(float(m["time/step"]) for m in metrics),
            "generated_per_step": statistics.fmean(float(m["completions/generated"]) for m in metrics), **extra}


def mean_sd(xs: list[float]) -> str:
    return f"{xs[0]:+.3f}" if len(xs) == 1 else f"{statistics.fmean(xs):+.3f} +- {statistics.stdev(xs):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny (random 2-block qwen2), embedded, or a model folder")
    ap.add_argument("--presets", help="comma-separated --algo names (default: every preset)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--mismatch", type=float, help="sampling temperature for the mismatch study (skips the presets)")
    ap.add_argument("--base", default="grpo", help="the preset the mismatch study runs")
    ap.add_argument("--corrections", default="decoupled_token_is,decoupled_seq_is_rs,decoupled_token_icepop,"
                    "bypass_ppo_clip,bypass_pg_is", help="rollout-correction presets of the mismatch study")
    ap.add_argument("--options", action="store_true", help="the write-ups' options against their base presets")
    ap.add_argument("--task-limit", type=int, help="train on the first N task rows (default: all; --options: 8)")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int)
    ap.add_argument("--max-new-tokens", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write every number to this file")
    args = ap.parse_args()
    tiny = args.model == "tiny"
    for k, v in dict(group=8 if tiny else 4, max_new_tokens=8 if tiny else 32, steps=20 if tiny else 8,
                     lr=1e-2 if tiny else 3e-5).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.task = "letters" if tiny else "strict"
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rewardlab.algos import PRESETS
    from rewardlab.train import set_threads

    set_threads(args.threads)
    import torch

    if args.options and args.task_limit is None:
        args.task_limit = 8
    if args.options:
        rows = [("grpo (base)", "grpo", {}),
                ("ppo: separate critic, GAE", "ppo", {}),
                ("ppo + value_group_coef 0.1", "ppo", {"value_group_coef": 0.1}),
                ("grpo + shared critic, GAE (no group z-score)", "grpo", {"advantage": "gae", "critic": "shared"}),
                ("grpo + clip_adapt kl", "grpo", {"clip_adapt": "kl"}),
                ("grpo + group_size_policy variance (2..16)", "grpo",
                 {"group_size_policy": "variance", "group_size_warmup": 2, "group_size_threshold": 0.002}),
                ("grpo + bog_coef 0.1", "grpo", {"bog_coef": 0.1}),
                ("dpo (online, group best vs worst)", "dpo", {}),
                ("dr_grpo (base)", "dr_grpo", {}),
                ("dr_grpo + reward_norm ema", "dr_grpo", {"reward_norm": "ema"})]
    elif args.mismatch is not None:
        rows = [(f"{args.base}, temperature 1.0, no correction", args.base, {"temperature": 1.0}),
                (f"{args.base}, temperature {args.mismatch:g}, no correction", args.base,
                 {"temperature": args.mismatch})]
        rows += [(f"{args.base}, temperature {args.mismatch:g}, --correction {c}", args.base,
                  {"temperature": args.mismatch, "correction": c}) for c in args.corrections.split(",") if c]
    else:
        names = args.presets.split(",") if args.presets else list(PRESETS)
        rows = [(name, name, {}) for name in names]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if tiny:
            from rewardlab.testing import build_tiny_model

            model_dir, desc = str(build_tiny_model(work / "tiny")), "random tiny qwen2 (64 wide, 2 blocks)"
        elif args.model == "embedded":
            model_dir, desc = embedded_model_dir()
        else:
            model_dir = desc = args.model
        config = {"model": desc, "task": args.task, "prompts x group": f"{args.prompts} x {args.group}",
                  "max_new_tokens": args.max_new_tokens, "lr": args.lr, "task_limit": args.task_limit,
                  "steps": args.steps, "seeds": seeds,
                  "threads": args.threads, "torch": torch.__version__,
                  "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "command": " ".join(sys.argv)}
        print("configuration")
        for k, v in config.items():
            print(f"  {k:<16} {v}")
        sys.stdout.flush()
        results: dict[str, list[dict]] = {}
        for label, algo, over in rows:
            results[label] = [run(model_dir, args, seed, work, algo, **over) for seed in seeds]
            r = results[label]
            extra = "".join(f"  {k.split('/')[-1]} {statistics.fmean(x[k] for x in r):.3f}"
                            for k in r[0] if k.startswith("rollout_corr/"))
            print(f"  {label:<58} gain {mean_sd([x['gain'] for x in r]):>16}   s/step "
                  f"{statistics.fmean(x['s_per_step'] for x in r):5.2f}   completions/step "
                  f"{statistics.fmean(x['generated_per_step'] for x in r):5.1f}{extra}")
            sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps({"config": config, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
