"""The verl reference fixtures of ``../shared/fixtures`` (numbers from verl 0.9.1's own code), for the
tests that match them: one loader, and float64 tensors of their lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def load(name: str) -> dict:
    """``FIXTURES / name`` parsed, or the whole test module skipped when the fixture is absent."""
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"../shared/fixtures/{name} not present", allow_module_level=True)
    return json.loads(path.read_text())


def t(x) -> torch.Tensor:
    """A fixture value (nested lists or a number) as a float64 tensor."""
    return torch.as_tensor(x, dtype=torch.float64)


def aggregations(width: int) -> dict[str, tuple[str, int | None]]:
    """verl's ``loss_agg_mode`` keys in the v2 fixture -> ``(our agg, max_len)``: verl's
    seq-mean-token-sum-norm divides by the padded width, or by the ``loss_scale_factor`` given."""
    return {
        "token-mean": ("token-mean", None),
        "seq-mean-token-sum": ("seq-mean-token-sum", None),
        "seq-mean-token-mean": ("seq-mean-token-mean", None),
        "seq-mean-token-sum-norm": ("seq-mean-token-sum-norm", width),
        "seq-mean-token-sum-norm@loss_scale_factor=16": ("seq-mean-token-sum-norm", 16),
        "token-sum": ("token-sum", None),
    }
