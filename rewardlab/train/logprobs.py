"""Model compute for the update: which parameters train, padded batches, response-token log-probs.

    freeze_to_top_layers(model, n)      train the top n decoder blocks and the final norm only
    pad_batch(samples, pad_id, device)  left-padded prompts + right-padded responses (B, P+R)
    token_logprobs(model, batch)        log-probs (and entropy) of the response tokens, (B, R)
    shared_prompt_logprobs(...)         the same numbers, each distinct prompt run once (KV cache gathered)
    FrozenPrefix                        replay the frozen bottom blocks' output instead of recomputing it

``samples`` are anything with ``group``, ``prompt_ids`` and ``token_ids`` (the loop's ``Sample``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import SamplingParams
from rewardlab.rollout.behaviour import logprobs as behaviour_logprobs


def freeze_to_top_layers(model: Any, n: int) -> int:
    """Train only the top ``n`` decoder blocks and the final norm (n = 0 trains everything).

    Returns the number of trainable parameters. Embeddings and (tied) LM head stay frozen, which
    keeps a CPU step cheap: the backward pass stops at the lowest trained block.
    """
    if n <= 0:
        for p in model.parameters():
            p.requires_grad_(True)
        return sum(p.numel() for p in model.parameters())
    blocks = decoder_blocks(model)
    if blocks is None:
        raise RewardlabError("--train-top-layers: cannot find the model's decoder blocks; use --train-top-layers 0")
    for p in model.parameters():
        p.requires_grad_(False)
    for block in list(blocks)[-n:]:
        for p in block.parameters():
            p.requires_grad_(True)
    base = getattr(model, "base_model", None) or getattr(model, "model", None)
    norm = getattr(base, "norm", None) or getattr(base, "final_layernorm", None) or getattr(base, "ln_f", None)
    if norm is not None:
        for p in norm.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def decoder_blocks(model: Any) -> Any:
    """The model's stack of transformer blocks (the longest ``nn.ModuleList``), or None."""
    blocks = None
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) > 0 and (blocks is None or len(mod) > len(blocks)):
            blocks = mod
    return blocks


class SkippedBlock(torch.nn.Module):
    """Stands in for a frozen block whose output is replayed: returns its input."""

    def forward(self, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        return hidden_states


class FrozenPrefix:
    """Compute the frozen bottom blocks once per step, not once per pass.

    With ``--train-top-layers N`` the hidden states entering the lowest trained block depend only
    on frozen weights, so they are the same for the old-log-prob pass and for every mini-batch and
    epoch of the update. :meth:`capture` records them during the (no-grad) old-log-prob forward;
    :meth:`replay` runs later forwards with the frozen blocks skipped and the recorded states fed
    into the first trained block. On a CPU with 4 of 30 blocks trained this removes most of the
    update's forward cost. Used only in one process with an off-policy step (where passes repeat).
    """

    def __init__(self, blocks: Any, n_top: int):
        self.blocks = blocks
        self.first = len(blocks) - n_top

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[Any]]:
        out: list[Any] = []

        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            out.append((args[0] if args else kwargs["hidden_states"]).detach())

        handle = self.blocks[self.first].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield out
        finally:
            handle.remove()

    @contextlib.contextmanager
    def replay(self, hidden: Any) -> Iterator[None]:
        def hook(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if args:
                return (hidden,) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": hidden}

        saved = [self.blocks._modules[str(i)] for i in range(self.first)]
        handle = self.blocks[self.first].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            skip = SkippedBlock()
            for i in range(self.first):
                self.blocks._modules[str(i)] = skip
            yield
        finally:
            for i, mod in enumerate(saved):
                self.blocks._modules[str(i)] = mod
            handle.remove()


def pad_batch(samples: list[Any], pad_id: int, device: Any) -> dict[str, Any]:
    """Left-pad prompts and right-pad responses, so the response occupies the last R positions.

    Returns ``input_ids``/``attention_mask``/``position_ids`` (B, P+R), ``response_ids`` and
    ``response_mask`` (B, R). Position ids count real tokens only, as HF ``generate`` does with
    left padding, so training log-probs match the sampling distribution. ``response_mask`` is the
    loss mask: 1 at the tokens the model sampled, 0 at padding and at the observation tokens a tool
    rollout inserted (a sample's ``loss_mask``), which the model attends to but is not trained on.
    """
    P = max(len(s.prompt_ids) for s in samples)
    R = max(1, max(len(s.token_ids) for s in samples))
    B = len(samples)
    ids = torch.full((B, P + R), pad_id, dtype=torch.long)  # (B, P+R)
    attn = torch.zeros((B, P + R), dtype=torch.long)  # (B, P+R)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.token_ids)
        ids[i, P - p : P] = torch.tensor(s.prompt_ids)
        attn[i, P - p : P] = 1
        if r:
            ids[i, P : P + r] = torch.tensor(s.token_ids)
            attn[i, P : P + r] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P+R)
    return {
        "input_ids": ids.to(device),
        "attention_mask": attn.to(device),
        "position_ids": pos.to(device),
        "response_ids": ids[:, P:].to(device),  # (B, R)
        "response_mask": loss_mask(samples, R).to(device),  # (B, R)
        "R": R,
    }


