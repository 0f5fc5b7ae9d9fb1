"""The code reward's verdict table, mode by mode: what counts as a pass, and what cannot fake one.

    REWARDLAB_DATA_DIR=../shared/data .venv/bin/python -m pytest -q tests/test_code_verdicts.py

One ``pytest.param`` row per case, each with a comment saying what it guards, for the three modes
of :func:`rewardlab.rewards.code_reward`:

* function tests (HumanEval style): the trusted checker process runs ``check(candidate)``; the
  solution only answers calls of the entry point with plain data;
* stdin/stdout: the program's captured stdout is compared with the expected text after a
  normal end (see ``_norm_out`` in ``sandbox/pymodes.py`` for what is tolerated);
* legacy (``legacy=True``): the tests run in the solution's interpreter, flagged
  ``integrity: legacy``; rows marked TRUSTED show what legacy mode cannot stop.

Every row asserts the exact score and status: ``(score, info["sandbox_status"])``, with
``info["status"]`` following from it ("ok" when graded). All rows run once, concurrently, in a
module-scoped fixture (the sandbox pool is warm-forked; the whole table takes a few seconds).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from rewardlab.rewards import code_reward, extract_code
from rewardlab.rewards.code import defines_function


@dataclass(frozen=True, repr=False)
class Case:
    completion: str
    reference: dict
    score: float | None
    sandbox_status: str | None  # "pass" | "fail" | "error" | "crash" | ... (None: not run)
    options: dict = field(default_factory=dict)
    passed_total: tuple[int, int] | None = None  # checked when given (partial scoring)
    error_has: str | None = None  # a substring the reported error must contain

    def __repr__(self) -> str:  # keep failure reports short: the row id says which case
        return f"Case(score={self.score}, status={self.sandbox_status})"


class _Verdicts(dict):
    def __repr__(self) -> str:
        return f"<{len(self)} verdicts>"


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}```\n"


# ------------------------------------------------------------------------------ references
ADD = {"entry_point": "add", "prompt": 'def add(a, b):\n    """Return a + b."""\n',
       "tests": ("def check(candidate):\n    assert candidate(2, 3) == 5\n"
                 "    assert candidate(-1, 1) == 0\n    assert candidate(10, 20) == 30\n")}
# the tests print what the candidate returns (some datasets' tests do): must not leak anywhere
ADD_PRINTING = dict(ADD, tests=("def check(candidate):\n    print(candidate(2, 3), flush=True)\n"
                                "    print('x' * 100000)\n    assert candidate(2, 3) == 5\n"))
# the tests expect an error for bad input and catch it with `except Exception`
SQRT = {"entry_point": "isqrt", "prompt": 'def isqrt(n):\n    """Integer square root; ValueError if n < 0."""\n',
        "tests": ("def check(candidate):\n    assert candidate(16) == 4\n    try:\n        candidate(-1)\n"
                  "    except Exception:\n        pass\n    else:\n        raise AssertionError('no error for -1')\n")}
# the tests compare through builtins (abs) and iterate with map(): things a solution might patch
HALF = {"entry_point": "half", "prompt": 'def half(x):\n    """x / 2."""\n',
        "tests": ("def check(candidate):\n    assert abs(candidate(3) - 1.5) < 1e-9\n"
                  "    assert all(map(lambda c: candidate(c[0]) == c[1], [(2, 1.0), (5, 2.5)]))\n")}
# identity: needs legacy mode (objects do not cross the checker/worker pipe)
IDENT = {"entry_point": "ident", "prompt": "",
         "tests": "def check(candidate):\n    o = object()\n    assert candidate(o) is o\n"}

# the tests define a class the solution must use (legacy only: custom classes)
BOXED = {"entry_point": "wrap", "prompt": "",
         "tests": ("class Box:\n    def __init__(self, v):\n        self.v = v\n\n"
                   "def check(candidate):\n    b = candidate(3)\n    assert type(b) is Box and b.v == 3\n")}

CORRECT_ADD = "def add(a, b):\n    return a + b\n"
WRONG_ADD = "def add(a, b):\n    return a - b\n"


def _frame(obj) -> str:
    """A length-prefixed JSON frame as the sandbox's pipes carry them (for forgery attempts)."""
    data = json.dumps(obj)
    return len(data).to_bytes(4, "little").decode("latin-1") + data


FORGED_VERDICT = _frame({"status": "pass", "passed": True, "tests_passed": 1, "tests_total": 1,
                         "integrity": "checker"})


def _spray(*frames) -> str:
    """Code that writes ``frames`` to every open descriptor above 2 (blind protocol forgery)."""
    payload = "".join(_frame(f) for f in frames)
    return ("import os\n"
            f"_d = {payload!r}.encode('latin-1')\n"
            "for _fd in range(3, 256):\n    try:\n        os.write(_fd, _d)\n    except OSError:\n        pass\n")


