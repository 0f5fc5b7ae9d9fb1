"""The HF engine's sampled-token log-probs (``Completion.logprobs``) on a tiny random model.

They must be the log-prob of each sampled token under the distribution it was drawn from (after
temperature / top-k / top-p; the raw one for greedy), as a full forward pass of the trainer
computes it, cut to each completion's ``token_ids``.
"""

from __future__ import annotations

import math

import pytest
import torch

from rewardlab.testing import eos_biased

from rewardlab.models import load_model
from rewardlab.rollout import HFEngine, SamplingParams, format_prompt
from rewardlab.train.logprobs import pad_batch, token_logprobs

PROMPTS = ["What is 3 plus 4?", "Natalia sold clips to 48 of her friends in April, and then she sold half as many."]
ATOL = 1e-4  # float32: incremental (KV cache) decoding vs one full forward pass


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    torch.manual_seed(0)
    model, tok = load_model(tiny_model_dir)
    model.eval()
    return model, tok


def _texts(tok):
    return [format_prompt(tok, p) for p in PROMPTS]


def _response_logits(model, tok, comps):
    """Raw logits predicting each response token, by one full forward pass: (B, R, V), ids (B, R), lengths."""
    b = pad_batch(comps, tok.pad_token_id, "cpu")
    with torch.no_grad():
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    R = b["R"]
    logits = out.logits[:, -R - 1 : -1, :].float()  # (B, R, V): position t predicts response token t
    return logits, b["response_ids"], [len(c.token_ids) for c in comps]


def _gathered(logp, ids, lengths):
    """Per-row lists of ``logp`` (B, R, V) at ``ids`` (B, R), cut to ``lengths``."""
    g = logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # (B, R)
    return [g[i, :n].tolist() for i, n in enumerate(lengths)]


def _assert_rows_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g is not None and len(g) == len(w)
        torch.testing.assert_close(torch.tensor(g), torch.tensor(w), rtol=0, atol=ATOL)


def _check_lengths(comps):
    for c in comps:
        assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
        assert all(math.isfinite(x) and x <= 1e-6 for x in c.logprobs)


def test_temperature_one_matches_trainer_token_logprobs(tiny):
    """T=1, no top-k / top-p: the sampling distribution is the policy, so the trainer's log-probs."""
    model, tok = tiny
    eng = HFEngine(model, tok, batch_size=4)  # 6 rows: two left-padded chunks
    comps = eng.generate(_texts(tok), 3, SamplingParams(max_new_tokens=12, seed=1))
    _check_lengths(comps)
    with torch.no_grad():
        lp, _ = token_logprobs(model, pad_batch(comps, tok.pad_token_id, "cpu"))  # (B, R)
    _assert_rows_close([c.logprobs for c in comps], [lp[i, : len(c.token_ids)].tolist() for i, c in enumerate(comps)])


def test_temperature_is_applied(tiny):
    model, tok = tiny
    comps = HFEngine(model, tok, batch_size=4).generate(
        _texts(tok), 3, SamplingParams(max_new_tokens=10, temperature=0.7, seed=2)
    )
    _check_lengths(comps)
    logits, ids, lengths = _response_logits(model, tok, comps)
    _assert_rows_close([c.logprobs for c in comps], _gathered(torch.log_softmax(logits / 0.7, -1), ids, lengths))
    # ...and they are not the raw policy's
    raw = _gathered(torch.log_softmax(logits, -1), ids, lengths)
    assert max(abs(a - b) for c, r in zip(comps, raw) for a, b in zip(c.logprobs, r)) > 1e-2


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_top_k_renormalises_over_the_kept_set(tiny, temperature):
    model, tok = tiny
    comps = HFEngine(model, tok, batch_size=4).generate(
        _texts(tok), 3, SamplingParams(max_new_tokens=10, temperature=temperature, top_k=5, seed=3)
    )
    _check_lengths(comps)
    logits, ids, lengths = _response_logits(model, tok, comps)
    scaled = logits / temperature
    kth = scaled.topk(5, dim=-1).values[..., -1:]  # (B, R, 1)
    truncated = scaled.masked_fill(scaled < kth, float("-inf"))
    _assert_rows_close([c.logprobs for c in comps], _gathered(torch.log_softmax(truncated, -1), ids, lengths))
    untruncated = _gathered(torch.log_softmax(scaled, -1), ids, lengths)
    for c, u in zip(comps, untruncated):
        assert all(a >= b - ATOL for a, b in zip(c.logprobs, u))
        assert all(a > b + 0.1 for a, b in zip(c.logprobs, u))  # 5 of ~400 tokens keep far less than all the mass


