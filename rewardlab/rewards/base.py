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
    """What every reward looks like (a plain function satisfies it)."""

    def __call__(self, completion: str, reference: Any, **meta: Any) -> RewardResult: ...


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
