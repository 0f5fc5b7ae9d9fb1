"""The RL loop for Hugging Face causal LMs, on one page: every preset of :data:`rewardlab.algos.PRESETS`.

    rewardlab train --algo gspo                       # embedded SmolLM2-135M-Instruct on "arith", CPU
    rewardlab train --algo dapo --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k --steps 200
    torchrun --nproc_per_node 8 -m rewardlab train --algo grpo --model ... --task math

:func:`train` is setup, then a loop of stage calls; each stage is a function below, in this order:

    rollout     sample G completions for each of P prompts (HF generate, or vLLM)
    reward      score every completion in the worker pool (task reward + optional format component),
                plus DAPO's overlong shaping; DAPO dynamic sampling drops zero-variance groups and
                generates again until P groups survive, at most --max-gen-batches rounds (then it
                trains on the groups it kept, or skips the step if it kept none)
    advantage   group z-score (or r - mean) per prompt id, or an estimator (RLOO, REINFORCE++, ReMax's
                greedy baseline, ...: rewardlab.algos.estimators, asked by what they need, never by name)
    update      old log-probs recomputed by the training model when the step is off-policy, then
                mini-batches x epochs optimizer steps, each accumulated over micro-batches whose
                loss uses the whole optimizer step's token / sequence counts (all ranks)
    log         metrics.jsonl (names from docs/algorithms.md), rollouts.jsonl, progress bar
    checkpoint  atomic save every N steps; rerunning the same command resumes

What it simplifies on purpose: one process drives generation and training (no actor/rollout
split, no Ray); the HF engine samples from the live training model, so there is no weight copy.
The algorithm is an ``algos.Algo`` (a preset with overrides); the few places where algorithms
differ are marked branches. The update stage's internals are in :mod:`rewardlab.train.update`,
the metrics row in :mod:`rewardlab.train.metrics`, model compute in :mod:`rewardlab.train.logprobs`,
the setup (``build_plan``, ``build_trainer``: engine, reference, optimizer, critic, options) in
:mod:`rewardlab.train.build`, the typed run state (``Plan``, ``Trainer``, ``Run``) in :mod:`rewardlab.train.state`,
samples and batches in :mod:`rewardlab.train.samples`, Ctrl-C and threads in :mod:`rewardlab.train.process`.
Held-out evaluation during training (``--eval-every``) is a stage of its own, :mod:`rewardlab.train.evaluation`:
the loop starts it once the logs open and calls it after each step's checkpoint. Evaluating before and after
training with the eval suite (``--eval-before-after``) is composed by the command (``rewardlab.commands.train``),
since train never imports eval.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from rewardlab import algos
from rewardlab.algos import extras
from rewardlab.algos.estimators import AdvantageInputs
from rewardlab.locks import FolderLock
from rewardlab.plots import plot_run
from rewardlab.rewards.length import overlong_penalty
from rewardlab.rewards.base import RewardResult
from rewardlab.rollout import Completion, SamplingParams
from rewardlab.train import async_rollout, distributed, evaluation, feedback
from rewardlab.train.build import build_plan, build_run, build_trainer
from rewardlab.train.checkpoint import save_step
from rewardlab.train.config import TrainConfig
from rewardlab.train.logprobs import loss_mask
from rewardlab.train.metrics import gen_metrics, step_metrics, tool_metrics
from rewardlab.train.process import Interrupted, StopFlag, oom, oom_error, set_threads
from rewardlab.train.samples import Batch, Sample, logprobs_of, rollout_seed, trained
from rewardlab.train.sizes import micro_spans
from rewardlab.train.state import Run, run_sampling
from rewardlab.train.update import update_policy

ADVANTAGE_SIGN = 1.0
"""TEST-ONLY, not a setting: the factor every advantage is multiplied by (always +1.0).
``tests/test_learning.py`` monkeypatches it to -1.0 to check that a reversed update makes the reward
fall, i.e. that the learning tests can tell a correct update from a wrong one."""


def train(cfg: TrainConfig, *, on_start: Callable[[Path, int], None] | None = None) -> Path:
    """Run (or resume) training as configured; returns the run directory.

    ``on_start(run_dir, start_step)`` runs on the main rank once the model is loaded, before the
    first step (``rewardlab train --eval-before-after`` evaluates there). The run directory is
    locked for the whole run (a second ``train`` on it fails at once). After Ctrl-C or SIGTERM the
    current step finishes, a checkpoint is saved and :class:`Interrupted` (a ``KeyboardInterrupt``)
    is raised; ``rewardlab train`` then exits 130 (143 for SIGTERM).
    """
    locks: list[FolderLock] = []
    try:
        return _train(cfg, locks, on_start)
    except BaseException:
        for lock in locks:
            lock.release(failed=True)  # a run directory this start created and left empty is removed
        raise
    finally:
        for lock in locks:
            lock.release()


def _train(cfg: TrainConfig, locks: list[FolderLock], on_start: Callable[[Path, int], None] | None) -> Path:
    threads = set_threads(cfg.threads)  # before anything else touches torch's thread pools
    hf_logging.disable_progress_bar()  # HF's load/save bars would break into our progress line
    plan = build_plan(cfg, locks)
    if plan.start_step >= cfg.steps:
        plan.say(f"{plan.run_dir}: already trained {plan.start_step} steps (--steps {cfg.steps}); nothing to do")
        return plan.run_dir
    trainer = build_trainer(plan, threads)
    if on_start is not None and plan.main:
        on_start(plan.run_dir, plan.start_step)
    run = build_run(plan, trainer)  # the logs open, then (resuming) this rank's RNG state is restored
    evals = evaluation.start(run)  # --eval-every: held-out checks at start-up, then the starting policy's eval
    rollout = async_rollout.start(run, rollout_and_score, grade)  # --async-steps k: generation k steps ahead

    step = last_saved = run.start_step
    t_run = time.perf_counter()
    try:
        with StopFlag(run.log.message if run.main else (lambda m: None)) as stop, rollout:  # rollout: closes its worker
            while step < cfg.steps and not stop.agreed(distributed.all_reduce_max):
                step += 1
                t_step, cpu_step = time.perf_counter(), time.process_time()
                batch = rollout(run, step)  # rollout_and_score (k = 0)
                if batch.kept and feedback.critic_step(run, step):  # --- dual-agent: this step trains the critic ---
                    batch.kept = feedback.critic_samples(batch.kept)
                if batch.kept:
                    set_advantages(run, batch.kept)
                    update = update_policy(run, batch)
                    run.log.log(step, step_metrics(run, batch, update, t_step, cpu_step))
                else:
                    log_skipped(run, step, batch, t_step)
                run.rollout_log.write(step, batch)
                if step % cfg.save_every == 0 or step == cfg.steps:
                    save_step(run, step)
                    last_saved = step
                evals.after_step(run, step)  # --- eval: the held-out benchmarks every --eval-every steps ---
            if stop.requested and last_saved != step:
                save_step(run, step)
    finally:
        run.log.close()
        run.rollout_log.close()

    run.say(f"trained steps {run.start_step + 1}..{step} in {time.perf_counter() - t_run:.0f} s; "
            f"checkpoint {run.run_dir / 'checkpoints'}")
    if stop.requested:  # Ctrl-C / SIGTERM: saved above; no plots, exit 130 (143)
        distributed.destroy()
        raise Interrupted(stop.signum or signal.SIGINT, step, run.run_dir)
    if run.main and cfg.plots:
        plot_run(run.run_dir)
    distributed.destroy()
    return run.run_dir


# --- rollout and reward (with DAPO's dynamic sampling) ---


def rollout_and_score(run: Run, step: int, gen: Callable[..., tuple] | None = None) -> Batch:
    """Generate (``gen``, default :func:`generate`) and score rounds until the batch is full (DAPO: several).
    ``gen`` returns the round's prompts, texts, completions and their reward results when it graded them
    already (the async pipeline grades completions as they stream in), else None."""
    cfg, algo = run.cfg, run.algo
    batch = Batch(target=cfg.prompts_per_step * cfg.group_size, step=step)
    while len(batch.kept) < batch.target and batch.gen_round < cfg.max_gen_batches:
        batch.gen_round += 1
        mine, prompt_texts, outs, graded = (gen or generate)(run, step, batch)  # graded: None, or async's
        scored = score(run, mine, prompt_texts, outs, batch, graded)
        if algo.estimator.needs_greedy_baseline:  # --- ReMax: each prompt's greedy reward is its baseline ---
            greedy_baselines(run, mine, prompt_texts, scored, batch)
        batch.generated.extend(scored)
        group_ids = torch.tensor([s.group for s in scored])  # (N,)
        metric = torch.tensor([float(s.task_score or 0.0) for s in scored])  # (N,)
        keep = algos.dynamic_sampling_keep(metric, group_ids).tolist()  # (N,) bool
        n_groups = len(set(group_ids.tolist()))
        batch.groups_seen += n_groups
        batch.groups_zero_std += n_groups - len({g for g, k in zip(group_ids.tolist(), keep) if k})
        if not algo.dynamic_sampling:
            batch.kept = scored
            break
        batch.kept.extend(s for s, k in zip(scored, keep) if k)  # DAPO: groups with reward variance only
    if algo.dynamic_sampling:
        batch.kept = batch.kept[: batch.target]  # whole groups: prompt-major order
        if len(batch.kept) < batch.target:  # round budget spent: train on the whole groups kept, ranks evenly
            unit = cfg.group_size * run.dist.world_size
            batch.kept = batch.kept[: len(batch.kept) // unit * unit]
    return batch


def generate(run: Run, step: int, batch: Batch) -> tuple[list[tuple[int, int]], list[str], list[Completion], None]:
    """This rank's share of the next prompts, their rendered texts, and G completions of each."""
    cfg = run.cfg
    t0 = time.perf_counter()
    mine = distributed.shard(run.stream.take(cfg.prompts_per_step), run.dist)  # same picks on every rank
    rows = [run.rows[i] for i, _ in mine]
    prompt_texts = [run.trainer.render(row) for row in rows]
    seed = rollout_seed(cfg.seed, step, batch.gen_round, run.dist.rank)
    sampling = run_sampling(cfg, seed=seed)
    sample = run.trainer.sampler  # the engine, with full weights gathered while it samples (FSDP + HF engine)
    try:
        if run.group_sizes is None:
            outs = sample(prompt_texts, rows, cfg.group_size, sampling)
        else:  # --- variance-driven group size: one engine call per distinct G, in prompt order ---
            sizes = run.group_sizes.sizes([row.id for row in rows], step)
            per_prompt: list[list[Completion]] = [[] for _ in mine]
            for g in sorted(set(sizes)):
                idx = [k for k, n in enumerate(sizes) if n == g]
                for c in sample([prompt_texts[k] for k in idx], [rows[k] for k in idx], g, sampling):
                    c.prompt_index = idx[c.prompt_index]
                    per_prompt[c.prompt_index].append(c)
            outs = [c for cs in per_prompt for c in cs]
            batch.target = sum(sizes)
    except RuntimeError as e:
        if oom(e):
            raise oom_error("generation") from None
        raise
    batch.timings["time/generate"] += time.perf_counter() - t0
    return mine, prompt_texts, outs, None  # graded by score


