"""verl 0.9.1's advantage estimators and PPO value loss as pure tensor functions.

Each estimator takes per-token rewards ``token_rewards`` ``(B, T)`` (verl's ``token_level_rewards``:
an outcome score sits on the last valid token, see :func:`outcome_token_rewards`; a dense reward
is non-zero on every token) and the response ``mask`` ``(B, T)`` (1 on response tokens), and
returns ``(advantages, returns)``, both ``(B, T)``. Group estimators also take ``group_ids``: a
``(B,)`` sequence of hashables or an integer tensor (responses to the same prompt share an id).
The numbers match verl 0.9.1 in float64 (``tests/test_advantages_verl.py``, against
``../shared/fixtures/verl_reference_v2.json``), including verl's quirks, which are noted per function.

Notation: ``m`` the mask, ``n_i = sum_t m[i,t]`` the response length, ``s_i = sum_t m r[i,t]`` the
score of response ``i``, ``g`` its group, ``mean_g`` / ``std_g`` the group mean / unbiased (n-1)
std of ``s``. ``whiten(x) = (x - mu) * rsqrt(var + 1e-8)`` with ``mu = sum(x m) / (sum m + 1e-8)``
and ``var`` the unbiased variance over **all valid tokens of the batch** (token-weighted), as
``verl.utils.torch_functional.masked_whiten``. ``revcumsum(x)_t = sum_{u >= t} x_u``.

Estimators (name in :data:`FUNCTIONS` -- formula -- the verl function it matches, in
``verl/trainer/ppo/core_algos.py``):

* ``gae`` -- ``delta_t = r_t + gamma V' - V_t``, ``A_t = delta_t + gamma lam A'`` (``V'``, ``A'``
  of the next *valid* token); returns ``= A + V``; advantages ``= whiten(A)``, not re-masked --
  ``compute_gae_advantage_return``.
* ``reinforce_pp`` -- ``G_t = r_t + gamma G'`` (carried through mask 0); returns ``= G m``;
  advantages ``= whiten(G m) m`` -- ``compute_reinforce_plus_plus_outcome_advantage``.
* ``reinforce_pp_baseline`` -- ``A = whiten((s_i - mean_g) m) m`` --
  ``compute_reinforce_plus_plus_baseline_outcome_advantage``.
* ``rloo`` -- ``A_i = n_g / (n_g - 1) (s_i - mean_g)`` = ``s_i`` minus the mean of the others;
  singleton ``A_i = s_i`` -- ``compute_rloo_outcome_advantage``.
* ``opo`` -- ``A_i = s_i - sum_j n_j s_j / sum_j n_j`` (length-weighted baseline); singleton
  ``A_i = s_i`` -- ``compute_opo_outcome_advantage``.
* ``grpo_passk`` -- the group argmax gets ``s_max - s_2nd`` (``/ (std_g + eps)`` with
  ``norm_by_std``), the others 0, ties 0 -- ``compute_grpo_passk_outcome_advantage``.
* ``gpg`` -- ``A_i = alpha (s_i - mean_g) / f_norm``, ``alpha = B / count_nonzero(s)`` over the
  whole batch -- ``compute_gpg_outcome_advantage``.
* ``remax`` -- returns ``= revcumsum(r m)``, ``A = returns - b_i m`` --
  ``compute_remax_outcome_advantage``.
* ``gdpo`` -- ``A = whiten(sum_k w_k GRPO_g(c_k) m) m`` with ``GRPO_g(c) = (c - mean_g) /
  (std_g + eps)`` (singleton mean 0, std 1) -- ``compute_gdpo_outcome_advantage``.
* :func:`optimal_token_baseline` (not in :data:`FUNCTIONS`: it needs policy statistics) --
  ``A = (G - B_t) m``, ``G = revcumsum(r m)``, ``B_t = sum_g G W m / (sum_g W m + eps)`` per
  position, ``W = cumsum(w m)``, ``w = (1 - 2 pi + sum pi^2) rho^2`` --
  ``compute_optimal_token_baseline_advantage``.
* :func:`tir_optimal_token_baseline` -- the same on compacted valid tokens (holes removed) --
  ``compute_multi_turn_optimal_token_baseline_advantage``.
* ``rewardlab.algos.value.value_loss`` (PPO's critic loss, its own module) --
  ``0.5 agg(max((v - R)^2, (clamp(v, V - c, V + c) - R)^2))`` -- ``compute_value_loss``.

``returns`` equals ``advantages`` for the outcome estimators (as in verl) except GAE (``A + V``),
REINFORCE++ (``G m``), ReMax and the OTB pair (``revcumsum(r m)``).

Padding: every input is read only at ``mask == 1`` (padding is replaced by 0 first, so NaN padding
never reaches a valid output), except where verl itself returns something at padding: GAE's
advantages at padding are ``-mu / sigma`` (trailing padding) or the whitened advantage of the next
valid token (holes), and GAE's returns at padding are ``A + values`` with the caller's padding
``values`` (junk in, junk out, as verl). ReMax's advantages and the ReMax and OTB
``returns`` at a hole are the reward-to-go of the valid tokens after it (0 on trailing padding).

Precision: everything is computed in float64 when ``token_rewards`` (``vpreds`` for
``value_loss``) is float64, else in float32; outputs have that dtype. Estimators run under
``torch.no_grad`` and return detached tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

import torch

from rewardlab.algos.checks import AlgoError, check_real
from rewardlab.algos.grouping import group_advantages
from rewardlab.algos.tensors import check_b, check_bt, compute_dtype, group_index, masked

Tensor = torch.Tensor
Number = int | float

_WHITEN_EPS = 1e-8  # verl masked_mean denominator and rsqrt(var + 1e-8)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _prep(token_rewards: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(r, m, mf)``: rewards with padding -> 0 in the compute dtype, bool mask, float mask."""
    check_bt("token_rewards", token_rewards)
    check_bt("mask", mask, token_rewards.shape)
    cdt = compute_dtype(token_rewards)
    m = mask.detach().bool()  # (B, T)
    r = torch.where(m, token_rewards.detach().to(cdt), torch.zeros((), dtype=cdt, device=m.device))  # (B, T)
    return r, m, m.to(cdt)


