"""Micro-batches by count or by a token budget (``rewardlab.train.sizes.micro_spans``) and the packed layouts'
log-probs (``rewardlab.train.logprobs.packed_logprobs``) against the padded path, in float64."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch

from rewardlab.errors import RewardlabError
from rewardlab.models import load_model
from rewardlab.rollout import SamplingParams
from rewardlab.train.logprobs import packed_logprobs, pad_batch, token_logprobs
from rewardlab.train.sizes import (LAYOUT_COST, Layouts, group_packed_cost, longest_first, micro_spans, packed_cost,
                                   padded_cost)


def _shapes(n=40, seed=0):
    rng = random.Random(seed)
    return [(i // 8, 20 + 7 * (i // 8), int(rng.lognormvariate(4, 0.9)) + 1) for i in range(n)]


def test_costs():
    rows = [(0, 10, 5), (0, 10, 7), (1, 4, 2)]
    assert padded_cost(rows) == 3 * (10 + 7)
    assert packed_cost(rows) == 15 + 17 + 6
    assert group_packed_cost(rows) == 10 + 4 + 5 + 7 + 2


def test_by_count_is_the_old_cut():
    assert micro_spans(_shapes(10), count=4) == [(0, 4), (4, 8), (8, 10)]


@pytest.mark.parametrize("layout", sorted(LAYOUT_COST))
@pytest.mark.parametrize("budget", [64, 300, 2000])
def test_token_budget_spans_cover_everything_within_budget(layout, budget):
    shapes = _shapes()
    shapes = [shapes[i] for i in longest_first(shapes, by_prompt=layout == "groups")]
    spans = micro_spans(shapes, count=8, budget=budget, layout=layout)
    assert spans[0][0] == 0 and spans[-1][1] == len(shapes)
    assert all(a < b for a, b in spans) and all(s[1] == t[0] for s, t in zip(spans, spans[1:]))
    for a, b in spans:  # within budget, unless a single sequence is longer than it
        assert b - a == 1 or LAYOUT_COST[layout](shapes[a:b]) <= budget
    want = min(len(spans) + 3, len(shapes))
    more = micro_spans(shapes, count=8, budget=budget, layout=layout, at_least=want)
    assert len(more) == want and more[-1][1] == len(shapes)  # every rank the same count


def test_longest_first_keeps_prompts_together_when_asked():
    order = longest_first(_shapes(), by_prompt=True)
    prompts = [_shapes()[i][0] for i in order]
    assert all(prompts.count(p) == 8 for p in set(prompts))
    assert prompts == sorted(prompts, key=lambda p: prompts.index(p))  # each prompt's rows are contiguous


def test_too_few_rows_for_the_ranks_count_is_refused():
    with pytest.raises(RewardlabError, match="cannot cut 2 sequences into 3"):
        micro_spans(_shapes(2), count=8, budget=10, at_least=3)


@pytest.fixture(scope="module")
def model64(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    return model.double().eval(), tok


@pytest.mark.parametrize("groups", [False, True], ids=["sequences", "groups"])
def test_packed_layouts_equal_the_padded_path(model64, groups):
    """Ragged prompts and responses, three samples per prompt, T 0.7 / top-p 0.9 kept-set: log-probs, entropy and
    the gradient of their sum equal the padded forward's in float64, to rtol 1e-5 (Qwen2's RMSNorm computes in
    float32 whatever the model's dtype, so float64 inputs that differ in the 16th digit, from a different
    attention summation, can round to float32 values 1 ulp apart: 1e-8 relative is seen, never more)."""
    model, tok = model64
    rng = random.Random(1)
    V = model.config.vocab_size
    prompts = [[rng.randrange(V) for _ in range(n)] for n in (5, 17, 9)]
    samples = [SimpleNamespace(prompt_ids=p, token_ids=[rng.randrange(V) for _ in range(rng.randrange(1, 30))],
                               loss_mask=None) for p in prompts for _ in range(3)]
    sp = SamplingParams(max_new_tokens=30, temperature=0.7, top_p=0.9)
    b = pad_batch(samples, tok.pad_token_id, "cpu")
    m = b["response_mask"]
    lp, ent = token_logprobs(model, b, with_entropy=True, behaviour=sp)
    (lp * m).sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    lp2, ent2 = packed_logprobs(model, samples, "cpu", groups=groups, grad=True, with_entropy=True, behaviour=sp)
    (lp2 * m).sum().backward()
    torch.testing.assert_close(lp2 * m, lp * m, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ent2 * m, ent * m, rtol=1e-5, atol=1e-7)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-5, atol=1e-5 * float(want[n].abs().max()), msg=n)
    model.zero_grad()


def test_each_rank_gets_an_equal_count_and_a_balanced_share_of_the_tokens():
    from rewardlab.train.update import shard_of

    rng = random.Random(3)
    samples = [SimpleNamespace(prompt_ids=[1] * 20, token_ids=[2] * n) for n in sorted(
        (int(rng.lognormvariate(5, 1)) + 1 for _ in range(32)), reverse=True)]  # the long tail at the front

    def share(rank, world=4, budget=500, packing="none"):
        run = SimpleNamespace(dist=SimpleNamespace(world_size=world, rank=rank), packing=packing,
                              sizes=SimpleNamespace(max_tokens_per_micro_batch=budget))
        return shard_of(run, samples)

    parts = [share(r) for r in range(4)]
    assert sorted(id(s) for p in parts for s in p) == sorted(id(s) for s in samples)
    assert {len(p) for p in parts} == {8}
    tokens = [sum(len(s.token_ids) for s in p) for p in parts]
    contiguous = [sum(len(s.token_ids) for s in samples[8 * r : 8 * r + 8]) for r in range(4)]
    assert max(tokens) - min(tokens) < (max(contiguous) - min(contiguous)) / 3, (tokens, contiguous)
    assert share(1, budget=0) == samples[8:16]  # by count: the contiguous block, as before
    assert share(1, packing="groups") == samples[8:16]  # group packing keeps a prompt's rows together


def test_the_critics_old_values_pass_is_cut_by_the_token_budget_too():
    """PPO's critic pass before the update: micro-batches by ``--max-tokens-per-micro-batch`` when it is set (padded
    positions within the budget), by ``--micro-batch-size`` otherwise; every sample's values land in its row."""
    from rewardlab.train.loop import old_values

    lengths = [3, 40, 5, 38, 2, 36]
    kept = [SimpleNamespace(prompt_ids=[1, 2, 3, 4], token_ids=[7] * n) for n in lengths]
    seen = []

    class Critic:
        def eval(self):
            return self

        def values(self, micro, pad_id, device, autocast=None):
            seen.append([len(s.token_ids) for s in micro])
            width = max(len(s.token_ids) for s in micro)
            return torch.tensor([[float(len(s.token_ids))] * width for s in micro])  # (b, R)

    def run(budget: int) -> SimpleNamespace:
        return SimpleNamespace(sizes=SimpleNamespace(micro_batch_size=4, max_tokens_per_micro_batch=budget),
                               critic=Critic(), tok=SimpleNamespace(pad_token_id=0), device="cpu", autocast=None)

    out = old_values(run(0), kept, 40)
    assert seen == [lengths[:4], lengths[4:]]  # by count
    assert out[:, 0].tolist() == [float(n) for n in lengths]
    seen.clear()
    out = old_values(run(100), kept, 40)
    assert all(padded_cost([(0, 4, n) for n in sizes]) <= 100 for sizes in seen) and len(seen) > 2
    assert [n for sizes in seen for n in sizes] == lengths and out[:, 0].tolist() == [float(n) for n in lengths]


