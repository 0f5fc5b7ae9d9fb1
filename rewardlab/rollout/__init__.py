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
vLLM engine), :mod:`rewardlab.rollout.engines` (:data:`ENGINES`: every engine's builder and properties). A
``seed`` in :class:`SamplingParams` makes a call reproducible without disturbing the caller's global RNG.
``make_engine("vllm", ...)`` loads the vLLM module only when asked for.
"""

from __future__ import annotations

from typing import Any

from rewardlab.rollout.base import Collectives, Completion, RolloutEngine, SamplingParams, format_prompt
from rewardlab.rollout.engines import ENGINES, LIVE_ENGINE, engine
from rewardlab.rollout.hf import HFEngine


def make_engine(kind: str, model: Any, tokenizer: Any, **kwargs: Any) -> RolloutEngine:
    """Build rollout engine ``kind``, a name of :data:`~rewardlab.rollout.engines.ENGINES` (``"vllm"`` needs vLLM
    installed).

    For ``"vllm"``, ``collectives=`` (a :class:`Collectives`) lends the engine the trainer's
    process-group functions; the default works in one process.
    """
    return engine(kind).build(model, tokenizer, **kwargs)


__all__ = [
    "Collectives",
    "Completion",
    "ENGINES",
    "LIVE_ENGINE",
    "HFEngine",
    "RolloutEngine",
    "SamplingParams",
    "format_prompt",
    "make_engine",
]
