"""``python:MODULE:CLASS`` environments (TRL's ``environment_factory`` shape) and the episode rollout behind them:
seeded rows, the model's own ``<tool_call>`` format, token-exact trajectories, statuses that say why an episode
could not be graded, and train / eval through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rewardlab import envs
from rewardlab.envs.python_env import PythonEpisode, episode_reward, load_class
from rewardlab.errors import RewardlabError
from rewardlab.rollout import behaviour
from rewardlab.rollout.base import SamplingParams
from rewardlab.rollout.episodes import EpisodeEngine, rollout_episodes
from rewardlab.rollout.tool_settings import ToolSettings
from rewardlab.rollout.toolcalls import messages_ids, render_with_tools, tool_calls_of
from rewardlab.testing import build_tiny_model

from scripted import Scripted

HERE = Path(__file__).parent
ENVS = HERE / "trl_envs.py"
"""Environment classes as a TRL user writes them (nothing in that file imports rewardlab)."""


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """``rewardlab ARGS`` in a fresh process (``env``: variables set on top of this process's)."""
    env = {**os.environ, **(env or {}), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "REWARDLAB_REWARD_WORKERS": "1"}
    return subprocess.run([sys.executable, "-m", "rewardlab", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode != 0, r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr and len(lines) == 1 and needle in lines[0], r.stderr


def eval_graded_all(ckpt: Path, env: str, limit: int, out: Path, cli_env: dict | None = None) -> None:
    """``rewardlab eval CKPT --env ENV --limit N`` grades every one of its N episodes ``ok``."""
    e = cli("eval", str(ckpt), "--env", env, "--limit", str(limit), "--output", str(out), "--max-new-tokens", "8",
            "--quiet", env=cli_env)
    assert e.returncode == 0, e.stderr[-2000:]
    name = envs.short_name(env)
    results = json.loads((out / "results.json").read_text())
    assert results["results"][name]["n"] == limit and results["details"][name]["grader_status"] == {"ok": limit}


def spec(cls: str, **options) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"python:{ENVS}:{cls}" + (f"?{query}" if query else "")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_tiny_model(tmp_path_factory.mktemp("tiny_env"))
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def call_ids(tok, name: str, *, canonical: bool = True, **arguments) -> list[int]:
    """A Hermes tool call and the end-of-turn token, as the tiny tokenizer encodes them (``canonical=False``: one
    character at a time, a sequence the tokenizer never produces from the text)."""
    text = f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'
    if canonical:
        return tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    return [i for ch in text for i in tok.encode(ch, add_special_tokens=False)] + [tok.eos_token_id]


def episodes(model, tok, rows, n=2, tokens=120, settings=None, seed=0, **sampling):
    prompts = [render_with_tools(tok, r.prompt, r.meta["tools"]) for r in rows]
    return rollout_episodes(model, tok, prompts, n, SamplingParams(max_new_tokens=tokens, seed=seed, **sampling),
                            open_episode=lambda i: PythonEpisode(rows[i]), settings=settings or ToolSettings())


def test_rows_are_seeded_resets_with_the_tools_schemas():
    rows, source = envs.load_rows(spec("IncrementEnv", size=6), "train")
    again, _ = envs.load_rows(spec("IncrementEnv", size=6), "train")
    test, _ = envs.load_rows(spec("IncrementEnv", size=6), "test")
    assert [r.prompt for r in rows] == [r.prompt for r in again]  # a row's task never changes
    assert [r.reference for r in rows] != [r.reference for r in test]  # splits draw from their own seeds
    assert all(r.prompt[0]["content"].startswith("Increment the counter by ") for r in rows)
    assert len({r.prompt[0]["content"] for r in rows}) > 1  # seeds differ across rows
    assert source["tools"] == ["increment"] and source["records"] == 6
    tool = rows[0].meta["tools"][0]["function"]
    assert tool["name"] == "increment" and tool["parameters"]["properties"]["step"]["type"] == "integer"
    assert envs.load_rows(spec("IncrementEnv", size=6), "train", limit=2)[0] == rows[:2]


def test_every_episode_of_a_group_gets_its_rows_task(tiny):
    rows, _ = envs.load_rows(spec("IncrementEnv", size=3), "train")
    for row in rows:
        targets = {PythonEpisode(row).env.target for _ in range(4)}
        assert len(targets) == 1 and f"by {targets.pop()}." in row.prompt[0]["content"]


def test_inherited_tools_are_tools_as_trl_exposes_them():
    rows, source = envs.load_rows(spec("HangingEnv", size=1), "train")
    assert source["tools"] == ["increment", "wait"]


def test_a_dataset_file_gives_the_prompts_and_resets_keyword_arguments(tmp_path, tiny):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Make the counter {t} with add.", "target": t}) + "\n"
                            for t in (3, 7)))
    rows, _ = envs.load_rows(spec("TargetEnv", dataset=data), "train")
    assert [r.prompt[0]["content"] for r in rows] == ["Make the counter 3 with add.", "Make the counter 7 with add."]
    assert [r.reference["reset"] for r in rows] == [{"target": 3}, {"target": 7}]
    model, tok = tiny
    trajs = episodes(Scripted(model, call_ids(tok, "add", a=1, b=2)), tok, rows, n=1)
    # async tool and async get_reward: the call ran (counter 3), row 0 is solved and row 1 is not
    assert [t.turns[0]["calls"][0]["result"] for t in trajs] == ["3", "3"]
    assert [t.episode["reward"] for t in trajs] == [1.0, 0.0]


def test_a_tool_call_runs_and_its_result_returns_as_a_tool_message_token_exactly(tiny):
    model, tok = tiny
    rows, _ = envs.load_rows(spec("IncrementEnv", size=4), "train")
    script = call_ids(tok, "increment", step=4)
    trajs = episodes(Scripted(model, script), tok, rows)
    for t in trajs:
        target = int(rows[t.prompt_index].prompt[0]["content"].split()[-1].rstrip("."))
        first = t.turns[0]
        assert t.token_ids[: len(script)] == script and first["calls"][0]["result"] == "4"
        assert t.episode == {"reward": float(target == 4), "status": "ok", "tool_seconds": t.episode["tool_seconds"]}
        a, b = first["observation"]  # the tool message: the template's separators, encoded alone, never sampled
        assert t.token_ids[a:b] == messages_ids(tok, [{"role": "tool", "name": "increment", "content": "4"}],
                                                ended=True)
        assert t.loss_mask[a:b] == [0] * (b - a) and t.logprobs[a:b] == [None] * (b - a)
        assert t.loss_mask[:a] == [1] * a and sum(t.loss_mask) == len(t.token_ids) - (b - a)
        assert t.tool_calls == 1 and tool_calls_of(tok.decode(t.token_ids[:a]))[1][0]["function"]["name"] == \
            "increment"
    assert any(t.episode["reward"] == 1.0 for t in trajs) and any(t.episode["reward"] == 0.0 for t in trajs)


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.7, "top_p": 0.9}, {"temperature": 1.3, "top_k": 20}])
def test_every_sampled_token_carries_the_log_prob_of_a_forward_pass_over_the_exact_ids(tiny, sampling):
    """Token-exactness: the trajectory holds the ids the model produced, and a forward pass over
    ``prompt_ids + token_ids`` gives each drawn token's recorded log-prob. The model here calls its tool in a
    sequence the tokenizer never produces from the text (one character at a time): the episode runs the call,
    and the trajectory keeps those ids, where re-tokenising the decoded text would give other ones."""
    model, tok = tiny
    rows, _ = envs.load_rows(spec("IncrementEnv", size=2), "train")
    script = call_ids(tok, "increment", canonical=False, step=2)
    forced = episodes(Scripted(model, script), tok, rows, n=2, tokens=len(script) + 24, seed=3, **sampling)
    params = SamplingParams(max_new_tokens=24, **sampling)
    for t in forced:
        assert t.token_ids[: len(script)] == script and t.turns[0]["calls"][0]["result"] == "2"
        assert tok.encode(tok.decode(t.token_ids[: len(script)]), add_special_tokens=False) != script
        a, b = t.turns[0]["observation"]
        ids = torch.tensor([t.prompt_ids + t.token_ids])  # (1, L)
        start = len(t.prompt_ids) + b  # after the tool message: sampled freely (the script was forced)
        with torch.no_grad():
            logits = model(ids).logits[:, start - 1:-1]  # (1, C, V): the logits that drew each of those tokens
        want, _ = behaviour.logprobs(logits.float(), ids[:, start:], params)  # the behaviour distribution
        assert len(t.token_ids) > b and all(t.loss_mask[k] == 1 for k in range(b, len(t.token_ids)))
        assert t.logprobs[b:] == pytest.approx(want[0].tolist(), abs=1e-4)


