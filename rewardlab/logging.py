"""Metric sinks and the training progress display.

``metrics.jsonl`` is always written (one JSON object per step, flushed line by line, so a killed run
keeps every finished step). TensorBoard and Weights & Biases are used only when asked for *and*
installed; asking for one that is missing is a one-line error, not a crash mid-run. The progress bar
(tqdm) shows step, reward, response length, clip fraction and the ETA.

    from rewardlab.logging import MetricsLogger
    log = MetricsLogger(run_dir, total_steps=20)
    log.log(step, {"reward/mean": 0.4, ...})
    log.close()
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from rewardlab.errors import RewardlabError


def _clean(value: Any) -> Any:
    """JSON-safe scalar: tensors and numpy numbers become floats, NaN/inf become None."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete JSON lines of a file (a torn last line from a killed process is skipped)."""
    p = Path(path)
    if not p.is_file():
        return []
    rows = []
    for line in p.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def truncate_jsonl(path: str | os.PathLike, max_step: int) -> None:
    """Keep only rows with ``step <= max_step`` (drops what a run logged after its last checkpoint)."""
    p = Path(path)
    if not p.is_file():
        return
    keep = [r for r in read_jsonl(p) if int(r.get("step", 0)) <= max_step]
    tmp = p.with_suffix(p.suffix + ".tmp")
    with open(tmp, "w") as f:
        for r in keep:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, p)


class JsonlWriter:
    """Append JSON lines to a file, flushed after every write."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a")

    def write(self, row: dict[str, Any]) -> None:
        self._f.write(json.dumps(row, default=str) + "\n")
        self._f.flush()

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        self._f.write("".join(json.dumps(r, default=str) + "\n" for r in rows))
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class MetricsLogger:
    """metrics.jsonl plus optional TensorBoard / W&B sinks and a tqdm progress bar (main rank only)."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        total_steps: int,
        start_step: int = 0,
        enabled: bool = True,
        progress: bool = True,
        tensorboard: bool = False,
        wandb: bool = False,
        config: dict[str, Any] | None = None,
    ):
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self._jsonl = JsonlWriter(self.run_dir / "metrics.jsonl") if enabled else None
        self._tb = None
        self._wandb = None
        self._bar = None
        if not enabled:
            return
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise RewardlabError("--tensorboard needs the tensorboard package: pip install tensorboard") from None
            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        if wandb:
            try:
                import wandb as wandb_mod
            except ImportError:
                raise RewardlabError("--wandb needs the wandb package: pip install wandb") from None
            self._wandb = wandb_mod.init(
                project=os.environ.get("WANDB_PROJECT", "rewardlab"),
                name=self.run_dir.name,
                dir=str(self.run_dir),
                config=config or {},
                resume="allow",
            )
        if progress:
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step",
                             dynamic_ncols=True, smoothing=0.3)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Record one step's metrics in every sink and advance the progress bar."""
        if not self.enabled:
            return
        row = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        assert self._jsonl is not None
        self._jsonl.write(row)
        numeric = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and k != "step"}
        if self._tb is not None:
            for k, v in numeric.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)
        if self._bar is not None:
            self._bar.set_postfix_str(progress_text(row), refresh=False)
            self._bar.update(1)

    def message(self, text: str) -> None:
        """Print a line without breaking the progress bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def progress_text(row: dict[str, Any]) -> str:
    """The compact per-step summary shown next to the bar (reward, length, clip fraction, speed).

    When DAPO dynamic sampling generated more than it trained on, the cost is shown too:
    ``kept 24/96 in 3 rounds`` (``completions/kept`` of ``completions/generated``, ``num_gen_batches``),
    with ``budget spent`` when the round budget ran out first and ``SKIPPED`` for a step without update.
    """

    def fmt(key: str, label: str, spec: str) -> str | None:
        v = row.get(key)
        return None if v is None else f"{label} {v:{spec}}"

    parts = [
        "SKIPPED" if row.get("skipped") else None,
        fmt("reward/mean", "reward", ".3f"),
        fmt("response_len/mean", "len", ".1f"),
        fmt("clip_frac", "clip", ".3f"),
        fmt("tokens/s", "tok/s", ".0f"),
    ]
    gen, kept, rounds = row.get("completions/generated"), row.get("completions/kept"), row.get("num_gen_batches")
    if gen is not None and kept is not None and (kept != gen or (rounds or 1) > 1):
        cost = f"kept {kept}/{gen} in {rounds} round{'s' if rounds != 1 else ''}"
        parts.append(cost + (" (budget spent)" if row.get("gen_budget_exhausted") else ""))
    return " | ".join(p for p in parts if p)


__all__ = ["JsonlWriter", "MetricsLogger", "progress_text", "read_jsonl", "truncate_jsonl"]
