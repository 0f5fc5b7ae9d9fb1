"""A resumed run equals a straight one on a model whose update draws random numbers (dropout).

The tiny test models have no dropout, so the global torch generator is never drawn from in an update
and a resume that forgot to restore it still matched a straight run (issue 25: removing the restore
left every test green). Here the model has attention dropout 0.3: "2 steps, stop, resume, 2 more"
must give the weights and metrics of 4 straight steps, and the same resume with the restore removed
(the control) must not, so this test fails when the restore goes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rewardlab import cli
from rewardlab.testing import build_tiny_model
from rewardlab.train import build


@pytest.fixture(scope="module")
def dropout_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("dropout-model"), dropout=0.3)


def _train(model: Path, out: Path, steps: int) -> None:
    args = ["train", "--model", str(model), "--output-dir", str(out), "--task", "arith", "--task-limit", "16",
            "--steps", str(steps), "--save-every", "2", "--prompts-per-step", "2", "--group-size", "4",
            "--max-new-tokens", "8", "--micro-batch-size", "4", "--reward", "test_train.length_mod_reward",
            "--lr", "1e-2", "--threads", "1", "--progress", "false", "--plots", "false", "--seed", "0",
            "--reward-workers", "1"]
    try:
        cli.main(args)
    except SystemExit as e:  # main exits only on failure
        pytest.fail(f"rewardlab {' '.join(args)} exited {e.code}")


def _seeded_rows(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/")) and k != "tokens/s"} for r in rows]


def _max_weight_gap(a: Path, b: Path) -> float:
    wa = load_file(a / "checkpoints" / "step-000004" / "model.safetensors")
    wb = load_file(b / "checkpoints" / "step-000004" / "model.safetensors")
    assert wa.keys() == wb.keys()
    return max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)


@pytest.mark.slow
def test_resume_equals_a_straight_run_with_dropout(dropout_model, tmp_path, monkeypatch):
    straight, split, control = tmp_path / "straight", tmp_path / "split", tmp_path / "control"
    _train(dropout_model, straight, 4)
    _train(dropout_model, split, 2)
    _train(dropout_model, split, 4)
    assert [r["step"] for r in _seeded_rows(split)] == [1, 2, 3, 4]
    assert _seeded_rows(split) == _seeded_rows(straight)
    assert _max_weight_gap(straight, split) == 0.0

    # the control: the same resume without the RNG restore draws other dropout masks
    _train(dropout_model, control, 2)
    monkeypatch.setattr(build, "set_rng_state", lambda state: None)
    _train(dropout_model, control, 4)
    assert _max_weight_gap(straight, control) > 1e-4, "dropout drew no random numbers: the test is vacuous"
    torch.manual_seed(0)  # leave the global generator as other tests expect it
