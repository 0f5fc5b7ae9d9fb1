"""Judges in the trainer and the CLI: ``rewardlab train --reward judge`` end to end against a loopback
fake OpenAI-compatible server (tests/judge_server.py) with the tiny random model, the same run with
the judge URL on a closed port (every answer ``judge_error`` within the deadline, counted in the
metrics, and the run finishes), ``--reward hybrid``, and ``rewardlab reward judge``.

The tiny model never answers arithmetic, so the runs show the judge an answer of its own making
(``--judge-extract test_judge_train.parity_answer``: "1" or "0" by the completion's length parity)
and the fake judge pays "1": groups get reward variance, and a group's repeated answers hit the cache.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from rewardlab.rewards.base import RewardResult
from judge_server import LiveServer, fake_judge_app, first_answer, free_port_url
from test_train import REPO, TESTS, base_args, read_jsonl, run_cli

Q = "Tom has 3 apples and buys 4 more. How many apples does Tom have now?"
DEADLINE = 3.0


def parity_answer(completion: str) -> str:
    """The answer the judge is shown in these runs: "1" for an odd-length completion, else "0"."""
    return str(len(completion) % 2)


def undecided_rule(completion: str, reference, **meta) -> RewardResult:
    """A rule reward that cannot decide odd-length completions (``too_complex``) and gives the rest 0.5."""
    if len(completion) % 2:
        return RewardResult(None, {"status": "too_complex"})
    return RewardResult(0.5, {"status": "ok"})


def pays_one(body: dict) -> str:
    """A fake judge that restates the answer it was shown and calls "1" correct."""
    answer = first_answer(body)
    return f"FINAL ANSWER: {answer}\nVERDICT: {'CORRECT' if answer == '1' else 'INCORRECT'}"


def judge_args(model, out, url: str, **over) -> list[str]:
    opts = dict(algo="grpo", reward="judge", judge_url=url, judge_model="fake-judge",
                judge_extract="test_judge_train.parity_answer", judge_deadline=DEADLINE)
    opts.update(over)
    return base_args(model, out, **opts)


@pytest.fixture(scope="module")
def live():
    with LiveServer(fake_judge_app(pays_one)) as server:
        yield server


# ---------------------------------------------------------------------------- settings


def test_train_carries_every_judge_setting_with_its_default_and_help():
    from rewardlab.fields import attribute_docs
    from rewardlab.rewards.judge import JudgeSettings
    from rewardlab.train.config import TrainConfig, field_docs, judge_of

    assert judge_of(TrainConfig()) == JudgeSettings()
    assert {k: field_docs()[k] for k in attribute_docs(JudgeSettings)} == attribute_docs(JudgeSettings)


def test_build_reward_makes_a_judge_a_hybrid_or_a_clear_error(tmp_path):
    from rewardlab.errors import RewardlabError
    from rewardlab.rewards import HybridReward, JudgeReward, math_reward
    from rewardlab.rewards.combine import Combined
    from rewardlab.train.config import build_config
    from rewardlab.train.runtime import build_reward

    template = tmp_path / "rubric.txt"
    template.write_text("Q: {question}\nGold: {reference}\nAnswer: {answer}\nEquivalent?")
    over = {"reward": "judge", "judge_url": "http://127.0.0.1:9/v1", "judge_model": "m", "judge_deadline": "2.5",
            "judge_concurrency": "3", "judge_template": str(template), "judge_failure_score": "-1"}
    judge, name = build_reward(build_config(None, over), [])
    assert isinstance(judge, JudgeReward) and name == "judge"
    assert ((judge.base_url, judge.model, judge.deadline, judge.max_concurrency)
            == ("http://127.0.0.1:9/v1", "m", 2.5, 3))
    assert judge.template == template.read_text() and judge.scores["judge_error"] == judge.scores["judge_timeout"] == -1
    assert judge.messages(Q, "7", "7")[1]["content"] == f"Q: {Q}\nGold: 7\nAnswer: 7\nEquivalent?"

    hybrid, name = build_reward(build_config(None, {**over, "reward": "hybrid"}), [])
    assert isinstance(hybrid, HybridReward) and hybrid.rule is math_reward and name == "hybrid"
    combined, _ = build_reward(build_config(None, {**over, "format_weight": "0.5"}), [])
    assert isinstance(combined, Combined)

    for bad, message in [({"judge_url": None}, "needs --judge-url"), ({"judge_url": "127.0.0.1:8000"}, "http://"),
                         ({"judge_template": str(tmp_path / "none.txt")}, "no such file"),
                         ({"judge_extract": "no_such_module.fn"}, "cannot load"),
                         ({"judge_deadline": "0"}, "--judge-deadline must be > 0")]:
        with pytest.raises(RewardlabError, match=message):
            build_reward(build_config(None, {**over, **bad}), [])
    template.write_text("Q: {question} Gold: {reference}")  # the judge would never see the answer
    with pytest.raises(RewardlabError, match=r"never shows the judge \{answer\}"):
        build_reward(build_config(None, over), [])


# ---------------------------------------------------------------------------- rewardlab train


def test_train_with_a_judge_end_to_end(live, tiny_model_dir, tmp_path):
    live.app.state.requests.clear()
    out = tmp_path / "judge"
    run_cli(judge_args(tiny_model_dir, out, live.url))
    metrics, rollouts = read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "rollouts.jsonl")
    assert [m["step"] for m in metrics] == [1, 2] and (out / "checkpoints" / "step-000002").is_dir()
    for r in rollouts:
        info = r["info"]
        assert info["status"] == "ok" and info["judged"] is True and info["answer"] == parity_answer(r["completion"])
        assert r["reward"] == (1.0 if info["answer"] == "1" else 0.0) and info["verdict"] in ("CORRECT", "INCORRECT")
    assert {r["reward"] for r in rollouts} == {0.0, 1.0}  # groups with variance: the judge's verdicts train
    requests = live.app.state.requests
    misses = [r for r in rollouts if r["info"]["cache"] == "miss"]
    assert len(requests) == len(misses) and requests[0]["model"] == "fake-judge"
    user = requests[0]["messages"][1]["content"]
    assert user.startswith("<question>\n") and re.search(r"<student_answer>\n[01]\n</student_answer>", user), user
    for m in metrics:
        step = [r for r in rollouts if r["step"] == m["step"]]
        hits = sum(r["info"]["cache"] == "hit" for r in step)
        assert m["judge/judged_frac"] == 1.0 and m["judge/cache_hits"] == hits > 0
        assert m["judge/cache_hit_rate"] == pytest.approx(hits / len(step))
        assert m["judge/requests"] == len(step) - hits and m["judge/prompt_tokens"] > 0
        assert 0 < m["judge/latency_p50_s"] <= m["judge/latency_max_s"] <= DEADLINE
        assert not any(k.startswith("judge/status/") for k in m)
        assert m["rewards/judge/mean"] == pytest.approx(sum(r["reward"] for r in step) / len(step))


def test_train_with_a_dead_judge_finishes_with_judge_errors_counted(tiny_model_dir, tmp_path):
    out = tmp_path / "dead"
    run_cli(judge_args(tiny_model_dir, out, free_port_url()))  # nothing listens there
    metrics, rollouts = read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "rollouts.jsonl")
    assert [m["step"] for m in metrics] == [1, 2] and (out / "checkpoints" / "step-000002").is_dir()
    assert rollouts and all(r["info"]["status"] == "judge_error" and r["reward"] == 0.0 for r in rollouts)
    assert all(r["info"]["latency_s"] <= DEADLINE for r in rollouts)  # within the deadline, never a hang
    assert any(r["info"].get("phase") == "circuit_open" for r in rollouts)  # the breaker stopped asking
    for m in metrics:
        n = sum(r["step"] == m["step"] for r in rollouts)
        assert m["judge/status/judge_error"] == n == m["completions/generated"]
        assert m["rewards/judge/status/judge_error"] == n
        assert m["judge/judged_frac"] == 1.0 and m["judge/cache_hits"] == 0 and m["judge/latency_max_s"] <= DEADLINE
        assert m["time/reward"] < n * DEADLINE


def test_train_with_a_hybrid_judges_only_what_the_rule_leaves(live, tiny_model_dir, tmp_path):
    out = tmp_path / "hybrid"
    run_cli(judge_args(tiny_model_dir, out, live.url, reward="hybrid", judge_rule="test_judge_train.undecided_rule",
                       steps=1))
    (m,), rollouts = read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "rollouts.jsonl")
    judged = [r for r in rollouts if r["info"]["judged"]]
    assert 0 < len(judged) < len(rollouts)
    for r in rollouts:
        odd = len(r["completion"]) % 2 == 1
        assert r["info"]["decided_by"] == ("judge" if odd else "rule") and r["info"]["judged"] is odd
        assert r["reward"] == (1.0 if odd else 0.5)  # the judge pays the answer "1"; the rule gave 0.5
    assert m["judge/judged_frac"] == pytest.approx(len(judged) / len(rollouts))
    assert m["rewards/hybrid/mean"] == pytest.approx(sum(r["reward"] for r in rollouts) / len(rollouts))


# ---------------------------------------------------------------------------- rewardlab reward judge


def reward_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "rewardlab", "reward", *args], capture_output=True, text=True,
                          env=env, cwd=str(REPO), timeout=60)


def test_reward_command_prints_the_verdict_and_why(live):
    def judge(url: str, completion: str) -> subprocess.CompletedProcess:
        return reward_cli("judge", "--judge-url", url, "--judge-model", "fake-judge", "--judge-deadline", "2",
                          "--judge-extract", "test_judge_train.parity_answer", "--question", Q,
                          "--completion", completion, "--gold", "1")

    right, wrong, dead = judge(live.url, "7"), judge(live.url, "70"), judge(free_port_url(), "7")
    assert right.returncode == 0, right.stderr
    assert "score=1  status=ok" in right.stdout and "verdict='CORRECT'" in right.stdout
    assert "restated='1'" in right.stdout and "reply='FINAL ANSWER: 1\\nVERDICT: CORRECT'" in right.stdout
    assert "score=0  status=ok" in wrong.stdout and "verdict='INCORRECT'" in wrong.stdout
    assert "score=0  status=judge_error" in dead.stdout and "ConnectError" in dead.stdout
    assert live.app.state.requests[-1]["messages"][1]["content"].startswith(f"<question>\n{Q}\n</question>")
    missing = reward_cli("judge", "--completion", "7", "--gold", "7")
    assert missing.returncode != 0 and "needs --judge-url" in missing.stderr