def greedy_baselines(run: Run, mine: list[tuple[int, int]], prompt_texts: list[str], scored: list[Sample],
                     batch: Batch) -> None:
    """ReMax: one greedy completion per prompt, scored like the samples; its reward is the group's baseline."""
    t0 = time.perf_counter()
    greedy = SamplingParams(max_new_tokens=run.cfg.max_new_tokens, temperature=0.0)
    outs = run.trainer.sampler(prompt_texts, [run.rows[i] for i, _ in mine], 1, greedy)
    batch.timings["time/generate"] += time.perf_counter() - t0
    baseline = {s.group: s.score for s in score(run, mine, prompt_texts, outs, batch)}  # every rank's groups
    for s in scored:
        s.baseline = baseline[s.group]


def grade(run: Run, mine: list[tuple[int, int]], outs: list[Completion]) -> list[RewardResult]:
    """The reward's result for each of this rank's completions (``mine``: the prompts they answer), from the pool."""
    return run.grade([run.rows[mine[c.prompt_index][0]] for c in outs], [c.graded_text for c in outs],
                     episodes=[c.episode for c in outs])


def score(run: Run, mine: list[tuple[int, int]], prompt_texts: list[str], outs: list[Completion], batch: Batch,
          graded: list[RewardResult] | None = None) -> list[Sample]:
    """Grade this rank's completions (unless ``graded``), gather every rank's, add DAPO's overlong shaping."""
    cfg, algo = run.cfg, run.algo
    t0 = time.perf_counter()
    rows = [run.rows[mine[c.prompt_index][0]] for c in outs]
    results = grade(run, mine, outs) if graded is None else graded
    local: list[Sample] = []
    for c, row, res in zip(outs, rows, results):
        comps = dict(res.info.get("components") or {run.main_reward: res.score})
        local.append(Sample(
            group=mine[c.prompt_index][1], row=row, prompt_text=prompt_texts[c.prompt_index],
            prompt_ids=list(c.prompt_ids), token_ids=list(c.token_ids), text=c.text, finish_reason=c.finish_reason,
            score=float(res.score or 0.0), task_score=comps.get(run.main_reward, res.score), components=comps,
            info=res.info, gen_round=batch.gen_round, rollout_logprobs=logprobs_of(c), loss_mask=c.loss_mask,
            turns=c.turns, tool_calls=c.tool_calls, answer=c.answer_text,
        ))
        local[-1].branches = [dataclasses.replace(  # --- a trace's earlier branches: trained, paid its advantage ---
            local[-1], prompt_ids=list(b.prompt_ids), token_ids=list(b.token_ids), text=b.text, info=dict(res.info),
            rollout_logprobs=logprobs_of(b), loss_mask=b.loss_mask, turns=None, tool_calls=0, branches=[])
            for b in c.branches or []]  # finish_reason: the episode's (DAPO's overlong filter drops them all)
    if run.trainer.grade_first is not None:  # --- dual-agent: the first answer's reward too (improvement logged) ---
        run.trainer.grade_first(run, local)
    scored = [s for part in distributed.gather_objects(local) for s in part]  # every rank: all
    batch.generated_tokens += sum(x.model_tokens for x in trained(scored))  # earlier branches were sampled too
    if algo.overlong and algo.overlong_factor > 0:  # --- DAPO: soft overlong punishment, added to the reward ---
        for s in scored:
            s.overlong = overlong_penalty(s.model_tokens, cfg.max_new_tokens, algo.overlong_cache,
                                          algo.overlong_factor)
            s.score += s.overlong
    batch.timings["time/reward"] += time.perf_counter() - t0
    return scored


