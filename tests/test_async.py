"""``--async-steps k``: generation k steps ahead in a worker process (rewardlab/train/async_rollout.py).

Through the real CLI with the tiny random model, as tests/test_train.py, graded by its
``length_mod_reward`` (reward variance in almost every group): k = 0 is the synchronous run exactly;
k >= 1 runs, every sample's policy version is within the staleness bound, stale ones are dropped,
the correction's importance weights reach the loss, and presets that cannot be pipelined are
refused with one line. The worker itself is tested for torn updates: weights pushed while a request
is generating must not touch that request; and for streaming: each chunk of completions reaches the
grader as soon as it is decoded, on the reader thread, while the later chunks decode.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_train import base_args, read_jsonl, run_cli

from rewardlab.models import load_model
from rewardlab.rewards.base import CheapReward, RewardResult
from rewardlab.rollout import SamplingParams
from rewardlab.rollout.hf import HFEngine
from rewardlab.testing import two_versions
from rewardlab.train.async_worker import GenerationWorker

ASYNC = ["async/staleness_mean", "async/staleness_max", "async/dropped", "async/trainer_idle_s",
         "async/engine_idle_s", "async/overlap"]


class ThreadRecorder(CheapReward):
    """``length_mod_reward``'s score, graded on the caller's thread; appends that thread's name to $RECORD_THREADS."""

    name = "thread_recorder"
    isolated = True

    def __call__(self, completion: str, reference=None, **meta) -> RewardResult:
        with open(os.environ["RECORD_THREADS"], "a") as f:
            f.write(threading.current_thread().name + "\n")
        return RewardResult((len(completion) % 3) / 2)


thread_recorder = ThreadRecorder()


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/")) and k != "tokens/s"} for r in rows]


def _staleness(rollouts: list[dict]) -> list[int]:
    return [r["step"] - 1 - r["info"]["policy_version"] for r in rollouts]


def test_k0_is_the_synchronous_run(tiny_model_dir, tmp_path):
    sync, k0 = tmp_path / "sync", tmp_path / "k0"
    run_cli(base_args(tiny_model_dir, sync, algo="grpo", steps=2))
    run_cli(base_args(tiny_model_dir, k0, algo="grpo", steps=2, async_steps=0))
    a, b = read_jsonl(sync / "metrics.jsonl"), read_jsonl(k0 / "metrics.jsonl")
    assert _untimed(a) == _untimed(b) and not any(k.startswith("async/") for k in b[0])
    wa = load_file(sync / "checkpoints" / "step-000002" / "model.safetensors")
    wb = load_file(k0 / "checkpoints" / "step-000002" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(bool((wa[k] == wb[k]).all()) for k in wa)


def test_k1_versions_within_bound_and_correction_weights_reach_the_loss(tiny_model_dir, tmp_path):
    out = tmp_path / "k1"
    run_cli(base_args(tiny_model_dir, out, algo="grpo", steps=4, async_steps=1, correction="decoupled_token_is"))
    metrics, rollouts = read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "rollouts.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    for m in metrics:
        assert all(k in m for k in ASYNC), [k for k in ASYNC if k not in m]
        assert m["completions/kept"] == 2 * 4 and m["grad_norm"] > 0 and 0 <= m["async/overlap"] <= 1
    stale = _staleness(rollouts)
    assert len(stale) == 4 * 2 * 4 and max(stale) <= 1 and min(stale) >= 0
    assert [m["async/staleness_max"] for m in metrics] == [0, 1, 1, 1]  # the start's weights serve steps 1 and 2
    # the engine sampled from an older policy than the trainer's: the IS weights are not 1 and enter the loss
    assert all("is_weight/mean" in m for m in metrics)
    assert any(abs(m["is_weight/mean"] - 1.0) > 1e-4 for m in metrics if m["async/staleness_max"] >= 1)


def test_max_staleness_drops_older_samples(tiny_model_dir, tmp_path):
    out = tmp_path / "k2"
    run_cli(base_args(tiny_model_dir, out, algo="grpo", steps=4, async_steps=2, max_staleness=1))
    metrics, rollouts = read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "rollouts.jsonl")
    assert max(_staleness(rollouts)) <= 1  # two steps ahead would be 2 old from step 3 on
    assert sum(m["async/dropped"] for m in metrics) >= 2 * 4  # those were dropped and generated again
    assert all(m["completions/kept"] == 2 * 4 for m in metrics)


