"""One typed training config: defaults, a YAML file, ``--key value`` overrides, derived sizes.

Every knob of ``rewardlab train`` is a field of :class:`TrainConfig` with a one-line docstring
(``rewardlab train --help`` lists them). Values come, in order of precedence, from the command line
(``--lr 2e-5`` or ``--lr=2e-5``; dashes and underscores are interchangeable), a YAML file
(``--config run.yaml``), the algorithm preset (``--algo``), and the defaults below.

The algorithm settings are not declared here: every field of :class:`rewardlab.algos.Algo` becomes
an optional field of :class:`TrainConfig` (``--eps-high 0.3``; ``None`` = the preset's value), with
the ``Algo`` field's docstring as its help. Adding an algorithm field is one line in ``algos.Algo``
plus its use.

The batch arithmetic (prompts, completions, mini-batches, micro-batches) is derived from the config by
:mod:`rewardlab.train.sizes`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rewardlab import algos, envs, tasks
from rewardlab.algos import ALGOS, Algo
from rewardlab.errors import RewardlabError
from rewardlab.fields import attribute_docs, help_texts
from rewardlab.models import DTYPES, check_device_spelling
from rewardlab.rewards.judge import settings as judge_settings
from rewardlab.rewards.judge.settings import JudgeSettings
from rewardlab.rollout import tool_settings
from rewardlab.rollout.engines import DEFAULT_ENGINE, ENGINES, LIVE_ENGINE
from rewardlab.rollout.base import SUPPORTS
from rewardlab.rollout.tool_settings import TOOLS, ToolSettings


FEEDBACK_PROMPT = ("A student answered a question. In one or two sentences, say whether the answer is right and, "
                   "if it is wrong, point to the mistake. Do not give the answer yourself.\n\n"
                   "Question: {question}\n\nStudent's answer: {answer}")
"""The default ``--feedback-prompt``."""
PACKINGS: tuple[str, ...] = ("none", "sequences", "groups", "auto")
"""``--packing``: the micro-batch layouts (their costs: :data:`rewardlab.train.sizes.LAYOUT_COST`), and ``auto``,
which times each layout on the run's first update steps and keeps the fastest
(:class:`rewardlab.train.sizes.Layouts`)."""


@dataclass
class _Settings:
    """The run settings that are not algorithm fields (those come from ``algos.Algo``, below)."""

    # --- what to train ---
    algo: str = field(default="gspo", metadata={"choices": ALGOS})
    """Algorithm preset (docs/algorithms.md)."""
    model: str | None = None
    """HF hub id or local folder of a causal LM; None = the embedded SmolLM2-135M-Instruct."""
    task: str = field(default="arith", metadata={"choices": tasks.TASKS})
    """Training task (arith is built in), an environment KIND:NAME (--env; rewardlab envs list), or a FILE.jsonl."""
    task_limit: int | None = None
    """Use only the first N rows of the task (None = all)."""
    system_prompt: str | None = None
    """Optional system message prepended to every chat prompt."""

    # --- rewards ---
    reward: str | None = None
    """Main reward (registered name or dotted path); None = the task's default reward."""
    format_weight: float = 0.0
    """Weight of the 'format' reward component (0 = off)."""
    overlong_weight: float | None = None
    ("""Shorthand for DAPO's soft overlong penalty: > 0 sets overlong on with overlong_factor = this weight, 0 sets """
     """it off (None = preset).""")
    reward_deadline: float = 5.0
    """Per-completion grading deadline in seconds (a timeout scores as a failure, never a hang)."""
    reward_workers: int | None = None
    """Reward worker processes (None = the pool's default)."""

    # --- batch sizes ---
    steps: int = 20
    """Number of training steps (one rollout batch each)."""
    prompts_per_step: int = 8
    """Prompts per training step (global, across ranks)."""
    group_size: int = 4
    """Completions sampled per prompt (G)."""
    epochs: int = 1
    """Passes over each rollout batch."""
    micro_batch_size: int = 8
    """Completions per forward/backward pass (gradient accumulation unit, per rank)."""
    max_tokens_per_micro_batch: int = 0
    """Cut micro-batches by tokens instead (positions computed, padding included; 0 = by --micro-batch-size)."""
    packing: str = field(default="none", metadata={"choices": PACKINGS})
    """Micro-batch layout, in choice order: padded rows; one packed row; a prompt once + its answers; the fastest."""

    # --- sampling ---
    max_new_tokens: int = 32
    """Maximum generated tokens per completion (L_max)."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    logprob_support: str = field(default="kept", metadata={"choices": tuple(SUPPORTS)})
    """Log-probs under top-k / top-p: kept (renormalised over the kept set, as sampled) or full (whole vocabulary)."""
    rollout: str = field(default=DEFAULT_ENGINE, metadata={"choices": tuple(ENGINES)})
    """Rollout engine (rewardlab.rollout.engines)."""
    rollout_batch_size: int = 64
    """Sequences per generate call in the HF engine."""
    vllm_gpu_memory_utilization: float = 0.3
    """vLLM engine: share of the GPU's memory it may take for weights + KV cache (the trainer keeps the rest)."""
    vllm_sleep_mode: bool = False
    """vLLM engine (GPU only): free its KV cache and offload its weights between rollouts."""
    async_steps: int = 0
    ("""Asynchronous rollout (rewardlab.train.async_rollout): generate the rollouts of steps t+1..t+k in a worker """
     """process while step t trains, by a policy at most k steps old (0 = synchronous, today's loop).""")
    max_staleness: int | None = None
    ("""--async-steps: drop (and regenerate) rollouts whose policy is more than this many steps old, counted as """
     """async/dropped (None = --async-steps).""")
    tools: str = field(default="none", metadata={"choices": TOOLS})
    """Tool use: none, or python (multi-turn: the model may write ```python blocks; each runs in the sandbox and
    its output is inserted, loss-masked; the reward grades the model's last turn). HF or vLLM engine."""
    feedback: str = "none"
    """Dual-agent feedback: none; ref (a frozen copy of the starting policy), policy (the live policy with
    --feedback-prompt) or a model (hub id / folder) writes feedback on each answer; it comes back as a user turn
    (loss-masked) and the model answers again; the reward grades the second answer. Not the published DAPO."""
    feedback_prompt: str = FEEDBACK_PROMPT
    """--feedback: the critic's prompt, a str.format template over {question} and {answer}."""
    feedback_tokens: int = 48
    """--feedback: most tokens of one feedback."""
    feedback_train_every: int = 0
    """--feedback policy: every k-th step trains the critic instead of the actor, on its feedback tokens, rewarded
    by the improvement they caused (second answer's reward - first's); 0 = never."""

    # --- optimisation ---
    lr: float = 1e-4
    """Peak learning rate (AdamW)."""
    warmup_steps: int = 0
    """Linear warm-up length in optimizer steps, then constant."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.99
    """AdamW beta2."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold (global L2 norm; 0 = off)."""
    train_top_layers: int = 4
    """Train only the top N transformer blocks plus the final norm (0 = train every parameter)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    lora_rank: int = 0
    """LoRA adapter rank (0 = no LoRA). LoRA usually wants a higher --lr than full fine-tuning (guidance: ~10x)."""
    lora_alpha: float = 16.0
    """LoRA scale: adapters are scaled by lora_alpha / lora_rank."""
    lora_targets: str | None = None
    """Comma-separated module names to adapt, 'attention' (q/k/v/o), or None = every linear layer of the blocks."""
    lora_dropout: float = 0.0
    """Dropout on the adapters (keep 0 for RL: it makes the on-policy ratio differ from 1)."""
    save_merged: bool = False
    """LoRA: also write merged HF weights to each checkpoint's merged/ folder (the last checkpoint always gets them)."""

    # --- algorithm overrides: every algos.Algo field, added below as an optional field (None = preset) ---
    max_gen_batches: int = 4
    ("Dynamic sampling's generation-round budget per step. Trade-off: each round is a full rollout, so a step "
     "costs up to this many (num_gen_batches, completions/generated); when the budget runs out before "
     "prompts_per_step groups with reward variance are found, the step trains on the groups it has (a smaller, "
     "noisier update: gen_budget_exhausted 1, completions/kept), or with none is skipped without an update "
     "(skipped 1, skip_reason). Raise it for full batches on tasks the model nearly always or never solves.")

    # --- machine ---
    device: str = "auto"
    """cpu, cuda, cuda:N or auto (cuda when available)."""
    dtype: str = field(default="auto", metadata={"choices": DTYPES})
    """Training dtype: auto = bf16 on GPU, fp32 on CPU."""
    threads: int | None = None
    """Torch CPU threads (None = 1 on machines with <= 4 cores, else the torch default)."""
    seed: int = 0
    """Seed for data order, sampling and initialisation."""

    # --- output ---
    output_dir: str | None = None
    """Run directory (None = runs/<algo>-<task>-<model>); rerunning in the same folder resumes; one run at a time."""
    save_every: int = 10
    """Save a checkpoint every N steps (and always at the end or on Ctrl-C)."""
    keep_checkpoints: int = 2
    """Complete checkpoints to keep (older ones are deleted; 0 = keep all); --save-total-limit is the same setting."""
    tensorboard: bool = False
    """Also log to TensorBoard (needs the tensorboard package)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs the wandb package)."""
    progress: bool = True
    """Show a progress bar."""
    plots: bool = True
    """Draw PNG plots into <run>/plots at the end."""
    eval_before_after: str | None = None
    """Comma-separated eval suite run before and after training (e.g. gsm8k,math500)."""
    eval_limit: int | None = 50
    """Problems per benchmark for --eval-before-after and --eval-every (None = all)."""
    eval_every: int = 0
    """Evaluate the live policy on --eval-suite every N steps, before the first and after the last (0 = off)."""
    eval_suite: str | None = field(default=None, metadata={"choices": tasks.TASKS})
    """--eval-every: comma-separated held-out benchmarks (task names, or a .jsonl file), their test split, graded by
    each one's own reward; logged as eval/<bench>/accuracy in metrics.jsonl."""
    eval_samples: int = 1
    """--eval-every: completions per problem (accuracy is their mean; more than 1 also logs pass@n)."""
    eval_temperature: float = 0.0
    """--eval-every: sampling temperature (0 = greedy; above 0 the same seed at every eval)."""
    eval_max_new_tokens: int | None = None
    """--eval-every: token budget per eval completion (None = --max-new-tokens)."""
    eval_ngram: int = 13
    """--eval-every: n of the start-up overlap check (eval problems sharing a word n-gram with a training question)."""


