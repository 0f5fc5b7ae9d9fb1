"""The RL loop: GRPO, Dr. GRPO, DAPO and GSPO for Hugging Face causal LMs, on one page.

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
                greedy baseline, ...: rewardlab.algos.advantages)
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
the run's plumbing (``Run``, ``Batch``, prompt stream, Ctrl-C, run name) in :mod:`rewardlab.train.runtime`. Evaluating before
and after training is composed by the command (``rewardlab.commands.train``), not done here.
"""

from __future__ import annotations

import contextlib
import copy
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from rewardlab import algos, models, sandbox, tasks
from rewardlab.algos import advantages, extras
from rewardlab.errors import RewardlabError
from rewardlab.locks import FolderLock
from rewardlab.logging import JsonlWriter, MetricsLogger, truncate_jsonl
from rewardlab.plots import plot_run
from rewardlab.rewards.length import overlong_penalty
from rewardlab.rewards.pool import STARTUP_TIMEOUT, prewarm, score_batch
from rewardlab.rollout import Collectives, SamplingParams, format_prompt, make_engine
from rewardlab.rollout.multiturn import ToolEngine, with_tool_hint
from rewardlab.train import distributed, feedback
from rewardlab.train.checkpoint import (checkpoint_bytes, clean_partial, latest_checkpoint, load_trainer_state, load_weights, rng_state,
                                        save_checkpoint, set_rng_state)
from rewardlab.train.config import (TrainConfig, check_model, derive, describe_diff, resolve_algo,
                                    resolve_device, save_yaml, settings_diff, to_dict, total_token_budget)
from rewardlab.train.logprobs import FrozenPrefix, decoder_blocks, freeze_to_top_layers, loss_mask
from rewardlab.train.lora import apply_lora, is_lora, merged_state_dict, trainable_parameters
from rewardlab.train.metrics import gen_metrics, peak_rss_mb, step_metrics, tool_metrics
from rewardlab.train.runtime import (Batch, Interrupted, PromptStream, Run, Sample, StopFlag, build_reward, logprobs_of,
                                     oom, oom_error, rank_rng, rollout_rows, run_dir_of, seed_everything, set_threads)
from rewardlab.train.update import update_policy

_ADVANTAGE_SIGN = 1.0
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
    run = plan(cfg, locks)
    if run.start_step >= cfg.steps:
        run.say(f"{run.run_dir}: already trained {run.start_step} steps (--steps {cfg.steps}); nothing to do")
        return run.run_dir
    load(run, threads)
    if on_start is not None and run.main:
        on_start(run.run_dir, run.start_step)
    open_logs(run)

    step = last_saved = run.start_step
    t_run = time.perf_counter()
    try:
        with StopFlag(run.log.message if run.main else (lambda m: None)) as stop:
            while step < cfg.steps and not stop.agreed(distributed.all_reduce_max):
                step += 1
                t_step, cpu_step = time.perf_counter(), time.process_time()
                batch = rollout_and_score(run, step)
                if batch.kept and feedback.critic_step(run, step):  # --- dual-agent: this step trains the critic ---
                    batch.kept = feedback.critic_samples(batch.kept)
                if batch.kept:
                    set_advantages(run, batch.kept)
                    update = update_policy(run, batch)
                    run.log.log(step, step_metrics(run, batch, update, t_step, cpu_step))
                else:
                    log_skipped(run, step, batch, t_step)
                if run.rollout_log is not None:
                    run.rollout_log.write_many(rollout_rows(step, batch.generated, batch.kept))
                if step % cfg.save_every == 0 or step == cfg.steps:
                    save(run, step)
                    last_saved = step
            if stop.requested and last_saved != step:
                save(run, step)
    finally:
        run.log.close()
        if run.rollout_log is not None:
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


# --- setup: sizes, run directory, resume point (everything a typo can break, before any model loads) ---


