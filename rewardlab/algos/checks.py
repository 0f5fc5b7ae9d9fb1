"""Argument checks shared by the algorithm modules: one error type, one way to name a bad value."""

from __future__ import annotations

import math
from typing import Any

from rewardlab.errors import RewardlabError


class AlgoError(RewardlabError, ValueError):
    """A bad algorithm setting or argument (a ``RewardlabError`` for the CLI, a ``ValueError`` for code)."""


def is_real(x: Any) -> bool:
    """A finite int or float (never a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    """Raise :class:`AlgoError` unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise AlgoError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


def check_real(name: str, x: object, lo: float | None = None, hi: float | None = None) -> float:
    """``x`` as a float, or a one-line AlgoError when it is not a finite number in [lo, hi]."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise AlgoError(f"{name} must be a finite number, got {x!r}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise AlgoError(f"{name} must be in [{lo}, {hi}], got {x!r}")
    return float(x)
