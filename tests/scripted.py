"""A test model that makes tool calls on cue: :class:`Scripted` (used by test_multiturn.py and test_tools_train.py)."""

from __future__ import annotations

import torch


class Scripted(torch.nn.Module):
    """The real model, except that ``script`` is forced at the start of the response and (up to
    ``times`` in all) right after each observation.

    The rollout starts every turn with a prefill of the whole context (no cache) and then decodes
    one token per row; so at a prefill each row is at the start of a turn, and the row forces the
    script if its context holds fewer than ``times`` copies of it (rows sharing a prefill all start
    alike). Rows leave the batch through the
    cache's ``batch_select_indices``; the cache handed back is a proxy that drops their state too."""

    def __init__(self, model, script: list[int], times: int = 1):
        super().__init__()
        self.inner, self.script, self.times = model, list(script), times
        self.generation_config = model.generation_config
        self.state: list[int | None] = []  # per batch row: index into the script, None = not forcing

    def _copies(self, ctx: list[int]) -> int:
        k = len(self.script)
        return sum(ctx[i : i + k] == self.script for i in range(len(ctx) - k + 1))

    def forward(self, input_ids=None, cache=None, attention_mask=None, use_cache=True, **kw):
        inner_cache = cache.inner if isinstance(cache, _ProxyCache) else cache
        out = self.inner(input_ids=input_ids, cache=inner_cache, attention_mask=attention_mask, use_cache=use_cache,
                         **kw)
        if cache is None:  # a prefill: every row starts a turn
            ctxs = [[int(x) for x, m in zip(row, mrow) if m] for row, mrow in zip(input_ids.tolist(),
                                                                                   attention_mask.tolist())]
            self.state = [0 if self._copies(c) < self.times else None for c in ctxs]
            out.cache = _ProxyCache(out.cache, self)
        logits = out.logits.clone()
        if len(self.state) != logits.shape[0]:  # the prefill's distinct contexts were copied to their rows
            assert len(set(self.state)) == 1, "Scripted cannot tell which rows a shared prefill was copied to"
            self.state = self.state[:1] * logits.shape[0]
        for r, k in enumerate(self.state):
            if k is not None:
                logits[r, -1, :] = float("-inf")
                logits[r, -1, self.script[k]] = 0.0
                self.state[r] = k + 1 if k + 1 < len(self.script) else None
        out.logits = logits
        return out


class _ProxyCache:
    """The inner model's cache; row selection also selects :class:`Scripted`'s per-row state."""

    def __init__(self, inner, owner: Scripted):
        self.inner, self.owner = inner, owner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def batch_select_indices(self, indices):
        self.owner.state = [self.owner.state[i] for i in indices.tolist()]
        self.inner.batch_select_indices(indices)


def assert_sampler_logprobs(model, t, start: int = 0, tol: float = 1e-4) -> None:
    """A forward pass of ``model`` over ``t.prompt_ids + t.token_ids`` gives the trajectory's recorded
    log-prob at every sampled position from ``start`` on (the raw softmax: sampling at temperature 1)."""
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([t.prompt_ids + t.token_ids])).logits[0].float(), -1)
    P = len(t.prompt_ids)
    for k in range(start, len(t.token_ids)):
        if t.loss_mask[k]:
            assert abs(float(logp[P + k - 1, t.token_ids[k]]) - t.logprobs[k]) < tol, (k, t.logprobs[k])
