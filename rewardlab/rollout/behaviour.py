"""The behaviour distribution: what a sampled token's log-prob means, written once.

Every log-prob in a run is a log-prob under one distribution derived from the model's logits and the
run's :class:`~rewardlab.rollout.base.SamplingParams`: the trainer's current and old log-probs, the
reference model's (KL), the entropy bonus, the HF engine's and the vLLM engine's recorded log-probs,
and therefore every importance ratio, mismatch metric and rollout correction. Two conventions
(``SamplingParams.support``, ``--logprob-support``):

    support   distribution                                              who uses it
    kept      softmax(logits / T) renormalised over the sampler's       TRL PR #7269, prime-rl #3235,
              kept set (top-k, then top-p, as HF's warpers), i.e.       vLLM processed_logprobs
              exactly the distribution the token was drawn from
    full      softmax(logits / T) over the whole vocabulary             TRL GRPOTrainer, verl actor

Both divide by the temperature (T); they differ only when top-k or top-p truncates. ``kept`` is the
default: it is the distribution the sampler draws from, so a synchronous on-policy step has importance
weights of exactly 1 and a rollout KL of 0 under either engine, and no truncated mass enters a ratio
(the measurement behind the choice: README, "Sampling-faithful log-probs").

The kept set is replayed, not stored: the trainer applies the same warpers (:func:`warpers`, HF's own
classes, in ``generate``'s order) to its own tempered logits. With the sampler's weights (on-policy) the
set is the sampler's bit for bit; with newer weights (off-policy epochs, ``--async-steps``) it is the
current policy's kept set, with the sampled token always added, so a stale token never gets -inf.

torch and transformers load inside the functions: importing this module is free (the CLI imports it).
"""

from __future__ import annotations

from typing import Any

from rewardlab.rollout.base import SamplingParams

DEFAULT_SUPPORT = "kept"
"""The convention of a run that does not choose one (``--logprob-support``)."""


def warpers(sampling: SamplingParams) -> list:
    """HF's temperature / top-k / top-p warpers for ``sampling``, in the order ``generate`` applies them
    (none for greedy decoding, temperature 0: its log-prob is the raw model's)."""
    return [*_temperature(sampling), *_truncation(sampling)] if sampling.temperature > 0 else []


def _temperature(sampling: SamplingParams) -> list:
    from transformers.generation.logits_process import TemperatureLogitsWarper  # lazy: see the module docstring

    return [TemperatureLogitsWarper(float(sampling.temperature))] if sampling.temperature != 1.0 else []


def _truncation(sampling: SamplingParams) -> list:
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper  # lazy (as above)

    out: list = []
    if sampling.top_k != 0:
        out.append(TopKLogitsWarper(top_k=sampling.top_k, min_tokens_to_keep=1))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=sampling.top_p, min_tokens_to_keep=1))
    return out


def recorded_at(sampling: SamplingParams) -> int:
    """How many of :func:`warpers` run before a sampler records a token's log-prob: all of them under
    ``kept`` (the drawn distribution), the temperature only under ``full``."""
    if sampling.temperature <= 0:
        return 0
    return len(warpers(sampling)) if sampling.support == "kept" else len(_temperature(sampling))


def truncating(sampling: SamplingParams) -> bool:
    """Whether top-k or top-p cut the vocabulary (the two conventions differ only then)."""
    return sampling.top_k != 0 or sampling.top_p < 1.0


def truncates(sampling: SamplingParams) -> bool:
    """Whether the recorded distribution is renormalised over a kept set (``kept`` with top-k or top-p on)."""
    return sampling.support == "kept" and truncating(sampling)


def describe(sampling: SamplingParams) -> str:
    """One line for the start-up line and results files, e.g. ``T=0.7, top-k 50, top-p 0.9, kept-set renormalised``."""
    parts = [f"T={sampling.temperature:g}"]
    if sampling.top_k:
        parts.append(f"top-k {sampling.top_k}")
    if sampling.top_p < 1.0:
        parts.append(f"top-p {sampling.top_p:g}")
    if truncating(sampling):
        parts.append("kept-set renormalised" if sampling.support == "kept" else "full vocabulary")
    return ", ".join(parts)


def logprobs(logits: Any, tokens: Any, sampling: SamplingParams | None, *, with_entropy: bool = False
             ) -> tuple[Any, Any]:
    """Log-probs of ``tokens`` (B, R) under the behaviour distribution of ``logits`` (B, R, V), and its
    entropy (B, R) when asked. ``sampling=None``: the raw model (T = 1, full vocabulary).

    Gradients flow through the tempered logits; the kept set (under ``kept`` with truncation) is chosen
    without gradient by :func:`warpers` on this model's own logits, with each row's sampled token added.
    """
    import torch  # lazy: see the module docstring

    z = logits if logits.dtype == torch.float64 else logits.float()  # (B, R, V) at least float32
    if sampling is not None and sampling.temperature != 1.0:
        z = z / float(sampling.temperature)
    keep = None
    if sampling is not None and truncates(sampling):
        keep = kept_set(z.detach(), sampling)  # (B, R, V) bool
        keep.scatter_(-1, tokens.unsqueeze(-1), True)  # the sampled token is always in the support
        z = z.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(z, dim=-1)  # (B, R)
    lp = z.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse  # (B, R)
    ent = None
    if with_entropy:
        finite = z if keep is None else z.masked_fill(~keep, 0.0)  # (B, R, V): 0 * -inf would be nan
        ent = lse - (torch.softmax(z, dim=-1) * finite).sum(-1)  # (B, R)
    return lp, ent


def kept_set(tempered: Any, sampling: SamplingParams) -> Any:
    """(…, V) bool: the tokens top-k / top-p keep from ``tempered`` (already divided by T), by HF's warpers."""
    import torch  # lazy: see the module docstring

    shape = tempered.shape
    flat = tempered.reshape(-1, shape[-1])  # (N, V): the warpers scatter along dim 1
    with torch.no_grad():
        for warper in _truncation(sampling):
            flat = warper(None, flat)
    return torch.isfinite(flat).reshape(shape)


__all__ = ["DEFAULT_SUPPORT", "describe", "kept_set", "logprobs", "recorded_at", "truncates", "truncating",
           "warpers"]
