"""The run's setup, as small ``build_*`` functions: :func:`build_plan` (everything a typo can break,
before any model loads: sizes, rows, reward, run directory lock, resume point) and
:func:`build_trainer` (model, reference, optimizer, schedule, critic, options, engine, prompt stream,
in that order, restored from the checkpoint when resuming). The engine is chosen here, once: the
loop calls :class:`~rewardlab.train.state.Sampler` and never asks which engine or feature is on.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rewardlab import envs, forkserver, models, sandbox
from rewardlab.algos import extras
from rewardlab.errors import RewardlabError
from rewardlab.locks import FolderLock
from rewardlab.models import check_model, resolve_device
from rewardlab.logging import MetricsLogger, truncate_jsonl
from rewardlab.rewards.pool import STARTUP_TIMEOUT, prewarm
from rewardlab.rollout import ENGINES, LIVE_ENGINE, Collectives, RolloutEngine, format_prompt, make_engine
from rewardlab.rollout import behaviour
from rewardlab.rollout.driven import DrivenEngine
from rewardlab.rollout.episodes import EpisodeEngine
from rewardlab.rollout.multiturn import with_tool_hint
from rewardlab.rollout.python_tool import ToolEngine
from rewardlab.rollout.tool_settings import ToolSettings
from rewardlab.rollout.toolcalls import render_with_tools
from rewardlab.tasks import Row
from rewardlab.train import async_rollout, distributed, feedback
from rewardlab.train.async_worker import GENERATION_PRELOAD
from rewardlab.train.checkpoint import clean_partial, latest_checkpoint, load_trainer_state, load_weights, set_rng_state
from rewardlab.train.sizes import Layouts, derive
from rewardlab.train.config import TrainConfig, driven, episodic, resolve_algo, to_dict, tools_of, total_token_budget
from rewardlab.train.critic import ValueModel
from rewardlab.train.logprobs import FrozenPrefix, decoder_blocks, freeze_to_top_layers
from rewardlab.train.lora import apply_lora, full_state_dict_for_engine, trainable_parameters
from rewardlab.train.memory import peak_rss_mb
from rewardlab.train.process import seed_everything
from rewardlab.train.saved_config import describe_diff, save_yaml, settings_diff
from rewardlab.train.runtime import build_reward, rank_rng, run_dir_of
from rewardlab.train.samples import PromptStream, RolloutLog
from rewardlab.train.state import Critic, Options, Plan, Run, Sampler, Trainer, run_sampling

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


# --- the plan: sizes, rows, reward, run directory, resume point (before any model loads) ---


def refuse_branches(cfg: TrainConfig, algo: Any, world_size: int) -> None:
    """``branches=all`` (a verifiers task's traces train every branch) with what cannot pay a branch its episode's
    advantage: one line, at start-up."""
    if not envs.is_env(cfg.task) or str(envs.spec_of(cfg.task).options.get("branches", "last")) != "all":
        return
    why = ("its estimator's advantages are per token" if algo.estimator.per_token else
           "online DPO trains pairs" if algo.loss == "dpo" else
           "torchrun ranks would train different numbers of sequences" if world_size > 1 else None)
    if why is not None:
        raise RewardlabError(f"{cfg.task}: branches=all pays each branch its episode's advantage; --algo {cfg.algo}: "
                             f"{why} (use branches=last)")


def build_plan(cfg: TrainConfig, locks: list[FolderLock]) -> Plan:
    """The run's plan; locks its run directory (appended to ``locks``) and finds the checkpoint to resume."""
    device_name = resolve_device(cfg.device)  # --device cuda without CUDA: one line, before anything heavy
    dist = distributed.init()
    algo = resolve_algo(cfg)
    sizes = derive(cfg, world_size=dist.world_size, mini_batches=algo.mini_batches)
    async_rollout.refuse(cfg, algo, dist.world_size)  # --async-steps with what it cannot pipeline: one line
    refuse_branches(cfg, algo, dist.world_size)
    run_dir = run_dir_of(cfg)
    check_model(cfg.model)
    rows = build_rows(cfg)
    reward_fn, main_reward = build_reward(cfg, rows)
    lock_run_dir(run_dir, dist, locks)
    ckpt = latest_checkpoint(run_dir)
    state = load_trainer_state(ckpt) if ckpt is not None else None
    if state is not None and (changed := settings_diff(state.get("config", {}), cfg)):
        raise RewardlabError(f"{run_dir} holds a run with different settings ({describe_diff(changed)}); "
                             "rerun with the saved settings to resume, or pick a new --output-dir")
    device = torch.device(device_name)
    if device.type == "cuda" and dist.world_size > 1:
        device = dist.device
    return Plan(cfg=cfg, algo=algo, sizes=sizes, dist=dist, device=device, run_dir=run_dir, rows=rows,
                reward_fn=reward_fn, main_reward=main_reward, ckpt=ckpt, state=state,
                start_step=int(state["step"]) if state else 0, correction=algo.rollout_correction(),
                layouts=Layouts(cfg.packing))


def build_rows(cfg: TrainConfig) -> list[Row]:
    """The task's training rows; each must have a prompt and a reference answer."""
    rows, _ = envs.load_rows(cfg.task, "train", limit=cfg.task_limit, seed=cfg.seed)
    if not rows:
        raise RewardlabError(f"task {cfg.task!r} has no training rows")
    for r in rows:
        if r.prompt in (None, "", []) or r.reference is None:
            raise RewardlabError(f"task {cfg.task!r} row {r.id!r} has no {'prompt' if not r.prompt else 'reference'}; "
                                 "every row needs a prompt and a reference answer")
    return rows


def lock_run_dir(run_dir: Path, dist: distributed.DistInfo, locks: list[FolderLock]) -> None:
    """One writer per run directory, for the whole run (the kernel drops the lock on any exit); then a
    partial checkpoint left by a crash is cleaned. Every rank learns whether rank 0 got the lock."""
    lock_error = None
    if dist.is_main:
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


# --- the trainer: model, reference, optimizer, schedule, critic, options, engine, data ---


def build_trainer(plan: Plan, threads: int | None) -> Trainer:
    """Load and build everything the steps use, in an order that keeps the random streams of a fresh
    run and of a resumed one as they were (see :func:`restore`)."""
    cfg, algo, dist = plan.cfg, plan.algo, plan.dist
    announce(plan, threads)
    if cfg.async_steps:  # the reward pool may start the one fork server: it imports the generator's modules too
        forkserver.preload(*GENERATION_PRELOAD)
    pool_ready = prewarm(plan.reward_fn, cfg.reward_workers)  # reward workers start while the model loads
    seed_everything(cfg.seed + dist.rank)
    # bf16 on GPU: fp32 master weights + bf16 autocast (dtype auto); --dtype bfloat16 = pure bf16 weights
    model, tok = models.load_model(cfg.model, dtype="float32" if cfg.dtype == "auto" else cfg.dtype, device="cpu")
    if plan.main:  # after the model loads: a start that fails before this leaves a new run directory empty (removed)
        save_yaml(plan.run_dir / "config.yaml", cfg, derived=plan.sizes, algo=algo)
    on_gpu = plan.device.type == "cuda" and cfg.dtype == "auto"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else None
    ref_model = build_reference(plan, model)
    start = ref_model  # --feedback ref: the critic is a frozen copy of the starting policy
    if cfg.feedback == "ref" and start is None:
        start = copy.deepcopy(model).eval().requires_grad_(False)
    model, n_trainable = build_policy(plan, model)
    prefix = build_prefix(plan, model)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    policy = distributed.wrap_model(model, dist) if dist.world_size > 1 else model.to(plan.device)  # FSDP2 shards
    optimizer = build_optimizer(cfg, [p for p in policy.parameters() if p.requires_grad], cfg.lr)
    critic = build_critic(plan, policy, model) if algo.critic is not None else None  # --- PPO: a value model ---
    options = build_options(plan)
    if pool_ready is not None and not pool_ready.wait(STARTUP_TIMEOUT):  # no step is graded on a cold reward pool
        plan.say(f"  reward workers not ready after {STARTUP_TIMEOUT:g} s: "
                 "the first items may time out (phase startup)")
    scheduler = build_scheduler(cfg, optimizer)
    stream = PromptStream(len(plan.rows), cfg.seed)
    restore(plan, policy, optimizer, scheduler, critic, options, stream)
    say_trainable(plan, n_trainable)
    engine = build_engine(plan, policy, tok)
    gather = (lambda: distributed.gathered_params(policy)) if ENGINES[engine_kind(cfg)].live_weights \
        else contextlib.nullcontext
    sampler = Sampler(engine, gather, rows=isinstance(engine, (EpisodeEngine, DrivenEngine)))
    trainer = Trainer(model=policy, tok=tok, optimizer=optimizer, scheduler=scheduler, engine=engine,
                      sampler=sampler, render=build_render(cfg, tok), stream=stream, ref_model=ref_model,
                      prefix=prefix, autocast=autocast, critic=critic, options=options,
                      multiturn=multiturn_of(cfg, training=True))
    if cfg.feedback != "none":  # --- a critic that talks back: feedback, then a second answer ---
        talker = feedback.feedback_engine(quiet_run(plan, trainer), start)
        trainer = dataclasses.replace(trainer, engine=talker, sampler=Sampler(talker, gather, feedback.question_of),
                                      grade_first=feedback.grade_first_attempts)
    plan.say(f"  peak memory after loading   {peak_rss_mb():.0f} MiB RSS (memory/peak_rss_mb in every metrics row)")
    return trainer


def announce(plan: Plan, threads: int | None) -> None:
    """The run's first lines: algorithm, task, model, ranks, sizes, run directory."""
    cfg = plan.cfg
    plan.say(f"rewardlab train: {cfg.algo} on {cfg.task}, model {cfg.model or models.DEFAULT_MODEL}, "
             f"{plan.dist.world_size} rank(s) on {plan.device.type}, threads {threads or torch.get_num_threads()}")
    plan.say(plan.sizes.describe())
    plan.say(f"  log-probs                   {behaviour.describe(run_sampling(cfg))}"
             f" (--logprob-support {cfg.logprob_support})")
    resuming = f"  (resuming from {plan.ckpt.name})" if plan.ckpt else ""
    plan.say(f"  run directory               {plan.run_dir}{resuming}")


def build_reference(plan: Plan, model: torch.nn.Module) -> torch.nn.Module | None:
    """A frozen copy of the starting policy, only when the KL term (or DPO) needs it."""
    if plan.algo.beta > 0 or plan.algo.loss == "dpo":
        return copy.deepcopy(model).eval().requires_grad_(False).to(plan.device)
    return None


def build_policy(plan: Plan, model: torch.nn.Module) -> tuple[torch.nn.Module, int]:
    """The trained part (``--train-top-layers``, LoRA adapters) and the checkpoint's weights;
    ``(model, trainable count)``."""
    cfg = plan.cfg
    n_trainable = freeze_to_top_layers(model, cfg.train_top_layers)
    if cfg.lora_rank:  # --- LoRA (peft): adapters only, in the top --train-top-layers blocks (0 = all) ---
        model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, cfg.lora_dropout,
                           top_layers=cfg.train_top_layers)
        n_trainable = trainable_parameters(model)
    if plan.ckpt is not None:  # after LoRA: an adapter checkpoint loads into the PEFT model
        load_weights(model, plan.ckpt)
    return model, n_trainable


