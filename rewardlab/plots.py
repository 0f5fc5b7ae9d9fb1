"""PNG plots of a training run: reward, response length, clip fraction and KL against step.

Reads ``<run>/metrics.jsonl`` and writes ``<run>/plots/*.png`` (one file per panel plus
``summary.png`` with all four). A run trained with ``--eval-every`` also gets ``reward_eval.png``:
the training reward (left axis) and each held-out ``eval/<bench>/accuracy`` (right axis, 0-1) on
one chart, so a reward that rises while accuracy falls is seen at once. Called at the end of
``rewardlab train`` and on demand::

    rewardlab plot runs/gspo-arith
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.logging import read_jsonl

# panel file name -> (title, [(metric, label), ...])
PANELS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "reward": ("Reward", [("reward/mean", "mean reward")]),
    "length": ("Response length (tokens)", [("response_len/mean", "mean"), ("response_len/max", "max")]),
    "clip_frac": ("Clip fraction", [("clip_frac", "clip_frac"), ("clip_frac_low", "low"), ("clip_frac_high", "high")]),
    "kl": ("KL", [("kl_ref", "kl_ref (to reference)"), ("approx_kl_old", "approx_kl_old (to rollout policy)")]),
}


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def eval_benchmarks(rows: list[dict[str, Any]]) -> list[str]:
    """The benchmarks with an ``eval/<bench>/accuracy`` in ``rows``, in first-seen order."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            if k.startswith("eval/") and k.endswith("/accuracy"):
                seen.setdefault(k[len("eval/") : -len("/accuracy")], None)
    return list(seen)


def draw_reward_eval(ax: Any, rows: list[dict[str, Any]]) -> None:
    """``reward/mean`` on ``ax`` and every benchmark's eval accuracy (clean accuracy dashed) on a twin axis."""
    xs, ys = _series(rows, "reward/mean")
    lines = ax.plot(xs, ys, color="tab:blue", marker="o", markersize=2.5, linewidth=1.2, label="reward/mean (train)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward/mean")
    ax.grid(alpha=0.3)
    acc = ax.twinx()
    colors = ["tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:olive"]
    for i, bench in enumerate(eval_benchmarks(rows)):
        color = colors[i % len(colors)]
        xs, ys = _series(rows, f"eval/{bench}/accuracy")
        lines += acc.plot(xs, ys, color=color, marker="s", markersize=3.5, linewidth=1.5,
                          label=f"eval/{bench}/accuracy")
        xs, ys = _series(rows, f"eval/{bench}/accuracy_clean")
        if xs:
            lines += acc.plot(xs, ys, color=color, linestyle="--", linewidth=1.0, label=f"eval/{bench}/accuracy_clean")
    acc.set_ylim(-0.02, 1.02)
    acc.set_ylabel("held-out accuracy")
    ax.set_title("Training reward and held-out accuracy")
    ax.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="best")


def plot_run(run_dir: str | os.PathLike) -> list[Path]:
    """Draw the plots of ``run_dir`` and return the PNG paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = Path(run_dir)
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise RewardlabError(f"{run} has no metrics.jsonl; pass a run directory written by `rewardlab train`")
    rows = [r for r in read_jsonl(metrics) if "step" in r]
    if not rows:
        raise RewardlabError(f"{metrics} holds no finished steps yet")
    out = run / "plots"
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def draw(ax: Any, title: str, series: list[tuple[str, str]]) -> None:
        drawn = False
        for key, label in series:
            xs, ys = _series(rows, key)
            if xs:
                ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.2, label=label)
                drawn = True
        if key == "reward/mean":
            xs, mean = _series(rows, "reward/mean")
            _, std = _series(rows, "reward/std")
            if len(std) == len(mean) and xs:
                ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                                alpha=0.15, label="± std")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged in this run", ha="center", va="center", transform=ax.transAxes)

    for name, (title, series) in PANELS.items():
        fig, ax = plt.subplots(figsize=(5, 3.2))
        draw(ax, title, series)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4))
    for ax, (title, series) in zip(axes.flat, PANELS.values()):
        draw(ax, title, series)
    fig.suptitle(run.name)
    fig.tight_layout()
    path = out / "summary.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    if eval_benchmarks(rows):  # --eval-every: reward and held-out accuracy on one chart
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        draw_reward_eval(ax, rows)
        fig.tight_layout()
        path = out / "reward_eval.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


__all__ = ["PANELS", "draw_reward_eval", "eval_benchmarks", "plot_run"]
