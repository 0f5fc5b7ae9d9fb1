"""The update stage: old and reference log-probs, then mini-batches x epochs optimizer steps.

Each optimizer step accumulates micro-batches whose loss uses the whole step's token and sequence
counts (all micro-batches, all ranks), so splitting a step never changes its gradient. Off-policy
steps (more than one optimizer step per rollout) take ``lp_old`` from the training model before
any update, never from the inference engine.

Rollout correction (``--correction``, ``rewardlab.algos.correction``) is computed once per rollout
batch, before any update, from the trainer's pre-update log-probs and the engine's: IS weights and
rejection masks per micro-batch (batch normalisation over this rank's whole batch), so the step's
token counts already exclude rejected tokens. In bypass mode the engine's log-probs are the old
log-probs (PPO-clip: the ratio pi / pi_rollout is the correction; REINFORCE: -A lp w). KL-Cov and
Clip-Cov choose their tokens over the whole optimizer step from a no-grad pass of the current model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from rewardlab import algos
from rewardlab.algos import extras
from rewardlab.algos import correction as rollout_correction
from rewardlab.algos.objectives import COV_LOSSES, cov_select
from rewardlab.algos.value import value_loss
from rewardlab.train import distributed
from rewardlab.train.logprobs import pad_batch, token_logprobs
from rewardlab.train.memory import micro_batch_memory
from rewardlab.train.sizes import longest_first, micro_spans, split_to
from rewardlab.errors import RewardlabError
from rewardlab.train.process import oom, oom_error
from rewardlab.train.runtime import micro_mismatch
from rewardlab.train.samples import Batch, Sample, trained
from rewardlab.train.state import Run


@dataclass
class Update:
    """What the update stage measured: per-micro-batch loss metrics, grad norms, engine mismatch."""

    loss_metrics: list[dict[str, float]] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    mismatch: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    mismatch_on: bool = False
    correction: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    """(tokens, rollout-correction metrics) per micro-batch, logged as ``rollout_corr/<name>``."""
    micro_peaks: list[dict[str, float]] = field(default_factory=list)
    """Each micro-batch's peak memory (:func:`rewardlab.train.memory.micro_batch_memory`)."""
    layout: str = "none"
    """The micro-batch layout the step ran in (``--packing``; with ``auto``, its trial or its choice)."""


@dataclass
class Corrected:
    """One micro-batch's rollout correction: IS weights (or None), the kept-token mask, the engine's log-probs."""

    weights: torch.Tensor | None  # (B, R)
    mask: torch.Tensor  # (B, R)
    rollout_lp: torch.Tensor  # (B, R)


@dataclass
class Micro:
    """One micro-batch of an optimizer step, with what was computed for it before the update."""

    samples: list[Sample]
    old_lp: torch.Tensor | None = None  # (B, R) the pre-update policy's (off-policy steps, corrections)
    ref_lp: torch.Tensor | None = None  # (B, R) the reference model's (KL)
    frozen: torch.Tensor | None = None  # (B, P+R, H) the frozen blocks' output (--train-top-layers)
    corrected: Corrected | None = None  # the rollout correction (--correction)
    select: torch.Tensor | None = None  # (B, R) KL-Cov / Clip-Cov's tokens, chosen per optimizer step


@dataclass(frozen=True)
class Step:
    """What every micro-batch of one optimizer step shares."""

    epoch: int
    num_tokens: float  # the whole step's response tokens (all micro-batches, all ranks)
    num_seqs: float  # and sequences
    eps: tuple[float, float] | None  # the KL-adaptive clip range (--clip-adapt kl), else the preset's
    bog: tuple[float, int]  # best-of-group NLL coefficient and the step's best-of-group tokens


