"""The update stage: old and reference log-probs, then mini-batches x epochs optimizer steps.

Each optimizer step accumulates micro-batches whose loss uses the whole step's token and sequence
counts (all micro-batches, all ranks), so splitting a step never changes its gradient. Off-policy
steps (more than one optimizer step per rollout) take ``lp_old`` from the training model before
any update, never from the inference engine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from rewardlab import algos
from rewardlab.train import distributed
from rewardlab.train.logprobs import pad_batch, shared_prompt_logprobs, token_logprobs
from rewardlab.train.runtime import Batch, Run, Sample, micro_mismatch, oom, oom_error


@dataclass
class Update:
    """What the update stage measured: per-micro-batch loss metrics, grad norms, engine mismatch."""

    loss_metrics: list[dict[str, float]] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    mismatch: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    mismatch_on: bool = False


def update_policy(run: Run, batch: Batch) -> Update:
    """mini-batches x epochs optimizer steps on the kept samples, then push the weights to the engine."""
    cfg, sizes, kept = run.cfg, run.sizes, batch.kept
    t0 = time.perf_counter()
    per_mb = sizes.completions_per_mini_batch  # global; each rank trains on its shard of it
    minis = [distributed.shard(kept[i : i + per_mb], run.dist) for i in range(0, len(kept), per_mb)]
    # engine-vs-trainer log-prob mismatch: only when the engine gave every sampled token's log-prob
    update = Update(mismatch_on=all(s.rollout_logprobs is not None and len(s.rollout_logprobs) == len(s.token_ids)
                                    for s in kept))
    try:
        old_lp, ref_lp, frozen_h = frozen_logprobs(run, minis)
        run.model.train()
        for epoch in range(cfg.epochs):
            for mi, mb in enumerate(minis):
                num_tokens, num_seqs = step_denominators(run, mb)
                for ui in range(0, len(mb), sizes.micro_batch_size):
                    m = micro_step(run, mb[ui : ui + sizes.micro_batch_size], (mi, ui), epoch, old_lp, ref_lp,
                                   frozen_h, num_tokens, num_seqs, update)
                    update.loss_metrics.append(m)
                max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
                update.grad_norms.append(distributed.clip_grad_norm(run.model, max_norm))
                run.optimizer.step()
                run.scheduler.step()
                run.optimizer.zero_grad(set_to_none=True)
        run.engine.load_weights(run.model)
    except RuntimeError as e:
        if oom(e):
            raise oom_error("the update") from None
        raise
    batch.timings["time/update"] = time.perf_counter() - t0
    return update


def frozen_logprobs(run: Run, minis: list[list[Sample]]) -> tuple[dict, dict, dict]:
    """Old log-probs (off-policy steps) and reference log-probs, before any update, keyed by (mini, micro).

    Off-policy (several optimizer steps per rollout), lp_old comes from the training model before any
    update, never from the inference engine; with --train-top-layers the frozen blocks' output is kept."""
    old_lp: dict[tuple[int, int], Any] = {}
    ref_lp: dict[tuple[int, int], Any] = {}
    frozen_h: dict[tuple[int, int], Any] = {}
    if not (run.sizes.off_policy or run.ref_model is not None):
        return old_lp, ref_lp, frozen_h
    run.model.eval()
    pad = run.tok.pad_token_id
    with torch.no_grad():
        for key, micro in micro_batches(minis, run.sizes.micro_batch_size):
            if run.sizes.off_policy:
                old_lp[key], _, hidden = shared_prompt_logprobs(run.model, micro, pad, run.device,
                                                                prefix=run.prefix, autocast=run.autocast)
                if hidden is not None:
                    frozen_h[key] = hidden  # (B, P+R, H) input of the first trained block
            if run.ref_model is not None:
                ref_lp[key] = shared_prompt_logprobs(run.ref_model, micro, pad, run.device,
                                                     autocast=run.autocast)[0]  # (B, R)
    return old_lp, ref_lp, frozen_h


def micro_batches(minis: list[list[Sample]], size: int) -> Iterator[tuple[tuple[int, int], list[Sample]]]:
    """``((mini index, offset), micro-batch)`` for every micro-batch of every mini-batch, in order."""
    for mi, mb in enumerate(minis):
        for ui in range(0, len(mb), size):
            yield (mi, ui), mb[ui : ui + size]


def step_denominators(run: Run, mb: list[Sample]) -> tuple[float, float]:
    """The whole optimizer step's response tokens and sequences, across micro-batches and ranks."""
    trained = [s for s in mb if not (run.algo.overlong_filter and s.finish_reason == "length")]
    n_tok = sum(len(s.token_ids) for s in trained)
    n_seq = sum(1 for s in trained if s.token_ids)
    return (max(1.0, float(distributed.all_reduce_sum(float(n_tok)))),
            max(1.0, float(distributed.all_reduce_sum(float(n_seq)))))


def micro_step(run: Run, micro: list[Sample], key: tuple[int, int], epoch: int, old_lp: dict, ref_lp: dict,
               frozen_h: dict, num_tokens: float, num_seqs: float, update: Update) -> dict[str, float]:
    """Forward, loss and backward of one micro-batch (gradients accumulate); returns its loss metrics."""
    cfg, algo, device = run.cfg, run.algo, run.device
    b = pad_batch(micro, run.tok.pad_token_id, device)
    mask = b["response_mask"]  # (B, R)
    if algo.overlong_filter:  # --- DAPO overlong filtering: truncated rows leave the loss ---
        keep_rows = torch.tensor([s.finish_reason != "length" for s in micro], dtype=mask.dtype, device=device)  # (B,)
        mask = mask * keep_rows[:, None]  # (B, R)
    if key in frozen_h:  # frozen blocks: replay their cached output
        with run.prefix.replay(frozen_h[key]):
            lp, ent = token_logprobs(run.model, b, with_entropy=True, autocast=run.autocast)  # (B, R)
    elif not cfg.gradient_checkpointing:  # each distinct prompt once, with grad
        lp, ent, _ = shared_prompt_logprobs(run.model, micro, run.tok.pad_token_id, device, autocast=run.autocast,
                                            grad=True, with_entropy=True)
    else:
        lp, ent = token_logprobs(run.model, b, with_entropy=True, autocast=run.autocast)  # (B, R)
    old = old_lp[key] if run.sizes.off_policy else lp.detach()  # (B, R)
    if update.mismatch_on and epoch == 0:  # old = the policy that sampled, before any update
        update.mismatch.append(micro_mismatch(old, micro, b["response_mask"]))
    adv = torch.tensor([s.advantage for s in micro], device=device)  # (B,)
    kw = algos.loss_kwargs(algo)
    kw.update(eps_low=float(algo.eps_low), eps_high=float(algo.eps_high), beta=float(algo.beta),
              entropy_coef=float(algo.entropy_coef))
    loss, metrics = algos.policy_loss(
        lp, old, adv, mask, **kw, max_len=cfg.max_new_tokens, ref_logp=ref_lp.get(key),
        entropy=ent if algo.entropy_coef > 0 else ent.detach(), num_tokens=num_tokens, num_seqs=num_seqs,
    )
    loss.backward()
    return {k: float(v) for k, v in metrics.items()}


__all__ = ["Update", "update_policy"]
