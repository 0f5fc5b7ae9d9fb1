"""In-process pieces of the trainer: batching layout, log-probs, the frozen-prefix cache, data order."""

from __future__ import annotations

import math

import pytest
import torch

from rewardlab.train.logprobs import (
    FrozenPrefix,
    decoder_blocks,
    freeze_to_top_layers,
    pad_batch,
    shared_prompt_logprobs,
    token_logprobs,
)
from rewardlab.train.samples import PromptStream, Sample


def _sample(prompt_ids, token_ids, group=0):
    return Sample(group=group, row=None, prompt_text="", prompt_ids=prompt_ids, token_ids=token_ids, text="",
                  finish_reason="stop", score=0.0, task_score=0.0, components={}, info={})


def _model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


def test_log_probs_match_unpadded_forward(tiny_model_dir):
    model = _model(tiny_model_dir)
    samples = [_sample([5, 6, 7, 8], [9, 10, 11]), _sample([12, 13], [14]), _sample([15, 16, 17], [18, 19])]
    b = pad_batch(samples, pad_id=0, device="cpu")
    assert b["input_ids"].shape == (3, 4 + 3) and b["response_mask"].tolist()[1] == [1, 0, 0]
    with torch.no_grad():
        lp, ent = token_logprobs(model, b, with_entropy=True)  # (3, 3)
        for i, s in enumerate(samples):
            ids = torch.tensor([s.prompt_ids + s.token_ids])
            logits = model(ids).logits[0, len(s.prompt_ids) - 1 : -1].log_softmax(-1)  # (r, V)
            ref = logits.gather(-1, torch.tensor(s.token_ids)[:, None]).squeeze(-1)
            torch.testing.assert_close(lp[i, : len(s.token_ids)], ref, rtol=1e-4, atol=1e-4)
    assert bool((ent[b["response_mask"] > 0] > 0).all())


def test_frozen_prefix_replay_equals_full_forward(tiny_model_dir):
    model = _model(tiny_model_dir)
    freeze_to_top_layers(model, 1)
    blocks = decoder_blocks(model)
    assert [p.requires_grad for p in blocks[0].parameters()][0] is False
    prefix = FrozenPrefix(blocks, 1)
    b = pad_batch([_sample([5, 6, 7], [9, 10]), _sample([12], [14, 15, 16])], pad_id=0, device="cpu")
    with torch.no_grad(), prefix.capture() as cap:
        full, _ = token_logprobs(model, b)
    with prefix.replay(cap[0]):
        replayed, _ = token_logprobs(model, b)
    torch.testing.assert_close(replayed, full, rtol=0, atol=1e-6)
    replayed.sum().backward()  # gradients reach the trained block only
    assert blocks[1].mlp.up_proj.weight.grad is not None and blocks[0].mlp.up_proj.weight.grad is None
    assert type(blocks[0]).__name__ != "SkippedBlock"  # the frozen block is back after the replay


def test_prompt_stream_is_seeded_and_resumable():
    a = PromptStream(5, seed=3)
    first = a.take(7)  # crosses an epoch boundary
    assert sorted(i for i, _ in first[:5]) == [0, 1, 2, 3, 4] and [g for _, g in first] == list(range(7))
    b = PromptStream(5, seed=3)
    b.take(7)
    c = PromptStream(5, seed=3)
    c.load(b.state())
    assert c.take(6) == b.take(6)
    assert PromptStream(5, seed=4).take(5) != PromptStream(5, seed=3).take(5)


def test_shared_prompt_log_probs_and_hidden_match_the_padded_forward(tiny_model_dir):
    model = _model(tiny_model_dir)
    freeze_to_top_layers(model, 1)
    prefix = FrozenPrefix(decoder_blocks(model), 1)
    # two groups (prompt ids differ in length), members interleaved, one empty-ish response
    samples = [_sample([5, 6, 7, 8], [9, 10, 11], 0), _sample([12, 13], [14], 1), _sample([5, 6, 7, 8], [20], 0),
               _sample([12, 13], [21, 22, 23, 24], 1)]
    b = pad_batch(samples, pad_id=0, device="cpu")
    with torch.no_grad(), prefix.capture() as cap:
        full, _ = token_logprobs(model, b)  # (4, 4)
    shared, _, hidden = shared_prompt_logprobs(model, samples, 0, "cpu", prefix=prefix)
    m = b["response_mask"] > 0
    torch.testing.assert_close(shared[m], full[m], rtol=1e-5, atol=1e-5)
    am = b["attention_mask"] > 0  # compare hidden states on real tokens only
    torch.testing.assert_close(hidden[am], cap[0][am], rtol=1e-5, atol=1e-5)