def _whiten(x: Tensor, mf: Tensor) -> Tensor:
    """verl's ``masked_whiten``: ``(x - mu) * rsqrt(var + 1e-8)`` over all valid tokens, unbiased var.

    ``mu = sum(x m) / (N + 1e-8)``, ``var = sum((x - mu)^2 m) / (N + 1e-8) * N / (N - 1)``; the
    result is defined (and non-zero) at padding too. Needs ``N >= 2`` valid tokens (verl raises too).
    """
    n = mf.sum()  # ()
    if int(n) < 2:
        raise AlgoError(f"whitening needs at least 2 valid tokens in the batch, got {int(n)}")
    mb = mf.bool()
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    mean = torch.where(mb, x, zero).sum() / (n + _WHITEN_EPS)  # ()
    centered = x - mean  # (B, T)
    var = torch.where(mb, centered * centered, zero).sum() / (n + _WHITEN_EPS) * (n / (n - 1))  # ()
    return centered * torch.rsqrt(var + _WHITEN_EPS)  # (B, T)


def _group_sum(x: Tensor, inv: Tensor, n_groups: int) -> Tensor:
    """Per-group sum of a ``(B,)`` tensor -> ``(G,)``."""
    return torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, inv, x)


def _group_mean_std(s: Tensor, inv: Tensor, n_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(count, mean, std)`` per group, ``(G,)`` each; std unbiased (n-1), 0 for a singleton."""
    count = torch.bincount(inv, minlength=n_groups).to(s.dtype)  # (G,)
    mean = _group_sum(s, inv, n_groups) / count  # (G,)
    dev = s - mean[inv]  # (B,)
    std = torch.sqrt(_group_sum(dev * dev, inv, n_groups) / (count - 1).clamp(min=1))  # (G,)
    return count, mean, std


def _revcumsum(x: Tensor) -> Tensor:
    """``out_t = sum_{u >= t} x_u`` along the last dim."""
    return x.flip(-1).cumsum(-1).flip(-1)


def _broadcast(a: Tensor, mf: Tensor) -> Tensor:
    """Per-response ``(B,)`` -> ``(B, T)``, zero at padding."""
    return a[:, None] * mf  # (B, T)


# ----------------------------------------------------------------------------------------------
# rewards
# ----------------------------------------------------------------------------------------------


def outcome_token_rewards(scores: Tensor | Sequence[float], mask: Tensor) -> Tensor:
    """Place each response's score on its last valid token (verl's ``token_level_rewards``), ``(B, T)``.

    ``out[i, t] = scores[i]`` if ``t = max{t : m[i,t] = 1}`` else 0. A row without response tokens
    gets no reward (verl would write it at position -1, the last column). Dtype: float64 for a
    float64 ``scores`` tensor, else float32 (a plain list of floats gives float32).
    """
    check_bt("mask", mask)
    s = scores.detach() if isinstance(scores, Tensor) else torch.as_tensor(list(scores), dtype=torch.float64)
    b, t = mask.shape
    check_b("scores", s, b)
    cdt = torch.float64 if isinstance(scores, Tensor) and s.dtype == torch.float64 else torch.float32
    m = mask.detach().bool()  # (B, T)
    pos = torch.arange(t, device=m.device)  # (T,)
    last = torch.where(m, pos, torch.full_like(pos, -1)).amax(-1)  # (B,) -1 for an empty row
    hit = pos[None, :] == last[:, None]  # (B, T) one-hot at the last valid token
    zero = torch.zeros((), dtype=cdt, device=m.device)
    return torch.where(hit, s.to(cdt).to(m.device)[:, None], zero)  # (B, T)


# ----------------------------------------------------------------------------------------------
# estimators
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def gae(token_rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (verl ``core_algos.compute_gae_advantage_return``).

    Backward over t: ``delta_t = r_t + gamma V'_t - V_t`` and ``A_t = delta_t + gamma lam A'_t``,
    where ``V'_t`` / ``A'_t`` are the value and advantage of the next **valid** token (0 past the
    end): on a masked position both are carried unchanged (multi-turn observation tokens are skipped).
    ``returns = A + values``; ``advantages = whiten(A)`` (batch-wide, unbiased variance).

    verl quirks kept: the whitened advantages are **not** re-masked (trailing padding gets
    ``-mu/sigma``, a hole gets the whitened advantage of the next valid token), and ``returns`` at
    padding are ``A + values`` with the caller's padding ``values`` (junk stays junk). Valid
    positions never see padding rewards or values.
    """
    r, m, mf = _prep(token_rewards, mask)
    check_bt("values", values, r.shape)
    g = check_real("gamma", gamma, 0.0, 1.0)
    lm = check_real("lam", lam, 0.0, 1.0)
    v_raw = values.detach().to(r.dtype)  # (B, T) padding kept only for the returns quirk
    v = masked(values, m, r.dtype)  # (B, T)
    b, t_len = r.shape
    next_v = torch.zeros(b, dtype=r.dtype, device=r.device)  # (B,)
    next_a = torch.zeros(b, dtype=r.dtype, device=r.device)  # (B,)
    adv = torch.zeros_like(r)  # (B, T)
    for t in reversed(range(t_len)):
        a_t = r[:, t] + g * next_v - v[:, t] + g * lm * next_a  # (B,)
        valid = m[:, t]  # (B,)
        next_v = torch.where(valid, v[:, t], next_v)  # (B,)
        next_a = torch.where(valid, a_t, next_a)  # (B,)
        adv[:, t] = next_a
    returns = adv + v_raw  # (B, T)
    return _whiten(adv, mf), returns


