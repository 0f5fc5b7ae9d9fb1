"""Shared-prefix generation (the HF engine's default for n > 1) on a tiny random model.

Each chunk's distinct prompts are prefilled once, their KV cache copied to their rows, and the
engine's own loop decodes (preallocated cache, ended rows dropped from the batch). It draws the
same random numbers as ``generate`` in the same order, so for a seed it must give the very tokens
of the plain path (``shared_prefix=False``: ``generate`` on n copies of each prompt); its log-probs
must be a full forward pass's, and greedy decoding must be ``model.generate``'s.
"""

from __future__ import annotations


import pytest
import torch

from rewardlab.testing import eos_biased
from transformers import GenerationConfig

from rewardlab.models import load_model
from rewardlab.rollout import HFEngine, SamplingParams, format_prompt
from rewardlab.rollout import decode as decode_module
from rewardlab.train.logprobs import pad_batch, token_logprobs

PROMPTS = [
    "What is 3 plus 4?",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many.",
    "hi",
]
ATOL = 1e-4  # float32: incremental (KV cache) decoding vs one full forward pass

SAMPLINGS = {
    "t1": SamplingParams(max_new_tokens=16, seed=1),
    "warped": SamplingParams(max_new_tokens=16, temperature=0.7, top_k=20, top_p=0.9, seed=2),
    "greedy": SamplingParams(max_new_tokens=12, temperature=0.0),
    "stop": SamplingParams(max_new_tokens=12, seed=3, stop=("a",)),
}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    torch.manual_seed(0)
    model, tok = load_model(tiny_model_dir)
    model.eval()
    return model, tok


@pytest.fixture(scope="module")
def early(tiny):
    model, tok = tiny
    return eos_biased(model, tok, 3.0), tok  # EOS ~5% a step: a spread of lengths within a chunk


def _texts(tok):
    return [format_prompt(tok, p) for p in PROMPTS]


def _same(a, b, lp_atol=1e-5):
    assert [c.prompt_index for c in a] == [c.prompt_index for c in b]
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    assert [c.text for c in a] == [c.text for c in b]
    for x, y in zip(a, b):
        assert x.prompt_ids == y.prompt_ids
        if x.logprobs is None:
            assert y.logprobs is None
        else:
            assert x.logprobs == pytest.approx(y.logprobs, abs=lp_atol)


@pytest.mark.parametrize("record", [True, False])
@pytest.mark.parametrize("name", list(SAMPLINGS))
@pytest.mark.parametrize("batch_size", [4, 64])  # 4: prompts split across chunks (3 + 1 rows, ...)
@pytest.mark.parametrize("which", ["tiny", "early"])
def test_same_tokens_as_the_generate_path(request, which, batch_size, name, record):
    model, tok = request.getfixturevalue(which)
    sp = SAMPLINGS[name]
    plain = HFEngine(model, tok, batch_size=batch_size, shared_prefix=False, record_logprobs=record)
    shared = HFEngine(model, tok, batch_size=batch_size, record_logprobs=record)
    a = plain.generate(_texts(tok), 5, sp)
    b = shared.generate(_texts(tok), 5, sp)
    _same(a, b)
    assert plain.stats["generated_tokens"] == shared.stats["generated_tokens"] == sum(len(c.token_ids) for c in b)
    if which == "early" and name == "t1":
        assert len({len(c.token_ids) for c in b}) > 2 and any(c.finish_reason == "stop" for c in b)


def test_unseeded_calls_draw_from_the_global_rng_like_generate(tiny):
    model, tok = tiny
    sp = SamplingParams(max_new_tokens=10)
    torch.manual_seed(11)
    a = HFEngine(model, tok, batch_size=4, shared_prefix=False).generate(_texts(tok), 3, sp)
    after_a = torch.get_rng_state()
    torch.manual_seed(11)
    b = HFEngine(model, tok, batch_size=4).generate(_texts(tok), 3, sp)
    _same(a, b)
    assert torch.equal(torch.get_rng_state(), after_a)  # the same number of draws, too


def test_logprobs_equal_the_trainers_with_rows_ending_early(early):
    """Rows that end (and leave the batch) keep exactly their tokens' log-probs, at temperature 1."""
    model, tok = early
    comps = HFEngine(model, tok, batch_size=16).generate(_texts(tok), 8, SamplingParams(max_new_tokens=20, seed=6))
    assert len({len(c.token_ids) for c in comps}) > 2
    with torch.no_grad():
        lp, _ = token_logprobs(model, pad_batch(comps, tok.pad_token_id, "cpu"))  # (B, R)
    for i, c in enumerate(comps):
        assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
        torch.testing.assert_close(torch.tensor(c.logprobs), lp[i, : len(c.token_ids)], rtol=0, atol=ATOL)


def test_warped_logprobs_equal_a_full_forward(tiny):
    model, tok = tiny
    comps = HFEngine(model, tok, batch_size=6).generate(
        _texts(tok), 4, SamplingParams(max_new_tokens=10, temperature=0.7, top_k=5, seed=8)
    )
    b = pad_batch(comps, tok.pad_token_id, "cpu")
    with torch.no_grad():
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    scaled = out.logits[:, -b["R"] - 1 : -1, :].float() / 0.7  # (B, R, V)
    kth = scaled.topk(5, dim=-1).values[..., -1:]
    logp = torch.log_softmax(scaled.masked_fill(scaled < kth, float("-inf")), -1)
    want = logp.gather(-1, b["response_ids"].unsqueeze(-1)).squeeze(-1)  # (B, R)
    for i, c in enumerate(comps):
        torch.testing.assert_close(torch.tensor(c.logprobs), want[i, : len(c.token_ids)], rtol=0, atol=ATOL)


