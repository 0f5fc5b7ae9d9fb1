"""The TRL adapter inside real TRL: ``GRPOTrainer`` for one step on CPU with a tiny random model.

Slow-marked (run with ``-m slow``); about 5-10 s on one core.
"""

from __future__ import annotations

import math

import pytest

from rewardlab.adapters.trl import TRLReward, as_trl, as_trl_async
from rewardlab.rewards.base import RewardResult, registered_rewards
from rewardlab.rewards.format import OneAnswer
from rewardlab.rewards.length import Overlong

pytestmark = pytest.mark.slow


def ends_with_answer(completion: str, reference, **meta) -> RewardResult:
    """1.0 when the completion ends with the reference; None without one (TRL then NaN-skips it)."""
    if not reference:
        return RewardResult(None, {"status": "no_reference"})
    return RewardResult(float(completion.strip().endswith(reference)), {})


def always_broken(completion: str, reference, **meta) -> RewardResult:
    raise RuntimeError("a grader bug must not stop training")


class Recording(TRLReward):
    """The sync adapter, remembering what it returned to TRL."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.returned: list[float | None] = []
        self.lengths: list[int] = []

    def __call__(self, /, prompts=None, completions=(), completion_ids=None, **kwargs):
        out = super().__call__(prompts, completions, completion_ids, **kwargs)
        self.returned += out
        self.lengths += [len(ids) for ids in completion_ids]
        return out


def test_trl_sees_names_and_async():
    from trl.trainer.utils import get_callable_name, is_async_callable

    sync_fn, async_fn = as_trl(OneAnswer()), as_trl_async(OneAnswer(), name="fmt")
    assert is_async_callable(async_fn) and not is_async_callable(sync_fn)
    assert get_callable_name(sync_fn) == "one_answer" and get_callable_name(async_fn) == "fmt"


@pytest.mark.parametrize("conversational", [True, False])
def test_grpo_trainer_one_step_logs_reward_keys(tiny_model_dir, tmp_path, conversational):
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    torch.set_num_threads(1)

    def prompt(i):
        text = f"What is {i} plus 1? Put the answer in \\boxed{{}}."
        return [{"role": "user", "content": text}] if conversational else text

    # columns named like a reward's / the worker pool's parameters must not leave samples ungraded
    # ("completion" is dropped by TRL itself; "reference" would be taken as the reference column)
    reserved = {"reward": "r", "deadline": "soon", "wall_cap": "cap", "self": "me", "result": "x", "completion": "c"}
    ds = datasets.Dataset.from_list([{"prompt": prompt(i), "answer": str(i + 1), "level": i % 2, **reserved}
                                     for i in range(4)])
    overlong = Recording(Overlong(max_len=12, cache_len=6))
    reward_funcs = [
        as_trl(ends_with_answer, name="correct"),
        as_trl(OneAnswer()),
        overlong,
        as_trl_async(Overlong(max_len=12, cache_len=6), name="overlong_async"),
        as_trl(always_broken),
    ]
    names = ["correct", "one_answer", "overlong", "overlong_async", "always_broken"]
    if "math" in registered_rewards():
        from rewardlab.rewards import math_reward

        reward_funcs.append(as_trl(math_reward))
        names.append("math")
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=12,
        logging_steps=1,
        save_strategy="no",
        gradient_checkpointing=False,
        reward_weights=[1.0, 0.1, 1.0, 0.0, 1.0] + [1.0] * (len(names) - 5),
    )
    trainer = trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=reward_funcs, args=args, train_dataset=ds)
    trainer.train()

    logs = trainer.state.log_history[0]
    for name in names:
        assert f"rewards/{name}/mean" in logs, sorted(logs)
        assert f"rewards/{name}/not_ok_frac" in logs
    # the logged mean is the mean of what the adapter returned, and equals DAPO's formula
    assert len(overlong.returned) == 4
    expected = [min(-(n - 6) / 6, 0.0) for n in overlong.lengths]
    assert overlong.returned == pytest.approx(expected)
    assert logs["rewards/overlong/mean"] == pytest.approx(sum(expected) / 4, abs=1e-6)
    assert logs["rewards/overlong_async/mean"] == pytest.approx(logs["rewards/overlong/mean"], abs=1e-6)
    assert 0.0 <= logs["rewards/one_answer/mean"] <= 1.0
    # the broken reward gave None (NaN to TRL) and was reported, the step still ran
    broken_mean = logs["rewards/always_broken/mean"]  # NaN, which TRL's log history stores as None
    assert broken_mean is None or math.isnan(broken_mean)
    assert logs["rewards/always_broken/not_ok_frac"] == 1.0
    assert logs["rewards/correct/not_ok_frac"] == 0.0
    assert logs["rewards/one_answer/not_ok_frac"] == 0.0 and logs["rewards/overlong/not_ok_frac"] == 0.0
