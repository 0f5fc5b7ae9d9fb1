"""Thin shims that put rewardlab rewards into other trainers, each tested against the real convention.

* :mod:`rewardlab.adapters.trl`: ``as_trl(reward)`` / ``as_trl_async(reward)`` for TRL's ``GRPOTrainer``.
* :mod:`rewardlab.adapters.verl`: ``compute_score`` / ``compute_score_batch`` for verl's
  ``custom_reward_function`` (naive, dapo, prime and batch reward managers, and the reward loop).
* :mod:`rewardlab.adapters.openrlhf`: ``reward_func`` for OpenRLHF's ``--remote_rm_url`` file mode;
  ``rewardlab serve`` (:mod:`rewardlab.server`) for its HTTP mode.

Adapters import nothing from the trainers themselves, so none of TRL, verl or OpenRLHF is needed
at run time.
"""
