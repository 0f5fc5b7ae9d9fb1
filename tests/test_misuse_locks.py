"""The output-folder lock (rewardlab.locks): one writer at a time, no stale lock after a kill,
and a failed start leaves no folder behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewardlab.errors import RewardlabError
from rewardlab.locks import LOCK_NAME, FolderLock, FolderLocked

REPO = Path(__file__).resolve().parent.parent


def test_second_holder_is_refused_with_the_holders_pid(tmp_path):
    out = tmp_path / "a" / "b"
    first = FolderLock(out, "eval")
    assert first.held and (out / LOCK_NAME).read_text().strip() == str(os.getpid())
    with pytest.raises(FolderLocked) as info:
        FolderLock(out, "eval", hint="choose another --output")
    msg = str(info.value)
    assert msg == f"{out} is in use by another eval (pid {os.getpid()}); choose another --output"
    assert isinstance(info.value, RewardlabError)  # the CLI prints it as one line, exit 2
    first.release()
    with FolderLock(out, "eval"):  # free again once released
        pass


def test_lock_dies_with_a_sigkilled_holder(tmp_path):
    out = tmp_path / "run"
    code = ("import sys, time; from rewardlab.locks import FolderLock; "
            "lock = FolderLock(sys.argv[1], 'training run'); print('locked', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(FolderLocked, match=f"pid {proc.pid}"):
            FolderLock(out, "training run")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    lock = FolderLock(out, "training run")  # no stale lock to clean up by hand
    assert lock.held
    lock.release()


def test_failed_start_removes_only_the_folders_it_created(tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir()
    new = existing / "new" / "deeper"
    with pytest.raises(RuntimeError):
        with FolderLock(new, "eval"):
            raise RuntimeError("model failed to load")
    assert existing.is_dir() and list(existing.iterdir()) == []  # both new levels gone, the old one kept

    with pytest.raises(RuntimeError):  # an existing folder is never removed, even when empty
        with FolderLock(existing, "eval"):
            raise RuntimeError("boom")
    assert existing.is_dir()

    with pytest.raises(RuntimeError):  # a folder holding output is kept
        with FolderLock(new, "eval"):
            (new / "results.json").write_text("{}")
            raise RuntimeError("boom")
    assert (new / "results.json").is_file()


def test_a_file_in_the_way_is_a_one_line_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(RewardlabError, match="is a file, not a folder"):
        FolderLock(tmp_path / "f", "eval")


def test_lock_does_not_leak_into_exec_children(tmp_path):
    """O_CLOEXEC: a subprocess the run starts (sandbox, tools) does not keep the lock alive."""
    out = tmp_path / "run"
    lock = FolderLock(out, "training run")
    child = subprocess.Popen(["sleep", "30"])
    try:
        lock.release()
        t0 = time.monotonic()
        FolderLock(out, "training run").release()  # free although the child still runs
        assert time.monotonic() - t0 < 5
    finally:
        child.kill()
        child.wait()
