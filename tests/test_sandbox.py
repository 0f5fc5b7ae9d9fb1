"""Tests for the code sandbox: verdict integrity, statuses, isolation, cleanup, tiers.

    .venv/bin/python -m pytest -q tests/test_sandbox.py

The adversarial harness (../shared/bench/sandbox_attacks/run_attacks.py) runs in
``test_attack_harness_auto_tier`` when the tests run as root (CI does).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rewardlab.sandbox import isolation
from rewardlab.errors import RewardlabError
from rewardlab.sandbox.isolation import load_runtime_module
from rewardlab.sandbox import Limits, SandboxPool, get_pool
from sandbox_tiers import tier_available

REPO = Path(__file__).resolve().parent.parent
ADD_TESTS = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
wire = load_runtime_module("wire")



@pytest.fixture(scope="module")
def pool() -> SandboxPool:
    return get_pool()


def run(pool: SandboxPool, solution: str, tests: str = ADD_TESTS, entry: str = "add", **kw):
    return pool.execute(solution, tests=tests, entry_point=entry, timeout=kw.pop("timeout", 3.0), **kw)


# ------------------------------------------------------------------------------ basics
def test_tier_is_reported(pool):
    assert pool.tier.name in ("A", "B")
    assert f"tier {pool.tier.name}" in pool.tier.summary()
    r = run(pool, "def add(a, b):\n    return a + b\n")
    assert (r.passed, r.status, r.details["tier"]) == (True, "pass", pool.tier.name)
    assert r.details["tests_passed"] == r.details["tests_total"] == 1 and r.details["integrity"] == "checker"


def test_wrong_solution_fails_with_details(pool):
    r = run(pool, "def add(a, b):\n    return a - b\n")
    assert (r.passed, r.status) == (False, "fail")
    assert "AssertionError" in r.details["error"]


def test_load_error_is_error(pool):
    r = run(pool, "def add(a, b)\n    return a + b\n")
    assert r.status == "error" and "SyntaxError" in r.details["error"]


def test_candidate_exceptions_are_rebuilt_as_builtins(pool):
    tests = ("def check(candidate):\n    try:\n        candidate(0)\n    except ZeroDivisionError:\n        pass\n"
             "    else:\n        assert False\n")
    assert run(pool, "def f(x):\n    return 1 / x\n", tests, "f").passed


# ------------------------------------------------------------------------------ fake passes
FAKES = {
    "sys_exit_0": "import sys\nsys.exit(0)\n",
    "os_exit_0": "import os\nos._exit(0)\n",
    "exit_inside_call": "def add(a, b):\n    raise SystemExit(0)\n",
    "os_exit_inside_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "always_equal": ("class E:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
                     "def add(a, b):\n    return E()\n"),
    "int_subclass": ("class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
                     "def add(a, b):\n    return I(0)\n"),
    "atexit_and_excepthook": ("import atexit, os, sys\natexit.register(lambda: os._exit(0))\n"
                              "sys.excepthook = lambda *a: None\ndef add(a, b):\n    return 0\n"),
    "gc_oracle": ("import gc, types\ndef add(a, b):\n    for o in gc.get_objects():\n"
                  "        if isinstance(o, types.FunctionType) and o.__name__ == 'check':\n"
                  "            c = [x for x in o.__code__.co_consts if type(x) is int]\n"
                  "            for i in range(len(c) - 2):\n"
                  "                if c[i] == a and c[i + 1] == b:\n"
                  "                    return c[i + 2]\n    return None\n"),
    "forge_protocol": ("import os, json\ndef add(a, b):\n    for fd in range(3, 64):\n        try:\n"
                       "            d = json.dumps(['ok', a + b + 1]).encode()\n"
                       "            os.write(fd, len(d).to_bytes(4, 'little') + d)\n        except OSError:\n"
                       "            pass\n    return a - b\n"),
    "read_parent_memory": ("import os\ndef add(a, b):\n    try:\n"
                           "        return open(f'/proc/{os.getppid()}/cmdline').read()\n"
                           "    except OSError as e:\n        return str(e)\n"),
}


@pytest.mark.parametrize("name", sorted(FAKES))
def test_fake_passes_fail(pool, name):
    r = run(pool, FAKES[name])
    assert not r.passed, (name, r)
    assert r.status != "pass"


def test_printing_tests_neither_forge_nor_desync_verdicts():
    """The checker's stdout used to be the server's channel to the parent: a test printing a
    value the solution returned could inject a verdict frame, and any flushed print shifted every
    later verdict of that server by one. One server, so each run sees what the last one left."""
    verdict = json.dumps({"status": "pass", "passed": True, "tests_passed": 1, "tests_total": 1})
    forged = len(verdict).to_bytes(4, "little").decode("latin-1") + verdict
    tests = "def check(candidate):\n    print(candidate(2, 3), flush=True)\n    assert candidate(2, 3) == 5\n"
    one = SandboxPool(workers=1)
    try:
        assert not run(one, f"def add(a, b):\n    return {forged!r}\n", tests).passed
        assert run(one, "def add(a, b):\n    return a + b\n", tests).passed
        assert run(one, "def add(a, b):\n    return 0\n").status == "fail"
        assert run(one, "def add(a, b):\n    return a + b\n").passed
    finally:
        one.close()


def test_gc_oracle_beats_an_in_process_grader_but_not_the_sandbox(pool):
    """The oracle reads the expected values out of check()'s constants: it works wherever the
    tests share a process with the solution, which is exactly what the checker design prevents."""
    ns: dict = {}
    exec(FAKES["gc_oracle"] + "\n" + ADD_TESTS + "\ncheck(add)\n", ns)  # passes in-process
    assert not run(pool, FAKES["gc_oracle"]).passed


def test_prelude_helpers_come_from_the_task(pool):
    """Helpers the tests call come from the trusted prompt, not from the solution."""
    prompt = "def helper(x):\n    return x * 2\n\ndef f(x):\n    pass\n"
    tests = "def check(candidate):\n    assert candidate(3) == helper(3)\n"
    cheat = prompt + "def helper(x):\n    return None\n\ndef f(x):\n    return None\n"
    assert not run(pool, cheat, tests, "f", prelude=prompt).passed
    honest = prompt + "def f(x):\n    return x + x\n"
    assert run(pool, honest, tests, "f", prelude=prompt).passed


def test_partial_counts_every_assert(pool):
    tests = "def check(candidate):\n" + "".join(f"    assert candidate({i}) == {i * i}\n" for i in range(4))
    r = run(pool, "def sq(x):\n    return x * x if x < 2 else 0\n", tests, "sq", partial=True)
    assert (r.passed, r.details["tests_passed"], r.details["tests_total"]) == (False, 2, 4)


def test_legacy_mode_runs_identity_tests_and_is_flagged(pool):
    tests = "def check(candidate):\n    o = object()\n    assert candidate(o) is o\n"
    strict = run(pool, "def ident(x):\n    return x\n", tests, "ident")
    assert not strict.passed and "legacy" in strict.details["error"]
    r = run(pool, "def ident(x):\n    return x\n", tests, "ident", legacy=True)
    assert r.passed and r.details["integrity"] == "legacy"


# ------------------------------------------------------------------------------ statuses
def test_timeout(pool):
    t0 = time.monotonic()
    r = run(pool, "while True:\n    pass\n", timeout=1.0)
    assert r.status == "timeout" and time.monotonic() - t0 < 10


def test_memory(pool):
    r = run(pool, "x = bytearray(4 << 30)\n", limits=Limits(memory_mb=256))
    assert r.status == "memory"


def test_memory_of_a_process_tree_is_capped(pool):
    """RLIMIT_AS is per process: forked children together are held to the run's memory cap."""
    sol = ("import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n"
           "        x = b'x' * (150 << 20)\n        time.sleep(30)\n        os._exit(0)\ntime.sleep(30)\n")
    r = run(pool, sol, timeout=10.0, limits=Limits(memory_mb=256))
    assert r.status == "memory" and "together" in r.details["error"]


