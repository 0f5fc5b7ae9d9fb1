"""rewardlab rewards as a verl ``custom_reward_function``.

Point verl at this module (verl 0.8 and 0.9; tested with 0.8.0 and 0.9.1 in
``tests/test_verl_client.py``, through verl's own config files, loader and reward managers)::

    python -m verl.trainer.main_ppo ... \
      reward.custom_reward_function.path=pkg://rewardlab.adapters.verl \
      reward.custom_reward_function.name=compute_score

verl 0.9 reads only ``reward.custom_reward_function`` (the top-level ``custom_reward_function``
of older releases is ignored there, and verl then scores with its default rule). Every reward-loop
manager (``reward.reward_manager.name=naive``, the default, ``dapo``, ``gdpo``, ``rate_limited``)
calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` by keyword (adding
``num_turns`` and ``rollout_reward_scores`` to ``extra_info``, and for model-based rewards
``reward_router_address`` / ``reward_model_tokenizer`` keywords, which are not passed on to the
reward) and awaits coroutine functions: ``name=compute_score_async`` scores in a thread off verl's
event loop. ``reward.custom_reward_function.reward_kwargs`` (``+reward.custom_reward_function.
reward_kwargs.reward=NAME`` on the command line) arrive here as keyword arguments: ``reward=NAME``
forces one reward (a registry name such as ``"format"`` or a dotted path to your own reward or
``Combined``) instead of routing. The file path of this module works as ``path`` too, but then
the function lives in a module verl names itself and cannot be pickled; ``pkg://`` can.

verl 0.8 and 0.9 have no batch reward manager (``reward_manager.name=batch`` is "Unknown reward
manager"); :func:`compute_score_batch` scores a batch in rewardlab's worker pool for your own code.
The legacy ``verl.workers.reward_manager.PrimeRewardManager`` (no longer selectable by name in the
trainer) calls its function positionally and reads a number, or ``result[0]``: give it
:func:`compute_score_prime`, which returns the score alone.

Routing by ``data_source``: GSM8K and the MATH family (``openai/gsm8k``,
``DigitalLearningGmbH/MATH-lighteval``, ``lighteval/MATH``, ``HuggingFaceH4/MATH-500``, AIME, AMC,
Numina, DeepScaleR, ...) go to the ``math`` reward; code datasets (CodeContests, APPS, TACO,
HumanEval, MBPP, LiveCodeBench, Codeforces, PrimeIntellect, ...) go to the ``code`` reward, with
their ground truth (``{"inputs": [...], "outputs": [...]}`` as a dict or JSON string, or
HumanEval's ``{"test", "entry_point"}``) converted to the code reward's reference. An unknown
source is routed by the shape of its ground truth (dict of tests -> code, otherwise math) and
logged once. Add your own with :func:`add_route`.

Every call returns a dict with the same numeric keys, so verl's ``reward_extra_info`` stays
rectangular and its validation metrics can average every key:

* ``score``: float, the reward (0.0 when the sample could not be graded);
* ``acc``: 1.0 when the score is >= 1.0 (fully correct), else 0.0 (verl reports ``acc`` first);
* ``graded``: 1.0 when the reward graded the sample, 0.0 when it returned ``None`` or failed.

Pass ``return_info=True`` (via reward_kwargs) to also get ``status`` and ``reward`` strings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from rewardlab.adapters._common import coerce_reference, resolve, safe_call, score_many
from rewardlab.rewards.base import RewardResult

__all__ = ["compute_score", "compute_score_async", "compute_score_prime", "compute_score_batch", "route", "add_route",
           "ROUTES"]

log = logging.getLogger("rewardlab.adapters.verl")

ROUTES: dict[str, str] = {
    "openai/gsm8k": "math",
    "gsm8k": "math",
    "lighteval/math": "math",
    "digitallearninggmbh/math-lighteval": "math",
    "huggingfaceh4/math-500": "math",
    "math": "math",
    "math500": "math",
    "codecontests": "code",
    "deepmind/code_contests": "code",
    "apps": "code",
    "codeparrot/apps": "code",
    "taco": "code",
    "baai/taco": "code",
    "humaneval": "code",
    "openai/openai_humaneval": "code",
    "openai_humaneval": "code",
    "mbpp": "code",
    "livecodebench": "code",
}
"""Exact data_source (lower-cased) -> reward name. Checked before the substring rules."""

_CODE_HINTS = ("code", "apps", "taco", "humaneval", "mbpp", "codeforces", "leetcode", "primeintellect", "kodcode")
_MATH_HINTS = ("gsm8k", "math", "aime", "amc", "numina", "deepscaler", "olympiad", "minerva")
_warned: set[str] = set()


def add_route(data_source: str, reward: str) -> None:
    """Route ``data_source`` (case-insensitive, exact) to the reward registered as ``reward``."""
    ROUTES[data_source.lower()] = reward


def route(data_source: Any, ground_truth: Any = None) -> str:
    """The reward name for a data source (see the module docstring for the rules)."""
    ds = str(data_source or "").strip().lower()
    if ds in ROUTES:
        return ROUTES[ds]
    if any(h in ds for h in _CODE_HINTS):
        return "code"
    if any(h in ds for h in _MATH_HINTS):
        return "math"
    ref = coerce_reference(ground_truth)
    guess = "code" if isinstance(ref, dict) and ("cases" in ref or "tests" in ref) else "math"
    if ds not in _warned:
        _warned.add(ds)
        log.warning("unknown verl data_source %r: routed to %r by the shape of its ground truth", data_source, guess)
    return guess


_VERL_INTERNAL = frozenset({"reward_router_address", "reward_model_tokenizer"})
"""Keywords verl's reward loop adds for model-based rewards; never forwarded to a rule reward."""


