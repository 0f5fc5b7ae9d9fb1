"""LoRA adapters for the RL loop, through PEFT (the adapter format vLLM, TRL and the hub load).

    from rewardlab.train.lora import apply_lora, merged_state_dict, save_adapter, save_merged
    model = apply_lora(model, rank=16, alpha=32, targets=None)   # a peft.PeftModel; only adapters train
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=...)
    ...
    save_adapter(model, "out/adapter")                           # adapter_config.json + adapter_model.safetensors
    save_merged(model, tokenizer, "out/merged")                  # plain HF folder (AutoModelForCausalLM, vLLM)
    load_adapter_weights(model, "out/adapter")                   # resume: same rank/alpha/targets

What it does. :func:`apply_lora` wraps an HF causal LM with ``peft.get_peft_model`` and a
``peft.LoraConfig``: each target ``nn.Linear`` computes ``W x + (alpha / rank) * B A x`` with ``A``
(rank x in) initialised randomly and ``B`` (out x rank) at zero, so training starts exactly at the
base model. Every base parameter is frozen; only ``lora_A`` / ``lora_B`` require grad.
``targets=None`` means PEFT's ``"all-linear"`` (every linear layer of the decoder blocks: q/k/v/o and
the MLP's gate/up/down projections, never the LM head), which PEFT supports since 0.8; pass e.g.
``["q_proj", "k_proj", "v_proj", "o_proj"]`` for attention only (:data:`ATTENTION_TARGETS`).
``top_layers=N`` puts adapters in the top N decoder blocks only (PEFT's ``layers_to_transform``),
so the bottom blocks stay frozen and unchanged, as with ``--train-top-layers``.

Learning rate (guidance from the literature, not measured in this repository). LoRA usually wants
a clearly higher learning rate than full fine-tuning of the same model; the common rule is about
10x. John Schulman and Thinking Machines, "LoRA Without Regret" (2025,
https://thinkingmachines.ai/blog/lora/), found the optimal LoRA LR consistently near 10x the full
fine-tuning one (somewhat more for very short runs), nearly independent of the rank thanks to the
``alpha / rank`` scale, that adapters belong on every layer (the MLP above all, not attention only),
that LoRA is less tolerant of large batches, and that policy-gradient RL matches full fine-tuning
even at very small ranks. The original LoRA paper (Hu et al. 2021, arXiv:2106.09685) trained its
adapters at LRs of about 2e-4 to 5e-4. So keep ``alpha`` fixed when sweeping the rank, and start
the LR near 10x the full fine-tuning value (e.g. 1e-5 -> 1e-4). Dropout on the adapters
(``dropout > 0``) makes the training forward differ from the no-grad old-log-prob forward, so an
on-policy ratio is no longer exactly 1; keep it at 0 for RL unless you mean it.

How weights reach the rollout engine. The HF engine samples from the live (PEFT-wrapped) model, so
nothing is copied. vLLM loads plain HF weights, never PEFT names: :func:`merged_state_dict` turns a
PEFT model (or a gathered full state dict of one, under FSDP) into the merged ``W + (alpha/rank) B A``
weights under the base model's own names, without touching the live model, and those are the
weights to push with ``reload_weights`` after each optimizer step (give the vLLM engine a
``full_state_dict`` collective that returns them; vLLM's native LoRA serving is another route, not
used here). :func:`save_merged` writes the same weights as a folder that ``from_pretrained`` and
``vllm serve`` load.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch

from rewardlab.errors import RewardlabError
from rewardlab.train import distributed

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
DEFAULT_TARGETS = "all-linear"
"""``targets=None``: every linear layer of the decoder blocks (PEFT's shorthand; the LM head is excluded)."""
ATTENTION_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
"""Attention projections only, for Llama / Qwen / Mistral style module names."""
_PREFIX = "base_model.model."  # PeftModelForCausalLM -> LoraModel -> the HF model


def parse_targets(spec: str | list[str] | None) -> str | list[str] | None:
    """``"q_proj,v_proj"`` -> ``["q_proj", "v_proj"]``; ``None`` / ``""`` -> None (the default);
    ``"all-linear"`` and ``"attention"`` (:data:`ATTENTION_TARGETS`) are kept as names."""
    if spec is None:
        return None
    if isinstance(spec, (list, tuple)):
        names = [str(s).strip() for s in spec if str(s).strip()]
        return names or None
    text = str(spec).strip()
    if not text or text.lower() in ("none", "default"):
        return None
    if text.lower() == DEFAULT_TARGETS:
        return DEFAULT_TARGETS
    if text.lower() == "attention":
        return list(ATTENTION_TARGETS)
    return [s.strip() for s in text.split(",") if s.strip()]


def is_lora(model: Any) -> bool:
    """True when ``model`` is a PEFT model (also after FSDP2 wrapped it in place)."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


def apply_lora(model: Any, rank: int, alpha: float, targets: str | list[str] | None = None,
               dropout: float = 0.0, *, top_layers: int = 0) -> Any:
    """Wrap ``model`` with LoRA adapters of rank ``rank`` and scale ``alpha / rank``; return the
    ``peft.PeftModel``. The base model is modified in place (adapter layers are injected), so take
    any reference copy before. ``targets``: module names, ``"all-linear"``, or None (= all-linear).
    ``top_layers > 0`` adapts only the top ``top_layers`` decoder blocks. Only adapter parameters
    require grad afterwards."""
    from peft import LoraConfig, get_peft_model

    if is_lora(model):
        raise RewardlabError("apply_lora: the model already has LoRA adapters")
    if int(rank) != rank or rank < 1:
        raise RewardlabError(f"--lora-rank must be a positive integer, got {rank}")
    if not alpha > 0:
        raise RewardlabError(f"--lora-alpha must be > 0, got {alpha}")
    if not 0.0 <= dropout < 1.0:
        raise RewardlabError(f"--lora-dropout must be in [0, 1), got {dropout}")
    resolved = parse_targets(targets)
    layers = None
    if top_layers and top_layers > 0:
        n_blocks = int(getattr(getattr(model, "config", None), "num_hidden_layers", 0) or 0)
        if n_blocks <= 0:
            raise RewardlabError("apply_lora(top_layers=...): the model config has no num_hidden_layers")
        layers = list(range(max(0, n_blocks - top_layers), n_blocks))
    if resolved in (None, DEFAULT_TARGETS):
        # PEFT refuses "all-linear" together with layers_to_transform: spell the names out then
        resolved = _linear_names(model) if layers is not None else DEFAULT_TARGETS
    try:
        config = LoraConfig(
            r=int(rank), lora_alpha=float(alpha), lora_dropout=float(dropout), bias="none", task_type="CAUSAL_LM",
            target_modules=resolved, layers_to_transform=layers,
        )
        peft_model = get_peft_model(model, config)
    except ValueError as e:  # e.g. target modules not found in the model
        raise RewardlabError(f"LoRA could not be applied: {e}") from None
    for name, p in peft_model.named_parameters():  # PEFT freezes the base; make sure of it
        p.requires_grad_(_is_adapter_param(name))
    return peft_model


def _linear_names(model: Any) -> list[str]:
    """Leaf names of the model's linear layers, the output layer (LM head) excluded: what PEFT's
    "all-linear" means, as an explicit list."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = {name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
             if isinstance(mod, torch.nn.Linear) and mod is not head}
    if not names:
        raise RewardlabError("LoRA: the model has no linear layers to adapt")
    return sorted(names)