ALGO_FIELDS: tuple[str, ...] = algos.FIELDS
"""The TrainConfig fields that override the preset: exactly ``algos.Algo``'s fields."""

_ALGO_TYPES = typing.get_type_hints(Algo)
_ALGO_META = {f.name: f.metadata for f in dataclasses.fields(Algo)}
TrainConfig = dataclasses.make_dataclass(
    "TrainConfig",
    [*judge_settings.config_fields(), *tool_settings.config_fields(),
     *[(name, _ALGO_TYPES[name] | None, dataclasses.field(default=None, metadata=_ALGO_META[name]))
       for name in ALGO_FIELDS]],
    bases=(_Settings,),
)
TrainConfig.__module__ = __name__
TrainConfig.__doc__ = """Everything a training run needs: the settings above, the ``--judge-*`` and ``--tools`` settings
(one field per ``JudgeSettings`` / ``ToolSettings`` field, same name and default) and one optional field per
``algos.Algo`` field (``None`` = the preset's value)."""


def field_docs() -> dict[str, str]:
    """Field name -> one-line help: the run settings' docstrings (the judge settings', from ``JudgeSettings``, after
    ``reward_workers``; the tool settings', from ``ToolSettings``, after ``tools``), then the algorithm fields' from
    ``algos.Algo``; a field with choices lists its registry."""
    algo_docs = attribute_docs(Algo)
    docs: dict[str, str] = {}
    for name, doc in attribute_docs(_Settings).items():
        docs[name] = doc
        if name == "tools":
            docs.update(tool_settings.docs())
        if name == "reward_workers":  # the --judge-* settings (JudgeSettings) under the reward settings
            docs.update(attribute_docs(JudgeSettings))
    return help_texts(TrainConfig, {**docs, **{k: f"{algo_docs[k]} (None = preset)" for k in ALGO_FIELDS}})


