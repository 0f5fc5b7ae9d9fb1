"""RL post-training algorithms as plain tensor functions: settings, advantages, ratios, losses, KL.

The algorithms differ only in data (:class:`Algo`, every field declared once in ``settings``; presets
as deltas from GRPO) and a few marked branches. Nothing here knows about models or trainers, so the
loss drops into any loop::

    from rewardlab import algos

    algo = algos.PRESETS["dapo"]                                             # or algos.get("dapo", eps_high=0.3)
    adv = algos.group_advantages(rewards, prompt_ids, scale="std")          # (B,)
    loss, metrics = algos.policy_loss(logp, old_logp, adv, mask, algo, num_tokens=step_tokens, num_seqs=step_seqs)
    loss.backward()

Modules: ``settings`` (:class:`Algo`, the presets), ``loss`` (KL, aggregation, :func:`policy_loss`),
``grouping`` (group advantages, DAPO's filter), ``objectives`` (one function per objective),
``advantages`` (verl's estimator functions), ``estimators`` (every ``--advantage``, one call shape),
``correction`` (rollout correction), ``extras`` (write-up options), ``checks`` and ``tensors`` (shared helpers).
The specification is ``docs/algorithms.md``; the numbers match verl 0.9.1 in float64
(``tests/test_algos_reference.py``).
Shapes: ``B`` rows (responses), ``T`` padded response length; ``mask`` is 1 on generated tokens.
Presets: {presets}.
"""

from __future__ import annotations

from rewardlab.algos.checks import AlgoError
from rewardlab.algos.grouping import ADVANTAGE_SCALES, dynamic_sampling_keep, group_advantages
from rewardlab.algos.loss import (METRIC_REDUCE, aggregate, bypass_policy_loss, combine_metrics, kl_penalty,
                                  policy_loss, step_counts)
from rewardlab.algos.objectives import sequence_log_ratio
from rewardlab.algos.settings import (AGGREGATIONS, ALGOS, DAPO, DR_GRPO, FIELDS, GRPO, GSPO,
                                      KL_KINDS, PRESETS, Algo, get, optimizer_steps_per_rollout, preset,
                                      validate_algo)

__doc__ = __doc__.replace("{presets}", ", ".join(PRESETS))

__all__ = [
    "ADVANTAGE_SCALES", "AGGREGATIONS", "ALGOS", "Algo", "AlgoError", "DAPO", "DR_GRPO", "FIELDS", "GRPO", "GSPO",
    "KL_KINDS", "METRIC_REDUCE", "PRESETS", "aggregate", "bypass_policy_loss", "combine_metrics",
    "dynamic_sampling_keep", "get", "group_advantages", "kl_penalty", "optimizer_steps_per_rollout", "policy_loss",
    "preset", "sequence_log_ratio", "step_counts", "validate_algo",
]
