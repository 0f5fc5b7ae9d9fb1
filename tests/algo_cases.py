"""Test helper: the :class:`~rewardlab.algos.Algo` of a direct ``policy_loss`` call in the tests.

Before issue 25, ``policy_loss`` had keyword defaults of its own (token-mean aggregation, no KL) that
differed from :data:`rewardlab.algos.GRPO`'s; the unit tests written against those defaults now state
them here, once, instead of relying on a second copy inside the library.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rewardlab.algos import GRPO, Algo


def loss_algo(**fields: Any) -> Algo:
    """GRPO's settings with token-mean aggregation and no KL, then ``fields`` (not checked: tests pass bad values)."""
    return replace(GRPO, **{"agg": "token-mean", "beta": 0.0, **fields})


TENSOR_ARGS = ("max_len", "ref_logp", "entropy", "is_weights", "select", "num_tokens", "num_seqs")
"""``policy_loss``'s keyword arguments besides the algorithm."""


def _split(kw: dict[str, Any]) -> tuple[Algo, dict[str, Any]]:
    """``kw`` as (the :func:`loss_algo` of its algorithm fields, the tensor arguments)."""
    return (loss_algo(**{k: v for k, v in kw.items() if k not in TENSOR_ARGS}),
            {k: v for k, v in kw.items() if k in TENSOR_ARGS})


def loss_with(logp: Any, old_logp: Any, advantages: Any, mask: Any, **kw: Any) -> Any:
    """``policy_loss`` with the algorithm fields of ``kw`` folded into :func:`loss_algo` (for parametrised tests)."""
    from rewardlab import algos

    algo, tensors = _split(kw)
    return algos.policy_loss(logp, old_logp, advantages, mask, algo, **tensors)


def bypass_with(logp: Any, rollout_logp: Any, advantages: Any, mask: Any, c: Any, **kw: Any) -> Any:
    """``bypass_policy_loss`` with the algorithm fields of ``kw`` folded into :func:`loss_algo`."""
    from rewardlab import algos

    algo, tensors = _split(kw)
    return algos.bypass_policy_loss(logp, rollout_logp, advantages, mask, c, algo, **tensors)