def meta_of(extra_info: Any, kwargs: dict[str, Any], data_source: Any) -> dict[str, Any]:
    meta = {str(k): v for k, v in extra_info.items() if v is not None} if isinstance(extra_info, dict) else {}
    meta.update((k, v) for k, v in kwargs.items() if k not in _VERL_INTERNAL)
    meta["data_source"] = str(data_source)
    return meta


def _to_dict(res: RewardResult, reward_name: str, return_info: bool) -> dict[str, Any]:
    graded = res.score is not None
    score = float(res.score) if graded else 0.0
    out: dict[str, Any] = {"score": score, "acc": 1.0 if graded and score >= 1.0 else 0.0, "graded": float(graded)}
    if return_info:
        out["status"] = str(res.info.get("status", "ok"))
        out["reward"] = reward_name
    return out


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    *,
    reward: str | None = None,
    return_info: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one verl sample; always ``{"score": float, "acc": float, "graded": float}``.

    Extra ``kwargs`` (verl's ``reward_kwargs``) are passed to the reward as meta.
    """
    name = reward or route(data_source, ground_truth)
    try:
        fn = resolve(name)
    except Exception as e:  # noqa: BLE001 - unknown reward: ungraded, never an exception in verl's loop
        log.error("verl adapter: cannot load reward %r: %s", name, e)
        return _to_dict(RewardResult(None, {"status": "error"}), name, return_info)
    meta = meta_of(extra_info, kwargs, data_source)
    res = safe_call(fn, solution_str or "", coerce_reference(ground_truth), meta)
    return _to_dict(res, name, return_info)


def compute_score_batch(
    data_sources: Iterable[Any],
    solution_strs: Iterable[str],
    ground_truths: Iterable[Any],
    extra_infos: Iterable[Any] | None = None,
    *,
    reward: str | None = None,
    return_info: bool = False,
    deadline: float = 10.0,
    workers: int | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Score a verl batch (the batch reward manager's keywords); one dict per sample, in order.

    Samples are grouped by routed reward and each group is scored in rewardlab's worker pool with
    a per-item ``deadline`` (seconds); a timeout is an ungraded sample, never a hang.
    """
    sources = list(data_sources)
    solutions = [s or "" for s in solution_strs]
    truths = list(ground_truths)
    extras = list(extra_infos) if extra_infos is not None else [None] * len(sources)
    if not (len(sources) == len(solutions) == len(truths) == len(extras)):
        raise ValueError(
            f"compute_score_batch: lengths differ (data_sources={len(sources)}, solution_strs={len(solutions)}, "
            f"ground_truths={len(truths)}, extra_infos={len(extras)})"
        )
    names = [reward or route(ds, gt) for ds, gt in zip(sources, truths)]
    out: list[dict[str, Any] | None] = [None] * len(sources)
    for name in dict.fromkeys(names):
        idx = [i for i, n in enumerate(names) if n == name]
        try:
            fn = resolve(name)
        except Exception as e:  # noqa: BLE001
            log.error("verl adapter: cannot load reward %r: %s", name, e)
            for i in idx:
                out[i] = _to_dict(RewardResult(None, {"status": "error"}), name, return_info)
            continue
        metas = [meta_of(extras[i], kwargs, sources[i]) for i in idx]
        results = score_many(
            fn,
            [solutions[i] for i in idx],
            [coerce_reference(truths[i]) for i in idx],
            metas,
            pool=len(idx) > 1,
            deadline=deadline,
            workers=workers,
        )
        for i, res in zip(idx, results):
            out[i] = _to_dict(res, name, return_info)
    return [d for d in out if d is not None]


async def compute_score_async(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """:func:`compute_score` as a coroutine (verl's reward loop awaits coroutine functions directly);
    the scoring runs in a thread so verl's event loop keeps going."""
    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth, extra_info, **kwargs)


def compute_score_prime(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                        **kwargs: Any) -> float:
    """:func:`compute_score`'s ``score`` alone (0.0 when ungraded), for verl's legacy
    ``PrimeRewardManager``, which calls ``fn(data_source, solution_str, ground_truth, extra_info)``
    in worker processes and reads a number (anything else it indexes with ``[0]``)."""
    return compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)["score"]
