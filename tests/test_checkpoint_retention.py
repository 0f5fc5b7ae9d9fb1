"""Checkpoint retention (keep the newest K, delete safely), LoRA adapter checkpoints, and sizes."""

from __future__ import annotations

import os

import pytest
import torch

from rewardlab.errors import RewardlabError
from rewardlab.train import checkpoint as ck
from rewardlab.train import lora
from rewardlab.train.checkpoint import (
    checkpoint_bytes,
    checkpoint_dir,
    clean_partial,
    is_complete,
    latest_checkpoint,
    list_checkpoints,
    load_trainer_state,
    load_weights,
    prune_checkpoints,
    save_checkpoint,
)

IDS = torch.tensor([[5, 17, 42, 99, 3, 250, 11, 8]])


def _model_and_tok(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def _lora(tiny_model_dir, seed=1):
    model, tok = _model_and_tok(tiny_model_dir)
    model = lora.apply_lora(model, 4, 8.0)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval(), tok


def _steps(run):
    return [s for s, _ in list_checkpoints(run)]


def _hidden(run):
    return sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("."))


def test_keep_two_of_five(tmp_path, tiny_model_dir):
    model, tok = _model_and_tok(tiny_model_dir)
    run = tmp_path / "run"
    for step in range(1, 6):
        save_checkpoint(run, step, model, tok, {"step": step}, keep=2)
        assert _steps(run) == list(range(max(1, step - 1), step + 1))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000004", "step-000005"]
    assert latest_checkpoint(run) == checkpoint_dir(run, 5)


def test_keep_zero_keeps_all_and_the_new_checkpoint_is_never_pruned(tmp_path, tiny_model_dir):
    model, tok = _model_and_tok(tiny_model_dir)
    run = tmp_path / "run"
    for step in (1, 2, 3):
        save_checkpoint(run, step, model, tok, {"step": step}, keep=0)
    assert _steps(run) == [1, 2, 3]
    # a higher step already on disk: keep=1 keeps it (the newest) and the one just written too
    save_checkpoint(run, 10, model, tok, {"step": 10}, keep=0)
    save_checkpoint(run, 4, model, tok, {"step": 4}, keep=1)
    assert _steps(run) == [4, 10]
    save_checkpoint(run, 5, model, tok, {"step": 5}, keep=2)
    assert _steps(run) == [5, 10]


def test_pruning_leaves_partial_folders_alone_and_a_killed_delete_is_cleaned(tmp_path, tiny_model_dir, monkeypatch):
    model, tok = _model_and_tok(tiny_model_dir)
    run = tmp_path / "run"
    save_checkpoint(run, 1, model, tok, {"step": 1})
    partial = checkpoint_dir(run, 2)  # e.g. a folder being written by hand / incomplete
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    save_checkpoint(run, 3, model, tok, {"step": 3})
    assert prune_checkpoints(run, 1) == [checkpoint_dir(run, 1)]
    assert partial.is_dir() and _steps(run) == [3]

    # Killed half-way through deleting step 3: the folder was renamed away first, so nothing that
    # remains looks like a complete checkpoint, and the next start's clean_partial removes it.
    save_checkpoint(run, 4, model, tok, {"step": 4})

    def dies(path, *a, **k):
        (path / "model.safetensors").unlink()  # part of the tree is gone, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(ck.shutil, "rmtree", dies)
    with pytest.raises(KeyboardInterrupt):
        prune_checkpoints(run, 1)
    monkeypatch.undo()
    assert _steps(run) == [4] and latest_checkpoint(run) == checkpoint_dir(run, 4)
    assert any(n.startswith(".tmp-del-step-000003") for n in _hidden(run))
    removed = {p.name for p in clean_partial(run)}
    assert "step-000002" in removed and any(n.startswith(".tmp-del-step-000003") for n in removed)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000004"]


def test_lora_checkpoint_holds_the_adapter_only_and_resumes_exactly(tmp_path, tiny_model_dir):
    model, tok = _lora(tiny_model_dir)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model(IDS, labels=IDS).loss.backward()
    opt.step()
    with torch.no_grad():
        want = model(IDS).logits
    run = tmp_path / "run"
    for step in (1, 2, 3):
        save_checkpoint(run, step, model, tok, {"step": step, "optimizer": opt.state_dict()}, keep=2)
    assert _steps(run) == [2, 3]
    ckpt = latest_checkpoint(run)
    names = {p.name for p in ckpt.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "trainer_state.pt", "COMPLETE"} <= names
    assert not any(n.startswith("model") and n.endswith((".safetensors", ".json", ".bin")) for n in names)
    assert not (ckpt / ck.MERGED_DIR).exists() and is_complete(ckpt) and ck.is_adapter_checkpoint(ckpt)
    assert load_trainer_state(ckpt)["step"] == 3

    fresh, _ = _model_and_tok(tiny_model_dir)
    fresh = lora.apply_lora(fresh, 4, 8.0).eval()
    load_weights(fresh, ckpt)
    for (n, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), n
    with torch.no_grad():
        torch.testing.assert_close(fresh(IDS).logits, want, rtol=0, atol=0)

    plain, _ = _model_and_tok(tiny_model_dir)
    with pytest.raises(RewardlabError, match="LoRA adapter"):
        load_weights(plain, ckpt)
    full_run = tmp_path / "full"
    save_checkpoint(full_run, 1, plain, tok, {"step": 1})
    with pytest.raises(RewardlabError, match="full weights"):
        load_weights(fresh, latest_checkpoint(full_run))


def test_lora_checkpoint_with_merged_weights(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model, tok = _lora(tiny_model_dir)
    with torch.no_grad():
        want = model(IDS).logits
    ckpt = save_checkpoint(tmp_path / "run", 1, model, tok, {"step": 1}, merged=True)
    merged = ckpt / ck.MERGED_DIR
    assert (merged / "config.json").is_file() and (merged / "model.safetensors").is_file()
    assert (merged / "tokenizer.json").is_file() and is_complete(ckpt)
    plain = AutoModelForCausalLM.from_pretrained(merged).eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(IDS).logits, want, rtol=0, atol=1e-5)


def test_checkpoint_bytes(tmp_path, tiny_model_dir):
    model, tok = _model_and_tok(tiny_model_dir)
    full = save_checkpoint(tmp_path / "full", 1, model, tok, {"step": 1})
    expect = sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(full) for f in fs)
    assert checkpoint_bytes(full) == expect > (full / "model.safetensors").stat().st_size
    peft_model, _ = _lora(tiny_model_dir)
    adapter = save_checkpoint(tmp_path / "lora", 1, peft_model, tok, {"step": 1})
    weights = (adapter / lora.ADAPTER_WEIGHTS).stat().st_size
    assert weights < 0.25 * (full / "model.safetensors").stat().st_size
    assert checkpoint_bytes(adapter) < checkpoint_bytes(full)
    assert checkpoint_bytes(tmp_path / "nothing-here") == 0
