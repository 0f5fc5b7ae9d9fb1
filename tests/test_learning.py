"""The loop learns, and the tests can tell: every ``--algo`` raises a reward it is given, and controls
show that the rise comes from the advantage -> loss -> optimizer path and nothing else.

Task: a tiny random model (``rewardlab.testing``, 2 blocks, 64 wide, all parameters trained) on the
``arith`` prompts, 4 prompts x 8 completions of at most 8 tokens, lr 1e-2, 20 steps through the real
loop (``rewardlab.train.train``). The reward is cheap and pure Python: the fraction of the
completion's characters that are ASCII lowercase letters. The random model starts near 0.4, so the
score can move both ways. Each algorithm runs three times:

* ``normal``: the letters reward. The letters score must rise by >= 0.3 (mean of the last 3 steps vs
  the first 3; measured here +0.53 to +0.55 for most algorithms; ``remax`` on the mean of 3 seeds, below).
* ``flipped``: the same run with every advantage negated (``rewardlab.train.loop.ADVANTAGE_SIGN``, a
  test-only hook) must not rise (<= +0.05; measured -0.39 to -0.44).
* ``random``: a coin-flip reward independent of the completion; the letters score must not rise
  (<= +0.15; measured -0.06 to +0.02).

The score is measured on every generated completion (``rollouts.jsonl``), kept or dropped, so DAPO's
dynamic-sampling filter cannot bias it. DAPO's overlong shaping is off in all runs: at 8 tokens a
random model always hits the limit, and a length penalty is itself a reward that depends on the
completion (it would make the "random" control learn to stop early).

Every preset that ``--async-steps`` can pipeline also runs the three ways with ``--async-steps 1``
(ids ``<algo>-async1``): generation one step ahead in the worker process, so each step trains on
completions of the policy one update old, with the correction async picks by default
(``rewardlab.train.config.ASYNC_CORRECTION``). The thresholds are the same.

Seeded, one thread: the curves repeat exactly here. About 3 s per run on one core (async: about 7,
most of it the worker's start).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardlab.algos import ALGOS, PRESETS
from rewardlab.testing import coin_reward, letter_fraction, letters_reward
from rewardlab.train.async_rollout import why_not
from rewardlab.train.config import TrainConfig

STEPS = 20
RISE = 0.3  # normal runs: last-3 mean - first-3 mean must be at least this
BEST_OF_GROUP = {"grpo_passk"}
"""Pass@k training gives an advantage to each group's best completion only (one of 8 here): it
optimises the best of the group, not the mean (the mean moved +0.05 to +0.35 over seeds), so its
curve is the mean over groups of the group's best letter score. That starts near 0.7, so its rise
claim is RISE_BEST (measured +0.15); the controls keep their thresholds."""
RISE_BEST = 0.1
SEED_MEAN = {"remax"}
"""ReMax subtracts the reward of one greedy completion per prompt as the baseline; with 8-token
completions of a random model that baseline is noisy, and one seed's rise ranged from +0.25 to +0.51
over seeds 0-3 (measured on the prompt order before and after ``derive_seed``; seed 0 gives +0.29
after). Its rise claim is the mean over seeds 0, 1 and 2 (measured +0.37); its controls keep one seed."""
FLAT = 0.05  # flipped runs: may not rise by more than this
NOISE = 0.15  # random-reward runs: may not rise by more than this


letters = letters_reward()  # the learnable task: the completion's letter fraction (rewardlab.testing)
coin = coin_reward()  # a coin flip, independent of the completion (rewardlab.testing)

CASES = [pytest.param(a, 0, id=a) for a in ALGOS] + [
    pytest.param(a, 1, id=f"{a}-async1") for a in ALGOS
    if why_not(TrainConfig(algo=a, async_steps=1), PRESETS[a]) is None]
"""(algorithm, --async-steps): every preset synchronously, and every one async can pipeline one step ahead."""


def run(tmp_path: Path, model: Path, algo: str, reward: str, k: int = 0, **over) -> list[float]:
    """Train ``STEPS`` steps with ``reward`` (``letters`` or ``coin``); the letter score per step."""
    from rewardlab.train import build_config
    from rewardlab.train import train

    coin.rng.seed(0)
    out = tmp_path / f"{algo}-{reward}-seed{over.get('seed', 0)}"
    settings = {
        "model": str(model), "output_dir": str(out), "algo": algo, "task": "arith", "task_limit": 64,
        "steps": STEPS, "prompts_per_step": 4, "group_size": 8, "max_new_tokens": 8, "lr": 1e-2,
        "train_top_layers": 0, "overlong_weight": 0, "reward": f"{__name__}.{reward}", "reward_workers": 1,
        "threads": 1, "progress": False, "plots": False, "seed": 0, "save_every": 1000, "async_steps": k,
    }
    settings.update(over)
    train(build_config(None, settings))
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    by_step: dict[int, list[float]] = {}
    best: dict[tuple[int, int], float] = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(letter_fraction(r["completion"]))
        key = (r["step"], r["group"])
        best[key] = max(best.get(key, 0.0), letter_fraction(r["completion"]))
    assert sorted(by_step) == list(range(1, STEPS + 1))
    curve = [sum(v) / len(v) for _, v in sorted(by_step.items())]
    if algo in BEST_OF_GROUP:
        return [sum(b for (st, _), b in best.items() if st == step) / sum(1 for (st, _) in best if st == step)
                for step in range(1, STEPS + 1)]
    if reward == "letters":  # the logged metric is the same number
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [m["reward/generated_mean"] for m in metrics] == pytest.approx(curve)
    return curve


def change(curve: list[float]) -> float:
    """Mean of the last 3 steps minus mean of the first 3."""
    return sum(curve[-3:]) / 3 - sum(curve[:3]) / 3


def show(curve: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in curve)


@pytest.mark.parametrize(("algo", "k"), CASES)
def test_reward_rises(algo, k, tiny_model_dir, tmp_path):
    rise = RISE_BEST if algo in BEST_OF_GROUP else RISE
    seeds = (0, 1, 2) if algo in SEED_MEAN else (0,)
    curves = [run(tmp_path, tiny_model_dir, algo, "letters", k, seed=s) for s in seeds]
    mean = sum(change(c) for c in curves) / len(curves)
    assert mean >= rise, f"{algo}: letters score did not rise ({mean:+.3f}): {' | '.join(map(show, curves))}"


@pytest.mark.parametrize(("algo", "k"), CASES)
def test_flipped_advantages_do_not_raise_the_reward(algo, k, tiny_model_dir, tmp_path, monkeypatch):
    import rewardlab.train.loop

    monkeypatch.setattr(rewardlab.train.loop, "ADVANTAGE_SIGN", -1.0)
    curve = run(tmp_path, tiny_model_dir, algo, "letters", k)
    assert change(curve) <= FLAT, f"{algo}: letters score rose with negated advantages: {show(curve)}"


@pytest.mark.parametrize(("algo", "k"), CASES)
def test_random_reward_does_not_raise_the_task_score(algo, k, tiny_model_dir, tmp_path):
    curve = run(tmp_path, tiny_model_dir, algo, "coin", k)
    assert change(curve) <= NOISE, f"{algo}: letters score rose under a reward independent of it: {show(curve)}"


SAMPLED = {"temperature": 0.7, "top_p": 0.9}
"""A reasoning recipe's sampling (not the defaults): the behaviour distribution is tempered and renormalised over
the top-p kept set on both sides (rewardlab.rollout.behaviour), synchronously and with --async-steps 1."""


@pytest.mark.parametrize("k", [0, 1], ids=["sync", "async1"])
def test_grpo_learns_at_a_sampled_recipe_and_its_controls_do_not(k, tiny_model_dir, tmp_path, monkeypatch):
    import rewardlab.train.loop

    rise = change(run(tmp_path / "n", tiny_model_dir, "grpo", "letters", k, **SAMPLED))
    noise = change(run(tmp_path / "r", tiny_model_dir, "grpo", "coin", k, **SAMPLED))
    monkeypatch.setattr(rewardlab.train.loop, "ADVANTAGE_SIGN", -1.0)
    flipped = change(run(tmp_path / "f", tiny_model_dir, "grpo", "letters", k, **SAMPLED))
    assert rise >= RISE and flipped <= FLAT and noise <= NOISE, (rise, flipped, noise)


@pytest.mark.parametrize("packing", ["sequences", "groups", "auto"])
def test_grpo_learns_with_packed_token_budget_micro_batches_and_its_controls_do_not(packing, tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    """Micro-batches cut by a token budget (longest first) and laid out padding-free (rewardlab.train.sizes):
    the same step's gradient as the padded layout, so the same learning and the same null controls."""
    import rewardlab.train.loop

    layout = {"packing": packing, "max_tokens_per_micro_batch": 160}
    rise = change(run(tmp_path / "n", tiny_model_dir, "grpo", "letters", **layout))
    noise = change(run(tmp_path / "r", tiny_model_dir, "grpo", "coin", **layout))
    monkeypatch.setattr(rewardlab.train.loop, "ADVANTAGE_SIGN", -1.0)
    flipped = change(run(tmp_path / "f", tiny_model_dir, "grpo", "letters", **layout))
    assert rise >= RISE and flipped <= FLAT and noise <= NOISE, (rise, flipped, noise)
