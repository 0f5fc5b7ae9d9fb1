"""The training process itself: thread counts, seeds, Ctrl-C / SIGTERM handling, out-of-memory errors."""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rewardlab.errors import RewardlabError


def default_threads() -> int | None:
    """1 thread on machines with <= 4 cores (extra OpenMP threads there fight other processes and
    run 5-10x slower, see docs/platform.md); otherwise None = leave torch's default."""
    n = os.cpu_count() or 1
    return 1 if n <= 4 else None


def set_threads(threads: int | None) -> int | None:
    """Fix the CPU thread count of this process (and, through the environment, of the processes it
    starts: reward workers, a vLLM engine); call it before torch does any work."""
    n = threads if threads is not None else default_threads()
    if n is None:
        return None
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # only settable once per process, before any inter-op work
        pass
    return n


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"


def oom_error(where: str) -> RewardlabError:
    return RewardlabError(
        f"out of memory during {where}; lower --micro-batch-size (or --max-tokens-per-micro-batch) or "
        "--max-new-tokens, add --gradient-checkpointing, or train fewer layers with --train-top-layers"
    )


class Interrupted(KeyboardInterrupt):
    """Raised by :func:`train` after a Ctrl-C (or SIGTERM) stop, once the checkpoint is saved.

    ``exit_code`` is the shell's convention for the signal: 130 for Ctrl-C, 143 for SIGTERM.
    """

    def __init__(self, signum: int, step: int, run_dir: Path):
        super().__init__(f"stopped after step {step} with its checkpoint saved; rerun the same command to resume"
                         f" from {run_dir}")
        self.signum, self.step, self.run_dir = signum, step, run_dir
        self.exit_code = 128 + int(signum)


def _hard_exit(code: int, why: str) -> None:
    """Leave now: flush what was printed, then ``os._exit`` (no cleanup that could hang)."""
    try:
        sys.stdout.flush()
        sys.stderr.write(f"aborted ({why})\n")
        sys.stderr.flush()
    finally:
        os._exit(code)


class StopFlag:
    """First Ctrl-C (or SIGTERM): finish the current step, save, exit 130 (143). Second Ctrl-C: abort
    now (KeyboardInterrupt, and a hard exit if unwinding has not finished ``ABORT_GRACE_S`` later, e.g.
    because a hung reward thread holds up the exit). A third Ctrl-C exits at once."""

    ABORT_GRACE_S = 5.0

    def __init__(self, log: Any):
        self.requested = False
        self.signum: int | None = None
        self._aborting = False
        self._log = log
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            if self._aborting:
                _hard_exit(130, "third Ctrl-C")
            self._aborting = True
            timer = threading.Timer(self.ABORT_GRACE_S, _hard_exit,
                                    (130, f"shutdown did not finish within {self.ABORT_GRACE_S:g} s "
                                          "of the second Ctrl-C"))
            timer.daemon = True
            timer.start()
            raise KeyboardInterrupt
        if self.requested:
            return
        self.requested, self.signum = True, signum
        self._log("stopping after this step and saving a checkpoint (Ctrl-C again to abort without saving)")

    def agreed(self, reduce_max: Any) -> bool:
        """Whether any rank was asked to stop (``reduce_max`` = ``distributed.all_reduce_max``): all
        ranks leave the loop after the same step, so the final save's collectives match."""
        if bool(reduce_max(int(self.requested))) and not self.requested:
            self.requested, self.signum = True, signal.SIGINT
        return self.requested

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


__all__ = ["Interrupted", "StopFlag", "default_threads", "oom", "oom_error", "seed_everything", "set_threads"]
