"""The PPO value model (rewardlab.train.critic): layout, position convention, shared/separate trunks,
the detach cut, checkpoints, and the value loss backpropagating through it. Tiny random Qwen2, CPU."""

from __future__ import annotations

import pytest
import torch

from rewardlab.algos.value import value_loss
from rewardlab.errors import RewardlabError
from rewardlab.train.critic import ValueModel
from rewardlab.train.logprobs import decoder_blocks, pad_batch, token_logprobs
from rewardlab.train.samples import Sample

PAD = 0


def _sample(prompt_ids, token_ids, group=0):
    return Sample(group=group, row=None, prompt_text="", prompt_ids=prompt_ids, token_ids=token_ids, text="",
                  finish_reason="stop", score=0.0, task_score=0.0, components={}, info={})


def _policy(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


SAMPLES = [_sample([5, 6, 7, 8], [9, 10, 11]), _sample([12, 13], [14]), _sample([15, 16, 17], [18, 19])]


def _by_hand(policy, critic, s):
    """head(hidden at absolute positions P-1 .. P-1+r-1) from a plain unpadded forward, (r,)."""
    ids = torch.tensor([s.prompt_ids + s.token_ids])
    hs = policy(ids, output_hidden_states=True).hidden_states[-1][0]  # (P+r, H), after the final norm
    p, r = len(s.prompt_ids), len(s.token_ids)
    return critic.head(hs[p - 1 : p - 1 + r]).squeeze(-1)


def _grads(params):
    return [p.grad for p in params]


def _nonzero(g):
    return g is not None and bool(g.abs().sum() > 0)


def _zero_or_none(g):
    return g is None or bool(g.abs().sum() == 0)


# ---------------------------------------------------------------- 1. shapes and padding


def test_values_shape_and_padding_exactly_zero(tiny_model_dir):
    critic = ValueModel.shared(_policy(tiny_model_dir))
    v = critic.values(SAMPLES, PAD, "cpu")
    assert v.shape == (3, 3) and v.dtype == torch.float32
    mask = pad_batch(SAMPLES, PAD, "cpu")["response_mask"]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert bool((v[mask == 0] == 0).all())  # exactly 0, not just small
    assert bool((v[mask > 0] != 0).all())  # small init, but not zero
    assert v.requires_grad  # gradients flow unless the caller says no_grad
    with torch.no_grad():
        assert not critic.values(SAMPLES, PAD, "cpu").requires_grad


def test_empty_response_row_is_all_zero(tiny_model_dir):
    critic = ValueModel.shared(_policy(tiny_model_dir))
    v = critic.values([_sample([5, 6], [7, 8]), _sample([9], [])], PAD, "cpu")
    assert v.shape == (2, 2) and v[1].tolist() == [0.0, 0.0] and bool((v[0] != 0).all())


# ---------------------------------------------------------------- 2. the position convention


def test_values_read_the_state_before_each_response_token(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    critic = ValueModel.shared(policy)
    with torch.no_grad():
        v = critic.values(SAMPLES, PAD, "cpu")
        for i, s in enumerate(SAMPLES):
            ref = _by_hand(policy, critic, s)
            torch.testing.assert_close(v[i, : len(s.token_ids)], ref, rtol=1e-5, atol=1e-6)
        # the last response token's own hidden state is NOT used (it is the state after the response)
        s = SAMPLES[0]
        last = critic.head(policy.model(torch.tensor([s.prompt_ids + s.token_ids])).last_hidden_state[0, -1])
        assert not torch.allclose(v[0, -1], last.squeeze(-1))


def test_left_padding_does_not_change_values(tiny_model_dir):
    critic = ValueModel.shared(_policy(tiny_model_dir))
    short = _sample([12, 13], [14, 15])
    with torch.no_grad():
        alone = critic.values([short], PAD, "cpu")  # (1, 2), no padding at all
        batched = critic.values([_sample([5, 6, 7, 8, 9, 10], [11, 12, 13]), short], PAD, "cpu")  # (2, 3)
    torch.testing.assert_close(batched[1, :2], alone[0], rtol=1e-5, atol=1e-6)
    assert batched[1, 2].item() == 0.0


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A tiny GPT-2: absolute position embeddings (RoPE models are shift-invariant, so only an
    absolute-position model shows whether the position ids skip the left padding)."""
    from rewardlab.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-gpt2"), arch="gpt2")


def test_left_padding_and_positions_on_an_absolute_position_model(gpt2_dir):
    policy = _policy(gpt2_dir)
    critic = ValueModel.shared(policy, detach_below=1)
    assert type(critic.trunk).__name__ == "GPT2Model" and critic.trunk is policy.transformer
    short = _sample([12, 13], [14, 15])
    with torch.no_grad():
        alone = critic.values([short], PAD, "cpu")
        batched = critic.values([_sample([5, 6, 7, 8, 9, 10], [11, 12, 13]), short], PAD, "cpu")
        torch.testing.assert_close(batched[1, :2], alone[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(alone[0], _by_hand(policy, critic, short), rtol=1e-5, atol=1e-6)


def test_values_from_batch_equals_values(tiny_model_dir):
    critic = ValueModel.shared(_policy(tiny_model_dir))
    with torch.no_grad():
        a = critic.values(SAMPLES, PAD, "cpu")
        b = critic.values_from_batch(pad_batch(SAMPLES, PAD, "cpu"))
    assert torch.equal(a, b)


# ---------------------------------------------------------------- 3. shared mode and the detach cut


def test_shared_trunk_is_the_policys_and_gets_value_gradients(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    critic = ValueModel.shared(policy)
    assert critic.trunk is policy.model
    assert all(a is b for a, b in zip(critic.trunk.parameters(), policy.model.parameters(), strict=True))
    head = list(critic.head.parameters())
    # the critic owns (registers, trains, saves) the head only
    assert [id(p) for p in critic.parameters()] == [id(p) for p in head]
    assert [id(p) for p in critic.parameters_to_train()] == [id(p) for p in head]
    assert set(critic.state_dict()) == {"head.weight", "head.bias"}
    critic.values(SAMPLES, PAD, "cpu").sum().backward()
    blocks = decoder_blocks(policy)
    for blk in blocks:
        assert all(_nonzero(g) for g in _grads(blk.parameters()))
    assert _nonzero(policy.model.embed_tokens.weight.grad) and _nonzero(policy.model.norm.weight.grad)
    assert all(_nonzero(g) for g in _grads(head))


def test_detach_below_cuts_value_gradients_under_the_top_blocks(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    full = ValueModel.shared(policy)
    cut = ValueModel.shared(policy, detach_below=1)
    blocks = decoder_blocks(policy)
    assert len(blocks) == 2
    v = cut.values(SAMPLES, PAD, "cpu")
    with torch.no_grad():
        torch.testing.assert_close(v, full.values(SAMPLES, PAD, "cpu"), rtol=0, atol=0)  # same forward
    v.sum().backward()
    assert all(_zero_or_none(g) for g in _grads(blocks[0].parameters()))
    assert _zero_or_none(policy.model.embed_tokens.weight.grad)
    assert all(_nonzero(g) for g in _grads(blocks[1].parameters()))
    assert _nonzero(policy.model.norm.weight.grad)
    assert all(_nonzero(g) for g in _grads(cut.head.parameters()))
    # the cut lives inside values() only: grad mode is back and the policy's own backward is whole
    assert torch.is_grad_enabled()
    policy.zero_grad(set_to_none=True)
    lp, _ = token_logprobs(policy, pad_batch(SAMPLES, PAD, "cpu"))
    lp.sum().backward()
    assert all(_nonzero(g) for g in _grads(blocks[0].parameters()))


def test_detach_below_with_gradient_checkpointing(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    with torch.no_grad():
        ref = ValueModel.shared(policy).values(SAMPLES, PAD, "cpu")
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy.train()
    cut = ValueModel.shared(policy, detach_below=1)
    v = cut.values(SAMPLES, PAD, "cpu")
    torch.testing.assert_close(v, ref, rtol=1e-6, atol=1e-6)
    v.sum().backward()
    blocks = decoder_blocks(policy)
    assert all(_zero_or_none(g) for g in _grads(blocks[0].parameters()))
    assert all(_nonzero(g) for g in _grads(blocks[1].parameters()))


def test_detach_below_whole_stack_trains_norm_and_head_only(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    cut = ValueModel.shared(policy, detach_below=2)  # every block trained, embeddings cut
    cut.values(SAMPLES, PAD, "cpu").sum().backward()
    assert _zero_or_none(policy.model.embed_tokens.weight.grad)
    assert all(_nonzero(g) for blk in decoder_blocks(policy) for g in _grads(blk.parameters()))


def test_bad_arguments_raise(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    with pytest.raises(RewardlabError, match="decoder blocks"):
        ValueModel.shared(policy, detach_below=3)
    with pytest.raises(RewardlabError, match="detach_below"):
        ValueModel.shared(policy, detach_below=-1)
    critic = ValueModel.shared(policy)
    with pytest.raises(RewardlabError, match="non-empty prompt"):
        critic.values([_sample([], [5])], PAD, "cpu")
    with pytest.raises(RewardlabError, match="vocabulary"):
        critic.values([_sample([5], [10**6])], PAD, "cpu")


# ---------------------------------------------------------------- 4. separate mode


def test_separate_critic_has_its_own_parameters(tiny_model_dir):
    policy = _policy(tiny_model_dir)
    critic = ValueModel.separate(str(tiny_model_dir), dtype="float32", device="cpu")
    assert critic.mode == "separate" and not hasattr(critic.trunk, "lm_head")
    policy_ids = {id(p) for p in policy.parameters()}
    own = critic.parameters_to_train()
    assert not policy_ids & {id(p) for p in own}
    assert {id(p) for p in own} == {id(p) for p in critic.parameters()}  # head + the whole trunk
    assert len(own) == 2 + len(list(critic.trunk.parameters()))
    # same weights and same head seed as a shared critic on the same folder: same values
    with torch.no_grad():
        torch.testing.assert_close(critic.values(SAMPLES, PAD, "cpu"),
                                   ValueModel.shared(policy).values(SAMPLES, PAD, "cpu"), rtol=1e-6, atol=1e-6)
    critic.values(SAMPLES, PAD, "cpu").sum().backward()
    assert all(p.grad is None for p in policy.parameters())
    assert all(_nonzero(p.grad) for p in own)


def test_separate_from_a_module_and_with_detach(tiny_model_dir):
    other = _policy(tiny_model_dir)
    critic = ValueModel.separate(other, detach_below=1)
    assert critic.trunk is other.model
    blocks = decoder_blocks(critic.trunk)
    trained = {id(p) for p in critic.parameters_to_train()}
    assert not trained & {id(p) for p in blocks[0].parameters()}
    assert id(critic.trunk.embed_tokens.weight) not in trained
    assert {id(p) for p in blocks[1].parameters()} <= trained and id(critic.trunk.norm.weight) in trained
    critic.values(SAMPLES, PAD, "cpu").sum().backward()
    assert all(_zero_or_none(p.grad) for p in blocks[0].parameters())
    assert all(_nonzero(p.grad) for p in critic.parameters_to_train())


# ---------------------------------------------------------------- 5. checkpoints


def test_shared_save_load_round_trip_holds_the_head_only(tiny_model_dir, tmp_path):
    policy = _policy(tiny_model_dir)
    critic = ValueModel.shared(policy, detach_below=1, seed=1)
    with torch.no_grad():
        critic.head.bias.fill_(0.25)  # a trained-looking head
        want = critic.values(SAMPLES, PAD, "cpu")
    state = critic.state_dict_to_save()
    assert set(state) == {"format", "mode", "detach_below", "hidden_size", "head"}
    assert set(state["head"]) == {"weight", "bias"} and state["head"]["weight"].shape == (1, 64)
    torch.save(state, tmp_path / "critic.pt")
    loaded = torch.load(tmp_path / "critic.pt", weights_only=True)
    fresh = ValueModel.shared(policy, detach_below=1, seed=2)
    with torch.no_grad():
        assert not torch.equal(fresh.values(SAMPLES, PAD, "cpu"), want)
        fresh.load_saved(loaded)
        assert torch.equal(fresh.values(SAMPLES, PAD, "cpu"), want)
    with pytest.raises(RewardlabError, match="separate"):
        ValueModel.separate(_policy(tiny_model_dir)).load_saved(loaded)


def test_separate_save_load_round_trip_restores_the_trunk(tiny_model_dir, tmp_path):
    critic = ValueModel.separate(str(tiny_model_dir), dtype="float32")
    with torch.no_grad():
        critic.trunk.norm.weight.mul_(1.5)  # a trained-looking trunk
        want = critic.values(SAMPLES, PAD, "cpu")
    state = critic.state_dict_to_save()
    assert set(state) == {"format", "mode", "detach_below", "hidden_size", "head", "trunk"}
    assert set(state["trunk"]) == set(critic.trunk.state_dict())
    torch.save(state, tmp_path / "critic.pt")
    fresh = ValueModel.separate(str(tiny_model_dir), dtype="float32", seed=3)
    with torch.no_grad():
        assert not torch.equal(fresh.values(SAMPLES, PAD, "cpu"), want)
        fresh.load_saved(torch.load(tmp_path / "critic.pt", weights_only=True))
        assert torch.equal(fresh.values(SAMPLES, PAD, "cpu"), want)
    with pytest.raises(RewardlabError, match="not a saved value model"):
        fresh.load_saved({"head": {}})


# ---------------------------------------------------------------- 6. the value loss through values()


@pytest.mark.parametrize("mode", ["shared", "separate"])
def test_value_loss_step_lowers_the_loss(tiny_model_dir, mode):
    policy = _policy(tiny_model_dir)
    critic = (ValueModel.shared(policy) if mode == "shared"
              else ValueModel.separate(str(tiny_model_dir), dtype="float32"))
    mask = pad_batch(SAMPLES, PAD, "cpu")["response_mask"]
    returns = torch.tensor([[1.0, 0.5, -0.5], [2.0, 0.0, 0.0], [-1.0, 1.0, 0.0]]) * mask
    with torch.no_grad():
        old = critic.values(SAMPLES, PAD, "cpu")

    def loss_now():
        loss, info = value_loss(critic.values(SAMPLES, PAD, "cpu"), old, returns, mask, cliprange=10.0)
        return loss, info

    opt = torch.optim.SGD(critic.head.parameters(), lr=0.05)
    before, info = loss_now()
    assert info["vf_clipfrac"].item() == 0.0
    opt.zero_grad()
    before.backward()
    assert all(_nonzero(p.grad) for p in critic.head.parameters())
    opt.step()
    with torch.no_grad():
        after, _ = loss_now()
    assert after.item() < before.item()
