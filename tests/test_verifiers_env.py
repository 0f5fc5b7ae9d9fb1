"""``verifiers:TASKSET``: a real verifiers 0.4 (v1) environment drives the run's own policy through the endpoint,
in train and eval, and the trainer trains on exactly the ids its traces recorded.

The taskset is ``tests/vf_tiny_qa`` (written as a verifiers user writes one). verifiers' harness runs its chat
program through ``uv sync --script`` (packages from the internet); this machine is offline, so the tests put an
offline ``uv`` first on PATH (:func:`offline_uv`): it answers the two script commands verifiers runs with this
interpreter, whose packages setup installed. Everything else is verifiers' own code.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import stat
import sys
import time
from pathlib import Path

import pytest
import torch

from rewardlab import envs
from rewardlab.errors import RewardlabError
from rewardlab.rollout import SamplingParams, behaviour, format_prompt, make_engine
from rewardlab.rollout.driven import DrivenEngine

from test_endpoint import HERMES_TEMPLATE, Scripted
from test_python_env import cli, eval_graded_all, one_line_error

pytest.importorskip("verifiers.v1")

HERE = Path(__file__).parent
SPEC = "verifiers:vf_tiny_qa"
UV = """#!/bin/sh
# An offline stand-in for the two uv commands verifiers' runtime runs on a chat program (a PEP 723 script):
# 'uv sync --script F' (nothing to install: the packages are this interpreter's) and 'uv python find --script F'.
for a in "$@"; do [ "$a" = --help ] && { echo "  --script"; exit 0; }; done
case "$1" in sync) exit 0 ;; python) echo "%s"; exit 0 ;; esac
echo "offline uv: unsupported command: $*" >&2; exit 2
"""


@pytest.fixture(scope="module")
def offline_uv(tmp_path_factory) -> dict:
    """PATH with the offline ``uv`` first, the taskset's folder on PYTHONPATH; set for this process too."""
    bin_dir = tmp_path_factory.mktemp("offline_uv")
    uv = bin_dir / "uv"
    uv.write_text(UV % sys.executable)
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(p for p in [str(HERE), os.environ.get("PYTHONPATH")] if p)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_the_tasksets_tasks_are_the_rows(offline_uv):
    rows, source = envs.load_rows(SPEC, "train")
    assert [r.prompt for r in rows] == [[{"role": "user", "content": "What is 2 + 3?"}],
                                        [{"role": "user", "content": "What is 4 + 4?"}]]
    assert {r.meta["reward"] for r in rows} == {"rewardlab.envs.verifiers_env:episode_reward"}
    assert source["kind"] == "verifiers" and source["records"] == 2
    assert envs.load_rows(SPEC, "train", limit=1)[0] == rows[:1]


@pytest.mark.parametrize(("temperature", "top_p", "top_k"), [(1.0, 1.0, 0), (0.5, 0.9, 0), (0.7, 1.0, 20)])
def test_every_trained_token_is_the_engines_with_the_trainers_logprob(tiny_model_dir, offline_uv, temperature, top_p,
                                                                      top_k):
    """Away from the defaults too: the log-probs the trace carries are the trainer's own, at the run's temperature,
    top-p and top-k (a sampler at T 0.5 scored at T 1 would be off by far more than 1e-4)."""
    from rewardlab.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    model.eval()
    engine = DrivenEngine(make_engine("hf", model, tok), tok, drive=envs.drive, is_driven=envs.is_driven)
    rows, _ = envs.load_rows(SPEC, "train")
    prompts = [format_prompt(tok, r.prompt) for r in rows]
    sampling = SamplingParams(max_new_tokens=8, temperature=temperature, top_p=top_p, top_k=top_k)
    try:
        outs = engine.generate(prompts, 2, sampling, rows=rows)
    finally:
        engine.close()
    assert [c.prompt_index for c in outs] == [0, 0, 1, 1]
    for c in outs:
        # the taskset's own rule (its answer in the last reply) on what this engine sampled
        assert c.episode["status"] == "ok" and c.episode["reward"] == float("58"[c.prompt_index] in c.answer_text)
        # the prompt verifiers rendered is the chat template's, token for token
        assert c.prompt_ids == tok(prompts[c.prompt_index])["input_ids"]
        assert c.loss_mask == [1] * len(c.token_ids) and 0 < len(c.token_ids) <= 8
        ids = c.prompt_ids + c.token_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[:, len(c.prompt_ids) - 1:-1]  # (1, C, V)
        want, _ = behaviour.logprobs(logits.float(), torch.tensor([c.token_ids]), sampling)
        assert c.logprobs == pytest.approx(want[0].tolist(), abs=1e-4)


