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
    save_step(run, step)                         # the training loop's stage: gathers every rank's state, saves

LoRA (a PEFT model, :mod:`rewardlab.train.lora`): the checkpoint holds the adapter only, in PEFT's
format (``adapter_config.json`` + ``adapter_model.safetensors``, which ``PeftModel.from_pretrained``
loads onto the base model), plus the tokenizer and ``trainer_state.pt``; ``merged=True`` also writes
merged HF weights to ``step-NNNNNN/merged/`` (a plain ``from_pretrained`` / vLLM folder; a subfolder,
because transformers would read a folder holding ``adapter_config.json`` as an adapter).
:func:`load_weights` restores the adapter into a PEFT model built with the same LoRA settings.

Retention: ``keep=K`` keeps the K newest complete checkpoints. An older one is first renamed to a
hidden ``.tmp-del-`` folder (atomic) and only then deleted, so a process killed while deleting
leaves nothing that looks complete; the checkpoint just written and partial folders are never
touched (:func:`clean_partial` removes leftovers on the next start). :func:`checkpoint_bytes`
reports a checkpoint's size on disk.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file

from rewardlab.errors import RewardlabError
from rewardlab.train import distributed
from rewardlab.train.config import to_dict
from rewardlab.train.lora import (
    ADAPTER_CONFIG,
    is_lora,
    load_adapter_weights,
    save_adapter,
    save_merged,
)

if TYPE_CHECKING:
    from rewardlab.train.state import Run

STATE_FILE = "trainer_state.pt"
COMPLETE_MARKER = "COMPLETE"
MERGED_DIR = "merged"
"""Subfolder of a LoRA checkpoint with merged HF weights (``save_checkpoint(..., merged=True)``)."""
_STEP_RE = re.compile(r"^step-(\d{6,})$")


def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """The folder of step ``step``'s checkpoint."""
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def is_complete(path: str | os.PathLike) -> bool:
    """True when ``path`` is a finished checkpoint (marker, trainer state and a model or adapter config)."""
    p = Path(path)
    return ((p / COMPLETE_MARKER).is_file() and (p / STATE_FILE).is_file()
            and ((p / "config.json").is_file() or (p / ADAPTER_CONFIG).is_file()))


def is_adapter_checkpoint(path: str | os.PathLike) -> bool:
    """True when the checkpoint holds a LoRA adapter (not full weights)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def checkpoint_bytes(folder: str | os.PathLike) -> int:
    """Bytes on disk of the files under ``folder`` (a checkpoint; symlinks are not followed)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


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
    merged: bool = False,
) -> Path:
    """Write step ``step``'s checkpoint atomically and return its folder.
    ``trainer_state`` is pickled with ``torch.save`` (optimizer and scheduler state dicts, RNG
    states, data position, step...). ``state_dict`` overrides the weights to save (a gathered full
    state dict under FSDP). ``keep > 0`` deletes all but the newest ``keep`` complete checkpoints
    (:func:`prune_checkpoints`). A PEFT (LoRA) model saves its adapter only; ``merged=True`` adds
    merged HF weights in ``merged/`` (ignored for a plain model, whose weights are HF weights already).
    """
    final = checkpoint_dir(run_dir, step)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    if is_lora(model):
        save_adapter(model, tmp, state_dict=state_dict)
        if merged:
            save_merged(model, tokenizer, tmp / MERGED_DIR, state_dict=state_dict)
    else:
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
        prune_checkpoints(run_dir, keep, protect=final)
    return final


