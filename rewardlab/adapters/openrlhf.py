"""rewardlab rewards for OpenRLHF: a ``reward_func`` file and the remote reward-model protocol.

Two ways in:

1. As a custom reward function file (OpenRLHF 0.11 loads the file and calls ``reward_func``)::

       REWARDLAB_REWARD=math  python -m openrlhf.cli.train_ppo_ray ... \\
           --reward.remote_url $(python -c "import rewardlab.adapters.openrlhf as m; print(m.__file__)") \\
           --data.label_key answer

   ``REWARDLAB_REWARD`` names the reward (default ``math``; a registry name or a dotted path, or
   several as ``math,one_answer=0.1`` for a weighted :class:`~rewardlab.rewards.combine.Combined`).

2. As a server: ``rewardlab serve --port 5000 --reward math`` and
   ``--reward.remote_url http://host:5000/get_reward`` (see :mod:`rewardlab.server`).

OpenRLHF calls ``reward_func(queries, prompts, labels, **kw)`` where each query is the *prompt
plus the response* as decoded text; the prompt is stripped here before scoring. The return value
is ``{"rewards": (B,) tensor, "scores": (B,) tensor, "extra_logs": {name: (B,) tensor}}``:
``rewards`` feed the advantage, ``scores`` feed OpenRLHF's dynamic filtering, and ``extra_logs``
carry ``graded`` (1/0 per sample) and, for a ``Combined`` reward, every component's score. An
ungraded sample (``None``, timeout, error) gets reward 0.0 and ``graded`` 0.0, so it is counted,
not silently hidden.

Labels (the dataset's ``--data.label_key`` values, passed through as they are) follow one rule in
both modes (:func:`label_references`, used by :func:`score_queries`): a string, number or object
is the reference; ``null`` and ``[]`` mean no reference; a list is a set of accepted answers, each
graded, and the best score wins (``info["label_index"]`` says which); a boolean or a list holding a
list or boolean is no reference at all: the sample is ungraded (status ``bad_label``, reward 0.0,
``graded`` 0.0) and logged, and the server still answers 200.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from rewardlab.adapters._common import RewardLike, plain_value, coerce_reference, log, resolve, score_many
from rewardlab.rewards.base import RewardResult
from rewardlab.rewards.combine import Combined, reward_from_specs

__all__ = [
    "reward_func", "make_reward_func", "strip_prompt", "score_queries", "label_references", "parse_reward_spec",
    "rewards_payload",
]


def strip_prompt(query: str, prompt: str) -> str:
    """The response part of an OpenRLHF query (= prompt + response).

    Exact prefix first; then the text after the last occurrence of the prompt (chat templates may
    add a BOS or system block in front); then a whitespace-insensitive prefix match (detokenising
    can change spaces at the seam). If the prompt cannot be found, the whole query is returned.
    """
    if not prompt:
        return query
    if query.startswith(prompt):
        return query[len(prompt) :]
    pos = query.rfind(prompt)
    if pos >= 0:
        return query[pos + len(prompt) :]
    target = "".join(prompt.split())
    if not target:
        return query
    seen = 0
    for i, ch in enumerate(query):
        if not ch.isspace():
            if ch != target[seen]:
                break
            seen += 1
            if seen == len(target):
                return query[i + 1 :]
    log.warning("openrlhf adapter: prompt not found in query; scoring the whole query")
    return query


def parse_reward_spec(spec: str) -> RewardLike:
    """``"math"`` -> the math reward; ``"math,one_answer=0.1"`` -> a weighted ``Combined``.

    Bad specs raise ``ValueError`` (see :func:`rewardlab.rewards.combine.reward_from_specs`).
    """
    return reward_from_specs(p for p in spec.split(",") if p.strip())


def score_queries(
    reward: RewardLike,
    queries: Sequence[str],
    prompts: Sequence[str] | None,
    labels: Sequence[Any] | None,
    *,
    pool: bool = False,
    deadline: float = 10.0,
    workers: int | None = None,
) -> list[RewardResult]:
    """Strip prompts, coerce labels and score; the shared core of ``reward_func`` and the server."""
    n = len(queries)
    prompts = list(prompts) if prompts is not None else [""] * n
    labels = list(labels) if labels is not None else [None] * n
    if not (len(prompts) == len(labels) == n):
        raise ValueError(f"lengths differ: query={n}, prompts={len(prompts)}, labels={len(labels)}")
    responses = [strip_prompt(q, p) for q, p in zip(queries, prompts)]
    fn = resolve(reward)
    # one row per (sample, accepted answer): a list label is a set of accepted answers
    rows: list[tuple[int, int]] = []
    refs: list[Any] = []
    out: list[RewardResult | None] = [None] * n
    choices: list[int] = [0] * n
    bad = 0
    for i, label in enumerate(labels):
        answers = label_references(label)
        if answers is None:
            bad += 1
            out[i] = ungraded(fn, "bad_label", "the label is a boolean or a list holding a list or boolean; "
                                               "expected a string, number, object, null or a list of those")
            continue
        choices[i] = len(answers)
        for j, ref in enumerate(answers):
            rows.append((i, j))
            refs.append(ref)
    scored = score_many(fn, [responses[i] for i, _ in rows], refs, [{"prompt": prompts[i]} for i, _ in rows],
                        pool=pool, deadline=deadline, workers=workers)
    if bad:
        log.warning("openrlhf adapter: %d of %d labels are not references (status bad_label, reward 0.0, graded 0.0)",
                    bad, n)
    best: dict[int, tuple[int, RewardResult]] = {}
    for (i, j), res in zip(rows, scored):
        if i not in best or _better(res, best[i][1]):
            best[i] = (j, res)
    for i, (j, res) in best.items():
        if isinstance(labels[i], (list, tuple)):
            res = RewardResult(res.score, {**res.info, "label_index": j, "label_choices": choices[i]})
        out[i] = res
    return [r if r is not None else RewardResult(None, {"status": "error"}) for r in out]


def ungraded(reward: Any, status: str, error: str) -> RewardResult:
    """An ungraded result in ``reward``'s shape: a :class:`Combined` reward's components are all
    present (as ``None``), so ``extra_logs`` has the same keys on every call."""
    info: dict[str, Any] = {"status": status, "error": error}
    if isinstance(reward, Combined):
        info["components"] = {k: None for k in reward.rewards}
    return RewardResult(None, info)


def label_references(label: Any) -> list[Any] | None:
    """The references one OpenRLHF label stands for, or ``None`` when it cannot be a reference.

    A string, number, object (code tests) or ``null`` is one reference (coerced as everywhere else);
    a list is a set of accepted answers, each one a reference (an empty list: no reference, like
    ``null``); a boolean, or a list holding a list or a boolean, is no reference at all (``None``).
    """
    label = plain_value(label)
    if isinstance(label, bool):
        return None
    if isinstance(label, (list, tuple)):
        items = [plain_value(x) for x in label]
        if any(isinstance(x, (bool, list, tuple)) for x in items):
            return None
        return [coerce_reference(x) for x in items] if items else [None]
    return [coerce_reference(label)]


def _better(new: RewardResult, old: RewardResult) -> bool:
    """``new`` beats ``old``: a higher score; any score beats ``None``; ties keep the earlier answer."""
    a, b = _finite(new.score), _finite(old.score)
    return a is not None and (b is None or a > b)


def rewards_payload(results: Sequence[RewardResult]) -> dict[str, Any]:
    """Plain-list form: ``{"rewards": [...], "scores": [...], "extra_logs": {name: [...]}}``."""
    scores = [_finite(r.score) for r in results]
    rewards = [s if s is not None else 0.0 for s in scores]
    extra: dict[str, list[float]] = {"graded": [float(s is not None) for s in scores]}
    comp_names: list[str] = []
    for r in results:
        for k in r.info.get("components", {}) or {}:
            if k not in comp_names:
                comp_names.append(k)
    for k in comp_names:
        vals = [_finite(r.info.get("components", {}).get(k)) for r in results]
        extra[f"{k}"] = [float(v) if v is not None else 0.0 for v in vals]
        extra[f"{k}_graded"] = [float(v is not None) for v in vals]
    return {"rewards": rewards, "scores": list(rewards), "extra_logs": extra}


def _finite(x: Any) -> float | None:
    """``x`` as a float, or ``None`` when missing or not finite (JSON and advantages need finite)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


