"""One behaviour distribution (``rewardlab.rollout.behaviour``): the trainer, the HF engine, verl's and
TRL's own code agree on what a sampled token's log-prob is, at a temperature other than 1 and with
top-k / top-p on.

- ``full``: softmax(logits / T) over the whole vocabulary equals verl's ``logprobs_from_logits`` /
  ``entropy_from_logits`` on logits divided by T, and TRL 1.16's fused LM head at the same temperature;
- ``kept``: the same renormalised over HF's top-k / top-p kept set, the sampler's own distribution;
- the HF engine's recorded log-probs equal the trainer's under either convention (both decode paths);
- a synchronous, on-policy training step at T 0.7 / top-p 0.9 / top-k 50 reports importance weights of 1
  and a rollout KL of 0, under either convention (``tests/test_presets_cli.py`` runs every correction
  preset at these settings too). Before this module the same step reported KL 0.07 at T 0.5 alone.
"""

from __future__ import annotations

import math

import pytest
import torch

from rewardlab.errors import RewardlabError
from rewardlab.models import load_model
from rewardlab.rollout import HFEngine, SamplingParams, format_prompt
from rewardlab.rollout import behaviour
from rewardlab.train.logprobs import pad_batch, token_logprobs

RECIPE = dict(temperature=0.7, top_p=0.9, top_k=50)  # a published reasoning recipe's sampling
ATOL = 1e-4


def _sampling(support: str, **kw) -> SamplingParams:
    return SamplingParams(support=support, **{"max_new_tokens": 8, **RECIPE, **kw})


def _logits(B=3, R=5, V=300, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, R, V, generator=g) * 3  # (B, R, V) peaked enough for top-p to cut