def test_a_tool_that_hangs_ends_its_episode_as_env_timeout_in_bounded_time(tiny):
    model, tok = tiny
    rows, _ = envs.load_rows(spec("HangingEnv", size=1), "train")
    t0 = time.monotonic()
    trajs = episodes(Scripted(model, call_ids(tok, "wait", seconds=60)), tok, rows, n=2,
                     settings=ToolSettings(tool_timeout=0.3))
    assert time.monotonic() - t0 < 10
    for t in trajs:
        assert t.episode["status"] == "env_timeout" and t.episode["reward"] is None
        assert t.turns[0]["calls"][0]["status"] == "timeout"
        res = episode_reward(t.answer, episode=t.episode)
        assert res.score == 0.0 and res.info["status"] == "env_timeout"


def test_a_bad_call_goes_back_to_the_model_and_the_episode_goes_on(tiny):
    model, tok = tiny
    rows, _ = envs.load_rows(spec("IncrementEnv", size=1), "train")
    for script, status, needle in [(call_ids(tok, "decrement", step=1), "tool_error", "no tool 'decrement'"),
                                   (call_ids(tok, "increment", stride=1), "tool_error", "TypeError"),
                                   (call_ids(tok, "increment", step=1, extra=2), "tool_error", "TypeError")]:
        t = episodes(Scripted(model, script), tok, rows, n=1)[0]
        call = t.turns[0]["calls"][0]
        assert call["status"] == status and needle in call["result"], call
        assert t.episode["status"] == "ok" and t.episode["reward"] == 0.0