def plan(cfg: TrainConfig, locks: list[FolderLock]) -> Run:
    device_name = resolve_device(cfg.device)  # --device cuda without CUDA: one line, before anything heavy
    dist = distributed.init()
    algo = resolve_algo(cfg)
    sizes = derive(cfg, world_size=dist.world_size, mini_batches=algo.mini_batches)
    run_dir = run_dir_of(cfg)
    check_model(cfg.model)
    rows = tasks.load_task(cfg.task, "train", limit=cfg.task_limit, seed=cfg.seed)
    if not rows:
        raise RewardlabError(f"task {cfg.task!r} has no training rows")
    for r in rows:
        if r.prompt in (None, "", []) or r.reference is None:
            raise RewardlabError(f"task {cfg.task!r} row {r.id!r} has no {'prompt' if not r.prompt else 'reference'}; "
                                 "every row needs a prompt and a reference answer")
    reward_fn, main_reward = build_reward(cfg, rows)

    lock_error = None
    if dist.is_main:  # one writer per run directory, for the whole run (the kernel drops the lock on any exit)
        try:
            locks.append(FolderLock(run_dir, "training run",
                                    hint="wait for it to finish (rerun then to resume), or pick another --output-dir"))
        except RewardlabError as e:
            lock_error = str(e)
    lock_error = distributed.broadcast_object(lock_error)
    if lock_error:
        raise RewardlabError(lock_error)
    if dist.is_main:
        clean_partial(run_dir)
    distributed.barrier()
    ckpt = latest_checkpoint(run_dir)
    state = load_trainer_state(ckpt) if ckpt is not None else None
    if state is not None and (changed := settings_diff(state.get("config", {}), cfg)):
        raise RewardlabError(f"{run_dir} holds a run with different settings ({describe_diff(changed)}); "
                             "rerun with the saved settings to resume, or pick a new --output-dir")
    device = torch.device(device_name)
    if device.type == "cuda" and dist.world_size > 1:
        device = dist.device
    return Run(cfg=cfg, algo=algo, sizes=sizes, dist=dist, run_dir=run_dir, rows=rows, reward_fn=reward_fn,
               main_reward=main_reward, ckpt=ckpt, state=state, start_step=int(state["step"]) if state else 0, device=device,
               correction=algo.rollout_correction())


# --- setup: model, reference, optimizer, engine, data ---


