"""Verdict tables of the stdio comparison modes and of checker programs, plus test-suite options
(partial credit, early exit, per-test and total time limits, the first failing test named).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_code_checkers.py

Each row says what it guards. The mode tables call :func:`compare_output` directly (the same
function ``code_reward`` uses on the captured stdout); the checker table and the suite tests go
through ``code_reward`` and the sandbox.
"""

from __future__ import annotations

import pytest

from rewardlab.rewards import code_reward
from rewardlab.rewards.code_suite import compare_output
from rewardlab.sandbox.languages import available

AVAIL = available()


def row(actual, expected, ok, **kw):
    return pytest.param(actual, expected, ok, kw)


# ------------------------------------------------------------------------------ exact
EXACT = [
    row("5\n", "5\n", True),            # identical text
    row("5", "5\n", False),             # a missing final newline is a difference in exact mode
    row("5 \n", "5\n", False),          # so is a trailing space
    row("5\r\n", "5\n", False),         # and a CRLF line end
    row("", "", True),                  # empty output for an empty answer
]
# ------------------------------------------------------------------------------ whitespace (default)
WHITESPACE = [
    row("5\n", "5\n", True),            # identical
    row("5", "5\n", True),              # missing final newline accepted
    row("5  \t\n\n\n", "5\n", True),    # trailing blanks of a line and empty lines at the end accepted
    row("1\r\n2\r\n", "1\n2\n", True),  # CRLF line ends accepted
    row(" 5\n", "5\n", False),          # a leading space is not
    row("1  2\n", "1 2\n", False),      # nor a doubled inner space
    row("1\n2\n", "1 2\n", False),      # nor the tokens on other lines
    row("\n5\n", "5\n", False),         # nor a leading empty line
    row("5\nextra\n", "5\n", False),    # an extra line fails
    row("55\n", "5\n", False),          # a changed token fails
]
# ------------------------------------------------------------------------------ tokens
TOKENS = [
    row("1  2\n\n3", "1 2 3\n", True),  # any layout of the same tokens in the same order
    row("1 2 3", "1 2 3 4", False),     # a missing token fails
    row("1 3 2", "1 2 3", False),       # order matters
    row("1.0", "1", False),             # tokens are text: 1.0 is not 1 (use float mode)
]
# ------------------------------------------------------------------------------ float
FLOAT = [
    row("0.3333334\n", "0.333333333\n", True),              # within abs 1e-6
    row("0.333\n", "0.333333333\n", False),                 # 3.3e-4 off: out of tolerance
    row("1000000.5\n", "1000000.0\n", True, rel_tol=1e-6),  # 0.5 off, but within rel 1e-6 of 1e6
    row("1000000.5\n", "1000000.0\n", False, rel_tol=1e-9),  # ... not within rel 1e-9 (nor abs 1e-6)
    row("1.5 YES\n", "1.5000001 YES\n", True),              # non-numeric tokens must be equal...
    row("1.5 yes\n", "1.5 YES\n", False),                   # ... exactly
    row("1e-7\n", "0\n", True),                             # exponent notation is a number
    row("nan\n", "0\n", False),                             # nan is never close to a number
    row("nan\n", "nan\n", True),                            # nan answers nan
    row("inf\n", "1e308\n", False),                         # inf is not a huge finite number
    row("1_0\n", "10\n", False),                            # Python's 1_0 syntax is not a number here
    row("0x10\n", "16\n", False),                           # nor hex
    row("1.5 2.5\n", "1.5\n", False),                       # token counts must match
    row("-0.0000004\n", "0\n", True),                       # sign does not matter within tolerance
    row("2\n", "1\n", True, abs_tol=1.0),                   # a custom absolute tolerance
    # issue 41: two integer tokens are compared exactly (their difference within abs_tol; rel_tol does not apply)
    row("1000001\n", "1000000\n", False),                   # off by one above 10^6 (rel_tol paid it before)
    row("123456789\n", "123456790\n", False),               # ... and far above
    row("9007199254740993\n", "9007199254740992\n", False),  # beyond a double's precision
    row("1000000 -7\n", "1000000 -7\n", True),              # equal integers
    row("+5 -0\n", "5 0\n", True),                          # as integers, not as text
    row("1000000.0\n", "1000001\n", True),                  # a decimal token is a float: tolerance applies
]
# ------------------------------------------------------------------------------ unordered
UNORDERED_TOKENS = [
    row("3 1 2\n", "1 2 3\n", True),    # any order, any layout
    row("1 1 2\n", "1 2 2\n", False),   # multisets: counts matter
    row("1 2\n", "1 2 3\n", False),     # a missing token fails
]
UNORDERED_LINES = [
    row("b c\na\n", "a\nb c\n", True),  # lines in any order
    row("c b\na\n", "a\nb c\n", False),  # but each line's text as is
    row("a\n\nb\n", "b\na\n", True),    # empty lines ignored
    row("a\na\n", "a\n", False),        # duplicates count
]