def build_prefix(plan: Plan, model: torch.nn.Module) -> FrozenPrefix | None:
    """Off-policy with ``--train-top-layers`` in one process: replay the frozen blocks' output."""
    cfg = plan.cfg
    if cfg.train_top_layers and plan.sizes.off_policy and plan.dist.world_size == 1:
        blocks = decoder_blocks(model)
        if blocks is not None and cfg.train_top_layers < len(blocks):
            return FrozenPrefix(blocks, cfg.train_top_layers)
    return None


def build_optimizer(cfg: TrainConfig, params: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """AdamW with the run's betas and weight decay."""
    return torch.optim.AdamW(params, lr=lr, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay)


def build_scheduler(cfg: TrainConfig, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``--warmup-steps`` optimizer steps, then constant."""
    warm = max(0, cfg.warmup_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / (warm + 1)) if warm else 1.0)


def build_critic(plan: Plan, policy: torch.nn.Module, model: torch.nn.Module) -> Critic:
    """PPO's value model: a head on the policy's trunk (shared), on a copy of the policy (separate), or on another
    model; with its own optimizer."""
    algo, cfg = plan.algo, plan.cfg
    if plan.dist.world_size > 1:
        raise RewardlabError("--critic (PPO) runs in one process for now; it is not wired for torchrun / FSDP")
    if algo.critic == "shared":
        value = ValueModel.shared(policy, detach_below=algo.critic_detach_below, seed=cfg.seed)
    else:
        source = copy.deepcopy(model).to(plan.device) if algo.critic == "separate" else algo.critic
        value = ValueModel.separate(source, detach_below=algo.critic_detach_below, device=plan.device, seed=cfg.seed)
    value.to(plan.device)
    optimizer = build_optimizer(cfg, value.parameters_to_train(), algo.critic_lr or cfg.lr)
    plan.say(f"  critic                      {algo.critic} (value head"
             + (f", value gradients in the top {algo.critic_detach_below} blocks" if algo.critic_detach_below else "")
             + ")")
    return Critic(value, optimizer)


def build_options(plan: Plan) -> Options:
    """The write-ups' stateful options (docs/algorithms.md, "Ideas from popular descriptions"), when on."""
    algo, cfg = plan.algo, plan.cfg
    clip_adapt = reward_norm = group_sizes = None
    if algo.clip_adapt == "kl":
        clip_adapt = extras.AdaptiveClip(algo.eps_low, algo.eps_high, alpha=algo.clip_adapt_alpha,
                                         kl_target=algo.clip_adapt_target, eps_min=algo.clip_adapt_min,
                                         eps_max=algo.clip_adapt_max)
    if algo.reward_norm == "ema":
        reward_norm = extras.EmaRewardNorm(decay=algo.reward_norm_decay)
    if algo.group_size_policy == "variance":
        if plan.dist.world_size > 1:
            raise RewardlabError("--group-size-policy variance runs in one process for now (not under torchrun)")
        group_sizes = extras.GroupSizePolicy(cfg.group_size, algo.group_size_min, algo.group_size_max,
                                             algo.group_size_threshold, algo.group_size_warmup)
    return Options(clip_adapt=clip_adapt, reward_norm=reward_norm, group_sizes=group_sizes)


def restore(plan: Plan, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            scheduler: torch.optim.lr_scheduler.LambdaLR, critic: Critic | None, options: Options,
            stream: PromptStream) -> None:
    """Resuming: the optimizer, schedule, critic, options and data position of the checkpoint (a no-op
    on a fresh run). Collective under FSDP: every rank loads, rank 0's full state is broadcast and sharded.
    The RNG state comes last, in :func:`build_run`."""
    state = plan.state
    if state is None:
        return
    distributed.load_optimizer_state_dict(model, optimizer, state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if critic is not None:
        critic.model.load_saved(state["critic"])
        critic.optimizer.load_state_dict(state["critic_optimizer"])
    for name, obj in options.states().items():
        obj.load_state_dict(state["options"][name])
    stream.load(state["data"])


def say_trainable(plan: Plan, n_trainable: int) -> None:
    cfg = plan.cfg
    where = f"top {cfg.train_top_layers} blocks" if cfg.train_top_layers else "all blocks"
    plan.say(f"  trainable parameters        {n_trainable / 1e6:.2f} M"
             + (f" (LoRA rank {cfg.lora_rank}, alpha {cfg.lora_alpha:g}, {where})" if cfg.lora_rank else
                f" (top {cfg.train_top_layers} blocks + final norm)" if cfg.train_top_layers else " (all)"))


def engine_kind(cfg: TrainConfig) -> str:
    """The trainer's own engine: ``--rollout``, except with ``--async-steps`` (the generation worker runs
    ``--rollout``; the trainer keeps the live-model engine, no weight copy, for ``--eval-every``)."""
    return LIVE_ENGINE if cfg.async_steps > 0 else cfg.rollout


def build_engine(plan: Plan, model: torch.nn.Module, tok: PreTrainedTokenizerBase) -> RolloutEngine:
    """The ``--rollout`` engine (:func:`engine_kind`; its row of ``rollout.ENGINES``), wrapped for multi-turn rollouts
    (:func:`multiturn_of`) or for environments that drive it (``--feedback``: :func:`build_trainer`)."""
    cfg, dist = plan.cfg, plan.dist
    spec = ENGINES[engine_kind(cfg)]
    engine_kw = spec.train_keywords(cfg, plan.device.type)
    if spec.takes_collectives:  # it borrows the trainer's collectives (rollout never imports rewardlab.train)
        engine_kw["collectives"] = Collectives(
            world_size=lambda: dist.world_size, all_reduce_max=distributed.all_reduce_max,
            full_state_dict=full_state_dict_for_engine(model), on_destroy=distributed.on_destroy)
    engine = make_engine(engine_kind(cfg), model, tok, **engine_kw)
    multiturn = multiturn_of(cfg)
    return engine if multiturn is None else multiturn.wrap(model, tok, engine, engine_kind(cfg))


@dataclasses.dataclass(frozen=True)
class Multiturn:
    """How a run's engine is wrapped for multi-turn rollouts: environment episodes that rewardlab drives
    (``episodes``: the task's, an ``--eval-suite``'s), environments that drive the policy through its endpoint
    (``driven``: verifiers), or the sandbox as the model's Python tool (``tools``: ``--tools python``). Picklable:
    the ``--async-steps`` generation worker wraps its own engine with it (``async_worker.Spec``)."""

    kind: str
    settings: ToolSettings
    batch_size: int

    @property
    def takes_rows(self) -> bool:
        """Whether the wrapped engine opens each prompt's episodes on its row (``generate(..., rows=)``)."""
        return self.kind in ("episodes", "driven")

    def wrap(self, model: torch.nn.Module, tok: PreTrainedTokenizerBase, engine: RolloutEngine,
             engine_name: str) -> RolloutEngine:
        """``engine`` (a ``rollout.ENGINES`` row named ``engine_name``) wrapped; an engine that continues exact
        token ids (vLLM) samples the turns itself, else the live ``model`` does."""
        drives = ENGINES[engine_name].drives_tool_loop
        if self.kind == "driven":  # the environment runs its own agent against the endpoint over ``engine``
            return DrivenEngine(engine, tok, drive=envs.drive, is_driven=envs.is_driven,  # the policy's own length
                                max_model_len=int(getattr(model.config, "max_position_embeddings", 0)))
        if self.kind == "episodes":
            return EpisodeEngine(model, tok, open_episode=envs.open_episode, settings=self.settings,
                                 batch_size=self.batch_size, base=engine, drives=drives, is_episode=envs.is_episode)
        return ToolEngine(model, tok, execute=sandbox.execute, settings=self.settings, batch_size=self.batch_size,
                          engine=engine if drives else None)


def multiturn_of(cfg: TrainConfig, *, training: bool = False) -> Multiturn | None:
    """The run's :class:`Multiturn`, or None when its rollouts are single-turn; ``training``: for the training
    rollouts alone (the ``--async-steps`` worker's: an ``--eval-suite`` environment runs on the trainer's engine)."""
    if driven(cfg) and (not training or cfg.task in driven(cfg)):  # --- environments that run their own agent ---
        return Multiturn("driven", tools_of(cfg), cfg.rollout_batch_size)
    if episodic(cfg) and (not training or cfg.task in episodic(cfg)):  # --- multi-turn environments ---
        return Multiturn("episodes", tools_of(cfg), cfg.rollout_batch_size)
    if cfg.tools == "python":  # --- the sandbox is the model's Python tool ---
        # the trajectory budget is fixed from --max-new-tokens here (the --eval-every rollouts keep it too)
        return Multiturn("tools", tools_of(cfg, max_total_tokens=total_token_budget(cfg)), cfg.rollout_batch_size)
    return None


def build_render(cfg: TrainConfig, tok: PreTrainedTokenizerBase) -> Callable[[Row], str]:
    """A row's prompt as the model sees it: the tool hint (``--tools``), the system prompt, the chat template."""

    def render(row: Row) -> str:
        prompt = with_tool_hint(row.prompt) if cfg.tools != "none" else row.prompt
        if cfg.system_prompt:
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            prompt = [{"role": "system", "content": cfg.system_prompt}] + msgs
        if (row.meta or {}).get("tools"):  # an environment's tools, declared to the chat template
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            return render_with_tools(tok, msgs, row.meta["tools"])
        return format_prompt(tok, prompt)

    return render


def build_run(plan: Plan, trainer: Trainer) -> Run:
    """The run's logs (resuming: cut back to the resume point), then this rank's saved RNG state."""
    cfg = plan.cfg
    if plan.main:
        truncate_jsonl(plan.run_dir / "metrics.jsonl", plan.start_step)
        truncate_jsonl(plan.run_dir / "rollouts.jsonl", plan.start_step)
    rollout_log = RolloutLog(plan.run_dir / "rollouts.jsonl", enabled=plan.main)
    log = MetricsLogger(plan.run_dir, total_steps=cfg.steps, start_step=plan.start_step, enabled=plan.main,
                        progress=cfg.progress, tensorboard=cfg.tensorboard, wandb=cfg.wandb, config=to_dict(cfg))
    if plan.state is not None:  # last: nothing above may shift the random streams on resume
        set_rng_state(rank_rng(plan.state, plan.dist.rank, plan.dist.world_size))
    return Run(plan, trainer, log, rollout_log)


def quiet_run(plan: Plan, trainer: Trainer) -> Run:
    """A :class:`Run` that logs nothing, for what is built from a run before its logs open (the feedback engine)."""
    return Run(plan, trainer, MetricsLogger(plan.run_dir, total_steps=plan.cfg.steps, enabled=False),
               RolloutLog(plan.run_dir / "rollouts.jsonl", enabled=False))


__all__ = ["build_engine", "build_options", "build_plan", "build_run", "build_trainer"]
