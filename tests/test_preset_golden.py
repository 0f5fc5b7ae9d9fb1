"""Every preset's seeded metrics over 3 training steps equal the ones recorded before the issue-25 redesign.

``tests/data/preset_metrics_golden.json`` was written by this file with ``REWARDLAB_RECORD_GOLDEN=1`` at
commit d43feab (before ``policy_loss`` took the algorithm whole), on the tiny random model and the arith
task through the real CLI (``tests/test_presets_cli.py``'s ``train_cli``), seed 0, one thread. A refactor
that changes any algorithm's arithmetic, a default, or the order of the random streams fails here.
Timing and memory metrics are not compared (they are not functions of the seed).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from rewardlab.algos import PRESETS
from test_presets_cli import train_cli

GOLDEN = Path(__file__).parent / "data" / "preset_metrics_golden.json"
STEPS = 3
_UNSEEDED = re.compile(r"time|_s$|/s$|per_s|throughput|mem|wall|cpu|elapsed|eta|rate_tok", re.IGNORECASE)


def _seeded(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not _UNSEEDED.search(k) and isinstance(v, (int, float, str, bool))} for r in rows]


def _record() -> bool:
    return os.environ.get("REWARDLAB_RECORD_GOLDEN") == "1"


@pytest.fixture(scope="module")
def golden() -> dict:
    if _record():
        return {}
    return json.loads(GOLDEN.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_preset_metrics_equal_the_recorded_ones(algo, golden, tiny_model_dir, tmp_path):
    rows = _seeded(train_cli(tmp_path, tiny_model_dir, "--algo", algo, "--steps", str(STEPS)))
    if _record():
        data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        data[algo] = rows
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return
    want = golden[algo]
    assert len(rows) == len(want) == STEPS
    for step, (got, exp) in enumerate(zip(rows, want), 1):
        assert sorted(got) == sorted(exp), f"{algo} step {step}: metric names changed"
        diff = {k: (got[k], exp[k]) for k in exp
                if got[k] != exp[k] and not (isinstance(exp[k], float) and math.isnan(exp[k]) and math.isnan(got[k]))}
        assert not diff, f"{algo} step {step}: {diff}"


def test_every_preset_is_recorded(golden):
    if _record():
        pytest.skip("recording")
    assert set(golden) == set(PRESETS)