def update_policy(run: Run, batch: Batch) -> Update:
    """mini-batches x epochs optimizer steps on the kept samples, then push the weights to the engine."""
    cfg, sizes, kept = run.cfg, run.sizes, batch.kept
    if run.algo.loss == "dpo":  # --- online DPO: pairs, not a per-token objective ---
        return dpo_update(run, batch)
    t0 = time.perf_counter()
    per_mb = sizes.completions_per_mini_batch  # global; each rank trains on its shard of it
    minis = [[Micro(micro) for micro in cut(run, shard_of(run, trained(kept[i : i + per_mb])))]
             for i in range(0, len(kept), per_mb)]  # a sample's earlier branches (branches=all) train with it
    # engine-vs-trainer log-prob mismatch: only when the engine gave every sampled token's log-prob
    update = Update(mismatch_on=all(s.rollout_logprobs is not None and len(s.rollout_logprobs) == len(s.token_ids)
                                    for s in trained(kept)))
    try:
        frozen_logprobs(run, minis)
        correct_batch(run, minis, update)
        eps = run.clip_adapt.current() if run.clip_adapt is not None else None  # KL-adaptive clip range
        bog = (extras.bog_coef(batch.step, cfg.steps, run.algo.bog_coef, run.algo.bog_warmup)
               if run.algo.bog_coef else 0.0)
        run.model.train()
        if run.critic is not None:
            run.critic.train()
        for epoch in range(cfg.epochs):
            for mi, mb in enumerate(minis):
                cov_selection(run, mb, reuse_old=epoch == 0 and mi == 0)
                bog_tokens = max(1, sum(s.model_tokens for m in mb for s in m.samples if s.bog))
                step = Step(epoch, *step_denominators(run, mb), eps, (bog, bog_tokens))
                for micro in mb:
                    with micro_batch_memory(run.device) as peak:
                        update.loss_metrics.append(micro_step(run, micro, step, update))
                    update.micro_peaks.append(peak)
                max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
                update.grad_norms.append(distributed.clip_grad_norm(run.model, max_norm))
                run.optimizer.step()
                run.scheduler.step()
                run.optimizer.zero_grad(set_to_none=True)
                if run.critic_opt is not None:  # --- PPO: the value model steps with the policy ---
                    torch.nn.utils.clip_grad_norm_(run.critic.parameters_to_train(), max_norm)
                    run.critic_opt.step()
                    run.critic_opt.zero_grad(set_to_none=True)
        run.engine.load_weights(run.model)
    except RuntimeError as e:
        if oom(e):
            raise oom_error("the update") from None
        raise
    if run.clip_adapt is not None:  # --- KL-adaptive clip: the step's KL (to the reference, else to old) ---
        combined = algos.combine_metrics(update.loss_metrics)
        kl = combined.get("kl_ref") if run.algo.beta > 0 else combined.get("approx_kl_old")
        run.clip_adapt.update(max(0.0, float(kl or 0.0)))
    return timed(run, batch, update, t0)


def timed(run: Run, batch: Batch, update: Update, t0: float) -> Update:
    """The update's seconds (``time/update``) and its layout, accounted to ``--packing auto``'s trial."""
    seconds = batch.timings["time/update"] = time.perf_counter() - t0
    update.layout = run.packing
    if not update.grad_norms:  # no optimizer step ran (online DPO without a pair): nothing to time
        return update
    decided = run.plan.layouts.record(distributed.all_reduce_max(seconds),
                                      float(sum(len(s.token_ids) for s in trained(batch.kept))))
    if decided:
        run.say(decided)
    return update


