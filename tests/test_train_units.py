"""In-process pieces of the trainer: batching layout, log-probs, the frozen-prefix cache, data order."""

from __future__ import annotations

import torch

from rewardlab.train import (
    FrozenPrefix,
    PromptStream,
    Sample,
    decoder_blocks,
    freeze_to_top_layers,
    pad_batch,
    shared_prompt_logprobs,
    token_logprobs,
)


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