@torch.no_grad()
def reinforce_pp(token_rewards: Tensor, mask: Tensor, *, gamma: float) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (verl ``core_algos.compute_reinforce_plus_plus_outcome_advantage``).

    ``G_t = r_t + gamma G'_t`` with ``G'_t`` the return of the next valid token (carried unchanged,
    undiscounted, through mask-0 positions); ``returns = G m``; ``advantages = whiten(G m) m``.
    """
    r, m, mf = _prep(token_rewards, mask)
    g = check_real("gamma", gamma, 0.0, 1.0)
    b, t_len = r.shape
    running = torch.zeros(b, dtype=r.dtype, device=r.device)  # (B,)
    returns = torch.zeros_like(r)  # (B, T)
    for t in reversed(range(t_len)):
        new = r[:, t] + g * running  # (B,)
        running = torch.where(m[:, t], new, running)  # (B,)
        returns[:, t] = new * mf[:, t]
    adv = _whiten(returns, mf) * mf  # (B, T)
    return adv, returns


@torch.no_grad()
def reinforce_pp_baseline(
    token_rewards: Tensor, mask: Tensor, group_ids: Tensor | Sequence[Hashable]
) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (verl ``core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage``).

    ``A = whiten((s_i - mean_g) m) m``: the group-mean baseline, then whitening over all valid
    tokens of the batch (token-weighted, so longer responses weigh more). A singleton group has
    mean 0 (verl). ``returns = advantages``.
    """
    r, m, mf = _prep(token_rewards, mask)
    inv, n_groups = group_index(group_ids, r.shape[0], r.device)
    s = r.sum(-1)  # (B,)
    count, mean, _ = _group_mean_std(s, inv, n_groups)  # (G,)
    mean = torch.where(count == 1, torch.zeros_like(mean), mean)  # (G,)
    adv = _whiten(_broadcast(s - mean[inv], mf), mf) * mf  # (B, T)
    return adv, adv


