"""Every ``--algo`` preset and every ``--correction`` preset trains 2 steps through the real CLI.

``rewardlab.cli.main`` runs in this process (the same click command, settings parser, loop and
files as ``python -m rewardlab train``, without paying a fresh interpreter per preset), on the tiny
random model and the arith task with its own math reward. Each run must exit 0 and log 2 steps;
correction runs must log the ``rollout_corr/*`` metrics, bypass runs among them.
The subprocess path is covered by tests/test_train_random_model.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardlab import cli
from rewardlab.algos import PRESETS
from rewardlab.algos.correction import PRESETS as CORRECTIONS


def train_cli(tmp_path: Path, model: Path, *extra: str) -> list[dict]:
    out = tmp_path / "run"
    args = ["train", "--model", str(model), "--output-dir", str(out), "--task", "arith", "--task-limit", "16",
            "--steps", "2", "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "12",
            "--micro-batch-size", "4", "--threads", "1", "--progress", "false", "--plots", "false",
            "--seed", "0", "--reward-workers", "1", *extra]
    try:
        cli.main(args)
    except SystemExit as e:  # main exits only on failure
        pytest.fail(f"rewardlab {' '.join(args)} exited {e.code}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = int(extra[extra.index("--steps") + 1]) if "--steps" in extra else 2  # the last --steps wins
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    return rows


@pytest.mark.parametrize("algo", sorted(PRESETS))
def test_every_algorithm_preset_trains_two_steps(algo, tiny_model_dir, tmp_path):
    rows = train_cli(tmp_path, tiny_model_dir, "--algo", algo)
    assert all(r.get("skipped", 0) or "loss" in r or r.get("dpo/pairs") == 0 for r in rows)


SAMPLED = ("--temperature", "0.7", "--top-p", "0.9", "--top-k", "50")  # a reasoning recipe's sampling, not the defaults


@pytest.mark.parametrize("name", sorted(c for c in CORRECTIONS if c != "disabled"))
def test_every_correction_preset_trains_two_steps(name, tiny_model_dir, tmp_path):
    """Synchronous and on-policy at T 0.7 / top-p 0.9 / top-k 50: the engine sampled from the trainer's own
    behaviour distribution (rewardlab.rollout.behaviour), so every weight is 1 and the rollout KL 0 (before
    the one definition: KL 1.87 and weights 0.10-0.17 at these settings)."""
    rows = train_cli(tmp_path, tiny_model_dir, "--algo", "grpo", "--correction", name, *SAMPLED)
    for r in rows:
        assert "rollout_corr/kl" in r, sorted(r)
        assert abs(r["rollout_corr/kl"]) < 1e-4, r["rollout_corr/kl"]
        for key in ("rollout_corr/rollout_is_min", "rollout_corr/rollout_is_max"):
            assert key not in r or abs(r[key] - 1) < 1e-4, (key, r[key])
        assert "loss" in r


@pytest.mark.parametrize("extra", [("--temperature", "0.5"), ("--top-k", "5"),
                                   ("--top-k", "5", "--temperature", "0.5", "--logprob-support", "full")])
def test_correction_sees_no_mismatch_where_there_is_none(extra, tiny_model_dir, tmp_path):
    """The issue's cases: at T 0.5 the trainer scored at T 1 (KL 0.07, weights 0.31-2.0); with top-k 5 the
    sampler's kept set got all the mass and the trainer's full vocabulary spread it (KL > 1, weights < 0.5).
    Under either convention both sides now describe the same distribution."""
    rows = train_cli(tmp_path, tiny_model_dir, "--algo", "grpo", "--correction", "decoupled_token_is", *extra)
    assert all(abs(r["rollout_corr/kl"]) < 1e-4 for r in rows), [r["rollout_corr/kl"] for r in rows]
    assert all(abs(r["rollout_corr/rollout_is_mean"] - 1) < 1e-4 for r in rows)


OPTIONS = {  # the write-ups' options (docs/algorithms.md, "Ideas from popular descriptions"), 2 steps each
    "ppo-separate-critic": ["--algo", "ppo"],
    "ppo-shared-critic": ["--algo", "ppo", "--critic", "shared", "--critic-detach-below", "1",
                          "--value-group-coef", "0.1"],
    "clip-adapt-kl": ["--algo", "grpo", "--clip-adapt", "kl"],
    "reward-norm-ema": ["--algo", "grpo", "--reward-norm", "ema"],
    "group-size-variance": ["--algo", "grpo", "--group-size-policy", "variance", "--group-size-warmup", "1",
                            "--group-size-min", "2", "--group-size-max", "6", "--group-size-threshold", "0.001"],
    "bog": ["--algo", "grpo", "--bog-coef", "0.5", "--bog-warmup", "0.5"],
    "dpo": ["--algo", "dpo"],
}
OPTION_METRICS = {"ppo-separate-critic": "vf_loss", "ppo-shared-critic": "value_group_mse",
                  "clip-adapt-kl": "adaptive_clip/eps_high", "reward-norm-ema": "reward_norm/std",
                  "group-size-variance": "group_size/mean", "bog": "bog/coef", "dpo": "dpo/pairs"}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_option_trains_two_steps(name, tiny_model_dir, tmp_path):
    rows = train_cli(tmp_path, tiny_model_dir, *OPTIONS[name], "--reward", "test_presets_cli.graded")
    for r in rows:
        assert OPTION_METRICS[name] in r, sorted(r)


class _Graded:
    """A cheap reward with spread (the share of digits in the completion), so groups have a best and a worst."""

    name = "graded"
    isolated = True

    def fast(self, completion, reference=None, **meta):
        return self(completion, reference, **meta)

    def __call__(self, completion, reference=None, **meta):
        from rewardlab.rewards.base import RewardResult

        return RewardResult(sum(c.isdigit() or c == " " for c in completion) / max(1, len(completion)))


graded = _Graded()


def test_variance_driven_groups_are_unequal_and_each_is_normalised_alone(tiny_model_dir, tmp_path):
    """Two prompts that recur every step: after the warm-up step their group sizes follow their own reward
    variance, so the step has unequal groups; each group's z-scored advantages still have mean 0 and
    std 1 (zero-spread groups 0), and the completions trained on are exactly those generated."""
    rows = train_cli(tmp_path, tiny_model_dir, "--algo", "grpo", "--task-limit", "2", "--steps", "4",
                     "--group-size-policy", "variance", "--group-size-warmup", "1", "--group-size-min", "2",
                     "--group-size-max", "7", "--group-size-threshold", "0.002", "--reward", "test_presets_cli.graded")
    rollouts = [json.loads(x) for x in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    sizes = {}
    for r in rollouts:
        sizes.setdefault((r["step"], r["group"]), []).append(r)
    assert {len(v) for (step, _), v in sizes.items() if step == 1} == {4}  # warm-up: the fixed group size
    later = [len(v) for (step, _), v in sizes.items() if step > 1]
    assert len(set(later)) > 1 or set(later) != {4}, later  # the policy changed some group's size
    for m in rows:
        n = sum(len(v) for (step, _), v in sizes.items() if step == m["step"])
        assert m["completions/kept"] == m["completions/generated"] == n
        assert m["group_size/mean"] == pytest.approx(n / 2)
    for group in sizes.values():
        adv = [r["advantage"] for r in group]
        rewards = [r["reward"] for r in group]
        if len(set(rewards)) == 1:
            assert all(a == 0 for a in adv)
            continue
        mean = sum(adv) / len(adv)
        std = (sum((a - mean) ** 2 for a in adv) / (len(adv) - 1)) ** 0.5
        assert abs(mean) < 1e-5 and abs(std - 1) < 1e-3, (adv, rewards)


@pytest.mark.parametrize("options", [
    ["--algo", "ppo", "--beta", "0.04", "--clip-adapt", "kl", "--reward-norm", "ema", "--group-size-policy",
     "variance", "--group-size-warmup", "1", "--group-size-threshold", "0.002", "--group-size-max", "6",
     "--bog-coef", "0.5", "--value-group-coef", "0.1"],
    ["--algo", "dpo"],
], ids=["ppo-with-every-option", "dpo"])
def test_resume_equals_straight_run_with_every_option_on(options, tiny_model_dir, tmp_path):
    """4 steps straight vs 2 steps then a resume to 4: the same metrics and the same final weights, so the
    value head and its optimizer, the adaptive clip's KL EMA, the reward EMA and the per-prompt variance
    EMAs all travel in the checkpoint (a lost one changes the metrics of steps 3-4)."""
    import torch
    from safetensors.torch import load_file

    common = [*options, "--task-limit", "2", "--reward", "test_presets_cli.graded", "--save-every", "2"]
    straight = train_cli(tmp_path / "a", tiny_model_dir, *common, "--steps", "4")
    train_cli(tmp_path / "b", tiny_model_dir, *common, "--steps", "2")
    resumed = train_cli(tmp_path / "b", tiny_model_dir, *common, "--steps", "4")

    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))
                 and k != "tokens/s"} for r in rows]

    assert strip(straight) == strip(resumed)
    ckpt = "checkpoints/step-000004"
    wa, wb = (load_file(tmp_path / "a/run" / ckpt / "model.safetensors"),
              load_file(tmp_path / "b/run" / ckpt / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    sa = torch.load(tmp_path / "a/run" / ckpt / "trainer_state.pt", weights_only=False)
    sb = torch.load(tmp_path / "b/run" / ckpt / "trainer_state.pt", weights_only=False)
    assert sa["options"] == sb["options"]
    if "critic" in sa:
        assert sa["options"].keys() == {"clip_adapt", "reward_norm", "group_sizes"}
        for k, v in sa["critic"]["head"].items():
            assert torch.equal(v, sb["critic"]["head"][k])


def test_lora_through_the_cli_trains_adapters_only_and_resumes_exactly(tiny_model_dir, tmp_path):
    """--lora-rank: the checkpoint holds a PEFT adapter (no full weight file), the last one merged HF
    weights too, and a resumed run equals a straight one (adapter weights and metrics)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    common = ["--algo", "grpo", "--lora-rank", "4", "--lora-alpha", "8", "--lr", "1e-2", "--train-top-layers", "0",
              "--reward", "test_presets_cli.graded", "--save-every", "2", "--save-total-limit", "2"]
    straight = train_cli(tmp_path / "a", tiny_model_dir, *common, "--steps", "4")
    train_cli(tmp_path / "b", tiny_model_dir, *common, "--steps", "2")
    resumed = train_cli(tmp_path / "b", tiny_model_dir, *common, "--steps", "4")
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))
                           and k != "tokens/s"} for r in rows]
    assert strip(straight) == strip(resumed)
    last = tmp_path / "a/run/checkpoints/step-000004"
    assert (last / "adapter_model.safetensors").is_file() and not (last / "model.safetensors").exists()
    assert sorted(p.name for p in (tmp_path / "a/run/checkpoints").iterdir()) == ["step-000002", "step-000004"]
    wa = load_file(last / "adapter_model.safetensors")
    wb = load_file(tmp_path / "b/run/checkpoints/step-000004/adapter_model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(float(v.abs().sum()) > 0 for k, v in wa.items() if "lora_B" in k)  # the adapters trained
    AutoModelForCausalLM.from_pretrained(last / "merged")  # merged HF weights load as a plain model


class _One:
    """Every completion scores 1: the value targets (returns, gamma 1) are 1 at every token."""

    name = "one"
    isolated = True

    def fast(self, completion, reference=None, **meta):
        return self(completion, reference, **meta)

    def __call__(self, completion, reference=None, **meta):
        from rewardlab.rewards.base import RewardResult

        return RewardResult(1.0)


one = _One()


@pytest.mark.parametrize("critic", ["separate", "shared"])
def test_the_critic_learns_the_returns(critic, tiny_model_dir, tmp_path):
    """With every reward 1 the critic's targets are 1; its clipped value loss must fall (the value
    loss reaches the value model's gradients and its optimizer steps)."""
    rows = train_cli(tmp_path, tiny_model_dir, "--algo", "ppo", "--critic", critic, "--critic-lr", "5e-3",
                     "--steps", "8", "--reward", "test_presets_cli.one")
    losses = [r["vf_loss"] for r in rows]
    assert max(losses[-3:]) < 0.5 * losses[0], losses
