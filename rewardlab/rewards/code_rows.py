"""Rows of public code datasets as ``--task FILE.jsonl`` rows for the code reward.

    from rewardlab.rewards.code_rows import codecontests_row, taco_row, livecodebench_row
    row = taco_row(rec)     # {"id", "prompt", "reference": {...}, "reward": "code"}
    python -m rewardlab.rewards.code_rows taco IN.jsonl OUT.jsonl [--language cpp] [--max-tests 50]

A row of the ``--task`` format is ``{"id", "prompt", "reference", "reward": "code"}``; the
reference is what :func:`rewardlab.rewards.code.code_reward` grades against:

* stdin/stdout problems: ``{"cases": [{"stdin", "stdout"}, ...], "time_limit", "compare",
  "language"?}``, in any sandbox language;
* function-call problems (Python): ``{"tests": "def check(candidate): ...", "entry_point",
  "prompt"?, "suffix"?}``; one ``assert`` per test, so ``partial=True`` counts them.

How each dataset maps (the field names are the datasets' own):

* **CodeContests** (``deepmind/code_contests``): ``cases`` = ``public_tests``, then
  ``private_tests``, then ``generated_tests`` (``input[i]`` / ``output[i]``); ``time_limit`` =
  ``time_limit.seconds + nanos / 1e9`` (none given: 2 s); ``compare: "tokens"`` (CodeContests ships
  no checkers; problems with several right answers need one of yours); the prompt is
  ``description``. Its solutions' ``language`` enum (1 python2, 2 cpp, 3 python3, 4 java) names
  the language of a *solution*, not of the problem: pass ``language=`` for the one you train.
* **TACO / APPS** (``BAAI/TACO``, ``codeparrot/apps``): ``input_output`` (a JSON string)
  ``inputs``/``outputs`` -> ``cases`` (a list of lines is joined by newlines); ``time_limit``
  from the ``"2 seconds"``-style field (else 4 s, APPS's); ``compare: "tokens"``. Rows with
  ``fn_name`` are function calls: each ``inputs[i]`` is the argument list; the return value must
  equal ``outputs[i]`` or, when that is a one-element list, its element (APPS's own rule; tuples
  count as lists). A ``class Solution`` starter (LeetCode) gets a ``suffix`` that makes
  ``fn_name`` a top-level function calling ``Solution().fn_name``.
* **LiveCodeBench** (``livecodebench/code_generation_lite``): ``public_test_cases`` then
  ``private_test_cases`` (JSON strings; the private ones are often base64 + zlib + a pickled JSON
  string, decoded here with an unpickler that accepts no classes). ``testtype: "stdin"`` ->
  ``cases`` (``compare: "tokens"``); ``"functional"`` (LeetCode) -> function calls on
  ``metadata.func_name``: each input line is one JSON argument, the output one JSON value, with the
  ``Solution`` suffix and ``from typing import *`` etc. as the prompt (LiveCodeBench's own imports).

A row a converter cannot express raises :class:`UnsupportedRow` with the reason; the command line
counts and skips those.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import pickle
import re
import sys
import zlib
from pathlib import Path
from typing import Any, Callable

_STDIO_INSTRUCTION = ("Write a complete program{lang} that reads the input from stdin and writes the answer to "
                      "stdout, in one fenced code block.")
_FUNC_INSTRUCTION = "Write the solution in Python 3 in one fenced code block, starting from this code:\n\n{starter}"
_LCB_IMPORTS = ("from typing import *\nfrom collections import *\nfrom functools import *\nfrom itertools import *\n"
                "from heapq import *\nfrom bisect import *\nimport math\nimport string\nimport re\n")
_SAME = ("def _same(got, want):\n"
         "    got = list(got) if isinstance(got, tuple) else got\n"
         "    return got == want or (isinstance(want, list) and len(want) == 1 and got == want[0])\n")


class UnsupportedRow(ValueError):
    """The row cannot be expressed in the code reward's format (the message says why)."""