def test_resume_regenerates_the_rollouts_in_flight_from_the_same_prompts(tiny_model_dir, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    run_cli(base_args(tiny_model_dir, straight, algo="grpo", steps=4, save_every=2, async_steps=1))
    run_cli(base_args(tiny_model_dir, split, algo="grpo", steps=2, save_every=2, async_steps=1))
    run_cli(base_args(tiny_model_dir, split, algo="grpo", steps=4, save_every=2, async_steps=1))
    a, b = read_jsonl(straight / "rollouts.jsonl"), read_jsonl(split / "rollouts.jsonl")
    assert [(r["step"], r["group"], r["prompt"]) for r in a] == [(r["step"], r["group"], r["prompt"]) for r in b]
    assert _untimed_info(a[: 2 * 8]) == _untimed_info(b[: 2 * 8])  # steps 1-2: the same run
    # step 3 was in flight at the checkpoint: generated again, by the checkpoint's weights (version 2, not 1)
    assert {r["info"]["policy_version"] for r in a if r["step"] == 3} == {1}
    assert {r["info"]["policy_version"] for r in b if r["step"] == 3} == {2}


def _untimed_info(rows: list[dict]) -> list[dict]:
    return [{**r, "info": {k: v for k, v in r["info"].items() if k not in ("wall_s", "cpu_s")}} for r in rows]


@pytest.mark.parametrize(("extra", "why"), [
    ({"algo": "remax"}, "remax's baseline is a greedy rollout"),
    ({"algo": "dapo"}, "dynamic sampling"),
    ({"feedback": "ref"}, "--feedback rollouts are not pipelined"),
])
def test_what_cannot_run_async_is_refused_in_one_line(tiny_model_dir, tmp_path, extra, why):
    proc = run_cli(base_args(tiny_model_dir, tmp_path / "x", async_steps=1, **extra), check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "--async-steps 1 cannot run here" in lines[0] and why in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_weights_pushed_during_a_request_do_not_reach_it(tiny_model_dir):
    """A torn update would mix two versions inside one request's completions; each must equal its own version's."""
    torch.set_num_threads(1)
    v0, v1, tok = two_versions(tiny_model_dir)
    prompts = ["1+1=", "2+3=", "7*6=", "9-4="]
    sampling = SamplingParams(seed=3, max_new_tokens=32, temperature=1.0)
    worker = GenerationWorker(v0, tok, version=0, batch_size=16, threads=1)
    try:
        first = worker.submit(prompts, 4, sampling)
        worker.push(v1, version=1)  # arrives while the first request generates
        second = worker.submit(prompts, 4, sampling)
        a, b = worker.result(), worker.result()
    finally:
        worker.close()
    assert (a.rid, a.version, b.rid, b.version) == (first, 0, second, 1)
    want0 = HFEngine(v0, tok, batch_size=16).generate(prompts, 4, sampling)
    want1 = HFEngine(v1, tok, batch_size=16).generate(prompts, 4, sampling)
    assert [c.token_ids for c in want0] != [c.token_ids for c in want1]  # the versions are told apart
    assert [c.token_ids for c in a.completions] == [c.token_ids for c in want0]
    assert [c.token_ids for c in b.completions] == [c.token_ids for c in want1]
    for got, want in zip(b.completions, want1):
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)


def test_completions_are_graded_as_they_stream_in_on_the_reader_thread(tiny_model_dir, tmp_path, monkeypatch):
    record = tmp_path / "threads.txt"
    monkeypatch.setenv("RECORD_THREADS", str(record))
    out = tmp_path / "stream"
    run_cli(base_args(tiny_model_dir, out, algo="grpo", steps=3, async_steps=1, rollout_batch_size=4,
                      reward="test_async.thread_recorder"))
    metrics = read_jsonl(out / "metrics.jsonl")
    # every completion (3 steps x 2 prompts x 4, and step 4's, queued ahead) graded off the trainer's thread
    threads = record.read_text().split()
    assert len(threads) >= 3 * 8 and set(threads) == {"rewardlab-generation-reader"}, set(threads)
    assert all(m["async/grade_s"] > 0 and m["completions/kept"] == 8 for m in metrics)
    assert [m["reward/mean"] for m in metrics] == [
        pytest.approx(sum((len(r["completion"]) % 3) / 2 for r in read_jsonl(out / "rollouts.jsonl")
                          if r["step"] == m["step"]) / 8) for m in metrics]


def test_chunks_reach_the_grader_while_later_chunks_decode(tiny_model_dir):
    """Four chunks of 4 rows: each is handed over when decoded, so the gaps between hand-overs add up to most
    of the generation time (all at the end, they would add up to about 0); their concatenation is the answer."""
    torch.set_num_threads(1)
    model, tok = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    prompts, sampling = ["1+1=", "2+3=", "7*6=", "9-4="], SamplingParams(seed=5, max_new_tokens=48, temperature=1.0)
    seen: list[tuple[int, str, float, int]] = []

    def on_part(rid: int, context, completions) -> None:
        seen.append((rid, context, time.perf_counter(), len(completions)))

    worker = GenerationWorker(model, tok, version=0, batch_size=4, threads=1, on_part=on_part)
    try:
        worker.submit(prompts, 1, sampling, context="warm-up")  # the worker's start-up is not in the gaps
        worker.result()
        seen.clear()
        rid = worker.submit(prompts, 4, sampling, context="ctx")
        res = worker.result()
    finally:
        worker.close()
    assert [(r, c, n) for r, c, _, n in seen] == [(rid, "ctx", 4)] * 4
    gaps = sum(b[2] - a[2] for a, b in zip(seen, seen[1:]))
    assert gaps >= 0.4 * res.gen_s, (gaps, res.gen_s)
    want = HFEngine(model, tok, batch_size=4).generate(prompts, 4, sampling)
    assert [c.token_ids for c in res.completions] == [c.token_ids for c in want]


def test_async_without_a_correction_uses_the_studied_default_and_disabled_turns_it_off(tiny_model_dir, tmp_path):
    from rewardlab.train.config import ASYNC_CORRECTION

    on, off = tmp_path / "default", tmp_path / "disabled"
    proc = run_cli(base_args(tiny_model_dir, on, algo="grpo", steps=2, async_steps=1))
    assert f"correction {ASYNC_CORRECTION} (the async default)" in proc.stdout
    assert all("is_weight/mean" in m for m in read_jsonl(on / "metrics.jsonl"))  # its IS weights reach the loss
    proc = run_cli(base_args(tiny_model_dir, off, algo="grpo", steps=2, async_steps=1, correction="disabled"))
    assert "no correction: stale samples are weighted as on-policy" in proc.stdout
    assert not any("is_weight/mean" in m for m in read_jsonl(off / "metrics.jsonl"))


def test_a_model_with_hundreds_of_tensors_reaches_the_worker(tmp_path):
    """Regression: the policy copy went to the forkserver as a Process argument, which carries at most ~250
    file descriptors (one per shared tensor): SmolLM2-135M (273 tensors) failed with "too many fds". It now
    goes through the request queue; 24 blocks here give 12 x 24 + 3 tensors."""
    from rewardlab.testing import build_tiny_model

    torch.set_num_threads(1)
    model, tok = load_model(str(build_tiny_model(tmp_path / "deep", num_layers=24, hidden_size=32)), dtype="float32",
                            device="cpu")
    assert len(model.state_dict()) > 256
    worker = GenerationWorker(model, tok, version=0, batch_size=8, threads=1)
    try:
        worker.submit(["1+1="], 2, SamplingParams(seed=1, max_new_tokens=4, temperature=1.0))
        res = worker.result()
    finally:
        worker.close()
    assert res.version == 0 and len(res.completions) == 2


def sync_and_async(run, args, out: Path) -> tuple[list[dict], list[dict]]:
    """``args`` run through ``run(*cli_args)`` synchronously (``out/sync``) and with ``--async-steps 1``
    (``out/k1``), each expected to exit 0; the two runs' rollouts (the multi-turn async tests compare their step 1)."""
    for name, extra in (("sync", ()), ("k1", ("--async-steps", "1"))):
        r = run(*args, "--output-dir", str(out / name), *extra)
        assert r.returncode == 0, r.stderr[-2000:]
    return read_jsonl(out / "sync" / "rollouts.jsonl"), read_jsonl(out / "k1" / "rollouts.jsonl")


@pytest.mark.parametrize("kind", ["tools", "episodes"])
def test_multiturn_rollouts_in_the_worker_are_the_trainers_own(tiny_model_dir, tmp_path, kind):
    """``--tools python`` and a multi-turn environment run in the generation worker, wrapped as the trainer wraps
    its own engine: step 1 (sampled by the start's weights either way) is token for token the synchronous run's
    step 1, with its tool turns or its episode verdicts; step 2 is one version stale. A worker that sampled single
    turns, or lost the rows its episodes open on, would differ."""
    from test_python_env import ENVS

    over = ({"tools": "python", "max_turns": 2, "max_new_tokens": 12} if kind == "tools"
            else {"task": f"python:{ENVS}:IncrementEnv?size=8", "max_new_tokens": 12})
    args = [a for a in base_args(tiny_model_dir, tmp_path / "sync", algo="grpo", **over)]
    if kind == "episodes":  # the environment's own reward
        k = args.index("--reward")
        del args[k : k + 2]
    sync, k1 = sync_and_async(lambda *a: run_cli(list(a)), args, tmp_path)
    assert [(r["completion"], r.get("turns"), r["reward"]) for r in sync if r["step"] == 1] == \
        [(r["completion"], r.get("turns"), r["reward"]) for r in k1 if r["step"] == 1]
    assert _staleness(k1) == [0] * 8 + [1] * 8
    if kind == "tools":
        assert all(r.get("turns") for r in k1)
    else:
        assert all(r["info"]["status"] == "ok" for r in k1)