@torch.no_grad()
def rloo(token_rewards: Tensor, mask: Tensor, group_ids: Tensor | Sequence[Hashable]) -> tuple[Tensor, Tensor]:
    """RLOO (verl ``core_algos.compute_rloo_outcome_advantage``).

    ``A_i = n_g/(n_g-1) s_i - n_g/(n_g-1) mean_g = s_i - mean_{j != i} s_j``, broadcast ``x m``.
    A singleton group keeps ``A_i = s_i`` (verl). ``returns = advantages``.
    """
    r, m, mf = _prep(token_rewards, mask)
    inv, n_groups = group_index(group_ids, r.shape[0], r.device)
    s = r.sum(-1)  # (B,)
    count, mean, _ = _group_mean_std(s, inv, n_groups)  # (G,)
    c = count[inv]  # (B,)
    cm1 = (c - 1).clamp(min=1)  # (B,)
    a = torch.where(c > 1, s * c / cm1 - mean[inv] * c / cm1, s)  # (B,) verl's operation order
    adv = _broadcast(a, mf)  # (B, T)
    return adv, adv


@torch.no_grad()
def opo(token_rewards: Tensor, mask: Tensor, group_ids: Tensor | Sequence[Hashable]) -> tuple[Tensor, Tensor]:
    """OPO, length-weighted baseline (verl ``core_algos.compute_opo_outcome_advantage``).

    ``b_g = sum_{j in g} n_j s_j / sum_{j in g} n_j``, ``A_i = s_i - b_g`` broadcast ``x m``. A
    singleton group has ``b = 0`` (verl); a group whose responses are all empty gets ``b = 0`` here
    (verl divides 0 by 0). ``returns = advantages``.
    """
    r, m, mf = _prep(token_rewards, mask)
    inv, n_groups = group_index(group_ids, r.shape[0], r.device)
    s = r.sum(-1)  # (B,)
    n = mf.sum(-1)  # (B,)
    count = torch.bincount(inv, minlength=n_groups)  # (G,)
    num = _group_sum(n * s, inv, n_groups)  # (G,)
    den = _group_sum(n, inv, n_groups)  # (G,)
    base = torch.where((count > 1) & (den > 0), num / den.clamp(min=1), torch.zeros_like(num))  # (G,)
    adv = _broadcast(s - base[inv], mf)  # (B, T)
    return adv, adv


