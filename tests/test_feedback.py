"""A critic that talks back (``--feedback``): the dual-agent rollout and its trainer side, tiny model.

The inserted feedback turn is the chat template's own text (separators included) and is encoded
alone; the second answer's log-probs are the model's over the exact ids; the critic sees the question
and the first answer; a run of ``rewardlab train --feedback`` logs the first and final rewards and,
with ``--feedback-train-every``, alternates actor and critic steps.
"""

from __future__ import annotations

import json

import pytest
import torch

from rewardlab import cli
from rewardlab.rollout.base import SamplingParams
from rewardlab.rollout.multiturn import feedback_ids, rollout_with_feedback
from scripted import Scripted, assert_sampler_logprobs


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), tok


def test_the_feedback_turn_is_the_templates_text_and_the_log_probs_are_exact(lm):
    model, tok = lm
    question = "What is 2 + 2?"
    prompt = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                     add_generation_prompt=True)
    script = tok.encode("5", add_special_tokens=False) + [tok.eos_token_id]  # a wrong answer, then end of turn
    seen = []

    def critic(indices, answers):
        seen.append((indices, answers))
        return ["Check the sum again."]

    (t,) = rollout_with_feedback(Scripted(model, script), tok, [prompt], n=1,
                                 sampling=SamplingParams(max_new_tokens=10, temperature=1.0, seed=0), critic=critic,
                                 max_total_tokens=80)
    assert seen == [([0], ["5"])]
    a, b = t.turns[0]["sampled"]
    o0, o1 = t.turns[0]["observation"]
    assert t.token_ids[a:b] == script and (b, t.turns[1]["sampled"][0]) == (o0, o1)
    # the ids up to the second answer decode to exactly what the template renders for the conversation
    convo = [{"role": "user", "content": question}, {"role": "assistant", "content": "5"},
             {"role": "user", "content": "Check the sum again."}]
    rendered = tok.apply_chat_template(convo, tokenize=False, add_generation_prompt=True)
    assert tok.decode(t.prompt_ids + t.token_ids[:o1]) == rendered
    assert t.token_ids[o0:o1] == feedback_ids(tok, "Check the sum again.", ended=True)
    assert set(t.loss_mask[o0:o1]) == {0} and set(t.loss_mask[o1:]) == {1} and o1 < len(t.token_ids)
    assert t.answer == tok.decode(t.token_ids[o1:], skip_special_tokens=True)
    assert_sampler_logprobs(model, t, o1)  # the second answer: the model's log-probs over the exact ids


def test_an_answer_cut_at_the_budget_gets_its_end_of_turn_inserted(lm):
    _, tok = lm
    ended = feedback_ids(tok, "ok", ended=True)
    cut = feedback_ids(tok, "ok", ended=False)
    assert tok.decode(cut) == tok.eos_token + tok.decode(ended)


def run(tmp_path, model, *extra):
    out = tmp_path / "run"
    cli.main(["train", "--model", str(model), "--output-dir", str(out), "--task", "arith", "--task-limit", "8",
              "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "12",
              "--feedback-tokens", "6", "--threads", "1", "--progress", "false", "--plots", "false",
              "--reward-workers", "1", "--algo", "grpo", *extra])
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    return metrics, rollouts


def test_feedback_from_the_reference_trains_end_to_end(tiny_model_dir, tmp_path):
    metrics, rollouts = run(tmp_path, tiny_model_dir, "--feedback", "ref")
    for m in metrics:
        assert {"feedback/first_reward", "feedback/final_reward", "feedback/improvement"} <= set(m)
        assert m["feedback/critic_step"] == 0 and "loss" in m
    for r in rollouts:
        roles = [t["role"] for t in r["turns"]]
        assert roles[:2] == ["model", "critic"] and r["turns"][1]["feedback"]
        assert r["model_tokens"] == sum(len(t["token_ids"]) for t in r["turns"] if t["role"] == "model")


def test_the_critic_trains_every_k_steps(tiny_model_dir, tmp_path):
    metrics, _ = run(tmp_path, tiny_model_dir, "--feedback", "policy", "--feedback-train-every", "2")
    assert [m["feedback/critic_step"] for m in metrics] == [0, 1]
    assert metrics[1]["response_len/max"] <= 6 < metrics[0]["response_len/max"]  # step 2 trained the feedback tokens


@pytest.mark.parametrize("extra,msg", [
    (["--feedback", "ref", "--tools", "python"], "without --tools"),
    (["--feedback", "ref", "--feedback-train-every", "2"], "--feedback policy"),
    (["--feedback", "ref", "--feedback-prompt", "no {slot}"], "template"),
    (["--algo", "grpo", "--feedback", "ref", "--group-size-policy", "variance"], "fixed --group-size"),
])
def test_bad_feedback_settings_are_one_line_errors(tiny_model_dir, tmp_path, capsys, extra, msg):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--model", str(tiny_model_dir), "--output-dir", str(tmp_path / "x"), *extra])
    assert e.value.code != 0 and msg in capsys.readouterr().err