def _text(v: Any) -> str:
    """A test's input or output: a string, or a list of lines joined by newlines."""
    if isinstance(v, list):
        return "\n".join(str(x) for x in v) + ("\n" if v else "")
    return "" if v is None else str(v)


def _json_field(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # a pickled str needs none; anything else is refused
        raise pickle.UnpicklingError(f"refusing {module}.{name} in test data")


def decode_lcb_tests(v: Any) -> list[dict]:
    """LiveCodeBench test cases: a JSON string, a list, or base64(zlib(pickle(JSON string)))."""
    if isinstance(v, list):
        return v
    if not v:
        return []
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        pass
    try:
        raw = _NoClasses(io.BytesIO(zlib.decompress(base64.b64decode(v)))).load()
    except Exception as e:  # noqa: BLE001 - any decoding failure is one reason
        raise UnsupportedRow(f"test cases are neither JSON nor LiveCodeBench's compressed form: {e}") from None
    return json.loads(raw) if isinstance(raw, (str, bytes)) else raw


def _stdio_row(rid: str, statement: str, cases: list[dict], time_limit: float, language: str | None,
               max_tests: int | None) -> dict:
    if not cases:
        raise UnsupportedRow("no tests")
    ref: dict[str, Any] = {"cases": cases[:max_tests] if max_tests else cases, "time_limit": time_limit,
                           "compare": "tokens"}
    if language:
        ref["language"] = language
    lang = f" in {language}" if language else ""
    return {"id": rid, "prompt": f"{statement.strip()}\n\n{_STDIO_INSTRUCTION.format(lang=lang)}",
            "reference": ref, "reward": "code"}


def _function_row(rid: str, statement: str, starter: str, fn: str, calls: list[tuple[list, Any]],
                  prompt: str | None, max_tests: int | None) -> dict:
    if not calls:
        raise UnsupportedRow("no tests")
    if not re.fullmatch(r"[A-Za-z_]\w*", fn or ""):
        raise UnsupportedRow(f"bad function name {fn!r}")
    calls = calls[:max_tests] if max_tests else calls
    lines = [f"    assert _same(candidate(*json.loads({json.dumps(a)!r})), json.loads({json.dumps(w)!r}))"
             for a, w in calls]
    ref: dict[str, Any] = {"tests": "import json\n\n" + _SAME + "\n\ndef check(candidate):\n" + "\n".join(lines) + "\n",
                           "entry_point": fn}
    if re.search(r"^class\s+Solution\b", starter or "", re.M):
        ref["suffix"] = f"def {fn}(*args, **kwargs):\n    return Solution().{fn}(*args, **kwargs)\n"
    if prompt:
        ref["prompt"] = prompt
    text = statement.strip() + "\n\n" + _FUNC_INSTRUCTION.format(starter=(starter or f"def {fn}(...):").rstrip())
    return {"id": rid, "prompt": text, "reference": ref, "reward": "code"}


def codecontests_row(rec: dict, *, language: str | None = None, max_tests: int | None = None) -> dict:
    """A ``deepmind/code_contests`` record as a stdin/stdout row (see the module docstring)."""
    cases = []
    for key in ("public_tests", "private_tests", "generated_tests"):
        t = rec.get(key) or {}
        cases += [{"stdin": _text(i), "stdout": _text(o)} for i, o in zip(t.get("input") or [], t.get("output") or [])]
    tl = rec.get("time_limit") or {}
    secs = float(tl.get("seconds") or 0) + float(tl.get("nanos") or 0) / 1e9 if isinstance(tl, dict) else float(tl)
    return _stdio_row(str(rec.get("name") or rec.get("id")), rec.get("description") or "", cases, secs or 2.0,
                      language, max_tests)


def _seconds(v: Any, default: float) -> float:
    m = re.search(r"\d+(?:\.\d+)?", str(v or ""))
    return float(m.group()) if m else default


def taco_row(rec: dict, *, language: str | None = None, max_tests: int | None = None, index: int = 0) -> dict:
    """A ``BAAI/TACO`` or ``codeparrot/apps`` record (see the module docstring)."""
    io_ = _json_field(rec.get("input_output") or "{}") or {}
    ins, outs = io_.get("inputs") or [], io_.get("outputs") or []
    if len(ins) != len(outs):
        raise UnsupportedRow(f"{len(ins)} inputs but {len(outs)} outputs")
    rid = str(rec.get("name") or rec.get("problem_id") or rec.get("id") or f"taco/{index}")
    statement = rec.get("question") or ""
    if io_.get("fn_name"):
        if language and language.lower() not in ("python", "python3", "py"):
            raise UnsupportedRow("function-call problems are graded in Python only")
        calls = [(a if isinstance(a, list) else [a], w) for a, w in zip(ins, outs)]
        return _function_row(rid, statement, rec.get("starter_code") or "", io_["fn_name"], calls, None, max_tests)
    cases = [{"stdin": _text(i), "stdout": _text(o)} for i, o in zip(ins, outs)]
    return _stdio_row(rid, statement, cases, _seconds(rec.get("time_limit"), 4.0), language, max_tests)


def livecodebench_row(rec: dict, *, language: str | None = None, max_tests: int | None = None) -> dict:
    """A ``livecodebench/code_generation_lite`` record (see the module docstring)."""
    tests = decode_lcb_tests(rec.get("public_test_cases")) + decode_lcb_tests(rec.get("private_test_cases"))
    kinds = {t.get("testtype") for t in tests}
    rid = str(rec.get("question_id") or rec.get("id"))
    statement = rec.get("question_content") or ""
    if kinds == {"stdin"}:
        cases = [{"stdin": _text(t["input"]), "stdout": _text(t["output"])} for t in tests]
        return _stdio_row(rid, statement, cases, 6.0, language, max_tests)  # LiveCodeBench's own default: 6 s
    if kinds == {"functional"}:
        if language and language.lower() not in ("python", "python3", "py"):
            raise UnsupportedRow("function-call problems are graded in Python only")
        fn = (_json_field(rec.get("metadata") or "{}") or {}).get("func_name")
        calls = [([json.loads(line) for line in t["input"].split("\n") if line.strip()], json.loads(t["output"]))
                 for t in tests]
        return _function_row(rid, statement, rec.get("starter_code") or "", fn, calls, _LCB_IMPORTS, max_tests)
    raise UnsupportedRow(f"test types {sorted(map(str, kinds))} (need all 'stdin' or all 'functional')")


CONVERTERS: dict[str, Callable[..., dict]] = {"codecontests": codecontests_row, "taco": taco_row, "apps": taco_row,
                                              "livecodebench": livecodebench_row}


def convert_file(fmt: str, src: str | Path, dst: str | Path, *, language: str | None = None,
                 max_tests: int | None = None) -> tuple[int, dict[str, int]]:
    """Convert a JSONL file of ``fmt`` records; returns ``(rows written, {reason: rows skipped})``."""
    from rewardlab.jsonl import read_jsonl

    conv = CONVERTERS[fmt]
    written, skipped = 0, {}
    with open(dst, "w") as out:
        for rec in read_jsonl(Path(src)):
            try:
                row = conv(rec, language=language, max_tests=max_tests)
            except UnsupportedRow as e:
                skipped[str(e)] = skipped.get(str(e), 0) + 1
                continue
            out.write(json.dumps(row) + "\n")
            written += 1
    return written, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Convert CodeContests / TACO / APPS / LiveCodeBench JSONL rows "
                                             "into rewardlab --task rows for the code reward.")
    ap.add_argument("format", choices=sorted(CONVERTERS))
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--language", help="the language stdin/stdout rows are to be answered in (default: any; Python "
                                       "when the answer's fence names none)")
    ap.add_argument("--max-tests", type=int, help="keep the first N tests of each problem")
    a = ap.parse_args(argv)
    n, skipped = convert_file(a.format, a.src, a.dst, language=a.language, max_tests=a.max_tests)
    print(f"{n} rows written to {a.dst}" + "".join(f"; skipped {k}: {why}" for why, k in skipped.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
