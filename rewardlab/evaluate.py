"""Old import path of :mod:`rewardlab.eval`, kept because the README documents
``rewardlab.evaluate.run_eval`` and ``rewardlab.train`` imports it."""

from rewardlab.eval import *  # noqa: F401,F403
from rewardlab.eval import __all__  # noqa: F401