def test_crash(pool):
    r = run(pool, "import ctypes\nctypes.string_at(0)\n")
    assert r.status == "crash" and "signal" in r.details["error"]


def test_stdio_pass_fail_and_normal_exit(pool):
    prog = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert pool.execute(prog, stdin="2 3\n", expected_stdout="5\n").passed
    assert pool.execute(prog, stdin="2 3\n", expected_stdout="6\n").status == "fail"
    crash_after_output = prog + "raise RuntimeError('late')\n"
    assert pool.execute(crash_after_output, stdin="2 3\n", expected_stdout="5\n").status == "error"
    dies = prog + "import os, sys\nsys.stdout.flush()\nos._exit(0)\n"
    assert not pool.execute(dies, stdin="2 3\n", expected_stdout="5\n").passed


def test_output_limit(pool):
    r = pool.execute("import sys\nwhile True:\n    sys.stdout.write('A' * 65536)\n", stdin="",
                     expected_stdout="x", timeout=3.0, limits=Limits(output_kb=256))
    assert r.status == "output_limit"


def test_disk_cap_counts_all_files(pool):
    sol = ("import time\nfor i in range(8):\n    with open(f'f{i}', 'wb') as f:\n"
           "        f.write(b'x' * (8 << 20))\ntime.sleep(2)\n")
    r = run(pool, sol, limits=Limits(disk_mb=32, file_mb=16))
    assert r.status == "output_limit" and "disk" in r.details["error"]


