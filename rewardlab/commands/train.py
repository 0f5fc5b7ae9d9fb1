"""``rewardlab train``: an RL algorithm preset (``--algo``, any of ``rewardlab.algos.PRESETS``) on a causal LM
(the loop: rewardlab/train/loop.py).

    rewardlab train --algo gspo                                 # embedded default, CPU, offline
    rewardlab train --algo dapo --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k --lr 1e-6
    rewardlab train --config run.yaml --steps 50                # YAML file, then overrides

Every field of :class:`rewardlab.train.TrainConfig` is a ``--key value`` option (listed by
``--help``; the algorithm fields come from ``rewardlab.algos.Algo``). Rerunning the same command
with the same ``--output-dir`` resumes; a second run on a directory in use is refused. Ctrl-C
finishes the step, saves a checkpoint and exits 130 (SIGTERM: 143); a second Ctrl-C aborts without
saving. ``--eval-before-after gsm8k,math500`` is composed here: the eval suite runs on the base
model once the trainer is set up (a fresh run only) and on the last checkpoint after training.
"""

from __future__ import annotations

from pathlib import Path

import click

from rewardlab.envs import split_names
from rewardlab.errors import RewardlabError
from rewardlab.eval import EvalConfig, run_eval
from rewardlab.train import Interrupted, TrainConfig, build_config, parse_overrides, set_threads
from rewardlab.train import train as run_training
from rewardlab.train.checkpoint import checkpoint_dir, is_adapter_checkpoint
from rewardlab.train.config import field_docs


def _epilog() -> str:
    defaults = TrainConfig()
    lines = ["\b", "All settings (--key value, or key: value in --config YAML):"]
    for name, doc in field_docs().items():
        default = getattr(defaults, name)
        shown = repr(default) if isinstance(default, str) and "\n" in default else default  # one line
        lines.append(f"  --{name.replace('_', '-'):<24} {doc} [default: {shown}]")
    return "\n".join(lines)


@click.command(
    "train",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    epilog=_epilog(),
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML file of settings.")
@click.option("--algo", help=f"{field_docs()['algo']} (default {TrainConfig().algo}).")
@click.option("--model", help="HF hub id or local folder (default: embedded SmolLM2-135M-Instruct).")
@click.option("--task", help=f"{field_docs()['task']} (default {TrainConfig().task}).")
@click.option("--env", help="An environment as the task: KIND:NAME[?key=value&...] (rewardlab envs list); the same "
                            "setting as --task.")
@click.option("--steps", type=int, help="Training steps.")
@click.option("--output-dir", help="Run directory (rerun the same command to resume).")
@click.pass_context
def train(ctx: click.Context, config_path: str | None, algo: str | None, model: str | None, task: str | None,
          env: str | None, steps: int | None, output_dir: str | None) -> None:
    """Train a causal LM with an RL algorithm preset (--algo) on a task's rewards."""
    if env is not None and task is not None:
        raise RewardlabError("--env and --task name the same setting; give one")
    task = env if env is not None else task
    overrides: dict[str, object] = {}
    for key, value in (("algo", algo), ("model", model), ("task", task), ("steps", steps), ("output_dir", output_dir)):
        if value is not None:
            overrides[key] = value
    args = [a for a in ctx.args if a != "--debug"]
    overrides.update(parse_overrides(args))
    cfg = build_config(config_path, overrides)
    set_threads(cfg.threads)  # before torch does any work
    started: list[Path] = []  # the main rank's run directory, once training has started

    def on_start(run_dir: Path, start_step: int) -> None:
        started.append(run_dir)
        if cfg.eval_before_after and start_step == 0:
            _eval(cfg, run_dir / "eval" / "before", cfg.model or "default")

    try:
        run_dir = run_training(cfg, on_start=on_start)
    except RewardlabError:
        raise
    except Interrupted as e:  # Ctrl-C / SIGTERM after the step and its checkpoint: 130 / 143
        click.echo(f"interrupted: {e}", err=True)
        raise SystemExit(e.exit_code) from None
    except KeyboardInterrupt:
        raise click.exceptions.Abort() from None
    if cfg.eval_before_after and started:
        ckpt = checkpoint_dir(run_dir, cfg.steps)
        if is_adapter_checkpoint(ckpt):  # LoRA: evaluate the merged weights saved with the last checkpoint
            ckpt = ckpt / "merged"
        _eval(cfg, run_dir / "eval" / "after", str(ckpt))


def _eval(cfg: TrainConfig, out_dir: Path, model_ref: str) -> None:
    """Run the eval suite of ``--eval-before-after`` on ``model_ref`` into ``out_dir``."""
    suite = split_names(str(cfg.eval_before_after))
    print(f"eval {','.join(suite)} on {model_ref} -> {out_dir}", flush=True)
    run_eval(EvalConfig(suite=suite, output=str(out_dir), limit=cfg.eval_limit), None if model_ref == "default"
             else model_ref)
