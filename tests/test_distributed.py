"""rewardlab.train.distributed: single-process no-ops, and a real 2-rank gloo job on CPU.

The 2-rank test spawns two processes (torch.multiprocessing) that join a gloo process group,
wrap the tiny model with FSDP2, train one step on their half of a global batch with the loss
divided by the all-reduced global token count, and must end with the same gradient norm and
weights as one process training on the whole batch.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

from rewardlab.train import distributed
from rewardlab.errors import RewardlabError


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    distributed.destroy()
    yield
    distributed.destroy()


def test_single_process_init_is_idempotent():
    info = distributed.init()
    assert (info.rank, info.world_size, info.local_rank, info.is_main) == (0, 1, 0, True)
    assert info.backend is None
    assert distributed.init() is info
    assert distributed.get_info() is info
    assert not distributed.is_distributed()


def test_single_process_reductions_are_identity():
    distributed.init()
    t = torch.tensor([1.5, -2.0])
    assert distributed.all_reduce_sum(3) == 3
    assert distributed.all_reduce_mean(2.5) == 2.5
    assert distributed.all_reduce_max(7.0) == 7.0
    assert torch.equal(distributed.all_reduce_sum(t), t)
    assert distributed.broadcast_object({"a": 1}) == {"a": 1}
    assert distributed.gather_objects("x") == ["x"]
    distributed.barrier()


@pytest.mark.parametrize(
    "env, message",
    [
        ({"WORLD_SIZE": "two"}, "not an integer"),  # garbage in the launcher env
        ({"WORLD_SIZE": "2", "RANK": "5"}, "bad torchrun environment"),  # rank out of range
        ({"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_ADDR is not set"),  # not launched by torchrun
    ],
)
def test_bad_environment_is_a_one_line_error(monkeypatch, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(RewardlabError, match=message):
        distributed.init()


@pytest.mark.parametrize(
    "n, world, even, blocks",
    [
        (6, 3, True, [[0, 1], [2, 3], [4, 5]]),  # contiguous, in order
        (7, 3, False, [[0, 1, 2], [3, 4], [5, 6]]),  # uneven: first ranks get one more
        (2, 4, False, [[0], [1], [], []]),  # fewer items than ranks
    ],
)
def test_shard_blocks(n, world, even, blocks):
    items = list(range(n))
    got = [
        distributed.shard(items, distributed.DistInfo(r, world, r, torch.device("cpu"), r == 0), even=even)
        for r in range(world)
    ]
    assert got == blocks
    assert sum(got, []) == items


def test_shard_uneven_is_refused_by_default():
    info = distributed.DistInfo(0, 4, 0, torch.device("cpu"), True)
    with pytest.raises(RewardlabError, match="multiple of the world size"):
        distributed.shard(list(range(6)), info)


def test_single_process_wrap_and_state_dict(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    info = distributed.init()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    wrapped = distributed.wrap_model(model, info)
    assert wrapped is model and next(model.parameters()).device == info.device
    sd = distributed.full_state_dict(model)
    assert sd.keys() == model.state_dict().keys()
    with distributed.gathered_params(model) as m:
        assert m is model
    assert len(distributed.decoder_layers(model)) == model.config.num_hidden_layers  # one FSDP unit each


# --- 2-rank gloo job -----------------------------------------------------------------------------

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A global batch of 4 sequences with ragged masks (so token counts differ per rank)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (4, 12), generator=g)  # (B, T)
    mask = torch.ones(4, 12)
    mask[0, 9:] = 0
    mask[1, 4:] = 0
    mask[3, 7:] = 0
    return ids, mask


def _train_step(model, ids, mask, global_tokens):
    """One AdamW step of a masked next-token loss divided by the global token count."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6, foreach=False)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, :-1]  # (B, T-1, V)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]  # (B, T-1)
    m = mask[:, 1:]  # (B, T-1)
    loss = -(logp * m).sum() / global_tokens
    loss.backward()
    norm = distributed.clip_grad_norm(model, 1e9)
    grads = {
        n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
        for n, p in model.named_parameters()
    }
    opt.step()
    return float(loss.detach()), norm, grads, opt


