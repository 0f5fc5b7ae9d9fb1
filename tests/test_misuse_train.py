"""``rewardlab train`` misused, through the real CLI: every mistake is one line and a non-zero exit,
reported before the model loads, and loses nothing (no run folder left behind, an existing run
untouched, Ctrl-C saves then exits 130).

The runs grade with rewards defined below, loaded by dotted path (``--reward test_misuse_train.NAME``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rewardlab.rewards.base import RewardResult

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


# --- rewards used by the runs; they run in the trainer process (isolated + fast) ---


class _InProcess:
    isolated = True  # score in the trainer process, not in worker processes

    def __call__(self, completion: str, reference, **meta) -> RewardResult:
        return self.fast(completion, reference, **meta)


class SigintAtStep2(_InProcess):
    """Scores by length; the first completion of step 2 sends Ctrl-C (SIGINT) to the trainer itself."""

    calls = 0

    def fast(self, completion: str, reference, **meta) -> RewardResult:
        type(self).calls += 1
        if type(self).calls == 9:  # 2 prompts x 4 completions per step: call 9 opens step 2
            os.kill(os.getpid(), signal.SIGINT)
        return RewardResult((len(completion) % 3) / 2)


class HangsAtStep2(_InProcess):
    """A reward that hangs for good at step 2 (as a stuck grader would), after starting a
    non-daemon thread that never ends (so a normal interpreter exit would hang too)."""

    calls = 0

    def fast(self, completion: str, reference, **meta) -> RewardResult:
        type(self).calls += 1
        if type(self).calls == 9:
            threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
            Path(os.environ["REWARDLAB_TEST_MARK"]).write_text("hanging")
            time.sleep(3600)
        return RewardResult((len(completion) % 3) / 2)


sigint_at_step2 = SigintAtStep2()
hangs_at_step2 = HangsAtStep2()


# --- helpers ---


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]), OMP_NUM_THREADS="1",
                REWARDLAB_REWARD_WORKERS="1", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")


def run_cli(args: list[str], *, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rewardlab", *args], capture_output=True, text=True, env=env(),
                          timeout=timeout, cwd=str(cwd))


def train_args(model, out, **over) -> list[str]:
    opts = {
        "model": str(model), "task": "arith", "task-limit": "32", "steps": "2", "prompts-per-step": "2",
        "group-size": "4", "max-new-tokens": "8", "micro-batch-size": "4", "reward": "test_train.length_mod_reward",
        "lr": "1e-2", "threads": "1", "progress": "false", "plots": "false", "seed": "0",
    }
    if out is not None:
        opts["output-dir"] = str(out)
    opts.update({k.replace("_", "-"): str(v) for k, v in over.items()})
    return ["train"] + [x for k, v in opts.items() for x in (f"--{k}", v)]


def one_line_error(proc: subprocess.CompletedProcess, needle: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr[-2000:]
    assert "rewardlab train:" not in proc.stdout  # stopped before the start-up banner, i.e. before the model load
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fake_run(run_dir: Path, args: list[str], step: int = 1) -> None:
    """A run directory with one complete checkpoint of the settings ``args`` would build."""
    import torch

    from rewardlab.train.checkpoint import COMPLETE_MARKER, STATE_FILE, checkpoint_dir
    from rewardlab.train.config import build_config, parse_overrides, to_dict

    cfg = build_config(None, parse_overrides(args[1:]))
    ckpt = checkpoint_dir(run_dir, step)
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    torch.save({"step": step, "config": to_dict(cfg)}, ckpt / STATE_FILE)
    (ckpt / COMPLETE_MARKER).write_text(f"step {step}\n")
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")


# --- a second writer ---


def test_second_run_on_a_locked_run_directory_is_refused_and_writes_nothing(tiny_model_dir, tmp_path):
    from rewardlab.locks import FolderLock

    out = tmp_path / "run"
    args = train_args(tiny_model_dir, out)
    fake_run(out, args)
    saving = out / "checkpoints" / ".tmp-step-000002-4242"  # the live run's checkpoint, being written
    saving.mkdir()
    (saving / "model.safetensors").write_bytes(b"half written")
    before = snapshot(out)
    with FolderLock(out, "training run"):  # what a live `rewardlab train` on this folder holds
        proc = run_cli(args)
        line = one_line_error(proc, f"{out} is in use by another training run (pid {os.getpid()})")
        assert "--output-dir" in line
        after = snapshot(out)
    # nothing written, and the live run's half-written checkpoint was not "cleaned up" from under it
    assert {k: v for k, v in after.items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}


# --- wrong device, task, model: before anything heavy, and no run folder ---


def test_device_cuda_without_cuda_is_one_line_and_creates_nothing(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    one_line_error(run_cli(train_args(tiny_model_dir, out, device="cuda")), "--device cuda: CUDA is not available here")
    one_line_error(run_cli(train_args(tiny_model_dir, out, device="cuda:1")), "CUDA is not available here")
    one_line_error(run_cli(train_args(tiny_model_dir, out, device="gpu")), "--device 'gpu'")
    assert not out.exists()


@pytest.mark.parametrize("over,needle", [
    ({"task": "aritth"}, "unknown task 'aritth'"),
    ({"model": "./typo"}, "model path ./typo does not exist"),
    ({"model": "NOTES.txt"}, "NOTES.txt is not a model folder"),
    ({"reward": "no_such_reward"}, "unknown reward"),
])
def test_typos_are_reported_before_the_model_loads_and_leave_no_run_folder(tiny_model_dir, tmp_path, over, needle):
    (tmp_path / "NOTES.txt").write_text("not a model")
    over = dict(over)
    one_line_error(run_cli(train_args(over.pop("model", tiny_model_dir), None, **over), cwd=tmp_path), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["NOTES.txt"]  # no runs/<default run name> folder


def test_a_model_that_fails_to_load_leaves_no_run_folder(tmp_path):
    """A hub id can only fail at load time (here: offline, not cached); the new run folder goes again."""
    proc = run_cli(["train", "--model", "org/no-such-model-xyz", "--threads", "1", "--progress", "false"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no-such-model-xyz" in lines[0], proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_typo_model_next_to_an_existing_default_run_says_does_not_exist(tmp_path):
    """The default run directory names the model, so a typo'd --model is not taken for a resume."""
    from rewardlab.train.config import TrainConfig
    from rewardlab.train.runtime import run_name

    default = Path("runs") / run_name(TrainConfig())
    assert default.name == "gspo-arith-SmolLM2-135M-Instruct"
    assert run_name(TrainConfig(model="./typo")) == "gspo-arith-typo"
    assert run_name(TrainConfig(model="runs/a/checkpoints/step-000020/")) == "gspo-arith-a-step-000020"
    assert (run_name(TrainConfig(algo="dapo", task="data/mine.jsonl", model="Qwen/Qwen2.5-0.5B"))
            == "dapo-mine.jsonl-Qwen2.5-0.5B")
    fake_run(tmp_path / default, ["train", "--threads", "1"])
    before = snapshot(tmp_path / default)
    one_line_error(run_cli(["train", "--model", "./typo", "--threads", "1"], cwd=tmp_path),
                   "model path ./typo does not exist")
    assert snapshot(tmp_path / default) == before
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [default.name]


