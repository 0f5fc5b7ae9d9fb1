"""The sandbox tests' one answer to "does this tier run here?" and their auto / B parametrisation."""

from __future__ import annotations

import pytest

from rewardlab.errors import RewardlabError
from rewardlab.sandbox import isolation


def tier_available(name: str) -> bool:
    """Whether isolation tier ``name`` ("A", "B", "unsafe") can start on this machine."""
    try:
        isolation.detect_tier(name)
        return True
    except RewardlabError:
        return False


TIERS = [pytest.param(None, id="auto"),
         pytest.param("B", id="B", marks=pytest.mark.skipif(not tier_available("B"), reason="tier B unavailable here"))]
"""The tiers most sandbox rows run in: auto (the strongest here) and B forced, skipped where B cannot start."""