_HINTS: dict[str, Any] | None = None


def _hints() -> dict[str, Any]:
    global _HINTS
    if _HINTS is None:
        _HINTS = typing.get_type_hints(TrainConfig)
    return _HINTS


def _coerce(name: str, value: Any) -> Any:
    """Convert ``value`` (a string from the CLI or a YAML scalar) to the type of field ``name``."""
    hint = _hints()[name]
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if isinstance(value, str):
        low = value.strip().lower()
        if optional and low in ("none", "null", "~", ""):
            return None
        if base is bool:
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise RewardlabError(f"--{name.replace('_', '-')} expects true or false, got {value!r}")
        if base is int:
            try:
                return int(value)
            except ValueError:
                raise RewardlabError(f"--{name.replace('_', '-')} expects an integer, got {value!r}") from None
        if base is float:
            try:
                return float(value)
            except ValueError:
                raise RewardlabError(f"--{name.replace('_', '-')} expects a number, got {value!r}") from None
        return value
    if value is None:
        if optional:
            return None
        raise RewardlabError(f"{name} cannot be empty")
    if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if base is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if base is bool and isinstance(value, bool):
        return value
    if base is str and isinstance(value, (str, int, float)):
        return str(value)
    raise RewardlabError(f"{name} expects {base.__name__}, got {value!r}")


