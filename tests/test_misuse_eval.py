"""``rewardlab eval`` misused, through the real CLI: a second eval on a folder in use, a missing
GPU or model, and a failed start all end in one line and a non-zero exit, and write nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "REWARDLAB_REWARD_WORKERS": "1"}  # one reward worker: no test here depends on the pool's size
    return subprocess.run([sys.executable, "-m", "rewardlab", "eval", *args], capture_output=True, text=True,
                          env=env, cwd=str(cwd), timeout=300)


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr[-2000:]
    return lines[0]


ARGS = ("--suite", "arith", "--limit", "2", "--n", "1", "--max-new-tokens", "4", "--quiet")


def test_second_eval_on_a_folder_in_use_is_refused_and_writes_nothing(tmp_path, tiny_model_dir):
    from rewardlab.locks import FolderLock

    out = tmp_path / "out"
    out.mkdir()
    (out / "samples_arith.jsonl").write_text('{"header": {"fingerprint": "x"}}\n')  # the live eval's progress
    before = (out / "samples_arith.jsonl").read_bytes()
    with FolderLock(out, "eval"):  # what a running `rewardlab eval --output out` holds
        r = cli(str(tiny_model_dir), *ARGS, "--output", str(out), "--overwrite")
        line = one_line_error(r, f"{out} is in use by another eval (pid {os.getpid()})")
        assert "--output" in line
    assert sorted(p.name for p in out.iterdir()) == [".lock", "samples_arith.jsonl"]
    assert (out / "samples_arith.jsonl").read_bytes() == before  # --overwrite did not delete it either


def test_eval_runs_and_releases_the_lock(tmp_path, tiny_model_dir):
    from rewardlab.locks import FolderLock

    out = tmp_path / "out"
    r = cli(str(tiny_model_dir), *ARGS, "--output", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "results.json").is_file()
    FolderLock(out, "eval").release()  # free after the run


@pytest.mark.parametrize("model,extra,needle", [
    ("TINY", ("--device", "cuda"), "--device cuda: CUDA is not available here"),
    ("TINY", ("--device", "cuda:0"), "CUDA is not available here"),
    ("./typo", (), "model path ./typo does not exist"),
    ("NOTES.txt", (), "NOTES.txt is a file, not a model folder"),
    ("org/no-such-model-xyz", (), "no-such-model-xyz"),  # fails only when loading: the new folder is removed again
])
def test_bad_device_or_model_is_one_line_and_leaves_no_output_folder(tmp_path, tiny_model_dir, model, extra, needle):
    (tmp_path / "NOTES.txt").write_text("not a model")
    model = str(tiny_model_dir) if model == "TINY" else model
    one_line_error(cli(model, *ARGS, *extra, cwd=tmp_path), needle)  # default --output evals-out/<model>
    assert sorted(p.name for p in tmp_path.iterdir()) == ["NOTES.txt"]