MODES = {"exact": EXACT, "whitespace": WHITESPACE, "tokens": TOKENS, "float": FLOAT,
         "unordered_tokens": UNORDERED_TOKENS, "unordered_lines": UNORDERED_LINES}


@pytest.mark.parametrize("mode,actual,expected,ok,kw",
                         [pytest.param(m, *r.values) for m, rows in MODES.items() for r in rows])
def test_comparison_mode_verdicts(mode, actual, expected, ok, kw):
    assert compare_output(actual, expected, mode, **kw)[0] is ok


def test_reasons_name_the_difference():
    assert compare_output("1\n3\n", "1\n2\n")[1] == "line 2: expected '2', got '3'"
    assert compare_output("1 2", "1 2 3", "tokens")[1] == "expected 3 tokens, got 2"
    assert "token 1" in compare_output("0.5", "0.7", "float")[1]
    assert "character 1" in compare_output("ab", "ac", "exact")[1]


def test_every_mode_through_the_reward():
    """The reference's ``compare`` field (or the keyword) reaches the comparison."""
    ref = {"cases": [{"stdin": "", "stdout": "0.3333333\n"}]}
    prog = "```python\nprint(round(1/3, 6))\n```"
    assert code_reward(prog, ref).score == 0.0                       # whitespace: 0.333333 != 0.3333333
    assert code_reward(prog, dict(ref, compare="float")).score == 1.0
    assert code_reward(prog, ref, compare="float").score == 1.0      # the keyword works too
    r = code_reward(prog, dict(ref, compare="float", abs_tol=1e-9, rel_tol=1e-9))
    assert (r.score, r.info["failed_test"]) == (0.0, 0) and "abs_tol 1e-09" in r.info["error"]
    lines = {"cases": [{"stdin": "", "stdout": "a\nb\n"}], "compare": "unordered_lines"}
    assert code_reward("```python\nprint('b'); print('a')\n```", lines).score == 1.0
    assert code_reward("```python\nprint('b')\n```", dict(lines, compare="nonsense")).info["status"] == "bad_reference"


# ------------------------------------------------------------------------------ checkers
# A testlib-style checker: argv = input, the solution's output, the expected answer; exit 0
# accepts, 1 rejects (wrong answer), 2 rejects (presentation error), anything else is a checker
# failure. This one accepts any pair of positive integers with the product given in the input.
PY_CHECKER = {"language": "python", "code": (
    "import sys\n"
    "n = int(open(sys.argv[1]).read())\n"
    "out = open(sys.argv[2]).read().split()\n"
    "if len(out) != 2: print('need two numbers'); sys.exit(2)\n"
    "try:\n    a, b = map(int, out)\nexcept ValueError:\n    print('not integers'); sys.exit(2)\n"
    "if a > 0 and b > 0 and a * b == n: print('ok'); sys.exit(0)\n"
    "print(f'{a}*{b} != {n}'); sys.exit(1)\n")}
CPP_CHECKER = {"language": "cpp", "code": (
    "#include <cstdio>\n#include <fstream>\n"
    "int main(int c, char** v) { std::ifstream in(v[1]), out(v[2]); long n, a = 0, b = 0;\n"
    "  in >> n; if (!(out >> a >> b)) { std::fprintf(stderr, \"need two numbers\\n\"); return 2; }\n"
    "  if (a > 0 && b > 0 && a * b == n) return 0; std::fprintf(stderr, \"%ld*%ld != %ld\\n\", a, b, n); return 1; }"
    "\n")}