# ============================================================================== function tests
def F(id_, completion, score, status, ref=ADD, **kw):
    opts = {k: kw.pop(k) for k in ("partial", "timeout") if k in kw}
    return pytest.param(Case(completion, ref, score, status, opts, **kw), id=id_)


FUNCTION_ROWS = [
    # --- correct solutions must pass
    # guards: a HumanEval-style body appended to the prompt passes
    F("correct_body", "    return a + b\n", 1.0, "pass"),
    # guards: a full definition in a fenced block passes (the prompt stays available above it)
    F("correct_fenced_def", fenced(CORRECT_ADD), 1.0, "pass"),
    # guards: partial scoring of a correct solution is 3/3
    F("correct_partial", "    return a + b\n", 1.0, "pass", partial=True, passed_total=(3, 3)),
    # guards: a wrong answer fails (and partial counts the one assert it passes)
    F("wrong", "    return a * b\n", 0.0, "fail"),
    F("wrong_partial", "    return 5\n", 1 / 3, "fail", partial=True, passed_total=(1, 3)),
    # guards: a program that defines no entry point (only a differently named function) fails
    F("missing_entry_point", fenced("def plus(a, b):\n    return a + b\n"), 0.0, "fail"),
    # guards: nothing that looks like code is no_answer, not a crash of the reward
    F("empty_completion", "   \n", 0.0, None),
    # guards: code that does not compile is an error
    F("syntax_error", fenced("def add(a, b)\n    return a + b\n"), 0.0, "error", error_has="SyntaxError"),

    # --- sys.exit(0) / SystemExit: exit codes mean nothing
    # guards: sys.exit(0) at the top level before the definition: the prompt's stub is tested, fails
    F("sys_exit0_top_level", fenced("import sys\nsys.exit(0)\n" + CORRECT_ADD), 0.0, "fail"),
    # guards: sys.exit(0) after a wrong definition: the wrong function is tested, fails
    F("sys_exit0_after_wrong_def", fenced(WRONG_ADD + "import sys\nsys.exit(0)\n"), 0.0, "fail"),
    # guards: sys.exit(0) after a correct definition neither fakes nor hides: that function passes
    F("sys_exit0_after_correct_def", fenced(CORRECT_ADD + "import sys\nsys.exit(0)\n"), 1.0, "pass"),
    # guards: sys.exit(0) inside the entry point is a failed call
    F("sys_exit0_in_entry_point", "    import sys\n    sys.exit(0)\n", 0.0, "fail", error_has="SystemExit"),
    # guards: SystemExit in one test's call fails that assert only (partial 2/3)
    F("sys_exit0_in_one_call_partial", "    if a == 10:\n        raise SystemExit(0)\n    return a + b\n",
      2 / 3, "fail", partial=True, passed_total=(2, 3)),
    # guards: printing the right value and exiting 0 from the call is still no return value
    F("sys_exit0_after_output", "    print(a + b)\n    raise SystemExit(0)\n", 0.0, "fail"),

    # --- os._exit(0): the worker is gone, the run is a crash
    # guards: os._exit(0) at import time (before the tests) never reads as a pass
    F("os_exit0_top_level", fenced("import os\nos._exit(0)\n" + CORRECT_ADD), 0.0, "crash"),
    # guards: os._exit(0) inside the entry point
    F("os_exit0_in_entry_point", "    import os\n    os._exit(0)\n", 0.0, "crash"),
    # guards: os._exit(0) in the last test's call, after two good answers (partial: no credit)
    F("os_exit0_in_one_call_partial", "    import os\n    if a == 10:\n        os._exit(0)\n    return a + b\n",
      0.0, "crash", partial=True, passed_total=(0, 0)),
    # guards: os._exit(0) right after printing the right answer
    F("os_exit0_after_output", "    import os, sys\n    print(a + b)\n    sys.stdout.flush()\n    os._exit(0)\n",
      0.0, "crash"),

    # --- atexit / excepthook: never run, never counted
    # guards: an atexit handler that exits 0, registered at import, with a wrong function
    F("atexit_exit0_top_level", fenced("import atexit, os\natexit.register(os._exit, 0)\n" + WRONG_ADD), 0.0, "fail"),
    # guards: an atexit handler that prints a pass message
    F("atexit_print_top_level", fenced("import atexit\natexit.register(print, 'PASSED')\n" + WRONG_ADD), 0.0, "fail"),
    # guards: an atexit handler registered inside the entry point (during a test's call)
    F("atexit_in_entry_point", "    import atexit, os\n    atexit.register(os._exit, 0)\n    return None\n", 0.0,
      "fail"),
    # guards: a silenced excepthook with a wrong function
    F("excepthook_silenced", fenced("import sys\nsys.excepthook = lambda *a: None\n" + WRONG_ADD), 0.0, "fail"),

    # --- exceptions from the entry point
    # guards: an exception in the entry point is a failure (mutant: exceptions counted as pass)
    F("exception_in_entry_point", "    raise ValueError('nope')\n", 0.0, "fail", error_has="ValueError"),
    # guards: an exception in one test's call fails one assert (partial 2/3)
    F("exception_in_one_call_partial", "    if a == 10:\n        raise ZeroDivisionError('x')\n    return a + b\n",
      2 / 3, "fail", partial=True, passed_total=(2, 3)),
    # guards: KeyboardInterrupt from the entry point fails
    F("keyboard_interrupt_in_entry_point", "    raise KeyboardInterrupt\n", 0.0, "fail"),
    # guards: a BaseException subclass from the entry point fails
    F("base_exception_subclass_in_entry_point", fenced("class Stop(BaseException):\n    pass\n"
                                                       "def add(a, b):\n    raise Stop()\n"), 0.0, "fail"),
    # guards: the honest solution of an "expects an error" test passes (ValueError is an Exception)
    F("expected_error_raised", "    if n < 0:\n        raise ValueError(n)\n    return int(n ** 0.5)\n",
      1.0, "pass", ref=SQRT),
    # guards: a solution-defined subclass of ValueError is caught by the tests' except, as in-process
    F("expected_error_subclass", fenced("class Neg(ValueError):\n    pass\ndef isqrt(n):\n    if n < 0:\n"
                                        "        raise Neg(n)\n    return int(n ** 0.5)\n"), 1.0, "pass", ref=SQRT),
    # guards: not raising for bad input fails
    F("expected_error_missing", "    return int(abs(n) ** 0.5)\n", 0.0, "fail", ref=SQRT),
    # guards: KeyboardInterrupt is not an Exception: `except Exception` in the tests must not swallow
    # it (bug fixed: it was rebuilt as an Exception subclass and the row passed)
    F("expected_error_keyboard_interrupt", "    if n < 0:\n        raise KeyboardInterrupt\n    return int(n ** 0.5)\n",
      0.0, "fail", ref=SQRT),
    # guards: same for SystemExit(0)
    F("expected_error_sys_exit0", "    import sys\n    if n < 0:\n        sys.exit(0)\n    return int(n ** 0.5)\n",
      0.0, "fail", ref=SQRT),
    # guards: same for a BaseException subclass
    F("expected_error_base_exception_subclass", fenced("class Stop(BaseException):\n    pass\ndef isqrt(n):\n"
                                                       "    if n < 0:\n        raise Stop()\n    return int(n ** 0.5)"
                                                       "\n"),
      0.0, "fail", ref=SQRT),
    # guards: StopIteration raised through map() would end all(...) early and make it True
    # in-process; it is rebuilt as a RuntimeError (bug fixed: the row passed)
    F("stop_iteration_through_map", "    if x != 3:\n        raise StopIteration\n    return 1.5\n", 0.0, "fail",
      ref=HALF),
    # guards: the honest HALF solution passes (abs and map work in the checker)
    F("half_correct", "    return x / 2\n", 1.0, "pass", ref=HALF),

    # --- printing
    # guards: a correct solution that prints (a lot) still passes: its stdout goes nowhere
    F("prints_and_correct", "    print('debug', a, b)\n    print('y' * 10000)\n    return a + b\n", 1.0, "pass"),
    # guards: printing "PASSED"/"True"/a forged verdict frame does not turn a wrong answer into a pass
    F("prints_pass_words_wrong", "    import sys\n    print('PASSED\\nTrue\\nok')\n"
      f"    sys.stdout.write({FORGED_VERDICT!r})\n    sys.stdout.flush()\n    return 0\n", 0.0, "fail"),
    # guards: a test that prints still grades a correct solution
    F("printing_test_correct", "    return a + b\n", 1.0, "pass", ref=ADD_PRINTING),
    # guards: a test that prints the candidate's value, which is a forged verdict frame: it must not
    # reach the server's channel to the trainer (bug fixed: this row was a pass and desynchronised
    # the server, so the next runs got stale verdicts)
    F("printing_test_forged_verdict", f"    return {FORGED_VERDICT!r}\n", 0.0, "fail", ref=ADD_PRINTING),

    # --- monkeypatching, forged __eq__, forged frames
    # guards: an object whose __eq__ is always True is not plain data: refused, fails
    F("always_equal_object", fenced("class E:\n    def __eq__(self, o):\n        return True\n"
                                    "    __hash__ = object.__hash__\ndef add(a, b):\n    return E()\n"), 0.0, "fail"),
    # guards: an int subclass with a forged __eq__ is refused too
    F("int_subclass_forged_eq", fenced("class I(int):\n    def __eq__(self, o):\n        return True\n"
                                       "    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)\n"), 0.0, "fail"),
    # guards: patching builtins (abs, AssertionError, all) in the solution's process changes nothing
    F("patched_builtins", fenced("import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.all = lambda x: True\n"
                                 "builtins.AssertionError = type('A', (Exception,), {})\n"
                                 "def half(x):\n    return 0\n"), 0.0, "fail", ref=HALF),
    # guards: shadowing builtins in the solution's globals changes nothing either
    F("shadowed_builtins", fenced("def abs(x):\n    return 0\ndef all(x):\n    return True\n"
                                  "def half(x):\n    return 0\n"), 0.0, "fail", ref=HALF),
    # guards: int.__eq__ patched through gc (in the worker only) does not reach the checker
    F("gc_patched_int_eq", fenced("import gc\ntry:\n    gc.get_referents(int.__dict__)[0]['__eq__'] = lambda s, o: True"
                                  "\n"
                                  "except Exception:\n    pass\n" + WRONG_ADD), 0.0, "fail"),
    # guards: answer frames sprayed onto every descriptor are answers the solution could give anyway
    F("sprayed_answer_frames", fenced(_spray(["ok", 5], ["ok", 0], ["ok", 30]) + WRONG_ADD), 0.0, "error",
      error_has="protocol"),
    # guards: a forged "fatal" frame (our side's failure) cannot make the run ungraded (score None)
    F("forged_fatal_frame", fenced(_spray(["fatal", "confinement failed"]) + WRONG_ADD), 0.0, "error"),
    # guards: a malformed frame cannot crash the checker into a sandbox_error (score None) either
    F("malformed_frame", fenced("import os\nfor fd in range(3, 256):\n    try:\n"
                                "        os.write(fd, bytes([6, 0, 0, 0]) + b'{\"zz\":')\n"
                                "    except OSError:\n        pass\n" + WRONG_ADD), 0.0, "error"),
    # guards: object identity needs legacy mode: the checker refuses non-plain arguments
    F("identity_needs_legacy", "def ident(x):\n    return x\n", 0.0, "fail", ref=IDENT, error_has="legacy"),
]


