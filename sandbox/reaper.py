"""Outlive the fork server by one step, so that no process of a job survives it (stdlib only).

    python -I -S reaper.py -- COMMAND...

Tiers B and unsafe have no PID namespace: a job's process whose fork server dies (SIGKILLed by the
parent after a stuck shutdown, by the OOM killer, a crash) used to be re-parented to PID 1 and live
on after the server and the trainer. The reaper is a child subreaper that runs the server as its
only child and never runs job code: every orphan of the server's tree comes back to it. When the
server exits, or when the reaper gets SIGTERM / SIGHUP (the parent stopping the server) or its
parent dies, it SIGKILLs every descendant (the server included), reaps them, and exits with the
server's status. It holds no pipe of the server (its stdin/stdout go to ``/dev/null``), so the
parent sees the server's end as before. Jobs cannot signal it: the Landlock domain of a job
scopes signals (ABI >= 6) and the seccomp filter refuses ``kill(-1)``; on a kernel without
Landlock signal scoping a job of the same uid can kill it (and its server): README, tier B.
"""

import os
import signal
import sys

sys.path.insert(0, __file__.rpartition("/")[0])  # -I does not put the script's folder on sys.path

import confine  # noqa: E402

_server = 0
_status = 0


def sweep() -> None:
    """SIGKILL every descendant until none is left (orphans keep coming back to us), reaping them."""
    global _status
    me = os.getpid()
    while True:
        confine.kill_children(me)
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == _server:
            _status = os.waitstatus_to_exitcode(st)


def _on_signal(signum, frame) -> None:
    sweep()
    os._exit(0)


def main() -> int:
    global _server, _status
    if len(sys.argv) < 3 or sys.argv[1] != "--":
        sys.exit("usage: reaper.py -- COMMAND...")
    confine.prctl(confine.PR_SET_CHILD_SUBREAPER, 1)
    parent = os.getppid()
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGTERM)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 0
    _server = os.fork()
    if _server == 0:
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        try:
            os.execv(sys.argv[2], sys.argv[2:])
        finally:
            os._exit(127)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1):  # the server's channel is between it and the parent only
        os.dup2(devnull, fd)
    os.close(devnull)
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            return _status
        except InterruptedError:
            continue
        if pid == _server:
            _status = os.waitstatus_to_exitcode(st)
            sweep()
            return _status


if __name__ == "__main__":
    sys.exit(main())
