"""Multi-process training on ``torchrun``: process group, FSDP2 wrapping, reductions, data split.

One process per GPU (or per CPU "rank" with the gloo backend), any number of nodes. The trainer
calls these functions unconditionally; with one process (plain ``python`` / ``rewardlab train``)
every one of them is a cheap no-op, so the single-process path has no branches.

    info = distributed.init()                     # reads RANK / WORLD_SIZE / LOCAL_RANK
    model = distributed.wrap_model(model, info)   # FSDP2 fully_shard per decoder layer + root
    my_prompts = distributed.shard(prompts, info) # this rank's contiguous block
    n_tokens = distributed.all_reduce_sum(local_tokens)   # loss denominator of the whole step
    ...
    state = distributed.full_state_dict(model)    # collective; rank 0 saves it
    distributed.destroy()

Launch (README section "Scaling out"):

    torchrun --nproc_per_node 8 -m rewardlab train ...                # 8 GPUs, one node
    torchrun --nproc_per_node 2 -m rewardlab train ...                # 2 CPU ranks (gloo)

Conventions the trainer relies on:

- **Gradients are summed across ranks, not averaged.** ``wrap_model`` sets FSDP2's gradient
  divide factor to 1, so the loss on each rank must already be divided by the *global* denominator
  (``all_reduce_sum`` of the local token/sequence counts). Then the summed gradient equals the
  single-process gradient of the same global batch, and the loss does not depend on the number
  of ranks.
- **Every rank runs the same number of forward/backward calls through a wrapped model** (FSDP2
  all-gathers parameters in each forward). Data is split evenly by ``shard``; when a rank may
  drop rows (dynamic sampling), use ``all_reduce_max`` on the micro-batch count and run
  zero-weight micro-batches to match.
- **Checkpoints are world-size independent**: weights through ``full_state_dict`` (rank 0 saves
  an HF folder), optimizer state through ``optimizer_state_dict`` / ``load_optimizer_state_dict``
  (keyed by parameter name, unsharded), never ``optimizer.state_dict()`` of a sharded model,
  which holds only this rank's shard.
- **Generation with a sharded model** runs inside ``with gathered_params(model):``, which
  all-gathers the full parameters once and keeps them unsharded, so each rank can run as many
  ``generate`` forwards as its own sequences need (they stop at EOS at different times).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from rewardlab.errors import RewardlabError

# torch.distributed.checkpoint.state_dict and torch.distributed.fsdp (DTensor ops, sympy: ~0.85 s)
# are imported inside the functions that use them, so importing this module stays cheap.

T = TypeVar("T")
Number = TypeVar("Number", int, float, torch.Tensor)

__all__ = [
    "DistInfo",
    "init",
    "get_info",
    "is_distributed",
    "all_reduce_sum",
    "all_reduce_mean",
    "all_reduce_max",
    "barrier",
    "broadcast_object",
    "gather_objects",
    "wrap_model",
    "gathered_params",
    "clip_grad_norm",
    "full_state_dict",
    "optimizer_state_dict",
    "load_optimizer_state_dict",
    "shard",
    "on_destroy",
    "destroy",
]


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""
    rank: int
    """Global rank, 0..world_size-1."""
    world_size: int
    """Number of processes in the job (1 without torchrun)."""
    local_rank: int
    """Rank on this node; selects the GPU."""
    device: torch.device
    """``cuda:<local_rank>`` when CUDA is available, else ``cpu``."""
    is_main: bool
    """True on global rank 0: the rank that logs, saves checkpoints and writes files."""
    @property
    def backend(self) -> str | None:
        """The process-group backend (``nccl`` / ``gloo``), or None in a single process."""
        return dist.get_backend() if dist.is_available() and dist.is_initialized() else None


_INFO: DistInfo | None = None
_OWN_GROUP = False  # True when init() created the default process group (destroy() ends only that)
_TEARDOWN: list[Callable[[], None]] = []  # run by destroy(), newest first


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise RewardlabError(f"environment variable {name}={value!r} is not an integer") from None


def init(*, backend: str | None = None, timeout_s: float = 1800.0) -> DistInfo:
    """Join the ``torchrun`` job (or describe the single process) and return this rank's DistInfo.
    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (and, through ``env://``, ``MASTER_ADDR`` /
    ``MASTER_PORT``). With ``WORLD_SIZE`` > 1 it initialises the default process group with
    ``nccl`` on CUDA, else ``gloo``; ``backend`` overrides. Idempotent: later calls return the
    same DistInfo.
    """
    global _INFO, _OWN_GROUP
    if _INFO is not None:
        return _INFO
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    if world_size < 1 or not 0 <= rank < world_size:
        raise RewardlabError(f"bad torchrun environment: RANK={rank} WORLD_SIZE={world_size}")
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise RewardlabError(
                f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} GPU(s): "
                "set --nproc_per_node to at most the GPU count"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        if not dist.is_available():
            raise RewardlabError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
        if "MASTER_ADDR" not in os.environ:
            raise RewardlabError(
                "WORLD_SIZE > 1 but MASTER_ADDR is not set: launch with torchrun "
                "(e.g. `torchrun --nproc_per_node 2 -m rewardlab train ...`)"
            )
        backend = backend or ("nccl" if use_cuda else "gloo")
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
            **kwargs,
        )
        _OWN_GROUP = True
    _INFO = DistInfo(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        device=device,
        is_main=rank == 0,
    )
    return _INFO


def get_info() -> DistInfo:
    """The DistInfo of this process (calls ``init()`` the first time)."""
    return _INFO if _INFO is not None else init()


def is_distributed() -> bool:
    """True when a process group with more than one rank is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _comm_device() -> torch.device:
    """Device that collective tensors must live on for the active backend."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _all_reduce(x: Number, op: dist.ReduceOp) -> Number:
    if not is_distributed():
        return x
    if isinstance(x, torch.Tensor):
        buf = x.detach().to(_comm_device(), copy=True)
        dist.all_reduce(buf, op=op)
        return buf.to(x.device)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"all-reduce takes an int, a float or a tensor, not {type(x).__name__}")
    dtype = torch.int64 if isinstance(x, int) else torch.float64
    buf = torch.tensor([x], dtype=dtype, device=_comm_device())
    dist.all_reduce(buf, op=op)
    return type(x)(buf.item())


def all_reduce_sum(x: Number) -> Number:
    """Sum over ranks. Ints stay ints, floats floats; tensors come back as a new tensor (no grad)
    on their own device. Identity in a single process."""
    return _all_reduce(x, dist.ReduceOp.SUM)


def all_reduce_mean(x: Number) -> Number:
    """Mean over ranks (an int input comes back as a float). Identity in a single process."""
    if not is_distributed():
        return x
    world = dist.get_world_size()
    if isinstance(x, torch.Tensor):
        total = _all_reduce(x if x.is_floating_point() else x.double(), dist.ReduceOp.SUM)
        return total / world
    return float(_all_reduce(float(x), dist.ReduceOp.SUM)) / world


def all_reduce_max(x: Number) -> Number:
    """Maximum over ranks (e.g. the micro-batch count every rank must run). Identity in one process."""
    return _all_reduce(x, dist.ReduceOp.MAX)


def barrier() -> None:
    """Wait for every rank. No-op in a single process."""
    if is_distributed():
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s picklable ``obj`` on every rank (the argument is ignored elsewhere)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(obj: T) -> list[T]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank; ``[obj]`` in a single process."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def shard(items: Sequence[T], info: DistInfo | None = None, *, even: bool = True) -> list[T]:
    """This rank's contiguous block of ``items`` (rank r gets block r, in order).
    With ``even=True`` (the default) ``len(items)`` must be divisible by the world size, so every
    rank does the same amount of work (FSDP needs equal forward counts). With ``even=False`` the
    first ``len % world`` ranks get one item more.
    """
    info = info or get_info()
    world, rank = info.world_size, info.rank
    n = len(items)
    if world == 1:
        return list(items)
    if even and n % world:
        raise RewardlabError(
            f"cannot split {n} items evenly across {world} ranks: make the per-step prompt count "
            f"a multiple of the world size ({world})"
        )
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    return list(items[start:stop])


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of an HF causal LM (each becomes one FSDP unit)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names and m is not model]
    if layers:
        return layers
    # Fallback for models without _no_split_modules: the largest nn.ModuleList of blocks.
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def wrap_model(
    model: nn.Module,
    info: DistInfo | None = None,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = torch.float32,
) -> nn.Module:
    """Move ``model`` to this rank's device and, with more than one rank, shard it with FSDP2.
    ``torch.distributed.fsdp.fully_shard`` is applied to each decoder layer and then to the root
    (embeddings, final norm, LM head; tied embeddings stay tied), on a 1-D device mesh over all
    ranks. Works with nccl on GPUs and with gloo on CPU (checked on torch 2.13). Gradients are
    *summed* across ranks (divide factor 1): divide the loss by the global denominator.
    ``param_dtype`` (e.g. ``torch.bfloat16`` on GPU) enables FSDP2 mixed precision: parameters
    are kept in their own dtype for the optimizer and cast for forward/backward. The module is
    modified in place and returned; with one rank it is only moved to the device.
    """
    info = info or get_info()
    model = model.to(info.device)
    if info.world_size == 1:
        return model
    if not dist.is_initialized():
        raise RewardlabError("wrap_model: call distributed.init() under torchrun first")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(info.device.type, (info.world_size,))
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    # Sum, do not average, gradients across ranks. Both setters act on one FSDP unit only, so
    # apply them to every unit; forcing plain SUM avoids PREMUL_SUM, which gloo does not support.
    for unit in _fsdp_modules(model):
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return model


def _fsdp_modules(model: nn.Module) -> list[nn.Module]:
    """The FSDP2 units of ``model``. A module can only be an ``FSDPModule`` once
    ``torch.distributed.fsdp`` has been imported, so without it the answer is ``[]`` (no import)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return []
    return [m for m in model.modules() if isinstance(m, fsdp.FSDPModule)]


