"""The Hugging Face ``generate`` rollout engine (left-padded batches of the live model).

torch and transformers are imported inside the functions that use them, so importing the rollout
package (the CLI, ``rewardlab eval --compare``) never pays for them.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams

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
    import torch  # lazy: see the module docstring

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
    import torch  # lazy: see the module docstring

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
    from transformers import GenerationConfig  # lazy: see the module docstring

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
        import torch  # lazy: see the module docstring
        from transformers import GenerationConfig  # lazy: see the module docstring

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


__all__ = ["HFEngine"]
