"""Length rewards: DAPO's soft overlong punishment, cosine length scaling, an n-gram repetition penalty.

Each is a small picklable class with a stable ``name``; the registry holds a default instance::

    Overlong(max_len, cache_len)   "overlong"       0 up to max_len - cache_len, then linearly down to
                                                    -factor at max_len (DAPO; docs/algorithms.md)
    CosineLength(max_len)          "cosine_length"  correct answers prefer short, wrong answers long
    RepetitionPenalty(ngram=3)     "repetition"     -(share of repeated n-grams) * weight

Lengths are counted in tokens, which only the trainer knows: they are read from ``meta``
(``completion_tokens``, ``num_tokens``, ``response_length``, or ``len(meta["completion_ids"])``;
the TRL adapter fills ``completion_tokens`` from ``completion_ids``). A sample without a length is
not gradable (``None``, ``status="no_length"``), never a silent 0. ``max_len`` / ``cache_len`` may
also come from ``meta`` (``max_len`` or ``max_new_tokens``; ``cache_len``) when not set on the
instance. Example::

    from rewardlab.rewards.length import Overlong
    Overlong(max_len=20, cache_len=8)("...", None, completion_tokens=16).score   # -0.5
"""

from __future__ import annotations

import math
from typing import Any

from rewardlab.rewards.base import CheapReward, RewardResult, fast_part, get_reward, register

__all__ = ["Overlong", "CosineLength", "RepetitionPenalty", "overlong_penalty", "token_count"]

_LENGTH_KEYS = ("completion_tokens", "num_tokens", "response_length")


def token_count(meta: dict[str, Any]) -> int | None:
    """The completion's length in tokens from ``meta``, or ``None`` when the caller did not say."""
    for key in _LENGTH_KEYS:
        v = meta.get(key)
        if v is not None and not isinstance(v, bool):
            try:
                return int(v)
            except (TypeError, ValueError):
                return None
    ids = meta.get("completion_ids")
    return len(ids) if ids is not None else None


def _param(value: Any, meta: dict[str, Any], *keys: str) -> Any:
    if value is not None:
        return value
    for k in keys:
        if meta.get(k) is not None:
            return meta[k]
    return None