def test_an_environment_that_is_not_deterministic_under_its_seed_is_a_counted_env_error(tiny):
    model, tok = tiny
    rows, _ = envs.load_rows(spec("NoisyEnv", size=1), "train")
    trajs = episodes(model, tok, rows, n=2, tokens=8)
    assert {t.episode["status"] for t in trajs} == {"env_error"}
    assert "not deterministic" in trajs[0].episode["error"] and trajs[0].token_ids == []


def test_could_not_grade_is_never_a_silent_zero():
    assert episode_reward("x").score is None and episode_reward("x").info["status"] == "no_episode"
    res = episode_reward("x", episode={"reward": None, "status": "bad_reward", "error": "get_reward returned 'a'"})
    assert res.score == 0.0 and res.info["status"] == "bad_reward"
    assert episode_reward("x", episode={"reward": 0.5, "status": "ok"}).score == 0.5


def test_the_engine_samples_plain_prompts_through_its_base_engine(tiny):
    model, tok = tiny
    from rewardlab.rollout import make_engine

    base = make_engine("hf", model, tok)
    engine = EpisodeEngine(model, tok, open_episode=PythonEpisode, base=base,
                           is_episode=lambda row: "env" in (row.meta or {}))
    s = SamplingParams(max_new_tokens=4, seed=0)
    plain = engine.generate(["hi"], 2, s)
    assert [c.token_ids for c in plain] == [c.token_ids for c in base.generate(["hi"], 2, s)]
    assert all(c.episode is None for c in plain)


@pytest.mark.parametrize(("target", "needle"), [
    ("no_such_module_xyz:Env", "cannot import no_such_module_xyz"),
    (f"{ENVS}:Missing", "has no class Missing"),
    ("json:JSONDecoder", "has no reset method"),
    ("nowhere.py:Env", "no file nowhere.py"),
    ("justamodule", "write python:MODULE:CLASS"),
])
def test_bad_classes_are_one_line_errors(target, needle):
    with pytest.raises(RewardlabError, match=needle):
        load_class(target)