def _warped(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """HF's warper chain on (B, R, V), as generate applies it at each step."""
    flat = logits.reshape(-1, logits.shape[-1]).clone()
    for w in behaviour.warpers(sampling):
        flat = w(None, flat)
    return flat.reshape(logits.shape)


def test_kept_is_the_sampled_distribution():
    logits, sp = _logits(), _sampling("kept")
    warped = torch.log_softmax(_warped(logits, sp), dim=-1)  # (B, R, V), -inf outside the kept set
    tokens = warped.argmax(-1)  # (B, R) kept tokens (the most likely one of each position)
    lp, ent = behaviour.logprobs(logits, tokens, sp, with_entropy=True)
    torch.testing.assert_close(lp, warped.gather(-1, tokens[..., None]).squeeze(-1), rtol=0, atol=1e-6)
    p = warped.exp()
    want_ent = -(p * warped.masked_fill(p == 0, 0.0)).sum(-1)
    torch.testing.assert_close(ent, want_ent, rtol=0, atol=1e-5)
    kept = torch.isfinite(warped).sum(-1)
    assert int(kept.min()) >= 1 and int(kept.max()) < logits.shape[-1]  # top-p / top-k really cut here


def test_full_equals_verls_helpers_on_tempered_logits():
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    logits, sp = _logits(seed=1), _sampling("full")
    tokens = torch.randint(0, logits.shape[-1], logits.shape[:2], generator=torch.Generator().manual_seed(2))
    lp, ent = behaviour.logprobs(logits, tokens, sp, with_entropy=True)
    T = RECIPE["temperature"]
    torch.testing.assert_close(lp, logprobs_from_logits(logits / T, tokens), rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, entropy_from_logits(logits / T), rtol=0, atol=1e-5)


def test_full_equals_trl_fused_head_at_the_temperature(tiny_model_dir):
    """TRL 1.16's GRPOTrainer scores tokens through ``add_fused_lm_head(model, temperature=T)``."""
    from trl.trainer.utils import add_fused_lm_head

    theirs, tok = load_model(tiny_model_dir)
    ours, _ = load_model(tiny_model_dir)
    add_fused_lm_head(theirs, temperature=RECIPE["temperature"], outputs=("log_probs", "entropy"))
    comps = HFEngine(ours, tok, batch_size=8).generate([format_prompt(tok, "What is 3 plus 4?")], 4,
                                                      _sampling("full", seed=3))
    b = pad_batch(comps, tok.pad_token_id, "cpu")
    R = b["R"]
    with torch.no_grad():
        lp, ent = token_logprobs(ours, b, with_entropy=True, behaviour=_sampling("full"))
        labels = b["input_ids"].masked_fill(b["attention_mask"] == 0, -100)
        labels[:, :-R] = -100
        out = theirs(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=labels,
                     fused_lm_head=True)
    m = b["response_mask"].bool()
    torch.testing.assert_close(lp[m], out.log_probs[:, -R:][m].float(), rtol=0, atol=ATOL)
    torch.testing.assert_close(ent[m], out.entropy[:, -R:][m].float(), rtol=0, atol=ATOL)


def test_a_token_outside_the_current_kept_set_stays_finite_with_gradient():
    """Off-policy (newer weights) a sampled token may fall outside the trainer's kept set: it joins it."""
    logits = _logits(seed=4).requires_grad_(True)
    sp = _sampling("kept", top_k=2, top_p=1.0)
    tokens = logits.detach().argmin(-1)  # (B, R) the least likely token: never in the top 2
    lp, ent = behaviour.logprobs(logits, tokens, sp, with_entropy=True)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    assert (lp < math.log(0.5)).all()  # one of three tokens, the least likely
    lp.sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_conventions_differ_only_under_truncation():
    logits = _logits(seed=5)
    tokens = logits.argmax(-1)
    for kw in (dict(top_k=0, top_p=1.0), dict(top_k=0, top_p=1.0, temperature=1.0)):
        a = behaviour.logprobs(logits, tokens, _sampling("kept", **kw))[0]
        b = behaviour.logprobs(logits, tokens, _sampling("full", **kw))[0]
        torch.testing.assert_close(a, b)
    a = behaviour.logprobs(logits, tokens, _sampling("kept"))[0]
    b = behaviour.logprobs(logits, tokens, _sampling("full"))[0]
    assert (a > b + 1e-3).all()  # renormalising over fewer tokens raises every kept token's log-prob


def test_describe_and_bad_support():
    assert behaviour.describe(_sampling("kept")) == "T=0.7, top-k 50, top-p 0.9, kept-set renormalised"
    assert behaviour.describe(_sampling("full")) == "T=0.7, top-k 50, top-p 0.9, full vocabulary"
    assert behaviour.describe(SamplingParams(max_new_tokens=1)) == "T=1"
    with pytest.raises(RewardlabError, match="unknown log-prob support 'nucleus'"):
        SamplingParams(max_new_tokens=1, support="nucleus")


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    torch.manual_seed(0)
    model, tok = load_model(tiny_model_dir)
    return model.eval(), tok


@pytest.mark.parametrize("support", ["kept", "full"])
@pytest.mark.parametrize("n", [1, 4])  # n=1: generate's path; n=4: the shared-prompt decode loop
def test_hf_engine_records_what_the_trainer_computes(tiny, support, n):
    model, tok = tiny
    sp = _sampling(support, seed=7, max_new_tokens=12)
    prompts = [format_prompt(tok, p) for p in ("What is 3 plus 4?", "Name a prime number above 10.")]
    comps = HFEngine(model, tok, batch_size=8).generate(prompts, n, sp)
    b = pad_batch(comps, tok.pad_token_id, "cpu")
    with torch.no_grad():
        lp, _ = token_logprobs(model, b, behaviour=sp)  # (B, R)
    for i, c in enumerate(comps):
        got = torch.tensor(c.logprobs)
        torch.testing.assert_close(got, lp[i, : len(c.token_ids)], rtol=0, atol=ATOL)


def _train(tmp_path, model_dir, *extra: str) -> list[dict]:
    from test_presets_cli import train_cli

    return train_cli(tmp_path, model_dir, "--algo", "grpo", "--async-steps", "0", *extra)


@pytest.mark.parametrize("support", ["kept", "full"])
def test_a_synchronous_on_policy_step_has_unit_weights_and_zero_kl(tiny_model_dir, tmp_path, support):
    rows = _train(tmp_path, tiny_model_dir, "--correction", "decoupled_token_is", "--temperature", "0.7",
                  "--top-p", "0.9", "--top-k", "50", "--logprob-support", support)
    for r in rows:
        assert abs(r["rollout_corr/kl"]) < ATOL, r["rollout_corr/kl"]
        assert abs(r["rollout_corr/rollout_is_min"] - 1) < ATOL and abs(r["rollout_corr/rollout_is_max"] - 1) < ATOL
        assert r["logprob_support"] == support


def test_grpo_loss_and_gradient_equal_trl_at_the_temperature(tiny_model_dir, tmp_path):
    """TRL 1.16's ``GRPOTrainer._compute_loss`` (loss_type grpo, beta 0, T 0.7 / top-p 0.9 / top-k 50) and our
    GRPO loss under ``--logprob-support full`` (TRL's convention) on one batch: the same loss and the same
    gradient. Old log-probs are the engine's, shifted, so ratios move off 1 and the clip engages."""
    from dataclasses import replace

    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from rewardlab.algos import PRESETS, policy_loss

    torch.set_num_threads(1)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                          per_device_train_batch_size=4, num_generations=4, max_completion_length=10,
                          loss_type="grpo", beta=0.0, epsilon=0.2, **RECIPE)
    ds = datasets.Dataset.from_list([{"prompt": "What is 3 plus 4?"}] * 4)
    trainer = trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=[lambda completions, **kw: [0.0] * len(
        completions)], args=args, train_dataset=ds)
    theirs = trainer.model.eval()
    ours, tok = load_model(tiny_model_dir)
    ours.eval()
    sp = _sampling("full", seed=5, max_new_tokens=10)
    comps = HFEngine(ours, tok, batch_size=8).generate([format_prompt(tok, "What is 3 plus 4?")], 4, sp)
    b = pad_batch(comps, tok.pad_token_id, "cpu")  # one prompt: no left padding, TRL's positions are ours
    mask = b["response_mask"]  # (B, R)
    g = torch.Generator().manual_seed(0)
    recorded = torch.zeros_like(mask)  # (B, R) the engine's log-probs (full convention)
    for i, c in enumerate(comps):
        recorded[i, : len(c.logprobs)] = torch.tensor(c.logprobs)
    old = recorded + 0.3 * torch.randn(recorded.shape, generator=g)  # (B, R)
    adv = torch.randn(len(comps), generator=g)  # (B,)
    P = len(comps[0].prompt_ids)
    inputs = {"prompt_ids": b["input_ids"][:, :P], "prompt_mask": b["attention_mask"][:, :P],
              "completion_ids": b["response_ids"], "completion_mask": mask.long(), "advantages": adv,
              "old_per_token_logps": old, "num_items_in_batch": mask.sum()}
    loss_trl = trainer._compute_loss(theirs, inputs)
    loss_trl.backward()
    lp, _ = token_logprobs(ours, b, behaviour=sp)
    loss, _ = policy_loss(lp, old, adv, mask, replace(PRESETS["grpo"], beta=0.0))
    loss.backward()
    torch.testing.assert_close(loss, loss_trl, rtol=1e-5, atol=1e-6)
    grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)


def test_top_k_1_under_kept_support_is_refused_with_what_to_change():
    from rewardlab.train import build_config

    with pytest.raises(RewardlabError, match="--top-k 1 under --logprob-support kept"):
        build_config(None, {"top_k": "1"})
    assert build_config(None, {"top_k": "1", "logprob_support": "full"}).top_k == 1