def test_shared_prompt_gradients_match_the_padded_forward(tiny_model_dir):
    samples = [_sample([5, 6, 7, 8], [9, 10, 11], 0), _sample([12, 13], [14], 1), _sample([5, 6, 7, 8], [20], 0)]
    grads = []
    for shared in (False, True):
        model = _model(tiny_model_dir).train()
        b = pad_batch(samples, pad_id=0, device="cpu")
        if shared:
            lp, ent, _ = shared_prompt_logprobs(model, samples, 0, "cpu", grad=True, with_entropy=True)
        else:
            lp, ent = token_logprobs(model, b, with_entropy=True)
        m = b["response_mask"]
        ((lp * m).sum() + 0.1 * (ent * m).sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-5, msg=n)


class _LogprobEngine:
    """Stands in for the vLLM engine: HF sampling plus per-token log-probs ``OFFSET`` below the
    policy's own, so the trainer's mismatch metrics have a known value."""

    OFFSET = 0.25

    def __init__(self, model, tokenizer, **kw):
        from rewardlab.rollout import HFEngine

        self.kw = kw
        self.model = model
        self.hf = HFEngine(model, tokenizer, batch_size=64)

    def generate(self, prompts, n, sampling):
        import dataclasses

        from rewardlab.rollout.vllm import VLLMCompletion

        out = []
        for c in self.hf.generate(prompts, n, sampling):
            s = _sample(list(c.prompt_ids), list(c.token_ids))
            with torch.no_grad():
                lp, _ = token_logprobs(self.model, pad_batch([s], 0, "cpu"))  # (1, R)
            lps = (lp[0, : len(c.token_ids)] - self.OFFSET).tolist()
            out.append(VLLMCompletion(**{**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)},
                                         "logprobs": lps}))
        return out

    def load_weights(self, model):
        self.hf.load_weights(model)


def test_rollout_logprob_mismatch_is_logged_and_not_used_as_old_logp(tiny_model_dir, tmp_path, monkeypatch):
    import json

    from rewardlab.rollout import Collectives
    from rewardlab.train import build, build_config
    from rewardlab.train import train

    engines = []

    def fake_make_engine(kind, model, tokenizer, **kw):
        assert kind == "vllm"
        engines.append(_LogprobEngine(model, tokenizer, **kw))
        return engines[-1]

    monkeypatch.setattr(build, "make_engine", fake_make_engine)
    cfg = build_config(None, {
        "model": str(tiny_model_dir), "output_dir": str(tmp_path / "run"), "algo": "grpo", "rollout": "vllm",
        "vllm_gpu_memory_utilization": "0.5", "steps": "1", "prompts_per_step": "2", "group_size": "2",
        "max_new_tokens": "6", "reward": "format", "reward_workers": "1", "threads": "1", "progress": "false",
        "plots": "false", "task_limit": "8",
    })
    train(cfg)
    kw = dict(engines[0].kw)
    assert isinstance(kw.pop("collectives"), Collectives)  # the trainer lends the engine its process group
    # the engine computes in the trainer's dtype (vLLM's "auto" would run this float32 checkpoint in 16 bits)
    assert kw == {"gpu_memory_utilization": 0.5, "enable_sleep_mode": False, "seed": 0, "dtype": "float32"}
    (m,) = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    off = _LogprobEngine.OFFSET
    assert abs(m["rollout/logp_abs_diff"] - off) < 1e-3 and abs(m["rollout/logp_max_abs_diff"] - off) < 1e-3
    assert abs(m["rollout/ratio_mean"] - float(torch.tensor(off).exp())) < 1e-3
    # old_logp is the trainer's own: on-policy, the ratio is exactly 1 (the engine's would give exp(0.25))
    assert abs(m["approx_kl_old"]) < 1e-6 and m["clip_frac"] == 0.0


