"""Does tool use get learned? ``rewardlab train --tools python`` on the built-in ``bigmul`` task with
the embedded SmolLM2-135M-Instruct, on CPU, with the learning controls.

    python bench/tool_learning.py --seeds 0,1,2 --modes normal,flipped,coin --control-seeds 0
    python bench/tool_learning.py --seeds 0 --modes normal            # one run, about 10 minutes

``bigmul`` asks for a 4-5 digit product ("What is 51494 * 56125?"), with one worked example of a
tool call in the prompt; the answer is graded (math reward) on the model's last turn only, so the
only way to score is to call the tool and copy its output. Each run trains through the real loop
(``rewardlab.cli.main(["train", ...])``, in process) and the curves are read back from
``rollouts.jsonl`` (every generated trajectory):

* ``correct``: the math reward of the model's last turn (re-graded here, so the coin control is
  measured on the same scale);
* ``tool_use``: trajectories with at least one tool call; ``tool_ok``: with at least one call that
  ran without error.

Modes: ``normal`` (the math reward); ``flipped`` (every advantage negated through the loop's
test-only hook ``rewardlab.train.loop.ADVANTAGE_SIGN``: the curves must not rise); ``coin`` (a
seeded coin-flip reward, independent of the trajectory: they must not rise either).
Printed per run: first-3 and last-3 step means, their change, seconds per step; then per mode the
mean and the spread (min..max) of the change over seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rewardlab.rewards import get_reward
from rewardlab.testing import coin_reward


coin = coin_reward()  # independent of the trajectory (rewardlab.testing)


def settings(args: argparse.Namespace, seed: int, out: Path, mode: str) -> list[str]:
    argv = ["train", "--algo", args.algo, "--task", "bigmul", "--tools", "python", "--steps", str(args.steps),
            "--prompts-per-step", str(args.prompts), "--group-size", str(args.group),
            "--max-new-tokens", str(args.max_new_tokens), "--max-turns", "2", "--max-total-tokens",
            str(args.max_new_tokens * 4), "--lr", str(args.lr), "--train-top-layers", str(args.top_layers),
            "--temperature", "1.0", "--seed", str(seed), "--threads", str(args.threads), "--output-dir", str(out),
            "--save-every", "1000", "--no-plots", "--no-progress", "--reward-workers", "1"]
    if mode == "coin":
        argv += ["--reward", f"{__name__}.coin"]
    return argv


def curves(out: Path) -> dict[str, list[float]]:
    math = get_reward("math")
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    by: dict[int, list[dict]] = {}
    for r in rows:
        by.setdefault(r["step"], []).append(r)
    out_c: dict[str, list[float]] = {"correct": [], "tool_use": [], "tool_ok": []}
    for step in sorted(by):
        rs = by[step]
        out_c["correct"].append(sum(float(math(r["answer"], r["reference"]).score or 0) for r in rs) / len(rs))
        out_c["tool_use"].append(sum(r["tool_calls"] > 0 for r in rs) / len(rs))
        out_c["tool_ok"].append(sum(any(t["role"] == "tool" and t["status"] == "ok" for t in r["turns"])
                                    for r in rs) / len(rs))
    return out_c


def change(c: list[float]) -> float:
    return sum(c[-3:]) / 3 - sum(c[:3]) / 3


def one_run(args: argparse.Namespace, seed: int, mode: str, root: Path) -> dict:
    from rewardlab.cli import main
    from rewardlab.train import loop

    coin.rng.seed(seed)
    out = root / f"{mode}-{seed}"
    loop.ADVANTAGE_SIGN = -1.0 if mode == "flipped" else 1.0
    t0 = time.perf_counter()
    try:
        rc = main(settings(args, seed, out, mode))
    finally:
        loop.ADVANTAGE_SIGN = 1.0
    if rc not in (0, None):
        raise SystemExit(f"rewardlab train exited {rc}")
    c = curves(out)
    row = {"mode": mode, "seed": seed, "s_per_step": (time.perf_counter() - t0) / args.steps, "curves": c,
           **{f"{k}_change": change(v) for k, v in c.items()}}
    print(f"{mode:8s} seed {seed}: " + "  ".join(
        f"{k} {sum(v[:3]) / 3:.3f} -> {sum(v[-3:]) / 3:.3f} ({change(v):+.3f})" for k, v in c.items())
        + f"  {row['s_per_step']:.0f} s/step", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--modes", default="normal,flipped,coin", help="comma-separated: normal, flipped, coin")
    ap.add_argument("--control-seeds", default="0", help="seeds of the flipped and coin runs")
    ap.add_argument("--algo", default="grpo")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--top-layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write every curve to this file")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            for seed in (seeds if mode == "normal" else [int(x) for x in args.control_seeds.split(",")]):
                rows.append(one_run(args, seed, mode, Path(tmp)))
    for mode in dict.fromkeys(r["mode"] for r in rows):
        rs = [r for r in rows if r["mode"] == mode]
        for k in ("correct", "tool_use", "tool_ok"):
            v = [r[f"{k}_change"] for r in rs]
            print(f"{mode:8s} {k:9s} change over {len(v)} seed(s): mean {sum(v) / len(v):+.3f}, "
                  f"spread {min(v):+.3f}..{max(v):+.3f}")
    if args.json:
        meta = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "settings": vars(args)}
        Path(args.json).write_text(json.dumps({"made_by": meta, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
