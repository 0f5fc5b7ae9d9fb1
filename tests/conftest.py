"""Shared fixtures. Data-dependent tests read REWARDLAB_DATA_DIR (CI sets it to ../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def data_dir() -> Path | None:
    """The evaluation-data directory, or None when this machine has none."""
    d = os.environ.get("REWARDLAB_DATA_DIR")
    if d and Path(d).is_dir():
        return Path(d).resolve()
    guess = REPO.parent / "shared" / "data"
    return guess if guess.is_dir() else None


def shared_dir() -> Path | None:
    """The ../shared folder beside the checkout (bench material, fixtures), or None."""
    d = REPO.parent / "shared"
    return d if d.is_dir() else None


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2 causal LM + locally built ChatML tokenizer, saved once per session."""
    from rewardlab.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session", autouse=True)
def warm_reward_pool():
    """Start the reward workers once, before any test needs a verdict from the slow path.

    A cold pool answers ``timeout`` (phase ``startup``) to calls that arrive before a worker is
    ready, by design (see rewardlab/rewards/pool.py); tests of verdicts need a warm pool, and the
    cold-start behaviour has tests of its own (tests/test_deadlines.py) in fresh interpreters."""
    from rewardlab.rewards.pool import get_pool

    assert get_pool().warmup(), "the reward worker pool did not start"
    yield