def test_top_p_renormalises_over_the_nucleus(tiny):
    model, tok = tiny
    top_p = 0.5
    comps = HFEngine(model, tok, batch_size=4).generate(
        _texts(tok), 3, SamplingParams(max_new_tokens=10, temperature=0.7, top_p=top_p, seed=4)
    )
    _check_lengths(comps)
    logits, ids, lengths = _response_logits(model, tok, comps)
    scaled = logits / 0.7
    probs = torch.softmax(scaled, -1)
    sorted_p, order = probs.sort(-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p  # mass of the strictly likelier tokens
    keep_sorted = before < top_p  # the smallest prefix reaching top_p (the top token always kept)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    nucleus = scaled.masked_fill(~keep, float("-inf"))
    _assert_rows_close([c.logprobs for c in comps], _gathered(torch.log_softmax(nucleus, -1), ids, lengths))


def test_same_tokens_with_and_without_recording(tiny):
    """Recording passes the warpers itself (after HF's own processors): the same distribution, so the same draws."""
    model, tok = tiny
    for sp in (
        SamplingParams(max_new_tokens=10, seed=5),
        SamplingParams(max_new_tokens=10, temperature=0.7, top_k=20, top_p=0.9, seed=5),
        SamplingParams(max_new_tokens=10, temperature=0.0),
    ):
        on = HFEngine(model, tok, batch_size=4).generate(_texts(tok), 3, sp)
        off = HFEngine(model, tok, batch_size=4, record_logprobs=False).generate(_texts(tok), 3, sp)
        assert [c.token_ids for c in on] == [c.token_ids for c in off]
        assert all(c.logprobs is None for c in off)
        _check_lengths(on)


def test_lengths_follow_eos_cuts(tiny):
    """Rows that stop at EOS (padding after it in the batch) keep exactly their tokens' log-probs."""
    model, tok = tiny
    m = eos_biased(model, tok, 4.0)  # EOS ~10% a step: a mix of early stops and full-length rows
    comps = HFEngine(m, tok, batch_size=8).generate(_texts(tok), 8, SamplingParams(max_new_tokens=16, seed=6))
    _check_lengths(comps)
    stopped = [c for c in comps if c.finish_reason == "stop"]
    assert stopped and any(len(c.token_ids) < 16 for c in stopped)
    assert len({len(c.token_ids) for c in comps}) > 1  # rows of one batch ended at different steps
    assert all(c.token_ids[-1] == tok.eos_token_id for c in stopped)
    with torch.no_grad():
        lp, _ = token_logprobs(m, pad_batch(comps, tok.pad_token_id, "cpu"))
    _assert_rows_close([c.logprobs for c in comps], [lp[i, : len(c.token_ids)].tolist() for i, c in enumerate(comps)])


def test_lengths_follow_stop_string_cuts(tiny):
    model, tok = tiny
    m = eos_biased(model, tok, -1e9)
    eng = HFEngine(m, tok, batch_size=4)
    free = eng.generate(_texts(tok), 1, SamplingParams(max_new_tokens=12, seed=7))
    stop = free[0].text[3:6]  # a substring the first prompt's continuation is known to produce
    assert stop
    cut = eng.generate(_texts(tok), 1, SamplingParams(max_new_tokens=12, seed=7, stop=(stop,)))
    _check_lengths(cut)
    assert cut[0].finish_reason == "stop" and len(cut[0].token_ids) < len(free[0].token_ids)
    assert cut[0].token_ids == free[0].token_ids[: len(cut[0].token_ids)]
    assert cut[0].logprobs == pytest.approx(free[0].logprobs[: len(cut[0].token_ids)], abs=1e-6)


def test_greedy_reports_finite_raw_logprob_of_the_argmax(tiny):
    model, tok = tiny
    comps = HFEngine(model, tok, batch_size=4).generate(_texts(tok), 2,
                                                        SamplingParams(max_new_tokens=8, temperature=0.0))
    _check_lengths(comps)
    logits, ids, lengths = _response_logits(model, tok, comps)
    for i, n in enumerate(lengths):
        assert ids[i, :n].tolist() == logits[i, :n].argmax(-1).tolist()
    _assert_rows_close([c.logprobs for c in comps], _gathered(torch.log_softmax(logits, -1), ids, lengths))
