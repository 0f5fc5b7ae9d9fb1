"""The Hugging Face ``generate`` rollout engine (left-padded batches of the live model).

Every completion carries ``logprobs``: the log-prob of each sampled token under the call's behaviour
distribution (:mod:`rewardlab.rollout.behaviour`: tempered; renormalised over the top-k / top-p kept set,
or over the full vocabulary), the definition the trainer uses too, for rollout correction
(``pi_trainer / pi_sampler`` importance weights). They are recorded during ``generate`` by a
logits processor (:class:`_SampledLogprobs`) that keeps one (B, V) log-softmax alive at a time,
never ``output_scores`` / ``output_logits`` (B x steps x V). In transformers 5.x a caller's
``logits_processor`` runs *before* the temperature / top-k / top-p warpers that ``generate`` builds
from the config, so when recording, the engine turns those off in the config and passes HF's own
warper classes itself, in HF's order, with the recorder after the temperature (``full``) or after
every warper (``kept``: it sees exactly the scores that are sampled from); same tokens for the same
seed as the config path. Greedy decoding
(temperature 0) records the log-prob of the argmax under the raw (unwarped) distribution.

With ``n > 1`` (and ``shared_prefix``, the default) the engine does not call ``generate``: the G
rows of a prompt share it, so each chunk's distinct prompts are prefilled once and their KV cache
is copied to their rows, then the engine's own loop decodes (:meth:`HFEngine._decode_shared`). It
is ``generate``'s sampling loop step for step (same warpers, the same ``torch.multinomial`` random
draws, so the same tokens for a seed, up to float rounding of the smaller prefill batch), with the
cache preallocated and written in place, and rows that ended dropped from the batch. On the
``bench/train_step.py`` model (hidden 256 x 4 layers, 8 prompts x 8, 64 tokens, 1 CPU thread)
generation went from 1.55 to 1.17 CPU seconds (shared prefill alone: 1.27; the in-place cache: 1.10
before dropping; dropping ended rows is neutral there, as the tiny model's step cost is mostly
per-call overhead and few rows end early); on a hidden-768 model whose rows end early it went from
6.75 to 2.91 (4.62 without dropping). HF's ``StaticCache`` (1.49 vs 1.52 for ``generate``: it
attends over the whole preallocated length) and ``torch.compile`` of the decode step (2.3 for
``generate`` + static cache after a 47 s compile; 4.7 for the engine's loop, dynamic shapes) were
no faster on CPU and are not used.

torch and transformers are imported inside the functions that use them, so importing the rollout
package (the CLI, ``rewardlab eval --compare``) never pays for them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams
from rewardlab.rollout.behaviour import recorded_at
from rewardlab.rollout.behaviour import warpers as behaviour_warpers
from rewardlab.rollout.decode import can_share, decode, inference_mode, prefill, row_streams, seeded, shared_stream
from rewardlab.rollout.decode import eos_ids as find_eos_ids
from rewardlab.seeds import derive_seed


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
    distribution); False leaves them None (and the plain path samples through ``generate``'s own
    warpers)."""
    shared_prefix: bool = True
    """With ``n > 1``, prefill each distinct prompt of a chunk once and copy its KV cache to its rows,
    then decode with the engine's own loop (:meth:`_decode_shared`): the same distribution, and for a
    seed the same random draws as ``generate``. False (and always for ``n == 1``): ``generate`` on
    ``n`` copies of each prompt."""

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

    def encode(self, text: str) -> list[int]:
        bos = self.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))  # chat templates often emit BOS themselves
        return self.tokenizer(text, add_special_tokens=add_special)["input_ids"]

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams, *,
                 on_chunk: Callable[[list[Completion]], None] | None = None) -> list[Completion]:
        """Sample ``n`` completions for each prompt; returns ``len(prompts) * n`` in prompt-major order. ``on_chunk``
        gets each chunk's completions (``batch_size`` rows) once decoded (async streaming); the draws do not change."""
        return self.generate_ids([self.encode(p) for p in prompts], n, sampling, on_chunk=on_chunk)

    def generate_ids(self, encoded: list[list[int]], n: int, sampling: SamplingParams, *,
                     on_chunk: Callable[[list[Completion]], None] | None = None,
                     seeds: list[int] | None = None) -> list[Completion]:
        """:meth:`generate` from prompt token ids (token in, token out: the policy endpoint's path). ``seeds``: one
        per prompt (the endpoint's seeded requests, batched): prompt ``i``'s ``n`` rows each draw from a generator of
        their own, seeded from ``seeds[i]`` (``sampling.seed`` unused), in the engine's own decode loop, so a prompt's
        tokens do not depend on the prompts sampled with it (up to the float rounding of another batch shape)."""
        from transformers import LogitsProcessorList  # lazy: see the module docstring

        if n < 1:
            raise RewardlabError(f"n must be >= 1, got {n}")
        if seeds is not None and len(seeds) != len(encoded):
            raise RewardlabError(f"generate_ids: {len(seeds)} seeds for {len(encoded)} prompts")
        if not encoded:
            return []
        model, tok = self.model, self.tokenizer
        device = next(model.parameters()).device
        if seeds is not None and not can_share(model):  # generate() draws from one stream: one call per seed
            return self._one_call_per_seed(encoded, n, sampling, seeds, on_chunk)
        eos_ids = list(dict.fromkeys([*find_eos_ids(model, tok), *sampling.stop_token_ids]))  # each ends a row
        gen_config, warpers, at = self._generation_config(sampling, eos_ids)
        shared = (seeds is not None or self.shared_prefix and n > 1) and can_share(model)
        streams = None if seeds is None else row_generators(seeds, n, device)  # one per row, prompt-major
        stop_criteria = None
        if shared and sampling.stop:
            from transformers.generation.stopping_criteria import StopStringCriteria  # lazy: see the module docstring

            stop_criteria = StopStringCriteria(tokenizer=tok, stop_strings=list(sampling.stop))

        order = [i for i in range(len(encoded)) for _ in range(n)]  # prompt-major
        results: list[Completion] = []
        generated = 0
        t0 = time.perf_counter()
        with inference_mode(model), seeded(None if seeds else sampling.seed, device), _only(model, gen_config):
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                if shared:
                    pick = shared_stream(len(chunk)) if streams is None else row_streams(streams[start:][: len(chunk)])
                    rows_ids, row_lps = self._decode_shared(chunk, encoded, sampling, eos_ids, stop_criteria, pick)
                else:
                    batch = tok.pad({"input_ids": [encoded[i] for i in chunk]}, padding=True, return_tensors="pt")
                    input_ids = batch["input_ids"].to(device)  # (B, P) left-padded
                    attention_mask = batch["attention_mask"].to(device)  # (B, P)
                    recorder = _SampledLogprobs() if self.record_logprobs else None
                    extra = {} if recorder is None else {
                        "logits_processor": LogitsProcessorList([*warpers[:at], recorder, *warpers[at:]])}
                    out = model.generate(
                        input_ids=input_ids,
                        attention_mask=attention_mask,
                        generation_config=gen_config,
                        tokenizer=tok if sampling.stop else None,
                        **extra,
                    )
                    new_ids = out[:, input_ids.shape[1] :]  # (B, T_new), padded after finishing
                    row_lps = [None] * len(chunk) if recorder is None else recorder.finish(new_ids)
                    rows_ids = new_ids.tolist()
                done = [self._finish(i, encoded[i], ids, eos_ids, sampling, lps)
                        for i, ids, lps in zip(chunk, rows_ids, row_lps)]
                generated += sum(len(c.token_ids) for c in done)
                results.extend(done)
                if on_chunk is not None:
                    on_chunk(done)
        seconds = time.perf_counter() - t0
        self.stats = {
            "seconds": seconds,
            "generated_tokens": generated,
            "tokens_per_s": generated / seconds if seconds > 0 else 0.0,
        }
        return results

    def _generation_config(self, sampling: SamplingParams, eos_ids: list[int]) -> tuple[Any, list, int]:
        """``generate``'s config for ``sampling``, and the warpers the engine passes itself when recording log-probs
        (the first ``at`` of them run before the recorder: it sees the behaviour distribution)."""
        from transformers import GenerationConfig  # lazy: see the module docstring

        gen_kwargs: dict[str, Any] = dict(max_new_tokens=sampling.max_new_tokens, eos_token_id=eos_ids or None,
                                          pad_token_id=self.tokenizer.pad_token_id, use_cache=True)
        warpers, at = [], 0
        if sampling.temperature > 0 and self.record_logprobs:
            # The caller's processors run before the config's warpers, so the warpers are passed in
            # the processor list instead, around the recorder (see the module docstring).
            warpers, at = behaviour_warpers(sampling), recorded_at(sampling)
            gen_kwargs.update(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
        elif sampling.temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                              top_k=sampling.top_k)
        else:
            gen_kwargs.update(do_sample=False)
        if sampling.stop:
            gen_kwargs["stop_strings"] = list(sampling.stop)
        return GenerationConfig(**gen_kwargs), warpers, at

    def _one_call_per_seed(self, encoded: list[list[int]], n: int, sampling: SamplingParams, seeds: list[int],
                           on_chunk: Callable[[list[Completion]], None] | None) -> list[Completion]:
        """:meth:`generate_ids` with ``seeds`` for a model the decode loop cannot drive: one ``generate`` call per
        prompt, seeded with its seed (what a call of it alone gives), the prompt indices and stats of the whole."""
        out, seconds, generated = [], 0.0, 0
        for i, (ids, seed) in enumerate(zip(encoded, seeds)):
            out += [dataclasses.replace(c, prompt_index=i)
                    for c in self.generate_ids([ids], n, dataclasses.replace(sampling, seed=seed))]
            seconds, generated = seconds + self.stats["seconds"], generated + self.stats["generated_tokens"]
        self.stats = {"seconds": seconds, "generated_tokens": generated,
                      "tokens_per_s": generated / seconds if seconds > 0 else 0.0}
        if on_chunk is not None:
            on_chunk(out)
        return out

    def _decode_shared(self, chunk: list[int], encoded: list[list[int]], sampling: SamplingParams,
                       eos: list[int], stop_criteria: Any, pick: Any) -> tuple[list[list[int]], list]:
        """Decode one chunk of rows (their prompt indices, prompt-major) on one prefill of its distinct prompts.

        Returns each row's generated ids laid out as ``generate`` returns them (``pad`` after a row's
        end, every row as long as the longest) and each row's log-probs (None when not recording).

        Step for step this is ``generate``'s ``_sample`` (:func:`rewardlab.rollout.decode.decode`): the
        distinct prompts (U rows) are prefilled once and their last logits and KV cache copied to the B
        rows of their prompt; the same warpers shape each step's scores; the token is drawn as
        ``torch.multinomial`` draws it (one Exp(1) tensor of shape (B, V) per step: the same RNG stream
        for a seed; ``pick`` is :func:`~rewardlab.rollout.decode.shared_stream`, or one generator per row with
        ``seeds``); rows that ended are fed ``pad``; the loop stops when every row has hit EOS or a
        stop string, or at ``max_new_tokens``. Two things ``generate`` does not do, neither of which
        changes a row's numbers: the cache is preallocated and written in place, and once a quarter of
        the rows in the batch have ended they leave it; the Exp(1) draw stays (B, V), the ended rows'
        part unused, so the stream and every live row's token are unchanged.
        """
        import torch  # lazy: see the module docstring

        uniq = list(dict.fromkeys(chunk))
        slot = {p: u for u, p in enumerate(uniq)}
        pad, T, B = int(self.tokenizer.pad_token_id), sampling.max_new_tokens, len(chunk)
        start = prefill(self.model, [encoded[p] for p in uniq], [slot[p] for p in chunk], pad_id=pad, room=T)
        device = start.logits.device
        gen = torch.full((B, T), pad, dtype=torch.long, device=device)  # (B, T)
        lps = torch.zeros((B, T), dtype=torch.float32, device=device) if self.record_logprobs else None  # (B, T)
        eos_t = torch.tensor(eos or [-1], device=device)

        def on_step(t: int, active: Any, token: Any, lp: Any, seq: Any, scores: Any) -> Any:
            if lps is not None:
                lps[active, t] = lp
            gen[active, t] = token
            ended = torch.isin(token, eos_t)  # (A,)
            return ended | stop_criteria(seq, scores).to(device) if stop_criteria is not None else ended

        steps = decode(self.model, start, T, sampling=sampling, pick=pick, on_step=on_step, pad_id=pad,
                       record=lps is not None, track_ids=stop_criteria is not None)
        return gen[:, :steps].tolist(), (lps[:, :steps].tolist() if lps is not None else [None] * B)

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


def row_generators(seeds: list[int], n: int, device: Any) -> list[Any]:
    """One torch generator per row, prompt-major: row ``j`` of prompt ``i`` is seeded from ``seeds[i]`` and ``j``."""
    import torch  # lazy: see the module docstring

    return [torch.Generator(device=device).manual_seed(derive_seed("hf_row", seed, j)) for seed in seeds
            for j in range(n)]


__all__ = ["HFEngine"]