def _is_adapter_param(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name or ".lora_embedding_A." in name or ".lora_embedding_B." in name


def trainable_parameters(model: Any) -> int:
    """Number of parameters that require grad."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def base_model(model: Any) -> Any:
    """The HF model inside a PEFT model (with the adapter layers still injected); ``model`` itself otherwise."""
    return model.get_base_model() if is_lora(model) else model


def _lora_layers(model: Any) -> dict[str, Any]:
    """``{module name in the PEFT model: lora layer}``; refuses layer kinds the merge does not cover."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, LoraLayer):
            if not isinstance(mod, LoraLinear):
                raise RewardlabError(f"merged weights: LoRA on {type(mod).__name__} ({name}) is not supported; "
                                     "target linear layers only")
            if any(mod.use_dora.get(a, False) for a in mod.active_adapters):
                raise RewardlabError("merged weights: DoRA adapters are not supported")
            out[name] = mod
    return out


def merged_state_dict(model: Any, state_dict: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The merged HF weights ``W + (alpha/rank) * B @ A`` of a PEFT model, under the base model's own
    names (what ``from_pretrained`` and vLLM's ``reload_weights`` expect). The live model is not
    modified. ``state_dict``: a full (e.g. FSDP-gathered) state dict of the PEFT model to merge
    instead of ``model.state_dict()``; the tensors stay on its device. A plain model's state dict is
    returned as it is."""
    sd = state_dict if state_dict is not None else {k: v.detach() for k, v in model.state_dict().items()}
    if not is_lora(model):
        return dict(sd)
    layers = _lora_layers(model)
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if not key.startswith(_PREFIX):
            raise RewardlabError(f"merged weights: unexpected key {key!r} in a PEFT state dict")
        if ".lora_" in key:
            continue
        if "modules_to_save" in key or "original_module" in key:
            raise RewardlabError("merged weights: PEFT modules_to_save are not supported")
        out[key] = value
    renamed: dict[str, torch.Tensor] = {}
    for key, value in out.items():
        owner, sep, rest = key.partition(".base_layer.")
        if sep and owner in layers:  # "<module>.base_layer.weight" -> "<module>.weight"
            key = f"{owner}.{rest}"
        renamed[key[len(_PREFIX):]] = value
    for name, mod in layers.items():
        wkey = f"{name}.base_layer.weight"
        if wkey not in sd:
            raise RewardlabError(f"merged weights: {wkey} is missing from the state dict")
        merged = sd[wkey]
        if not mod.merged:  # merged in place already: the base weight holds the delta
            for a in mod.active_adapters:
                if a not in mod.lora_A:
                    continue
                wa, wb = sd[f"{name}.lora_A.{a}.weight"], sd[f"{name}.lora_B.{a}.weight"]
                low = merged.dtype in (torch.float16, torch.bfloat16)
                calc = torch.float32 if low else wb.dtype
                delta = wb.to(calc) @ wa.to(calc)
                if mod.fan_in_fan_out:
                    delta = delta.T
                delta = delta * mod.scaling[a]
                merged = (merged.to(calc) + delta.to(merged.device)).to(sd[wkey].dtype)
        renamed[name[len(_PREFIX):] + ".weight"] = merged
    return renamed


def adapter_state_dict(model: Any, state_dict: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The adapter tensors under PEFT's file names (what ``adapter_model.safetensors`` holds)."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, state_dict=state_dict, save_embedding_layers=False)


def save_adapter(model: Any, folder: str | os.PathLike, *, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write the adapter in PEFT's format (``adapter_config.json`` + ``adapter_model.safetensors``),
    which ``PeftModel.from_pretrained``, TRL and ``vllm serve --lora-modules`` load. ``state_dict``:
    a gathered full state dict of the PEFT model (FSDP)."""
    if not is_lora(model):
        raise RewardlabError("save_adapter: the model has no LoRA adapters")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {} if state_dict is None else {"state_dict": state_dict}
    model.save_pretrained(str(folder), safe_serialization=True, save_embedding_layers=False, **kwargs)
    return folder


def save_merged(model: Any, tokenizer: Any, folder: str | os.PathLike, *,
                state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write merged HF weights (plus config and tokenizer) to ``folder``: a folder that
    ``AutoModelForCausalLM.from_pretrained`` and vLLM load with no PEFT involved."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    merged = merged_state_dict(model, state_dict)
    base_model(model).save_pretrained(str(folder), state_dict=merged, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


def load_adapter_weights(model: Any, folder: str | os.PathLike) -> None:
    """Load ``folder``'s adapter weights into a PEFT model made with the same rank, alpha and
    targets (an exact resume); raise a :class:`RewardlabError` on any mismatch."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = Path(folder)
    if not is_lora(model):
        raise RewardlabError(f"{folder} holds a LoRA adapter but the model has none; apply_lora first "
                             "(resume with the same --lora-rank, --lora-alpha and --lora-targets)")
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise RewardlabError(f"{folder} has no {ADAPTER_WEIGHTS}")
    ours = model.peft_config[model.active_adapter]
    cfg_path = folder / ADAPTER_CONFIG
    if cfg_path.is_file():
        saved = json.loads(cfg_path.read_text())
        for field in ("r", "lora_alpha", "use_rslora"):
            if field in saved and saved[field] != getattr(ours, field):
                raise RewardlabError(f"{folder}: adapter {field} {saved[field]!r} differs from the model's "
                                     f"{getattr(ours, field)!r}; resume with the same LoRA settings")
    state = load_file(str(weights))
    expected = set(adapter_state_dict(model))
    if set(state) != expected:
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        raise RewardlabError(f"{folder}: adapter does not match the model (missing {missing[:3]}, unexpected "
                             f"{unexpected[:3]}); resume with the same --lora-targets and model")
    device = next(model.parameters()).device
    result = set_peft_model_state_dict(model, {k: v.to(device) for k, v in state.items()})
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise RewardlabError(f"{folder}: unexpected adapter keys {sorted(unexpected)[:3]}")


def full_state_dict_for_engine(model: Any) -> Callable[..., Any]:
    """What an engine holding a weight copy (vLLM) loads after each update: the full weights, merged with the LoRA
    adapters when LoRA is on (the trainer's engine and the ``--async-steps`` worker's alike)."""
    if not is_lora(model):
        return distributed.full_state_dict
    return lambda m, cpu=True: merged_state_dict(m, distributed.full_state_dict(m, cpu=cpu))


__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "ATTENTION_TARGETS", "adapter_state_dict", "apply_lora", "base_model",
           "full_state_dict_for_engine", "is_lora", "load_adapter_weights", "merged_state_dict", "parse_targets",
           "save_adapter", "save_merged", "trainable_parameters"]
