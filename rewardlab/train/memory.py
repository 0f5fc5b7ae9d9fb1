"""Peak memory: the process's so far, and each micro-batch's of the update (issue 38: the token budget bounds it).

    with micro_batch_memory(device) as peak:   # the high-water marks set back to what is in use now
        micro_step(...)
    peak  # {"rss_mb": ..., "gpu_mb": ...}: this micro-batch's peaks (gpu_mb on CUDA only)

On Linux the resident high-water mark is set back through ``/proc/self/clear_refs`` ("5"); CUDA's through
``torch.cuda.reset_peak_memory_stats``. Both also move the counters the process-wide peaks read, so the
process's peaks seen so far are kept here and :func:`peak_rss_mb` / :func:`peak_gpu_mb` stay the peaks since
start. Where ``clear_refs`` cannot be written, a micro-batch's RSS peak is the process's peak so far.
"""

from __future__ import annotations

import contextlib
import resource
from typing import Any, Iterator

import torch

_SEEN = {"rss_kb": 0, "gpu_bytes": 0}  # the process's peaks before the counters were last set back


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started, in MiB."""
    _SEEN["rss_kb"] = max(_SEEN["rss_kb"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux
    return _SEEN["rss_kb"] / 1024


def peak_gpu_mb(device: Any) -> float | None:
    """The most CUDA memory allocated on ``device`` since start, in MiB; None off CUDA."""
    if not _on_cuda(device):
        return None
    _SEEN["gpu_bytes"] = max(_SEEN["gpu_bytes"], torch.cuda.max_memory_allocated(device))
    return _SEEN["gpu_bytes"] / 2**20


@contextlib.contextmanager
def micro_batch_memory(device: Any) -> Iterator[dict[str, float]]:
    """The peaks of what runs inside: the dict fills in on exit (``rss_mb``; ``gpu_mb`` on CUDA)."""
    peak_rss_mb()  # keep the process's peak before the kernel's counter is set back
    peak_gpu_mb(device)
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass  # not Linux, or not allowed: the process's peak so far stands in
    if _on_cuda(device):
        torch.cuda.reset_peak_memory_stats(device)
    out: dict[str, float] = {}
    try:
        yield out
    finally:
        out["rss_mb"] = _vm_hwm_kb() / 1024
        if _on_cuda(device):
            out["gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20


def _vm_hwm_kb() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _on_cuda(device: Any) -> bool:
    return device is not None and getattr(device, "type", None) == "cuda" and torch.cuda.is_available()


__all__ = ["micro_batch_memory", "peak_gpu_mb", "peak_rss_mb"]
