"""CodeContests / TACO / APPS / LiveCodeBench rows -> ``--task`` rows (rewardlab.rewards.code_rows).

Hand-written records in each dataset's own field layout (a few tests each); every converted row
is graded by ``code_reward``: a right answer scores 1, a wrong one 0.

    .venv/bin/python -m pytest -q tests/test_code_rows.py
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import pytest

from rewardlab.rewards import code_reward
from rewardlab.rewards.code_rows import (UnsupportedRow, codecontests_row, convert_file, decode_lcb_tests,
                                         livecodebench_row, main, taco_row)
from rewardlab.sandbox.languages import available
from rewardlab.tasks import load_task

CC = {"name": "1000_A. Sum", "description": "Print a + b.",
      "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
      "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
      "generated_tests": {"input": ["2000000000 2000000000\n"], "output": ["4000000000\n"]},
      "time_limit": {"seconds": 2, "nanos": 500000000}, "solutions": {"language": [2], "solution": ["..."]}}
TACO_STDIO = {"question": "Print the sum of the numbers on the line.", "time_limit": "1 second",
              "input_output": json.dumps({"inputs": ["1 2 3\n", ["4", "5"]], "outputs": ["6\n", ["9"]]})}
TACO_FN = {"question": "Return the doubled list and its length.", "starter_code": "def double(xs):\n\t",
           "input_output": json.dumps({"fn_name": "double", "inputs": [[[1, 2]], [[]]],
                                       "outputs": [[[2, 4], 2], [[[], 0]]]})}  # 2nd: APPS wraps the value once
TACO_LEETCODE = {"question": "Add two numbers.", "starter_code": "class Solution:\n    def add(self, a, b):\n        ",
                 "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [-1, 1]], "outputs": [3, 0]})}


def _lcb_compress(tests: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


LCB_STDIN = {"question_id": "abc300_a", "question_content": "Print N*2.", "platform": "atcoder", "starter_code": "",
             "public_test_cases": json.dumps([{"input": "3\n", "output": "6\n", "testtype": "stdin"}]),
             "private_test_cases": _lcb_compress([{"input": "50\n", "output": "100\n", "testtype": "stdin"}]),
             "metadata": "{}"}
LCB_FUNC = {"question_id": "3000", "question_content": "Return the largest element.", "platform": "leetcode",
            "starter_code": "class Solution:\n    def biggest(self, nums: List[int]) -> int:\n        ",
            "public_test_cases": json.dumps([{"input": "[1, 5, 2]", "output": "5", "testtype": "functional"}]),
            "private_test_cases": _lcb_compress([{"input": "[-3]", "output": "-3", "testtype": "functional"}]),
            "metadata": json.dumps({"func_name": "biggest"})}

PY_SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def test_codecontests_fields_map_onto_cases_time_limit_and_tokens():
    row = codecontests_row(CC)
    ref = row["reference"]
    assert row["id"] == "1000_A. Sum" and row["reward"] == "code" and row["prompt"].startswith("Print a + b.")
    # public, private, generated
    assert [c["stdin"] for c in ref["cases"]] == ["1 2\n", "5 5\n", "2000000000 2000000000\n"]
    assert ref["time_limit"] == 2.5 and ref["compare"] == "tokens" and "language" not in ref
    assert codecontests_row(CC, language="cpp", max_tests=1)["reference"] | {"cases": None} == \
        {"cases": None, "time_limit": 2.5, "compare": "tokens", "language": "cpp"}
    assert code_reward(PY_SUM, ref).score == 1.0
    assert code_reward("```python\nprint(3)\n```", ref).score == 0.0


@pytest.mark.skipif(available()["c"] is not None, reason=f"c unavailable here: {available()['c']}")
def test_codecontests_row_in_c_catches_32_bit_overflow():
    ref = codecontests_row(CC, language="c")["reference"]
    ok = "```c\n#include <stdio.h>\nint main(){long long a,b;scanf(\"%lld %lld\",&a,&b);printf(\"%lld\\n\",a+b);}\n```"
    r = code_reward(ok.replace("long long", "int").replace("%lld", "%d"), ref)
    assert code_reward(ok, ref).score == 1.0 and r.score == 0.0 and r.info["failed_test"] == 2


def test_taco_stdio_joins_line_lists_and_parses_time_limit():
    ref = taco_row(TACO_STDIO)["reference"]
    assert ref["cases"] == [{"stdin": "1 2 3\n", "stdout": "6\n"}, {"stdin": "4\n5\n", "stdout": "9\n"}]
    assert ref["time_limit"] == 1.0
    assert code_reward("```python\nimport sys\nprint(sum(map(int, sys.stdin.read().split())))\n```", ref).score == 1.0
    assert code_reward("```python\nprint(sum(map(int, input().split())))\n```", ref).score == 0.0  # reads one line


def test_taco_function_call_rows_follow_apps_output_rule():
    row = taco_row(TACO_FN)
    ref = row["reference"]
    assert ref["entry_point"] == "double" and "suffix" not in ref and "def double(xs):" in row["prompt"]
    good = "```python\ndef double(xs):\n    return [2 * x for x in xs], len(xs)\n```"  # a tuple counts as a list
    assert code_reward(good, ref).score == 1.0
    r = code_reward("```python\ndef double(xs):\n    return [2 * x for x in xs], 0\n```", ref, partial=True)
    assert r.score == 0.5 and (r.info["passed"], r.info["total"]) == (1, 2)
    with pytest.raises(UnsupportedRow, match="Python only"):
        taco_row(TACO_FN, language="cpp")


def test_leetcode_class_solution_gets_a_top_level_entry_point():
    ref = taco_row(TACO_LEETCODE)["reference"]
    assert ref["suffix"].startswith("def add(*args, **kwargs):")
    sol = "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```"
    assert code_reward(sol, ref).score == 1.0
    assert code_reward(sol.replace("a + b", "a - b"), ref).score == 0.0


def test_livecodebench_decodes_compressed_private_tests():
    assert decode_lcb_tests(LCB_STDIN["private_test_cases"]) == [{"input": "50\n", "output": "100\n",
                                                                  "testtype": "stdin"}]
    evil = base64.b64encode(zlib.compress(pickle.dumps(pickle.Pickler))).decode()  # a class: never imported
    with pytest.raises(UnsupportedRow, match="refusing"):
        decode_lcb_tests(evil)
    ref = livecodebench_row(LCB_STDIN)["reference"]
    assert [c["stdout"] for c in ref["cases"]] == ["6\n", "100\n"] and ref["time_limit"] == 6.0
    assert code_reward("```python\nprint(2 * int(input()))\n```", ref).score == 1.0
    assert code_reward("```python\nprint(int(input()) + 3)\n```", ref).score == 0.0  # passes 3 -> 6 only


def test_livecodebench_functional_rows_with_typing_imports():
    ref = livecodebench_row(LCB_FUNC)["reference"]
    assert ref["entry_point"] == "biggest" and "from typing import *" in ref["prompt"]
    sol = "```python\nclass Solution:\n    def biggest(self, nums: List[int]) -> int:\n        return max(nums)\n```"
    assert code_reward(sol, ref).score == 1.0
    assert code_reward(sol.replace("max(nums)", "nums[0]"), ref).score == 0.0  # [1, 5, 2] -> 1
    mixed = dict(LCB_STDIN, private_test_cases=LCB_FUNC["private_test_cases"])
    with pytest.raises(UnsupportedRow, match="test types"):
        livecodebench_row(mixed)


def test_converted_file_loads_as_a_code_task(tmp_path, capsys):
    src = tmp_path / "taco.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in (TACO_STDIO, TACO_FN, {"question": "x", "input_output": "{}"})))
    dst = tmp_path / "rows.jsonl"
    assert convert_file("taco", src, dst) == (2, {"no tests": 1})
    rows = load_task(str(dst))
    assert [r.meta["reward"] for r in rows] == ["code", "code"] and rows[0].reference["cases"][0]["stdout"] == "6\n"
    assert main(["taco", str(src), str(dst), "--max-tests", "1"]) == 0
    assert "2 rows written" in capsys.readouterr().out
    assert len(json.loads(dst.read_text().splitlines()[0])["reference"]["cases"]) == 1