@torch.no_grad()
def grpo_passk(
    token_rewards: Tensor,
    mask: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """GRPO pass@k (verl ``core_algos.compute_grpo_passk_outcome_advantage``).

    Only the response with the group's highest score gets a non-zero advantage,
    ``s_max - s_2nd`` (divided by ``std_g + eps`` with ``norm_by_std``, std unbiased); all others
    get 0, and a tie for the maximum gives 0 to everyone. Broadcast ``x m``; ``returns = advantages``.
    Raises :class:`AlgoError` for a group with fewer than 2 responses (verl raises too).
    """
    r, m, mf = _prep(token_rewards, mask)
    inv, n_groups = group_index(group_ids, r.shape[0], r.device)
    eps = check_real("eps", eps, 0.0)
    s = r.sum(-1)  # (B,)
    count, _, std = _group_mean_std(s, inv, n_groups)  # (G,)
    if n_groups and int(count.min()) < 2:
        raise AlgoError(f"grpo_passk needs at least 2 responses per group, got a group of {int(count.min())}")
    neg_inf = torch.full((n_groups,), -math.inf, dtype=s.dtype, device=s.device)
    gmax = neg_inf.scatter_reduce(0, inv, s, "amax")  # (G,)
    is_max = s == gmax[inv]  # (B,)
    n_max = _group_sum(is_max.to(s.dtype), inv, n_groups)  # (G,)
    others = torch.where(is_max, torch.full_like(s, -math.inf), s)  # (B,)
    second = neg_inf.clone().scatter_reduce(0, inv, others, "amax")  # (G,)
    second = torch.where(n_max > 1, gmax, second)  # (G,) a tie at the top: s_2nd = s_max
    gap = gmax - second  # (G,)
    if norm_by_std:
        gap = gap / (std + eps)  # (G,)
    a = torch.where(is_max & (n_max[inv] == 1), gap[inv], torch.zeros_like(s))  # (B,)
    adv = _broadcast(a, mf)  # (B, T)
    return adv, adv


@torch.no_grad()
def gpg_advantage(
    token_rewards: Tensor, mask: Tensor, group_ids: Tensor | Sequence[Hashable], *, f_norm: float = 1.0
) -> tuple[Tensor, Tensor]:
    """GPG's advantage (verl ``core_algos.compute_gpg_outcome_advantage``; the advantage, not the loss).

    ``A_i = alpha (s_i - mean_g) / f_norm`` with ``alpha = B / max(count_nonzero(s), 1)`` over the
    **whole batch** (verl overwrites its ``alpha`` argument with this), no std. A singleton group
    has mean 0. Broadcast ``x m``; ``returns = advantages``. verl's ``alpha`` is an integer-tensor
    division, hence float32 (``12 / 10 -> 1.2000000477``); here it has the compute dtype, so the
    two agree to ~4e-8 relative.
    """
    r, m, mf = _prep(token_rewards, mask)
    inv, n_groups = group_index(group_ids, r.shape[0], r.device)
    f_norm = check_real("f_norm", f_norm)
    if f_norm == 0:
        raise AlgoError("f_norm must be non-zero")
    s = r.sum(-1)  # (B,)
    alpha = s.shape[0] / torch.count_nonzero(s).clamp(min=1).to(s.dtype)  # ()
    count, mean, _ = _group_mean_std(s, inv, n_groups)  # (G,)
    mean = torch.where(count == 1, torch.zeros_like(mean), mean)  # (G,)
    adv = _broadcast(alpha * (s - mean[inv]) / f_norm, mf)  # (B, T)
    return adv, adv


@torch.no_grad()
def remax(token_rewards: Tensor, mask: Tensor, baselines: Tensor) -> tuple[Tensor, Tensor]:
    """ReMax (verl ``core_algos.compute_remax_outcome_advantage``).

    ``returns = revcumsum(r m)`` (the reward-to-go), ``A = returns - b_i m`` with ``b_i`` the
    reward of the greedy response to the same prompt, ``(B,)``. As verl, the advantage is not
    re-masked: at a hole it is the reward-to-go (trailing padding: 0).
    """
    r, m, mf = _prep(token_rewards, mask)
    check_b("baselines", baselines, r.shape[0])
    returns = _revcumsum(r)  # (B, T)
    b = baselines.detach().to(r.dtype).to(r.device)  # (B,)
    adv = returns - torch.where(m, b[:, None].expand_as(r), torch.zeros((), dtype=r.dtype, device=r.device))  # (B, T)
    return adv, returns


@torch.no_grad()
def gdpo(
    token_rewards: Tensor,
    mask: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    *,
    components: Mapping[str, Tensor | Sequence[float]] | None = None,
    weights: Mapping[str, float] | Sequence[float] | None = None,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """GDPO, decoupled group normalisation (verl ``core_algos.compute_gdpo_outcome_advantage``).

    ``A = whiten(sum_k w_k GRPO_g(c_k) m) m``: each reward component ``c_k`` ``(B,)`` is GRPO-
    normalised in its group (``(c - mean_g) / (std_g + eps)``, singleton mean 0 / std 1), the
    weighted sum is broadcast over valid tokens and whitened over the batch.

    ``components`` maps component names to per-response rewards (verl's ``gdpo_reward_keys`` in the
    non-tensor batch); ``weights`` is a mapping name -> weight or a sequence in ``components``'
    order (default all 1). Without ``components`` the one component is ``s = sum_t m r`` (verl's
    fallback, ``w = 1``). verl builds the keyed components in float32; here they are computed in
    the compute dtype (float64 for float64 ``token_rewards``), which agrees with verl to ~1e-7.
    ``returns = advantages``.
    """
    r, m, mf = _prep(token_rewards, mask)
    b = r.shape[0]
    inv, n_groups = group_index(group_ids, b, r.device)
    eps = check_real("eps", eps, 0.0)
    if components is None:
        comps: list[tuple[str, Tensor]] = [("token_rewards", r.sum(-1))]  # (B,)
    else:
        if not isinstance(components, Mapping) or not components:
            raise AlgoError("components must be a non-empty mapping name -> (B,) rewards")
        comps = []
        for name, c in components.items():
            ct = c.detach() if isinstance(c, Tensor) else torch.as_tensor(list(c), dtype=torch.float64)
            check_b(f"components[{name!r}]", ct, b)
            comps.append((name, ct.to(r.dtype).to(r.device)))
    if weights is None:
        w = [1.0] * len(comps)
    elif isinstance(weights, Mapping):
        missing = [name for name, _ in comps if name not in weights]
        if missing or len(weights) != len(comps):
            raise AlgoError(f"weights must name exactly the components {[n for n, _ in comps]}, got {list(weights)}")
        w = [check_real(f"weights[{name!r}]", weights[name]) for name, _ in comps]
    else:
        w = [check_real("weight", x) for x in weights]
        if len(w) != len(comps):
            raise AlgoError(f"{len(w)} weights for {len(comps)} components")
    total = torch.zeros(b, dtype=r.dtype, device=r.device)  # (B,)
    for wk, (_, ck) in zip(w, comps):
        total = total + wk * group_advantages(ck, inv, scale="std" if norm_by_std else "none", eps=eps)  # (B,)
    adv = _whiten(_broadcast(total, mf), mf) * mf  # (B, T)
    return adv, adv


def _otb(
    token_rewards: Tensor,
    mask: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    old_logp: Tensor,
    sum_pi_squared: Tensor,
    rollout_is_weights: Tensor | None,
    handle_zero_tail: bool,
    eps: float,
    compact: bool,
) -> tuple[Tensor, Tensor]:
    """Shared body of the two OTB estimators; ``compact`` aligns tokens by valid-token index."""
    r, m, mf = _prep(token_rewards, mask)
    check_bt("old_logp", old_logp, r.shape)
    check_bt("sum_pi_squared", sum_pi_squared, r.shape)
    eps = check_real("eps", eps, 0.0)
    b, t_len = r.shape
    inv, n_groups = group_index(group_ids, b, r.device)
    returns = _revcumsum(r)  # (B, T) G_t
    pi = torch.exp(masked(old_logp, m, r.dtype))  # (B, T)
    w = 1 - 2 * pi + masked(sum_pi_squared, m, r.dtype)  # (B, T)
    if rollout_is_weights is not None:
        check_bt("rollout_is_weights", rollout_is_weights, r.shape)
        rho = masked(rollout_is_weights, m, r.dtype)  # (B, T)
        w = w * rho * rho  # (B, T)
    big_w = torch.where(m, w, torch.zeros((), dtype=r.dtype, device=r.device)).cumsum(-1)  # (B, T) W_t
    n = m.sum(-1)  # (B,) lengths
    if compact:
        key = (m.long().cumsum(-1) - 1).clamp(min=0)  # (B, T) index among valid tokens
    else:
        key = torch.arange(t_len, device=r.device).expand(b, t_len)  # (B, T)
    cell = inv[:, None] * t_len + key  # (B, T) (group, position) cell
    zero = torch.zeros((), dtype=r.dtype, device=r.device)
    num = torch.zeros(n_groups * t_len, dtype=r.dtype, device=r.device)
    num.index_add_(0, cell[m], (returns * big_w)[m])  # (G*T,)
    den = torch.zeros_like(num).index_add_(0, cell[m], big_w[m]) + eps  # (G*T,)
    base = (num / den)[cell]  # (B, T)
    members = torch.bincount(inv[n > 0], minlength=n_groups)  # (G,) non-empty responses
    base = torch.where((members[inv] >= 2)[:, None], base, zero)  # (B, T) singleton: no baseline
    if handle_zero_tail:
        gmax = torch.zeros(n_groups, dtype=n.dtype, device=r.device).scatter_reduce(0, inv, n, "amax")  # (G,)
        is_max = n == gmax[inv]  # (B,)
        n_max = torch.bincount(inv[is_max], minlength=n_groups)  # (G,)
        rest = torch.where(is_max, torch.zeros_like(n), n)  # (B,)
        second = torch.zeros_like(gmax).scatter_reduce(0, inv, rest, "amax")  # (G,)
        tail = (is_max & (n_max[inv] == 1))[:, None] & (key >= second[inv][:, None])  # (B, T)
        base = torch.where(tail, zero, base)  # (B, T)
    adv = torch.where(m, returns - base, zero)  # (B, T)
    return adv, returns


@torch.no_grad()
def optimal_token_baseline(
    token_rewards: Tensor,
    mask: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    old_logp: Tensor,
    sum_pi_squared: Tensor,
    *,
    rollout_is_weights: Tensor | None = None,
    handle_zero_tail: bool = True,
    eps: float = 1e-8,
) -> tuple[Tensor, Tensor]:
    """Optimal token baseline, OTB (verl ``core_algos.compute_optimal_token_baseline_advantage``).

    ``G = revcumsum(r m)`` (returned as ``returns``); per token ``w_t = (1 - 2 pi_t + sum_v
    pi_v^2) rho_t^2`` with ``pi_t = exp(old_logp)`` and ``rho`` the rollout IS weights (1 without);
    ``W_t = sum_{u <= t} w_u m_u``. Per group and padded position t,
    ``B_t = sum_i G_it W_it m_it / (sum_i W_it m_it + eps)``; ``A = (G - B) m``. A group with one
    non-empty response gets no baseline (``A = G``). With ``handle_zero_tail``, a unique longest
    response gets ``B = 0`` from the second-longest length on. ``sum_pi_squared`` is ``sum_v pi(v)^2``
    over the vocabulary at each token.
    """
    return _otb(token_rewards, mask, group_ids, old_logp, sum_pi_squared, rollout_is_weights,
                handle_zero_tail, eps, compact=False)


@torch.no_grad()
def tir_optimal_token_baseline(
    token_rewards: Tensor,
    mask: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    old_logp: Tensor,
    sum_pi_squared: Tensor,
    *,
    rollout_is_weights: Tensor | None = None,
    handle_zero_tail: bool = True,
    eps: float = 1e-8,
) -> tuple[Tensor, Tensor]:
    """Multi-turn OTB (verl ``core_algos.compute_multi_turn_optimal_token_baseline_advantage``).

    As :func:`optimal_token_baseline`, but the group's responses are aligned by the index of the
    valid token (holes such as tool-output tokens removed) instead of the padded position:
    ``B_k = sum_i G_i(k) W_i(k) / (sum_i W_i(k) + eps)`` over the responses with a k-th valid token,
    scattered back to the valid positions; the zero tail counts valid tokens too. ``returns`` is
    ``revcumsum(r m)`` over padded positions; advantages are 0 off the mask.
    """
    return _otb(token_rewards, mask, group_ids, old_logp, sum_pi_squared, rollout_is_weights,
                handle_zero_tail, eps, compact=True)


FUNCTIONS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    "gae": gae,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
    "rloo": rloo,
    "opo": opo,
    "grpo_passk": grpo_passk,
    "gpg": gpg_advantage,
    "remax": remax,
    "gdpo": gdpo,
}
"""verl's advantage functions by name, each with verl's own arguments (see the module docstring for each formula
and its verl function). The OTB pair (:func:`optimal_token_baseline`, :func:`tir_optimal_token_baseline`) needs policy
statistics (``old_logp``, ``sum_pi_squared``) and is called directly. What the trainer calls, one call shape for
every ``--advantage``, is :data:`rewardlab.algos.estimators.ESTIMATORS`."""


__all__ = [
    "FUNCTIONS",
    "gae",
    "gdpo",
    "gpg_advantage",
    "grpo_passk",
    "opo",
    "optimal_token_baseline",
    "outcome_token_rewards",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "rloo",
    "tir_optimal_token_baseline",
]