# --- advantage ---


def set_advantages(run: Run, kept: list[Sample]) -> None:
    algo = run.algo
    groups = torch.tensor([s.group for s in kept])  # (N,)
    by_group: dict[int, list[float]] = {}
    for s in kept:
        by_group.setdefault(s.group, []).append(s.score)
    for s in kept:  # the value_group_coef option's target
        s.group_mean = sum(by_group[s.group]) / len(by_group[s.group])
    scores = torch.tensor([s.score for s in kept], dtype=torch.float64)  # (N,)
    if run.group_sizes is not None:  # --- variance-driven group size: track each prompt's reward variance ---
        run.group_sizes.update(scores, [s.row.id for s in kept])
    if algo.bog_coef > 0:  # --- best-of-group NLL: the unique best of each group, above its mean ---
        for s, best in zip(kept, extras.best_of_group(scores, groups).tolist()):
            s.bog = best
    if run.reward_norm is not None:  # --- global EMA reward normalisation, then the advantage ---
        scores = run.reward_norm(scores).to(torch.float64)  # (N,)
    est = algo.estimator  # --- group z-score / r - mean (one per response), or a per-token estimator as verl ---
    if not est.per_token:
        adv, _ = est.compute(AdvantageInputs(scores, groups))  # (N,)
        adv = adv * ADVANTAGE_SIGN  # +1 always, except in tests/test_learning.py's negative control
        for s, a in zip(kept, adv.tolist()):
            s.advantage = a
            for b in s.branches:  # a trace's earlier branches: the episode's advantage (per-token estimators refused)
                b.advantage, b.score, b.group_mean, b.bog = a, s.score, s.group_mean, s.bog
        return
    lengths = torch.tensor([len(s.token_ids) for s in kept])  # (N,)
    # the loss mask: tool observations are not the model's tokens (the reward sits at its last one)
    mask = loss_mask(kept, int(lengths.max())).to(torch.float64)  # (N, R)
    # PPO: the critic's values before the update; ReMax: each prompt's greedy reward
    values = old_values(run, kept, mask.shape[1]).to(torch.float64) if est.needs_values else None  # (N, R)
    baselines = torch.tensor([s.baseline for s in kept], dtype=torch.float64) if est.needs_greedy_baseline else None
    adv, returns = est.compute(AdvantageInputs(scores, groups, mask, gamma=algo.gamma, lam=algo.lam, values=values,
                                               baselines=baselines))  # (N, R)
    if values is not None:
        for s, v, ret, n in zip(kept, values.tolist(), returns.tolist(), lengths.tolist()):
            s.values, s.returns = v[:n], ret[:n]
    adv = adv * ADVANTAGE_SIGN
    for s, row, n in zip(kept, adv.tolist(), lengths.tolist()):
        s.advantage = row[:n]


