"""The ``rewardlab`` command line.

Subcommands live in ``rewardlab/commands/<name>.py`` and are imported only when used, so that
``rewardlab reward math ...`` starts in a fraction of a second and never imports torch.

Errors: a :class:`~rewardlab.errors.RewardlabError` or a click usage error prints one line and exits
non-zero; any other exception prints one line too, unless ``--debug`` (or ``REWARDLAB_DEBUG=1``)
asks for the traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

from rewardlab import __version__
from rewardlab.errors import RewardlabError

# name -> (module, attribute, one-line help). A command whose module is not present is not listed.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "train": ("rewardlab.commands.train", "train", "Train a causal LM with an RL algorithm preset (--algo)."),
    "eval": ("rewardlab.commands.eval", "eval_cmd", "Evaluate a model or checkpoint on GSM8K, MATH(-500), HumanEval."),
    "envs": ("rewardlab.commands.envs", "envs", "List the environments train and eval load (--env KIND:NAME)."),
    "plot": ("rewardlab.commands.plot", "plot", "Draw the PNG plots of a run directory."),
    "reward": ("rewardlab.commands.reward", "reward", "Score completions with a reward and explain the score."),
    "sandbox": ("rewardlab.commands.sandbox", "sandbox", "Run code in the isolation sandbox."),
    "serve": ("rewardlab.commands.serve", "serve", "Serve rewards over HTTP (OpenRLHF remote reward protocol)."),
    "serve-policy": ("rewardlab.commands.serve_policy", "serve_policy",
                     "Serve a model over an OpenAI-compatible endpoint that returns token ids and log-probs."),
}

_debug = os.environ.get("REWARDLAB_DEBUG", "") not in ("", "0")


def is_available(name: str) -> bool:
    return importlib.util.find_spec(COMMANDS[name][0]) is not None


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if is_available(name)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not is_available(name):
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rewardlab")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """rewardlab: verifiable rewards, a compact RL loop and an honest eval suite."""
    global _debug
    _debug = _debug or debug


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn every failure into one line and a non-zero exit."""
    args = sys.argv[1:] if argv is None else argv
    global _debug
    _debug = _debug or "--debug" in args
    try:
        rc = cli.main(args=args, prog_name="rewardlab", standalone_mode=False)
        if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
            sys.exit(rc)  # without standalone mode click returns a command's click.exceptions.Exit code
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        if isinstance(e, click.exceptions.NoArgsIsHelpError) or _debug:
            e.show()  # a bare group prints its help; --debug keeps click's full usage block
        else:
            where = e.ctx.command_path if e.ctx is not None else "rewardlab"
            click.echo(f"error: {e.format_message()} (see '{where} --help')", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        sys.exit(130)
    except RewardlabError as e:
        if _debug:
            raise
        click.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - the last line of defence against a traceback
        if _debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        click.echo(f"error: {type(e).__name__}: {msg} (rerun with --debug for the traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