def loss_mask(samples: list[Any], width: int) -> torch.Tensor:
    """``(B, width)`` float: 1 at each response token the model sampled, 0 at padding and at a tool rollout's
    inserted observation tokens (a sample's ``loss_mask``; None = every token was sampled)."""
    out = torch.zeros((len(samples), width), dtype=torch.float32)  # (B, width)
    for i, s in enumerate(samples):
        m = getattr(s, "loss_mask", None)
        if m is not None:
            out[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
        else:
            out[i, : len(s.token_ids)] = 1.0
    return out


def token_logprobs(model: Any, batch: dict[str, Any], *, with_entropy: bool = False, autocast: Any = None,
                   behaviour: SamplingParams | None = None):
    """Log-probs of the response tokens under ``model``'s behaviour distribution (B, R), and optionally its
    entropy (B, R): the logits divided by the sampling temperature, renormalised over the top-k / top-p kept
    set or not, as ``behaviour`` says (:func:`rewardlab.rollout.behaviour.logprobs`; None = T 1, full vocabulary).

    Only the last R+1 positions go through the LM head (``logits_to_keep``), which on a 49k-word
    vocabulary is most of the saving over computing logits for the prompt too.
    """
    R = batch["R"]
    ctx = autocast if autocast is not None else contextlib.nullcontext()
    with ctx:
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            logits_to_keep=R + 1,
            use_cache=False,
        )
    logits = out.logits[:, :-1, :]  # (B, R, V): position t predicts response token t
    return behaviour_logprobs(logits, batch["response_ids"], behaviour, with_entropy=with_entropy)  # (B, R) x 2


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument of ``model.forward`` (``cache`` in transformers 5, else ``past_key_values``)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def shared_prompt_logprobs(model: Any, samples: list[Any], pad_id: int, device: Any, *,
                           prefix: FrozenPrefix | None = None, autocast: Any = None, grad: bool = False,
                           with_entropy: bool = False, behaviour: SamplingParams | None = None
                           ) -> tuple[Any, Any, Any]:
    """Log-probs of the response tokens, running each distinct prompt once (not G times).

    The G completions of a group share their prompt, and under causal attention the prompt's keys
    and values do not depend on the completion. So the distinct prompts go through the model once
    (U rows), their KV cache is gathered to the B rows, and only the responses are run on top of
    it. Same numbers as :func:`token_logprobs` on :func:`pad_batch` (up to float rounding), at a
    fraction of the cost when prompts are long and answers short. With ``grad=True`` gradients
    flow through the gathered cache back into the shared prompt pass (each prompt's gradient is
    the sum over its rows, as in the padded forward). Returns ``(logp (B, R), entropy (B, R) or
    None, hidden)``; with ``prefix``, ``hidden`` is the input of the first trained block laid out
    like ``pad_batch`` (B, P+R, H), for :meth:`FrozenPrefix.replay`; else None.
    """
    slot: dict[tuple[int, ...], int] = {}  # by the prompt's ids (a --feedback critic step's group has G prompts)
    prompts: list[list[int]] = []
    for s in samples:
        if tuple(s.prompt_ids) not in slot:
            slot[tuple(s.prompt_ids)] = len(prompts)
            prompts.append(s.prompt_ids)
    idx = torch.tensor([slot[tuple(s.prompt_ids)] for s in samples], device=device)  # (B,) row -> distinct prompt
    P = max(len(p) for p in prompts)
    R = max(1, max(len(s.token_ids) for s in samples))
    U, B = len(prompts), len(samples)
    pids = torch.full((U, P), pad_id, dtype=torch.long)  # (U, P) left-padded
    pmask = torch.zeros((U, P), dtype=torch.long)  # (U, P)
    for u, p in enumerate(prompts):
        pids[u, P - len(p):] = torch.tensor(p)
        pmask[u, P - len(p):] = 1
    rids = torch.full((B, R), pad_id, dtype=torch.long)  # (B, R) right-padded
    rmask = torch.zeros((B, R), dtype=torch.long)  # (B, R)
    for i, s in enumerate(samples):
        if s.token_ids:
            rids[i, : len(s.token_ids)] = torch.tensor(s.token_ids)
            rmask[i, : len(s.token_ids)] = 1
    pids, pmask, rids, rmask = pids.to(device), pmask.to(device), rids.to(device), rmask.to(device)
    full_mask = torch.cat([pmask[idx], rmask], dim=1)  # (B, P+R)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P+R)
    key = _cache_kwarg(model)
    ctx = autocast if autocast is not None else contextlib.nullcontext()
    grad_ctx = contextlib.nullcontext() if grad else torch.no_grad()
    with grad_ctx, (prefix.capture() if prefix else contextlib.nullcontext([])) as cap, ctx:
        out = model(input_ids=pids, attention_mask=pmask, position_ids=(pmask.cumsum(-1) - 1).clamp(min=0),
                    use_cache=True, logits_to_keep=1)
        cache = getattr(out, "cache", None) or out.past_key_values
        cache.reorder_cache(idx)  # (U, ...) -> (B, ...): every row gets its prompt's keys/values
        out2 = model(input_ids=rids, attention_mask=full_mask, position_ids=pos[:, P:], use_cache=True,
                     **{key: cache})
    first = out.logits[:, -1, :].float()[idx]  # (B, V): predicts the first response token
    logits = torch.cat([first[:, None, :], out2.logits[:, :-1, :].float()], dim=1)  # (B, R, V)
    lp, ent = behaviour_logprobs(logits, rids, behaviour, with_entropy=with_entropy)  # (B, R) x 2
    hidden = None
    if prefix is not None and len(cap) == 2:
        hidden = torch.cat([cap[0][idx], cap[1]], dim=1).detach()  # (B, P+R, H)
    return lp, ent, hidden