_ALIASES = {"save_total_limit": "keep_checkpoints"}  # the HF Trainer's name for the same setting


def _check_name(name: str) -> str:
    key = name.replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in _hints():
        close = difflib.get_close_matches(key, list(_hints()), n=1)
        hint = f" (did you mean --{close[0].replace('_', '-')}?)" if close else ""
        raise RewardlabError(f"unknown setting {name!r}{hint}; `rewardlab train --help` lists them")
    return key


def parse_overrides(args: list[str]) -> dict[str, str]:
    """``["--lr", "1e-5", "--beta=0.04", "--no-plots"]`` -> ``{"lr": "1e-5", "beta": "0.04", "plots": "false"}``."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise RewardlabError(f"unexpected argument {arg!r}; settings are given as --key value")
        body = arg[2:]
        if "=" in body:
            key, value = body.split("=", 1)
            i += 1
        elif body.startswith("no-") and body[3:].replace("-", "_") in _hints() and (
            i + 1 >= len(args) or args[i + 1].startswith("--")
        ):
            key, value = body[3:], "false"
            i += 1
        elif i + 1 < len(args) and not (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
            key, value = body, args[i + 1]
            i += 2
        else:
            key = _check_name(body)
            if typing.get_args(_hints()[key]) and bool in typing.get_args(_hints()[key]) or _hints()[key] is bool:
                key, value = body, "true"
                i += 1
            else:
                raise RewardlabError(f"--{body} needs a value")
        out[_check_name(key)] = value
    return out


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML config file into a plain dict of known fields."""
    p = Path(path)
    if not p.is_file():
        raise RewardlabError(f"config file {str(p)!r} not found")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise RewardlabError(f"config file {str(p)!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise RewardlabError(f"config file {str(p)!r} must hold a mapping of setting: value")
    # A saved config.yaml holds derived sizes next to the settings; they are recomputed.
    data.pop("derived", None)
    return {_check_name(str(k)): v for k, v in data.items()}


def build_config(yaml_path: str | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults <- YAML file <- overrides (strings or typed values), validated."""
    values: dict[str, Any] = {}
    if yaml_path:
        values.update(load_yaml(yaml_path))
    for k, v in (overrides or {}).items():
        values[_check_name(k)] = v
    cfg = TrainConfig(**{k: _coerce(k, v) for k, v in values.items()})
    validate(cfg)
    return cfg


def judge_of(cfg: TrainConfig) -> JudgeSettings:
    """The run's ``--judge-*`` settings (its fields of :class:`JudgeSettings`' names)."""
    return judge_settings.settings_of(cfg)


def tools_of(cfg: TrainConfig, **overrides: Any) -> ToolSettings:
    """The run's ``--tools`` settings (its fields of :class:`ToolSettings`' names); ``overrides`` replace some."""
    return tool_settings.settings_of(cfg, **overrides)


def total_token_budget(cfg: TrainConfig) -> int:
    """``--tools``: the most tokens of a trajectory, observations included."""
    return tools_of(cfg).token_budget(cfg.max_new_tokens)


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise RewardlabError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


def validate(cfg: TrainConfig) -> None:
    """Reject settings that cannot work, with a message that says what to change."""
    _choice("algo", cfg.algo, ALGOS)
    _choice("rollout", cfg.rollout, tuple(ENGINES))
    _choice("logprob_support", cfg.logprob_support, tuple(SUPPORTS))
    if cfg.top_k == 1 and cfg.logprob_support == "kept":
        raise RewardlabError("--top-k 1 under --logprob-support kept gives every sampled token probability 1, so "
                             "nothing trains; use --logprob-support full (TRL's, verl's) or --top-k above 1")
    full_kept = cfg.logprob_support == "full" and (cfg.top_k or cfg.top_p < 1)
    if full_kept and not ENGINES[cfg.rollout].reports_full_logprobs:
        raise RewardlabError(f"--logprob-support full with top-k / top-p needs --rollout {LIVE_ENGINE} (--rollout "
                             f"{cfg.rollout} reports kept-set log-probs)")
    _choice("tools", cfg.tools, TOOLS)
    tools_of(cfg).check()
    if cfg.feedback != "none":
        if cfg.tools != "none" or cfg.rollout != LIVE_ENGINE:
            raise RewardlabError(f"--feedback runs on the {LIVE_ENGINE} engine without --tools (one or the other, for "
                                 "now)")
        if resolve_algo(cfg).group_size_policy == "variance":
            raise RewardlabError("--feedback runs with a fixed --group-size (not --group-size-policy variance)")
        if cfg.feedback_tokens < 1:
            raise RewardlabError(f"--feedback-tokens must be >= 1, got {cfg.feedback_tokens}")
        try:
            cfg.feedback_prompt.format(question="q", answer="a")
        except (KeyError, IndexError, ValueError) as e:
            raise RewardlabError(
                f"--feedback-prompt must be a template over {{question}} and {{answer}}: {e}") from None
    if cfg.feedback_train_every < 0 or (cfg.feedback_train_every and cfg.feedback != "policy"):
        raise RewardlabError("--feedback-train-every k trains the critic that is the policy (--feedback policy); "
                             "a separate critic model is not trained (k >= 0)")
    envs_run = episodic(cfg) + driven(cfg)
    if envs_run and (cfg.tools != "none" or cfg.feedback != "none"):
        raise RewardlabError(f"{envs_run[0]}: a multi-turn environment brings its own tools; it runs without "
                             "--tools and --feedback")
    if driven(cfg) and episodic(cfg):
        raise RewardlabError(f"{driven(cfg)[0]} drives the policy itself and {episodic(cfg)[0]} is driven by "
                             "rewardlab: train on one and evaluate the other in separate runs")
    if cfg.tools != "none" and 0 < cfg.max_total_tokens < cfg.max_new_tokens:
        raise RewardlabError(
            f"--max-total-tokens ({cfg.max_total_tokens}) must be >= --max-new-tokens ({cfg.max_new_tokens})")
    _choice("dtype", cfg.dtype, DTYPES)
    positive = ("steps", "prompts_per_step", "group_size", "epochs", "micro_batch_size", "max_new_tokens",
                "rollout_batch_size", "max_gen_batches", "save_every")
    for name in positive:
        if getattr(cfg, name) < 1:
            raise RewardlabError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    if cfg.async_steps < 0 or (cfg.max_staleness is not None and cfg.max_staleness < 0):
        raise RewardlabError("--async-steps and --max-staleness must be >= 0")
    if cfg.lr <= 0:
        raise RewardlabError(f"--lr must be > 0, got {cfg.lr}")
    if cfg.temperature <= 0:
        raise RewardlabError("--temperature must be > 0 (training needs sampled completions)")
    if not 0 < cfg.vllm_gpu_memory_utilization <= 1:
        raise RewardlabError(f"--vllm-gpu-memory-utilization must be in (0, 1], got {cfg.vllm_gpu_memory_utilization}")
    if cfg.train_top_layers < 0 or cfg.warmup_steps < 0 or cfg.keep_checkpoints < 0:
        raise RewardlabError("--train-top-layers, --warmup-steps and --keep-checkpoints must be >= 0")
    if cfg.lora_rank < 0 or cfg.lora_alpha <= 0 or not 0 <= cfg.lora_dropout < 1:
        raise RewardlabError("--lora-rank must be >= 0, --lora-alpha > 0 and --lora-dropout in [0, 1)")
    if cfg.overlong_cache is not None and not 0 < cfg.overlong_cache < cfg.max_new_tokens:
        raise RewardlabError(
            f"--overlong-cache must be between 1 and max_new_tokens-1 ({cfg.max_new_tokens - 1}), "
            f"got {cfg.overlong_cache}"
        )
    if cfg.eval_every < 0 or cfg.eval_samples < 1 or cfg.eval_temperature < 0 or cfg.eval_ngram < 1 or (
            cfg.eval_max_new_tokens is not None and cfg.eval_max_new_tokens < 1):
        raise RewardlabError("--eval-every must be >= 0, --eval-samples, --eval-ngram and --eval-max-new-tokens >= 1, "
                             "--eval-temperature >= 0")
    if cfg.eval_every and not eval_suite_names(cfg.eval_suite):
        raise RewardlabError("--eval-every needs --eval-suite (e.g. --eval-suite gsm8k)")
    if cfg.eval_every and cfg.feedback != "none":
        raise RewardlabError("--eval-every evaluates the policy's own answers; it is not wired with --feedback")
    if cfg.eval_samples > 1 and cfg.eval_temperature == 0:
        raise RewardlabError("--eval-samples > 1 needs --eval-temperature > 0 (greedy answers are all the same)")
    if cfg.threads is not None and cfg.threads < 1:
        raise RewardlabError(f"--threads must be >= 1, got {cfg.threads}")
    check_device_spelling(cfg.device)
    resolve_algo(cfg)  # every algorithm field, checked once, by algos.Algo.check


def episodic(cfg: TrainConfig) -> list[str]:
    """The multi-turn environments among the run's task and ``--eval-suite`` (their episodes need the episode
    engine)."""
    return [name for name in [cfg.task, *eval_suite_names(cfg.eval_suite)] if envs.episode_opener(name) is not None]


def driven(cfg: TrainConfig) -> list[str]:
    """The environments among the run's task and ``--eval-suite`` that drive the policy themselves (verifiers:
    their episodes run against the policy endpoint)."""
    return [name for name in [cfg.task, *eval_suite_names(cfg.eval_suite)] if envs.driver(name) is not None]


def eval_suite_names(spec: str | None) -> list[str]:
    """``--eval-suite "gsm8k, math500"`` -> ``["gsm8k", "math500"]``; each a task name (``arith:LEVEL``), a
    ``.jsonl`` file or an environment (:func:`rewardlab.envs.split_names`: a comma in its options stays there)."""
    names = list(dict.fromkeys(envs.split_names(spec or "")))
    for name in names:
        if envs.is_env(name):
            envs.spec_of(name)
        elif name.split(":")[0] not in tasks.TASKS and not name.endswith(".jsonl"):
            raise RewardlabError(f"--eval-suite: unknown benchmark {name!r}; choose from {envs.task_names()}")
    return names


ASYNC_CORRECTION = "decoupled_token_is"
"""The rollout correction ``--async-steps k >= 1`` uses when ``--correction`` is not given (``--correction
disabled`` turns it off): token-level truncated IS, pi_old / pi_engine capped at 2. The mismatch study
(``bench/async_mismatch.py``, README "Asynchronous training") found it the only preset whose learning gain
was never below no correction at k = 1 and 2, while sequence-level IS lost 0.06 at k = 2 and bypass mode
0.10-0.21; its lead over no correction is inside the seeds' spread."""