def test_progress_text_shows_generation_cost_only_when_dynamic_sampling_filtered():
    from rewardlab.logging import progress_text

    plain = {"reward/mean": 0.5, "response_len/mean": 7.0, "completions/generated": 32, "completions/kept": 32,
             "num_gen_batches": 1, "gen_budget_exhausted": 0, "skipped": 0}
    assert progress_text(plain) == "reward 0.500 | len 7.0"
    assert progress_text({**plain, "completions/generated": 96, "num_gen_batches": 3}).endswith(
        " | kept 32/96 in 3 rounds")
    short = {**plain, "completions/generated": 128, "completions/kept": 24, "num_gen_batches": 4,
             "gen_budget_exhausted": 1}
    assert progress_text(short).endswith(" | kept 24/128 in 4 rounds (budget spent)")
    skipped = {"skipped": 1, "completions/generated": 32, "completions/kept": 0, "num_gen_batches": 1,
               "gen_budget_exhausted": 1}
    assert progress_text(skipped) == "SKIPPED | kept 0/32 in 1 round (budget spent)"


@pytest.mark.parametrize("correction", ["decoupled_token_is", "bypass_ppo_clip", "bypass_pg_is", "decoupled_k3_rs"])
def test_rollout_correction_reaches_the_loss(correction, tiny_model_dir, tmp_path, monkeypatch):
    """With engine log-probs 0.25 below the trainer's: decoupled token IS weights the loss by exp(0.25)
    (old log-probs stay the trainer's); bypass takes the engine's as old log-probs (approx_kl_old = -0.25),
    PPO-clip without weights in the loss, REINFORCE (bypass_pg_is) with sequence TIS weights in (1, 2].
    K3 rejection at 0.01 rejects every token (k3(0.25) = 0.034): no token reaches the loss."""
    import json

    from rewardlab.train import build, build_config
    from rewardlab.train import train

    monkeypatch.setattr(build, "make_engine", lambda kind, model, tok, **kw: _LogprobEngine(model, tok, **kw))
    cfg = build_config(None, {
        "model": str(tiny_model_dir), "output_dir": str(tmp_path / "run"), "algo": "grpo", "rollout": "vllm",
        "steps": "1", "prompts_per_step": "2", "group_size": "4", "max_new_tokens": "6", "reward": "format",
        "reward_workers": "1", "threads": "1", "progress": "false", "plots": "false", "task_limit": "8",
        "correction": correction,
    })
    train(cfg)
    (m,) = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    off = _LogprobEngine.OFFSET
    assert abs(m["rollout_corr/kl"] + off) < 1e-3  # mean(rollout - old)
    if correction == "decoupled_k3_rs":
        assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1.0)
        assert m["ratio/mean"] == 0.0  # a token mean over no token: nothing reached the loss
    elif correction == "decoupled_token_is":
        assert abs(m["is_weight/mean"] - math.exp(off)) < 1e-3
        assert abs(m["approx_kl_old"]) < 1e-6
    else:
        assert abs(m["approx_kl_old"] + off) < 1e-3
        if correction == "bypass_ppo_clip":
            assert "is_weight/mean" not in m and m["ratio/mean"] == pytest.approx(math.exp(off), abs=1e-3)
        else:
            assert 1.0 < m["is_weight/mean"] <= 2.0 + 1e-6
            assert "clip_frac" not in m  # REINFORCE (gpg), not the clipped surrogate


def test_a_traces_earlier_branches_are_paid_its_advantage_and_counted_once():
    """``branches=all``: group statistics see each episode once (its last branch's sample), and its earlier
    branches get the same advantage and score, then train right after it (``samples.trained``)."""
    from types import SimpleNamespace

    from rewardlab.train.config import TrainConfig, resolve_algo
    from rewardlab.train.loop import set_advantages
    from rewardlab.train.samples import trained

    run = SimpleNamespace(algo=resolve_algo(TrainConfig(algo="grpo")), group_sizes=None, reward_norm=None)
    kept = [_sample([1], [2, 3]) for _ in range(4)]
    for s, score in zip(kept, (1.0, 0.0, 0.0, 0.0)):
        s.score = score
    kept[0].branches = [_sample([1], [4]), _sample([1], [5])]  # two earlier branches of the one rewarded episode
    kept[2].branches = [_sample([1], [6])]
    set_advantages(run, kept)
    adv = [s.advantage for s in kept]
    assert adv == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)  # 4 episodes, not 7 samples: z-scores of 1,0,0,0
    assert [b.advantage for b in kept[0].branches] == [adv[0]] * 2 and kept[2].branches[0].advantage == adv[2]
    assert [b.score for b in kept[0].branches] == [1.0, 1.0]
    assert [s.token_ids for s in trained(kept)] == [[2, 3], [4], [5], [2, 3], [2, 3], [6], [2, 3]]
