"""Where the interpreter lives must not widen the sandbox, nor silently weaken it (issue 41).

    PYTHONPATH=. .venv/bin/python -m pytest -q tests/test_sandbox_interpreter.py

The sandbox's Python is a copy of this machine's CPython placed under ``/opt`` or ``/home`` (as
uv, conda, pyenv and vendor builds install them); a file of another user or program sits next to
it (``/opt/rl41-secret``, ``/home/rl41-other``). Before: the interpreter's whole top-level
directory was exposed (read-only bind in tier A, a Landlock read rule in tier B), so a job read
the neighbour's file; an interpreter under ``/opt`` made tier A fail to start (the runtime's mount
point ``/opt/rewardlab-sandbox`` could not be made in a read-only ``/opt``) and ``auto`` fell back
to tier B without a word. Now only the interpreter's own prefix and executable are exposed, and a
tier-A start failure where user namespaces work is an error naming the cause.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from rewardlab.errors import RewardlabError
from rewardlab.sandbox import SandboxPool, isolation
from rewardlab.sandbox.languages import available, compile_program, run_program
from sandbox_tiers import tier_available

AVAIL = available()
ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not ROOT or shutil.which("bwrap") is None,
                                reason="places interpreters under /opt and /home (root) and needs bubblewrap")
_RUN = os.getpid()  # one set of directories per test process: two xdist workers copying python3 to one path collide
PLACES = {"opt": (f"/opt/rl41-py-{_RUN}", f"/opt/rl41-secret-{_RUN}"),
          "home": (f"/home/rl41-py-{_RUN}", f"/home/rl41-other-{_RUN}")}
READ_SECRET = {
    "python": "try:\n    print(open('{f}').read().strip())\nexcept OSError:\n    print(0)\n",
    "c": "#include <stdio.h>\nint main(void){{char b[64]={{0}};FILE*f=fopen(\"{f}\",\"r\");if(f&&fgets(b,64,f))"
         "fputs(b,stdout);else puts(\"0\");return 0;}}\n",
    "bash": "cat '{f}' 2>/dev/null || echo 0\n",
}



@pytest.fixture(scope="module")
def places():
    """Copies of this machine's python3 under /opt and /home, each with a neighbour's secret."""
    real = os.path.realpath(sys.executable)  # the real binary (a venv links to it), not a pyenv shim
    made = []
    for py_dir, secret_dir in PLACES.values():
        for d in (py_dir, secret_dir):
            os.makedirs(d, exist_ok=True)
            made.append(d)
        os.makedirs(f"{py_dir}/bin", exist_ok=True)
        shutil.copy2(real, f"{py_dir}/bin/python3")
        with open(f"{secret_dir}/answer.txt", "w") as fh:
            fh.write("5\n")
        for p in (os.path.dirname(py_dir), py_dir, f"{py_dir}/bin", secret_dir):
            os.chmod(p, 0o755)
        os.chmod(f"{py_dir}/bin/python3", 0o755)
        os.chmod(f"{secret_dir}/answer.txt", 0o644)
    broken = f"/srv/rl41-broken-{_RUN}"  # an interpreter wrapper that needs /etc (not in tier A)
    os.makedirs(f"{broken}/bin", exist_ok=True)
    with open(f"{broken}/bin/python3", "w") as fh:
        fh.write(f"#!/bin/sh\n[ -r /etc/hostname ] || exit 3\nexec {real} \"$@\"\n")
    os.chmod(f"{broken}/bin/python3", 0o755)
    made.append(broken)
    yield {k: f"{v[0]}/bin/python3" for k, v in PLACES.items()} | {"broken": f"{broken}/bin/python3"}
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def fresh(monkeypatch):
    """A clean tier detection (the cache is per process)."""
    monkeypatch.setattr(isolation, "DETECTED_TIERS", {})
    return monkeypatch


@pytest.mark.parametrize("tier", ["A", "B"])
@pytest.mark.parametrize("where", sorted(PLACES))
@pytest.mark.parametrize("lang", sorted(READ_SECRET))
def test_the_interpreter_exposes_only_its_own_files(lang, where, tier, places, fresh):
    if AVAIL[lang] is not None:
        pytest.skip(f"{lang} unavailable: {AVAIL[lang]}")
    fresh.setenv("REWARDLAB_SANDBOX_PYTHON", places[where])
    if tier == "B" and not tier_available("B"):
        pytest.skip("tier B unavailable here")
    pool = SandboxPool(1, tier=tier)
    try:
        assert pool.tier.python == places[where]
        secret = f"{PLACES[where][1]}/answer.txt"
        prog = compile_program(lang, READ_SECRET[lang].format(f=secret), pool=pool, timeout=120)
        assert prog.ok, prog.info
        r = run_program(prog, "", pool=pool)
        assert (r.status, r.stdout) == ("ran", "0\n"), (lang, where, tier, r)
        ok = run_program(compile_program("python", "a,b=map(int,input().split())\nprint(a+b)\n", pool=pool),
                         "2 3\n", pool=pool)  # the interpreter itself works from there
        assert (ok.status, ok.stdout) == ("ran", "5\n"), ok
    finally:
        pool.close()


def test_only_the_interpreters_own_paths_are_listed(places):
    for where, py in places.items():
        paths = isolation.interpreter_paths(py)
        assert paths == (py,), (where, paths)  # a copy of the system's CPython: its prefix is /usr
        assert not any(p in ("/opt", "/home", "/srv", "/") for p in paths)


def test_auto_does_not_fall_back_for_an_interpreter_under_opt(places, fresh):
    fresh.setenv("REWARDLAB_SANDBOX_PYTHON", places["opt"])
    assert isolation.detect_tier("auto").name == "A"


def test_a_tier_a_start_failure_is_reported_not_a_silent_fallback(places, fresh):
    fresh.setenv("REWARDLAB_SANDBOX_PYTHON", places["broken"])
    assert subprocess.run([places["broken"], "-c", "pass"]).returncode == 0  # it works outside the sandbox
    with pytest.raises(RewardlabError, match="tier A failed to start although user namespaces work"):
        isolation.detect_tier("auto")


def test_a_fallback_for_missing_namespaces_says_so_at_start(fresh):
    if not tier_available("B"):
        pytest.skip("tier B unavailable here")
    fresh.setattr(isolation, "DETECTED_TIERS", {})
    fresh.setattr(isolation.shutil, "which", lambda name: None)  # as where bubblewrap is not installed
    t = isolation.detect_tier("auto")
    assert t.name == "B"
    assert "tier A unavailable: bubblewrap (bwrap) is not installed" in t.summary()
