"""Environments (``rewardlab.envs``): specs, the reasoning-gym adapter against the real package, the CLI
(``train --env``, ``eval --env``, ``envs list``), bad input, and a learning test with its controls.

reasoning-gym is installed by setup (dev extras, ``reasoning-gym==0.1.25``); every test here runs its
code: rows from its generators, rewards from its own ``score_answer``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewardlab.envs import KINDS, is_env, load_rows, short_name, spec_of
from rewardlab.envs.gym import ANSWER_FORMATS, catalogue, extract, gym_reward
from rewardlab.errors import RewardlabError

rg = pytest.importorskip("reasoning_gym")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import envs_learning  # noqa: E402  (bench/envs_learning.py: the learning recipe the README reports)

ENV_CLI = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "REWARDLAB_REWARD_WORKERS": "1"}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rewardlab", *args], capture_output=True, text=True,
                          env={**os.environ, **ENV_CLI}, cwd=cwd, timeout=600)


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr


# ----------------------------------------------------------------------------- specs


@pytest.mark.parametrize(("text", "kind", "name", "options"), [
    ("reasoning_gym:spell_backward", "reasoning_gym", "spell_backward", {}),
    ("reasoning_gym:chain_sum?size=5&min_terms=2&answer=boxed", "reasoning_gym", "chain_sum",
     {"size": 5, "min_terms": 2, "answer": "boxed"}),
    ("  reasoning_gym:x?flag=true&ratio=0.5&list=[1,2]&word=abc ", "reasoning_gym", "x",
     {"flag": True, "ratio": 0.5, "list": [1, 2], "word": "abc"}),
    ("reasoning_gym:x?dataset=/data/c++/a+b.jsonl&amp=a%26b&empty=", "reasoning_gym", "x",
     {"dataset": "/data/c++/a+b.jsonl", "amp": "a&b", "empty": ""}),  # a path's '+' is not a space
])
def test_spec_parses_kind_name_and_json_options(text, kind, name, options):
    spec = spec_of(text)
    assert (spec.kind, spec.name, spec.options) == (kind, name, options)
    assert is_env(text)


@pytest.mark.parametrize(("text", "needle"), [
    ("nokind:thing", "KIND one of"),
    ("reasoning_gym:", "needs a name"),
    ("reasoning_gym:x?size=1&size=2", "given twice"),
    ("reasoning_gym:x?novalue", "key=value"),
    ("reasoning_gym:x?a=1&&b=2", "key=value"),
    ("reasoning_gym:x?=1", "key=value"),
])
def test_bad_specs_are_one_line_errors(text, needle):
    with pytest.raises(RewardlabError, match=needle):
        spec_of(text)


@pytest.mark.parametrize("text", ["gsm8k", "arith:2", "rows.jsonl", "math500", "C:/data/rows.jsonl"])
def test_tasks_and_files_are_not_environments(text):
    assert not is_env(text)


def test_short_names_are_safe_and_distinct_per_option_set():
    a, b = short_name("reasoning_gym:chain_sum?size=5"), short_name("reasoning_gym:chain_sum?size=6")
    assert a != b and a.startswith("reasoning_gym-chain_sum-")
    assert short_name("reasoning_gym:chain_sum") == "reasoning_gym-chain_sum"
    assert all(c.isalnum() or c in "._-" for c in a)


# ----------------------------------------------------------------------------- the reasoning-gym adapter

SAMPLED = ["spell_backward", "basic_arithmetic", "chain_sum", "letter_counting", "word_sorting", "gcd", "syllogism",
           "family_relationships", "number_sorting", "caesar_cipher", "leg_counting", "propositional_logic"]


@pytest.mark.parametrize("name", SAMPLED)
@pytest.mark.parametrize("fmt", list(ANSWER_FORMATS))
def test_gold_answers_score_as_reasoning_gym_scores_them(name, fmt):
    """Conformance with the package: the rows are its generator's entries, and our reward on a completion
    that marks the gold answer equals the package's ``score_answer(gold, entry)``; a wrong answer equals its
    score of that answer too."""
    rows, source = load_rows(f"reasoning_gym:{name}?answer={fmt}", "test", limit=6, seed=3)
    ds = rg.create_dataset(name, size=6, seed=source["seed"])
    for i, row in enumerate(rows):
        entry = row.reference["entry"]
        assert entry == ds[i]
        gold = str(entry["answer"])
        marked = {"tag": f"Thinking...\n<answer>{gold}</answer>", "boxed": f"so \\boxed{{{gold}}}",
                  "text": f"  {gold}\n"}[fmt]
        if fmt == "boxed" and ("{" in gold or "}" in gold):
            continue  # a gold with braces cannot be boxed unambiguously
        got = gym_reward(marked, row.reference)
        assert got.ok and got.score == pytest.approx(ds.score_answer(gold, ds[i])), (name, fmt, got)
        wrong = gym_reward(marked.replace(gold, gold + "9"), row.reference)
        assert wrong.score == pytest.approx(ds.score_answer(gold + "9", ds[i]))
        assert ANSWER_FORMATS[fmt] in row.prompt[-1]["content"]


def test_train_and_test_splits_are_different_generator_seeds_and_limit_keeps_the_first_rows():
    train, s_train = load_rows("reasoning_gym:chain_sum", "train", limit=20)
    test, s_test = load_rows("reasoning_gym:chain_sum", "test", limit=20)
    assert s_train["seed"] != s_test["seed"]
    assert [r.reference for r in train] != [r.reference for r in test]
    more, _ = load_rows("reasoning_gym:chain_sum", "train", limit=40)
    assert [r.reference for r in more[:20]] == [r.reference for r in train]
    assert s_train["package"].startswith("reasoning-gym ") and s_train["records"] == 20
    again, s_again = load_rows("reasoning_gym:chain_sum", "train", limit=20)
    assert s_again["sha256"] == s_train["sha256"]


@pytest.mark.parametrize(("completion", "expected"), [
    ("<answer>7</answer>", "7"),
    ("<answer>3</answer> no wait <answer> 7 </answer>", "7"),  # the last one, as reasoning-gym reads it
    ("<answer>7", None),  # never closed
    ("7</answer>", None),  # never opened
    ("</answer><answer>", None),
    ("<answer></answer>", ""),
])
def test_tag_extraction_reads_the_last_closed_answer(completion, expected):
    assert extract(completion, "tag") == expected
    ref = rg.utils.extract_answer(completion)
    if expected is not None and completion.count("<answer>") == completion.count("</answer>"):
        assert ref == expected  # the same as reasoning-gym's own extractor where both tags pair up


def test_extraction_is_linear_on_hostile_text():
    """An unclosed tag repeated 200,000 times (reasoning-gym's regex scans from every opening)."""
    text = "<answer>" * 200_000 + "x"
    t = time.perf_counter()
    assert extract(text, "tag") is None
    assert extract(text + "</answer>", "tag") == "x"
    assert time.perf_counter() - t < 1.0


def test_could_not_grade_is_never_a_silent_zero():
    rows, _ = load_rows("reasoning_gym:spell_backward", "test", limit=1)
    ref = rows[0].reference
    assert gym_reward("I think it is backwards.", ref).status == "no_answer"
    assert gym_reward("<answer>" + "a" * 5000 + "</answer>", ref).status == "answer_too_long"
    assert gym_reward("<answer>x</answer>", {"question": "not a row"}).score is None
    broken = {**ref, "entry": {**ref["entry"], "metadata": {"source_dataset": "no_such_dataset"}}}
    got = gym_reward("<answer>x</answer>", broken)
    assert got.status == "env_error" and got.score == 0.0 and "no_such_dataset" in got.info["error"]


@pytest.mark.parametrize(("spec", "needle"), [
    ("reasoning_gym:no_such_dataset", "unknown dataset"),
    ("reasoning_gym:spell_backward?bogus=1", "bad options"),
    ("reasoning_gym:spell_backward?min_word_len=9&max_word_len=3", "bad options"),
    ("reasoning_gym:spell_backward?answer=xml", "answer='xml'"),
])
def test_bad_environment_options_are_one_line_errors(spec, needle):
    with pytest.raises(RewardlabError, match=needle):
        load_rows(spec, "train", limit=2)


def test_catalogue_lists_every_reasoning_gym_dataset_with_its_options():
    from reasoning_gym.factory import DATASETS

    cat = catalogue()
    assert set(cat) == set(DATASETS) and len(cat) >= 100
    assert cat["spell_backward"]["min_word_len"] == 3
    assert set(KINDS) >= {"reasoning_gym"}


# ----------------------------------------------------------------------------- through the CLI


def test_cli_envs_list_train_and_eval_on_a_reasoning_gym_task(tiny_model_dir, tmp_path):
    listed = cli("envs", "list")
    assert listed.returncode == 0 and "reasoning_gym:spell_backward" in listed.stdout, listed.stderr
    assert listed.stdout.count("\n  reasoning_gym:") == len(catalogue())
    env = "reasoning_gym:spell_backward?answer=text&min_word_len=3&max_word_len=3"
    run = tmp_path / "run"
    r = cli("train", "--env", env, "--model", str(tiny_model_dir), "--steps", "2", "--output-dir", str(run),
            "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4", "--progress", "false",
            "--plots", "false", "--eval-every", "2", "--eval-suite", env, "--eval-limit", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "rewards/reasoning_gym/mean" in m]
    evals = [m for m in metrics if f"eval/{short_name(env)}/problems" in m]
    assert [m["step"] for m in steps] == [1, 2] and [m["step"] for m in evals] == [0, 2], metrics
    assert evals[-1][f"eval/{short_name(env)}/problems"] == 3
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all(r["row_id"].startswith("reasoning_gym/spell_backward/train/") for r in rollouts)
    out = tmp_path / "eval"
    e = cli("eval", str(run / "checkpoints" / "step-000002"), "--env", env, "--limit", "3", "--output", str(out),
            "--max-new-tokens", "4", "--quiet")
    assert e.returncode == 0, e.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    name = short_name(env)
    assert results["results"][name]["n"] == 3 and results["details"][name]["grader_status"] == {"ok": 3}
    assert 0.0 <= results["details"][name]["mean_score"] <= 1.0
    from rewardlab.eval import format_table

    partial = {**results, "details": {name: {**results["details"][name], "mean_score": 0.25}}}
    assert f"{name}: mean score 0.250 over 3 samples (partial credit" in format_table(partial)
    assert "mean score" not in format_table(results) or results["details"][name]["mean_score"] > 0
    data = results["configs"][name]["data"]
    assert (data["kind"], data["dataset"], data["split"]) == ("reasoning_gym", "spell_backward", "test")
    assert data["package"] == "reasoning-gym " + importlib.metadata.version("reasoning-gym")


@pytest.mark.parametrize(("args", "needle"), [
    (("train", "--env", "reasoning_gym:no_such_dataset", "--steps", "1"), "unknown dataset"),
    (("train", "--env", "nokind:x", "--steps", "1"), "an environment reasoning_gym:NAME"),
    (("train", "--env", "reasoning_gym:spell_backward", "--task", "arith"), "--env and --task"),
    (("eval", "default", "--env", "reasoning_gym:spell_backward?answer=xml", "--limit", "1"), "answer='xml'"),
])
def test_cli_bad_environment_is_one_line(args, needle, tmp_path):
    one_line_error(cli(*args, cwd=tmp_path), needle)


# ----------------------------------------------------------------------------- learning

SEEDS = (0, 1, 2)
STEPS = 40
RISE = 0.05  # each seed: reasoning-gym's score, last 5 steps minus first 5 (measured +0.076 to +0.094)
FLAT = 0.0  # flipped advantages: may not rise at all (measured -0.023 to -0.025)
NOISE = 0.03  # a coin-flip reward: may not raise the score by more than this


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["normal", "flipped", "random"])
def test_a_tiny_model_learns_a_reasoning_gym_task_and_its_controls_do_not(mode, tiny_model_dir, tmp_path):
    """bench/envs_learning.py's recipe, 3 seeds: GRPO on ``reasoning_gym:spell_backward`` (3-letter words,
    the completion is the answer) raises reasoning-gym's own score; with the advantages negated, or with a
    coin-flip reward, it does not."""
    changes = [envs_learning.change(envs_learning.run(str(tiny_model_dir), tmp_path, s, STEPS, mode)) for s in SEEDS]
    shown = " ".join(f"{c:+.3f}" for c in changes)
    if mode == "normal":
        assert min(changes) >= RISE, shown
    elif mode == "flipped":
        assert max(changes) <= FLAT, shown
    else:
        assert statistics.mean(changes) <= NOISE, shown