def load(run: Run, threads: int | None) -> None:
    cfg, algo, dist, state, ckpt = run.cfg, run.algo, run.dist, run.state, run.ckpt
    run.say(f"rewardlab train: {cfg.algo} on {cfg.task}, model {cfg.model or models.DEFAULT_MODEL}, "
            f"{dist.world_size} rank(s) on {run.device.type}, threads {threads or torch.get_num_threads()}")
    run.say(run.sizes.describe())
    run.say(f"  run directory               {run.run_dir}" + (f"  (resuming from {ckpt.name})" if ckpt else ""))
    pool_ready = prewarm(run.reward_fn, cfg.reward_workers)  # reward workers start while the model loads (not before the lock)
    seed_everything(cfg.seed + dist.rank)
    # bf16 on GPU: fp32 master weights + bf16 autocast (dtype auto); --dtype bfloat16 = pure bf16 weights
    model, run.tok = models.load_model(cfg.model, dtype="float32" if cfg.dtype == "auto" else cfg.dtype, device="cpu")
    if run.main:  # after the model loads: a start that fails before this leaves a new run directory empty (removed)
        save_yaml(run.run_dir / "config.yaml", cfg, derived=run.sizes, algo=algo)
    if run.device.type == "cuda" and cfg.dtype == "auto":
        run.autocast = torch.autocast("cuda", dtype=torch.bfloat16)
    if algo.beta > 0 or algo.loss == "dpo":  # reference model only when the KL term (or DPO) needs it
        run.ref_model = copy.deepcopy(model).eval().requires_grad_(False).to(run.device)
    start = run.ref_model  # --feedback ref: the critic is a frozen copy of the starting policy
    if cfg.feedback == "ref" and start is None:
        start = copy.deepcopy(model).eval().requires_grad_(False)
    n_trainable = freeze_to_top_layers(model, cfg.train_top_layers)
    if cfg.lora_rank:  # --- LoRA (peft): adapters only, in the top --train-top-layers blocks (0 = all) ---
        model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, cfg.lora_dropout,
                           top_layers=cfg.train_top_layers)
        n_trainable = trainable_parameters(model)
    if ckpt is not None:  # after LoRA: an adapter checkpoint loads into the PEFT model
        load_weights(model, ckpt)
    if cfg.train_top_layers and run.sizes.off_policy and dist.world_size == 1:
        blocks = decoder_blocks(model)
        if blocks is not None and cfg.train_top_layers < len(blocks):
            run.prefix = FrozenPrefix(blocks, cfg.train_top_layers)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    run.model = distributed.wrap_model(model, dist) if dist.world_size > 1 else model.to(run.device)  # FSDP2 shards
    params = [p for p in run.model.parameters() if p.requires_grad]
    run.optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                      weight_decay=cfg.weight_decay)
    if algo.critic is not None:  # --- PPO: a value model and its own optimizer ---
        load_critic(run, model)
    make_options(run)
    if pool_ready is not None and not pool_ready.wait(STARTUP_TIMEOUT):  # no step is graded on a cold reward pool
        run.say(f"  reward workers not ready after {STARTUP_TIMEOUT:g} s: the first items may time out (phase startup)")
    warm = max(0, cfg.warmup_steps)
    run.scheduler = torch.optim.lr_scheduler.LambdaLR(run.optimizer,
                                                      lambda k: min(1.0, (k + 1) / (warm + 1)) if warm else 1.0)
    if state is not None:  # collective under FSDP: every rank loads, rank 0's full state is broadcast and sharded
        distributed.load_optimizer_state_dict(run.model, run.optimizer, state["optimizer"])
        run.scheduler.load_state_dict(state["scheduler"])
        if run.critic is not None:
            run.critic.load_saved(state["critic"])
            run.critic_opt.load_state_dict(state["critic_optimizer"])
        for name, obj in option_states(run).items():
            obj.load_state_dict(state["options"][name])
    where = f"top {cfg.train_top_layers} blocks" if cfg.train_top_layers else "all blocks"
    run.say(f"  trainable parameters        {n_trainable / 1e6:.2f} M"
            + (f" (LoRA rank {cfg.lora_rank}, alpha {cfg.lora_alpha:g}, {where})" if cfg.lora_rank else
               f" (top {cfg.train_top_layers} blocks + final norm)" if cfg.train_top_layers else " (all)"))
    if cfg.rollout == "hf":
        engine_kw: dict[str, Any] = {"batch_size": cfg.rollout_batch_size}
    else:  # the vLLM engine borrows the trainer's collectives (rollout never imports rewardlab.train)
        engine_kw = {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization, "enable_sleep_mode": cfg.vllm_sleep_mode,
                     "seed": cfg.seed, "collectives": Collectives(
                         world_size=lambda: dist.world_size, all_reduce_max=distributed.all_reduce_max,
                         full_state_dict=full_state_dict_for_engine(run), on_destroy=distributed.on_destroy)}
    run.engine = make_engine(cfg.rollout, run.model, run.tok, **engine_kw)
    if cfg.tools == "python":  # --- multi-turn: the sandbox is the model's Python tool ---
        run.engine = ToolEngine(run.model, run.tok, execute=sandbox.execute, max_turns=cfg.max_turns,
                                max_total_tokens=total_token_budget(cfg), tool_timeout_s=cfg.tool_timeout,
                                max_output_chars=cfg.tool_output_chars, batch_size=cfg.rollout_batch_size,
                                engine=run.engine if cfg.rollout == "vllm" else None,
                                observation_format=cfg.tool_format,
                                episode_timeout_s=cfg.tool_episode_timeout or None)
    elif cfg.feedback != "none":  # --- a critic that talks back: feedback, then a second answer ---
        run.engine = feedback.feedback_engine(run, start)
    run.say(f"  peak memory after loading   {peak_rss_mb():.0f} MiB RSS (memory/peak_rss_mb in every metrics row)")
    run.stream = PromptStream(len(run.rows), cfg.seed)
    if state is not None:
        run.stream.load(state["data"])


def full_state_dict_for_engine(run: Run) -> Callable[..., Any]:
    """What vLLM loads after each update: the full weights, merged with the LoRA adapters when LoRA is on."""
    if not is_lora(run.model):
        return distributed.full_state_dict
    return lambda m, cpu=True: merged_state_dict(m, distributed.full_state_dict(m, cpu=cpu))


