"""The batch decode loop shared by the HF engine (single turn) and the multi-turn rollouts.

    start = prefill(model, distinct_contexts, rows, pad_id=pad, room=T)   # U distinct contexts -> B rows
    steps = decode(model, start, T, pick=..., on_step=..., pad_id=pad)    # lockstep decoding on a KV cache

:func:`prefill` runs each distinct context once (left-padded, position ids counting real tokens) and
copies its last logits and KV cache to every row that shares it (under causal attention a context's
keys and values do not depend on what follows it). :func:`decode` is ``generate``'s sampling loop step
for step: the warpers shape the scores, the token is drawn as ``torch.multinomial`` draws it (one
Exp(1) draw per row and step, ``argmax(probs / q)``), rows that ended are fed ``pad``, and rows that
ended leave the batch (cache rows ``index_select``-ed away) once they are ``drop_share`` of it. What a
step's token means (EOS, a stop string, a closed tool call, a budget) is the caller's ``on_step``; where
the Exp(1) draws come from is the caller's ``pick``: :func:`shared_stream` (the engine: one (B, V) draw
per step from the global, seeded stream, as ``generate``) or :func:`row_streams` (multi-turn: one
generator per row, so batching never changes what a row samples).

The cache is preallocated for the whole decode and written in place (:func:`preallocate`): no per-step
concatenation, and attention still reads only the filled length (unlike ``StaticCache``).

torch and transformers are imported inside the functions that use them, so importing the rollout
package (the CLI, ``rewardlab eval --compare``) never pays for them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import SamplingParams
from rewardlab.rollout.behaviour import recorded_at, warpers

DROP_SHARE = 0.25
"""The engine's rule: ended rows leave the batch once they are a quarter of it. Each compaction copies the
cache, so dropping them one at a time costs more: on a hidden-768 model whose rows end early, 3.16 s
dropping at every ended row, 2.81 at a quarter (2.77 at an eighth, 2.93 at a half), 4.62 never."""

Pick = Callable[[Any, Any], Any]
"""``pick(probs (A, V), active (A,)) -> q (A, V)``: the Exp(1) draws of the live rows (``active``: row indices)."""
OnStep = Callable[[int, Any, Any, Any, Any, Any], Any]
"""``on_step(t, active (A,), token (A,), logprob (A,) or None, seq (A, P + t + 1) or None, scores (A, V))``
-> ``ended (A,)``: which rows ended at this step's token."""


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokenizer's EOS id, then any other the model's generation config names, without repeats."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    for i in extra if isinstance(extra, (list, tuple)) else ([] if extra is None else [extra]):
        if int(i) not in ids:
            ids.append(int(i))
    return ids


@contextlib.contextmanager
def seeded(seed: int | None, device: Any) -> Iterator[None]:
    """Seed torch for the block and restore the previous RNG state afterwards (no-op for None)."""
    import torch  # lazy: see the module docstring

    if seed is None:
        yield
        return
    devices = [device] if getattr(device, "type", "cpu") == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def inference_mode(model: Any) -> Iterator[None]:
    """model.eval() + no_grad for the block; the previous training flag is restored."""
    import torch  # lazy: see the module docstring

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def can_share(model: Any) -> bool:
    """Whether this loop can drive ``model``: a decoder-only forward taking the mask, position ids and a KV cache."""
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return False
    params = inspect.signature(model.forward).parameters
    return {"attention_mask", "position_ids", "use_cache"} <= set(params) and (
        "cache" in params or "past_key_values" in params
    )


def forward_kwargs(model: Any) -> tuple[str, dict]:
    """The KV-cache argument's name (``cache`` in transformers 5, else ``past_key_values``) and the
    prefill's ``logits_to_keep=1`` where the forward takes it."""
    params = inspect.signature(model.forward).parameters
    key = "cache" if "cache" in params else "past_key_values"
    return key, ({"logits_to_keep": 1} if "logits_to_keep" in params else {})


@dataclass
class Prefilled:
    """The rows of a decode after :func:`prefill`: each row's first logits and its context in the cache."""

    cache: Any
    """The KV cache, (B, ...) rows."""
    cache_key: str
    """The forward's name for the cache argument."""
    logits: Any  # (B, V) predicts each row's first token
    mask: Any  # (B, L) attention mask of the contexts
    next_pos: Any  # (B,) position of the token fed next
    ids: Any  # (B, L) the left-padded contexts (what a stop-string check reads)