@contextlib.contextmanager
def gathered_params(model: nn.Module) -> Iterator[nn.Module]:
    """Keep an FSDP2 model's full parameters on every rank inside the block (collective on entry).
    Inside, forwards need no communication, so ranks may run different numbers of them (HF
    ``generate`` stops at EOS). On exit the parameters are resharded. A plain model passes through.
    Costs one full copy of the parameters per rank while open.
    """
    mods = _fsdp_modules(model)
    if not mods:
        yield model
        return
    for m in mods:
        m.set_reshard_after_forward(False, recurse=False)
    for m in mods:
        m.unshard()
    try:
        yield model
    finally:
        for m in mods:
            m.reshard()
            m.set_reshard_after_forward(True, recurse=False)


def clip_grad_norm(model: nn.Module, max_norm: float) -> float:
    """Clip the global gradient norm (over all ranks' shards) to ``max_norm``; return the norm
    before clipping as a float (identical on every rank)."""
    params = [p for p in model.parameters() if p.grad is not None]
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    return float(total)


def full_state_dict(model: nn.Module, *, cpu: bool = True) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on every rank; collective under FSDP2, so call it on all
    ranks. ``cpu=True`` returns CPU tensors (what ``save_pretrained`` and weight sync want).
    Rank 0 then saves with ``model.save_pretrained(dir, state_dict=sd)``."""
    out: dict[str, torch.Tensor] = {}
    gathered: dict[int, torch.Tensor] = {}  # id(parameter) -> full tensor: tied weights stay tied
    for name, value in model.state_dict(keep_vars=True).items():
        full = gathered.get(id(value))
        if full is None:
            full = value.full_tensor() if hasattr(value, "full_tensor") else value
            full = full.detach()
            full = full.cpu() if cpu else full
            gathered[id(value)] = full
        out[name] = full
    return out


def optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state keyed by parameter names (not ids) and unsharded, so a checkpoint
    resumes on any number of ranks. Collective under FSDP; complete on rank 0 (other ranks may get
    an empty dict), on CPU."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )


def load_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a state from :func:`optimizer_state_dict` (saved with any world size). Collective under
    FSDP: rank 0's ``state`` is broadcast and sharded, other ranks may pass ``{}``. Call it before
    training starts: a fresh optimizer's gradients are cleared first (torch initialises the
    optimizer state with one zero-gradient step)."""

    if not optimizer.state:
        optimizer.zero_grad(set_to_none=True)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    if _fsdp_modules(model):
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    else:
        options = StateDictOptions(full_state_dict=False)
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state, options=options)


def on_destroy(fn: Callable[[], None]) -> None:
    """Run ``fn`` at the start of :func:`destroy`, before the process group goes away (an
    in-process vLLM engine registers its shutdown here: it tears down its own process groups)."""
    _TEARDOWN.append(fn)


def destroy() -> None:
    """Run the :func:`on_destroy` hooks, then leave the process group that ``init()`` created
    (safe to call twice or in a single process). A group someone else created is left alone."""
    global _INFO, _OWN_GROUP
    while _TEARDOWN:
        fn = _TEARDOWN.pop()
        try:
            fn()
        except Exception as e:  # shutting down must not fail a finished run
            warnings.warn(f"rewardlab.distributed.destroy: teardown hook {fn!r} failed: {e}", stacklevel=2)
    if _OWN_GROUP and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _OWN_GROUP = False
    _INFO = None
