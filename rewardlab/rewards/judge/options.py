"""The options of one :class:`~rewardlab.rewards.judge.reward.JudgeReward`, declared once: :class:`JudgeOptions`.

Everything a judge reward is configured by besides its server and model, one documented field each, so that
``JudgeReward(url, model, options)`` stays a three-argument call however many knobs the judge grows::

    judge = JudgeReward("http://127.0.0.1:8000/v1", "my-judge-model", JudgeOptions(cache_path="judge.sqlite"))

``rewardlab train --reward judge`` and ``rewardlab reward judge`` build theirs from the ``--judge-*`` settings
(:class:`~rewardlab.rewards.judge.settings.JudgeSettings`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Callable

from rewardlab.rewards.judge.cache import JudgeCache
from rewardlab.rewards.judge.prompts import DEFAULT_SYSTEM, DEFAULT_TEMPLATE, NO_REFERENCE_TEMPLATE

__all__ = ["JudgeOptions"]


@dataclass(frozen=True)
class JudgeOptions:
    """How a judge asks, waits, caches and scores (protocol, limits and defences: :mod:`rewardlab.rewards.judge`)."""

    api_key: str | None = None
    """Sent as ``Authorization: Bearer``; None = ``$OPENAI_API_KEY`` if set."""
    name: str = "judge"
    """The reward's name (its metric key)."""
    system: str = DEFAULT_SYSTEM
    """The system prompt (the rubric); it must ask for the two-line verdict."""
    template: str = DEFAULT_TEMPLATE
    """The user prompt: a template over ``{question}``, ``{reference}`` and ``{answer}``."""
    no_reference_template: str = NO_REFERENCE_TEMPLATE
    """The user prompt of a row without a reference."""
    temperature: float = 0.0
    """Sampling temperature (part of the cache key)."""
    max_tokens: int = 128
    """Most tokens of the judge's reply (part of the cache key)."""
    top_p: float | None = None
    """Nucleus sampling (None = the server's; part of the cache key)."""
    seed: int | None = None
    """Sampling seed (None = none sent; part of the cache key)."""
    extra_body: dict[str, Any] | None = None
    """More request fields (part of the cache key), e.g. vLLM's constrained decoding
    ``{"structured_outputs": {"regex": VERDICT_REGEX}}``, which holds a small judge to the format."""
    extract: str | Callable[[str], str | None] = "math"
    """The answer the judge is shown: ``"math"``, ``"text"`` or a callable ``completion -> str | None``."""
    deadline: float = 30.0
    """Wall seconds per answer, all attempts and retries included."""
    request_timeout: float | None = None
    """Seconds one request may take (None = the deadline)."""
    queue_timeout: float = 120.0
    """Seconds an answer may wait for a free request slot."""
    retries: int = 2
    """Retries of a failed request (within the deadline)."""
    backoff: float = 0.25
    """First wait before a retry, in seconds (doubled each time)."""
    backoff_max: float = 4.0
    """Longest wait before a retry, in seconds."""
    max_concurrency: int = 8
    """Requests in flight per process and base URL."""
    breaker_threshold: int = 5
    """Consecutive failures that open the circuit breaker."""
    breaker_cooldown: float = 10.0
    """Seconds the open breaker refuses requests before it tries again."""
    cache: bool | JudgeCache = True
    """True (in memory), False, or a :class:`~rewardlab.rewards.judge.cache.JudgeCache` to share."""
    cache_path: str | os.PathLike | None = None
    """An sqlite file of verdicts shared by runs and processes."""
    correct_score: float | None = 1.0
    """The score of a ``correct`` verdict (None: not graded)."""
    wrong_score: float | None = 0.0
    """The score of a ``wrong`` verdict."""
    refused_score: float | None = 0.0
    """The score of an answer the pre-filters refuse."""
    timeout_score: float | None = 0.0
    """The score of ``judge_timeout``."""
    error_score: float | None = 0.0
    """The score of ``judge_error``."""
    unparsed_score: float | None = 0.0
    """The score of ``judge_unparsed`` (a reply without the verdict lines)."""
    mismatch_score: float | None = 0.0
    """The score of ``judge_mismatch`` (the judge restated another answer than the one shown)."""
    disable: Iterable[str] = field(default=())
    """Defences to switch off (names from ``prompts.DEFENCES``; for tests and ablations)."""
    allow_preamble: bool = False
    """Accept free text before the two verdict lines."""
    max_answer_chars: int = 4000
    """Longest answer shown to the judge, in characters."""
