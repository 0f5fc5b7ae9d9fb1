"""Seconds per step and reward curves of ``rewardlab train --async-steps k`` for k = 0, 1, 2, over seeds, one run.

Every run is the same ``rewardlab train`` (the CLI, one process each) on the embedded
SmolLM2-135M-Instruct (``--model`` unset) and the ``arith`` task, GRPO without KL, with
``--correction decoupled_token_is`` for every k (so k = 0 pays the same old-log-prob forward), one
torch thread for the trainer and one for the generation worker. Only ``--async-steps`` and the seed
change. Per run: the median of ``time/step`` over the steps after the first (the first pays for the
worker's start), of the trainer process's CPU seconds (``time/step_cpu``; generation leaves it for
k >= 1), of ``time/generate`` (the engine's seconds, in the worker for k >= 1) and ``time/update``,
the ``reward/mean`` curve, and the mean ``async/overlap``; per k: mean and standard deviation over
seeds, and the speed ratio against k = 0 (above 1: faster). On a machine shared with other jobs
the wall-clock ratio measures the load as much as the overlap: k >= 1 needs a second free core.

    .venv/bin/python bench/async.py                                 # 3 seeds x k = 0, 1, 2, 6 steps
    .venv/bin/python bench/async.py --steps 4 --prompts 4 --seeds 0,1,2 --json async.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_one(k: int, seed: int, args: argparse.Namespace, work: Path) -> dict:
    """One training run; its per-step figures from metrics.jsonl."""
    out = work / f"k{k}-seed{seed}"
    cmd = [sys.executable, "-m", "rewardlab", "train", "--algo", "grpo", "--beta", "0", "--task", "arith",
           "--steps", str(args.steps), "--prompts-per-step", str(args.prompts), "--group-size", str(args.group),
           "--max-new-tokens", str(args.tokens), "--micro-batch-size", str(args.prompts * args.group),
           "--correction", "decoupled_token_is", "--async-steps", str(k), "--threads", str(args.threads),
           "--seed", str(seed), "--output-dir", str(out), "--progress", "false", "--plots", "false",
           "--save-every", str(args.steps)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    if proc.returncode != 0:
        raise SystemExit(f"k={k} seed={seed} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    later = rows[1:] or rows
    return {"k": k, "seed": seed, "s_per_step": statistics.median(r["time/step"] for r in later),
            "cpu_per_step": statistics.median(r["time/step_cpu"] for r in later),
            "gen_s": statistics.median(r["time/generate"] for r in later),
            "update_s": statistics.median(r["time/update"] for r in later), "wall_s": time.perf_counter() - t0,
            "reward": [r["reward/mean"] for r in rows],
            "overlap": statistics.mean(r.get("async/overlap", 0.0) for r in rows[1:]) if len(rows) > 1 else 0.0,
            "staleness_max": max(r.get("async/staleness_max", 0.0) for r in rows)}


def _ms(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def table(runs: list[dict], ks: list[int]) -> str:
    """Per k: s/step, the k / k=0 speed ratio, reward first/last step and gain, overlap; mean +- sd over seeds."""
    lines = [f"{'k':>2}  {'s/step':>13}  {'speed vs k=0':>12}  {'trainer cpu':>11}  {'gen s':>5}  {'update s':>8}  "
             f"{'reward step 1':>13}  {'reward last':>13}  {'gain':>13}  {'overlap':>7}  {'staleness max':>13}"]
    base = _ms([r["s_per_step"] for r in runs if r["k"] == ks[0]])[0]
    for k in ks:
        mine = [r for r in runs if r["k"] == k]
        s, s_sd = _ms([r["s_per_step"] for r in mine])
        first, first_sd = _ms([r["reward"][0] for r in mine])
        last, last_sd = _ms([r["reward"][-1] for r in mine])
        gain, gain_sd = _ms([statistics.mean(r["reward"][-2:]) - statistics.mean(r["reward"][:2]) for r in mine])
        cpu, gen, upd = (statistics.mean(r[f] for r in mine) for f in ("cpu_per_step", "gen_s", "update_s"))
        lines.append(f"{k:>2}  {s:6.2f} +- {s_sd:4.2f}  {base / s:11.2f}x  {cpu:11.2f}  {gen:5.2f}  {upd:8.2f}  "
                     f"{first:5.3f} +- {first_sd:4.3f}  "
                     f"{last:5.3f} +- {last_sd:4.3f}  {gain:+5.3f} +- {gain_sd:4.3f}  "
                     f"{statistics.mean(r['overlap'] for r in mine):7.2f}  "
                     f"{max(r['staleness_max'] for r in mine):13.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="0,1,2", help="--async-steps values (the first is the baseline)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args(argv)
    ks, seeds = [int(x) for x in args.ks.split(",")], [int(x) for x in args.seeds.split(",")]
    print(f"bench/async.py: embedded SmolLM2-135M-Instruct, arith, grpo (beta 0) + decoupled_token_is, "
          f"{args.prompts} x {args.group} completions, {args.tokens} new tokens, {args.steps} steps, "
          f"{args.threads} thread(s) per process, {os.cpu_count()} cores, {platform.processor() or platform.machine()}")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:  # interleaved, so a load change on the machine hits every k alike
            for k in ks:
                r = run_one(k, seed, args, Path(tmp))
                runs.append(r)
                print(f"  k={k} seed={seed}: {r['s_per_step']:.2f} s/step, overlap {r['overlap']:.2f}, "
                      f"reward {' '.join(f'{x:.2f}' for x in r['reward'])}", flush=True)
    print(table(runs, ks))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