# ============================================================================== stdin/stdout
def S(id_, program, score, status, expected="12", stdin="", **kw):
    ref = {"cases": [{"stdin": stdin, "stdout": expected}]}
    return pytest.param(Case(fenced(program), ref, score, status, {}, **kw), id=id_)


STDIO_ROWS = [
    # --- correct output, and the whitespace that is tolerated (Codeforces-style: per-line trailing
    # whitespace and the final newline(s); CRLF line ends)
    # guards: the plain correct answer passes
    S("correct", "print(12)\n", 1.0, "pass"),
    # guards: the answer computed from stdin passes
    S("correct_from_stdin", "a, b = map(int, input().split())\nprint(a * b)\n", 1.0, "pass", stdin="3 4\n"),
    # guards: no final newline is accepted
    S("no_trailing_newline", "import sys\nsys.stdout.write('12')\n", 1.0, "pass", expected="12\n"),
    # guards: trailing spaces / tabs on a line are accepted
    S("trailing_spaces", "print('12  \\t')\n", 1.0, "pass"),
    # guards: extra empty lines at the very end are accepted
    S("trailing_blank_lines", "print('12\\n\\n')\n", 1.0, "pass"),
    # guards: CRLF line ends are accepted
    S("crlf", "import sys\nsys.stdout.write('1 2\\r\\n3\\r\\n')\n", 1.0, "pass", expected="1 2\n3\n"),
    # guards: trailing whitespace on every line of a multi-line answer is accepted
    S("multiline_trailing_ws", "print('1 2 ')\nprint('3 4\\t')\n", 1.0, "pass", expected="1 2\n3 4\n"),
    # guards: output on stderr is ignored
    S("stderr_ignored", "import sys\nprint('noise', file=sys.stderr)\nprint(12)\n", 1.0, "pass"),

    # --- prefixes, extra and missing output (mutant: prefix accepted)
    # guards: "123" only starts with the expected "12": fail
    S("prefix_digits", "print(123)\n", 0.0, "fail"),
    # guards: the expected line followed by an extra line: fail
    S("prefix_extra_line", "print('12\\nextra')\n", 0.0, "fail"),
    # guards: an extra token on the line: fail
    S("extra_token", "print(12, 3)\n", 0.0, "fail"),
    # guards: the answer twice (extra line of the same text): fail
    S("answer_twice", "print(12)\nprint(12)\n", 0.0, "fail"),
    # guards: fewer lines than expected: fail
    S("missing_line", "print('1 2')\n", 0.0, "fail", expected="1 2\n3 4\n"),
    # guards: the same tokens on different lines are a different output: fail
    S("tokens_rejoined", "print('1 2 3 4')\n", 0.0, "fail", expected="1 2\n3 4\n"),
    # guards: output that is only a prefix of the expected text: fail
    S("truncated_output", "print(1)\n", 0.0, "fail"),
    # guards: no output at all: fail
    S("missing_output", "x = 12\n", 0.0, "fail"),
    # guards: a leading blank line is not tolerated
    S("leading_blank_line", "print()\nprint(12)\n", 0.0, "fail"),
    # guards: a leading space is not tolerated
    S("leading_space", "print(' 12')\n", 0.0, "fail"),
    # guards: only ASCII whitespace is trailing whitespace (NBSP is not; bug fixed: it was stripped)
    S("trailing_nbsp", "print('12\\xa0')\n", 0.0, "fail"),

    # --- sys.exit / SystemExit
    # guards: sys.exit(0) after the answer is a normal end: pass
    S("sys_exit0_after_output", "import sys\nprint(12)\nsys.exit(0)\n", 1.0, "pass"),
    # guards: sys.exit() / sys.exit(None) are status 0 too
    S("sys_exit_none_after_output", "import sys\nprint(12)\nsys.exit()\n", 1.0, "pass"),
    # guards: sys.exit(0) before printing leaves no output: fail
    S("sys_exit0_before_output", "import sys\nsys.exit(0)\nprint(12)\n", 0.0, "fail"),
    # guards: a non-zero exit status after the right answer is an error (a judge's "runtime error")
    S("sys_exit1_after_output", "import sys\nprint(12)\nsys.exit(1)\n", 0.0, "error"),
    # guards: sys.exit("message") is status 1, as in CPython
    S("sys_exit_message_after_output", "import sys\nprint(12)\nsys.exit('bye')\n", 0.0, "error"),
    # guards: a SystemExit subclass with code 0 is an exit like any other (CPython: status 0)
    S("system_exit_subclass0", "class Done(SystemExit):\n    pass\nprint(12)\nraise Done(0)\n", 1.0, "pass"),
    # guards: sys.exit(False) is status 0 in CPython (bool is an int); it was taken as status 1
    S("sys_exit_false", "import sys\nprint(12)\nsys.exit(False)\n", 1.0, "pass"),

    # --- os._exit: skips the end of the program (flush, atexit): never a normal end
    # guards: os._exit(0) at the top, before any output
    S("os_exit0_top_level", "import os\nos._exit(0)\n", 0.0, "crash"),
    # guards: os._exit(0) after flushing the right answer is not a normal end either (documented)
    S("os_exit0_after_output", "import os, sys\nprint(12)\nsys.stdout.flush()\nos._exit(0)\n", 0.0, "crash"),
    # guards: os._exit(0) before the buffered answer is flushed
    S("os_exit0_unflushed", "import os\nprint(12)\nos._exit(0)\n", 0.0, "crash"),

    # --- atexit: run at the end, as CPython does; what they print counts
    # guards: an atexit handler that prints more after the answer: the real output is "12\n3" (bug
    # fixed: handlers did not run and this row passed)
    S("atexit_prints_extra", "import atexit\nprint(12)\natexit.register(print, 3)\n", 0.0, "fail"),
    # guards: an atexit handler that prints the answer itself is the program's output: pass
    S("atexit_prints_answer", "import atexit\natexit.register(print, 12)\n", 1.0, "pass"),
    # guards: atexit handlers run after sys.exit(0) too
    S("atexit_after_sys_exit0", "import atexit, sys\natexit.register(print, 'extra')\nprint(12)\nsys.exit(0)\n",
      0.0, "fail"),
    # guards: an atexit handler that calls os._exit(0): no normal end
    S("atexit_os_exit0", "import atexit, os\natexit.register(os._exit, 0)\nprint(12)\n", 0.0, "crash"),
    # guards: sys.exit(1) inside an atexit handler is ignored by CPython (status stays 0): pass
    S("atexit_sys_exit1_ignored", "import atexit, sys\natexit.register(sys.exit, 1)\nprint(12)\n", 1.0, "pass"),
    # guards: atexit handlers registered by the sandbox server itself never run for the program
    S("atexit_clean_registry", "import atexit\nprint(12)\n", 1.0, "pass"),

    # --- exceptions and BaseExceptions after the output
    # guards: an exception after the right answer is an error
    S("exception_after_output", "print(12)\nraise RuntimeError('late')\n", 0.0, "error"),
    # guards: KeyboardInterrupt after the answer is an error
    S("keyboard_interrupt_after_output", "print(12)\nraise KeyboardInterrupt\n", 0.0, "error"),
    # guards: a BaseException subclass after the answer is an error
    S("base_exception_subclass_after_output", "class Stop(BaseException):\n    pass\nprint(12)\nraise Stop()\n",
      0.0, "error"),

    # --- forgery and monkeypatching
    # guards: a forged "program ended normally" report, then a crash: the crash counts (bug fixed:
    # the forged report was taken and the row passed)
    S("forged_done_then_exception", _spray(["done", "loaded", None]) + "print(12)\nraise RuntimeError('late')\n",
      0.0, "error", error_has="forged"),
    # guards: a forged report, then death by a signal
    S("forged_done_then_segfault", _spray(["done", "loaded", None]) + "import ctypes, sys\nprint(12)\n"
      "sys.stdout.flush()\nctypes.string_at(0)\n", 0.0, "crash"),
    # guards: patching os._exit / sys.exit does not stop the program's own normal end
    S("patched_exit_functions", "import os, sys\nos._exit = lambda c: None\nsys.exit = lambda *a: None\nprint(12)\n",
      1.0, "pass"),
    # guards: an always-equal object printed is just its text: fail
    S("always_equal_printed", "class E:\n    def __eq__(self, o):\n        return True\n    def __str__(self):\n"
      "        return 'E'\nprint(E())\n", 0.0, "fail"),
    # guards: replacing print with a no-op leaves no output: fail
    S("patched_print", "import builtins\nbuiltins.print = lambda *a, **k: None\nprint(12)\n", 0.0, "fail"),
    # guards: a non-daemon thread that prints the answer is waited for, as CPython does (bug fixed:
    # its output was cut off)
    S("thread_prints_answer", "import threading, time\ndef w():\n    time.sleep(0.2)\n    print(12)\n"
      "threading.Thread(target=w).start()\n", 1.0, "pass"),
]