@pytest.mark.parametrize("which", ["tiny", "early"])
def test_greedy_equals_plain_model_generate(request, which):
    model, tok = request.getfixturevalue(which)
    texts = _texts(tok)
    comps = HFEngine(model, tok, batch_size=8).generate(texts, 4, SamplingParams(max_new_tokens=12, temperature=0.0))
    tok.padding_side = "left"
    enc = tok([t for t in texts for _ in range(4)], return_tensors="pt", padding=True, add_special_tokens=False)
    cfg = GenerationConfig(do_sample=False, max_new_tokens=12, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        out = model.generate(**enc, generation_config=cfg)
    for c, row in zip(comps, out[:, enc["input_ids"].shape[1] :].tolist()):
        assert c.token_ids == row[: len(c.token_ids)]
        rest = row[len(c.token_ids) :]
        if c.finish_reason == "stop":
            assert all(t == tok.pad_token_id for t in rest)
        else:
            assert not rest


class _Batches:
    """Records the batch size and length of every forward of ``model``'s decoder stack."""

    def __init__(self, model):
        self.shapes: list[tuple[int, int]] = []
        self.handle = model.get_decoder().register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        ids = args[0] if args else kwargs.get("input_ids")
        self.shapes.append(tuple(ids.shape))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def test_each_distinct_prompt_is_prefilled_once(tiny):
    model, tok = tiny
    texts = _texts(tok)
    with _Batches(model) as seen:
        HFEngine(model, tok, batch_size=64).generate(texts, 8, SamplingParams(max_new_tokens=6, seed=0))
    assert seen.shapes[0][0] == len(texts)  # one prefill row per prompt...
    assert all(s == (len(texts) * 8, 1) for s in seen.shapes[1:])  # ...then one token for each of the 24 rows
    with _Batches(model) as seen:
        HFEngine(model, tok, batch_size=64, shared_prefix=False).generate(texts, 8,
                                                                          SamplingParams(max_new_tokens=6, seed=0))
    assert seen.shapes[0][0] == len(texts) * 8  # the plain path prefills every copy


def test_split_prompt_is_prefilled_in_each_chunk(tiny):
    model, tok = tiny
    with _Batches(model) as seen:
        HFEngine(model, tok, batch_size=4).generate(_texts(tok)[:2], 3, SamplingParams(max_new_tokens=1, seed=0))
    assert [s[0] for s in seen.shapes] == [2, 1]  # rows [p0 p0 p0 p1] then [p1 p1]


def test_ended_rows_leave_the_batch(early):
    model, tok = early
    with _Batches(model) as seen:
        comps = HFEngine(model, tok, batch_size=24).generate(_texts(tok), 8, SamplingParams(max_new_tokens=24, seed=6))
    sizes = [s[0] for s in seen.shapes[1:]]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < 24  # shrinks as rows end
    live = [sum(1 for c in comps if len(c.token_ids) > t) for t in range(1, len(sizes) + 1)]
    assert all(size >= n for size, n in zip(sizes, live))  # never drops a row that still decodes


def test_without_preallocation_same_tokens(tiny, early, monkeypatch):
    """The fallback (``reorder_cache`` on the model's own cache, for caches the buffers do not cover)."""
    real = decode_module.preallocate
    used = []

    def spy(*args):
        used.append(real(*args))
        return used[-1]

    for model, tok in (tiny, early):
        monkeypatch.setattr(decode_module, "preallocate", spy)
        a = HFEngine(model, tok, batch_size=8).generate(_texts(tok), 4, SAMPLINGS["t1"])
        monkeypatch.setattr(decode_module, "preallocate", lambda *args: False)
        b = HFEngine(model, tok, batch_size=8).generate(_texts(tok), 4, SAMPLINGS["t1"])
        _same(a, b)
    assert used and all(used)  # this transformers' Qwen2 cache is preallocated, so both paths ran


def test_n1_and_off_use_generate(tiny, monkeypatch):
    model, tok = tiny
    calls = []
    real = type(model).generate
    monkeypatch.setattr(type(model), "generate", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    HFEngine(model, tok).generate(_texts(tok), 1, SamplingParams(max_new_tokens=3, seed=0))
    assert len(calls) == 1
    HFEngine(model, tok, shared_prefix=False).generate(_texts(tok), 2, SamplingParams(max_new_tokens=3, seed=0))
    assert len(calls) == 2
    HFEngine(model, tok).generate(_texts(tok), 2, SamplingParams(max_new_tokens=3, seed=0))
    assert len(calls) == 2  # shared prefix: the engine's own loop


def test_training_mode_and_grad_state_restored(tiny):
    model, tok = tiny
    model.train()
    try:
        comps = HFEngine(model, tok).generate(_texts(tok), 2, SamplingParams(max_new_tokens=3, seed=0))
        assert model.training and torch.is_grad_enabled()
        assert all(len(c.token_ids) >= 1 for c in comps)
    finally:
        model.eval()