def dpo_update(run: Run, batch: Batch) -> Update:
    """Online DPO: the (best, worst) completion of each group with different rewards, the sigmoid loss against
    the reference (``extras.dpo_loss``), one optimizer step; micro-batches hold whole pairs."""
    cfg, algo, device, pad = run.cfg, run.algo, run.device, run.tok.pad_token_id
    t0 = time.perf_counter()
    kept = batch.kept
    # pairs by the group z-score (monotone in the reward within a group; it carries the learning tests' sign hook)
    pairs = extras.dpo_pairs(torch.tensor([float(s.advantage) for s in kept]), torch.tensor([s.group for s in kept]))
    update = Update()
    if pairs:
        rows = [kept[i] for pair in pairs for i in pair]  # chosen, rejected, chosen, rejected, ...
        size = max(2, run.sizes.micro_batch_size // 2 * 2)
        run.model.train()
        for ui in range(0, len(rows), size):
            micro = rows[ui : ui + size]
            mask = pad_batch(micro, pad, device)["response_mask"]  # (b, R)
            with torch.no_grad():
                ref = run.logprobs(run.ref_model, micro)[0]  # (b, R)
            lp = run.logprobs(run.model, micro, grad=True)[0]  # (b, R)
            seq, ref_seq = (lp.float() * mask).sum(-1), (ref.float() * mask).sum(-1)  # (b,)
            loss, m = extras.dpo_loss(seq[0::2], seq[1::2], ref_seq[0::2], ref_seq[1::2], beta=algo.dpo_beta,
                                      num_pairs=len(pairs))
            loss.backward()
            row = {k: float(v) for k, v in m.items()}
            update.loss_metrics.append({**row, "loss": row["dpo/loss"], "tokens": float(mask.sum())})
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        update.grad_norms.append(distributed.clip_grad_norm(run.model, max_norm))
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        run.engine.load_weights(run.model)
    else:  # every group had equal rewards: no pair, no update; the row says so
        update.loss_metrics.append({"dpo/pairs": 0.0})
    return timed(run, batch, update, t0)


def frozen_logprobs(run: Run, minis: list[list[Micro]]) -> None:
    """Old log-probs (off-policy steps, corrections) and reference log-probs of every micro-batch, before any update.

    Off-policy (several optimizer steps per rollout), lp_old comes from the training model before any
    update, never from the inference engine; with --train-top-layers the frozen blocks' output is kept."""
    need_old = run.sizes.off_policy or run.correction is not None  # correction: the trainer's pre-update lp
    if not (need_old or run.ref_model is not None):
        return
    run.model.eval()
    with torch.no_grad():
        for m in (m for mb in minis for m in mb):
            if need_old:
                m.old_lp, _, m.frozen = run.logprobs(run.model, m.samples, prefix=run.prefix)  # (B, R), hidden
            if run.ref_model is not None:
                m.ref_lp = run.logprobs(run.ref_model, m.samples)[0]  # (B, R)


def shard_of(run: Run, samples: list[Sample]) -> list[Sample]:
    """This rank's share of a mini-batch: a contiguous block, or, with ``--max-tokens-per-micro-batch`` (and
    not group packing, which keeps a prompt's rows together), a balanced share of its tokens: sequences longest
    first, dealt to the ranks in snake order (0..W-1, W-1..0, ...), so no rank waits for another's long tail."""
    world = run.dist.world_size
    if world == 1 or not run.sizes.max_tokens_per_micro_batch or run.packing == "groups" or len(samples) % world:
        return distributed.shard(samples, run.dist)  # (an uneven count is refused there, with its message)
    order = longest_first([(0, len(s.prompt_ids), len(s.token_ids)) for s in samples])
    rank = run.dist.rank
    return [samples[i] for j, i in enumerate(order)
            if (j % world if (j // world) % 2 == 0 else world - 1 - j % world) == rank]


def cut(run: Run, samples: list[Sample]) -> list[list[Sample]]:
    """One mini-batch (this rank's samples) as its micro-batches: ``--micro-batch-size`` rows each in their
    order, or, with ``--max-tokens-per-micro-batch``, longest first and cut by the layout's cost
    (:func:`rewardlab.train.sizes.micro_spans`), into the same number on every rank."""
    sz, layout = run.sizes, run.packing
    prompt_of: dict[tuple[int, ...], int] = {}
    shapes = [(prompt_of.setdefault(tuple(s.prompt_ids), len(prompt_of)), len(s.prompt_ids), len(s.token_ids))
              for s in samples]  # (prompt id, prompt tokens, response tokens)
    if sz.max_tokens_per_micro_batch:
        order = longest_first(shapes, by_prompt=layout == "groups")
        samples, shapes = [samples[i] for i in order], [shapes[i] for i in order]
    spans = micro_spans(shapes, count=sz.micro_batch_size, budget=sz.max_tokens_per_micro_batch, layout=layout)
    if sz.max_tokens_per_micro_batch:  # every rank runs as many micro-batches as the one that needs most
        spans = split_to(spans, shapes, distributed.all_reduce_max(len(spans)), layout)
    return [samples[a:b] for a, b in spans]


def correct_batch(run: Run, minis: list[list[Micro]], update: Update) -> None:
    """Rollout correction for every micro-batch (``--correction``), before any update (``Micro.corrected``)."""
    corr = run.correction
    if corr is None:
        return
    micros, parts = [m for mb in minis for m in mb], []
    for m in micros:
        micro = m.samples
        if any(s.rollout_logprobs is None or len(s.rollout_logprobs) != len(s.token_ids) for s in micro):
            raise RewardlabError(f"--correction {run.algo.correction} needs the rollout engine's log-prob of every "
                                 f"sampled token; the {run.cfg.rollout} engine did not report them")
        mask = pad_batch(micro, run.tok.pad_token_id, run.device)["response_mask"]  # (B, R)
        rollout = _padded([s.rollout_logprobs for s in micro], mask)  # (B, R)
        parts.append((m.old_lp.float(), rollout, mask))
    # one call over the whole batch (padded to one width), so batch normalisation sees every row
    width = max(p[0].shape[1] for p in parts)
    cat = [torch.cat([torch.nn.functional.pad(p[j], (0, width - p[j].shape[1])) for p in parts]) for j in range(3)]
    if not bool(cat[2].bool().any()):  # no token to train (every episode failed): nothing to weigh either
        for m, (lp, rollout, mask) in zip(micros, parts):
            m.corrected = Corrected(None if corr.is_level is None else torch.zeros_like(lp), mask, rollout)
        return
    w, kept, metrics = rollout_correction.correct(cat[0], cat[1], cat[2], corr)  # (N, W), (N, W)
    n_tok = float(cat[2].sum())
    update.correction.append((n_tok, {k: float(v) for k, v in metrics.items()}))
    row = 0
    for m, (lp, rollout, mask) in zip(micros, parts):
        b, r = mask.shape
        m.corrected = Corrected(None if w is None else w[row : row + b, :r], kept[row : row + b, :r], rollout)
        row += b


def cov_selection(run: Run, mb: list[Micro], *, reuse_old: bool) -> None:
    """KL-Cov / Clip-Cov: the tokens chosen over the whole optimizer step (``Micro.select``), from the current
    model's log-probs: the pre-update ones for the first step of a batch when that pass ran (``reuse_old``),
    else from one no-grad pass."""
    algo = run.algo
    if algo.loss not in COV_LOSSES:
        return
    parts = []
    pad = run.tok.pad_token_id
    with torch.no_grad():
        for m in mb:
            micro = m.samples
            mask = m.corrected.mask if m.corrected is not None else pad_batch(micro, pad, run.device)["response_mask"]
            if reuse_old and m.old_lp is not None:
                lp = m.old_lp  # (B, R)
            else:
                lp = run.logprobs(run.model, micro)[0]  # (B, R)
            lp = lp.float() * mask
            adv = advantage_tensor(micro, mask)
            adv = (adv[:, None] if adv.dim() == 1 else adv) * mask  # (B, R)
            parts.append((lp, lp, adv, mask))  # lp_old = lp: the step starts at the current policy
    for m, select in zip(mb, cov_select(parts, algo.loss, algo)):
        m.select = select


def value_step(run: Run, micro: list[Sample], b: dict, mask: torch.Tensor, num_tokens: float, num_seqs: float,
               loss: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``loss + vf_coef * value loss (+ value_group_coef * group MSE)`` and the value metrics, for one micro-batch."""
    algo = run.algo
    vpred = run.critic.values_from_batch(b, autocast=run.autocast)  # (B, R) with grad
    old_v = _padded([s.values for s in micro], mask)  # (B, R)
    returns = _padded([s.returns for s in micro], mask)  # (B, R)
    vf, vm = value_loss(vpred, old_v, returns, mask, cliprange=algo.cliprange_value, agg=algo.agg,
                        max_len=run.cfg.max_new_tokens, num_tokens=num_tokens, num_seqs=num_seqs)
    total = loss + algo.vf_coef * vf
    metrics = {"vf_loss": vm["vf_loss"], "vf_clipfrac": vm["vf_clipfrac"],
               "values/mean": (vpred.detach() * mask).sum() / mask.sum().clamp(min=1)}
    if algo.value_group_coef > 0:  # --- write-up option: V(first response token) toward the group-mean reward ---
        first = vpred[:, 0]  # (B,)
        target = torch.tensor([s.group_mean for s in micro], dtype=first.dtype, device=first.device)  # (B,)
        has = mask[:, 0].to(first.dtype)  # (B,) rows with a first response token
        mse = ((first - target) ** 2 * has).sum() / num_seqs
        total = total + algo.value_group_coef * mse
        metrics["value_group_mse"] = mse.detach()
    return total, metrics


def _padded(rows: list[list[float] | None], mask: torch.Tensor) -> torch.Tensor:
    """Per-sample lists right-padded with zeros to ``mask``'s ``(B, R)``."""
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)  # (B, R)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


def advantage_tensor(micro: list[Sample], mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` per-response advantages, or ``(B, R)`` when any sample has per-token ones (REINFORCE++, ...)."""
    if any(isinstance(s.advantage, list) for s in micro):
        return _padded([s.advantage for s in micro], mask)  # (B, R)
    return torch.tensor([s.advantage for s in micro], device=mask.device)  # (B,)


def step_denominators(run: Run, mb: list[Micro]) -> tuple[float, float]:
    """The whole optimizer step's response tokens and sequences, across micro-batches and ranks
    (tokens a rollout-correction rejection removed do not count)."""
    trained = [s for m in mb for s in m.samples if not (run.algo.overlong_filter and s.finish_reason == "length")]
    n_tok = sum(s.model_tokens for s in trained)
    n_seq = sum(1 for s in trained if s.model_tokens)
    if mb and mb[0].corrected is not None:
        masks = []
        for u in mb:
            m = u.corrected.mask  # (B, R)
            if run.algo.overlong_filter:
                keep = torch.tensor([s.finish_reason != "length" for s in u.samples], dtype=m.dtype,
                                    device=m.device)  # (B,)
                m = m * keep[:, None]
            masks.append(m)
        n_tok, n_seq = algos.step_counts(masks)
    return (max(1.0, float(distributed.all_reduce_sum(float(n_tok)))),
            max(1.0, float(distributed.all_reduce_sum(float(n_seq)))))


def micro_step(run: Run, m: Micro, step: Step, update: Update) -> dict[str, float]:
    """Forward, loss and backward of one micro-batch (gradients accumulate); returns its loss metrics."""
    cfg, algo, device = run.cfg, run.algo, run.device
    micro, corrected, eps, bog = m.samples, m.corrected, step.eps, step.bog
    num_tokens, num_seqs = step.num_tokens, step.num_seqs
    b = pad_batch(micro, run.tok.pad_token_id, device)
    mask = b["response_mask"]  # (B, R)
    if algo.overlong_filter:  # --- DAPO overlong filtering: truncated rows leave the loss ---
        keep_rows = torch.tensor([s.finish_reason != "length" for s in micro], dtype=mask.dtype, device=device)  # (B,)
        mask = mask * keep_rows[:, None]  # (B, R)
    if m.frozen is not None:  # frozen blocks: replay their cached output
        with run.prefix.replay(m.frozen):
            lp, ent = token_logprobs(run.model, b, with_entropy=True, autocast=run.autocast,
                                     behaviour=run.behaviour)  # (B, R)
    elif not cfg.gradient_checkpointing or run.packing != "none":  # each distinct prompt once, with grad
        lp, ent, _ = run.logprobs(run.model, micro, grad=True, with_entropy=True)
    else:
        lp, ent = token_logprobs(run.model, b, with_entropy=True, autocast=run.autocast,
                                 behaviour=run.behaviour)  # (B, R)
    old = m.old_lp if run.sizes.off_policy else lp.detach()  # (B, R)
    if update.mismatch_on and step.epoch == 0:  # old = the policy that sampled, before any update
        update.mismatch.append(micro_mismatch(old, micro, b["response_mask"]))
    adv = advantage_tensor(micro, mask)  # (B,) or (B, R)
    # the step's settings: eps as floats, the KL-adaptive clip range (--clip-adapt kl), bypass's REINFORCE loss
    step_algo = replace(algo, eps_low=float(algo.eps_low), eps_high=float(algo.eps_high), beta=float(algo.beta),
                        entropy_coef=float(algo.entropy_coef))
    if eps is not None:  # --- KL-adaptive clip range (--clip-adapt kl) ---
        step_algo = replace(step_algo, eps_low=eps[0], eps_high=eps[1])
    weights = None
    if corrected is not None:  # --- rollout correction: rejected tokens leave the mask; IS weights ---
        mask = mask * corrected.mask  # (B, R)
        weights = corrected.weights
        corr = run.correction
        if corr.bypass:  # --- bypass: the engine's log-probs are the old log-probs ---
            old = corrected.rollout_lp  # (B, R)
            if corr.bypass_loss == "reinforce":
                step_algo = replace(step_algo, loss="gpg")  # -A lp w
            else:
                weights = None  # PPO-clip on pi / pi_rollout: the ratio is the correction (verl)
    loss, metrics = algos.policy_loss(
        lp, old, adv, mask, step_algo, max_len=cfg.max_new_tokens, ref_logp=m.ref_lp,
        entropy=ent if algo.entropy_coef > 0 else ent.detach(), is_weights=weights, select=m.select,
        num_tokens=num_tokens, num_seqs=num_seqs,
    )
    if bog[0] > 0:  # --- best-of-group NLL, lambda warmed up (--bog-coef) ---
        chosen = torch.tensor([s.bog for s in micro], device=device)  # (B,)
        nll = extras.bog_nll(lp, mask, chosen, num_tokens=bog[1])
        loss = loss + bog[0] * nll
        metrics.update({"bog/nll": nll.detach(), "bog/coef": torch.tensor(bog[0]), "bog/rows": chosen.sum().float()})
    if run.critic is not None:  # --- PPO: the clipped value loss (and the write-up's group-mean term) ---
        loss, value_metrics = value_step(run, micro, b, mask, num_tokens, num_seqs, loss)
        metrics.update(value_metrics)
    loss.backward()
    return {k: float(v) for k, v in metrics.items()}


__all__ = ["Micro", "Step", "Update", "update_policy"]
