"""Atomic checkpoints and resume.

A checkpoint is ``<run>/checkpoints/step-NNNNNN/``: an HF ``save_pretrained`` folder (transformers
and vLLM load it directly) plus ``trainer_state.pt`` with the optimizer, scheduler, RNG states, data
position and step. It is written into a hidden temporary folder beside it, flushed to disk, marked
complete, and only then renamed into place; a rename within one file system is atomic, so a process
killed at any moment (even SIGKILL) leaves either the previous checkpoints alone or a new complete
one, never a half-written folder that resume would pick up. Leftover temporary folders are removed
on the next start.

    from rewardlab.train.checkpoint import latest_checkpoint, save_checkpoint
    save_checkpoint(run_dir, step, model, tokenizer, trainer_state)
    ckpt = latest_checkpoint(run_dir)            # None, or the newest *complete* step folder
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from rewardlab.errors import RewardlabError

STATE_FILE = "trainer_state.pt"
COMPLETE_MARKER = "COMPLETE"
_STEP_RE = re.compile(r"^step-(\d{6,})$")


def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """The folder of step ``step``'s checkpoint."""
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def is_complete(path: str | os.PathLike) -> bool:
    """True when ``path`` is a finished checkpoint (marker, trainer state and a config present)."""
    p = Path(path)
    return (p / COMPLETE_MARKER).is_file() and (p / STATE_FILE).is_file() and (p / "config.json").is_file()


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first, as ``(step, path)``; partial ones are ignored."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _STEP_RE.match(child.name)
        if m and child.is_dir() and is_complete(child):
            found.append((int(m.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def clean_partial(run_dir: str | os.PathLike) -> list[Path]:
    """Remove temporary folders left by a save that was killed; return what was removed."""
    root = Path(run_dir) / "checkpoints"
    removed = []
    if root.is_dir():
        for child in root.iterdir():
            if child.name.startswith(".tmp-") or (
                _STEP_RE.match(child.name) and child.is_dir() and not is_complete(child)
            ):
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child)
    return removed


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch (and CUDA) RNG states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model: Any,
    tokenizer: Any,
    trainer_state: dict[str, Any],
    *,
    state_dict: dict[str, Any] | None = None,
    keep: int = 0,
) -> Path:
    """Write step ``step``'s checkpoint atomically and return its folder.
    ``trainer_state`` is pickled with ``torch.save`` (optimizer and scheduler state dicts, RNG
    states, data position, step...). ``state_dict`` overrides the weights to save (a gathered full
    state dict under FSDP). ``keep > 0`` deletes all but the newest ``keep`` complete checkpoints.
    """
    final = checkpoint_dir(run_dir, step)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    model.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    torch.save(trainer_state, tmp / STATE_FILE)
    _fsync_tree(tmp)
    (tmp / COMPLETE_MARKER).write_text(f"step {step}\n")
    _fsync_tree(tmp)
    if final.exists():  # re-saving the same step (e.g. Ctrl-C right after a periodic save)
        old = root / f".tmp-old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    if keep > 0:
        for _s, path in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(path, ignore_errors=True)
    return final


def load_trainer_state(ckpt: str | os.PathLike) -> dict[str, Any]:
    """Read ``trainer_state.pt`` of a complete checkpoint; refuse a partial one."""
    p = Path(ckpt)
    if not is_complete(p):
        raise RewardlabError(f"{p} is not a complete checkpoint (no {COMPLETE_MARKER} marker); it cannot be resumed")
    return torch.load(p / STATE_FILE, map_location="cpu", weights_only=False)


def load_weights(model: Any, ckpt: str | os.PathLike) -> None:
    """Load a checkpoint's safetensors weights into ``model`` in place (any sharding of the files)."""
    p = Path(ckpt)
    index = p / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(p / name)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied weights (lm_head = embed_tokens) are saved once; anything else missing is a real mismatch.
    tied = {k for k in missing if k.endswith("lm_head.weight")}
    if set(missing) - tied or unexpected:
        raise RewardlabError(
            f"checkpoint {p} does not match the model (missing {sorted(set(missing) - tied)[:3]},"
            f" unexpected {sorted(unexpected)[:3]}); resume with the same --model"
        )
    if tied and hasattr(model, "tie_weights"):
        model.tie_weights()


__all__ = [
    "STATE_FILE", "checkpoint_dir", "clean_partial", "is_complete", "latest_checkpoint", "list_checkpoints",
    "load_trainer_state", "load_weights", "rng_state", "save_checkpoint", "set_rng_state",
]
