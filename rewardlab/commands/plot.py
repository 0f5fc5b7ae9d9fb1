"""``rewardlab plot RUN_DIR``: draw reward, length, clip-fraction and KL PNGs of a training run, and
with ``--eval-every`` evals, reward and held-out accuracy on one chart (``plots/reward_eval.png``)."""

from __future__ import annotations

import click


@click.command("plot")
@click.argument("run_dir", type=click.Path(file_okay=False))
def plot(run_dir: str) -> None:
    """Draw the PNG plots of RUN_DIR into RUN_DIR/plots."""
    from rewardlab.plots import plot_run

    for path in plot_run(run_dir):
        click.echo(str(path))
