"""The reward contract, shared by every reward, adapter, the trainer and the eval suite.

A reward is a pure function of text::

    reward(completion: str, reference, **meta) -> RewardResult(score: float | None, info: dict)

* ``score`` is the reward. ``None`` means "not gradable here" (for example a math reward asked to
  grade a code row); composition skips it instead of counting it as 0.
* ``info`` explains the score. ``info["status"]`` is always set: ``"ok"`` when the reward graded the
  completion normally (right or wrong), otherwise a short reason code such as ``"no_answer"``,
  ``"timeout"``, ``"error"``, ``"parse_error"`` or a sandbox status. Trainers count non-``"ok"``
  statuses, so "could not grade" is never a silent 0.
* Rewards are picklable (module-level functions or small classes) and carry a stable ``name``,
  which becomes their metric key ``rewards/<name>/mean``.

**Execution protocol** (:class:`Reward`; every part but the call is optional). Where each part
runs is decided by :mod:`rewardlab.rewards.pool` alone, never by the reward:

* ``fast(completion, reference, **meta) -> RewardResult | None`` runs on the caller's thread and
  must be linear-time in its input (``tests/test_fuzz_rewards.py``); ``None`` means "undecided here";
* ``slow(completion, reference, **meta) -> RewardResult`` is the expensive part, run in a pool worker
  under the CPU budget and wall cap when ``fast`` is undecided (a reward without ``slow`` has its
  whole call run there). It must compute, not dispatch: never call the pool;
* ``isolated = True``: the reward enforces its own limits (the code reward's sandbox); the pool calls
  it from threads of the calling process instead of worker processes;
* ``timeout_score``: the score of an item that ran out of time (default 0.0);
* ``on_failure(result, completion, reference, **meta) -> RewardResult``: lets a reward put a
  timeout or error the pool reports for it into its own ``info`` shape (default: as is).

A reward whose ``__call__`` should behave like a pooled call (``MathReward``) implements ``fast`` and
``slow`` and returns ``pool.score_one(self, completion, reference, ...)`` from ``__call__``. The
helpers :func:`fast_part`, :func:`slow_part`, :func:`is_isolated`, :func:`timeout_score_of` and
:func:`explain_failure` read the optional parts with their defaults, in this one place.

The registry maps names used in configs and on the command line (``math``, ``code``, ...) to
rewards, and also resolves dotted paths to user rewards (``my_pkg.rewards.fn``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from rewardlab.errors import RewardlabError

OK = "ok"


@dataclass
class RewardResult:
    """A score and the explanation of how it was reached."""

    score: float | None
    """The reward; ``None`` when the reward does not apply to this sample."""
    info: dict[str, Any] = field(default_factory=dict)
    """Why: extracted answer, parsed forms, deciding rule, failure reason; ``status`` always set."""

    def __post_init__(self) -> None:
        self.info.setdefault("status", OK)

    @property
    def status(self) -> str:
        return self.info["status"]

    @property
    def ok(self) -> bool:
        return self.info["status"] == OK

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "info": self.info}


def as_result(value: Any) -> RewardResult:
    """A reward's return value as a :class:`RewardResult`, for rewards written TRL style.

    A ``RewardResult`` is returned as is; a bare number (or bool) becomes a score with status
    ``"ok"``; ``None`` becomes "not gradable" (status ``"no_score"``). Anything else raises
    ``TypeError``, which the callers (pool, composition, adapters) report as ``status="error"``.
    """
    if isinstance(value, RewardResult):
        return value
    if value is None:
        return RewardResult(None, {"status": "no_score"})
    if isinstance(value, (int, float)):
        return RewardResult(float(value))
    raise TypeError(f"a reward must return RewardResult, a number or None, got {type(value).__name__}")


class Reward(Protocol):
    """What every reward looks like: a call. A plain function satisfies it (TRL style, returning a
    ``RewardResult``, a number or ``None``); :class:`StagedReward` lists the optional parts."""

    def __call__(self, completion: str, reference: Any, **meta: Any) -> RewardResult: ...


class StagedReward(Reward, Protocol):
    """A reward with every optional part of the execution protocol (see the module docstring)."""

    name: str
    """Stable metric key ``rewards/<name>/...`` (default: :func:`reward_name`)."""
    isolated: bool
    """True: enforces its own limits, so the pool calls it from threads here (default False)."""
    timeout_score: float
    """The score of an item that ran out of time (default 0.0)."""

    def fast(self, completion: str, reference: Any, **meta: Any) -> RewardResult | None:
        """Decide on the caller's thread in linear time, or return None (undecided)."""

    def slow(self, completion: str, reference: Any, **meta: Any) -> RewardResult:
        """The expensive part, run by the pool in a worker when ``fast`` is undecided."""

    def on_failure(self, result: RewardResult, completion: str, reference: Any, **meta: Any) -> RewardResult:
        """``result`` (a pool-side timeout or error of this reward) in this reward's own shape."""


