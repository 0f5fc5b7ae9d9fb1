"""``torchrun --nproc_per_node 2`` training on CPU (gloo) equals one process on the same global batch.

Both runs go through the real CLI (``python -m rewardlab train``) with a tiny model. To make the
two runs see the same global batch, sampling is deterministic per prompt whatever the rank split:
``--top-k 1`` (greedy), one completion per prompt (``--group-size 1``: a singleton group's
advantage is its reward), and ``--rollout-batch-size 1`` (no padding that depends on batch
neighbours). The reward is ``length_reward`` below (loaded by dotted path; scored in the reward
pool in the shared straight 2-rank run, in the trainer's threads in the others), so advantages differ
between prompts and the update is not zero. The 2-rank run splits each mini-batch over the ranks
(one micro-batch each, versus two accumulated micro-batches in one process), all-reduces the loss
denominators, and sums FSDP2 gradients; losses and final weights must match.

A second test stops a 2-rank run after step 1 and resumes it to step 2: the unsharded AdamW state
(saved through ``distributed.optimizer_state_dict``, loaded back into each rank's shard) and each
rank's own RNG state must make it equal the straight 2-rank run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rewardlab.rewards.base import RewardResult

TESTS = Path(__file__).resolve().parent


def length_reward(completion: str, reference, **meta) -> RewardResult:
    """A deterministic reward that varies between completions: completion length mod 5, scaled."""
    return RewardResult((len(completion) % 5) / 4.0, {"status": "ok"})


def length_reward_local(completion: str, reference, **meta) -> RewardResult:
    """:func:`length_reward`, scored in the trainer's own threads: no reward pool to start (a fork
    server importing sympy, and its worker) in each process of a run. The straight 2-rank run keeps
    the pool, so the pool under torchrun stays tested, and a run with either equals one with the other."""
    return length_reward(completion, reference, **meta)


length_reward_local.isolated = True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(launcher: list[str], model_dir: Path, out: Path, steps: int = 2,
         reward: str = "length_reward_local", extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    args = [
        "train", "--algo", "grpo", "--model", str(model_dir), "--task", "arith",
        "--reward", f"test_distributed_train.{reward}",
        "--steps", str(steps), "--prompts-per-step", "4", "--group-size", "1",
        "--top-k", "1", "--logprob-support", "full",  # greedy rollouts, trained as TRL / verl do (T 1, full vocabulary)
        "--rollout-batch-size", "1", "--micro-batch-size", "2", "--max-new-tokens", "6",
        "--train-top-layers", "0", "--lr", "1e-3", "--save-every", "2", "--reward-workers", "1",
        "--threads", "1", "--no-plots", "--no-progress", "--output-dir", str(out), *extra,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run(launcher + args, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"{launcher}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _torchrun() -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "rewardlab",
    ]


@pytest.fixture(scope="module")
def two_rank_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A straight 2-step, 2-rank run (shared by both tests), its rewards scored in each rank's pool."""
    out = tmp_path_factory.mktemp("dist") / "two"
    _run(_torchrun(), tiny_model_dir, out, reward="length_reward")
    return out


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _weights(out: Path, step: int = 2) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(out / "checkpoints" / f"step-{step:06d}" / "model.safetensors")


def test_torchrun_two_ranks_equals_one_process(tiny_model_dir, tmp_path, two_rank_run):
    one, two = tmp_path / "one", two_rank_run
    _run([sys.executable, "-m", "rewardlab"], tiny_model_dir, one)

    m1, m2 = _metrics(one), _metrics(two)
    assert [r["step"] for r in m1] == [r["step"] for r in m2] == [1, 2]
    for a, b in zip(m1, m2):
        assert a["reward/mean"] == pytest.approx(b["reward/mean"])  # same global batch
        assert a["response_len/mean"] == pytest.approx(b["response_len/mean"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    assert any(abs(r["loss"]) > 1e-6 for r in m1)  # the update is not trivially zero

    w1, w2 = _weights(one), _weights(two)
    assert w1.keys() == w2.keys()
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=1e-4, atol=1e-5)
    start = _saved_weights(tiny_model_dir)
    assert any(not torch.allclose(start[k], w1[k]) for k in w1 if k in start)  # weights moved


def _saved_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path / "model.safetensors")


def test_torchrun_two_ranks_resume_equals_straight_run(tiny_model_dir, tmp_path, two_rank_run):
    from rewardlab.train.checkpoint import checkpoint_dir, load_trainer_state

    split = tmp_path / "split"
    _run(_torchrun(), tiny_model_dir, split, steps=1)  # stops after step 1 (saved: last step)
    state = load_trainer_state(checkpoint_dir(split, 1))
    rngs = state["rng_per_rank"]
    assert len(rngs) == 2 and not torch.equal(rngs[0]["torch"], rngs[1]["torch"])  # ranks seeded apart
    adam = state["optimizer"]["state"]
    assert adam and all(isinstance(k, str) for k in adam)  # keyed by parameter name, not id
    first = next(iter(adam.values()))["exp_avg"]
    assert type(first) is torch.Tensor  # unsharded (not a DTensor)
    resumed = _run(_torchrun(), tiny_model_dir, split, steps=2)
    assert "resuming from step-000001" in resumed.stdout

    a, b = _metrics(two_rank_run), _metrics(split)
    assert [r["step"] for r in b] == [1, 2]
    for x, y in zip(a, b):
        for k in ("reward/mean", "loss", "grad_norm", "lr"):
            assert y[k] == pytest.approx(x[k], rel=1e-5, abs=1e-7), (k, x["step"])
    wa, wb = _weights(two_rank_run), _weights(split)
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=1e-5, atol=1e-6)


def test_two_ranks_with_a_token_budget_and_packed_rows_equal_one_padded_process(tiny_model_dir, tmp_path):
    """Under torchrun each rank's share is dealt by length and cut by tokens into the count of the rank that needs
    most (an all-reduce), laid out as one packed row: the same step as one process, padded, cut by count."""
    one, two = tmp_path / "one", tmp_path / "two"
    _run([sys.executable, "-m", "rewardlab"], tiny_model_dir, one)
    _run(_torchrun(), tiny_model_dir, two, extra=("--max-tokens-per-micro-batch", "40", "--packing", "sequences"))
    m1, m2 = _metrics(one), _metrics(two)
    for a, b in zip(m1, m2, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    w1, w2 = _weights(one), _weights(two)
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=1e-4, atol=1e-5)