# --- resuming with other settings ---


def test_resume_with_other_settings_names_each_one_with_old_and_new_value(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    fake_run(out, train_args(tiny_model_dir, out, algo="gspo", lr="1e-2"))
    before = snapshot(out)
    line = one_line_error(run_cli(train_args(tiny_model_dir, out, algo="grpo", lr="2e-2")),
                          f"{out} holds a run with different settings")
    assert "--algo 'gspo' -> 'grpo'" in line and "--lr 0.01 -> 0.02" in line, line
    assert "--output-dir" in line
    assert {k: v for k, v in snapshot(out).items() if k != ".lock"} == before  # nothing written, nothing cleaned


# --- Ctrl-C ---


def _wait(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"rewardlab train did not exit within {timeout} s:\n{out[-3000:]}")
    return proc.returncode, out


def test_ctrl_c_finishes_the_step_saves_and_exits_130(tiny_model_dir, tmp_path):
    from rewardlab.train.checkpoint import latest_checkpoint

    out = tmp_path / "run"
    args = train_args(tiny_model_dir, out, steps=50, save_every=1000, reward="test_misuse_train.sigint_at_step2")
    proc = subprocess.Popen([sys.executable, "-m", "rewardlab", *args], env=env(), cwd=str(REPO), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    code, output = _wait(proc, 240)
    assert code == 130, output[-3000:]
    assert "stopping after this step and saving a checkpoint" in output
    assert (f"interrupted: stopped after step 2 with its checkpoint saved; rerun the same command to resume from {out}"
            in output)
    assert "Traceback" not in output
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # the step that was running finished and was logged
    assert latest_checkpoint(out).name == "step-000002"  # and saved, although save_every is 1000


@pytest.mark.slow
def test_second_ctrl_c_stops_promptly_even_with_a_hung_reward(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    mark = tmp_path / "hanging"
    args = train_args(tiny_model_dir, out, steps=50, save_every=1000, reward="test_misuse_train.hangs_at_step2")
    proc = subprocess.Popen([sys.executable, "-m", "rewardlab", *args], env={**env(), "REWARDLAB_TEST_MARK": str(mark)},
                            cwd=str(REPO), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal signals the whole process group
        time.sleep(1.0)
        assert proc.poll() is None  # the first Ctrl-C waits for the (hung) step
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        code, output = _wait(proc, 60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 130, output[-3000:]
    assert took < 30, took  # 5 s grace for a clean unwind, then a hard exit
    assert "stopping after this step" in output
    assert "aborted (shutdown did not finish within 5 s of the second Ctrl-C)" in output  # the hard exit fired
    assert "Traceback" not in output