def fast_part(reward: Any) -> Callable[..., RewardResult | None] | None:
    """The reward's ``fast`` method, or None when it has none."""
    f = getattr(reward, "fast", None)
    return f if callable(f) else None


def slow_part(reward: Any) -> Callable[..., Any]:
    """What a worker runs for an item ``fast`` left undecided: ``reward.slow``, else the whole call."""
    s = getattr(reward, "slow", None)
    return s if callable(s) else reward


def has_slow_part(reward: Any) -> bool:
    return callable(getattr(reward, "slow", None))


def is_isolated(reward: Any) -> bool:
    """Whether the reward enforces its own limits (then it runs in threads of the caller)."""
    return bool(getattr(reward, "isolated", False))


def timeout_score_of(reward: Any) -> float:
    """The score of a timed-out item of this reward."""
    return float(getattr(reward, "timeout_score", 0.0))


def explain_failure(reward: Any, result: RewardResult, completion: Any, reference: Any, meta: dict) -> RewardResult:
    """A pool-side timeout or error ``result`` passed through the reward's ``on_failure``, if any."""
    hook = getattr(reward, "on_failure", None)
    if not callable(hook):
        return result
    try:
        return as_result(hook(result, completion, reference, **meta))
    except Exception:  # noqa: BLE001 - the plain failure is still a correct report
        return result


class CheapReward:
    """Mixin for rewards cheap enough to always decide on the caller's thread (string checks,
    counting, arithmetic): ``fast``, the hook ``pool.score_batch`` tries first, is the call itself."""

    def fast(self, completion: str, reference: Any = None, **meta: Any) -> RewardResult:
        return self(completion, reference, **meta)  # type: ignore[operator]


_REGISTRY: dict[str, Callable[..., RewardResult]] = {}


def reward_name(fn: Any) -> str:
    """The stable name of a reward: its ``name`` attribute, else its ``__name__`` without ``_reward``."""
    name = getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return name[: -len("_reward")] if name.endswith("_reward") and len(name) > len("_reward") else name


def register(name: str) -> Callable[[Callable[..., RewardResult]], Callable[..., RewardResult]]:
    """Decorator: make a reward available under ``name`` to configs and the CLI."""

    def deco(fn: Callable[..., RewardResult]) -> Callable[..., RewardResult]:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"reward name {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return deco


def _load_builtin_rewards() -> None:
    # Importing the package registers the built-in rewards (math, code, format, ...).
    importlib.import_module("rewardlab.rewards")


def get_reward(name: str) -> Callable[..., RewardResult]:
    """Resolve a registered name (``math``) or a dotted path (``my_pkg.rewards.fn``) to a reward."""
    _load_builtin_rewards()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if "." in name or ":" in name:
        module, _, attr = name.replace(":", ".").rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise RewardlabError(f"cannot load reward {name!r}: {e}") from None
        if not callable(obj):
            raise RewardlabError(f"reward {name!r} is not callable")
        return obj
    known = ", ".join(sorted(_REGISTRY)) or "(none)"
    raise RewardlabError(f"unknown reward {name!r}; known: {known}, or a dotted path like my_pkg.rewards.fn")


def registered_rewards() -> dict[str, Callable[..., RewardResult]]:
    """A copy of the registry (name -> reward)."""
    _load_builtin_rewards()
    return dict(_REGISTRY)