def _worker(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    from transformers import AutoModelForCausalLM

    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    info = distributed.init()
    assert info.backend == "gloo" and info.world_size == WORLD
    result: dict = {
        "sum_int": distributed.all_reduce_sum(rank + 1),
        "mean_float": distributed.all_reduce_mean(float(rank)),
        "max_tensor": distributed.all_reduce_max(torch.tensor([rank, -rank])),
        "broadcast": distributed.broadcast_object({"from": rank}),
        "gathered": distributed.gather_objects(rank * 10),
    }
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = distributed.wrap_model(model, info)
    ids, mask = _batch(model.config.vocab_size)
    my_rows = distributed.shard(list(range(ids.shape[0])), info)
    local_ids, local_mask = ids[my_rows], mask[my_rows]
    global_tokens = distributed.all_reduce_sum(float(local_mask[:, 1:].sum()))
    local_loss, norm, grads, opt = _train_step(model, local_ids, local_mask, global_tokens)
    result["loss"] = distributed.all_reduce_sum(local_loss)
    result["grad_norm"] = norm
    result["grads"] = grads
    result["state"] = distributed.full_state_dict(model)
    # Optimizer state: gathered by parameter name, then loaded back into a fresh optimizer.
    osd = distributed.optimizer_state_dict(model, opt)
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6, foreach=False)
    distributed.load_optimizer_state_dict(model, fresh, osd if info.is_main else {})
    result["optim"] = osd if info.is_main else None
    result["optim_reloaded"] = distributed.optimizer_state_dict(model, fresh)
    # Ranks generate different lengths with the gathered (unsharded) parameters: no deadlock.
    prompt = ids[:1, :4]
    with distributed.gathered_params(model), torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=3 + 4 * rank, min_new_tokens=3 + 4 * rank)
    result["generated"] = out[0].tolist()
    result["state_after_generate"] = distributed.full_state_dict(model)
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    distributed.destroy()


def test_two_rank_gloo_fsdp_matches_single_process(tiny_model_dir, tmp_path):
    import torch.multiprocessing as mp
    from transformers import AutoModelForCausalLM

    mp.spawn(_worker, args=(_free_port(), str(tiny_model_dir), str(tmp_path)), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]

    # Reference: one process, the whole global batch, same loss normalisation.
    torch.manual_seed(0)
    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids, mask = _batch(ref.config.vocab_size)
    ref_loss, ref_norm, ref_grads, ref_opt = _train_step(ref, ids, mask, float(mask[:, 1:].sum()))
    ref_state = ref.state_dict()
    ref_optim = distributed.optimizer_state_dict(ref, ref_opt)

    for r, res in enumerate(results):
        assert res["sum_int"] == 3 and isinstance(res["sum_int"], int)
        assert res["mean_float"] == pytest.approx(0.5)
        assert res["max_tensor"].tolist() == [1, 0]
        assert res["broadcast"] == {"from": 0}
        assert res["gathered"] == [0, 10]
        assert res["loss"] == pytest.approx(ref_loss, rel=1e-5)
        assert res["grad_norm"] == pytest.approx(ref_norm, rel=1e-4)
        assert res["state"].keys() == ref_state.keys()
        for name, g in ref_grads.items():
            torch.testing.assert_close(res["grads"][name], g, rtol=1e-4, atol=1e-6)
        if r == 0:  # the full optimizer state is complete on rank 0, keyed by parameter name
            for optim in (res["optim"], res["optim_reloaded"]):
                assert optim["state"].keys() == ref_optim["state"].keys()
                for name, st in ref_optim["state"].items():
                    torch.testing.assert_close(optim["state"][name]["exp_avg"], st["exp_avg"], rtol=1e-4, atol=1e-7)
                    torch.testing.assert_close(optim["state"][name]["exp_avg_sq"], st["exp_avg_sq"], rtol=1e-4,
                                               atol=1e-10)
        for name, value in ref_state.items():
            torch.testing.assert_close(res["state"][name], value, rtol=1e-4, atol=1e-5)
            assert torch.equal(res["state_after_generate"][name], res["state"][name])
        with torch.no_grad():
            expect = ref.generate(ids[:1, :4], attention_mask=torch.ones(1, 4, dtype=torch.long),
                                  do_sample=False, max_new_tokens=3 + 4 * r, min_new_tokens=3 + 4 * r)
        assert res["generated"] == expect[0].tolist()
    # A 2-rank optimizer state resumes in one process (checkpoints do not depend on world size).
    fresh = torch.optim.AdamW(ref.parameters(), lr=1e-3, eps=1e-6, foreach=False)
    distributed.load_optimizer_state_dict(ref, fresh, results[0]["optim"])
    again = distributed.optimizer_state_dict(ref, fresh)
    for name, st in ref_optim["state"].items():
        torch.testing.assert_close(again["state"][name]["exp_avg"], st["exp_avg"], rtol=1e-4, atol=1e-7)
        assert int(again["state"][name]["step"]) == 1
    # The step really moved the weights (the comparison above is not vacuous).
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert any(not torch.allclose(start[k], ref_state[k]) for k in ref_state)