# ----------------------------------------------------------------------------- OpenEnv: a real server on loopback

openenv_core = pytest.importorskip("openenv.core")
from openenv_arith import ArithEnvironment, make_app  # noqa: E402  (tests/openenv_arith.py: an OpenEnv environment)
from test_server import LiveServer  # noqa: E402


@pytest.fixture(scope="module")
def arith_server():
    with LiveServer(make_app()) as live:
        yield live.url


def _sum(prompt: str) -> int:
    a, b = (int(x) for x in prompt.rstrip("?").split("is ", 1)[1].split(" + "))
    return a + b


def test_openenv_rows_are_seeded_resets_and_the_reward_is_the_servers(arith_server):
    from rewardlab.envs.openenv import openenv_reward

    rows, source = load_rows(f"openenv:{arith_server}?size=6", "train", seed=1)
    again, source_again = load_rows(f"openenv:{arith_server}?size=6", "train", seed=1)
    test, _ = load_rows(f"openenv:{arith_server}?size=6", "test", seed=1)
    assert [r.prompt for r in rows] == [r.prompt for r in again] and source["sha256"] == source_again["sha256"]
    assert [r.reference["reset"] for r in rows] != [r.reference["reset"] for r in test]
    for row in rows:
        right = _sum(row.prompt[0]["content"])
        assert openenv_reward(f"The answer is {right}", row.reference).to_dict() == {"score": 1.0,
                                                                                    "info": {"status": "ok"}}
        assert openenv_reward(f"The answer is {right + 1}", row.reference).score == 0.0


