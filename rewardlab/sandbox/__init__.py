"""The code sandbox, parent side: what the trainer process runs to execute untrusted code.

    from rewardlab.sandbox import execute, Limits
    r = execute(solution, tests="def check(candidate):\\n    assert candidate(2, 3) == 5", entry_point="add")
    r.passed, r.status, r.details

* :mod:`rewardlab.sandbox.parent` - the pool of warm fork servers, ``execute``, the limits and the
  parsing of a run's result (was ``rewardlab/sandbox.py``);
* :mod:`rewardlab.sandbox.isolation` - which isolation tier runs code here (A: bubblewrap, B: uid +
  Landlock + seccomp, unsafe) and the command line that starts a server under it (was
  ``rewardlab/isolation.py``).

What runs *inside* the sandbox (the fork server, the wire format, the confinement) is the top-level
``sandbox/`` folder of the checkout, shipped as ``rewardlab.sandbox_runtime``; it is stdlib only and
never imports rewardlab. This package imports only :mod:`rewardlab.errors`.
"""

from rewardlab.sandbox.isolation import Tier, detect_tier
from rewardlab.sandbox.parent import STATUSES, ExecutionResult, Limits, SandboxPool, execute, get_pool

__all__ = ["execute", "ExecutionResult", "Limits", "SandboxPool", "get_pool", "STATUSES", "Tier", "detect_tier"]
