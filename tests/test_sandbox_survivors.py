"""No process of a job survives its fork server (issue 41, tier B), tier A and tier B.

    PYTHONPATH=. .venv/bin/python -m pytest -q tests/test_sandbox_survivors.py

A job starts a detached daemon (``setsid``, its parent gone: it is re-parented to the server, a
child subreaper) and keeps running; then its server dies by SIGKILL (what the parent does when a
server does not stop within 2 s of SIGTERM; the OOM killer or a crash do the same). Tier A: the
server's PID namespace dies with it. Tier B had no such thing: the daemon was re-parented to PID 1
and lived on after the server and the trainer. Now ``sandbox/reaper.py``, a subreaper between the
parent and the server, kills what is left of the server's tree when the server ends.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rewardlab.sandbox import SandboxPool, isolation
from rewardlab.sandbox.languages import available, compile_program, run_program
from sandbox_tiers import tier_available

AVAIL = available()
DAEMON = {  # start "sleep <n>" detached from the job, then keep the job (and its server) busy
    "bash": "(setsid sleep {n} &)\nsleep 60\n",
    "python": "import os,time\nif os.fork()==0:\n    os.setsid()\n    if os.fork()==0:\n"
              "        os.execv('/bin/sleep',['sleep','{n}'])\n    os._exit(0)\ntime.sleep(60)\n",
    "c": "#include <unistd.h>\nint main(void){{if(fork()==0){{setsid();if(fork()==0)execl(\"/bin/sleep\",\"sleep\","
         "\"{n}\",(char*)0);_exit(0);}}sleep(60);return 0;}}\n",
}



def _find(argv: list[bytes]) -> list[int]:
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as fh:
                    if fh.read().split(b"\0")[:-1] == argv:
                        found.append(int(d))
            except OSError:
                pass
    return found


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _wait_for(cond, seconds: float):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    return cond()


@pytest.mark.parametrize("tier", [pytest.param(None, id="auto"),
                                  pytest.param("B", id="B", marks=pytest.mark.skipif(not tier_available("B"),
                                                                                     reason="tier B unavailable"))])
@pytest.mark.parametrize("lang", sorted(DAEMON))
def test_no_process_of_a_job_survives_its_server(lang, tier):
    if AVAIL[lang] is not None:
        pytest.skip(f"{lang} unavailable: {AVAIL[lang]}")
    n = str(7741 + sorted(DAEMON).index(lang) + (10 if tier else 0))
    argv = [b"sleep", n.encode()]
    pool = SandboxPool(1, tier=tier)
    prog = compile_program(lang, DAEMON[lang].format(n=n), pool=pool, timeout=120)
    assert prog.ok, prog.info
    done: list = []
    t = threading.Thread(target=lambda: done.append(run_program(prog, "", timeout=30, pool=pool)))
    t.start()
    try:
        daemons = _wait_for(lambda: _find(argv), 30)
        assert len(daemons) == 1, daemons
        server = _wait_for(lambda: _ppid(daemons[0]) if _ppid(daemons[0]) > 1 else 0, 10)
        with open(f"/proc/{server}/cmdline", "rb") as fh:
            assert fh.read().split(b"\0")[-2].endswith(b"server.py")  # re-parented to its server (subreaper)
        os.kill(server, signal.SIGKILL)
        assert _wait_for(lambda: not _find(argv), 20), f"{lang}: the job's daemon outlived its server"
        t.join(60)
        assert done and done[0].status != "ran", done
    finally:
        for p in _find(argv):
            os.kill(p, signal.SIGKILL)
        t.join(60)
        pool.close()


def test_tier_b_says_at_start_what_it_does_not_give(caplog):
    if not tier_available("B"):
        pytest.skip("tier B unavailable here")
    from rewardlab.sandbox import parent

    parent.TIER_GAPS_SAID.discard(isolation.detect_tier("B").summary())
    with caplog.at_level("WARNING", logger="rewardlab.sandbox"):
        SandboxPool(1, tier="B").close()
    said = " ".join(r.getMessage() for r in caplog.records)
    for gap in ("tier B does not give", "SysV IPC", "no PID namespace", "RLIMIT_NPROC", "/tmp"):
        assert gap in said, said


# ------------------------------------------------------------------------------ a non-root trainer
TRAINER = """
import os, resource, sys
from rewardlab.sandbox import SandboxPool
from rewardlab.sandbox.languages import compile_program, run_program
tier, lang, src = sys.argv[1] if sys.argv[1] != "auto" else None, sys.argv[2], sys.stdin.read()
state = lambda: (resource.getrlimit(resource.RLIMIT_CPU), os.getpriority(os.PRIO_PROCESS, 0),
                 os.sched_getaffinity(0))
pool = SandboxPool(1, tier=tier)
before = state()
prog = compile_program(lang, src, pool=pool, timeout=120)
r = run_program(prog, f"{os.getpid()}\\n", pool=pool)
print("trainer", pool.tier.name, r.status, state() == before, flush=True)
pool.close()
"""
HARM_TRAINER = {  # the trainer's pid on stdin: lower its CPU limit, renice it, pin it, kill it
    "c": "#define _GNU_SOURCE\n#include <stdio.h>\n#include <signal.h>\n#include <sched.h>\n#include <sys/resource.h>\n"
         "int main(void){int p;scanf(\"%d\",&p);struct rlimit r={1,1};prlimit(p,RLIMIT_CPU,&r,0);"
         "setpriority(PRIO_PROCESS,p,19);cpu_set_t s;CPU_ZERO(&s);CPU_SET(0,&s);sched_setaffinity(p,sizeof s,&s);"
         "kill(p,SIGKILL);puts(\"done\");return 0;}\n",
    "python": "import os,resource,signal\np=int(input())\n"
              "for f in (lambda: resource.prlimit(p,resource.RLIMIT_CPU,(1,1)),"
              " lambda: os.setpriority(os.PRIO_PROCESS,p,19), lambda: os.sched_setaffinity(p,{0}),"
              " lambda: os.kill(p,signal.SIGKILL)):\n    try:\n        f()\n    except OSError:\n        pass\n"
              "print('done')\n",
    "bash": "read p\nprlimit --pid $p --cpu=1:1 2>/dev/null\nrenice -n 19 -p $p >/dev/null 2>&1\n"
            "taskset -p -c 0 $p >/dev/null 2>&1\nkill -9 $p 2>/dev/null\necho done\n",
}


@pytest.mark.skipif(os.geteuid() != 0, reason="starts the trainer as user nobody")
@pytest.mark.parametrize("tier", ["auto", "B"])
@pytest.mark.parametrize("lang", sorted(HARM_TRAINER))
def test_a_job_cannot_reach_a_non_root_trainer(lang, tier):
    """The job runs as the trainer's own uid here (tier B with a non-root trainer)."""
    if AVAIL[lang] is not None:
        pytest.skip(f"{lang} unavailable: {AVAIL[lang]}")
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c", TRAINER,
                        tier, lang], input=HARM_TRAINER[lang], capture_output=True, text=True, timeout=300,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": root, "HOME": "/tmp"})
    if "no sandbox isolation tier is available" in r.stderr:
        pytest.skip("this tier is unavailable to a non-root trainer here")
    assert r.returncode == 0, (lang, tier, r.returncode, r.stderr[-800:])
    words = r.stdout.split()
    assert words[:1] == ["trainer"] and words[-1] == "True", r.stdout