def test_the_tasksets_reward_pays_the_policys_answer_and_only_it(tiny_model_dir, offline_uv):
    from rewardlab.models import load_model

    _, tok = load_model(str(tiny_model_dir))
    script = Scripted(tok, "The answer is 5")  # answers the same whatever it is asked
    engine = DrivenEngine(script, tok, drive=envs.drive, is_driven=envs.is_driven)
    rows, _ = envs.load_rows(SPEC, "train")
    try:
        outs = engine.generate([format_prompt(tok, r.prompt) for r in rows], 1,
                               SamplingParams(max_new_tokens=8), rows=rows)
    finally:
        engine.close()
    assert [c.episode["reward"] for c in outs] == [1.0, 0.0], [c.episode for c in outs]
    assert all(c.token_ids == list(script.ids) for c in outs)  # the engine's own ids, not a re-encoded text
    paid = [envs.verifiers_env.episode_reward(c.graded_text, None, episode=c.episode) for c in outs]
    assert [(p.score, p.info["status"]) for p in paid] == [(1.0, "ok"), (0.0, "ok")]
    outside = envs.verifiers_env.episode_reward("The answer is 5", None)
    assert outside.score is None and outside.info["status"] == "no_episode"  # never a silent 0


def test_an_episode_that_fails_is_counted_not_paid(offline_uv):
    """An episode whose agent never reached the model (verifiers reports it failed) trains on nothing and says why."""
    from rewardlab.envs.verifiers_env import drive

    rows, _ = envs.load_rows(SPEC, "train")
    out = drive(rows[:1], 1, {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8}, url="http://127.0.0.1:9",
                model_dir=str(HERE / "no_such_tokenizer"))
    (s,) = out
    assert s["reward"] is None and s["status"] in ("env_error", "env_timeout") and s["error"], s


def test_an_episode_past_its_deadline_is_cancelled_and_counted(tiny_model_dir, offline_uv):
    """A model endpoint that accepts and never answers: each episode ends at its ``timeout=``, status env_timeout."""
    from rewardlab.envs.verifiers_env import drive

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)  # the kernel accepts the connections; nothing ever reads or answers them
    rows, _ = envs.load_rows(f"{SPEC}?timeout=3", "train")
    t0 = time.monotonic()
    try:
        out = drive(rows[:1], 2, {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8},
                    url=f"http://127.0.0.1:{mute.getsockname()[1]}", model_dir=str(tiny_model_dir))
    finally:
        mute.close()
    took = time.monotonic() - t0
    assert [(s["status"], s["reward"]) for s in out] == [("env_timeout", None)] * 2, out
    assert took < 3 + 20, took  # the deadline, plus the harness's start-up


@pytest.mark.parametrize(("options", "needle"), [("turns=3", "unknown option 'turns'"),
                                                 ("timeout=0", "timeout must be a positive number"),
                                                 ("concurrency=0.5", "concurrency must be a positive integer")])
def test_bad_options_are_one_line_errors(options, needle, offline_uv):
    with pytest.raises(RewardlabError, match=needle):
        envs.load_rows(f"{SPEC}?{options}", "train")


def test_a_sampling_setting_it_does_not_take_is_refused(offline_uv):
    rows, _ = envs.load_rows(SPEC, "train")
    with pytest.raises(RewardlabError, match="not stop"):
        envs.drive(rows, 1, {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8, "stop": ["x"]}, url="http://x",
                   model_dir="x")