def test_big_results_are_capped(pool):
    r = run(pool, "def add(a, b):\n    return 'x' * (64 << 20)\n", limits=Limits(result_kb=1024))
    assert r.status == "output_limit"


# ------------------------------------------------------------------------------ isolation
def test_environment_is_scrubbed(pool, monkeypatch):
    monkeypatch.setenv("REWARDLAB_TEST_SECRET", "s3cret")
    tests = "def check(candidate):\n    assert candidate() is None\n"
    sol = "import os\ndef leak():\n    return os.environ.get('REWARDLAB_TEST_SECRET')\n"
    assert run(pool, sol, tests, "leak").passed


def test_caller_is_not_signalled_and_files_outside_are_untouched(pool, tmp_path):
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
    victim = Path(tempfile.gettempdir()) / f"rewardlab_test_victim_{os.getpid()}"
    victim.write_text("keep")
    os.chmod(victim, 0o666)
    try:
        sol = (f"import os\ntry:\n    os.kill({os.getpid()}, 10)\nexcept OSError:\n    pass\n"
               f"for p in ({str(victim)!r},):\n    try:\n        os.unlink(p)\n    except OSError:\n        pass\n"
               "try:\n    open('/tmp/rewardlab_pwned_test', 'w').write('x')\nexcept OSError:\n    pass\n"
               "def add(a, b):\n    return a + b\n")
        r = run(pool, sol)
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert r.passed
    assert not got
    assert victim.read_text() == "keep"
    assert not Path("/tmp/rewardlab_pwned_test").exists()
    victim.unlink()


