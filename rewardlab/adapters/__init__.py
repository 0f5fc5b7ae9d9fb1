"""Thin shims that put rewardlab rewards into other trainers, each tested against the real convention.

* :mod:`rewardlab.adapters.trl`: ``as_trl(reward)`` / ``as_trl_async(reward)`` for TRL's ``GRPOTrainer``.
* :mod:`rewardlab.adapters.verl`: ``compute_score`` (and ``compute_score_async``) for verl's
  ``reward.custom_reward_function`` (every reward-loop manager of verl 0.8 / 0.9);
  ``compute_score_prime`` for the legacy Prime manager; ``compute_score_batch`` for your own code.
* :mod:`rewardlab.adapters.openrlhf`: ``reward_func`` for OpenRLHF's ``--reward.remote_url FILE.py``
  mode; ``rewardlab serve`` (:mod:`rewardlab.server`) for its HTTP mode; one label rule for both.

Per-sample user fields (verl ``extra_info`` keys, TRL columns) named like a reward's parameters are
passed on renamed (``reference`` -> ``reference_``, see :data:`rewardlab.adapters._common.RESERVED_META`).
Each adapter is tested inside the real trainer code (``tests/test_adapters_trl.py``,
``tests/test_verl_client.py``, ``tests/test_openrlhf_client.py``).

Adapters import nothing from the trainers themselves, so none of TRL, verl or OpenRLHF is needed
at run time.
"""
