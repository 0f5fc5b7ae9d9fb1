"""``--tools python`` through the real trainer and the real eval (tiny random model).

Generation samples from :class:`scripted.Scripted` around the live model, so every trajectory opens
with a real tool call (``print(6 * 7)``); the trainer scores, masks and updates the unmodified model.
Checked: the tool ran in the sandbox and its output was inserted; rollouts.jsonl logs each turn's
tokens; lengths, overlong shaping and the tools/* metrics count the model's tokens only; the loss
mask is 0 exactly at the observation; eval records turns and tool calls per problem.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rewardlab import cli
from rewardlab.rewards.base import CheapReward, RewardResult
from rewardlab.rewards.length import overlong_penalty
from rewardlab.rollout.python_tool import ToolEngine
from rewardlab.train import build
from rewardlab.train.logprobs import pad_batch
from rewardlab.train.samples import Sample
from scripted import Scripted

CODE = "```python\nprint(6 * 7)\n```"


class SeesOutput(CheapReward):
    """1 when the graded text holds a tool's output block: the reward must only ever see the model's last turn."""

    name = "sees_output"
    isolated = True

    def __call__(self, completion: str, reference=None, **meta) -> RewardResult:
        return RewardResult(float("```output" in completion))


sees_output = SeesOutput()


@pytest.fixture
def scripted_tools(monkeypatch, tiny_model_dir):
    from transformers import AutoTokenizer

    script = AutoTokenizer.from_pretrained(tiny_model_dir).encode(CODE, add_special_tokens=False)

    class ScriptedToolEngine(ToolEngine):
        def generate(self, prompts, n, sampling):
            live = self.model
            self.model = Scripted(live, script)
            try:
                return super().generate(prompts, n, sampling)
            finally:
                self.model = live

    monkeypatch.setattr(build, "ToolEngine", ScriptedToolEngine)
    return script


def train_tools(tmp_path: Path, model: Path, *extra: str) -> tuple[list[dict], list[dict]]:
    out = tmp_path / "run"
    args = ["train", "--model", str(model), "--output-dir", str(out), "--task", "arith", "--task-limit", "8",
            "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "24",
            "--tools", "python", "--max-turns", "2", "--max-total-tokens", "64", "--micro-batch-size", "4",
            "--threads", "1", "--progress", "false", "--plots", "false", "--reward-workers", "1", *extra]
    cli.main(args)
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    return metrics, rollouts


def test_tool_rollouts_train_end_to_end(tiny_model_dir, tmp_path, scripted_tools):
    metrics, rollouts = train_tools(tmp_path, tiny_model_dir, "--algo", "dapo", "--overlong-cache", "8",
                                    "--dynamic-sampling", "false")  # DAPO's overlong shaping, every group kept
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["tools/use_rate"] == 1.0 and m["tools/calls_mean"] >= 1 and m["tools/ok_rate"] > 0
        assert m["tools/observation_tokens_mean"] > 0
    assert len(rollouts) == 8
    for r in rollouts:
        first, tool = r["turns"][0], r["turns"][1]
        assert first == {"role": "model", "token_ids": scripted_tools}
        assert tool["role"] == "tool" and tool["code"] == "print(6 * 7)" and tool["status"] == "ok"
        assert "```output\n42\n```" in r["completion"]
        model_tokens = sum(len(t["token_ids"]) for t in r["turns"] if t["role"] == "model")
        assert r["model_tokens"] == model_tokens < r["length"]  # observations are not the model's tokens
        assert r["overlong_penalty"] == pytest.approx(overlong_penalty(model_tokens, 24, 8, 1.0))
        assert "42" not in r["answer"] or r["turns"][-1]["role"] == "model"  # the graded text is the model's
    step1 = [r for r in rollouts if r["step"] == 1]
    assert metrics[0]["response_len/mean"] == pytest.approx(sum(r["model_tokens"] for r in step1) / len(step1))


def test_the_reward_grades_the_models_last_turn_never_the_tool_output(tiny_model_dir, tmp_path, scripted_tools):
    _, rollouts = train_tools(tmp_path, tiny_model_dir, "--algo", "grpo", "--steps", "1",
                              "--reward", f"{__name__}.sees_output")
    assert all("```output" in r["completion"] for r in rollouts)
    assert [r["reward"] for r in rollouts] == [0.0] * len(rollouts)


def test_the_steps_token_count_is_the_model_tokens():
    from types import SimpleNamespace

    from rewardlab.train.update import Micro, step_denominators

    run = SimpleNamespace(algo=SimpleNamespace(overlong_filter=False))
    a = Sample(group=0, row=None, prompt_text="", prompt_ids=[1], token_ids=[5, 6, 7, 8], text="", finish_reason="stop",
               score=0.0, task_score=0.0, components={}, info={}, loss_mask=[1, 0, 0, 1])
    b = Sample(group=0, row=None, prompt_text="", prompt_ids=[1], token_ids=[5, 6], text="", finish_reason="stop",
               score=0.0, task_score=0.0, components={}, info={}, loss_mask=[0, 0])  # nothing of the model's
    assert step_denominators(run, [Micro([a, b])]) == (2.0, 1.0)


def test_the_loss_mask_is_zero_exactly_at_the_observation():
    s = Sample(group=0, row=None, prompt_text="", prompt_ids=[1, 2], token_ids=[5, 6, 7, 8, 9], text="",
               finish_reason="stop", score=0.0, task_score=0.0, components={}, info={}, loss_mask=[1, 1, 0, 0, 1])
    plain = Sample(group=1, row=None, prompt_text="", prompt_ids=[3], token_ids=[4, 4], text="", finish_reason="stop",
                   score=0.0, task_score=0.0, components={}, info={})
    b = pad_batch([s, plain], pad_id=0, device="cpu")
    assert b["response_mask"].tolist() == [[1, 1, 0, 0, 1], [1, 1, 0, 0, 0]]
    assert b["attention_mask"][0, -5:].tolist() == [1, 1, 1, 1, 1]  # observations are attended to
    assert (s.model_tokens, plain.model_tokens) == (3, 2)


def test_tools_need_sane_budgets(tiny_model_dir, tmp_path, capsys):
    for extra, msg in ((["--max-turns", "0"], "--max-turns"),
                       (["--max-total-tokens", "8"], "--max-total-tokens"), (["--tools", "bash"], "unknown tools")):
        with pytest.raises(SystemExit) as e:
            cli.main(["train", "--model", str(tiny_model_dir), "--output-dir", str(tmp_path / "x"), "--tools", "python",
                      "--max-new-tokens", "16", *extra])
        assert e.value.code != 0
        assert msg in capsys.readouterr().err


def test_eval_with_tools_records_turns_and_calls(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardlab.eval import EvalConfig, run_eval

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    script = tok.encode(CODE, add_special_tokens=False)
    cfg = EvalConfig(suite="gsm8k", output=str(tmp_path / "ev"), limit=2, max_new_tokens=24, tools="python",
                     max_turns=2, quiet=True)
    res = run_eval(cfg, Scripted(model, script), tokenizer=tok)
    tools = res["details"]["gsm8k"]["tools"]
    assert tools["use_rate"] == 1.0 and tools["call_status"] == {"ok": tools["call_status"]["ok"]}
    assert res["configs"]["gsm8k"]["tools"]["tools"] == "python"
    rows = [json.loads(x) for x in (tmp_path / "ev" / "samples_gsm8k.jsonl").read_text().splitlines()[1:]]
    assert len(rows) == 2
    for r in rows:
        assert r["tool_calls"] == [len(r["tool_status"][0])] and r["tool_status"][0][0] == "ok"
        assert r["turns"][0] >= 2 and "```output\n42\n```" in r["completions"][0]
        assert "```python" in r["prompt"] and r["model_tokens"][0] < r["num_tokens"][0]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("ratio", ["token", "sequence"])
def test_the_loss_of_a_trajectory_is_the_loss_of_its_model_tokens(agg, ratio):
    """Per-trajectory aggregation (and GSPO's sequence ratio) over a tool trajectory equals the same loss on
    the model's tokens alone: observation positions, whatever their log-probs, change nothing."""
    from algo_cases import loss_with

    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(2, 7, generator=g, dtype=torch.float64)  # (B, R): row 0 holds 3 observation tokens
    old = lp + 0.05 * torch.randn(2, 7, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1], [1, 1, 1, 1, 0, 0, 0]], dtype=torch.float64)
    adv = torch.tensor([0.7, -0.4], dtype=torch.float64)
    kw = dict(agg=agg, ratio=ratio, max_len=8)
    full, _ = loss_with(lp, old, adv, mask, **kw)
    noisy = lp.clone()
    noisy[0, 2:5] = 5.0  # observation tokens: any value
    again, _ = loss_with(noisy, old, adv, mask, **kw)
    keep = [0, 1, 5, 6]  # row 0's model tokens, packed
    packed_lp = torch.stack([lp[0, keep], lp[1, :4]])
    packed_old = torch.stack([old[0, keep], old[1, :4]])
    packed, _ = loss_with(packed_lp, packed_old, adv, torch.ones(2, 4, dtype=torch.float64), **kw)
    assert float(full) == pytest.approx(float(again), rel=1e-12)
    assert float(full) == pytest.approx(float(packed), rel=1e-12)