def _descendants() -> set[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z":
                kids.setdefault(int(stat[1]), []).append(int(d))
    out, stack = set(), [os.getpid()]
    while stack:
        for c in kids.get(stack.pop(), []):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out


def test_no_process_survives_a_run(pool):
    run(pool, "def add(a, b):\n    return a + b\n")  # servers warm
    before = _descendants()
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        time.sleep(60)\n    os._exit(0)\ntime.sleep(0.1)\ndef add(a, b):\n    return a + b\n")
    assert run(pool, daemon).passed
    assert _descendants() <= before


def test_tier_b_when_available():
    if not tier_available("B"):
        pytest.skip("tier B is not available on this machine")
    pool = get_pool("B")
    assert pool.tier.name == "B"
    assert run(pool, "def add(a, b):\n    return a + b\n").passed
    assert not run(pool, FAKES["always_equal"]).passed
    r = run(pool, "import socket\ns = socket.socket()\n")
    assert r.status == "error" and "PermissionError" in r.details["error"]


def test_refuses_without_a_tier(monkeypatch):
    confine = load_runtime_module("confine")
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    monkeypatch.setattr(confine, "landlock_abi", lambda: 0)
    monkeypatch.setattr(isolation, "DETECTED_TIERS", {})
    with pytest.raises(RewardlabError, match="REWARDLAB_SANDBOX_TIER=unsafe"):
        isolation.detect_tier("auto")
    assert isolation.detect_tier("unsafe").name == "unsafe"
    with pytest.raises(RewardlabError, match="unknown sandbox tier"):
        isolation.detect_tier("C")


# ------------------------------------------------------------------------------ codec
def test_wire_codec_round_trip_and_refusals():
    value = [1, -2 ** 70, 2.5, float("inf"), "s", None, True, (1, (2,)), {"k": [1]}, {1, 2},
             frozenset({3}), b"\x00\xff", 1 + 2j, {(1, 2): "t"}]
    import json

    back = wire.decode_json(json.dumps(wire.encode(value)).encode())
    assert back == value and [type(x) for x in back] == [type(x) for x in value]

    class Sub(int):
        pass

    with pytest.raises(wire.NotPlain):
        wire.encode([Sub(1)])
    with pytest.raises(wire.WireError):
        wire.decode_json(b'{"x": 1}')
    with pytest.raises(wire.WireError):
        wire.decode_json(b'{"d": [[[1], 2]]}')


# ------------------------------------------------------------------------------ harness
SHARED = Path(os.environ.get("REWARDLAB_SHARED_DIR") or REPO.parent / "shared")
HARNESS = SHARED / "bench" / "sandbox_attacks" / "run_attacks.py"


def _world_readable_copy(dest: Path) -> None:
    """The harness runs the caller as `nobody`: give it a copy of the package it can read."""
    (dest / "rewardlab" / "sandbox").mkdir(parents=True)
    for f in ("__init__.py", "errors.py", "sandbox/__init__.py", "sandbox/isolation.py", "sandbox/parent.py"):
        shutil.copy(REPO / "rewardlab" / f, dest / "rewardlab" / f)
    shutil.copytree(REPO / "sandbox", dest / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    for p in [dest, *dest.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


HARNESS_GRACE = 0.25
"""Seconds the harness waits after each case before its leftover-process, file and network checks
(its default 1.0 s is 23 s of sleeping a run). A shorter wait checks no less: the harness is the
children's subreaper, so a process that outlives its case is still there to count, and one that
wrote a file and exited has already written it. A wait matters only for a process still dying, and
the sandbox kills and reaps every descendant before it answers (sandbox/server.py kill_descendants)."""


HARNESS_LOCK = Path(tempfile.gettempdir()) / "rewardlab-attack-harness.lock"
"""The harness plants and checks victim files at fixed /tmp paths: two runs at once (the two tests below on two
xdist workers) delete each other's victims and fail a43_disk_fill. One run at a time, across processes."""


def _run_attack_harness(executor: str) -> None:
    """Run ../shared/bench/sandbox_attacks against ``executor``: every case must pass."""
    import fcntl

    with open(HARNESS_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _run_attack_harness_alone(executor)


def _run_attack_harness_alone(executor: str) -> None:
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else os.path.realpath(sys.executable)
    with tempfile.TemporaryDirectory(prefix="rewardlab-harness-") as d:
        os.chmod(d, 0o755)
        _world_readable_copy(Path(d) / "pkg")
        cmd = [sys.executable, str(HARNESS), "--executor", executor,
               "--executor-path", str(Path(d) / "pkg"), "--runner-user", "nobody", "--runner-python", python,
               "--timeout", "3", "--grace", str(HARNESS_GRACE)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=d)
    out = r.stdout + r.stderr
    m = re.search(r"^(\d+) passed, (\d+) failed", out, re.M)
    assert m, out[-3000:]
    cases = sum(1 for line in (HARNESS.parent / "cases.jsonl").read_text().splitlines() if line.strip())
    assert (int(m.group(1)), int(m.group(2))) == (cases, 0), out[-3000:]


def test_attack_harness_auto_tier():
    """../shared/bench/sandbox_attacks: every attack contained, every control right (auto tier)."""
    if os.geteuid() != 0:
        pytest.skip("the attack harness runs its caller as another user: needs root")
    if not HARNESS.is_file():
        pytest.skip(f"attack harness not found at {HARNESS}")
    _run_attack_harness("rewardlab.sandbox.parent:attack_executor")


@pytest.mark.slow
def test_attack_harness_tier_b():
    """The same harness with tier B forced (no namespaces): run with -m slow."""
    if os.geteuid() != 0 or not HARNESS.is_file():
        pytest.skip("needs root and the attack harness")
    if not tier_available("B"):
        pytest.skip("tier B is not available on this machine")
    _run_attack_harness("rewardlab.sandbox.parent:attack_executor_tier_b")
