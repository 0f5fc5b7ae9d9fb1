"""Tests for the code reward: extraction, both reference styles, scoring modes, HumanEval.

    REWARDLAB_DATA_DIR=../shared/data .venv/bin/python -m pytest -q tests/test_code_reward.py
"""

from __future__ import annotations

import gzip
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import data_dir
from rewardlab.rewards import code_reward, extract_code, get_reward

ADD = {"tests": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n",
       "entry_point": "add", "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n"}


def test_registered_and_isolated():
    assert get_reward("code") is code_reward
    assert code_reward.isolated is True


@pytest.mark.parametrize("text, expected", [
    ("Sure:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1\n"),
    ("```\nx = 1\n```", "x = 1\n"),
    ("```python\ndef f():\n    return 2\n", "def f():\n    return 2\n"),  # unclosed (truncated) fence
    ("    return a + b\n", "    return a + b\n"),  # raw HumanEval-style body
    ("```bash\nls\n```\n```py\ny = 2\n```", "y = 2\n"),
])
def test_extract_code(text, expected):
    assert extract_code(text)[0] == expected


def test_extract_prefers_block_defining_entry_point():
    text = "```python\ndef add(a, b):\n    return a + b\n```\nUsage:\n```python\nprint(add(1, 2))\n```"
    assert extract_code(text, "add")[0].startswith("def add")


def test_function_style_body_and_full_definition():
    body = code_reward("    return a + b\n", ADD)
    assert (body.score, body.status, body.info["passed"], body.info["total"]) == (1.0, "ok", 1, 1)
    full = code_reward("Here you go:\n```python\ndef add(a, b):\n    return a + b\n```", ADD)
    assert full.score == 1.0 and full.info["fenced"] is True
    wrong = code_reward("```python\ndef add(a, b):\n    return a * b\n```", ADD)
    assert wrong.score == 0.0 and wrong.status == "ok" and wrong.info["sandbox_status"] == "fail"


def test_partial_scoring_is_a_fraction():
    r = code_reward("    return 5\n", ADD, partial=True)
    assert r.score == pytest.approx(0.5) and (r.info["passed"], r.info["total"]) == (1, 2)
    assert code_reward("    return 5\n", ADD).score == 0.0


def test_sandbox_statuses_reach_info():
    r = code_reward("    while True:\n        pass\n", ADD, timeout=1.0)
    assert r.score == 0.0 and r.status == "timeout"
    r = code_reward("```python\ndef add(a, b)\n```", ADD)
    assert r.score == 0.0 and r.status == "error" and "SyntaxError" in r.info["error"]
    assert code_reward("   ", ADD).status == "no_answer"
    assert code_reward("x", {"tests": "def check(c): pass"}).score is None


def test_stdio_cases():
    ref = {"cases": [{"stdin": "2 3\n", "stdout": "5\n"}, {"stdin": "10 -1\n", "stdout": "9\n"},
                     {"stdin": "1 1\n", "stdout": "2\n"}]}
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert code_reward(good, ref).score == 1.0
    half = "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)\n"
    assert code_reward(half, ref).score == 0.0
    r = code_reward(half, ref, partial=True)
    assert r.score == pytest.approx(2 / 3) and (r.info["passed"], r.info["total"]) == (2, 3)


def test_score_batch_calls_it_from_threads():
    from rewardlab.rewards import score_batch

    out = score_batch(code_reward, ["    return a + b\n", "    return a - b\n"], [ADD, ADD], deadline=30.0)
    assert [r.score for r in out] == [1.0, 0.0]


def _humaneval() -> list[dict]:
    d = data_dir()
    path = d / "humaneval" / "HumanEval.jsonl.gz" if d else None
    if path is None or not path.is_file():
        pytest.skip("HumanEval data not found (set REWARDLAB_DATA_DIR)")
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_humaneval_canonical_pass_and_stubs_fail():
    problems = _humaneval()
    assert len(problems) == 164

    def grade(p: dict, completion: str):
        ref = {"tests": p["test"], "entry_point": p["entry_point"], "prompt": p["prompt"]}
        return code_reward(completion, ref, timeout=10.0)

    with ThreadPoolExecutor(4) as ex:
        canon = list(ex.map(lambda p: grade(p, p["canonical_solution"]), problems))
        stubs = list(ex.map(lambda p: grade(p, "    return None\n"), problems))
    bad = [(p["task_id"], r.info) for p, r in zip(problems, canon) if r.score != 1.0]
    assert not bad, bad[:3]
    faked = [p["task_id"] for p, r in zip(problems, stubs) if r.score != 0.0]
    assert not faked
