"""Which rollout correction should ``--async-steps k`` use by default? A mismatch study, one run.

Every run is the real loop (``rewardlab.train.train``) on a tiny random model (``rewardlab.testing``)
and the ``arith`` prompts, 4 prompts x 8 completions of at most 8 tokens, lr 1e-2, 20 steps: the
setting of ``tests/test_learning.py``, where the policy moves fast, so one step of staleness is a
large behaviour/target gap. The reward is ``rewardlab.testing.letters`` (the share of lowercase
letters, which a random model starts near 0.4 on). Per (k, correction, seed) it records:

* **gain**: the letter score, mean of the last 3 steps minus the first 3 (every generated completion);
* **mismatch** between the engine's (behaviour) log-probs and the trainer's pi_old, per token:
  ``rollout/logp_abs_diff`` (mean |log pi_old - log pi_engine|) and, where a correction is on,
  verl's ``rollout_corr/kl`` and ``rollout_corr/chi2_token``;
* ``rollout_corr/rollout_is_mean`` and the share of tokens the correction masked or clipped.

Per (k, correction): mean and standard deviation over the seeds; k = 0 without correction is the
synchronous reference. Prints a table and writes ``--json`` (with how it was made).

    .venv/bin/python bench/async_mismatch.py                                   # k = 0, 1, 2; 5 corrections; 3 seeds
    .venv/bin/python bench/async_mismatch.py --ks 1 --corrections none,decoupled_token_is --seeds 0,1,2,3,4
    .venv/bin/python bench/async_mismatch.py --temperature 0.7 --top-p 0.9 --supports kept,full   # the two conventions
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

STEPS = 20


def run_one(model: Path, work: Path, k: int, correction: str, seed: int, steps: int, sampling: dict) -> dict:
    """One training run; its letter-score gain and mean mismatch figures."""
    from rewardlab.testing import letter_fraction
    from rewardlab.train import build_config, train

    out = work / f"k{k}-{correction}-{sampling['logprob_support']}-seed{seed}"
    settings = {
        "model": str(model), "output_dir": str(out), "algo": "grpo", "task": "arith", "task_limit": 64,
        "steps": steps, "prompts_per_step": 4, "group_size": 8, "max_new_tokens": 8, "lr": 1e-2,
        "train_top_layers": 0, "reward": "rewardlab.testing.letters", "reward_workers": 1, "threads": 1,
        "progress": False, "plots": False, "seed": seed, "save_every": 1000, "async_steps": k, **sampling,
    }
    if correction != "none":
        settings["correction"] = correction
    t0 = time.perf_counter()
    train(build_config(None, settings))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    gens = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines() if line.strip()]
    by_step: dict[int, list[float]] = {}
    for r in gens:
        by_step.setdefault(r["step"], []).append(letter_fraction(r["completion"]))
    curve = [statistics.mean(v) for _, v in sorted(by_step.items())]

    def mean_of(name: str) -> float | None:
        xs = [r[name] for r in rows if name in r]
        return statistics.mean(xs) if xs else None

    return {"k": k, "correction": correction, "support": sampling["logprob_support"], "seed": seed,
            "clip_frac": mean_of("clip_frac"), "gain": sum(curve[-3:]) / 3 - sum(curve[:3]) / 3,
            "curve": curve, "logp_abs_diff": mean_of("rollout/logp_abs_diff"), "kl": mean_of("rollout_corr/kl"),
            "chi2_token": mean_of("rollout_corr/chi2_token"), "is_mean": mean_of("rollout_corr/rollout_is_mean"),
            "staleness_mean": mean_of("async/staleness_mean") or 0.0, "wall_s": time.perf_counter() - t0}


def _ms(xs: list[float | None]) -> str:
    vals = [x for x in xs if x is not None]
    if not vals:
        return "-"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.mean(vals):+.3f} +- {sd:.3f}" if len(vals) > 1 else f"{vals[0]:+.3f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="0,1,2")
    ap.add_argument("--corrections", default="none,decoupled_token_is,decoupled_seq_is,decoupled_token_icepop,"
                                             "bypass_ppo_clip")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--supports", default="kept", help="--logprob-support conventions to compare: kept,full")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from rewardlab.testing import build_tiny_model

    torch.set_num_threads(1)
    ks = [int(x) for x in args.ks.split(",")]
    corrections, seeds = args.corrections.split(","), [int(x) for x in args.seeds.split(",")]
    runs = []
    supports = args.supports.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "tiny")
        for k in ks:
            for corr in (["none"] if k == 0 else corrections):
                for support, seed in ((sp, sd) for sp in supports for sd in seeds):
                    sampling = {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
                                "logprob_support": support}
                    r = run_one(model, Path(tmp), k, corr, seed, args.steps, sampling)
                    runs.append(r)
                    print(f"  k={k} {corr:24s} {support} seed={seed}: gain {r['gain']:+.3f}  |dlogp| "
                          f"{r['logp_abs_diff'] if r['logp_abs_diff'] is not None else float('nan'):.4f}  "
                          f"{r['wall_s']:.0f} s", file=sys.stderr, flush=True)
    print(f"sampling: T={args.temperature:g} top-p {args.top_p:g} top-k {args.top_k}")
    print(f"{'k':>2} {'correction':24s} {'support':7s} {'gain (letters)':>16s} {'|log pi_old - log pi_engine|':>30s} "
          f"{'kl':>16s} {'chi2_token':>16s} {'is_mean':>16s} {'clip_frac':>16s}")
    table = []
    fields = ("gain", "logp_abs_diff", "kl", "chi2_token", "is_mean", "clip_frac")
    for k in ks:
        for corr in (["none"] if k == 0 else corrections):
            for support in supports:
                mine = [r for r in runs if r["k"] == k and r["correction"] == corr and r["support"] == support]
                row = {"k": k, "correction": corr, "support": support, **{f: _ms([r[f] for r in mine]) for f in fields}}
                table.append(row)
                print(f"{k:>2} {corr:24s} {support:7s} " + " ".join(f"{row[f]:>16s}" for f in fields), flush=True)
    if args.json:
        made = {"command": " ".join([sys.executable, *sys.argv]), "python": platform.python_version(),
                "torch": torch.__version__, "machine": platform.machine(), "cpus": os.cpu_count(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        args.json.write_text(json.dumps({"made_by": made, "table": table, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
