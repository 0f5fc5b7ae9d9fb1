"""``rewardlab train`` end to end through the real CLI, with a tiny random model on the arith task.

The tiny model never answers arithmetic, so these runs grade with small deterministic rewards
defined below (loaded by dotted path, ``--reward test_train.NAME``) that give groups real variance,
or none where a test needs zero-variance groups.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewardlab.rewards.base import RewardResult

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


# --- rewards used by the runs (module level, so reward worker processes can import them) ---


def length_mod_reward(completion: str, reference, **meta) -> RewardResult:
    """0, 0.5 or 1 by completion length: varies within almost every group."""
    return RewardResult((len(completion) % 3) / 2)


def parity_reward(completion: str, reference, **meta) -> RewardResult:
    """Constant 1.0 (a zero-variance group) when the answer is even, else 0/1 by completion length."""
    if int(reference) % 2 == 0:
        return RewardResult(1.0)
    return RewardResult(float(len(completion) % 2))


def constant_reward(completion: str, reference, **meta) -> RewardResult:
    """Always 0.5: every group has zero variance."""
    return RewardResult(0.5)


constant_reward.isolated = True  # scored in the trainer's threads: no worker pool, so never a timeout's 0.0


def parity_reward_local(completion: str, reference, **meta) -> RewardResult:
    """:func:`parity_reward`, scored in the trainer's threads (a worker timeout would change the groups)."""
    return parity_reward(completion, reference, **meta)


parity_reward_local.isolated = True


# --- helpers ---