def test_a_fixed_packing_is_every_steps_layout_and_auto_keeps_the_fastest_it_timed():
    fixed = Layouts("groups")
    assert [fixed.current for _ in range(3)] == ["groups"] * 3 and fixed.record(1.0, 10) is None
    auto = Layouts("auto")
    # seconds per token of each step: the warm-up (never timed: its 0.5 would make padded the fastest), then none,
    # sequences, groups twice; one disturbed step each for none (12) and sequences (7): the best of each layout's
    # steps is its figure
    seconds = [0.5, 12.0, 2.0, 2.5, 3.0, 7.0, 2.5, 1.0, 1.0, 1.0]
    ran, said = [], []
    for s in seconds:
        ran.append(auto.current)
        said.append(auto.record(s * 100, 100))
    assert ran == ["none", "none", "sequences", "groups", "none", "sequences", "groups"] + ["sequences"] * 3
    assert said[:6] == [None] * 6 and said[7:] == [None] * 3
    assert said[6] == ("--packing auto: none 3e+03 ms, sequences 2e+03 ms, groups 2.5e+03 ms per response token "
                       "(best of 2 steps each) -> sequences")


def test_packing_auto_trains_each_layout_then_the_fastest(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A real run: the warm-up step padded, two rounds of the three layouts, then the one the trial chose, in
    every later row of ``packing/layout``; what the trial measured is said once."""
    import json

    from rewardlab.train import build_config, train

    out = tmp_path / "run"
    train(build_config(None, {
        "model": str(tiny_model_dir), "output_dir": str(out), "task": "arith", "task_limit": 32, "steps": 9,
        "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8, "packing": "auto",
        "max_tokens_per_micro_batch": 64, "threads": 1, "progress": False, "plots": False, "save_every": 1000}))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--packing auto:")]
    assert len(said) == 1, said
    chosen = said[0].rsplit("-> ", 1)[1]
    assert [r["packing/layout"] for r in rows] == ["none", "none", "sequences", "groups", "none", "sequences",
                                                   "groups", chosen, chosen]
    timed = {}
    for r in rows[1:7]:
        timed.setdefault(r["packing/layout"], []).append(r["time/update"])
    assert all(len(v) == 2 for v in timed.values()) and all(math.isfinite(r["loss"]) for r in rows)


def test_an_unknown_packing_is_one_line_naming_the_choices():
    from rewardlab.train.config import TrainConfig
    from rewardlab.train.sizes import derive

    with pytest.raises(RewardlabError, match="choose one of: none, sequences, groups, auto"):
        derive(TrainConfig(packing="fastest"))