class OpenRLHFReward:
    """A picklable OpenRLHF ``reward_func`` bound to one reward (build it with :func:`make_reward_func`)."""

    def __init__(self, reward: RewardLike, *, pool: bool = True, deadline: float = 10.0, workers: int | None = None):
        self.reward = reward
        self.pool = pool
        self.deadline = deadline
        self.workers = workers

    def __call__(self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any],
                 **kw: Any) -> dict[str, Any]:
        import torch  # lazy: torch is heavy and optional for everything but this OpenRLHF entry point

        try:
            results = score_queries(
                self.reward, queries, prompts, labels, pool=self.pool, deadline=self.deadline, workers=self.workers
            )
        except ValueError:
            raise  # mismatched batch lengths are a wiring bug in the caller, not a scoring failure
        except Exception as e:  # noqa: BLE001
            log.error("openrlhf adapter: batch failed (%s: %s); every sample ungraded", type(e).__name__, e)
            shape = self.reward if not isinstance(self.reward, str) else None
            results = [ungraded(shape, "error", f"{type(e).__name__}: {e}") for _ in queries]
        payload = rewards_payload(results)
        rewards = torch.tensor(payload["rewards"], dtype=torch.float32)  # (B,)
        return {
            "rewards": rewards,
            "scores": rewards.clone(),  # (B,)
            # (B,) each
            "extra_logs": {k: torch.tensor(v, dtype=torch.float32) for k, v in payload["extra_logs"].items()},
        }


def make_reward_func(reward: RewardLike, *, pool: bool = True, deadline: float = 10.0, workers: int | None = None):
    """An OpenRLHF ``reward_func(queries, prompts, labels, **kw)`` for ``reward`` (object or name)."""
    return OpenRLHFReward(reward, pool=pool, deadline=deadline, workers=workers)


cached_reward_func: OpenRLHFReward | None = None


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kw: Any) -> dict[str, Any]:
    """OpenRLHF entry point; the reward comes from ``REWARDLAB_REWARD`` (default ``math``)."""
    global cached_reward_func
    if cached_reward_func is None:
        cached_reward_func = make_reward_func(parse_reward_spec(os.environ.get("REWARDLAB_REWARD", "math")))
    return cached_reward_func(queries, prompts, labels, **kw)