def overlong_penalty(length: int, max_len: int, cache_len: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment of one completion of ``length`` tokens (EOS included):
    ``min(-(length - (max_len - cache_len)) / cache_len * factor, 0)``, computed in float64.

    0 up to ``max_len - cache_len`` tokens, falling linearly to ``-factor`` at ``max_len``. The one
    implementation of the shaping: the :class:`Overlong` reward and ``rewardlab train``'s DAPO
    reward shaping both call it. Raises ``ValueError`` unless ``0 < cache_len <= max_len``.
    """
    _check_overlong(max_len, cache_len)
    exceed = length - (max_len - cache_len)
    return min(-exceed / cache_len * factor, 0.0) + 0.0  # + 0.0 turns -0.0 into 0.0


class Overlong(CheapReward):
    """DAPO soft overlong punishment: ``min(-(n - (max_len - cache_len)) / cache_len * factor, 0)``.

    ``n`` is the completion length in tokens, ``max_len`` the generation limit (L_max) and
    ``cache_len`` the soft-punish buffer (L_cache). The penalty is 0 up to ``max_len - cache_len``
    and falls linearly to ``-factor`` at ``max_len`` (it is added to the task reward; combine with
    weight 1). Matches verl 0.9.1's DAPO reward manager (``../shared/fixtures/verl_reference.json``).
    """

    def __init__(
        self, max_len: int | None = None, cache_len: int | None = None, *, factor: float = 1.0, name: str | None = None
    ) -> None:
        if max_len is not None and cache_len is not None:
            _check_overlong(max_len, cache_len)
        self.max_len = max_len
        self.cache_len = cache_len
        self.factor = float(factor)
        self.name = name or "overlong"

    def __repr__(self) -> str:
        return f"Overlong(max_len={self.max_len}, cache_len={self.cache_len}, factor={self.factor}, name={self.name!r})"

    def __call__(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        n = token_count(meta)
        if n is None:
            return RewardResult(None, {"status": "no_length"})
        max_len = _param(self.max_len, meta, "max_len", "max_new_tokens", "max_response_length")
        cache_len = _param(self.cache_len, meta, "cache_len", "overlong_buffer_len")
        if max_len is None or cache_len is None:
            return RewardResult(None, {"status": "config_error", "error": "overlong needs max_len and cache_len"})
        try:
            _check_overlong(max_len, cache_len)
        except ValueError as e:
            return RewardResult(None, {"status": "config_error", "error": str(e)})
        exceed = max(n - (max_len - cache_len), 0)
        penalty = overlong_penalty(n, max_len, cache_len, self.factor)
        return RewardResult(penalty, {"tokens": n, "max_len": max_len, "cache_len": cache_len, "exceed": exceed})


def _check_overlong(max_len: int, cache_len: int) -> None:
    if not (0 < cache_len <= max_len):
        raise ValueError(f"overlong needs 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")


class CosineLength:
    """Cosine length scaling (Yeo et al. 2025, "Demystifying Long Chain-of-Thought Reasoning in LLMs").

    With ``t`` the length and ``T = max_len``, the reward is
    ``r_end + 0.5 * (r_start - r_end) * (1 + cos(pi * t / T))``: it moves from ``r_start`` at
    ``t = 0`` to ``r_end`` at ``t = T`` along half a cosine. Correct answers use
    ``correct = (r_start, r_end)`` with r_start > r_end (shorter is better); wrong answers use
    ``wrong`` with r_start < r_end (a wrong answer after longer thinking is penalised less).
    Lengths above ``max_len`` get ``exceed``.

    Correctness comes from the wrapped ``reward`` (a reward or a registry name such as
    ``"math"``; its score >= ``threshold`` counts as correct, ``None`` propagates), or when no reward
    is wrapped from ``meta["correct"]`` (bool) or ``meta["score"]`` (>= threshold).
    """

    def __init__(
        self,
        max_len: int | None = None,
        *,
        reward: Any = None,
        correct: tuple[float, float] = (1.0, 0.5),
        wrong: tuple[float, float] = (-1.0, 0.0),
        exceed: float = -1.0,
        threshold: float = 1.0,
        name: str | None = None,
    ) -> None:
        if max_len is not None and max_len <= 0:
            raise ValueError(f"max_len must be positive, got {max_len}")
        self.max_len = max_len
        self.reward = reward
        self.correct = tuple(map(float, correct))
        self.wrong = tuple(map(float, wrong))
        self.exceed = float(exceed)
        self.threshold = float(threshold)
        self.name = name or "cosine_length"

    def __repr__(self) -> str:
        return (
            f"CosineLength(max_len={self.max_len}, reward={self.reward!r}, correct={self.correct}, "
            f"wrong={self.wrong}, exceed={self.exceed}, name={self.name!r})"
        )

    def _inner(self) -> Any:
        if isinstance(self.reward, str):
            return get_reward(self.reward)
        return self.reward

    def _correctness(self, inner_result: RewardResult | None, meta: dict[str, Any]) -> tuple[bool | None, dict]:
        if inner_result is not None:
            if inner_result.score is None:
                return None, {"status": inner_result.status, "inner": inner_result.info}
            return inner_result.score >= self.threshold, {"inner_score": inner_result.score}
        if isinstance(meta.get("correct"), bool):
            return meta["correct"], {}
        score = meta.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool) and not math.isnan(score):
            return score >= self.threshold, {}
        return None, {"status": "no_correctness"}

    def _score(self, inner_result: RewardResult | None, meta: dict[str, Any]) -> RewardResult:
        n = token_count(meta)
        if n is None:
            return RewardResult(None, {"status": "no_length"})
        max_len = _param(self.max_len, meta, "max_len", "max_new_tokens", "max_response_length")
        if max_len is None or max_len <= 0:
            return RewardResult(None, {"status": "config_error", "error": "cosine_length needs a positive max_len"})
        correct, info = self._correctness(inner_result, meta)
        if correct is None:
            return RewardResult(None, info)
        info.update(tokens=n, max_len=max_len, correct=correct)
        if n > max_len:
            return RewardResult(self.exceed, info | {"reason": "exceed"})
        r_start, r_end = self.correct if correct else self.wrong
        score = r_end + 0.5 * (r_start - r_end) * (1.0 + math.cos(math.pi * n / max_len))
        return RewardResult(score, info)

    def fast(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult | None:
        """Decided on the caller's thread when correctness is in meta or the wrapped reward's
        own ``fast`` decides; ``None`` otherwise (the pool then runs the full call)."""
        if self.reward is None:
            return self._score(None, meta)
        inner_fast = fast_part(self._inner())
        inner = inner_fast(completion, reference, **meta) if inner_fast is not None else None
        return None if inner is None else self._score(inner, meta)

    def __call__(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        inner = self._inner()(completion, reference, **meta) if self.reward is not None else None
        return self._score(inner, meta)


class RepetitionPenalty(CheapReward):
    """``-weight * (1 - unique n-grams / total n-grams)`` over whitespace-separated words.

    0 for text without repeated n-grams (and for text shorter than one n-gram), approaching
    ``-weight`` for text that repeats one n-gram over and over.
    """

    def __init__(self, ngram: int = 3, *, weight: float = 1.0, name: str | None = None) -> None:
        if ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {ngram}")
        self.ngram = ngram
        self.weight = float(weight)
        self.name = name or "repetition"

    def __repr__(self) -> str:
        return f"RepetitionPenalty(ngram={self.ngram}, weight={self.weight}, name={self.name!r})"

    def __call__(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        words = (completion or "").lower().split()
        grams = [tuple(words[i : i + self.ngram]) for i in range(len(words) - self.ngram + 1)]
        if not grams:
            return RewardResult(0.0, {"ngrams": 0, "reason": "too_short"})
        repeated = 1.0 - len(set(grams)) / len(grams)
        return RewardResult(-self.weight * repeated + 0.0, {"ngrams": len(grams), "unique": len(set(grams))})


overlong_reward = register("overlong")(Overlong())
cosine_length_reward = register("cosine_length")(CosineLength())
repetition_reward = register("repetition")(RepetitionPenalty())
