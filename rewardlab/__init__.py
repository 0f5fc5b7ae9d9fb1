"""rewardlab: verifiable rewards, a compact RL loop (the presets of :data:`rewardlab.algos.PRESETS`) and an eval suite.

The package's own namespace holds only ``__version__``, so that ``rewardlab --help`` imports nothing heavy; the
parts are its packages (``rewards``, ``algos``, ``rollout``, ``train``, ``eval``, ``sandbox``, ``adapters``) and
docs/design.md says where each concern lives.
"""

__version__ = "0.1.0"
