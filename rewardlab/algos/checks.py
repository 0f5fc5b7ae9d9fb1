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
