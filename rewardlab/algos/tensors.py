"""Tensor helpers shared by the algorithm modules: compute dtype, step denominators, group indices."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from rewardlab.algos.checks import AlgoError, is_real

Tensor = torch.Tensor
Number = int | float


def compute_dtype(t: Tensor) -> torch.dtype:
    """float64 for float64 inputs, else float32 (low-precision inputs are computed in float32)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def denominator(given: Number | Tensor | None, local: Tensor, name: str) -> Tensor | float:
    """The optimizer step's count ``given`` (checked), or this batch's own ``local`` count (at least 1)."""
    if given is None:
        return local.clamp(min=1)
    if isinstance(given, Tensor):
        return given.to(local.dtype)
    if not is_real(given) or given <= 0:
        raise AlgoError(f"{name} must be > 0 (the optimizer step's total), got {given!r}")
    return float(given)


def as_float_vector(x: Tensor | Sequence[float], name: str) -> tuple[Tensor, torch.dtype]:
    """``(B,)`` values as a tensor, and the dtype to return results in (float32 unless floating given)."""
    if isinstance(x, Tensor):
        t = x.detach()
        out_dtype = t.dtype if t.is_floating_point() else torch.float32
    else:
        t = torch.as_tensor(list(x), dtype=torch.float64)
        out_dtype = torch.float32
    if t.dim() != 1:
        raise AlgoError(f"{name} must be one value per response (B,), got shape {tuple(t.shape)}")
    return t, out_dtype


def group_index(group_ids: Tensor | Sequence[Hashable], size: int, device: torch.device) -> tuple[Tensor, int]:
    """Dense group index ``(B,)`` in 0..G-1 and G, from arbitrary ids."""
    if isinstance(group_ids, Tensor):
        if group_ids.dim() != 1:
            raise AlgoError(f"group_ids must be (B,), got shape {tuple(group_ids.shape)}")
        _, inv = torch.unique(group_ids, return_inverse=True)
        n_groups = int(inv.max()) + 1 if inv.numel() else 0
    else:
        index: dict[Hashable, int] = {}
        inv = torch.tensor([index.setdefault(g, len(index)) for g in group_ids], dtype=torch.long)
        n_groups = len(index)
    if inv.numel() != size:
        raise AlgoError(f"group_ids has {inv.numel()} entries for {size} responses")
    return inv.to(device), n_groups


def check_bt(name: str, t: Tensor, shape: torch.Size | None = None) -> None:
    """A one-line AlgoError unless ``t`` is a (B, T) tensor (of ``shape`` when given)."""
    if not isinstance(t, Tensor) or t.dim() != 2:
        raise AlgoError(f"{name} must be a (B, T) tensor, got {getattr(t, 'shape', type(t).__name__)}")
    if shape is not None and t.shape != shape:
        raise AlgoError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def check_b(name: str, t: Tensor, b: int) -> None:
    """A one-line AlgoError unless ``t`` is a (b,) tensor."""
    if not isinstance(t, Tensor) or t.shape != (b,):
        raise AlgoError(f"{name} must be a ({b},) tensor, got {getattr(t, 'shape', type(t).__name__)}")


def masked(x: Tensor, m: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` in ``dtype`` with padding replaced by 0 (detached)."""
    return torch.where(m, x.detach().to(dtype), torch.zeros((), dtype=dtype, device=m.device))