def packed_logprobs(model: Any, samples: list[Any], device: Any, *, groups: bool = False, autocast: Any = None,
                    grad: bool = False, with_entropy: bool = False, behaviour: SamplingParams | None = None
                    ) -> tuple[Any, Any]:
    """The numbers of :func:`token_logprobs`, laid out (B, R), from one padding-free row.

    ``groups=False`` (``--packing sequences``): each sample's prompt and response one after another, position
    ids restarting at each, so attention never crosses a sequence (transformers builds the block-causal mask
    from the position ids; on GPU with flash-attention it is the varlen kernel). ``groups=True``
    (``--packing groups``): each distinct prompt once, followed by its responses, under a block mask in which a
    response sees its prompt and itself only: the prompt's forward and backward run once per group, with
    exact gradients. Only the positions that predict a response token go through the LM head."""
    ids, pos, heads, keep, blocks = _pack(samples, groups)
    N = len(ids)
    kwargs: dict[str, Any] = {}
    if groups:  # (1, 1, N, N): causal within a block, and a response's block also sees its prompt's block
        blk = torch.tensor(blocks[0], device=device)  # (N,) block id of each position
        owner = torch.tensor(blocks[1], device=device)  # (N,) the prompt block each position may see
        q, k = torch.arange(N, device=device)[:, None], torch.arange(N, device=device)[None, :]
        allowed = (k <= q) & ((blk[None, :] == blk[:, None]) | (blk[None, :] == owner[:, None]))  # (N, N)
        kwargs["attention_mask"] = _as_model_mask(model, allowed)
    ctx = autocast if autocast is not None else contextlib.nullcontext()
    grad_ctx = contextlib.nullcontext() if grad else torch.no_grad()
    with grad_ctx, ctx:
        out = model(input_ids=torch.tensor([ids], device=device), position_ids=torch.tensor([pos], device=device),
                    logits_to_keep=torch.tensor(heads, device=device), use_cache=False, **kwargs)
    tokens = torch.tensor([[t for s in samples for t in s.token_ids]], device=device)  # (1, M)
    lp_flat, ent_flat = behaviour_logprobs(out.logits, tokens, behaviour, with_entropy=with_entropy)  # (1, M)
    R = max(1, max(len(s.token_ids) for s in samples))
    rows = torch.tensor(keep[0], device=device)  # (M,) row of each response token
    cols = torch.tensor(keep[1], device=device)  # (M,) its column
    lp = torch.zeros((len(samples), R), dtype=lp_flat.dtype, device=device).index_put((rows, cols), lp_flat[0])
    ent = None
    if with_entropy:
        ent = torch.zeros((len(samples), R), dtype=lp_flat.dtype, device=device).index_put((rows, cols), ent_flat[0])
    return lp, ent  # (B, R) x 2


