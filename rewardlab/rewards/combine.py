"""Weighted composition of named rewards, with every component kept and failures counted.

    from rewardlab.rewards import math_reward
    from rewardlab.rewards.combine import Combined
    from rewardlab.rewards.format import OneAnswer

    total = Combined({"math": (math_reward, 1.0), "one_answer": (OneAnswer(), 0.1)})
    r = total("... \\\\boxed{4}", "4")
    r.score                       # 1.1 = 1.0 * 1 + 0.1 * 1
    r.info["components"]          # {"math": 1.0, "one_answer": 1.0}
    r.info["status_counts"]       # {"ok": 2}

Rules:
* ``score`` is the weighted sum over the components whose score is not ``None``. A ``None``
  component ("not gradable here", e.g. the code reward on a math row) is *skipped* for that
  sample, not counted as 0; when every component is ``None`` the total is ``None`` too.
* A component that raises does not stop the others: it becomes ``None`` with status ``"error"``.
* ``info["components"]`` holds each component's raw (unweighted) score, ``info["component_info"]``
  its info, ``info["status_counts"]`` how many components ended in each status. Every result of a
  ``Combined`` has this one shape, including a timeout or error the pool reports for the whole
  call (:meth:`Combined.on_failure`: the components that decide on their ``fast`` path keep their
  results, the others carry the failure), so per-component statuses are always counted the same way.
* Components may be given as rewards or registry names (``"math"``, ``"my_pkg.rewards.fn"``);
  names are resolved on first use, so a ``Combined`` pickles small and imports nothing heavy.
* Component names are metric keys: :func:`reward_metrics` turns a batch of results into
  ``rewards/<name>/mean`` (over graded samples), ``rewards/<name>/graded_frac`` and
  ``rewards/<name>/status/<status>`` counts.
* :func:`reward_from_specs` builds a reward from command-line style specs (``math``,
  ``one_answer=0.1``), as ``rewardlab serve --reward`` and OpenRLHF's ``REWARDLAB_REWARD`` take them.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable

from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import (
    RewardResult,
    as_result,
    fast_part,
    get_reward,
    is_isolated,
    reward_name,
    timeout_score_of,
)

__all__ = ["Combined", "reward_metrics", "reward_from_specs", "RewardSpecError"]

log = logging.getLogger(__name__)

RewardLike = Callable[..., RewardResult] | str


class Combined:
    """A reward that is the weighted sum of named component rewards (see the module docstring).

    ``components`` maps a name to ``(reward, weight)``, or to a bare reward (weight 1.0). A list
    of rewards is accepted too (names from :func:`reward_name`, weights 1.0).
    """

    def __init__(
        self,
        components: Mapping[str, RewardLike | tuple[RewardLike, float]] | Sequence[RewardLike],
        *,
        name: str = "total",
    ) -> None:
        if not isinstance(components, Mapping):
            components = {(c if isinstance(c, str) else reward_name(c)): c for c in components}
        if not components:
            raise ValueError("Combined needs at least one component reward")
        self.rewards: dict[str, RewardLike] = {}
        self.weights: dict[str, float] = {}
        for key, spec in components.items():
            reward, weight = spec if isinstance(spec, tuple) else (spec, 1.0)
            if not isinstance(reward, str) and not callable(reward):
                raise TypeError(f"component {key!r} is not a reward (got {type(reward).__name__})")
            weight = float(weight)
            if not math.isfinite(weight):
                raise ValueError(f"component {key!r} has a non-finite weight {weight}")
            self.rewards[str(key)] = reward
            self.weights[str(key)] = weight
        self.name = name
        self._resolved: dict[str, Callable[..., RewardResult]] = {}

    def __repr__(self) -> str:
        parts = ", ".join(f"{k!r}: ({_label(r)}, {self.weights[k]})" for k, r in self.rewards.items())
        return f"Combined({{{parts}}}, name={self.name!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_resolved"] = {}  # registry names are re-resolved in the receiving process
        return state

    @property
    def names(self) -> list[str]:
        return list(self.rewards)

    @property
    def isolated(self) -> bool:
        """Whether the pool should call this reward from threads of the calling process.

        True when some component isolates itself (the code reward runs its own sandbox) and every
        other component is isolated too or has a ``fast`` path (rewardlab's format and length
        rewards, which are cheap, and the math reward, whose ``slow`` part the pool still runs in a
        worker, under the batch's deadline, when the component is called from such a thread). A
        combination with any other user reward stays False and runs in the pool's worker processes
        under the batch's deadline.
        """
        comps = [self.component(k) for k in self.rewards]
        iso = [is_isolated(c) for c in comps]
        return any(iso) and all(i or fast_part(c) is not None for i, c in zip(iso, comps))

    def component(self, key: str) -> Callable[..., RewardResult]:
        """The component reward under ``key``, resolving a registry name on first use."""
        if key not in self._resolved:
            r = self.rewards[key]
            self._resolved[key] = get_reward(r) if isinstance(r, str) else r
        return self._resolved[key]

    def _run(self, key: str, completion: str, reference: Any, meta: dict[str, Any]) -> RewardResult:
        try:
            return as_result(self.component(key)(completion, reference, **meta))
        except Exception as e:  # noqa: BLE001 - one broken component must not sink the others
            log.warning("reward component %r raised %s: %s", key, type(e).__name__, e)
            return RewardResult(None, {"status": "error", "error": f"{type(e).__name__}: {e}"})

    def fast(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult | None:
        """The total when every component decides on its ``fast`` path, else ``None``.

        Lets :func:`rewardlab.rewards.pool.score_batch` grade cheap combinations (format, length,
        most math answers) on the caller's thread; anything else goes to a worker as a whole.
        """
        results: dict[str, RewardResult] = {}
        for key in self.rewards:
            f = fast_part(self.component(key))
            if f is None:
                return None
            try:
                res = f(completion, reference, **meta)
            except Exception:  # noqa: BLE001 - the full call reports it
                return None
            if res is None:
                return None
            results[key] = res
        return self._aggregate(results)

    def __call__(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        return self._aggregate({key: self._run(key, completion, reference, meta) for key in self.rewards})

    def on_failure(self, result: RewardResult, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        """A timeout or error the pool reports for the whole call, in the shape of every other result:
        components that decide on their ``fast`` path (linear-time) keep their results; the others,
        one of which ran out of time or failed, get ``result``'s status and info, and the score
        they give a timeout themselves (``timeout_score``, default 0.0; an error scores as the pool's)."""
        results: dict[str, RewardResult] = {}
        for key in self.rewards:
            res = None
            f = fast_part(self.component(key))
            if f is not None:
                try:
                    res = f(completion, reference, **meta)
                except Exception:  # noqa: BLE001 - counted with the failure below
                    res = None
            if res is None:  # what this component itself reports when it runs out of time (or fails)
                score = timeout_score_of(self.component(key)) if result.status == "timeout" else result.score
                res = RewardResult(score, dict(result.info))
            results[key] = as_result(res)
        return self._aggregate(results)

    def _aggregate(self, results: dict[str, RewardResult]) -> RewardResult:
        components: dict[str, float | None] = {}
        component_info: dict[str, dict[str, Any]] = {}
        total = 0.0
        graded = 0
        for key, res in results.items():
            score = res.score
            if score is not None and not math.isfinite(score):
                res = RewardResult(None, {**res.info, "status": "non_finite", "raw_score": score})
                score = None
            components[key] = score
            component_info[key] = res.info
            if score is not None:
                total += self.weights[key] * score
                graded += 1
        status_counts = dict(Counter(info["status"] for info in component_info.values()))
        info: dict[str, Any] = {
            "components": components,
            "component_info": component_info,
            "status_counts": status_counts,
            "weights": dict(self.weights),
        }
        if graded == 0:
            statuses = set(status_counts)
            info["status"] = statuses.pop() if len(statuses) == 1 else "no_component_graded"
            return RewardResult(None, info)
        return RewardResult(total, info)

    def metrics(self, results: Iterable[RewardResult]) -> dict[str, float]:
        """Per-component batch metrics for results of this reward (see :func:`reward_metrics`)."""
        results = list(results)
        by_name: dict[str, list[RewardResult]] = {}
        for key in self.rewards:
            by_name[key] = [
                RewardResult(r.info.get("components", {}).get(key), dict(r.info.get("component_info", {}).get(key, {})))
                for r in results
            ]
        return reward_metrics(by_name)


class RewardSpecError(RewardlabError, ValueError):
    """A malformed reward spec (a ``RewardlabError`` for the CLI, a ``ValueError`` for code)."""


def reward_from_specs(specs: Iterable[str]) -> Callable[..., RewardResult] | Combined:
    """The reward named by ``NAME`` / ``NAME=WEIGHT`` specs (names: registry names or dotted paths).

    One spec with weight 1 is that reward itself; anything else is a :class:`Combined` keyed by
    each name's last dotted part. Unknown names fail here (``RewardlabError``, listing the known
    ones), not on the first sample; so do a bad or non-finite weight and a name given twice.
    """
    specs = list(specs)
    parsed: list[tuple[str, str, float]] = []
    for spec in specs:
        name, sep, weight = spec.partition("=")
        name = name.strip()
        if not name:
            raise RewardSpecError(f"reward spec {spec!r}: expected NAME or NAME=WEIGHT")
        try:
            w = float(weight) if sep else 1.0
        except ValueError:
            raise RewardSpecError(f"reward spec {spec!r}: weight {weight.strip()!r} is not a number") from None
        if not math.isfinite(w):
            raise RewardSpecError(f"reward spec {spec!r}: the weight must be a finite number")
        get_reward(name)  # fail now, with the list of known names
        parsed.append((name.replace(":", ".").rsplit(".", 1)[-1], name, w))
    if not parsed:
        raise RewardSpecError("no reward given")
    if len({key for key, _, _ in parsed}) != len(parsed):
        raise RewardSpecError(f"reward specs {specs!r} name the same reward twice")
    if len(parsed) == 1 and parsed[0][2] == 1.0:
        return get_reward(parsed[0][1])
    return Combined({key: (name, w) for key, name, w in parsed})


def reward_metrics(results_by_name: Mapping[str, Sequence[RewardResult]]) -> dict[str, float]:
    """``rewards/<name>/mean`` over graded samples (NaN when none), ``rewards/<name>/graded_frac``
    and ``rewards/<name>/status/<status>`` (counts, non-``ok`` statuses only) for each name."""
    out: dict[str, float] = {}
    for name, results in results_by_name.items():
        scores = [r.score for r in results if r.score is not None]
        out[f"rewards/{name}/mean"] = sum(scores) / len(scores) if scores else float("nan")
        out[f"rewards/{name}/graded_frac"] = len(scores) / len(results) if results else float("nan")
        for status, n in Counter(r.info.get("status", "ok") for r in results).items():
            if status != "ok":
                out[f"rewards/{name}/status/{status}"] = float(n)
    return out


def _label(reward: RewardLike) -> str:
    return repr(reward) if isinstance(reward, str) else reward_name(reward)
