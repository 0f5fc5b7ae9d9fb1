"""``rewardlab sandbox info`` and ``rewardlab sandbox run``: exit codes and output."""

from __future__ import annotations

import json
import subprocess
import sys


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rewardlab", "sandbox", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_info_reports_the_tier():
    r = cli("info")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("tier ")


def test_info_lists_every_language_and_why_one_is_missing():
    from rewardlab.sandbox.languages import LANGUAGES, available

    r = cli("info")
    lines = {ln.split(":")[0].removeprefix("language "): ln
             for ln in r.stdout.splitlines() if ln.startswith("language ")}
    assert set(lines) == set(LANGUAGES)
    for name, why in available().items():
        assert lines[name].endswith("available" if why is None else why), lines[name]


def test_run_pass_fail_and_json(tmp_path):
    (tmp_path / "sol.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "bad.py").write_text("def add(a, b):\n    return 0\n")
    (tmp_path / "check.py").write_text("def check(candidate):\n    assert candidate(2, 3) == 5\n")
    ok = cli("run", "sol.py", "--tests", "check.py", "--entry-point", "add", cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.startswith("pass (tier "), ok.stdout + ok.stderr
    bad = cli("run", "bad.py", "--tests", "check.py", "--entry-point", "add", "--json", cwd=tmp_path)
    assert bad.returncode == 1
    out = json.loads(bad.stdout)
    assert (out["passed"], out["status"]) == (False, "fail")


def test_run_stdio_and_usage_errors(tmp_path):
    (tmp_path / "sol.py").write_text("print(int(input()) * 2)\n")
    (tmp_path / "in.txt").write_text("21\n")
    (tmp_path / "out.txt").write_text("42\n")
    r = cli("run", "sol.py", "--stdin", "in.txt", "--expected", "out.txt", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    missing = cli("run", "sol.py", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")
    nofile = cli("run", "nope.py", "--expected", "out.txt", cwd=tmp_path)
    assert nofile.returncode == 2 and "no such file" in nofile.stderr


def test_run_bad_inputs_are_one_line_errors(tmp_path):
    (tmp_path / "sol.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "check.py").write_text("def check(candidate):\n    assert candidate(2, 3) == 5\n")
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\n")
    base = ("--tests", "check.py", "--entry-point", "add")
    for args, message in [(("latin1.py", *base), "not UTF-8 text"),
                          (("sol.py", *base, "--memory-mb", "0"), "--memory-mb must be positive"),
                          (("sol.py", *base, "--timeout", "0"), "timeout must be positive"),
                          (("sol.py", *base, "--tier", "Z"), "unknown sandbox tier"),
                          (("sol.py", *base, "--timeout", "soon"), "Invalid value for '--timeout'")]:
        r = cli("run", *args, cwd=tmp_path)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("error: ") and message in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
