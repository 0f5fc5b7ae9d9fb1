"""Atomic checkpoints: complete ones load, partial ones are never picked up and get cleaned."""

from __future__ import annotations

import torch

from rewardlab.train.checkpoint import (
    checkpoint_dir,
    clean_partial,
    is_complete,
    latest_checkpoint,
    list_checkpoints,
    load_trainer_state,
    load_weights,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def _model_and_tok(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def test_save_load_keep_and_partial_folders(tmp_path, tiny_model_dir):
    model, tok = _model_and_tok(tiny_model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    run = tmp_path / "run"
    for step in (1, 2, 3):
        save_checkpoint(run, step, model, tok, {"step": step, "optimizer": opt.state_dict()}, keep=2)
    assert [s for s, _ in list_checkpoints(run)] == [2, 3]  # keep=2 pruned step 1

    # A save killed half-way leaves a hidden temp folder; a hand-made step folder without the
    # completion marker is just as partial. Neither is ever resumed from, and both are cleaned.
    (run / "checkpoints" / ".tmp-step-000004-999").mkdir()
    fake = checkpoint_dir(run, 5)
    fake.mkdir()
    (fake / "config.json").write_text("{}")
    (fake / "trainer_state.pt").write_bytes(b"truncated")
    assert not is_complete(fake)
    assert latest_checkpoint(run) == checkpoint_dir(run, 3)
    removed = {p.name for p in clean_partial(run)}
    assert removed == {".tmp-step-000004-999", "step-000005"}

    state = load_trainer_state(latest_checkpoint(run))
    assert state["step"] == 3
    opt2 = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt2.load_state_dict(state["optimizer"])
    assert opt2.state_dict()["state"][0]["step"] == 1

    fresh, _ = _model_and_tok(tiny_model_dir)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    load_weights(fresh, latest_checkpoint(run))
    for (n, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), n


def test_rng_state_round_trip():
    state = rng_state()
    a = torch.rand(3)
    set_rng_state(state)
    assert torch.equal(torch.rand(3), a)