FACTOR = {"cases": [{"stdin": "12\n", "stdout": "3 4\n"}, {"stdin": "7\n", "stdout": "1 7\n"}]}
GOOD = "```python\nn = int(input())\nprint(1, n)\n```"             # another valid answer than the expected one
BAD = "```python\nn = int(input())\nprint(2, n // 2)\n```"          # wrong for odd n (test 1)
JUNK = "```python\nprint('hello')\n```"                            # presentation error
BROKEN_CHECKER = {"language": "python", "code": "import sys\nsys.exit(3)\n"}     # neither accepts nor rejects
CRASHING_CHECKER = {"language": "python", "code": "raise RuntimeError('bug in the checker')\n"}
CHECKER_ROWS = [
    # the Python checker accepts an answer that differs from the expected text
    pytest.param(GOOD, dict(FACTOR, checker=PY_CHECKER), 1.0, "pass", None, id="py_checker_accepts_other_answer"),
    # ... rejects a wrong one (exit 1) and says why, naming the failing test
    pytest.param(BAD, dict(FACTOR, checker=PY_CHECKER), 0.0, "fail", "test 1: fail: checker: wrong answer: 2*3 != 7",
                 id="py_checker_wrong_answer"),
    # ... exit 2 is a presentation error: a rejection too
    pytest.param(JUNK, dict(FACTOR, checker=PY_CHECKER), 0.0, "fail", "presentation error",
                 id="py_checker_presentation"),
    # a compiled C++ checker, compiled once in the sandbox and cached
    pytest.param(GOOD, dict(FACTOR, checker=CPP_CHECKER), 1.0, "pass", None, id="cpp_checker_accepts"),
    pytest.param(BAD, dict(FACTOR, checker=CPP_CHECKER), 0.0, "fail", "2*3 != 7", id="cpp_checker_rejects"),
    # a checker that exits 3 is broken: no score (None), status checker_error - never a pass
    pytest.param(GOOD, dict(FACTOR, checker=BROKEN_CHECKER), None, "checker_error", "checker", id="checker_exit_3"),
    # a checker that crashes: the same
    pytest.param(GOOD, dict(FACTOR, checker=CRASHING_CHECKER), None, "checker_error", "RuntimeError",
                 id="checker_crashes"),
    # the solution printing what a checker would say ("ok", exit 0) fakes nothing: the checker decides
    pytest.param("```python\nprint('ok')\nimport sys; sys.exit(0)\n```", dict(FACTOR, checker=PY_CHECKER), 0.0, "fail",
                 "presentation error", id="solution_prints_ok"),
    # the solution cannot read the expected answer: the checker runs only after the solution's job ended
    pytest.param("```python\nimport os\nprint(open('answer.txt').read() if os.path.exists('answer.txt') else 'x')\n```",
                 dict(FACTOR, checker=PY_CHECKER), 0.0, "fail", "presentation error", id="solution_reads_answer_file"),
]


@pytest.mark.parametrize("completion,reference,score,sandbox_status,error_has", CHECKER_ROWS)
def test_checker_verdicts(completion, reference, score, sandbox_status, error_has):
    if reference["checker"]["language"] == "cpp" and AVAIL["cpp"]:
        pytest.skip(AVAIL["cpp"])
    r = code_reward(completion, reference)
    assert (r.score, r.info["sandbox_status"]) == (score, sandbox_status), r.info
    if error_has:
        assert error_has in r.info["error"], r.info


def test_checker_as_python_callable():
    """An in-process callable checker (input, expected, actual) -> bool | (bool, reason)."""
    def check(inp, expected, actual):
        a, b = map(int, actual.split())
        return (a * b == int(inp), "product differs")

    assert code_reward(GOOD, FACTOR, checker=check).score == 1.0
    r = code_reward(BAD, FACTOR, checker=check)
    assert r.score == 0.0 and r.info["error"] == "test 1: fail: product differs"