def make_options(run: Run) -> None:
    """The write-ups' stateful options (docs/algorithms.md, "Ideas from popular descriptions"), when on."""
    algo, cfg = run.algo, run.cfg
    if algo.clip_adapt == "kl":
        run.clip_adapt = extras.AdaptiveClip(algo.eps_low, algo.eps_high, alpha=algo.clip_adapt_alpha,
                                             kl_target=algo.clip_adapt_target, eps_min=algo.clip_adapt_min,
                                             eps_max=algo.clip_adapt_max)
    if algo.reward_norm == "ema":
        run.reward_norm = extras.EmaRewardNorm(decay=algo.reward_norm_decay)
    if algo.group_size_policy == "variance":
        if run.dist.world_size > 1:
            raise RewardlabError("--group-size-policy variance runs in one process for now (not under torchrun)")
        run.group_sizes = extras.GroupSizePolicy(cfg.group_size, algo.group_size_min, algo.group_size_max,
                                                 algo.group_size_threshold, algo.group_size_warmup)


def option_states(run: Run) -> dict[str, Any]:
    """The options whose state a checkpoint carries, by name."""
    named = {"clip_adapt": run.clip_adapt, "reward_norm": run.reward_norm, "group_sizes": run.group_sizes}
    return {k: v for k, v in named.items() if v is not None}


def load_critic(run: Run, model: Any) -> None:
    """PPO's value model: a head on the policy's trunk (shared), on a copy of the policy (separate), or on another model."""
    from rewardlab.train.critic import ValueModel

    algo, cfg = run.algo, run.cfg
    if run.dist.world_size > 1:
        raise RewardlabError("--critic (PPO) runs in one process for now; it is not wired for torchrun / FSDP")
    if algo.critic == "shared":
        run.critic = ValueModel.shared(run.model, detach_below=algo.critic_detach_below, seed=cfg.seed)
    else:
        source = copy.deepcopy(model).to(run.device) if algo.critic == "separate" else algo.critic
        run.critic = ValueModel.separate(source, detach_below=algo.critic_detach_below, device=run.device, seed=cfg.seed)
    run.critic.to(run.device)
    run.critic_opt = torch.optim.AdamW(run.critic.parameters_to_train(), lr=algo.critic_lr or cfg.lr,
                                       betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay)
    run.say(f"  critic                      {algo.critic} (value head"
            + (f", value gradients in the top {algo.critic_detach_below} blocks" if algo.critic_detach_below else "")
            + ")")


def open_logs(run: Run) -> None:
    cfg = run.cfg
    if run.main:
        truncate_jsonl(run.run_dir / "metrics.jsonl", run.start_step)
        truncate_jsonl(run.run_dir / "rollouts.jsonl", run.start_step)
    run.rollout_log = JsonlWriter(run.run_dir / "rollouts.jsonl") if run.main else None
    run.log = MetricsLogger(run.run_dir, total_steps=cfg.steps, start_step=run.start_step, enabled=run.main,
                            progress=cfg.progress, tensorboard=cfg.tensorboard, wandb=cfg.wandb, config=to_dict(cfg))
    if run.state is not None:  # last: nothing above may shift the random streams on resume
        set_rng_state(rank_rng(run.state, run.dist.rank, run.dist.world_size))


# --- rollout and reward (with DAPO's dynamic sampling) ---


def rollout_and_score(run: Run, step: int) -> Batch:
    """Generate and score rounds of prompts until the batch is full (one round unless DAPO filters)."""
    cfg, algo = run.cfg, run.algo
    batch = Batch(target=cfg.prompts_per_step * cfg.group_size, step=step)
    while len(batch.kept) < batch.target and batch.gen_round < cfg.max_gen_batches:
        batch.gen_round += 1
        mine, prompt_texts, outs = generate(run, step, batch)
        scored = score(run, mine, prompt_texts, outs, batch)
        if algo.advantage == "remax":  # --- ReMax: each prompt's greedy completion's reward is its baseline ---
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