# ============================================================================== legacy mode
def L(id_, completion, score, status, ref=ADD, **kw):
    return pytest.param(Case(completion, ref, score, status, {"legacy": True}, **kw), id=id_)


LEGACY_ROWS = [
    # --- correct solutions must pass
    # guards: a correct body passes in legacy mode too (flagged integrity: legacy)
    L("correct_body", "    return a + b\n", 1.0, "pass"),
    # guards: a correct fenced definition passes
    L("correct_fenced_def", fenced(CORRECT_ADD), 1.0, "pass"),
    # guards: the reason legacy exists: object identity across the call
    L("identity", "def ident(x):\n    return x\n", 1.0, "pass", ref=IDENT),
    # guards: tests that define a helper class the solution builds at call time (one module, as before)
    L("tests_define_helper", "def wrap(x):\n    return Box(x)\n", 1.0, "pass", ref=BOXED),
    # guards: wrong answers fail
    L("wrong", "    return a * b\n", 0.0, "fail"),
    # guards: a correct solution that prints still passes
    L("prints_and_correct", "    print('debug', a, b)\n    return a + b\n", 1.0, "pass"),
    # guards: a wrong solution that prints pass-like text and a forged verdict fails
    L("prints_pass_words_wrong", "    import sys\n    print('PASSED')\n"
      f"    sys.stdout.write({FORGED_VERDICT!r})\n    return 0\n", 0.0, "fail"),
    # guards: a solution that does not load is an error, as in checker mode
    L("syntax_error", fenced("def add(a, b)\n    return a + b\n"), 0.0, "error"),

    # --- sys.exit(0) at every point (mutant: exit 0 counted as a pass)
    # guards: sys.exit(0) at the top level: the tests never ran: fail
    L("sys_exit0_top_level", fenced("import sys\nsys.exit(0)\n" + CORRECT_ADD), 0.0, "fail"),
    # guards: sys.exit(0) after a correct definition: the tests never ran either: fail (unlike checker mode)
    L("sys_exit0_after_correct_def", fenced(CORRECT_ADD + "import sys\nsys.exit(0)\n"), 0.0, "fail"),
    # guards: sys.exit(0) inside the entry point: check() did not complete: fail
    L("sys_exit0_in_entry_point", "    import sys\n    sys.exit(0)\n", 0.0, "fail"),
    # guards: SystemExit(0) only in the last test's call, after two good answers
    L("sys_exit0_in_one_call", "    if a == 10:\n        raise SystemExit(0)\n    return a + b\n", 0.0, "fail"),
    # guards: sys.exit(0) after printing the right value
    L("sys_exit0_after_output", "    import sys\n    print(a + b)\n    sys.exit(0)\n", 0.0, "fail"),

    # --- os._exit(0) at every point
    # guards: os._exit(0) at the top level
    L("os_exit0_top_level", fenced("import os\nos._exit(0)\n" + CORRECT_ADD), 0.0, "crash"),
    # guards: os._exit(0) inside the entry point
    L("os_exit0_in_entry_point", "    import os\n    os._exit(0)\n", 0.0, "crash"),
    # guards: os._exit(0) in the last test's call
    L("os_exit0_in_one_call", "    import os\n    if a == 10:\n        os._exit(0)\n    return a + b\n", 0.0, "crash"),
    # guards: os._exit(0) after printing the right value
    L("os_exit0_after_output", "    import os, sys\n    print(a + b)\n    sys.stdout.flush()\n    os._exit(0)\n",
      0.0, "crash"),

    # --- atexit
    # guards: an atexit handler that exits 0, with a wrong function
    L("atexit_exit0_top_level", fenced("import atexit, os\natexit.register(os._exit, 0)\n" + WRONG_ADD), 0.0, "fail"),
    # guards: an atexit handler that prints a pass message
    L("atexit_print_top_level", fenced("import atexit\natexit.register(print, 'PASSED')\n" + WRONG_ADD), 0.0, "fail"),
    # guards: an atexit handler registered during a test's call
    L("atexit_in_entry_point", "    import atexit, os\n    atexit.register(os._exit, 0)\n    return None\n", 0.0,
      "fail"),

    # --- exceptions
    # guards: an exception in the entry point fails
    L("exception_in_entry_point", "    raise ValueError('nope')\n", 0.0, "fail", error_has="ValueError"),
    # guards: KeyboardInterrupt from the entry point fails
    L("keyboard_interrupt_in_entry_point", "    raise KeyboardInterrupt\n", 0.0, "fail"),
    # guards: a BaseException subclass from the entry point fails
    L("base_exception_subclass_in_entry_point", fenced("class Stop(BaseException):\n    pass\n"
                                                       "def add(a, b):\n    raise Stop()\n"), 0.0, "fail"),
    # guards: KeyboardInterrupt escapes the tests' `except Exception` (same process: real semantics)
    L("expected_error_keyboard_interrupt", "    if n < 0:\n        raise KeyboardInterrupt\n    return int(n ** 0.5)\n",
      0.0, "fail", ref=SQRT),

    # --- forged frames and patched harness pieces
    # guards: a forged "loaded" report sprayed on every descriptor, then os._exit(0) (bug fixed: a
    # pass, because the old legacy verdict was "the program ran to its end")
    L("forged_ready_then_os_exit", fenced(_spray(["ready", ["loaded", None], ["add"]]) + "os._exit(0)\n"),
      0.0, "crash"),
    # guards: blind forgery of the whole exchange (ready, checked, passed with a guessed nonce)
    L("forged_exchange_then_os_exit", fenced(_spray(["ready", ["loaded", None], ["add"]], ["checked"],
                                                    ["passed", "0" * 32]) + "os._exit(0)\n"), 0.0, "error",
      error_has="protocol"),
    # guards: a forged report with the program going on (correct function!): the protocol breaks: error
    L("forged_ready_then_correct", fenced(_spray(["ready", ["loaded", None], ["add"]]) + CORRECT_ADD),
      0.0, "error", error_has="protocol"),
    # guards: patching json / wire decoders in the worker cannot swap the tests for a no-op check
    L("patched_harness_decoders", fenced("import sys, json\nfake = lambda *a, **k: 'def check(c):\\n    pass\\n'\n"
                                         "json.loads = fake\nw = sys.modules.get('wire')\nif w:\n"
                                         "    w.decode_json = w.recv = w.recv_raw = fake\n"
                                         "import builtins\nbuiltins.compile = lambda *a, **k: compile('def check(c): "
                                         "pass', 't', 'exec')\n"
                                         + WRONG_ADD), 0.0, "fail"),
    # guards: builtins patched by the solution are not the tests' builtins
    L("patched_builtins", fenced("import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.all = lambda x: True\n"
                                 "def half(x):\n    return 0\n"), 0.0, "fail", ref=HALF),
    # guards: builtins shadowed in the solution's globals are not seen by the tests
    L("shadowed_builtins", fenced("def abs(x):\n    return 0\ndef all(x):\n    return True\n"
                                  "def half(x):\n    return 0\n"), 0.0, "fail", ref=HALF),
    # TRUSTED (documented hole): the tests compare in the solution's interpreter, so an object whose
    # __eq__ is always True passes; the verdict says integrity: legacy. Closing it changes this row.
    L("always_equal_object_TRUSTED", fenced("class E:\n    def __eq__(self, o):\n        return True\n"
                                            "    __hash__ = object.__hash__\ndef add(a, b):\n    return E()\n"),
      1.0, "pass"),
]


