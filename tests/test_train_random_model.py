"""A random-weight model through the real CLI (a fresh interpreter), the four paper presets, 5 steps,
the task's own math reward. Every other preset runs 2 steps in-process: tests/test_presets_cli.py.

A random model emits what no example shows: runs of sub-word junk, half LaTeX, unbalanced braces.
Before this wave, the math reward's fast path hung on such a completion in step 2 (an exponential
regular expression on the trainer's thread) and Ctrl-C could not stop it. The subprocess timeout is
the hang bound: a blow-up fails, a slow machine does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("algo", ["dapo", "dr_grpo", "grpo", "gspo"])
def test_random_model_trains_five_steps_with_the_math_reward(algo: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "--algo", algo, "--model", str(tiny_model_dir), "--output-dir", str(out), "--task", "arith",
            "--task-limit", "32", "--steps", "5", "--prompts-per-step", "2", "--group-size", "4",
            "--max-new-tokens", "48", "--micro-batch-size", "8", "--threads", "1", "--progress", "false",
            "--plots", "false", "--seed", "0"]
    env = dict(os.environ, OMP_NUM_THREADS="1", REWARDLAB_REWARD_WORKERS="1")
    proc = subprocess.run([sys.executable, "-m", "rewardlab", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines() if x.strip()]
    assert len({r["step"] for r in rollouts}) == 5
    # every completion was graded with a reason: ok, or a refusal / no_answer, never a silent hang or error
    statuses = {r["info"]["status"] for r in rollouts}
    assert statuses and "error" not in statuses, statuses
