"""LoRA through PEFT (rewardlab.train.lora): the adapter's gradients against a hand-written LoRA,
merged weights against the unmerged model, the saved adapter and merged folders against the live
model, and which parameters train."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from rewardlab.errors import RewardlabError
from rewardlab.train import lora

RANK, ALPHA = 4, 8.0


def _base(tiny_model_dir, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).to(dtype)


def _tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _randomise_adapters(model, seed: int = 1) -> None:
    """PEFT starts B at zero (the adapter is a no-op, and A gets no gradient): make both random."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.2)


def _lora_model(tiny_model_dir, targets=None, dtype=torch.float32, **kw):
    model = lora.apply_lora(_base(tiny_model_dir, dtype), RANK, ALPHA, targets, **kw)
    _randomise_adapters(model)
    return model


IDS = torch.tensor([[5, 17, 42, 99, 3, 250, 11, 8], [7, 7, 300, 12, 64, 1, 2, 90]])


class ManualLoRALinear(torch.nn.Module):
    """y = x (W + (alpha/r) B A)^T + b, written out by hand (no PEFT)."""

    def __init__(self, weight, bias, a, b, scale):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.A = torch.nn.Parameter(a.detach().clone())
        self.B = torch.nn.Parameter(b.detach().clone())
        self.scale = scale

    def forward(self, x):
        w = self.weight + self.scale * self.B @ self.A
        return torch.nn.functional.linear(x, w, self.bias)


# The gradient checks run in float64: PEFT computes x A^T B^T (scaled) beside W x, the manual
# module x (W + s B A)^T, and in float32 that reassociation alone is ~3e-5 relative off.


def test_one_linear_gradients_match_a_manual_lora(tiny_model_dir):
    model = _lora_model(tiny_model_dir, ["q_proj"], dtype=torch.float64)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert layer.scaling["default"] == pytest.approx(ALPHA / RANK)
    manual = ManualLoRALinear(layer.base_layer.weight, layer.base_layer.bias, a, b, ALPHA / RANK)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, layer.in_features, generator=g, dtype=torch.float64)
    c = torch.randn(3, 5, layer.out_features, generator=g, dtype=torch.float64)

    y = layer(x)
    ((y * c).sum() + (y ** 2).mean()).backward()
    ym = manual(x)
    ((ym * c).sum() + (ym ** 2).mean()).backward()
    torch.testing.assert_close(y, ym, rtol=1e-5, atol=0)
    assert a.grad.abs().sum() > 0 and b.grad.abs().sum() > 0
    torch.testing.assert_close(a.grad, manual.A.grad, rtol=1e-5, atol=0)
    torch.testing.assert_close(b.grad, manual.B.grad, rtol=1e-5, atol=0)
    assert layer.base_layer.weight.grad is None  # the base weight is frozen


def test_whole_model_gradients_match_manual_lora_layers(tiny_model_dir):
    """Every adapted linear of the model replaced by ManualLoRALinear: same logits and grads."""
    model = _lora_model(tiny_model_dir, ["q_proj", "v_proj", "down_proj"], dtype=torch.float64)
    manual = _base(tiny_model_dir, torch.float64)
    pairs = []
    for name, mod in model.named_modules():
        if hasattr(mod, "lora_A") and "default" in getattr(mod, "lora_A", {}):
            path = name[len("base_model.model."):]
            parent_path, _, attr = path.rpartition(".")
            parent = manual.get_submodule(parent_path)
            m = ManualLoRALinear(mod.base_layer.weight, mod.base_layer.bias, mod.lora_A["default"].weight,
                                 mod.lora_B["default"].weight, ALPHA / RANK)
            setattr(parent, attr, m)
            pairs.append((mod, m))
    assert len(pairs) == 3 * 2  # three targets in each of the two blocks
    manual.requires_grad_(False)
    for _, m in pairs:
        m.A.requires_grad_(True)
        m.B.requires_grad_(True)

    def loss_of(net):
        logits = net(IDS).logits
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, IDS[:, 1:, None]).squeeze(-1)
        return -logp.mean(), logits

    loss, logits = loss_of(model)
    loss.backward()
    loss_m, logits_m = loss_of(manual)
    loss_m.backward()
    torch.testing.assert_close(logits, logits_m, rtol=1e-5, atol=1e-8)
    for mod, m in pairs:
        ga, gb = mod.lora_A["default"].weight.grad, mod.lora_B["default"].weight.grad
        assert ga.abs().sum() > 0 and gb.abs().sum() > 0
        torch.testing.assert_close(ga, m.A.grad, rtol=1e-5, atol=1e-10)
        torch.testing.assert_close(gb, m.B.grad, rtol=1e-5, atol=1e-10)


def test_merged_weights_give_the_unmerged_logits_and_leave_the_model_alone(tiny_model_dir):
    model = _lora_model(tiny_model_dir).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        want = model(IDS).logits
    merged = lora.merged_state_dict(model)
    assert not any("lora_" in k or "base_layer" in k for k in merged)
    assert set(merged) == set(_base(tiny_model_dir).state_dict())
    plain = _base(tiny_model_dir).eval()
    plain.load_state_dict(merged)
    with torch.no_grad():
        got = plain(IDS).logits
        assert not torch.allclose(got, _base(tiny_model_dir).eval()(IDS).logits, atol=1e-3)  # the adapter matters
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # the live model is untouched: still PEFT, same tensors, same outputs
    assert lora.is_lora(model)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with torch.no_grad():
        torch.testing.assert_close(model(IDS).logits, want, rtol=0, atol=0)
    # and it is what PEFT's own merge gives
    ref = copy.deepcopy(model).merge_and_unload().state_dict()
    for k in ref:
        torch.testing.assert_close(merged[k], ref[k], rtol=0, atol=1e-6)


