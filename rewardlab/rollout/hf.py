"""The Hugging Face ``generate`` rollout engine (left-padded batches of the live model).

Every completion carries ``logprobs``: the log-prob of each sampled token under the distribution
it was actually drawn from (after temperature, top-k and top-p), for rollout correction
(``pi_trainer / pi_sampler`` importance weights). They are recorded during ``generate`` by a
logits processor (:class:`_SampledLogprobs`) that keeps one (B, V) log-softmax alive at a time,
never ``output_scores`` / ``output_logits`` (B x steps x V). In transformers 5.x a caller's
``logits_processor`` runs *before* the temperature / top-k / top-p warpers that ``generate`` builds
from the config, so when recording, the engine turns those off in the config and passes HF's own
warper classes itself, in HF's order, ahead of the recorder: the recorder sees exactly the scores
that are sampled from (same tokens for the same seed as the config path). Greedy decoding
(temperature 0) records the log-prob of the argmax under the raw (unwarped) distribution.

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


class _SampledLogprobs:
    """A ``generate`` logits processor that records each sampled token's log-prob.

    Placed last in the processor list, it sees the scores the next token is sampled from. At each
    call it (a) gathers, from the previous step's log-softmax, the token ``generate`` just appended
    (``input_ids[:, -1]``, the token sampled from that distribution), and (b) keeps this step's
    ``log_softmax(scores)`` (B, V) for the next call; scores pass through unchanged.
    :meth:`finish` gathers the last step with the final tokens. One instance per ``generate`` call.
    """

    def __init__(self) -> None:
        self.prev = None  # (B, V) log-softmax of the last step's processed scores
        self.steps: list = []  # one (B,) tensor per step whose token is known

    def __call__(self, input_ids, scores):
        import torch  # lazy: see the module docstring

        if self.prev is not None:
            self.steps.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))  # (B,)
        self.prev = torch.log_softmax(scores.float(), dim=-1)  # (B, V)
        return scores

    def finish(self, new_ids) -> list[list[float]]:
        """Per-row log-probs of ``new_ids`` (B, T), the tokens ``generate`` returned after the prompt.

        Rows that finished early hold padding after their end (their values are cut by the caller).
        ``generate`` may have run (and undone) a step past the returned tokens; its record is dropped.
        """
        import torch  # lazy: see the module docstring

        B, T = new_ids.shape
        steps = self.steps[:T]
        if len(steps) == T - 1 and self.prev is not None:
            steps.append(self.prev.gather(-1, new_ids[:, T - 1 :]).squeeze(-1))  # (B,)
        self.prev, self.steps = None, []
        if len(steps) != T:
            raise RewardlabError(f"log-prob recording saw {len(steps)} sampling steps for {T} generated tokens")
        if T == 0:
            return [[] for _ in range(B)]
        return torch.stack(steps, dim=1).tolist()  # (B, T)


def _warpers(sampling: SamplingParams) -> list:
    """HF's temperature / top-k / top-p warpers for ``sampling``, in the order ``generate`` applies them."""
    from transformers.generation.logits_process import (  # lazy: see the module docstring
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    out: list = []
    if sampling.temperature != 1.0:
        out.append(TemperatureLogitsWarper(float(sampling.temperature)))
    if sampling.top_k != 0:
        out.append(TopKLogitsWarper(top_k=sampling.top_k, min_tokens_to_keep=1))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=sampling.top_p, min_tokens_to_keep=1))
    return out


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
    record_logprobs: bool = True
    """Fill each completion's ``logprobs`` (sampled-token log-probs under the sampling
    distribution); False leaves them None and samples through ``generate``'s own warpers."""

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
        from transformers import GenerationConfig, LogitsProcessorList  # lazy: see the module docstring

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
        warpers: list = []
        if sampling.temperature > 0 and self.record_logprobs:
            # The caller's processors run before the config's warpers, so the warpers are passed in
            # the processor list instead, ahead of the recorder (see the module docstring).
            warpers = _warpers(sampling)
            gen_kwargs.update(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
        elif sampling.temperature > 0:
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
                recorder = _SampledLogprobs() if self.record_logprobs else None
                extra = {} if recorder is None else {"logits_processor": LogitsProcessorList([*warpers, recorder])}
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    generation_config=gen_config,
                    tokenizer=tok if sampling.stop else None,
                    **extra,
                )
                new_ids = out[:, input_ids.shape[1] :]  # (B, T_new), padded after finishing
                row_lps = [None] * len(chunk) if recorder is None else recorder.finish(new_ids)
                for prompt_index, ids, lps in zip(chunk, new_ids.tolist(), row_lps):
                    completion = self._finish(prompt_index, encoded[prompt_index], ids, eos_ids, sampling, lps)
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
        self,
        prompt_index: int,
        prompt_ids: list[int],
        ids: list[int],
        eos_ids: list[int],
        sampling: SamplingParams,
        logprobs: list[float] | None = None,
    ) -> Completion:
        """Cut one generated row (and its log-probs) at its end (first EOS, or the stop string) and decode it."""
        eos = set(eos_ids)
        cut = next((k + 1 for k, t in enumerate(ids) if t in eos), None)
        if cut is None and sampling.stop:
            cut = self._stop_cut(ids, sampling.stop)
        if cut is None:
            token_ids, reason = ids[: sampling.max_new_tokens], "length"
        else:
            token_ids, reason = ids[:cut], "stop"
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        lps = None if logprobs is None else [float(x) for x in logprobs[: len(token_ids)]]
        return Completion(prompt_index, list(prompt_ids), token_ids, text, reason, lps)

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
