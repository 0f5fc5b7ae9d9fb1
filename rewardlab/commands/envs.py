"""``rewardlab envs``: the environments ``train --env`` and ``eval --env`` load.

    rewardlab envs list                      # every kind, and what each offers with its options
    rewardlab envs list reasoning_gym --json
"""

from __future__ import annotations

import json

import click

from rewardlab.envs import KINDS
from rewardlab.errors import RewardlabError


@click.group("envs")
def envs() -> None:
    """Environments: KIND:NAME[?key=value&...] specs for train --env and eval --env."""


@envs.command("list")
@click.argument("kind", required=False, type=click.Choice(list(KINDS)))
@click.option("--json", "as_json", is_flag=True, help="Print name -> options (with defaults) as JSON.")
def list_cmd(kind: str | None, as_json: bool) -> None:
    """List the environments of KIND (default: every kind) and their options."""
    out: dict[str, dict] = {}
    for name, k in KINDS.items():
        if kind and name != kind:
            continue
        try:
            out[name] = k.catalogue()
        except RewardlabError as e:
            if kind:
                raise
            out[name] = {}
            click.echo(f"{name}: {e}", err=True)
    if as_json:
        click.echo(json.dumps(out, indent=2, default=str))
        return
    for name, entries in out.items():
        pkg = KINDS[name].package
        click.echo(f"{name}: {KINDS[name].summary} ({len(entries)}" + (f"; package {pkg})" if pkg else ")"))
        for entry, options in entries.items():
            opts = ", ".join(f"{k}={v}" for k, v in options.items())
            click.echo(f"  {name}:{entry}" + (f"  [{opts}]" if opts else ""))
