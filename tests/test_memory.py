"""Peak memory per micro-batch (issue 38): ``rewardlab.train.memory``.

    PYTHONPATH=. .venv/bin/python -m pytest -q tests/test_memory.py
"""

from __future__ import annotations

import sys

import pytest
import torch

from rewardlab.train.memory import micro_batch_memory, peak_gpu_mb, peak_rss_mb

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the RSS high-water mark is Linux's")


def _hold(mb: int) -> float:
    x = torch.ones(mb << 18)  # float32: mb MiB, written
    return float(x[-1])


def test_each_micro_batch_reads_its_own_peak_and_the_process_peak_is_kept():
    with micro_batch_memory(None) as big:
        _hold(300)
    with micro_batch_memory(None) as small:
        _hold(20)
    assert big["rss_mb"] - small["rss_mb"] > 200, (big, small)  # the counter was set back between them
    assert peak_rss_mb() >= big["rss_mb"] - 1  # the process's peak since start survives the reset
    assert "gpu_mb" not in big and peak_gpu_mb(torch.device("cpu")) is None
