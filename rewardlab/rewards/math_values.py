"""Temporary alias of :mod:`rewardlab.rewards.math.values` (moved), kept until tests/test_math_values.py
imports the new path; remove it then."""

from rewardlab.rewards.math.values import *  # noqa: F401,F403
from rewardlab.rewards.math.values import _huge, _terminates_within, _vals_equal  # noqa: F401
