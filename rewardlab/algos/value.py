"""PPO's clipped value loss for the critic (verl ``core_algos.compute_value_loss``)."""

from __future__ import annotations

import torch
from torch import Tensor

from rewardlab.algos.checks import check_real
from rewardlab.algos.loss import aggregate
from rewardlab.algos.tensors import Number, check_bt, compute_dtype, masked


def value_loss(
    vpreds: Tensor,
    values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    cliprange: float,
    agg: str = "token-mean",
    max_len: int | None = None,
    num_tokens: Number | Tensor | None = None,
    num_seqs: Number | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped value loss (verl ``core_algos.compute_value_loss``), with gradient through ``vpreds``.

    ``v_clip = clamp(vpred, V - c, V + c)``, per token ``L = max((vpred - R)^2, (v_clip - R)^2)``,
    ``loss = 0.5 * aggregate(L, m, agg)`` (the 0.5 after aggregation, as verl). ``values`` (the old
    critic's) and ``returns`` are targets (detached). ``agg``, ``max_len`` (the constant of
    ``seq-mean-token-sum-norm``; verl's default is the padded width T, its ``loss_scale_factor``
    when set), ``num_tokens`` and ``num_seqs`` (the optimizer step's totals, so that micro-batch
    losses add up to the step's loss) are :func:`rewardlab.algos.aggregate`'s.

    Returns ``(loss, {"vf_loss", "vf_clipfrac"})``: ``vf_clipfrac`` is the fraction of this call's
    valid tokens with ``(v_clip - R)^2 > (vpred - R)^2`` (verl divides by ``N + 1e-8``; the
    difference is below 1e-8 relative). The gradient is 0 at padding.
    """
    check_bt("vpreds", vpreds)
    for name, x in (("values", values), ("returns", returns), ("mask", mask)):
        check_bt(name, x, vpreds.shape)
    c = check_real("cliprange", cliprange, 0.0)
    cdt = compute_dtype(vpreds)
    m = mask.detach().bool()  # (B, T)
    zero = torch.zeros((), dtype=cdt, device=vpreds.device)
    vp = torch.where(m, vpreds.to(cdt), zero)  # (B, T) padding -> 0 (blocks NaN gradients too)
    v_old = masked(values, m, cdt)  # (B, T)
    ret = masked(returns, m, cdt)  # (B, T)
    v_clip = torch.clamp(vp, v_old - c, v_old + c)  # (B, T)
    l_unclipped = (vp - ret) ** 2  # (B, T)
    l_clipped = (v_clip - ret) ** 2  # (B, T)
    per_token = torch.maximum(l_unclipped, l_clipped)  # (B, T)
    loss = 0.5 * aggregate(per_token, m, agg, max_len=max_len, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():
        clipped = (l_clipped > l_unclipped) & m  # (B, T)
        clipfrac = clipped.to(cdt).sum() / m.sum().clamp(min=1).to(cdt)
    return loss, {"vf_loss": loss.detach(), "vf_clipfrac": clipfrac}