def old_values(run: Run, kept: list[Sample], width: int) -> torch.Tensor:
    """``(N, width)`` the critic's V(s_t) for every kept sample, before any update (no grad), in micro-batches cut
    as the update cuts them (``--micro-batch-size`` rows, or ``--max-tokens-per-micro-batch`` padded positions)."""
    out = torch.zeros(len(kept), width)
    sz = run.sizes
    prompt_of: dict[tuple[int, ...], int] = {}
    shapes = [(prompt_of.setdefault(tuple(s.prompt_ids), len(prompt_of)), len(s.prompt_ids), len(s.token_ids))
              for s in kept]  # (prompt id, prompt tokens, response tokens); the critic's rows are padded
    run.critic.eval()
    with torch.no_grad():
        for a, b in micro_spans(shapes, count=sz.micro_batch_size, budget=sz.max_tokens_per_micro_batch):
            v = run.critic.values(kept[a:b], run.tok.pad_token_id, run.device, autocast=run.autocast)  # (b-a, R)
            out[a : a + v.shape[0], : v.shape[1]] = v.float().cpu()
    return out


# --- log: rewardlab/train/metrics.py (step_metrics: the metrics.jsonl row); a skipped step logs here ---


def log_skipped(run: Run, step: int, batch: Batch, t_step: float) -> None:
    """DAPO: no group had reward variance within the round budget; no update this step, and why."""
    cfg = run.cfg
    reason = (f"no group had reward variance in {batch.gen_round} generation round(s) of {cfg.prompts_per_step} "
              f"prompts (--max-gen-batches {cfg.max_gen_batches}); no update this step")
    run.log.message(f"step {step}: skipped: {reason}")
    run.log.log(step, {**gen_metrics(run, batch), **tool_metrics(run, batch.generated), "skip_reason": reason,
                       "lr": run.scheduler.get_last_lr()[0], **batch.timings,
                       "time/step": time.perf_counter() - t_step})


# --- checkpoint: rewardlab/train/checkpoint.py (save_step: the collective save of a step) ---


__all__ = [ "train"]