def test_a_seeded_batch_is_reproduced_and_each_episode_has_its_own_seed(tiny_model_dir, offline_uv):
    from rewardlab.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    model.eval()
    engine = DrivenEngine(make_engine("hf", model, tok), tok, drive=envs.drive, is_driven=envs.is_driven)
    rows, _ = envs.load_rows(SPEC, "train")
    prompts = [format_prompt(tok, r.prompt) for r in rows]
    def groups(seed: int) -> list[list[list[int]]]:
        """Each row's 3 episodes' tokens, sorted: verifiers may hand a group's identical requests (same prompt)
        to its episodes in any order, so a group is reproduced as a set."""
        outs = engine.generate(prompts, 3, SamplingParams(max_new_tokens=8, seed=seed), rows=rows)
        return [sorted(c.token_ids for c in outs if c.prompt_index == i) for i in range(len(rows))]

    try:
        runs = [groups(seed) for seed in (7, 7, 8)]
    finally:
        engine.close()
    assert runs[0] == runs[1]  # the same seed: the same samples, whatever order verifiers' requests arrived in
    assert runs[0] != runs[2]
    assert len({tuple(ids) for ids in runs[0][0]}) > 1  # a group's episodes are not copies of one sample


class FakeDrive:
    """``drive`` returning fixed samples (no verifiers): what the engine makes of them."""

    def __init__(self, samples: list[dict]) -> None:
        self.samples = samples

    def __call__(self, rows, n, sampling, *, url, model_dir):
        return [dict(s) for s in self.samples]


def test_a_failed_episode_trains_on_nothing_and_an_episode_without_tokens_keeps_the_batch_shape(tiny_model_dir):
    from rewardlab.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    samples = [{"prompt_ids": [5, 6], "token_ids": [7, 8, 9], "sampled": [True, False, True],
                "logprobs": [-1.0, 0.0, -2.0], "reward": 1.0, "status": "ok", "answer": "a", "finish": "stop"},
               {"prompt_ids": [5, 6], "token_ids": [7, 8], "sampled": [True, True], "logprobs": [-1.0, -1.5],
                "reward": None, "status": "env_timeout", "answer": "", "finish": "length"},
               {"prompt_ids": [], "token_ids": [], "sampled": [], "logprobs": [], "reward": None,
                "status": "env_error", "answer": "", "error": "boom"}]
    engine = DrivenEngine(make_engine("hf", model, tok), tok, drive=FakeDrive(samples))
    try:
        ok, late, empty = engine.generate(["p"] * 3, 1, SamplingParams(max_new_tokens=4), rows=[{}] * 3)
    finally:
        engine.close()
    assert ok.loss_mask == [1, 0, 1] and ok.logprobs == [-1.0, 0.0, -2.0] and ok.finish_reason == "stop"
    assert late.loss_mask == [0, 0] and late.finish_reason == "length" and late.episode["status"] == "env_timeout"
    assert empty.loss_mask == [0] and len(empty.token_ids) == 1 and empty.episode["error"] == "boom"
    assert empty.prompt_ids == tok("p")["input_ids"]


class Failing:
    """An engine whose every call fails, as an out-of-memory would."""

    def __init__(self, tok) -> None:
        self.tok = tok

    def encode(self, text):
        return self.tok(text)["input_ids"]

    def generate_ids(self, prompts, n, sampling):
        raise MemoryError("CUDA out of memory (simulated)")


def test_an_engine_failure_is_the_runs_error_not_an_episodes_status(tiny_model_dir, offline_uv):
    from rewardlab.models import load_model

    _, tok = load_model(str(tiny_model_dir))
    engine = DrivenEngine(Failing(tok), tok, drive=envs.drive, is_driven=envs.is_driven)
    rows, _ = envs.load_rows(SPEC, "train")
    try:
        with pytest.raises(MemoryError, match="simulated"):
            engine.generate([format_prompt(tok, r.prompt) for r in rows], 1, SamplingParams(max_new_tokens=8),
                            rows=rows)
    finally:
        engine.close()


def test_cli_train_and_eval_on_a_verifiers_environment(tiny_model_dir, tmp_path, offline_uv):
    run = tmp_path / "run"
    r = cli("train", "--env", SPEC, "--model", str(tiny_model_dir), "--steps", "2",
            "--output-dir", str(run), "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8",
            "--temperature", "0.5", "--top-p", "0.9", "--progress", "false", "--plots", "false", env=offline_uv)
    assert r.returncode == 0, r.stderr[-2000:]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "rewards/verifiers/mean" in m]
    assert [m["step"] for m in steps] == [1, 2]
    # synchronous and on-policy at T 0.5 / top-p 0.9: the engine's log-probs are the trainer's
    assert all(m["rollout/logp_max_abs_diff"] < 1e-3 for m in steps), [m["rollout/logp_max_abs_diff"] for m in steps]
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 8 and all(x["info"]["status"] == "ok" for x in rollouts)
    eval_graded_all(run / "checkpoints" / "step-000002", SPEC, 2, tmp_path / "eval", offline_uv)