def run_cli(args: list[str], *, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]), OMP_NUM_THREADS="1",
               REWARDLAB_REWARD_WORKERS="1")
    proc = subprocess.run([sys.executable, "-m", "rewardlab", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(REPO))
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


def base_args(model: Path, out: Path, **over) -> list[str]:
    opts = {
        "model": str(model), "output-dir": str(out), "task": "arith", "task-limit": "32", "steps": "2",
        "prompts-per-step": "2", "group-size": "4", "max-new-tokens": "8", "micro-batch-size": "4",
        "reward": "test_train.length_mod_reward", "lr": "1e-2", "threads": "1", "progress": "false",
        "plots": "false", "seed": "0",
    }
    opts.update({k.replace("_", "-"): str(v) for k, v in over.items()})
    return ["train"] + [x for k, v in opts.items() for x in (f"--{k}", v)]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


REQUIRED = ["reward/mean", "reward/std", "frac_zero_std_groups", "response_len/mean", "response_len/min",
            "response_len/max", "truncation_rate", "clip_frac", "clip_frac_low", "clip_frac_high",
            "dual_clip_frac", "approx_kl_old", "entropy", "grad_norm", "lr", "overlong_penalty/mean",
            "num_gen_batches", "time/generate", "time/reward", "time/update", "tokens/s",
            "rewards/test_train.length_mod_reward/mean", "completions/generated", "completions/kept",
            "gen_budget_exhausted", "skipped", "reward/generated_mean", "memory/peak_rss_mb",
            "memory/micro_batch_peak_rss_mb"]


@pytest.mark.parametrize("algo", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_every_algo_runs_two_steps(algo, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from rewardlab.train.checkpoint import latest_checkpoint, load_trainer_state

    out = tmp_path / algo
    extra = {"plots": "true"} if algo == "gspo" else {}
    run_cli(base_args(tiny_model_dir, out, algo=algo, **extra))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        missing = [k for k in REQUIRED if k not in m]
        assert not missing, missing
        assert m["grad_norm"] > 0 and m["response_len/max"] <= 8
        assert m["completions/kept"] == 2 * 4 and m["skipped"] == 0 and m["gen_budget_exhausted"] == 0
        if algo != "dapo":  # without dynamic sampling: one round, everything generated is trained on
            assert m["num_gen_batches"] == 1 and m["completions/generated"] == 2 * 4
            assert m["reward/generated_mean"] == m["reward/mean"]
    rollouts = read_jsonl(out / "rollouts.jsonl")
    kept = [r for r in rollouts if r["kept"]]
    assert len(kept) == 2 * 2 * 4
    assert {"prompt", "completion", "reward", "components", "info", "advantage", "finish_reason"} <= set(kept[0])
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and ckpt.name == "step-000002"
    assert load_trainer_state(ckpt)["optimizer"]["state"]
    AutoModelForCausalLM.from_pretrained(ckpt)  # a plain HF folder
    assert (out / "config.yaml").is_file()
    if algo == "grpo":  # beta 0.04: a reference model is loaded and the KL is logged
        assert all("kl_ref" in m for m in metrics)
    else:
        assert all("kl_ref" not in m for m in metrics)
    if algo == "dapo":
        assert all(m["overlong_penalty/mean"] <= 0 for m in metrics)
    if algo == "gspo":
        # 4 mini-batches: after the first optimizer step the sequence ratio moves away from 1
        assert any(m["ratio/min"] < 1 - 1e-6 or m["ratio/max"] > 1 + 1e-6 for m in metrics)
        assert any(abs(m["approx_kl_old"]) > 0 for m in metrics)
        assert (out / "plots" / "summary.png").stat().st_size > 1000
        (out / "plots" / "reward.png").unlink()
        run_cli(["plot", str(out)])  # on demand, through the CLI
        assert (out / "plots" / "reward.png").stat().st_size > 1000


def test_format_weight_combines_task_and_format_rewards(tiny_model_dir, tmp_path):
    out = tmp_path / "fmt"
    run_cli(base_args(tiny_model_dir, out, algo="grpo", format_weight=0.5))
    main = "test_train.length_mod_reward"
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m[f"rewards/{main}/mean"] is not None and m["rewards/format/mean"] is not None
        assert m["rollout/logp_abs_diff"] < 1e-4  # the HF engine's own log-probs equal the trainer's at temperature 1
    rollouts = read_jsonl(out / "rollouts.jsonl")
    assert len(rollouts) == 2 * 2 * 4
    for r in rollouts:
        comps = r["components"]
        assert set(comps) == {main, "format"}
        assert comps[main] == (len(r["completion"]) % 3) / 2  # the task reward, unweighted
        assert r["reward"] == pytest.approx(comps[main] + 0.5 * (comps["format"] or 0.0))  # weighted sum
        assert set(r["info"]["component_info"]) == {main, "format"}
    for step in (1, 2):
        rows = [r for r in rollouts if r["step"] == step]
        task_mean = sum(r["components"][main] for r in rows) / len(rows)
        assert metrics[step - 1][f"rewards/{main}/mean"] == pytest.approx(task_mean)


def test_dapo_dynamic_sampling_drops_zero_variance_groups_and_regenerates(tiny_model_dir, tmp_path):
    out = tmp_path / "dapo"
    run_cli(base_args(tiny_model_dir, out, algo="dapo", reward="test_train.parity_reward", prompts_per_step=4,
                      max_gen_batches=12, overlong_weight=0, steps=2))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert any(m["num_gen_batches"] >= 2 for m in metrics)
    assert all(0 < m["frac_zero_std_groups"] < 1 for m in metrics)
    rollouts = read_jsonl(out / "rollouts.jsonl")
    for step in (1, 2):
        rows = [r for r in rollouts if r["step"] == step]
        kept = [r for r in rows if r["kept"]]
        assert len(kept) == 4 * 4  # truncated to exactly prompts_per_step groups
        by_group: dict[int, list[float]] = {}
        for r in rows:
            by_group.setdefault(r["group"], []).append(r["reward"])
        kept_groups = {r["group"] for r in kept}
        for g, rewards in by_group.items():  # dropped groups had zero variance; kept ones did not
            if len(set(rewards)) == 1:
                assert g not in kept_groups
        assert {r["gen_round"] for r in rows} == set(range(1, metrics[step - 1]["num_gen_batches"] + 1))
        m = metrics[step - 1]
        assert m["completions/generated"] == len(rows) == m["num_gen_batches"] * 4 * 4
        assert m["completions/kept"] == 4 * 4 and m["gen_budget_exhausted"] == 0 and m["skipped"] == 0
        assert m["reward/generated_mean"] == pytest.approx(sum(r["reward"] for r in rows) / len(rows))


def test_dapo_round_budget_trains_on_the_groups_it_kept(tiny_model_dir, tmp_path):
    # one round of 4 prompts: the even answers give zero-variance groups, so fewer than 4 survive. Seed 2: its
    # first four prompts have two even and two odd answers (under derive_seed's prompt order seed 0's are all even)
    out = tmp_path / "dapo-budget"
    proc = run_cli(base_args(tiny_model_dir, out, algo="dapo", reward="test_train.parity_reward_local",
                             prompts_per_step=4, mini_batches=2, max_gen_batches=1, overlong_weight=0, steps=1,
                             progress="true", seed=2))
    metrics = read_jsonl(out / "metrics.jsonl")
    rollouts = read_jsonl(out / "rollouts.jsonl")
    assert len(metrics) == 1
    for m in metrics:
        rows = [r for r in rollouts if r["step"] == m["step"]]
        kept = [r for r in rows if r["kept"]]
        assert m["num_gen_batches"] == 1 and m["completions/generated"] == len(rows) == 16
        assert m["gen_budget_exhausted"] == 1 and m["skipped"] == 0
        assert 0 < m["completions/kept"] == len(kept) < 16 and len(kept) % 4 == 0  # whole groups
        for g in {r["group"] for r in kept}:  # only groups with reward variance were trained on
            assert len({r["reward"] for r in kept if r["group"] == g}) > 1
        assert m["grad_norm"] > 0 and m["loss"] is not None
    assert f"kept {metrics[-1]['completions/kept']}/16 in 1 round (budget spent)" in proc.stderr  # progress bar


def test_dapo_step_without_usable_groups_is_skipped_not_an_error(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "dapo-skip"
    proc = run_cli(base_args(tiny_model_dir, out, algo="dapo", reward="test_train.constant_reward",
                             max_gen_batches=2, steps=2, progress="true"))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["skipped"] == 1 and m["gen_budget_exhausted"] == 1 and m["completions/kept"] == 0
        assert m["num_gen_batches"] == 2 and m["completions/generated"] == 2 * 2 * 4
        assert m["frac_zero_std_groups"] == 1.0
        assert "no group had reward variance in 2 generation round(s)" in m["skip_reason"]
        assert "loss" not in m and "grad_norm" not in m
    assert "step 1: skipped: no group had reward variance" in proc.stdout
    assert "SKIPPED | kept 0/16 in 2 rounds (budget spent)" in proc.stderr
    rollouts = read_jsonl(out / "rollouts.jsonl")
    assert len(rollouts) == 2 * 16 and not any(r["kept"] for r in rollouts)
    # no update happened: the final checkpoint holds the starting weights
    start = load_file(tiny_model_dir / "model.safetensors")
    final = load_file(out / "checkpoints" / "step-000002" / "model.safetensors")
    assert all(bool((final[k] == start[k]).all()) for k in start)


def test_resume_equals_straight_run(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    straight, split = tmp_path / "straight", tmp_path / "split"
    run_cli(base_args(tiny_model_dir, straight, algo="gspo", steps=4, save_every=2))
    run_cli(base_args(tiny_model_dir, split, algo="gspo", steps=2, save_every=2))
    resumed = run_cli(base_args(tiny_model_dir, split, algo="gspo", steps=4, save_every=2))
    assert "resuming from step-000002" in resumed.stdout

    def strip(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))
                 and k != "tokens/s"} for r in rows]

    a, b = strip(read_jsonl(straight / "metrics.jsonl")), strip(read_jsonl(split / "metrics.jsonl"))
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert a == b
    def untimed(rows: list[dict]) -> list[dict]:  # the reward pool's timings are measurements, not state
        return [{**r, "info": {k: v for k, v in r["info"].items() if k not in ("wall_s", "cpu_s")}} for r in rows]

    assert untimed(read_jsonl(straight / "rollouts.jsonl")) == untimed(read_jsonl(split / "rollouts.jsonl"))
    wa = load_file(straight / "checkpoints" / "step-000004" / "model.safetensors")
    wb = load_file(split / "checkpoints" / "step-000004" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(bool((wa[k] == wb[k]).all()) for k in wa)


def test_bad_input_is_one_line_error(tiny_model_dir, tmp_path):
    cases = [
        (["train", "--algo", "trpo"], "unknown algo 'trpo'"),
        (base_args(tiny_model_dir, tmp_path / "a", algo="gspo", group_size=3), "does not split into 4 mini-batches"),
        (base_args(tmp_path / "no-such-model", tmp_path / "b"), "does not exist"),
    ]
    for args, message in cases:
        proc = run_cli(args, check=False)
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and message in lines[0], proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_sigkill_mid_run_resumes_from_last_complete_checkpoint(tiny_model_dir, tmp_path):
    from rewardlab.train.checkpoint import latest_checkpoint, list_checkpoints

    out = tmp_path / "killed"
    args = base_args(tiny_model_dir, out, algo="gspo", steps=200, save_every=1, keep_checkpoints=0)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "rewardlab", *args], env=env, cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and len(list_checkpoints(out)) < 3:
            time.sleep(0.05)
        # Kill while the run is busy writing the next checkpoint (a .tmp folder exists) when we
        # can catch it, otherwise mid-step.
        until = time.time() + 10
        while time.time() < until and not any(p.name.startswith(".tmp-") for p in (out / "checkpoints").iterdir()):
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    last = latest_checkpoint(out)
    assert last is not None
    k = int(last.name.split("-")[1])
    resumed = run_cli(base_args(tiny_model_dir, out, algo="gspo", steps=k + 1, save_every=1, keep_checkpoints=0))
    assert f"resuming from step-{k:06d}" in resumed.stdout
    steps = [m["step"] for m in read_jsonl(out / "metrics.jsonl")]
    assert steps == list(range(1, k + 2))  # nothing logged after the checkpoint survives, nothing is lost
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".tmp-")]
    assert latest_checkpoint(out).name == f"step-{k + 1:06d}"


@pytest.mark.slow
def test_ctrl_c_saves_and_exits_cleanly(tiny_model_dir, tmp_path):
    from rewardlab.train.checkpoint import latest_checkpoint

    out = tmp_path / "interrupted"
    args = base_args(tiny_model_dir, out, algo="grpo", steps=500, save_every=1000)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "rewardlab", *args], env=env, cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (out / "metrics.jsonl").is_file():
            time.sleep(0.05)
        while time.time() < deadline and not (out / "metrics.jsonl").read_text().strip():
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output[-2000:]  # Ctrl-C: saved, then the shell's 128 + SIGINT
    assert "stopping after this step" in output
    steps = [m["step"] for m in read_jsonl(out / "metrics.jsonl")]
    assert latest_checkpoint(out).name == f"step-{steps[-1]:06d}" and steps[-1] < 500
