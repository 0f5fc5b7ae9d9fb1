"""rewardlab rewards as TRL ``GRPOTrainer`` reward functions, in one line.

    from trl import GRPOConfig, GRPOTrainer
    from rewardlab.rewards import math_reward
    from rewardlab.rewards.format import OneAnswer
    from rewardlab.adapters.trl import as_trl, as_trl_weighted

    trainer = GRPOTrainer(model=..., train_dataset=ds,            # ds has "prompt" and "answer" columns
                          reward_funcs=[as_trl(math_reward), as_trl(OneAnswer())],
                          args=GRPOConfig(..., reward_weights=[1.0, 0.1]))
    # logs rewards/math/mean and rewards/one_answer/mean

    # or, from a dict of named weighted components:
    funcs, weights = as_trl_weighted({"math": (math_reward, 1.0), "one_answer": (OneAnswer(), 0.1)})
    GRPOTrainer(..., reward_funcs=funcs, args=GRPOConfig(..., reward_weights=weights))

TRL (1.x) calls each reward function as
``f(prompts=..., completions=..., completion_ids=..., **columns, trainer_state=..., log_extra=...,
log_metric=...)`` where every dataset column other than ``prompt`` arrives as a keyword list with
one entry per completion. The adapter:

* turns each completion (a string, or a list of chat messages for conversational datasets) into
  text;
* takes the reference from the column named ``reference_key``, or else the first present of
  ``reference``, ``answer``, ``solution``, ``ground_truth``, ``label``, ``target``, ``tests``
  (code tests in the common public layouts are converted for the code reward, see
  :func:`rewardlab.adapters._common.coerce_reference`); a ``reference_key`` naming a missing
  column raises ``RewardlabError`` on the first step, since that is a setup error, not a grading one;
* passes the other columns as ``meta`` to the reward, plus ``prompt`` and, when TRL provides token
  ids, ``completion_tokens`` (so length rewards such as ``Overlong`` work); a column named like a
  reward's or the worker pool's parameters (``reference``, ``completion``, ``reward``, ``deadline``,
  ``wall_cap``, ``self``, ``result``) reaches the reward as ``<name>_`` (logged once), so it never
  leaves the sample ungraded;
* returns ``list[float | None]``: ``None`` (TRL's "not applicable", NaN-skipped in the weighted sum)
  for ungradable samples; an exception inside a reward is logged and becomes ``None``, it never
  stops training;
* reports the share of samples whose status is not ``"ok"`` as ``rewards/<name>/not_ok_frac``
  through TRL's ``log_metric``, so "could not grade" is visible, never a silent 0.

Its ``__name__`` is the reward's stable name (TRL's metric key is ``rewards/<__name__>/mean``).
The adapters are picklable objects. ``as_trl_async`` gives an ``async def __call__`` variant that
TRL runs concurrently with other async reward functions (the scoring itself runs in a thread).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rewardlab.adapters._common import RewardLike, coerce_reference, completion_text, log, resolve, score_many
from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import RewardResult, reward_name

__all__ = ["as_trl", "as_trl_async", "as_trl_weighted", "TRLReward", "AsyncTRLReward", "REFERENCE_KEYS"]

REFERENCE_KEYS = ("reference", "answer", "solution", "ground_truth", "label", "target", "tests")
"""Dataset columns tried, in order, for the reference when ``reference_key`` is not given."""

_TRAINER_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})


class TRLReward:
    """A TRL reward function wrapping a rewardlab reward (build it with :func:`as_trl`)."""

    def __init__(
        self,
        reward: RewardLike,
        *,
        name: str | None = None,
        reference_key: str | None = None,
        pool: bool = False,
        deadline: float = 10.0,
        workers: int | None = None,
    ) -> None:
        fn = resolve(reward)  # an unknown name fails here, when the trainer is built, not mid-run
        self.reward = reward
        self.__name__ = name or (reward if isinstance(reward, str) and "." not in reward else reward_name(fn))
        self.reference_key = reference_key
        self.pool = pool
        self.deadline = deadline
        self.workers = workers

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__name__!r})"

    def _reference_column(self, columns: dict[str, Any]) -> str | None:
        if self.reference_key is not None:
            if self.reference_key not in columns:
                raise RewardlabError(
                    f"reward {self.__name__!r}: dataset column {self.reference_key!r} not found; "
                    f"columns: {sorted(k for k in columns if k not in _TRAINER_KWARGS)}"
                )
            return self.reference_key
        return next((k for k in REFERENCE_KEYS if k in columns), None)

    def score(
        self,
        /,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[RewardResult]:
        """Full results (score and info) for a TRL-style call."""
        n = len(completions)
        ref_key = self._reference_column(columns)
        references = [coerce_reference(r) for r in columns[ref_key]] if ref_key is not None else [None] * n
        data_cols = {k: v for k, v in columns.items() if k not in _TRAINER_KWARGS and k != ref_key}
        metas: list[dict[str, Any]] = []
        for i in range(n):
            meta = {k: v[i] for k, v in data_cols.items() if isinstance(v, (list, tuple)) and len(v) == n}
            if prompts is not None:
                meta["prompt"] = prompts[i]
            if completion_ids is not None:
                meta["completion_tokens"] = len(completion_ids[i])
            metas.append(meta)
        texts = [completion_text(c) for c in completions]
        return score_many(
            resolve(self.reward), texts, references, metas, pool=self.pool, deadline=self.deadline, workers=self.workers
        )

    def _finish(self, results: list[RewardResult], columns: dict[str, Any]) -> list[float | None]:
        log_metric = columns.get("log_metric")
        if callable(log_metric) and results:
            not_ok = sum(1 for r in results if r.info.get("status") != "ok")
            try:
                log_metric(f"rewards/{self.__name__}/not_ok_frac", not_ok / len(results))
            except Exception:  # noqa: BLE001 - metrics are best effort
                pass
        # NaN / inf would poison TRL's weighted sum: report them as "not gradable" instead
        return [float(r.score) if r.score is not None and math.isfinite(r.score) else None for r in results]

    def __call__(
        self,
        /,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        # ``self`` is positional-only so that a dataset column named "self" is just a column
        try:
            results = self.score(prompts, completions, completion_ids, **kwargs)
        except RewardlabError:
            raise  # a misconfigured reference column is a setup error: fail on the first step
        except Exception as e:  # noqa: BLE001
            log.error("reward %s failed on the whole batch (%s: %s); returning None", self.__name__, type(e).__name__,
                      e)
            results = [RewardResult(None, {"status": "error"}) for _ in completions]
        return self._finish(results, kwargs)


class AsyncTRLReward(TRLReward):
    """The same adapter with an ``async def __call__``; scoring runs in a worker thread."""

    async def __call__(  # type: ignore[override]
        self,
        /,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        return await asyncio.to_thread(TRLReward.__call__, self, prompts, completions, completion_ids, **kwargs)


def as_trl(
    reward: RewardLike,
    *,
    name: str | None = None,
    reference_key: str | None = None,
    pool: bool = False,
    deadline: float = 10.0,
    workers: int | None = None,
) -> TRLReward:
    """Wrap a rewardlab reward (object or registry name) as a TRL ``GRPOTrainer`` reward function.

    ``name`` overrides the metric name; ``reference_key`` picks the dataset column holding the
    reference; ``pool=True`` scores in worker processes with a per-item ``deadline`` (seconds).
    """
    return TRLReward(reward, name=name, reference_key=reference_key, pool=pool, deadline=deadline, workers=workers)


def as_trl_async(
    reward: RewardLike,
    *,
    name: str | None = None,
    reference_key: str | None = None,
    pool: bool = False,
    deadline: float = 10.0,
    workers: int | None = None,
) -> AsyncTRLReward:
    """Like :func:`as_trl`, but an async reward function (``await f(prompts=..., completions=...)``)."""
    return AsyncTRLReward(reward, name=name, reference_key=reference_key, pool=pool, deadline=deadline, workers=workers)


def as_trl_weighted(
    components: Mapping[str, RewardLike | tuple[RewardLike, float]], **kwargs: Any
) -> tuple[list[TRLReward], list[float]]:
    """One TRL reward function per named component, plus their weights, for
    ``GRPOTrainer(reward_funcs=funcs, args=GRPOConfig(reward_weights=weights))``.

    TRL then logs ``rewards/<name>/mean`` per component and sums with NaN-skipping, which is the
    same rule as :class:`~rewardlab.rewards.combine.Combined` (a ``None`` component is skipped,
    not counted as 0). ``kwargs`` go to every :func:`as_trl`.
    """
    funcs: list[TRLReward] = []
    weights: list[float] = []
    for name, spec in components.items():
        reward, weight = spec if isinstance(spec, tuple) else (spec, 1.0)
        funcs.append(as_trl(reward, name=name, **kwargs))
        weights.append(float(weight))
    return funcs, weights