def resolve_algo(cfg: TrainConfig) -> Algo:
    """The algorithm in force: preset ``cfg.algo`` with every non-None algorithm field of ``cfg``
    applied (``overlong_weight`` as its shorthand), ``overlong_cache`` resolved to tokens, and
    :data:`ASYNC_CORRECTION` for an async run without a correction of its own (where the algorithm takes one)."""
    overrides = {name: getattr(cfg, name) for name in ALGO_FIELDS if getattr(cfg, name) is not None}
    if cfg.overlong_weight is not None:
        overrides["overlong"] = cfg.overlong_weight > 0
        if cfg.overlong_weight > 0:
            overrides["overlong_factor"] = cfg.overlong_weight
    if overrides.get("overlong_cache") is None:
        overrides["overlong_cache"] = max(1, cfg.max_new_tokens // 4)
    if cfg.async_steps > 0 and overrides.get("correction") is None \
            and getattr(algos.PRESETS.get(cfg.algo), "correction", None) is None:
        try:  # where the algorithm takes a correction at all (DPO's pairwise loss takes none)
            return algos.get(cfg.algo, **{**overrides, "correction": ASYNC_CORRECTION})
        except algos.AlgoError:
            pass
    return algos.get(cfg.algo, **overrides)


def to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as a plain dict (YAML-safe)."""
    return dataclasses.asdict(cfg)


__all__ = [
    "ALGO_FIELDS", "TrainConfig", "build_config", "field_docs",
    "parse_overrides", "resolve_algo", "ASYNC_CORRECTION", "to_dict", "judge_of", "tools_of", "total_token_budget",
    "validate", "eval_suite_names",
]
