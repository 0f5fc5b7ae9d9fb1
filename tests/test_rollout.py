"""Rollout engine tests on a tiny random model: shapes, order, finish reasons, EOS cuts, seeds, weight sync."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rewardlab.testing import eos_biased

from rewardlab.errors import RewardlabError
from rewardlab.models import load_model
from rewardlab.rollout import Completion, HFEngine, RolloutEngine, SamplingParams, format_prompt, make_engine


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    torch.manual_seed(0)
    return load_model(tiny_model_dir)


@pytest.fixture
def engine(tiny):
    model, tok = tiny
    return HFEngine(model, tok, batch_size=4)


PROMPTS = ["What is 3 plus 4?", "Natalia sold clips to 48 of her friends in April, and then she sold half as many."]


def test_shapes_and_prompt_major_order(engine, tiny):
    _, tok = tiny
    texts = [format_prompt(tok, p) for p in PROMPTS]
    outs = engine.generate(texts, n=3, sampling=SamplingParams(max_new_tokens=5, seed=1))
    assert len(outs) == 6
    assert [c.prompt_index for c in outs] == [0, 0, 0, 1, 1, 1]
    for c in outs:
        assert isinstance(c, Completion)
        assert 1 <= len(c.token_ids) <= 5
        assert c.finish_reason in ("stop", "length")
        assert c.prompt_ids == tok(texts[c.prompt_index], add_special_tokens=False)["input_ids"]
        assert tok.pad_token_id not in c.prompt_ids  # left padding was removed
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
    assert engine.stats["generated_tokens"] == sum(len(c.token_ids) for c in outs)


def test_batch_size_does_not_change_greedy_output(tiny):
    model, tok = tiny
    texts = [format_prompt(tok, p) for p in PROMPTS]
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    a = HFEngine(model, tok, batch_size=1).generate(texts, 2, greedy)
    b = HFEngine(model, tok, batch_size=8).generate(texts, 2, greedy)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert a[0].token_ids == a[1].token_ids  # greedy samples of one prompt agree


def test_length_finish_when_eos_impossible(tiny):
    model, tok = tiny
    m = eos_biased(model, tok, -1e9)
    outs = HFEngine(m, tok).generate([format_prompt(tok, "hi")], 4, SamplingParams(max_new_tokens=7, seed=0))
    assert all(c.finish_reason == "length" and len(c.token_ids) == 7 for c in outs)
    assert all(tok.eos_token_id not in c.token_ids for c in outs)


def test_eos_stop_cuts_after_eos_and_drops_padding(tiny):
    model, tok = tiny
    m = eos_biased(model, tok, 1e9)
    outs = HFEngine(m, tok).generate([format_prompt(tok, "hi"), "x"], 2, SamplingParams(max_new_tokens=7, seed=0))
    for c in outs:
        assert c.finish_reason == "stop"
        assert c.token_ids == [tok.eos_token_id]  # the EOS the policy emitted is kept, padding is not
        assert c.text == ""


def test_mixed_batch_keeps_each_rows_own_end(tiny):
    # EOS is likely but not certain, so one batch mixes early stops with rows that hit the limit.
    model, tok = tiny
    m = eos_biased(model, tok, 3.0)
    outs = HFEngine(m, tok, batch_size=16).generate([format_prompt(tok, p) for p in PROMPTS], 8,
                                                      SamplingParams(max_new_tokens=6, seed=3))
    reasons = {c.finish_reason for c in outs}
    assert reasons == {"stop", "length"}, reasons
    for c in outs:
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in c.token_ids[:-1]
        else:
            assert len(c.token_ids) == 6 and tok.eos_token_id not in c.token_ids


def test_seed_reproducible_and_restores_global_rng(engine, tiny):
    _, tok = tiny
    texts = [format_prompt(tok, p) for p in PROMPTS]
    sp = SamplingParams(max_new_tokens=8, temperature=1.0, seed=1234)
    torch.manual_seed(7)
    before = torch.get_rng_state()
    a = engine.generate(texts, 2, sp)
    assert torch.equal(torch.get_rng_state(), before)  # a seeded call leaves the caller's RNG alone
    b = engine.generate(texts, 2, sp)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    c = engine.generate(texts, 2, SamplingParams(max_new_tokens=8, temperature=1.0, seed=99))
    assert [x.token_ids for x in a] != [x.token_ids for x in c]


def test_unseeded_calls_follow_global_rng(engine, tiny):
    _, tok = tiny
    texts = [format_prompt(tok, PROMPTS[0])]
    sp = SamplingParams(max_new_tokens=8)
    torch.manual_seed(5)
    a = engine.generate(texts, 3, sp)
    torch.manual_seed(5)
    b = engine.generate(texts, 3, sp)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def test_training_mode_restored_and_no_grad(tiny):
    model, tok = tiny
    model.train()
    eng = HFEngine(model, tok)
    eng.generate(["hi"], 1, SamplingParams(max_new_tokens=2, seed=0))
    assert model.training
    model.eval()
    eng.generate(["hi"], 1, SamplingParams(max_new_tokens=2, seed=0))
    assert not model.training


def test_stop_strings(tiny):
    model, tok = tiny
    m = eos_biased(model, tok, -1e9)
    eng = HFEngine(m, tok)
    free = eng.generate(["hi"], 1, SamplingParams(max_new_tokens=12, temperature=0.0))[0]
    assert free.finish_reason == "length"
    stop = free.text[3:6]  # a substring the greedy continuation is known to produce
    assert stop
    cut = eng.generate(["hi"], 1, SamplingParams(max_new_tokens=12, temperature=0.0, stop=(stop,)))[0]
    assert cut.finish_reason == "stop"
    assert stop in cut.text
    assert len(cut.token_ids) < len(free.token_ids)
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]
    assert stop not in tok.decode(cut.token_ids[:-1], skip_special_tokens=True)


def test_load_weights_same_object_is_live_and_other_object_copies(tiny):
    import copy

    model, tok = tiny
    m = copy.deepcopy(model)
    eng = HFEngine(m, tok)
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    before = eng.generate(["hi"], 1, greedy)[0].token_ids
    with torch.no_grad():  # an in-place "optimizer step" on the live model
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    eng.load_weights(m)
    assert eng.model is m
    after = eng.generate(["hi"], 1, greedy)[0].token_ids
    assert after != before
    # A different model object: its weights are copied into the engine's model.
    eng.load_weights(model)
    assert eng.model is m
    assert torch.equal(m.get_input_embeddings().weight, model.get_input_embeddings().weight)
    assert eng.generate(["hi"], 1, greedy)[0].token_ids == before


def test_format_prompt_chat_and_raw(tiny):
    _, tok = tiny
    text = format_prompt(tok, "What is 2+2?")
    assert text == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert format_prompt(tok, msgs).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi")
    assert format_prompt(tok, "def f():", chat=False) == "def f():"


def test_format_prompt_without_template(tiny):
    import copy

    _, tok = tiny
    plain = copy.deepcopy(tok)
    plain.chat_template = None
    assert format_prompt(plain, "2+2=") == "2+2="
    assert format_prompt(plain, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a\n\nb"
    with pytest.raises(RewardlabError, match="no chat template"):
        format_prompt(plain, "x", chat=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 4, "temperature": -1}, "temperature"),
        ({"max_new_tokens": 4, "top_p": 0}, "top_p"),
        ({"max_new_tokens": 4, "top_k": -2}, "top_k"),
    ],
)
def test_sampling_params_validation(kwargs, match):
    with pytest.raises(RewardlabError, match=match):
        SamplingParams(**kwargs)


def test_make_engine(tiny):
    model, tok = tiny
    eng = make_engine("hf", model, tok, batch_size=2)
    assert isinstance(eng, HFEngine) and isinstance(eng, RolloutEngine) and eng.batch_size == 2
    with pytest.raises(RewardlabError, match="unknown rollout engine"):
        make_engine("tgi", model, tok)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_make_engine_vllm_missing_says_how_to_install(tiny):
    model, tok = tiny
    with pytest.raises(RewardlabError, match=r"pip install 'rewardlab\[vllm\]'"):
        make_engine("vllm", model, tok)


def test_model_generation_defaults_do_not_leak(tiny):
    """A checkpoint's generation_config (repetition penalty, top_k, min length) must not change sampling."""
    import copy

    model, tok = tiny
    m = eos_biased(model, tok, 1e9)  # EOS is always the argmax...
    m.generation_config.min_new_tokens = 5  # ...unless a leaked min length suppresses it
    m.generation_config.repetition_penalty = 50.0
    m.generation_config.top_k = 1
    saved = copy.deepcopy(m.generation_config)
    out = HFEngine(m, tok).generate(["hi"], 2, SamplingParams(max_new_tokens=8, seed=0))
    assert all(c.token_ids == [tok.eos_token_id] for c in out)
    assert m.generation_config.to_dict() == saved.to_dict()  # restored afterwards