ALL_ROWS = [("function", p) for p in FUNCTION_ROWS] + [("stdio", p) for p in STDIO_ROWS] + \
           [("legacy", p) for p in LEGACY_ROWS]


@pytest.fixture(scope="module")
def verdicts() -> dict:
    """Every row's RewardResult, computed once, four at a time (the pool's servers are shared)."""
    def one(item):
        mode, p = item
        case = p.values[0]
        return (mode, p.id), code_reward(case.completion, case.reference, **case.options)

    with ThreadPoolExecutor(4) as ex:
        return _Verdicts(ex.map(one, ALL_ROWS))


def _check(mode: str, case: Case, verdicts: dict, request) -> None:
    row_id = request.node.callspec.id
    r = verdicts[(mode, row_id)]
    info = r.info
    got = (r.score if r.score is None else round(r.score, 6), info.get("sandbox_status"))
    want = (case.score if case.score is None else round(case.score, 6), case.sandbox_status)
    assert got == want, (row_id, info)
    graded = case.sandbox_status in ("pass", "fail")
    expected_status = "ok" if graded else (case.sandbox_status or "no_answer")
    assert info["status"] == expected_status, (row_id, info)
    if case.passed_total is not None:
        assert (info["passed"], info["total"]) == case.passed_total, (row_id, info)
    if case.error_has is not None:
        assert case.error_has in (info.get("error") or ""), (row_id, info)
    if case.sandbox_status is not None and mode != "stdio":
        assert info.get("integrity") == ("legacy" if mode == "legacy" else None), (row_id, info)


