"""The value model (critic) of PPO: a scalar head on a transformer trunk, V(s_t) for every response token.

Two ways to build one:

    critic = ValueModel.shared(policy, detach_below=0)       # head on the policy's own trunk
    critic = ValueModel.separate("path/or/hub-id", dtype="float32", device="cpu")   # its own trunk

**Shared** (``ValueModel.shared``): the head reads the last hidden state of the *policy's* base model
(``policy.get_decoder()`` / ``getattr(policy, policy.base_model_prefix)``: the same module objects,
not a copy), so the gradient of the value loss reaches the policy's trunk parameters. The trunk is
*not* registered as a submodule of the critic: ``critic.parameters()``, ``critic.state_dict()``,
``critic.to(...)`` and :meth:`ValueModel.parameters_to_train` see the head only. The trunk's
parameters are already in the policy's optimizer, which therefore steps them on the sum of the
policy and value gradients; put the head's parameters (:meth:`parameters_to_train`) in an optimizer
too (a second param group of the policy's optimizer, or one of its own). Checkpoints save the head
only (the trunk is saved with the policy).

**Separate** (``ValueModel.separate``): the base model of another causal LM (a path / Hub id /
``"default"``, loaded with :func:`rewardlab.models.load_model` and its LM head dropped, or a module
passed in), with parameters of its own: the critic owns (registers) the trunk, and
:meth:`parameters_to_train` and checkpoints hold head + trunk. The critic reads the *policy's*
token ids, so it must share the policy's vocabulary (:meth:`values` checks the ids fit).

**Position convention** (verl's ``values[:, -response_length - 1:-1]``): for a batch laid out by
:func:`rewardlab.train.logprobs.pad_batch` (left-padded prompts, right-padded responses, the
response in the last R positions), ``values[:, t]`` is the head applied to the hidden state at the
position *before* response token t is emitted: the last prompt token for t = 0, response token
t - 1 for t > 0. That is the state in which token t is chosen, the same position whose logits give
token t's log-prob. Position ids count real tokens only, so left padding does not change a value.
Padded response positions are exactly 0.

**Detach** (``detach_below=N``): with N > 0 the hidden state entering the top N decoder blocks is
detached (and the blocks below run without autograd, keeping no activations), so the value loss
trains only the top N blocks, the final norm and the head; the embeddings and the lower blocks get
no value gradient. ``detach_below=0`` back-propagates through the whole trunk. The cut is a forward
pre-hook on block ``-N``, active only inside :meth:`values`: the policy's own forwards are
untouched. Hooks run outside HF's gradient checkpointing, so both compose.

**Head init**: ``nn.Linear(hidden, 1)`` kept in float32 (values are regression outputs; the trunk's
hidden state is cast up), bias 0, weight ~ N(0, init_std) with ``init_std = 1 / (hidden + 1)``
(OpenRLHF's value-head init) drawn from a generator seeded with ``seed``, so the head does not
depend on, or advance, the global RNG. After the final norm the hidden state has entries of order
1, so initial values are of order 1/sqrt(hidden): small, but the head's weight is non-zero, so the
trunk gets a gradient from the first step. ``init_std=0`` gives an all-zero head (V = 0 at the
start; then the first step trains the head only, since dV/dh = w = 0).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from rewardlab.errors import RewardlabError
from rewardlab.train.logprobs import decoder_blocks, pad_batch

SAVE_FORMAT = "rewardlab.value_model/1"


def _base_model(model: Any) -> Any:
    """The transformer trunk (HF base model, its ``last_hidden_state`` after the final norm) of a
    causal LM; a base model (no LM head) is returned as is."""
    prefix = getattr(model, "base_model_prefix", None)
    if prefix and isinstance(getattr(model, prefix, None), torch.nn.Module):
        return getattr(model, prefix)
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        with contextlib.suppress(Exception):
            dec = get_decoder()
            if isinstance(dec, torch.nn.Module) and dec is not model:
                return dec
    inner = getattr(model, "model", None)
    if isinstance(inner, torch.nn.Module):
        return inner
    if callable(getattr(model, "get_input_embeddings", None)) and decoder_blocks(model) is not None:
        return model  # already a base model
    raise RewardlabError(f"cannot find the transformer trunk of {type(model).__name__}")


def _hidden_size(trunk: Any) -> int:
    config = getattr(trunk, "config", None)
    for name in ("hidden_size", "n_embd", "d_model"):
        if isinstance(getattr(config, name, None), int):
            return int(getattr(config, name))
    emb = trunk.get_input_embeddings()
    return int(emb.embedding_dim)


def _first_param(module: Any) -> torch.Tensor:
    return next(iter(module.parameters()))


class ValueModel(torch.nn.Module):
    """A value head on a transformer trunk (shared with the policy or separate); see the module docstring.

    Build with :meth:`shared` or :meth:`separate`. Attributes: ``mode`` (``"shared"`` /
    ``"separate"``), ``detach_below``, ``hidden_size``, ``head`` (``nn.Linear(hidden, 1)``, float32)
    and ``trunk`` (the base model; registered as a submodule only in separate mode).
    """

    def __init__(self, trunk: Any, *, mode: str, detach_below: int = 0, init_std: float | None = None,
                 seed: int = 0):
        super().__init__()
        if mode not in ("shared", "separate"):
            raise RewardlabError(f"ValueModel mode must be 'shared' or 'separate', not {mode!r}")
        if not isinstance(detach_below, int) or isinstance(detach_below, bool) or detach_below < 0:
            raise RewardlabError(f"detach_below must be an int >= 0, not {detach_below!r}")
        blocks = decoder_blocks(trunk)
        if detach_below > 0 and (blocks is None or detach_below > len(blocks)):
            n = 0 if blocks is None else len(blocks)
            raise RewardlabError(f"detach_below={detach_below}: the trunk has {n} decoder blocks")
        self.mode = mode
        self.detach_below = detach_below
        self.hidden_size = _hidden_size(trunk)
        if mode == "separate":
            self.trunk = trunk  # registered: its parameters are the critic's
        else:
            object.__setattr__(self, "trunk", trunk)  # not registered: the policy owns these parameters
        std = 1.0 / (self.hidden_size + 1) if init_std is None else float(init_std)
        if std < 0:
            raise RewardlabError(f"init_std must be >= 0, not {init_std!r}")
        head = torch.nn.Linear(self.hidden_size, 1, dtype=torch.float32)
        with torch.no_grad():
            gen = torch.Generator().manual_seed(seed)
            head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * std)
            head.bias.zero_()
        self.head = head.to(_first_param(trunk).device)

    # ------------------------------------------------------------------ construction

    @classmethod
    def shared(cls, policy: Any, detach_below: int = 0, *, init_std: float | None = None,
               seed: int = 0) -> ValueModel:
        """A head on ``policy``'s own trunk (same module objects): value gradients reach the policy's
        trunk, detached below the top ``detach_below`` blocks when > 0. Only the head is the critic's
        to train and save; the trunk is in the policy's optimizer and checkpoint."""
        return cls(_base_model(policy), mode="shared", detach_below=detach_below, init_std=init_std, seed=seed)

    @classmethod
    def separate(cls, path_or_model: str | os.PathLike | Any, *, dtype: Any = "auto", device: Any = None,
                 detach_below: int = 0, init_std: float | None = None, seed: int = 0) -> ValueModel:
        """A critic with a trunk of its own: the base model of the causal LM at ``path_or_model``
        (a folder, Hub id or ``"default"``, via :func:`rewardlab.models.load_model`; the LM head is
        dropped), or of a module passed in (used as given, not copied: do not pass the policy).
        ``dtype``/``device`` (default CPU) apply to a loaded model; a module passed in keeps its
        dtype and is moved only when ``device`` is given."""
        if isinstance(path_or_model, (str, os.PathLike)):
            from rewardlab.models import load_model

            lm, _tokenizer = load_model(str(path_or_model), dtype=dtype, device=str(device or "cpu"))
            trunk = _base_model(lm)
            del lm
        elif isinstance(path_or_model, torch.nn.Module):
            trunk = _base_model(path_or_model)
            if device is not None and torch.device(device) != _first_param(trunk).device:
                trunk = trunk.to(device)
        else:
            raise RewardlabError("ValueModel.separate needs a model path or module, not "
                                 f"{type(path_or_model).__name__}")
        for p in trunk.parameters():
            p.requires_grad_(True)
        return cls(trunk, mode="separate", detach_below=detach_below, init_std=init_std, seed=seed)

    # ------------------------------------------------------------------ training

    def parameters_to_train(self) -> list[torch.nn.Parameter]:
        """What the critic's optimizer must step.

        ``shared``: the head only; the trunk's parameters belong to the policy and are already in
        the policy's optimizer (which then steps them on the policy + value gradients; do not add
        them a second time). ``separate``: the head plus the trunk's parameters that can receive a
        value gradient: all of them with ``detach_below=0``; with ``detach_below=N`` the top N
        blocks and whatever is not in the blocks or the input embeddings (the final norm).
        """
        head = list(self.head.parameters())
        if self.mode == "shared":
            return head
        if self.detach_below == 0:
            return head + list(self.trunk.parameters())
        blocks = decoder_blocks(self.trunk)
        frozen = {id(p) for blk in list(blocks)[: len(blocks) - self.detach_below] for p in blk.parameters()}
        frozen |= {id(p) for p in self.trunk.get_input_embeddings().parameters()}
        return head + [p for p in self.trunk.parameters() if id(p) not in frozen]

    @contextlib.contextmanager
    def _cut(self) -> Iterator[None]:
        """Inside: blocks below the top ``detach_below`` run without autograd and the top ones get a
        detached input. No-op for ``detach_below=0``."""
        if self.detach_below == 0:
            yield
            return
        blocks = decoder_blocks(self.trunk)
        first_top = len(blocks) - self.detach_below
        grad_was = torch.is_grad_enabled()

        def lower_pre(module: Any, args: tuple, kwargs: dict) -> None:
            torch.set_grad_enabled(False)  # the lower blocks' activations are never needed

        def top_pre(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            torch.set_grad_enabled(grad_was)
            if args:
                return (args[0].detach(),) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": kwargs["hidden_states"].detach()}

        handles = []
        if first_top > 0:
            handles.append(blocks[0].register_forward_pre_hook(lower_pre, with_kwargs=True))
        handles.append(blocks[first_top].register_forward_pre_hook(top_pre, with_kwargs=True))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            torch.set_grad_enabled(grad_was)

    # ------------------------------------------------------------------ values

    def values(self, samples: list[Any], pad_id: int, device: Any, *, autocast: Any = None) -> torch.Tensor:
        """V(s_t) for every response position, (B, R) float32; padded positions exactly 0.

        ``samples`` have ``prompt_ids`` (non-empty) and ``token_ids`` (the loop's ``Sample``); the
        layout is :func:`pad_batch`'s and R its response width. ``values[i, t]`` is read at the
        hidden state before response token t (module docstring). Gradients flow: wrap the call in
        ``torch.no_grad()`` for the old values of GAE.
        """
        if any(len(s.prompt_ids) == 0 for s in samples):
            raise RewardlabError("ValueModel.values: every sample needs a non-empty prompt (V(s_0) is read at its last "
                                 "token)")
        vocab = self.trunk.get_input_embeddings().num_embeddings
        top = max(max(s.prompt_ids) for s in samples)
        top = max([top] + [max(s.token_ids) for s in samples if s.token_ids])
        if top >= vocab:
            raise RewardlabError(f"ValueModel.values: token id {top} is outside the critic's vocabulary ({vocab}); "
                                 "a separate critic must share the policy's tokenizer")
        return self.values_from_batch(pad_batch(samples, pad_id, device), autocast=autocast)

    def values_from_batch(self, batch: dict[str, Any], *, autocast: Any = None) -> torch.Tensor:
        """:meth:`values` on a batch already built by :func:`pad_batch` (e.g. the one the
        log-prob pass used), (B, R) float32."""
        R = batch["R"]
        ctx = autocast if autocast is not None else contextlib.nullcontext()
        with self._cut(), ctx:
            out = self.trunk(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"],
                use_cache=False,
            )
        hidden = out.last_hidden_state[:, -R - 1 : -1, :]  # (B, R, H): the state before each response token
        v = self.head(hidden.to(self.head.weight.dtype)).squeeze(-1)  # (B, R)
        mask = batch["response_mask"].to(v.device) > 0  # (B, R)
        return torch.where(mask, v, torch.zeros((), dtype=v.dtype, device=v.device))

    def forward(self, samples: list[Any], pad_id: int, device: Any, **kwargs: Any) -> torch.Tensor:
        return self.values(samples, pad_id, device, **kwargs)

    # ------------------------------------------------------------------ checkpoints

    def state_dict_to_save(self) -> dict[str, Any]:
        """What a checkpoint stores, as plain CPU tensors, ints and strings (``torch.save``-able,
        loadable with ``weights_only=True``): ``head`` always, ``trunk`` only for ``separate`` (a
        shared trunk is saved with the policy)."""

        def cpu(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v.detach().to("cpu", copy=True) for k, v in sd.items()}

        state: dict[str, Any] = {
            "format": SAVE_FORMAT,
            "mode": self.mode,
            "detach_below": self.detach_below,
            "hidden_size": self.hidden_size,
            "head": cpu(self.head.state_dict()),
        }
        if self.mode == "separate":
            state["trunk"] = cpu(self.trunk.state_dict())
        return state

    def load_saved(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict_to_save` returned, into a critic built the same way."""
        if not isinstance(state, dict) or state.get("format") != SAVE_FORMAT:
            raise RewardlabError(f"not a saved value model (expected format {SAVE_FORMAT!r})")
        if state.get("mode") != self.mode:
            raise RewardlabError(f"saved value model is {state.get('mode')!r}, this one is {self.mode!r}")
        if state.get("hidden_size") != self.hidden_size:
            raise RewardlabError(f"saved value head has hidden size {state.get('hidden_size')}, this trunk "
                                 f"{self.hidden_size}")
        self.head.load_state_dict(state["head"])
        if self.mode == "separate":
            if "trunk" not in state:
                raise RewardlabError("saved separate value model has no trunk")
            self.trunk.load_state_dict(state["trunk"])


__all__ = ["SAVE_FORMAT", "ValueModel"]