def generate(run: Run, step: int, batch: Batch) -> tuple[list[tuple[int, int]], list[str], list[Any]]:
    """This rank's share of the next prompts, their rendered texts, and G completions of each."""
    cfg = run.cfg
    t0 = time.perf_counter()
    mine = distributed.shard(run.stream.take(cfg.prompts_per_step), run.dist)  # same picks on every rank
    prompt_texts = [render(run, run.rows[i]) for i, _ in mine]
    seed = (cfg.seed * 1_000_003 + step * 1_009 + batch.gen_round * 17 + run.dist.rank) % (2**31)
    sampling = SamplingParams(seed=seed, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                              top_p=cfg.top_p, top_k=cfg.top_k)
    # FSDP + HF engine: full weights while sampling (vLLM holds its own copy)
    gather = distributed.gathered_params(run.model) if cfg.rollout == "hf" else contextlib.nullcontext()
    try:
        with gather:
            if cfg.feedback != "none":  # the critic is shown the question, not the rendered prompt
                outs = run.engine.generate(prompt_texts, cfg.group_size, sampling,
                                           questions=[feedback.question_of(run.rows[i]) for i, _ in mine])
            elif run.group_sizes is None:
                outs = run.engine.generate(prompt_texts, cfg.group_size, sampling)
            else:  # --- variance-driven group size: one engine call per distinct G, in prompt order ---
                sizes = run.group_sizes.sizes([run.rows[i].id for i, _ in mine], step)
                outs = [None] * len(mine)
                for g in sorted(set(sizes)):
                    idx = [k for k, n in enumerate(sizes) if n == g]
                    for c in run.engine.generate([prompt_texts[k] for k in idx], g, sampling):
                        c.prompt_index = idx[c.prompt_index]
                        outs[c.prompt_index] = (outs[c.prompt_index] or []) + [c]
                outs = [c for per_prompt in outs for c in per_prompt]
                batch.target = sum(sizes)
    except RuntimeError as e:
        if oom(e):
            raise oom_error("generation") from None
        raise
    batch.timings["time/generate"] += time.perf_counter() - t0
    return mine, prompt_texts, outs


def greedy_baselines(run: Run, mine: list[tuple[int, int]], prompt_texts: list[str], scored: list[Sample],
                     batch: Batch) -> None:
    """ReMax: one greedy completion per prompt, scored like the samples; its reward is the group's baseline."""
    t0 = time.perf_counter()
    greedy = SamplingParams(max_new_tokens=run.cfg.max_new_tokens, temperature=0.0)
    gather = distributed.gathered_params(run.model) if run.cfg.rollout == "hf" else contextlib.nullcontext()
    with gather:
        outs = run.engine.generate(prompt_texts, 1, greedy)
    batch.timings["time/generate"] += time.perf_counter() - t0
    baseline = {s.group: s.score for s in score(run, mine, prompt_texts, outs, batch)}  # every rank's groups
    for s in scored:
        s.baseline = baseline[s.group]


def render(run: Run, row: Any) -> str:
    prompt = with_tool_hint(row.prompt) if run.cfg.tools != "none" else row.prompt
    if run.cfg.system_prompt:
        msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        prompt = [{"role": "system", "content": run.cfg.system_prompt}] + msgs
    return format_prompt(run.tok, prompt)


def score(run: Run, mine: list[tuple[int, int]], prompt_texts: list[str], outs: list[Any], batch: Batch) -> list[Sample]:
    """Grade this rank's completions in the reward pool, gather every rank's, add DAPO's overlong shaping."""
    cfg, algo = run.cfg, run.algo
    t0 = time.perf_counter()
    rows = [run.rows[mine[c.prompt_index][0]] for c in outs]
    metas = [{k: v for k, v in (row.meta or {}).items() if k != "reward"} for row in rows]
    results = score_batch(run.reward_fn, [c.graded_text for c in outs], [row.reference for row in rows], metas,
                          deadline=cfg.reward_deadline, workers=cfg.reward_workers)
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
    if cfg.feedback != "none":  # --- dual-agent: the first answer's reward too (the improvement is logged) ---
        feedback.grade_first_attempts(run, local)
    scored = [s for part in distributed.gather_objects(local) for s in part]  # every rank: all
    batch.generated_tokens += sum(s.model_tokens for s in scored)
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
    if algo.advantage in algos.ADVANTAGE_SCALES:  # group z-score (GRPO, DAPO, GSPO) or r - mean (Dr. GRPO)
        rewards = scores.to(torch.float32)  # (N,)
        adv = algos.group_advantages(rewards, groups, scale=algo.advantage)  # (N,)
        adv = adv * _ADVANTAGE_SIGN  # +1 always, except in tests/test_learning.py's negative control
        for s, a in zip(kept, adv.tolist()):
            s.advantage = a
        return
    # --- advantage estimators (RLOO, REINFORCE++, OPO, pass@k, ReMax, GPG, GAE): per token, as verl ---
    lengths = torch.tensor([len(s.token_ids) for s in kept])  # (N,)
    # the loss mask: tool observations are not the model's tokens (the reward sits at its last one)
    mask = loss_mask(kept, int(lengths.max())).to(torch.float64)  # (N, R)
    token_rewards = advantages.outcome_token_rewards(scores, mask)  # (N, R)
    fn = advantages.ESTIMATORS[algo.advantage]
    if algo.advantage == "gae":  # --- PPO: the critic's values before the update, then GAE ---
        values = old_values(run, kept, mask.shape[1]).to(torch.float64)  # (N, R)
        adv, returns = fn(token_rewards, values, mask, gamma=algo.gamma, lam=algo.lam)  # (N, R)
        for s, v, ret, n in zip(kept, values.tolist(), returns.tolist(), lengths.tolist()):
            s.values, s.returns = v[:n], ret[:n]
    elif algo.advantage == "reinforce_pp":
        adv, _ = fn(token_rewards, mask, gamma=algo.gamma)  # (N, R)
    elif algo.advantage == "remax":
        adv, _ = fn(token_rewards, mask, torch.tensor([s.baseline for s in kept], dtype=torch.float64))  # (N, R)
    else:
        adv, _ = fn(token_rewards, mask, groups)  # (N, R)
    adv = adv * _ADVANTAGE_SIGN
    for s, row, n in zip(kept, adv.tolist(), lengths.tolist()):
        s.advantage = row[:n]


