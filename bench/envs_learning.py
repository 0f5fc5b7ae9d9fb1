"""A tiny random model learns a reasoning-gym task scored by reasoning-gym itself, and the controls do not.

    REWARDLAB_DATA_DIR=../shared/data python bench/envs_learning.py --seeds 0 1 2 --steps 40 \
        --out bench/data/envs_learning.json

Task: ``reasoning_gym:spell_backward`` with 3-letter words and ``answer=text`` (the completion is the answer;
its score_answer pays 1/3 per letter in the right place). The model (``rewardlab.testing``, 2 blocks, 64 wide,
a 384-token byte-level BPE) cannot read yet, so what it can learn is which letters sit where in reversed
3-letter words (the best constant answer, ``taa``, scores 0.13; random letters about 0.04). Each seed runs:

* ``normal``: GRPO on the environment's reward;
* ``flipped``: every advantage negated (``rewardlab.train.loop.ADVANTAGE_SIGN``, the learning tests' hook);
* ``random``: a coin-flip reward independent of the completion (``rewardlab.testing.coin_reward``).

The curve is reasoning-gym's score of every generated completion (``rollouts.jsonl``, scored again with
``rewardlab.envs.gym.gym_reward`` for the random control), per step. The change is the mean of the last 5
steps minus the mean of the first 5. ``tests/test_envs.py`` runs the same recipe (``recipe()``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rewardlab.testing import coin_reward

ENV = "reasoning_gym:spell_backward?min_word_len=3&max_word_len=3&answer=text"
COIN = coin_reward()  # the random-reward control (reseeded per run)


def recipe(model: str, out: Path, seed: int, steps: int, reward: str | None = None) -> dict:
    """The training settings of one run (shared with tests/test_envs.py)."""
    settings = {"model": model, "output_dir": str(out), "algo": "grpo", "task": ENV, "task_limit": 256,
                "steps": steps, "prompts_per_step": 8, "group_size": 8, "max_new_tokens": 3, "lr": 3e-2,
                "train_top_layers": 0, "overlong_weight": 0, "reward_workers": 1, "threads": 1, "progress": False,
                "plots": False, "seed": seed, "save_every": 1000}
    if reward:
        settings["reward"] = reward
    return settings


def env_curve(out: Path) -> list[float]:
    """reasoning-gym's mean score of the generated completions, per step."""
    from rewardlab.envs.gym import gym_reward

    by_step: dict[int, list[float]] = {}
    for line in (out / "rollouts.jsonl").read_text().splitlines():
        r = json.loads(line)
        by_step.setdefault(r["step"], []).append(float(gym_reward(r["completion"], r["reference"]).score or 0.0))
    return [statistics.mean(v) for _, v in sorted(by_step.items())]


def change(curve: list[float], k: int = 5) -> float:
    return statistics.mean(curve[-k:]) - statistics.mean(curve[:k])


def run(model: str, root: Path, seed: int, steps: int, mode: str) -> list[float]:
    from rewardlab.train import build_config, loop, train

    out = root / f"{mode}-seed{seed}"
    reward = f"{__name__}.COIN" if mode == "random" else None
    sign = loop.ADVANTAGE_SIGN
    loop.ADVANTAGE_SIGN = -1.0 if mode == "flipped" else sign
    try:
        COIN.rng.seed(seed)
        train(build_config(None, recipe(model, out, seed, steps, reward)))
    finally:
        loop.ADVANTAGE_SIGN = sign
    return env_curve(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--work", default="/tmp/rewardlab-envs-learning")
    ap.add_argument("--out", default=None, help="write the curves and changes here (JSON)")
    args = ap.parse_args()
    from rewardlab.testing import build_tiny_model

    root = Path(args.work)
    model = str(build_tiny_model(root / "tiny"))
    results: dict = {"made_by": "python bench/envs_learning.py " + " ".join(sys.argv[1:]), "env": ENV,
                     "steps": args.steps, "runs": {}}
    for mode in ("normal", "flipped", "random"):
        for seed in args.seeds:
            t = time.time()
            curve = run(model, root, seed, args.steps, mode)
            results["runs"][f"{mode}-seed{seed}"] = {"change": round(change(curve), 4),
                                                     "curve": [round(x, 4) for x in curve]}
            print(f"{mode:8s} seed {seed}: change {change(curve):+.3f}  first5 {statistics.mean(curve[:5]):.3f} "
                  f"last5 {statistics.mean(curve[-5:]):.3f}  ({time.time() - t:.0f} s)", flush=True)
        changes = [results["runs"][f"{mode}-seed{s}"]["change"] for s in args.seeds]
        results[mode] = {"mean": round(statistics.mean(changes), 4),
                         "spread": round(max(changes) - min(changes), 4)}
        print(f"{mode:8s} mean change {statistics.mean(changes):+.3f} (min {min(changes):+.3f}, "
              f"max {max(changes):+.3f})", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
