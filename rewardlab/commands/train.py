"""``rewardlab train``: GRPO / Dr. GRPO / DAPO / GSPO on a causal LM (see rewardlab/train.py).

    rewardlab train --algo gspo                                 # embedded default, CPU, offline
    rewardlab train --algo dapo --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k --lr 1e-6
    rewardlab train --config run.yaml --steps 50                # YAML file, then overrides

Every field of :class:`rewardlab.config.TrainConfig` is a ``--key value`` option (listed by
``--help``). Rerunning the same command with the same ``--output-dir`` resumes; a second run on a
directory in use is refused. Ctrl-C finishes the step, saves a checkpoint and exits 130 (SIGTERM:
143); a second Ctrl-C aborts without saving.
"""

from __future__ import annotations

import click

from rewardlab.errors import RewardlabError


def _epilog() -> str:
    from rewardlab.config import TrainConfig, field_docs

    defaults = TrainConfig()
    lines = ["\b", "All settings (--key value, or key: value in --config YAML):"]
    for name, doc in field_docs().items():
        lines.append(f"  --{name.replace('_', '-'):<24} {doc} [default: {getattr(defaults, name)}]")
    return "\n".join(lines)


@click.command(
    "train",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    epilog=_epilog(),
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML file of settings.")
@click.option("--algo", help="grpo, dr_grpo, dapo or gspo (default gspo).")
@click.option("--model", help="HF hub id or local folder (default: embedded SmolLM2-135M-Instruct).")
@click.option("--task", help="arith (default), gsm8k, math, humaneval.")
@click.option("--steps", type=int, help="Training steps.")
@click.option("--output-dir", help="Run directory (rerun the same command to resume).")
@click.pass_context
def train(ctx: click.Context, config_path: str | None, algo: str | None, model: str | None, task: str | None,
          steps: int | None, output_dir: str | None) -> None:
    """Train a causal LM with GRPO, Dr. GRPO, DAPO or GSPO."""
    from rewardlab.config import build_config, parse_overrides

    overrides: dict[str, object] = {}
    for key, value in (("algo", algo), ("model", model), ("task", task), ("steps", steps), ("output_dir", output_dir)):
        if value is not None:
            overrides[key] = value
    args = [a for a in ctx.args if a != "--debug"]
    overrides.update(parse_overrides(args))
    cfg = build_config(config_path, overrides)
    # The thread count must be fixed before torch starts its pools: set it before importing the loop.
    from rewardlab.train import set_threads

    set_threads(cfg.threads)
    from rewardlab.train import Interrupted, train as run

    try:
        run(cfg)
    except RewardlabError:
        raise
    except Interrupted as e:  # Ctrl-C / SIGTERM after the step and its checkpoint: 130 / 143
        click.echo(f"interrupted: {e}", err=True)
        raise SystemExit(e.exit_code) from None
    except KeyboardInterrupt:
        raise click.exceptions.Abort() from None