def test_merged_and_adapter_from_a_given_state_dict(tiny_model_dir, tmp_path):
    """The FSDP path: merge / save a (gathered) full state dict instead of the model's own tensors."""
    from safetensors.torch import load_file

    model = _lora_model(tiny_model_dir)
    full = {k: v.detach().clone() for k, v in model.state_dict().items()}
    a = lora.merged_state_dict(model)
    b = lora.merged_state_dict(model, full)
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    lora.save_adapter(model, tmp_path / "own")
    lora.save_adapter(model, tmp_path / "given", state_dict=full)
    own, given = (load_file(str(tmp_path / d / lora.ADAPTER_WEIGHTS)) for d in ("own", "given"))
    assert set(own) == set(given) == set(lora.adapter_state_dict(model))
    assert all(torch.equal(own[k], given[k]) for k in own)


def test_adapter_and_merged_folders_reload_with_identical_logits(tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = _lora_model(tiny_model_dir).eval()
    tok = _tok(tiny_model_dir)
    with torch.no_grad():
        want = model(IDS).logits

    adapter = lora.save_adapter(model, tmp_path / "adapter")
    assert (adapter / lora.ADAPTER_CONFIG).is_file() and (adapter / lora.ADAPTER_WEIGHTS).is_file()
    saved = json.loads((adapter / lora.ADAPTER_CONFIG).read_text())
    assert saved["r"] == RANK and saved["lora_alpha"] == ALPHA and saved["peft_type"] == "LORA"

    fresh = lora.apply_lora(_base(tiny_model_dir), RANK, ALPHA).eval()  # B = 0: the base model
    lora.load_adapter_weights(fresh, adapter)
    with torch.no_grad():
        torch.testing.assert_close(fresh(IDS).logits, want, rtol=0, atol=0)

    standard = PeftModel.from_pretrained(_base(tiny_model_dir), str(adapter)).eval()  # PEFT's own loader
    with torch.no_grad():
        torch.testing.assert_close(standard(IDS).logits, want, rtol=0, atol=0)

    folder = lora.save_merged(model, tok, tmp_path / "merged")
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert not (folder / lora.ADAPTER_CONFIG).exists()
    plain = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert not lora.is_lora(plain)
    with torch.no_grad():
        torch.testing.assert_close(plain(IDS).logits, want, rtol=0, atol=1e-5)


def test_a_mismatched_adapter_is_refused(tiny_model_dir, tmp_path):
    model = _lora_model(tiny_model_dir)
    lora.save_adapter(model, tmp_path / "a")
    with pytest.raises(RewardlabError, match="r 4"):
        lora.load_adapter_weights(lora.apply_lora(_base(tiny_model_dir), 8, ALPHA), tmp_path / "a")
    with pytest.raises(RewardlabError, match="lora_alpha"):
        lora.load_adapter_weights(lora.apply_lora(_base(tiny_model_dir), RANK, 16.0), tmp_path / "a")
    with pytest.raises(RewardlabError, match="does not match"):
        lora.load_adapter_weights(lora.apply_lora(_base(tiny_model_dir), RANK, ALPHA, ["q_proj"]), tmp_path / "a")
    with pytest.raises(RewardlabError, match="has none"):
        lora.load_adapter_weights(_base(tiny_model_dir), tmp_path / "a")


def test_only_adapters_train_and_the_adapter_is_small(tiny_model_dir, tmp_path):
    base = _base(tiny_model_dir)
    n_base = sum(p.numel() for p in base.parameters())
    model = lora.apply_lora(base, RANK, ALPHA)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # all-linear: q, k, v, o, gate, up, down in both blocks; never the LM head or embeddings
    kinds = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
    assert kinds == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert lora.trainable_parameters(model) < 0.25 * n_base
    assert sum(p.numel() for p in model.parameters()) == n_base + lora.trainable_parameters(model)

    lora.save_adapter(model, tmp_path / "adapter")
    _base(tiny_model_dir).save_pretrained(tmp_path / "full")
    adapter_bytes = (tmp_path / "adapter" / lora.ADAPTER_WEIGHTS).stat().st_size
    full_bytes = (tmp_path / "full" / "model.safetensors").stat().st_size
    assert adapter_bytes < 0.25 * full_bytes, (adapter_bytes, full_bytes)

    # training moves the adapters and nothing else
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    _randomise_adapters(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(IDS, labels=IDS).loss.backward()
    opt.step()
    for n, p in model.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n


def test_top_layers_and_targets(tiny_model_dir):
    model = lora.apply_lora(_base(tiny_model_dir), RANK, ALPHA, "attention", top_layers=1)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)  # two blocks: only the top one is adapted
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names} == set(lora.ATTENTION_TARGETS)
    every = lora.apply_lora(_base(tiny_model_dir), RANK, ALPHA, None, top_layers=1)  # all-linear, top block
    names = [n for n, p in every.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert lora.parse_targets("q_proj, v_proj") == ["q_proj", "v_proj"]
    assert lora.parse_targets("") is None and lora.parse_targets(None) is None
    assert lora.parse_targets("ALL-LINEAR") == "all-linear"
    with pytest.raises(RewardlabError, match="lora-rank"):
        lora.apply_lora(_base(tiny_model_dir), 0, ALPHA)
    with pytest.raises(RewardlabError, match="could not be applied"):
        lora.apply_lora(_base(tiny_model_dir), RANK, ALPHA, ["no_such_proj"])
    with pytest.raises(RewardlabError, match="already"):
        lora.apply_lora(model, RANK, ALPHA)
    assert not lora.is_lora(_base(tiny_model_dir))