def test_cli_train_and_eval_on_a_python_environment(tiny_model_dir, tmp_path):
    env = spec("IncrementEnv", size=8)
    run = tmp_path / "run"
    r = cli("train", "--env", env, "--model", str(tiny_model_dir), "--steps", "2", "--output-dir", str(run),
            "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8", "--progress", "false",
            "--plots", "false", "--eval-every", "2", "--eval-suite", env, "--eval-limit", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "rewards/python_env/mean" in m]
    assert [m["step"] for m in steps] == [1, 2] and all("tools/calls_mean" in m for m in steps)
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all("<tools>" in r["prompt"] and r["info"]["status"] == "ok" for r in rollouts)
    eval_graded_all(run / "checkpoints" / "step-000002", env, 3, tmp_path / "eval")


@pytest.mark.parametrize(("args", "needle"), [
    (("train", "--env", "python:no_such_module_xyz:Env", "--steps", "1"), "cannot import"),
    (("train", "--env", f"python:{ENVS}:IncrementEnv", "--tools", "python", "--steps", "1"), "brings its own tools"),
    (("train", "--env", f"python:{ENVS}:IncrementEnv?sizes=3", "--steps", "1"), "unknown option 'sizes'"),
])
def test_cli_bad_python_environment_is_one_line(args, needle, tmp_path):
    one_line_error(cli(*args, cwd=tmp_path), needle)


def test_a_tool_without_a_docstring_is_refused_at_start_up(tmp_path):
    env = tmp_path / "bare.py"
    env.write_text("class Bare:\n    def reset(self, **kw):\n        return 'go'\n    def get_reward(self):\n"
                   "        return 0.0\n    def poke(self, x: int) -> int:\n        return x\n")
    with pytest.raises(RewardlabError, match="tool 'poke'.*docstring"):
        envs.load_rows(f"python:{env}:Bare", "train")


@pytest.mark.parametrize("async_steps", ["0", "1"])
def test_a_plain_task_trains_while_a_python_environment_is_its_held_out_eval(tiny_model_dir, tmp_path, async_steps):
    """Synchronous, and with ``--async-steps 1``: the worker samples the plain task as a plain engine (streaming), the
    trainer's own engine runs the environment's held-out episodes."""
    env = spec("IncrementEnv", size=4)
    run = tmp_path / "run"
    r = cli("train", "--task", "arith", "--model", str(tiny_model_dir), "--steps", "1", "--output-dir", str(run),
            "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8", "--progress", "false",
            "--plots", "false", "--eval-every", "1", "--eval-suite", f"arith, {env}", "--eval-limit", "2",
            "--async-steps", async_steps)
    assert r.returncode == 0, r.stderr[-2000:]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    name = envs.short_name(env)
    evals = [m for m in metrics if f"eval/{name}/problems" in m]
    assert [m["step"] for m in evals] == [0, 1] and all(m[f"eval/{name}/problems"] == 2 for m in evals)
    assert all("eval/arith/problems" in m for m in evals)
    samples = [json.loads(x) for x in (run / "eval" / "samples.jsonl").read_text().splitlines()]
    assert {s["status"] for s in samples if s["id"].startswith("python/")} == {"ok"}  # graded from its episodes
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all("<tools>" not in r["prompt"] for r in rollouts)  # the arith prompts stay plain


# ----------------------------------------------------------------------------- hostile environments

HOSTILE = HERE / "hostile_envs.py"


def hostile(cls: str, **options) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"python:{HOSTILE}:{cls}" + (f"?{query}" if query else "")