def _pack(samples: list[Any], groups: bool) -> tuple[list[int], list[int], list[int], tuple, tuple]:
    """The packed row: token ids, position ids, the LM-head positions (one per response token, in order),
    (row, column) of each response token, and per position (block id, the prompt block it may also see)."""
    ids: list[int] = []
    pos: list[int] = []
    heads: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    blk: list[int] = []
    owner: list[int] = []
    prompt_end: dict[tuple[int, ...], tuple[int, int, int]] = {}  # prompt -> (last position, its length, block)
    for i, s in enumerate(samples):
        key = tuple(s.prompt_ids)
        if not groups or key not in prompt_end:  # the prompt's block
            b = len(prompt_end) if groups else i
            ids += s.prompt_ids
            pos += range(len(s.prompt_ids))
            blk += [2 * b] * len(s.prompt_ids)
            owner += [2 * b] * len(s.prompt_ids)
            prompt_end[key] = (len(ids) - 1, len(s.prompt_ids), 2 * b)
        last, plen, pblock = prompt_end[key]
        start = len(ids)
        ids += s.token_ids
        pos += range(plen, plen + len(s.token_ids))
        rblock = 2 * i + 1 + 2 * len(samples)  # a block of its own (ids apart from every prompt block)
        blk += [rblock if groups else pblock] * len(s.token_ids)
        owner += [pblock] * len(s.token_ids)
        for t in range(len(s.token_ids)):
            heads.append(last if t == 0 else start + t - 1)
            rows.append(i)
            cols.append(t)
    return ids, pos, heads, (rows, cols), (blk, owner)


def _as_model_mask(model: Any, allowed: Any) -> Any:
    """``allowed`` (N, N) bool as the 4D mask the model's attention takes: bool for SDPA / flex, additive
    float for eager."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", "sdpa")
    mask = allowed[None, None]  # (1, 1, N, N)
    if impl == "eager":
        dtype = next(model.parameters()).dtype
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return mask


__all__ = ["FrozenPrefix", "decoder_blocks", "freeze_to_top_layers", "loss_mask", "pad_batch", "packed_logprobs",
           "shared_prompt_logprobs",
           "token_logprobs"]