@pytest.mark.parametrize(("mode", "status"), [("multi", "not_done"), ("raise", "env_error")])
def test_openenv_episodes_that_cannot_be_graded_say_why(arith_server, mode, status, monkeypatch):
    from rewardlab.envs.openenv import openenv_reward

    rows, _ = load_rows(f"openenv:{arith_server}?size=1", "train")
    monkeypatch.setattr(ArithEnvironment, "mode", mode)
    got = openenv_reward("2", rows[0].reference)
    assert got.status == status and got.score == 0.0


def test_openenv_episodes_run_one_step_per_model_turn_until_the_server_says_done(arith_server, monkeypatch,
                                                                                   tiny_model_dir):
    """Multi-turn: each model turn is one ``step``; the server's reply comes back as a user message through the chat
    template (encoded alone, loss mask 0) until the episode is done; its last reward is the episode's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardlab.envs.openenv import OpenEnvEpisode
    from rewardlab.rollout.base import SamplingParams, format_prompt
    from rewardlab.rollout.episodes import rollout_episodes
    from rewardlab.rollout.multiturn import feedback_ids
    from rewardlab.rollout.tool_settings import ToolSettings
    from scripted import Scripted

    monkeypatch.setattr(ArithEnvironment, "mode", "retry")
    rows, _ = load_rows(f"openenv:{arith_server}?size=2", "train")
    model, tok = (AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir))
    prompts = [format_prompt(tok, r.prompt) for r in rows]

    def run(script: list[int], times: int) -> list:
        return rollout_episodes(Scripted(model, script, times=times), tok, prompts, 1,
                                SamplingParams(max_new_tokens=12, seed=0), settings=ToolSettings(max_total_tokens=300),
                                open_episode=lambda i: OpenEnvEpisode(rows[i]))

    wrong = tok.encode(" 99", add_special_tokens=False) + [tok.eos_token_id]
    for t in run(wrong, times=3):  # three wrong answers: two replies, then done at the third step
        assert t.tool_calls == 3 and t.episode["status"] == "ok" and t.episode["reward"] == 0.0, t.episode
        spans = [turn["observation"] for turn in t.turns if turn.get("observation")]
        assert len(spans) == 2
        for a, b in spans:
            assert t.token_ids[a:b] == feedback_ids(tok, "No. Try again.", ended=True)
            assert t.loss_mask[a:b] == [0] * (b - a)
    right = _sum(rows[0].prompt[0]["content"])
    first = run(tok.encode(f" {right}", add_special_tokens=False) + [tok.eos_token_id], times=1)[0]
    assert first.tool_calls == 1 and first.episode == {"reward": 1.0, "status": "ok",
                                                       "tool_seconds": first.episode["tool_seconds"]}


def test_openenv_server_down_is_a_start_up_error_and_a_counted_status_later():
    from rewardlab.envs.openenv import openenv_reward

    with LiveServer(make_app()) as live:
        url = live.url
        rows, _ = load_rows(f"openenv:{url}?size=1", "train")
    with pytest.raises(RewardlabError, match="cannot reset the environment"):
        load_rows(f"openenv:{url}?size=1", "train")
    assert openenv_reward("3", rows[0].reference).status == "env_unreachable"


@pytest.mark.parametrize(("spec", "needle"), [("openenv:127.0.0.1:8000", "give the server's URL"),
                                              ("openenv:http://127.0.0.1:1?bogus=1", "unknown option")])
def test_openenv_bad_specs(spec, needle):
    with pytest.raises(RewardlabError, match=needle):
        load_rows(spec, "train")


def test_cli_train_and_eval_against_an_openenv_server(arith_server, tiny_model_dir, tmp_path):
    env = f"openenv:{arith_server}?size=8"
    run = tmp_path / "run"
    r = cli("train", "--env", env, "--model", str(tiny_model_dir), "--steps", "2", "--output-dir", str(run),
            "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4", "--progress", "false",
            "--plots", "false")
    assert r.returncode == 0, r.stderr[-2000:]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and "rewards/openenv/mean" in metrics[0]
    statuses = {k: v for m in metrics for k, v in m.items() if "/status/" in k}
    assert not statuses, statuses  # every episode graded "ok"
    out = tmp_path / "eval"
    e = cli("eval", str(run / "checkpoints" / "step-000002"), "--env", env, "--limit", "3", "--output", str(out),
            "--max-new-tokens", "4", "--quiet")
    assert e.returncode == 0, e.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    name = short_name(env)
    assert results["results"][name]["n"] == 3 and results["details"][name]["grader_status"] == {"ok": 3}


def test_openenv_episodes_run_in_the_async_worker_as_in_the_trainer(arith_server, tiny_model_dir, tmp_path):
    """``--async-steps 1``: the generation worker steps the server itself; step 1 (the start's weights either way)
    is the synchronous run's step 1, turn for turn, with the server's verdicts; step 2 is one version stale."""
    from test_async import sync_and_async

    args = ["train", "--env", f"openenv:{arith_server}?size=8", "--model", str(tiny_model_dir), "--steps", "2",
            "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4", "--progress", "false",
            "--plots", "false", "--threads", "1", "--tool-timeout", "20"]  # a loaded machine: no reset times out
    sync, k1 = sync_and_async(cli, args, tmp_path)
    assert [(r["turns"], r["reward"]) for r in sync if r["step"] == 1] == \
        [(r["turns"], r["reward"]) for r in k1 if r["step"] == 1]
    assert [r["info"]["policy_version"] for r in k1] == [0] * 8 and all(r["info"]["status"] == "ok" for r in k1)
    assert all(r["turns"] for r in k1)


def test_a_dataset_whose_scorer_pays_nonsense_is_refused_unless_allowed():
    """reasoning-gym 0.1.25's game_of_life_halting compares bool(answer) with bool(gold): any non-empty answer
    scores 1.0. Loading it is a one-line refusal; ``allow_degenerate=true`` loads it anyway."""
    ds = rg.create_dataset("game_of_life_halting", size=4, seed=0)
    assert [ds.score_answer("nonsense", ds[i]) for i in range(4)] == [1.0] * 4  # the package's own behaviour
    with pytest.raises(RewardlabError, match="pays a nonsense answer"):
        load_rows("reasoning_gym:game_of_life_halting", "train", limit=8)
    rows, _ = load_rows("reasoning_gym:game_of_life_halting?allow_degenerate=true", "train", limit=8)
    assert len(rows) == 8
