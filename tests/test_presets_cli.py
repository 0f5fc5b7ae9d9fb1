"""Every ``--algo`` preset and every ``--correction`` preset trains 2 steps through the real CLI.

``rewardlab.cli.main`` runs in this process (the same click command, settings parser, loop and
files as ``python -m rewardlab train``, without paying a fresh interpreter per preset), on the tiny
random model and the arith task with its own math reward. Each run must exit 0 and log 2 steps;
correction runs must log the ``rollout_corr/*`` metrics, bypass runs among them.
The subprocess path is covered by tests/test_train_random_model.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardlab import cli
from rewardlab.algos import PRESETS
from rewardlab.algos.correction import PRESETS as CORRECTIONS


def train_cli(tmp_path: Path, model: Path, *extra: str) -> list[dict]:
    out = tmp_path / "run"
    args = ["train", "--model", str(model), "--output-dir", str(out), "--task", "arith", "--task-limit", "16",
            "--steps", "2", "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "12",
            "--micro-batch-size", "4", "--threads", "1", "--progress", "false", "--plots", "false",
            "--seed", "0", "--reward-workers", "1", *extra]
    try:
        cli.main(args)
    except SystemExit as e:  # main exits only on failure
        pytest.fail(f"rewardlab {' '.join(args)} exited {e.code}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows] == [1, 2]
    return rows


@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_every_algorithm_preset_trains_two_steps(algo, tiny_model_dir, tmp_path):
    rows = train_cli(tmp_path, tiny_model_dir, "--algo", algo)
    assert all(r.get("skipped", 0) or "loss" in r for r in rows)


@pytest.mark.parametrize("name", sorted(c for c in CORRECTIONS if c != "disabled"))
def test_every_correction_preset_trains_two_steps(name, tiny_model_dir, tmp_path):
    rows = train_cli(tmp_path, tiny_model_dir, "--algo", "grpo", "--correction", name)
    for r in rows:
        assert "rollout_corr/kl" in r, sorted(r)
        assert r["rollout_corr/kl"] == pytest.approx(r["rollout_corr/kl"])  # finite
        assert "loss" in r


def test_correction_sees_the_engine_mismatch_and_only_it(tiny_model_dir, tmp_path):
    """At temperature 1 the HF engine's log-probs are the trainer's (the mismatch KL is float noise);
    sampling from the top 5 tokens while the trainer's policy is the whole softmax is a real mismatch:
    every sampled token's engine log-prob exceeds the trainer's by log(1 / top-5 mass) > 0."""
    same = train_cli(tmp_path / "t1", tiny_model_dir, "--algo", "grpo", "--correction", "decoupled_token_is")
    assert all(abs(r["rollout_corr/kl"]) < 1e-4 for r in same), [r["rollout_corr/kl"] for r in same]
    top5 = train_cli(tmp_path / "top5", tiny_model_dir, "--algo", "grpo", "--correction", "decoupled_token_is",
                     "--top-k", "5")
    assert all(r["rollout_corr/kl"] > 1.0 for r in top5), [r["rollout_corr/kl"] for r in top5]
    assert all(r["rollout_corr/rollout_is_mean"] < 0.5 for r in top5), [r["rollout_corr/rollout_is_mean"] for r in top5]
