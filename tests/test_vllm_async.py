"""``--async-steps`` with ``--rollout vllm``: the generation worker runs a VLLMEngine in its own process.

Through the real CLI (as tests/test_async.py): three steps one step ahead, every sample's policy version
within the bound, the correction's importance weights in the loss. And the worker itself: weights pushed
while a request is queued or generating must not reach it, and the next request must sample exactly what a
fresh engine on the pushed weights samples (token for token, same seeds), so the push reached vLLM.

Needs vLLM: skips without it (the default venv has none); ``make test-vllm`` runs it in .venv-vllm with
REWARDLAB_REQUIRE_VLLM=1, where a vLLM that does not import fails instead.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from test_train import base_args, read_jsonl, run_cli

from rewardlab.rollout import SamplingParams
from rewardlab.testing import two_versions
from rewardlab.train.async_worker import GenerationWorker

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
REQUIRE_VLLM = os.environ.get("REWARDLAB_REQUIRE_VLLM") == "1"
pytestmark = pytest.mark.skipif(not HAVE_VLLM and not REQUIRE_VLLM,
                                reason="vllm is not installed (run `make test-vllm`)")
ENGINE_KW = {"dtype": "float32", "seed": 0, "enforce_eager": True}
"""The worker's and the reference engine's settings (fp32 and eager: the two engines agree exactly)."""


@pytest.fixture(scope="module")
def vllm_model(tmp_path_factory):
    """A tiny Qwen2 that vLLM's CPU attention runs (head_dim 64: the kernels need >= 32)."""
    if REQUIRE_VLLM and not HAVE_VLLM:
        pytest.fail("REWARDLAB_REQUIRE_VLLM=1 but vllm is not importable")
    from rewardlab.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-vllm-async"), hidden_size=128, num_heads=2)


def test_k1_with_vllm_versions_within_bound_and_correction_weights_reach_the_loss(vllm_model, tmp_path):
    out = tmp_path / "k1"
    proc = run_cli(base_args(vllm_model, out, algo="grpo", steps=3, async_steps=1, rollout="vllm",
                             correction="decoupled_token_is"), timeout=900)
    assert "async rollout               1 step(s) ahead in a worker process" in proc.stdout, proc.stdout[-2000:]
    # the worker (process name rewardlab-generation) started a vLLM engine: vLLM prefixes its log lines so
    worker_lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.startswith("(rewardlab-generation pid=")]
    assert any("Initializing a V1 LLM engine" in x for x in worker_lines), (proc.stdout + proc.stderr)[-3000:]
    # and only the worker: the trainer keeps an HF engine on its live model (build.engine_kind), no second vLLM
    engines = [x for x in (proc.stdout + proc.stderr).splitlines() if "Initializing a V1 LLM engine" in x]
    assert len(engines) == 1, engines
    metrics, rollouts = read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "rollouts.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for m in metrics:
        assert m["completions/kept"] == 2 * 4 and m["grad_norm"] > 0 and 0 <= m["async/overlap"] <= 1
    stale = [r["step"] - 1 - r["info"]["policy_version"] for r in rollouts]
    assert len(stale) == 3 * 2 * 4 and max(stale) <= 1 and min(stale) >= 0
    assert [m["async/staleness_max"] for m in metrics] == [0, 1, 1]  # the start's weights serve steps 1 and 2
    assert all("is_weight/mean" in m for m in metrics)
    assert any(abs(m["is_weight/mean"] - 1.0) > 1e-4 for m in metrics if m["async/staleness_max"] >= 1)


def test_weights_pushed_during_a_request_do_not_reach_it_and_reach_the_next(vllm_model):
    """The vLLM worker's requests, before and after a push: each equals a fresh engine on its own version."""
    from rewardlab.rollout.vllm import VLLMEngine

    torch.set_num_threads(1)
    v0, v1, tok = two_versions(vllm_model)
    prompts = ["1+1=", "2+3=", "7*6=", "9-4="]
    sampling = SamplingParams(seed=3, max_new_tokens=16, temperature=1.0)
    parts: list[tuple[int, int]] = []
    worker = GenerationWorker(v0, tok, version=0, batch_size=16, threads=1, engine="vllm", engine_kwargs=ENGINE_KW,
                              on_part=lambda rid, ctx, done: parts.append((rid, len(done))))
    try:
        first = worker.submit(prompts, 4, sampling)
        worker.push(v1, version=1)  # queued behind the first request: applied after it, before the second
        second = worker.submit(prompts, 4, sampling)
        a, b = worker.result(), worker.result()
    finally:
        worker.close()
    assert (a.rid, a.version, b.rid, b.version) == (first, 0, second, 1)
    assert parts == [(first, 16), (second, 16)]  # vLLM: one chunk per request
    fresh = VLLMEngine(v1, tok, **ENGINE_KW)
    try:
        want1 = fresh.generate(prompts, 4, sampling)
        fresh.load_weights(v0)
        want0 = fresh.generate(prompts, 4, sampling)
    finally:
        fresh.close()
    assert [c.token_ids for c in want0] != [c.token_ids for c in want1]  # the versions are told apart
    assert [c.token_ids for c in a.completions] == [c.token_ids for c in want0]
    assert [c.token_ids for c in b.completions] == [c.token_ids for c in want1]
    for got, want in zip(b.completions, want1):
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


def test_the_python_tool_loop_runs_on_the_workers_vllm_engine(vllm_model, tmp_path):
    """``--tools python --async-steps 1 --rollout vllm``: the worker wraps its vLLM engine in the tool loop (vLLM
    samples the turns, continuing exact ids), so step 1, sampled by the start's weights, is the synchronous vLLM
    run's step 1 token for token, turns included."""
    args = base_args(vllm_model, tmp_path / "sync", algo="grpo", steps=2, rollout="vllm", tools="python",
                     max_turns=2, max_new_tokens=12)
    run_cli(args, timeout=900)
    run_cli([*args, "--output-dir", str(tmp_path / "k1"), "--async-steps", "1"], timeout=900)
    sync, k1 = read_jsonl(tmp_path / "sync" / "rollouts.jsonl"), read_jsonl(tmp_path / "k1" / "rollouts.jsonl")
    assert all(r["turns"] for r in k1) and [r["info"]["policy_version"] for r in k1] == [0] * 16
    assert [(r["completion"], r["turns"]) for r in sync if r["step"] == 1] == \
        [(r["completion"], r["turns"]) for r in k1 if r["step"] == 1]
