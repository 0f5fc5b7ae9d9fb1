"""RewardModelReward equals TRL's reward-model path (GRPOTrainer._calculate_rewards with a model as the
reward function) on a tiny random sequence classifier, for chat and plain-text prompts."""

from __future__ import annotations

import pickle

import pytest
import torch

from rewardlab.rewards import score_batch
from rewardlab.rewards.reward_model import RewardModelReward

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

CHAT_PROMPTS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime number."}],
    [{"role": "user", "content": "Say hi"}],
]
COMPLETIONS = ["2 + 2 = 4.", "7", "Hello there, how are you doing today? I am fine."]
TEXT_PROMPTS = ["Q: What is 2 + 2?\nA:", "Q: Name a prime.\nA:", "Hi"]


@pytest.fixture(scope="module")
def rm_dir(tiny_model_dir, tmp_path_factory):
    """A random 1-label sequence classifier (the tiny Qwen2 + a seeded score head) and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=1)
    with torch.no_grad():
        model.score.weight.normal_(0, 1.0)  # a head large enough that the scores differ visibly
    out = tmp_path_factory.mktemp("tiny-rm")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(out)
    return out


def trl_rewards(rm_dir, policy_dir, tmp_path, prompts, completions):
    """The scores TRL's GRPOTrainer computes for a reward model given by its path."""
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                          max_steps=1, per_device_train_batch_size=3, num_generations=3, max_completion_length=8,
                          save_strategy="no", gradient_checkpointing=False)
    ds = datasets.Dataset.from_dict({"prompt": prompts})
    trainer = trl.GRPOTrainer(model=str(policy_dir), reward_funcs=[str(rm_dir)], args=args, train_dataset=ds)
    if isinstance(prompts[0], list):
        comps = [[{"role": "assistant", "content": c}] for c in completions]
    else:
        comps = list(completions)
    inputs = [{"prompt": p, "completion": c} for p, c in zip(prompts, comps)]
    ids = [[0] for _ in completions]
    return trainer._calculate_rewards(inputs, prompts, comps, ids)[:, 0].tolist()


@pytest.mark.parametrize("kind", ["chat", "text"])
def test_scores_equal_trls_reward_model_path(rm_dir, tiny_model_dir, tmp_path, kind):
    prompts = CHAT_PROMPTS if kind == "chat" else TEXT_PROMPTS
    want = trl_rewards(rm_dir, tiny_model_dir, tmp_path, prompts, COMPLETIONS)
    rm = RewardModelReward(rm_dir, batch_size=2, device="cpu")  # 2: batches split differently than TRL's 3
    got = [r.score for r in rm.score_many(COMPLETIONS, prompts)]
    assert got == pytest.approx(want, abs=1e-5), (got, want)
    assert len(set(round(x, 4) for x in got)) == 3  # a fixture that gives distinct scores
    one = [rm(c, None, prompt=p).score for c, p in zip(COMPLETIONS, prompts)]
    assert one == pytest.approx(want, abs=1e-5)


def test_chat_formatting_and_the_pool_path(rm_dir):
    rm = RewardModelReward(rm_dir)
    text = rm.text(CHAT_PROMPTS[0], "4")
    assert text.endswith("<|im_start|>assistant\n4<|im_end|>\n") and "What is 2 + 2?" in text
    assert rm.text("Q:", " 4") == "Q: 4"
    pooled = score_batch(rm, COMPLETIONS, [None] * 3, [{"prompt": p} for p in CHAT_PROMPTS], deadline=30.0)
    direct = rm.score_many(COMPLETIONS, CHAT_PROMPTS)
    assert [r.score for r in pooled] == pytest.approx([r.score for r in direct], abs=1e-5)
    assert all(r.status == "ok" for r in pooled)
    clone = pickle.loads(pickle.dumps(rm))
    assert clone._model is None and clone("4", None, prompt=CHAT_PROMPTS[0]).score == pytest.approx(
        rm("4", None, prompt=CHAT_PROMPTS[0]).score, abs=1e-5)


def test_a_missing_model_is_an_error_result_not_an_exception(tmp_path):
    r = RewardModelReward(tmp_path / "nothing-here")("hi", None, prompt="x")
    assert r.score is None and r.status == "error"