def prefill(model: Any, distinct: list[list[int]], rows: list[int], *, pad_id: int, room: int) -> Prefilled:
    """Run the ``distinct`` contexts (U token lists) once and give row ``b`` the logits and cache of
    ``distinct[rows[b]]``, the cache preallocated for ``room`` more tokens. Call under :func:`inference_mode`."""
    import torch  # lazy: see the module docstring

    device = next(model.parameters()).device
    width = max(len(c) for c in distinct)
    ids = torch.full((len(distinct), width), pad_id, dtype=torch.long)  # (U, L) left-padded
    mask = torch.zeros((len(distinct), width), dtype=torch.long)  # (U, L)
    for u, c in enumerate(distinct):
        ids[u, width - len(c):] = torch.tensor(c, dtype=torch.long)
        mask[u, width - len(c):] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # (U, L), as generate builds them
    key, prefill_kw = forward_kwargs(model)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **prefill_kw)
    cache = output_cache(out)
    index = torch.tensor(rows, device=device)  # (B,) row -> its distinct context
    logits = out.logits[:, -1, :].float()[index]  # (B, V)
    del out
    if not preallocate(cache, index, room):  # (U, ...) -> (B, ...): every row gets its context's keys / values
        cache.reorder_cache(index)
    return Prefilled(cache, key, logits, mask[index], pos[index, -1] + 1, ids[index])


def shared_stream(rows: int) -> Pick:
    """``generate``'s draws: one (rows, V) Exp(1) tensor per step from torch's global stream; live rows read theirs."""
    import torch  # lazy: see the module docstring

    def pick(probs: Any, active: Any) -> Any:
        q = torch.empty((rows, probs.shape[1]), dtype=probs.dtype, device=probs.device).exponential_(1)  # (B, V)
        return q if q.shape[0] == probs.shape[0] else q[active]  # (A, V)

    return pick


def row_streams(generators: list[Any]) -> Pick:
    """One generator per row (``generators[b]``): a row's draws do not depend on the rows decoded with it."""
    import torch  # lazy: see the module docstring

    def pick(probs: Any, active: Any) -> Any:
        return torch.stack([torch.empty_like(probs[0]).exponential_(1, generator=generators[b])
                            for b in active.tolist()])  # (A, V)

    return pick


def decode(model: Any, start: Prefilled, steps: int, *, sampling: SamplingParams, pick: Pick, on_step: OnStep,
           pad_id: int, record: bool = True, track_ids: bool = False, drop_share: float = DROP_SHARE) -> int:
    """Decode at most ``steps`` tokens for every row of ``start``; returns the steps taken.

    Each step samples a token per live row (greedy for temperature 0: the argmax of the raw logits;
    else the warpers, then ``argmax(probs / pick(probs, active))``), computes its log-prob under the
    scores it was drawn from (``record``), feeds ``pad`` to rows already ended, and hands the step to
    ``on_step``, which says which rows ended at it. Decoding stops when every row has ended or after
    ``steps``. Ended rows leave the batch once they are ``drop_share`` of it (0: at once, and the cache
    must support it). ``track_ids``: keep the running sequences (``seq`` for ``on_step``)."""
    import torch  # lazy: see the module docstring

    cache, logits, mask, next_pos = start.cache, start.logits, start.mask, start.next_pos
    device = logits.device
    can_drop = hasattr(cache, "batch_select_indices")
    greedy, warps = sampling.temperature <= 0, ([] if sampling.temperature <= 0 else warpers(sampling))
    at = recorded_at(sampling)  # the warpers before the recorded (behaviour) distribution
    seq = start.ids if track_ids else None  # (A, L + t)
    active = torch.arange(logits.shape[0], device=device)  # (A,) batch row -> row
    alive = torch.ones(logits.shape[0], dtype=torch.bool, device=device)  # (A,)
    taken = 0
    for t in range(steps):
        scores = recorded = logits  # (A, V)
        if greedy:
            token = scores.argmax(-1)  # (A,)
        else:
            for i, warper in enumerate(warps):  # temperature / top-k / top-p read the scores only
                scores = warper(seq, scores)
                recorded = scores if i < at else recorded  # (A, V) the behaviour distribution's logits
            probs = torch.softmax(scores, dim=-1)  # (A, V)
            token = (probs / pick(probs, active)).argmax(-1)  # (A,) multinomial's draw (exponential race)
        lp = recorded.gather(-1, token[:, None]).squeeze(-1) - torch.logsumexp(recorded, dim=-1) if record else None
        token = token.masked_fill(~alive, pad_id)  # (A,) ended rows continue with pad, as in generate
        if seq is not None:
            seq = torch.cat([seq, token[:, None]], dim=1)
        alive &= ~on_step(t, active, token, lp, seq, scores)
        taken = t + 1
        if t == steps - 1 or not bool(alive.any()):
            break
        if int((~alive).sum()) >= max(1, int(alive.shape[0] * drop_share)) and (can_drop or drop_share == 0):
            if not can_drop:  # rows that ended at once must leave: their streams may not draw again
                raise RewardlabError("decoding that drops ended rows at once needs a KV cache with "
                                     "batch_select_indices")
            keep = alive.nonzero().squeeze(1)  # (A',) rows that carry on
            cache.batch_select_indices(keep)
            mask, next_pos, active, alive, token = mask[keep], next_pos[keep], active[keep], alive[keep], token[keep]
            if seq is not None:
                seq = seq[keep]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos[:, None], use_cache=True,
                    **{start.cache_key: cache})
        logits = out.logits[:, -1, :].float()  # (A, V)
        del out
        next_pos = next_pos + 1
    return taken