# ------------------------------------------------------------------------------ suites
SUITE = {"cases": [{"stdin": f"{i}\n", "stdout": f"{i * i}\n"} for i in range(6)]}
# right for i < 3 only
HALF = "```python\nn = int(input())\nprint(n * n if n < 3 else 0)\n```"


def test_partial_credit_is_the_share_passed():
    r = code_reward(HALF, SUITE, partial=True)
    assert (r.score, r.info["passed"], r.info["total"], r.info["failed_test"]) == (0.5, 3, 6, 3)
    assert [t["status"] for t in r.info["tests"]] == ["pass"] * 3 + ["fail"] * 3


def test_all_or_nothing_is_the_default_and_early_exit_stops_at_the_first_failure():
    r = code_reward(HALF, SUITE)
    assert (r.score, r.info["passed"], len(r.info["tests"])) == (0.0, 3, 4)   # tests 0-3 ran, 3 failed
    assert r.info["error"] == "test 3: fail: line 1: expected '9', got '0'"
    r = code_reward(HALF, SUITE, early_exit=False)                             # eval: every test runs
    assert (r.score, r.info["passed"], len(r.info["tests"])) == (0.0, 3, 6)
    r = code_reward(HALF, dict(SUITE, early_exit=False))                       # ... or the reference says so
    assert (r.score, r.info["passed"], len(r.info["tests"])) == (0.0, 3, 6)


def test_early_exit_through_score_batch_metas():
    """A batch scorer's per-row meta (how ``rewardlab eval`` and training call rewards) chooses it too:
    the default stops at the first failure, ``{"early_exit": False}`` runs every test."""
    from rewardlab.rewards.pool import score_batch

    out = score_batch(code_reward, [HALF, HALF], [SUITE, SUITE], [{"id": "a"}, {"id": "b", "early_exit": False}],
                      deadline=60.0)
    assert [(o.score, len(o.info["tests"])) for o in out] == [(0.0, 4), (0.0, 6)]


def test_per_test_time_limit_and_total_budget():
    slow = "```python\nimport time\nn = int(input())\ntime.sleep(0.6)\nprint(n * n)\n```"
    # each test needs 0.6 s: a 0.3 s limit fails test 0 with a timeout that says which limit
    r = code_reward(slow, SUITE, timeout=0.3)
    assert (r.score, r.info["sandbox_status"], r.info["failed_test"]) == (0.0, "timeout", 0)
    assert "time limit of 0.3s" in r.info["error"]
    # a per-case timeout overrides the problem's
    cases = [dict(c, timeout=3) for c in SUITE["cases"][:2]]
    assert code_reward(slow, {"cases": cases}, timeout=0.3).score == 1.0
    # a total budget of 1.5 s for six 0.6 s tests: the budget runs out part way (eval: all run)
    r = code_reward(slow, dict(SUITE, total_time=1.5), timeout=3, early_exit=False, partial=True)
    assert r.info["sandbox_status"] == "timeout" and 1 <= r.info["passed"] <= 2, r.info
    assert any("total time budget" in (t.get("reason") or "") for t in r.info["tests"]), r.info["tests"]


def test_runtime_error_names_the_test():
    prog = "```python\nn = int(input())\nprint(10 // (n - 2))\n```"
    ref = {"cases": [{"stdin": "3\n", "stdout": "10\n"}, {"stdin": "2\n", "stdout": "0\n"}]}
    r = code_reward(prog, ref)
    assert (r.score, r.info["sandbox_status"], r.info["failed_test"]) == (0.0, "error", 1)
    assert "ZeroDivisionError" in r.info["error"]


@pytest.mark.skipif(AVAIL["c"] is not None, reason=f"C unavailable: {AVAIL['c']}")
def test_compiled_runtime_statuses():
    ref = {"cases": [{"stdin": "", "stdout": "1\n"}]}
    seg = "```c\nint main(void){int *p = 0; return *p;}\n```"
    assert code_reward(seg, ref).info["sandbox_status"] == "crash"
    ex = "```c\n#include <stdio.h>\nint main(void){puts(\"1\"); return 3;}\n```"
    r = code_reward(ex, ref)
    assert (r.score, r.info["sandbox_status"]) == (0.0, "error") and "status 3" in r.info["error"]