def old_values(run: Run, kept: list[Sample], width: int) -> torch.Tensor:
    """``(N, width)`` the critic's V(s_t) for every kept sample, before any update (no grad)."""
    out = torch.zeros(len(kept), width)
    size = run.sizes.micro_batch_size
    run.critic.eval()
    with torch.no_grad():
        for i in range(0, len(kept), size):
            v = run.critic.values(kept[i : i + size], run.tok.pad_token_id, run.device, autocast=run.autocast)  # (b, R)
            out[i : i + v.shape[0], : v.shape[1]] = v.float().cpu()
    return out


# --- update: rewardlab/train/update.py (update_policy: old/ref log-probs, then the optimizer steps) ---


# --- log: rewardlab/train/metrics.py (step_metrics: the metrics.jsonl row); a skipped step logs here ---


def log_skipped(run: Run, step: int, batch: Batch, t_step: float) -> None:
    """DAPO: no group had reward variance within the round budget; no update this step, and why."""
    cfg = run.cfg
    reason = (f"no group had reward variance in {batch.gen_round} generation round(s) of {cfg.prompts_per_step} "
              f"prompts (--max-gen-batches {cfg.max_gen_batches}); no update this step")
    run.log.message(f"step {step}: skipped: {reason}")
    run.log.log(step, {**gen_metrics(run, batch), **tool_metrics(run, batch.generated), "skip_reason": reason, "lr": run.scheduler.get_last_lr()[0],
                       **batch.timings, "time/step": time.perf_counter() - t_step})


# --- checkpoint ---


def save(run: Run, step: int) -> None:
    """Save step ``step``. The three gathers are collective: every rank runs them, rank 0 writes the files."""
    full = distributed.full_state_dict(run.model) if run.dist.world_size > 1 else None
    optim_state = distributed.optimizer_state_dict(run.model, run.optimizer)  # unsharded, keyed by name
    rngs = distributed.gather_objects(rng_state())  # one per rank: ranks draw different streams
    trainer_state = {
        "step": step, "optimizer": optim_state, "scheduler": run.scheduler.state_dict(), "rng": rngs[0],
        "rng_per_rank": rngs, "data": run.stream.state(), "config": to_dict(run.cfg),
        "world_size": run.dist.world_size,
    }
    if run.critic is not None:  # PPO: the value head (and a separate critic's trunk) with its optimizer
        trainer_state["critic"] = run.critic.state_dict_to_save()
        trainer_state["critic_optimizer"] = run.critic_opt.state_dict()
    trainer_state["options"] = {name: obj.state_dict() for name, obj in option_states(run).items()}
    if run.main:
        path = save_checkpoint(run.run_dir, step, run.model, run.tok, trainer_state, state_dict=full,
                               keep=run.cfg.keep_checkpoints,
                               merged=is_lora(run.model) and (run.cfg.save_merged or step == run.cfg.steps))
        if run.log is not None:
            run.log.message(f"checkpoint {path.name}: {checkpoint_bytes(path) / 2**20:.1f} MiB")
    distributed.barrier()


__all__ = ["Interrupted", "Run", "train"]
