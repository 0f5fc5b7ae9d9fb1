"""The process's one fork server, shared by the reward pool and the generation worker of ``--async-steps``.

multiprocessing runs a single fork server per process and imports its preload list once, when the
server starts; a list set after that is ignored. Each user therefore adds its modules here, and the
server imports them all, whoever starts it first:

    forkserver.preload("rewardlab.rewards.math.slow")     # the reward pool
    forkserver.preload(*GENERATION_PRELOAD)               # a trainer that will run a generation worker

Before this module the reward pool set its own list and, started first (``prewarm`` runs while the
model loads), left the generation worker's modules out: every worker then imported torch and
transformers itself, about 4 s per worker start instead of well under a second
(measured in the session that wrote it; no test pins the start time).
"""

from __future__ import annotations

import multiprocessing as mp

_modules: list[str] = []


def available() -> bool:
    """Whether this platform has the ``forkserver`` start method."""
    return "forkserver" in mp.get_all_start_methods()


def preload(*modules: str) -> list[str]:
    """Add ``modules`` to what the fork server imports when it starts (no effect on a running one);
    returns the whole list. Idempotent, order-preserving."""
    for m in modules:
        if m and m != "__main__" and m not in _modules:
            _modules.append(m)
    if available():
        mp.get_context("forkserver").set_forkserver_preload(list(_modules))
    return list(_modules)