@pytest.mark.parametrize("case", FUNCTION_ROWS)
def test_function_tests_verdict(case, verdicts, request):
    _check("function", case, verdicts, request)


@pytest.mark.parametrize("case", STDIO_ROWS)
def test_stdio_verdict(case, verdicts, request):
    _check("stdio", case, verdicts, request)


@pytest.mark.parametrize("case", LEGACY_ROWS)
def test_legacy_verdict(case, verdicts, request):
    _check("legacy", case, verdicts, request)


def test_rows_are_unique_and_every_mode_has_a_passing_row():
    for rows in (FUNCTION_ROWS, STDIO_ROWS, LEGACY_ROWS):
        ids = [p.id for p in rows]
        assert len(ids) == len(set(ids))
        assert any(p.values[0].score == 1.0 for p in rows) and any(p.values[0].score == 0.0 for p in rows)


# ============================================================================== extraction
@pytest.mark.parametrize("hostile", [
    "```py\n" * 20000,                      # 20,000 unclosed fences
    "`" * 100000,                           # backticks without any newline (the old regex: ~18 s)
    "```" + " " * 100000,                   # a fence line that never ends
    "```python\n" + "\n" * 100000,          # blank lines: the old ^\s*def pattern rescanned them all
    "```python\n" + "async" + " \n" * 50000,  # a whitespace run after "async"
    ("```" + " " * 50 + "\n" + "\n" * 50) * 2000,
], ids=["unclosed_fences", "backticks", "endless_fence_line", "blank_lines", "async_ws", "mixed"])
def test_extraction_is_linear_on_hostile_input(hostile):
    t0 = time.perf_counter()
    extract_code(hostile, "add")
    extract_code(hostile)
    defines_function(hostile, "add")
    assert time.perf_counter() - t0 < 2.0  # generous: linear scans take milliseconds here


@pytest.mark.parametrize("text, entry, expected", [
    # the fence line may carry text after the language; the lang tag is case-insensitive
    ("```Python title='x'\nA\n```", None, ("A\n", True)),
    # four backticks: the fourth is "rest of the fence line", the tag is empty (= Python)
    ("````py\nB\n````", None, ("B\n", True)),
    # a fence with no newline after it is not a fence: the raw text is used
    ("```py", None, ("```py", False)),
    # a closing fence glued to the next fence's text
    ("```py\nC\n``````py\nD\n```", None, ("D\n", True)),
    # a non-Python block is skipped, an unclosed Python block runs to the end
    ("```js\nx\n```\n```py\nE", None, ("E", True)),
    # the block defining the entry point wins over a later usage block
    ("```py\ndef add(a, b):\n    return 1\n```\n```py\nprint(add(1, 2))\n```", "add",
     ("def add(a, b):\n    return 1\n", True)),
    # an indented (method-like) definition still counts as defining the entry point
    ("```py\nclass K:\n    def add(self):\n        pass\n```\n```py\nx = 1\n```", "add",
     ("class K:\n    def add(self):\n        pass\n", True)),
])
def test_extraction_behaviour_kept(text, entry, expected):
    assert extract_code(text, entry) == expected