@functools.cache
def _buffer_layer_class() -> type:
    """A ``DynamicLayer`` whose keys / values are views of a buffer with room for the whole decode."""
    from transformers.cache_utils import DynamicLayer  # lazy: see the module docstring

    class BufferLayer(DynamicLayer):
        def __init__(self, layer: Any, rows: Any, extra: int):
            super().__init__()
            k, v = layer.keys, layer.values  # (U, H, n, D)
            n = k.shape[-2]
            self.kbuf = k.new_empty((len(rows), *k.shape[1:-2], n + extra, k.shape[-1]))  # (B, H, n + extra, D)
            self.vbuf = v.new_empty((len(rows), *v.shape[1:-2], n + extra, v.shape[-1]))
            self.kbuf[..., :n, :] = k[rows]
            self.vbuf[..., :n, :] = v[rows]
            self.n = n
            self.device = k.device
            self.is_initialized = True
            self._views()

        def _views(self) -> None:
            self.keys = self.kbuf[..., : self.n, :]
            self.values = self.vbuf[..., : self.n, :]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            m = key_states.shape[-2]
            if self.n + m > self.kbuf.shape[-2]:
                raise RewardlabError("shared-prefix decoding ran past its preallocated KV cache")
            self.kbuf[..., self.n : self.n + m, :] = key_states
            self.vbuf[..., self.n : self.n + m, :] = value_states
            self.n += m
            self._views()
            return self.keys, self.values

        def batch_select_indices(self, indices: Any) -> None:
            self.kbuf, self.vbuf = self.kbuf[indices], self.vbuf[indices]
            self._views()

        def reorder_cache(self, beam_idx: Any) -> None:
            self.batch_select_indices(beam_idx)

        def batch_repeat_interleave(self, repeats: int) -> None:
            self.kbuf = self.kbuf.repeat_interleave(repeats, dim=0)
            self.vbuf = self.vbuf.repeat_interleave(repeats, dim=0)
            self._views()

    return BufferLayer


def preallocate(cache: Any, rows: Any, extra: int) -> bool:
    """Expand ``cache`` (U rows) to ``rows`` (B,) into buffers with room for ``extra`` more tokens.

    ``DynamicLayer.update`` concatenates every step (copying the whole cache); the buffered layers
    write in place and hand attention views of the filled part, so attention still reads only the
    real length (unlike ``StaticCache``, which attends over the full preallocated length). Only for a
    cache made entirely of plain full-attention ``DynamicLayer`` (transformers >= 4.56); returns False
    (nothing done) otherwise, and the caller expands the cache with ``reorder_cache``.
    """
    try:
        from transformers.cache_utils import DynamicLayer  # lazy: see the module docstring
    except ImportError:  # transformers < 4.56: no cache layers
        return False
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer or not layer.is_initialized for layer in layers):
        return False
    if getattr(cache, "offloading", False):
        return False
    cls = _buffer_layer_class()
    for i, layer in enumerate(layers):
        layers[i] = cls(layer, rows, extra)
    return True


def output_cache(out: Any) -> Any:
    """The KV cache a forward returned (``cache`` or ``past_key_values``); it must be a transformers Cache."""
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    if cache is None or not hasattr(cache, "reorder_cache"):
        raise RewardlabError("shared-prefix generation needs the model to return a transformers Cache; "
                             "use HFEngine(..., shared_prefix=False)")
    return cache


__all__ = ["can_share", "decode", "eos_ids", "inference_mode", "prefill", "preallocate", "row_streams", "seeded",
           "shared_stream"]