def test_cli_async_steps_drive_verifiers_episodes_from_the_generation_worker(tiny_model_dir, tmp_path, offline_uv):
    """``--async-steps 1``: the worker serves its own policy copy behind its own loopback endpoint and verifiers drives
    the episodes there; step 1 (the start's weights either way) is the synchronous run's step 1 token for token, each
    episode seeded alike; step 2 is one version stale."""
    from test_async import sync_and_async

    args = ("train", "--env", SPEC, "--model", str(tiny_model_dir), "--steps", "2", "--prompts-per-step", "2",
            "--group-size", "2", "--max-new-tokens", "8", "--progress", "false", "--plots", "false", "--threads", "1")
    sync, k1 = sync_and_async(lambda *a: cli(*a, env=offline_uv), args, tmp_path)
    assert [(r["completion"], r["reward"]) for r in sync if r["step"] == 1] == \
        [(r["completion"], r["reward"]) for r in k1 if r["step"] == 1]
    assert [r["info"]["policy_version"] for r in k1] == [0] * 8 and all(r["info"]["status"] == "ok" for r in k1)


def eos_prone(tiny_model_dir: Path, out: Path) -> Path:
    """The tiny random model with its end-of-turn row (tied embeddings) set along the mean final hidden state: turns
    end early about half the time at T 0.7 (within 24 tokens), so an episode has room for a second turn."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ctx = torch.randint(3, len(tok), (8, 24), generator=torch.Generator().manual_seed(0))  # (8, 24)
    with torch.no_grad():
        d = model.model(ctx).last_hidden_state.reshape(-1, model.config.hidden_size).mean(0)  # (H,)
        model.lm_head.weight[tok.eos_token_id] = 3.0 * d / d.dot(d)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_cli_branches_all_trains_each_branch_paid_its_episodes_advantage(tiny_model_dir, tmp_path, offline_uv):
    """``branches=all`` through the CLI: the multi-turn taskset's traces branch (the random model's replies do not
    survive verifiers' re-rendering), their earlier branches train beside the kept completions, counted in
    ``completions/branches``; every other figure of the step counts the episodes alone."""
    run, model = tmp_path / "run", eos_prone(tiny_model_dir, tmp_path / "model")
    r = cli("train", "--env", MULTI + "?branches=all", "--model", str(model), "--steps", "2",
            "--output-dir", str(run), "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "24",
            "--temperature", "0.7", "--progress", "false", "--plots", "false", env=offline_uv)
    assert r.returncode == 0, r.stderr[-2000:]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 16 and all(m["completions/kept"] == 8 for m in metrics)
    branched = {m["step"]: m.get("completions/branches", 0) for m in metrics}
    assert sum(branched.values()) > 0, branched  # some traces branched, and their first branch trained
    for step, n in branched.items():  # one earlier branch per branched trace (two turns at most)
        assert n == sum(x["info"].get("branches", 1) - 1 for x in rollouts if x["step"] == step)
        assert all(x["info"].get("untrained_tokens", 0) == 0 for x in rollouts if x["step"] == step)


@pytest.mark.parametrize(("args", "needle"), [
    (("train", "--env", "verifiers:vf_tiny_multi?branches=all", "--algo", "ppo", "--steps", "1"), "per token"),
    (("train", "--env", "verifiers:vf_tiny_multi?branches=some", "--steps", "1"), "branches must be one of last, all"),
    (("train", "--env", "verifiers:no_such_taskset_xyz", "--steps", "1"), "taskset 'no_such_taskset_xyz' not found"),
])
def test_cli_bad_verifiers_environment_is_one_line(args, needle, tmp_path, offline_uv):
    one_line_error(cli(*args, cwd=tmp_path, env=offline_uv), needle)


def test_requests_of_abandoned_episodes_stop_sampling_when_the_driver_moves_on(tiny_model_dir):
    """Three seeded requests (each sampled alone) queue at a slow engine; ``abandon`` fails the two still queued
    and returns once the one in flight ended: no engine call runs after it (the trainer's update comes next)."""
    import threading

    from rewardlab.models import load_model
    from rewardlab.rollout.endpoint import ServedPolicy

    _, tok = load_model(str(tiny_model_dir))

    class Slow(Failing):
        calls: list[float] = []

        def generate_ids(self, prompts, n, sampling):
            time.sleep(1.0)
            self.calls.append(time.monotonic())
            return Scripted(self.tok, "x").generate_ids(prompts, n, sampling)

    policy = ServedPolicy(Slow(tok), tok)
    errors: list[str] = []

    def ask(seed: int) -> None:
        try:
            policy.generate([1, 2, 3], 1, SamplingParams(max_new_tokens=2, seed=seed))
        except RewardlabError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=ask, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    time.sleep(0.2)
    assert policy.abandon() == 2
    done = time.monotonic()
    for t in threads:
        t.join(timeout=10)
    assert len(Slow.calls) == 1 and Slow.calls[0] <= done, (Slow.calls, done)
    assert len(errors) == 2 and all("abandoned" in e for e in errors)


def test_a_batch_that_mixes_episodes_with_plain_prompts_is_refused_and_plain_ones_go_to_the_base(tiny_model_dir):
    from rewardlab.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    engine = DrivenEngine(make_engine("hf", model, tok), tok, drive=FakeDrive([]), is_driven=lambda row: row["env"])
    sp = SamplingParams(max_new_tokens=2)
    with pytest.raises(RewardlabError, match="mixes environment episodes with plain prompts"):
        engine.generate(["a", "b"], 1, sp, rows=[{"env": True}, {"env": False}])
    with pytest.raises(RewardlabError, match="1 rows for 2 prompts"):
        engine.generate(["a", "b"], 1, sp, rows=[{"env": True}])
    plain = engine.generate(["a", "b"], 1, sp, rows=[{"env": False}, {"env": False}])  # a held-out plain benchmark
    assert len(plain) == 2 and all(c.episode is None for c in plain) and engine.server is None


# ----------------------------------------------------------------------------- multi-turn (tests/vf_tiny_multi)

MULTI = "verifiers:vf_tiny_multi"


class Replies:
    """A scripted engine: each prompt's reply is ``reply(the prompt's text)``, as token ids (then EOS with ``eos``),
    recording the prompts it was asked."""

    def __init__(self, tok, reply, *, eos: bool = False) -> None:
        self.tok, self.reply, self.eos, self.calls = tok, reply, eos, []

    def encode(self, text: str) -> list[int]:
        return self.tok(text)["input_ids"]

    def generate_ids(self, prompts, n, sampling):
        from rewardlab.rollout import Completion

        out = []
        for i in range(len(prompts) * n):
            prompt = list(prompts[i // n])
            self.calls.append(prompt)
            ids = self.tok.encode(self.reply(self.tok.decode(prompt)), add_special_tokens=False)
            ids += [self.tok.eos_token_id] if self.eos else []
            out.append(Completion(i // n, prompt, ids, self.tok.decode(ids), "stop", [-0.5] * len(ids)))
        return out


def two_turns(text: str) -> str:
    """"6" to the question, "The answer is 5" once the environment has said "Try again."."""
    return "The answer is 5" if "Try again." in text else "6"


@pytest.mark.parametrize("options", ["", "?max_turns=1"], ids=["two-turns", "max-turns-1"])
def test_a_multi_turn_episode_trains_on_both_replies_and_never_on_the_environments_turn(tiny_model_dir, offline_uv,
                                                                                       options):
    """The environment's "Try again." sits between the two replies in one token sequence: loss mask 0 (and log-prob
    0) on its tokens, 1 on each reply's; the reward reads the last reply. ``max_turns=1`` ends after the first."""
    from rewardlab.models import load_model

    _, tok = load_model(str(tiny_model_dir))
    script = Replies(tok, two_turns)
    engine = DrivenEngine(script, tok, drive=envs.drive, is_driven=envs.is_driven)
    rows, _ = envs.load_rows(MULTI + options, "train")
    try:
        outs = engine.generate([format_prompt(tok, r.prompt) for r in rows], 1, SamplingParams(max_new_tokens=32),
                               rows=rows)
    finally:
        engine.close()
    first, second = (tok.encode(t, add_special_tokens=False) for t in ("6", "The answer is 5"))
    turns = 1 if options else 2
    assert len(script.calls) == 2 * turns
    for c, paid in zip(outs, [1.0, 0.0] if turns == 2 else [0.0, 0.0]):  # "5" is the first task's answer only
        assert c.episode["status"] == "ok" and c.episode["reward"] == paid, c.episode
        trained = [t for t, m in zip(c.token_ids, c.loss_mask) if m]
        assert trained == (first + second if turns == 2 else first)
        if turns == 2:
            between = [t for t, m in zip(c.token_ids, c.loss_mask) if not m]
            assert "Try again." in tok.decode(between) and "Try again." not in tok.decode(trained)
            assert all(lp == 0.0 for lp, m in zip(c.logprobs, c.loss_mask) if not m)
            assert c.token_ids[: len(first)] == first  # the sequence opens on the first reply, prompt apart


@pytest.mark.parametrize("branches", ["last", "all"])
def test_multi_turn_logprobs_are_the_trainers_in_the_context_the_model_saw(tiny_model_dir, offline_uv, branches):
    """A real engine on both turns at T 0.7 / top-k 20, each turn cut at 3 tokens: every trained token's recorded
    log-prob is the trainer's, read from one forward pass over the trained sequence (the environment's turn included
    as context), to 1e-4. The random model's replies do not survive verifiers' re-rendering of the conversation
    (decoded, then tokenised otherwise), so some traces branch: with ``branches=last`` those train on their last
    branch, the second reply in the context the model saw, and say how many tokens of the first reply were left out;
    with ``branches=all`` the first branch is a sequence of its own too (``Completion.branches``), the first reply in
    its context, and nothing is left out."""
    from dataclasses import replace

    from rewardlab.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    model.eval()
    hf = make_engine("hf", model, tok)

    lengths = []

    class Short:  # the run's engine, each turn cut short so the episode has room for its second turn
        def generate_ids(self, prompts, n, sampling):
            out = hf.generate_ids(prompts, n, replace(sampling, max_new_tokens=3))
            lengths.extend(len(c.token_ids) for c in out)
            return out

    engine = DrivenEngine(Short(), tok, drive=envs.drive, is_driven=envs.is_driven)
    rows, _ = envs.load_rows(MULTI + ("?branches=all" if branches == "all" else ""), "train")
    sampling = SamplingParams(max_new_tokens=32, temperature=0.7, top_k=20, seed=4)
    try:
        outs = engine.generate([format_prompt(tok, r.prompt) for r in rows], 2, sampling, rows=rows)
    finally:
        engine.close()

    def check_logprobs(c):  # the trainer's forward over exactly the ids the engine sampled, in their context
        ids = c.prompt_ids + c.token_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[:, len(c.prompt_ids) - 1:-1]  # (1, C, V)
        want, _ = behaviour.logprobs(logits.float(), torch.tensor([c.token_ids]), sampling)
        got = [lp for lp, m in zip(c.logprobs, c.loss_mask) if m]
        assert got == pytest.approx([w for w, m in zip(want[0].tolist(), c.loss_mask) if m], abs=1e-4)

    shapes = set()
    for c in outs:
        assert c.episode["status"] == "ok" and c.episode["reward"] in (0.0, 1.0), c.episode
        mask = c.loss_mask
        if "branches" in c.episode:  # trained: the last branch's reply, its context the re-rendered conversation
            assert c.episode["branches"] == 2 and sum(mask) == 3
            assert "Try again." in tok.decode(c.prompt_ids)
            if branches == "last":  # left out: the first reply's 3 sampled tokens (not the template's around them)
                assert c.episode["untrained_tokens"] == 3 and c.branches is None
            else:  # the first reply trained too, as a sequence of its own in the context the model saw
                (first,) = c.branches
                assert c.episode["untrained_tokens"] == 0 and sum(first.loss_mask) == 3
                assert "Try again." not in tok.decode(first.prompt_ids + first.token_ids)
                check_logprobs(first)
        else:  # one sequence: both replies trained, the environment's turn between them
            assert 0 in mask[mask.index(1):] and sum(mask) > 3 and c.branches is None
        shapes.add("branches" in c.episode)
        check_logprobs(c)
    assert shapes == {False, True}  # at this seed both kinds of trace occur: each path is checked
    assert set(lengths) == {3}  # every turn sampled its 3 tokens (no early end), as the counts above assume


# ----------------------------------------------------------------------------- tools (tests/vf_tiny_tools)

TOOLS = "verifiers:vf_tiny_tools"


@pytest.fixture(scope="module")
def tool_model_dir(tmp_path_factory) -> Path:
    """The tiny model with a tool-aware template, ``<tool_call>`` and ``</tool_call>`` single tokens (verifiers'
    qwen3 parser finds a call by their ids)."""
    from rewardlab.models import load_model
    from rewardlab.testing import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny-tools"))
    model, tok = load_model(str(path))
    tok.add_tokens(["<tool_call>", "</tool_call>"])
    tok.chat_template = HERMES_TEMPLATE
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def calls_add(text: str) -> str:
    """A call of ``add`` on the question's numbers; once a tool turn is in the prompt, an answer with its result."""
    result = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", text, re.S)
    a, b = re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1]
    return (f"The answer is {result[-1].strip()}" if result else
            '<tool_call>{"name": "add", "arguments": {"a": %s, "b": %s}}</tool_call>' % (a, b))


def run_tools(model_dir: Path, spec: str) -> tuple[Replies, list]:
    from rewardlab.models import load_model

    _, tok = load_model(str(model_dir))
    script = Replies(tok, calls_add, eos=True)
    engine = DrivenEngine(script, tok, drive=envs.drive, is_driven=envs.is_driven)
    rows, _ = envs.load_rows(spec, "train")
    try:
        return script, engine.generate([format_prompt(tok, r.prompt) for r in rows], 1,
                                       SamplingParams(max_new_tokens=200), rows=rows)
    finally:
        engine.close()


def test_a_tool_call_runs_the_tasksets_tool_and_its_result_is_context_not_trained(tool_model_dir, offline_uv):
    """verifiers' own tool server (MCP, one per episode) runs the model's ``add`` call; the call's tokens and the
    final answer are trained, the tool's result between them is not; the answer built on the tool's result is
    paid."""
    script, outs = run_tools(tool_model_dir, TOOLS + "?tool_parser=qwen3")
    tok = script.tok
    assert len(script.calls) == 4  # two turns per episode: the call, then the answer
    for c, result in zip(outs, ["5", "8"]):
        assert c.episode["status"] == "ok" and c.episode["reward"] == 1.0, c.episode
        runs = [(m, [t for t, _ in g]) for m, g in itertools.groupby(zip(c.token_ids, c.loss_mask), lambda x: x[1])]
        assert [m for m, _ in runs] == [1, 0, 1]
        call, tool_turn, answer = (tok.decode(ids) for _, ids in runs)
        assert call.startswith("<tool_call>") and '"name": "add"' in call
        assert "tool\n" + result in tool_turn and answer.startswith("The answer is " + result)


def test_a_tool_call_without_a_parser_is_counted_with_verifiers_reason(tool_model_dir, offline_uv):
    """Without ``tool_parser=`` a local model gets verifiers' default renderer, which refuses tools: every episode
    is ``env_error`` with verifiers' reason, none paid, the engine never asked (the README says what to set)."""
    script, outs = run_tools(tool_model_dir, TOOLS)
    assert script.calls == []
    for c in outs:
        assert c.episode["status"] == "env_error" and c.episode["reward"] is None
        assert "does not support tools" in c.episode["error"]


@pytest.mark.parametrize(("options", "needle"), [
    ("renderer=nope", "verifiers refuses it"), ("tool_parser=nope", "choose from"),
    ("renderer=qwen3&tool_parser=qwen3", "the default renderer's")])
def test_bad_renderer_options_are_one_line_errors_at_start_up(options, needle, offline_uv):
    with pytest.raises(RewardlabError, match=needle):
        envs.load_rows(f"{TOOLS}?{options}", "train")