def forced(tiny, cls: str, calls: list[tuple[str, dict]], *, n: int = 1, **settings):
    """Episodes of ``cls`` (one row) where the model's first turn makes ``calls``."""
    model, tok = tiny
    rows, _ = envs.load_rows(hostile(cls, size=1), "train")
    text = "".join(f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>' for name, args in calls)
    script = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    return episodes(Scripted(model, script), tok, rows, n=n, tokens=len(script) + 8,
                    settings=ToolSettings(**{"max_turns": 3, **settings}))


@pytest.mark.parametrize(("tool", "needle"), [("exit", "SystemExit: 3"), ("interrupt", "KeyboardInterrupt"),
                                              ("badstr", "BadStr: (its message could not be read)")])
def test_whatever_a_tool_raises_goes_back_to_the_model_and_the_run_goes_on(tiny, tool, needle):
    (t,) = forced(tiny, "Hostile", [(tool, {"x": 3})])
    call = t.turns[0]["calls"][0]
    assert call["status"] == "tool_error" and needle in call["result"], call
    assert t.episode["status"] == "ok"


def test_a_result_whose_text_takes_too_long_is_a_timeout(tiny):
    t0 = time.monotonic()
    (slow,) = forced(tiny, "Hostile", [("slowtext", {"x": 1})], tool_timeout=0.3)
    assert time.monotonic() - t0 < 3 and slow.turns[0]["calls"][0]["status"] == "timeout"
    assert slow.episode["status"] == "env_timeout"


def test_a_call_that_returns_only_after_its_time_is_hung(monkeypatch):
    """A C call that holds the interpreter lock (a backtracking regex) keeps the waiting thread from waking at the
    deadline; when it returns late, its value is not taken. The clock is made to jump, so the test is exact."""
    import rewardlab.bounded as b

    clock = [0.0]
    monkeypatch.setattr(b.time, "monotonic", lambda: clock[0])
    with pytest.raises(b.Hung, match="returned after 10.0 s"):
        b.bounded(lambda: clock.__setitem__(0, 10.0), 1.0)
    clock[0] = 0.0
    assert b.bounded(lambda: "fine", 1.0) == "fine"


def test_max_turns_caps_the_calls_of_one_turn(tiny):
    (t,) = forced(tiny, "Base", [("ping", {"x": k}) for k in range(4)], max_turns=2)
    assert [c["status"] for c in t.turns[0]["calls"]] == ["ok", "ok", "max_turns", "max_turns"]
    assert t.tool_calls == 2 and t.finish_reason == "max_turns" and t.episode["reward"] == 2.0


@pytest.mark.parametrize(("cls", "status", "needle"), [
    ("ExitInResetLater", "env_error", "SystemExit: 4"),
    ("ExitInRewardLater", "env_error", "SystemExit: 5"),
    ("GarbageResetLater", "env_error", "not deterministic"),
])
def test_an_environment_that_exits_or_changes_its_task_is_a_counted_status(tiny, cls, status, needle):
    (t,) = forced(tiny, cls, [("ping", {"x": 1})])
    assert t.episode["status"] == status and needle in t.episode["error"], t.episode


def test_resets_that_hang_open_together_under_the_episodes_deadline(tiny):
    t0 = time.monotonic()
    trajs = forced(tiny, "SlowResetLater", [("ping", {"x": 1})], n=4, tool_episode_timeout=0.5)
    assert time.monotonic() - t0 < 4  # four 5 s resets, waited on together for 0.5 s
    assert {t.episode["status"] for t in trajs} == {"env_timeout"}


def test_numeric_rewards_of_any_real_type_are_accepted(tiny):
    (t,) = forced(tiny, "NumpyReward", [("ping", {"x": 1})])
    assert t.episode == {"reward": 0.5, "status": "ok", "tool_seconds": t.episode["tool_seconds"]}


def test_deeply_nested_json_in_a_tool_call_is_no_call():
    assert tool_calls_of('<tool_call>{"name": "ping", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>")[1] \
        == []


@pytest.mark.parametrize(("env", "needle"), [
    (hostile("MessagesReset"), "reset returned list"),
    (hostile("Base", size="true"), "size must be a non-negative integer"),
    (hostile("Base", seed="abc"), "seed must be a non-negative integer"),
])
def test_bad_environments_and_options_at_start_up_are_one_line_errors(env, needle):
    with pytest.raises(RewardlabError, match=needle):
        envs.load_rows(env, "train")


def test_a_dataset_that_is_not_text_is_a_one_line_error(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RewardlabError, match="cannot read it as UTF-8"):
        envs.load_rows(spec("TargetEnv", dataset=data), "train")


def test_a_class_built_on_dict_is_an_environment_as_in_trl():
    rows, source = envs.load_rows(hostile("DictEnv", size=1), "train")
    assert source["tools"] == ["ping"]


def test_two_paths_that_sanitise_alike_get_different_names(tmp_path):
    assert envs.short_name(f"python:{tmp_path}/a/b_c.py:E") != envs.short_name(f"python:{tmp_path}/a_b/c.py:E")
    assert envs.short_name("reasoning_gym:spell_backward") == "reasoning_gym-spell_backward"


# ----------------------------------------------------------------------------- against code we did not write


def test_under_qwen25s_own_template_an_episode_is_the_templates_own_conversation(tiny):
    """Qwen2.5's chat template (as TRL ships it) renders tools itself and wraps tool results in its own
    ``<tool_response>`` user turn: the trajectory up to the tool message, decoded, is exactly the template's
    rendering of the whole conversation (user, assistant's tool call, tool result, next assistant turn)."""
    import copy

    trl_templates = pytest.importorskip("trl.chat_template_utils")
    model, tok = tiny
    tok = copy.deepcopy(tok)
    tok.chat_template = trl_templates.qwen2_5_chat_template
    rows, _ = envs.load_rows(spec("IncrementEnv", size=1), "train")
    call = {"name": "increment", "arguments": {"step": 4}}
    script = tok.encode(f"<tool_call>\n{json.dumps(call)}\n</tool_call>", add_special_tokens=False)
    (t,) = episodes(Scripted(model, script + [tok.eos_token_id]), tok, rows, n=1, tokens=len(script) + 8)
    assert t.turns[0]["calls"][0]["result"] == "4"
    a, b = t.turns[0]["observation"]
    asked = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]}
    convo = [*rows[0].prompt, asked, {"role": "tool", "content": "4"}]
    want = tok.apply_chat_template(convo, tools=rows[0].meta["tools"], tokenize=False, add_generation_prompt=True)
    assert "<tool_response>\n4\n</tool_response>" in want and "<tools>" in want
    assert tok.decode(t.prompt_ids + t.token_ids[:b]) == want