def prune_checkpoints(run_dir: str | os.PathLike, keep: int, *, protect: str | os.PathLike | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints; return the folders deleted.

    ``protect`` (the checkpoint just written) is always kept too (one more than ``keep`` only if a
    higher step is on disk, which a resumed run never has). Partial
    folders are not touched. Each folder is renamed to a hidden ``.tmp-del-`` name first (atomic),
    so a kill during the deletion leaves no half-deleted folder that still looks complete."""
    if keep <= 0:
        return []
    found = [p for _s, p in list_checkpoints(run_dir)]
    keep_set = set(found[-keep:])  # the newest by step, so never the newest complete one
    if protect is not None:
        keep_set.add(Path(protect))
    removed = []
    for path in found:
        if path in keep_set:
            continue
        doomed = path.parent / f".tmp-del-{path.name}-{os.getpid()}"
        os.replace(path, doomed)
        _fsync_dir(path.parent)
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(path)
    return removed


def load_trainer_state(ckpt: str | os.PathLike) -> dict[str, Any]:
    """Read ``trainer_state.pt`` of a complete checkpoint; refuse a partial one."""
    p = Path(ckpt)
    if not is_complete(p):
        raise RewardlabError(f"{p} is not a complete checkpoint (no {COMPLETE_MARKER} marker); it cannot be resumed")
    return torch.load(p / STATE_FILE, map_location="cpu", weights_only=False)


def load_weights(model: Any, ckpt: str | os.PathLike) -> None:
    """Load a checkpoint's weights into ``model`` in place: full safetensors weights (any sharding
    of the files) into a plain model, or a LoRA adapter into a PEFT model made with the same LoRA
    settings (an exact resume). A mismatch between the two kinds is an error, not a silent load."""
    p = Path(ckpt)
    if is_adapter_checkpoint(p):
        if not is_lora(model):
            raise RewardlabError(f"checkpoint {p} holds a LoRA adapter, not full weights; resume with the same "
                                 "--lora-rank / --lora-alpha / --lora-targets (apply_lora before load_weights)")
        load_adapter_weights(model, p)
        return
    if is_lora(model):
        raise RewardlabError(f"checkpoint {p} holds full weights but the model has LoRA adapters; resume without "
                             "--lora-rank, or pick a new --output-dir")
    index = p / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file()
             else ["model.safetensors"])
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


def save_step(run: Run, step: int) -> None:
    """The loop's checkpoint stage: save step ``step``. The three gathers are collective: every rank
    runs them, rank 0 writes the files."""
    full = distributed.full_state_dict(run.model) if run.dist.world_size > 1 else None
    optim_state = distributed.optimizer_state_dict(run.model, run.optimizer)  # unsharded, keyed by name
    rngs = distributed.gather_objects(rng_state())  # one per rank: ranks draw different streams
    trainer_state = {
        "step": step, "optimizer": optim_state, "scheduler": run.scheduler.state_dict(), "rng": rngs[0],
        "rng_per_rank": rngs, "data": run.stream.state(), "config": to_dict(run.cfg),
        "world_size": run.dist.world_size,
    }
    if run.trainer.critic is not None:  # PPO: the value head (and a separate critic's trunk) with its optimizer
        trainer_state["critic"] = run.trainer.critic.model.state_dict_to_save()
        trainer_state["critic_optimizer"] = run.trainer.critic.optimizer.state_dict()
    trainer_state["options"] = {name: obj.state_dict() for name, obj in run.trainer.options.states().items()}
    if run.main:
        path = save_checkpoint(run.run_dir, step, run.model, run.tok, trainer_state, state_dict=full,
                               keep=run.cfg.keep_checkpoints,
                               merged=is_lora(run.model) and (run.cfg.save_merged or step == run.cfg.steps))
        run.log.message(f"checkpoint {path.name}: {checkpoint_bytes(path) / 2**20:.1f} MiB")
    distributed.barrier()


__all__ = [ "MERGED_DIR", "STATE_FILE", "checkpoint_bytes", "checkpoint_dir", "clean_partial",
    "is_adapter_checkpoint", "is_complete", "latest_checkpoint", "list_checkpoints", "load_trainer_state",
    "load_weights", "prune_checkpoints", "rng_state", "save_checkpoint", "save_step", "set_rng_state",
]