def test_trls_own_trainer_takes_the_same_class_and_exposes_the_same_tools(tiny_model_dir, tmp_path):
    """The class in tests/trl_envs.py is one TRL's GRPOTrainer trains on (one step, its Qwen2.5 template), and the
    tools TRL finds on it, with their schemas, are the ones declared here."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from transformers import AutoTokenizer
    from transformers.utils import get_json_schema

    from trl_envs import IncrementEnv

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = trl.chat_template_utils.qwen2_5_chat_template
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none", max_steps=1,
                          per_device_train_batch_size=4, num_generations=4, max_completion_length=16,
                          logging_steps=1, save_strategy="no")
    ds = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "go"}]} for _ in range(4)])
    trainer = trl.GRPOTrainer(model=str(tiny_model_dir), processing_class=tok, args=args,
                              environment_factory=IncrementEnv, train_dataset=ds)
    trainer.train()
    assert "rewards/IncrementEnv/mean" in trainer.state.log_history[0]
    rows, source = envs.load_rows(spec("IncrementEnv", size=1), "train")
    assert [t.__name__ for t in trainer.tools] == source["tools"]
    assert [get_json_schema(t) for t in trainer.tools] == rows[0].meta["tools"]


def test_a_step_whose_every_episode_failed_trains_nothing_under_rollout_correction(tiny_model_dir, tmp_path):
    """Every reset past the rows' hangs: each episode ends ``env_timeout`` before the model's first token, so the step
    has no token to train. With ``--correction`` on, that step is an update of nothing, counted, not the run's end
    (before: "rollout correction needs at least one response token in mask" ended the run)."""
    run = tmp_path / "run"
    r = cli("train", "--env", hostile("SlowResetLater", size=4), "--model", str(tiny_model_dir), "--steps", "2",
            "--output-dir", str(run), "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "8",
            "--correction", "decoupled_token_is", "--tool-timeout", "0.2", "--max-turns", "1", "--progress", "false",
            "--plots", "false")
    assert r.returncode == 0, r.stderr[-2000:]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["rewards/python_env/status/env_timeout"], m["grad_norm"]) for m in metrics] == \
        [(1, 4, 0.0), (2, 4, 0.0)]
