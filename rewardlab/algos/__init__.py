"""GRPO, Dr. GRPO, DAPO and GSPO as plain tensor functions: advantages, ratios, losses, KL, presets.

What it simplifies: the four algorithms differ only in a handful of settings (advantage scale,
ratio level, clip range, aggregation, KL, DAPO's reward/batch shaping), so they are one function
set driven by one settings dataclass (:class:`Algo`, each field declared once) and presets written
as deltas from GRPO (``DAPO = replace(GRPO, eps_high=0.28, ...)``), with the few real differences as marked branches
(``# --- GSPO ---``, ``# --- dual clip ---``). The specification is ``docs/algorithms.md``
(shared); the numbers match verl 0.9.1 in float64 (``tests/test_algos_reference.py``).

Nothing here knows about models or trainers, so the loss drops into any loop::

    from rewardlab import algos

    adv = algos.group_advantages(rewards, prompt_ids, scale="std")          # (B,)
    loss, metrics = algos.policy_loss(logp, old_logp, adv, mask,
                                      **algos.loss_kwargs(algos.preset("dapo")),
                                      num_tokens=step_tokens, num_seqs=step_seqs)
    loss.backward()

Shapes: ``B`` rows (responses), ``T`` padded response length. Per-token tensors are ``(B, T)``
and ``mask`` is 1 on every generated token (EOS included) and 0 on padding. Padding values never
matter (they are replaced by zeros before any arithmetic, so even NaN padding is harmless).

Precision: ``policy_loss`` and ``kl_penalty`` compute in float32 for float16/bfloat16/float32
inputs and in float64 when ``logp`` is float64; the returned loss has that dtype and autograd
casts the gradient back to ``logp``'s dtype.

Run the tests with ``.venv/bin/python -m pytest -q tests/test_algos*.py``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from rewardlab.algos import objectives
from rewardlab.algos.objectives import OBJECTIVES, sequence_log_ratio
from rewardlab.errors import RewardlabError

Tensor = torch.Tensor
Number = int | float

AGGREGATIONS: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
    "token-sum",
)
"""Loss aggregation modes. ``token-sum`` (verl's unnormalised sum, scales with batch size) is kept
for comparison only; no preset uses it."""

KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3", "abs", "k1+", "k2+", "k3+", "abs+")
"""KL estimators (Schulman's k1/k2/k3, verl's abs; ``+`` = the value of X with the gradient of k2)."""

_KL_ALIASES = {"low_var_kl": "k3", "low_var_kl+": "k3+", "kl": "k1", "k1+": "k1+", "mse": "k2", "mse+": "k2+"}
RATIO_LEVELS: tuple[str, ...] = ("token", "sequence")
ADVANTAGE_SCALES: tuple[str, ...] = ("std", "none")
ESTIMATORS: tuple[str, ...] = ("rloo", "reinforce_pp", "reinforce_pp_baseline", "opo", "grpo_passk", "remax", "gpg",
                                "gae")
"""Advantage estimators beyond the group z-score (``rewardlab.algos.advantages``)."""
ADVANTAGES: tuple[str, ...] = ADVANTAGE_SCALES + ESTIMATORS
LOSSES: tuple[str, ...] = tuple(OBJECTIVES) + ("dpo",)
"""``Algo.loss`` choices: the per-token objectives, plus online DPO on group pairs (a branch of the update stage)."""

_K3_X_CLAMP = 20.0  # k3: x = lp_ref - lp clamped to [-20, 20]
_K3_VALUE_CLAMP = 10.0  # k3: value clamped to [-10, 10]


class AlgoError(RewardlabError, ValueError):
    """A bad algorithm setting or argument (a ``RewardlabError`` for the CLI, a ``ValueError`` for code)."""


# ----------------------------------------------------------------------------------------------
# the algorithm settings, declared once; presets as deltas
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Algo(Mapping):
    """The settings that make an algorithm, one field each (the only place they are declared).

    ``rewardlab train`` takes every field as an optional ``--key value`` override of the preset
    (``rewardlab.train.config.TrainConfig`` is generated from these fields, with these docstrings
    as its help), validation is :meth:`check`, and the saved ``config.yaml`` lists them under
    ``derived.algorithm``. An ``Algo`` reads like a mapping (``algo["eps_high"]``, ``dict(algo)``)
    so that :func:`preset`'s plain dicts and these objects are interchangeable.
    Fields marked ``loss`` in their metadata are :func:`policy_loss` keyword arguments.
    """

    advantage: str = "std"
    """Advantage: std (group z-score, GRPO/DAPO/GSPO), none (r - group mean, Dr. GRPO), or an estimator of rewardlab.algos.advantages (rloo, reinforce_pp, reinforce_pp_baseline, opo, grpo_passk, remax, gpg)."""
    gamma: float = 1.0
    """Discount of the per-token return for advantages reinforce_pp and gae (rewards sit on the last token)."""
    lam: float = 0.95
    """GAE lambda (advantage gae)."""
    critic: str | None = None
    """PPO value model for advantage gae: shared (a value head on the policy's trunk), separate (a copy of the policy as critic), or a model folder / hub id; None = none."""
    critic_detach_below: int = 0
    """Value-loss gradients reach only the top N trunk blocks of the critic (and its head); 0 = every block."""
    critic_lr: float | None = None
    """Learning rate of the value head (and a separate critic's trunk); None = the policy's --lr."""
    vf_coef: float = 0.5
    """Weight of the clipped value loss (verl compute_value_loss, 0.5 applied inside) in the step's loss."""
    cliprange_value: float = 0.5
    """Clip range of the value prediction around the old value (verl's critic default 0.5)."""
    value_group_coef: float = 0.0
    """Write-up option: weight of an MSE pulling the value at the first response token toward the group-mean reward."""
    loss: str = field(default="ppo", metadata={"loss": True})
    """Policy objective: ppo (clipped surrogate), cispo, gmpo, sapo, gpg, dro, kl_cov, clip_cov, dppo_tv, dppo_kl."""
    ratio: str = field(default="token", metadata={"loss": True})
    """Importance ratio level: token (GRPO, Dr. GRPO, DAPO) or sequence (GSPO, GSPO-token form; loss ppo only)."""
    eps_low: float = field(default=0.2, metadata={"loss": True})
    """Lower clip range: the ratio is clipped at 1 - eps_low (gmpo: the log-ratio at -eps_low; dppo: the trust region below)."""
    eps_high: float = field(default=0.2, metadata={"loss": True})
    """Upper clip range: the ratio is clipped at 1 + eps_high (DAPO's clip-higher raises it; gmpo: log-ratio; dppo: region above)."""
    clip_ratio_c: float | None = field(default=None, metadata={"loss": True})
    """Dual-clip constant (> 1) bounding the loss of A < 0 tokens at -A * c (dppo: the ratio truncation); None = off."""
    tau_pos: float = field(default=1.0, metadata={"loss": True})
    """SAPO gate temperature for tokens with A > 0."""
    tau_neg: float = field(default=1.05, metadata={"loss": True})
    """SAPO gate temperature for tokens with A <= 0."""
    dro_beta: float = field(default=0.1, metadata={"loss": True})
    """DRO: weight of the squared log-ratio penalty (dro_beta / 2 * (lp - lp_old)^2)."""
    cov_ratio: float = field(default=2e-4, metadata={"loss": True})
    """KL-Cov / Clip-Cov: fraction of the step's tokens selected by covariance (at least one)."""
    kl_cov_coef: float = field(default=0.1, metadata={"loss": True})
    """KL-Cov: coefficient of |lp - lp_old| on the selected tokens."""
    clip_cov_lb: float = field(default=1.0, metadata={"loss": True})
    """Clip-Cov: lower covariance bound of the tokens that may be zeroed."""
    clip_cov_ub: float = field(default=5.0, metadata={"loss": True})
    """Clip-Cov: upper covariance bound of the tokens that may be zeroed."""
    agg: str = field(default="seq-mean-token-mean", metadata={"loss": True})
    """Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm."""
    beta: float = field(default=0.04, metadata={"loss": True})
    """KL coefficient to the frozen reference model (0 = no reference model)."""
    kl: str = field(default="k3", metadata={"loss": True})
    """KL estimator: k1, k2, k3, k1+, k3+ (aliases low_var_kl, low_var_kl+, kl, mse)."""
    entropy_coef: float = field(default=0.0, metadata={"loss": True})
    """Entropy bonus coefficient (- entropy_coef * H per token)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop zero-variance groups and generate again (budget: max_gen_batches)."""
    overlong: bool = False
    """DAPO soft overlong punishment added to the reward (rewards.length.overlong_penalty)."""
    overlong_factor: float = 1.0
    """Size of the overlong penalty at max_new_tokens (its weight in the reward)."""
    overlong_cache: int | None = None
    """Soft-punish buffer L_cache in tokens (None = a quarter of max_new_tokens; a generation setting)."""
    overlong_filter: bool = False
    """Mask out (loss weight 0) completions that hit max_new_tokens without EOS."""
    mini_batches: int = 1
    """Optimizer steps per rollout batch per epoch (GSPO: 4, which makes it off-policy)."""
    clip_adapt: str | None = None
    """Write-up option: kl = adapt the clip range to the measured KL (to the reference when beta > 0, else to the old policy), eps = eps_base (1 + alpha (target - kl) / target); None = off."""
    clip_adapt_alpha: float = 1.0
    """KL-adaptive clip: alpha, the strength of the adaptation."""
    clip_adapt_target: float = 0.01
    """KL-adaptive clip: the KL target."""
    clip_adapt_min: float = 0.05
    """KL-adaptive clip: the smallest clip range."""
    clip_adapt_max: float = 0.4
    """KL-adaptive clip: the largest clip range."""
    reward_norm: str | None = None
    """Write-up option: ema = normalise rewards by a global, bias-corrected EMA of their mean and variance before the advantage; None = off."""
    reward_norm_decay: float = 0.99
    """EMA reward normalisation: the decay."""
    group_size_policy: str = "fixed"
    """Write-up option: fixed (group_size for every prompt) or variance (G = clamp(ceil(var_ema / threshold), min, max) per prompt, after a warm-up)."""
    group_size_min: int = 2
    """Variance-driven group size: the smallest G."""
    group_size_max: int = 16
    """Variance-driven group size: the largest G."""
    group_size_threshold: float = 0.02
    """Variance-driven group size: reward variance per extra completion."""
    group_size_warmup: int = 5
    """Variance-driven group size: steps with the fixed group_size before the policy applies."""
    bog_coef: float = 0.0
    """Write-up option: lambda of the best-of-group NLL (the unique best completion of each group, above the group mean); 0 = off."""
    bog_warmup: float = 0.1
    """Best-of-group loss: fraction of the steps over which lambda rises linearly from 0."""
    dpo_beta: float = 0.1
    """Online DPO (loss dpo): beta of the sigmoid loss on (best, worst) pairs of each group against the reference."""
    correction: str | None = None
    """Rollout correction with the engine's log-probs: a preset of rewardlab.algos.correction (verl's names: decoupled_token_is, decoupled_seq_is_rs, decoupled_token_icepop, bypass_ppo_clip, bypass_pg_is, ...); None = off."""
    correction_threshold: str | None = None
    """Override of the correction preset's IS threshold: a number u (truncate at u) or "l_u" (IcePop / MIS band)."""
    correction_rs_threshold: str | None = None
    """Override of the correction preset's rejection threshold(s), comma-separated like its options."""

    def __getitem__(self, key: str) -> Any:
        if key not in FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(FIELDS)

    def __len__(self) -> int:
        return len(FIELDS)

    def check(self) -> "Algo":
        """Raise :class:`AlgoError` naming the first bad field; return ``self``."""
        _check_choice("advantage", self.advantage, ADVANTAGES)
        _check_choice("loss", self.loss, LOSSES)
        _check_choice("ratio", self.ratio, RATIO_LEVELS)
        _check_choice("agg", self.agg, AGGREGATIONS)
        _check_choice("kl", _kl_kind(self.kl), KL_KINDS)
        _check_clip(self.eps_low, self.eps_high, self.clip_ratio_c, self.ratio, self.loss)
        if not _is_real(self.gamma) or not 0 < self.gamma <= 1:
            raise AlgoError(f"gamma must be in (0, 1], got {self.gamma!r}")
        if not _is_real(self.lam) or not 0 <= self.lam <= 1:
            raise AlgoError(f"lam must be in [0, 1], got {self.lam!r}")
        if (self.advantage == "gae") != (self.critic is not None):
            raise AlgoError("advantage 'gae' and a critic go together: set both (--advantage gae --critic shared|separate|MODEL) "
                            f"or neither, got advantage {self.advantage!r} and critic {self.critic!r}")
        cdb = self.critic_detach_below
        if isinstance(cdb, bool) or not isinstance(cdb, int) or cdb < 0:
            raise AlgoError(f"critic_detach_below must be an integer >= 0, got {cdb!r}")
        if self.critic_lr is not None and (not _is_real(self.critic_lr) or self.critic_lr <= 0):
            raise AlgoError(f"critic_lr must be a number > 0 or None, got {self.critic_lr!r}")
        if self.clip_adapt not in (None, "kl"):
            raise AlgoError(f"unknown clip_adapt {self.clip_adapt!r}; choose kl or None")
        if self.clip_adapt == "kl" and self.mini_batches == 1 and self.beta == 0:
            raise AlgoError("clip_adapt kl needs a KL to measure: beta > 0 (KL to the reference) or mini_batches > 1 "
                            "(KL to the old policy); one on-policy step without a reference has KL 0")
        if self.reward_norm not in (None, "ema"):
            raise AlgoError(f"unknown reward_norm {self.reward_norm!r}; choose ema or None")
        _check_choice("group_size_policy", self.group_size_policy, ("fixed", "variance"))
        for name in ("group_size_min", "group_size_max", "group_size_warmup"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "group_size_warmup" else 2):
                raise AlgoError(f"{name} must be an integer >= {0 if name == 'group_size_warmup' else 2}, got {v!r}")
        if self.group_size_min > self.group_size_max:
            raise AlgoError(f"group_size_min {self.group_size_min} is above group_size_max {self.group_size_max}")
        if self.group_size_policy == "variance" and (self.dynamic_sampling or self.mini_batches > 1):
            raise AlgoError("group_size_policy variance works with one mini-batch and no dynamic sampling")
        for name in ("clip_adapt_alpha", "clip_adapt_target", "clip_adapt_min", "clip_adapt_max", "group_size_threshold",
                     "dpo_beta"):
            if not _is_real(getattr(self, name)) or getattr(self, name) <= 0:
                raise AlgoError(f"{name} must be a number > 0, got {getattr(self, name)!r}")
        if not _is_real(self.reward_norm_decay) or not 0 < self.reward_norm_decay < 1:
            raise AlgoError(f"reward_norm_decay must be in (0, 1), got {self.reward_norm_decay!r}")
        if not _is_real(self.bog_warmup) or not 0 <= self.bog_warmup <= 1:
            raise AlgoError(f"bog_warmup must be in [0, 1], got {self.bog_warmup!r}")
        if self.loss == "dpo" and (self.critic is not None or self.mini_batches > 1 or self.correction is not None):
            raise AlgoError("loss dpo is an on-policy pairwise loss: no critic, one mini-batch, no rollout correction")
        for name in ("vf_coef", "cliprange_value", "value_group_coef", "bog_coef"):
            if not _is_real(getattr(self, name)) or getattr(self, name) < 0:
                raise AlgoError(f"{name} must be a number >= 0, got {getattr(self, name)!r}")
        for name in ("tau_pos", "tau_neg", "cov_ratio"):
            if not _is_real(getattr(self, name)) or getattr(self, name) <= 0:
                raise AlgoError(f"{name} must be a number > 0, got {getattr(self, name)!r}")
        for name in ("dro_beta", "kl_cov_coef"):
            if not _is_real(getattr(self, name)) or getattr(self, name) < 0:
                raise AlgoError(f"{name} must be a number >= 0, got {getattr(self, name)!r}")
        if not (_is_real(self.clip_cov_lb) and _is_real(self.clip_cov_ub)) or self.clip_cov_lb >= self.clip_cov_ub:
            raise AlgoError(f"clip_cov_lb must be below clip_cov_ub, got {self.clip_cov_lb!r} and {self.clip_cov_ub!r}")
        if not _is_real(self.beta) or self.beta < 0:
            raise AlgoError(f"beta must be a number >= 0, got {self.beta!r}")
        if not _is_real(self.entropy_coef):
            raise AlgoError(f"entropy_coef must be a number, got {self.entropy_coef!r}")
        if not _is_real(self.overlong_factor) or self.overlong_factor < 0:
            raise AlgoError(f"overlong_factor must be a number >= 0, got {self.overlong_factor!r}")
        mb, cache = self.mini_batches, self.overlong_cache
        if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
            raise AlgoError(f"mini_batches must be an integer >= 1, got {mb!r}")
        if cache is not None and (isinstance(cache, bool) or not isinstance(cache, int) or cache < 1):
            raise AlgoError(f"overlong_cache must be an integer >= 1 or None, got {cache!r}")
        if self.correction is not None or self.correction_threshold is not None or self.correction_rs_threshold is not None:
            self.rollout_correction()  # a bad preset name or threshold raises here
        for name in ("dynamic_sampling", "overlong", "overlong_filter"):
            if not isinstance(getattr(self, name), bool):
                raise AlgoError(f"{name} must be true or false, got {getattr(self, name)!r}")
        return self

    def rollout_correction(self) -> Any:
        """The :class:`rewardlab.algos.correction.Correction` these fields name, or None when off."""
        from rewardlab.algos import correction  # it imports this module

        if self.correction is None:
            if self.correction_threshold is not None or self.correction_rs_threshold is not None:
                raise AlgoError("correction_threshold / correction_rs_threshold need a correction preset (--correction)")
            return None
        over: dict[str, Any] = {}
        if self.correction_threshold is not None:
            over["is_threshold"] = _threshold(self.correction_threshold)
        if self.correction_rs_threshold is not None:
            over["rs_threshold"] = _threshold(self.correction_rs_threshold)
        return correction.preset(self.correction, **over)

    def with_overrides(self, **overrides: Any) -> "Algo":
        """A checked copy with ``overrides`` applied (KL aliases resolved); unknown names raise."""
        unknown = sorted(set(overrides) - set(FIELDS))
        if unknown:
            raise AlgoError(f"unknown field(s) {', '.join(map(repr, unknown))}; valid fields: {', '.join(FIELDS)}")
        out = replace(self, **overrides)
        return replace(out, kl=_kl_kind(out.kl)).check()


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Algo))
"""The algorithm field names, in declaration order."""

LOSS_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Algo) if f.metadata.get("loss"))
"""Algorithm fields that are ``policy_loss`` keyword arguments (``loss`` in the field's metadata)."""

GRPO = Algo()
"""DeepSeekMath GRPO: group z-score, token ratio, symmetric clip 0.2, sequence mean, k3 KL at 0.04 (the defaults)."""
DR_GRPO = replace(GRPO, advantage="none", agg="seq-mean-token-sum-norm", beta=0.0)
"""Dr. GRPO: r - mean (no std), sum over tokens / the constant max_new_tokens, no KL."""
DAPO = replace(GRPO, eps_high=0.28, agg="token-mean", beta=0.0, dynamic_sampling=True, overlong=True)
"""DAPO: clip-higher, token mean, no KL, dynamic sampling, soft overlong punishment."""
GSPO = replace(GRPO, ratio="sequence", eps_low=3e-4, eps_high=4e-4, beta=0.0, mini_batches=4)
"""GSPO: sequence-level ratio, tiny clip range, no KL, 4 mini-batches per rollout (off-policy)."""

RLOO = replace(GRPO, advantage="rloo", agg="token-mean", beta=0.0)
"""RLOO (Ahmadian et al. 2024): leave-one-out baseline r_i - mean of the others, no std, no KL."""
REINFORCE_PP = replace(GRPO, advantage="reinforce_pp", agg="token-mean", beta=0.001, kl="k2")
"""REINFORCE++ (Hu et al. 2025): return whitened over the whole batch, no critic; k2 KL at 0.001 (verl's example)."""
REINFORCE_PP_BASELINE = replace(REINFORCE_PP, advantage="reinforce_pp_baseline")
"""REINFORCE++-baseline: r - group mean, then whitened over the batch's tokens."""
CISPO = replace(GRPO, loss="cispo", eps_low=10.0, eps_high=0.2, agg="token-mean", beta=0.0)
"""CISPO (MiniMax-M1, 2025): clipped, stop-gradient IS weight times the REINFORCE term; no lower clip (verl's example)."""
GMPO = replace(GRPO, loss="gmpo", eps_low=0.4, eps_high=0.4, beta=0.0)
"""GMPO (Zhao et al. 2025): geometric mean of token ratios per sequence, log-ratio clipped to [-0.4, 0.4]."""
SAPO = replace(GRPO, loss="sapo", beta=0.0)
"""SAPO (Qwen, 2025): a sigmoid gate instead of the hard clip, tau_pos 1.0, tau_neg 1.05."""
CLIP_COV = replace(DAPO, loss="clip_cov", dynamic_sampling=False, overlong=False)
"""Clip-Cov (Cui et al. 2025): clip-higher PPO whose highest-covariance tokens lose their gradient."""
KL_COV = replace(CLIP_COV, loss="kl_cov")
"""KL-Cov (Cui et al. 2025): unclipped ratio loss plus |log ratio| on the highest-covariance tokens."""
DPPO_TV = replace(GRPO, loss="dppo_tv", eps_low=0.15, eps_high=0.15, clip_ratio_c=3.0, agg="token-mean", beta=0.0)
"""DPPO, total-variation region: tokens whose probability moved more than 0.15 leave the loss."""
DPPO_KL = replace(DPPO_TV, loss="dppo_kl", eps_low=0.05, eps_high=0.05)
"""DPPO, binary-KL region of 0.05."""
GPG = replace(GRPO, advantage="gpg", loss="gpg", agg="token-mean", beta=0.0)
"""GPG (Chu et al. 2025): plain policy gradient on r - mean scaled by the batch's share of non-zero rewards."""
OPO = replace(GRPO, advantage="opo", agg="token-mean", beta=0.0)
"""OPO (Hao et al. 2025): length-weighted group baseline, strictly on-policy."""
REMAX = replace(GRPO, advantage="remax", agg="token-mean", beta=0.0)
"""ReMax (Li et al. 2023): the reward of the prompt's greedy completion as the baseline."""
GRPO_PASSK = replace(GRPO, advantage="grpo_passk")
"""Pass@k training (Chen et al. 2025): only the best response of a group gets r_max - r_second."""

PPO = replace(GRPO, advantage="gae", critic="separate", agg="token-mean", beta=0.0)
"""PPO with a value model (Schulman et al. 2017; the RLHF form of Ouyang et al. 2022): GAE (gamma 1, lambda 0.95) on a separate critic, clipped value loss."""

DPO = replace(GRPO, loss="dpo", beta=0.0)
"""Online DPO (Rafailov et al. 2023; on-policy pairs as in Guo et al. 2024): the best and worst completion of each group, beta 0.1."""

PRESETS: dict[str, Algo] = {
    "grpo": GRPO, "dr_grpo": DR_GRPO, "dapo": DAPO, "gspo": GSPO,
    "rloo": RLOO, "reinforce_pp": REINFORCE_PP, "reinforce_pp_baseline": REINFORCE_PP_BASELINE, "cispo": CISPO,
    "gmpo": GMPO, "sapo": SAPO, "clip_cov": CLIP_COV, "kl_cov": KL_COV, "dppo_tv": DPPO_TV, "dppo_kl": DPPO_KL,
    "gpg": GPG, "opo": OPO, "remax": REMAX, "grpo_passk": GRPO_PASSK, "ppo": PPO,
    "dpo": DPO,
}
"""The presets of ``docs/algorithms.md``; their keys are the one list of algorithm names."""

ALGOS: tuple[str, ...] = tuple(PRESETS)
"""The algorithm names ``--algo`` accepts."""


def validate_algo(cfg: Mapping[str, Any]) -> None:
    """Check an algorithm dict (a preset with overrides); raise :class:`AlgoError` naming the bad field.

    Missing fields take :class:`Algo`'s defaults."""
    unknown = sorted(set(cfg) - set(FIELDS))
    if unknown:
        raise AlgoError(f"unknown algorithm field(s) {', '.join(map(repr, unknown))}; valid fields: {', '.join(FIELDS)}")
    replace(Algo(), **dict(cfg)).check()


def get(name: str, **overrides: Any) -> Algo:
    """Preset ``name`` as a checked :class:`Algo` with ``overrides`` applied."""
    if name not in PRESETS:
        raise AlgoError(f"unknown algorithm preset {name!r}; choose one of: {', '.join(ALGOS)}")
    unknown = sorted(set(overrides) - set(FIELDS))
    if unknown:
        raise AlgoError(
            f"unknown field(s) {', '.join(map(repr, unknown))} for preset {name!r}; valid fields: {', '.join(FIELDS)}"
        )
    return PRESETS[name].with_overrides(**overrides)


def preset(name: str, **overrides: Any) -> dict[str, Any]:
    """A fresh, validated plain-dict copy of preset ``name`` with ``overrides`` applied.

    >>> preset("dapo", eps_high=0.3)["eps_high"]
    0.3

    Raises :class:`AlgoError` (a ``RewardlabError`` and a ``ValueError``) for an unknown preset
    name, an unknown field, or a value that cannot work (e.g. ``clip_ratio_c <= 1``).
    """
    return dict(get(name, **overrides))


def loss_kwargs(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ``policy_loss`` keyword arguments in an algorithm dict or :class:`Algo` (``LOSS_FIELDS`` present)."""
    return {k: cfg[k] for k in LOSS_FIELDS if k in cfg}


def optimizer_steps_per_rollout(algo: Mapping[str, Any], epochs: int = 1) -> int:
    """Optimizer steps one rollout batch gets: ``mini_batches x epochs`` (GSPO: 4 per epoch)."""
    return int(algo["mini_batches"]) * epochs


# ----------------------------------------------------------------------------------------------
# advantages and DAPO's batch/reward shaping
# ----------------------------------------------------------------------------------------------


def group_advantages(
    rewards: Tensor | Sequence[float],
    group_ids: Tensor | Sequence[Hashable],
    *,
    scale: str = "std",
    eps: float = 1e-6,
) -> Tensor:
    """Per-response advantages from per-response rewards, with statistics per prompt id.

    ``scale="std"`` (GRPO, DAPO, GSPO): ``A_i = (r_i - mean_g) / (std_g + eps)`` with the unbiased
    (n-1) std; ``scale="none"`` (Dr. GRPO): ``A_i = r_i - mean_g``. Groups are formed by equal
    ``group_ids`` (any hashables, or an integer tensor) in any order. As in verl, a group with one
    member has mean 0 and std 1 (its advantage is ``r / (1 + eps)``, or ``r`` unscaled), and a group
    of two or more equal rewards gets advantage exactly 0.

    Returns a ``(B,)`` tensor: ``rewards``' dtype when it is a floating tensor, else float32.
    Statistics are computed in float64. Broadcast over tokens as ``adv[:, None]``, or pass it to
    :func:`policy_loss` as is.
    """
    _check_choice("scale", scale, ADVANTAGE_SCALES)
    r, out_dtype = _as_float_vector(rewards, "rewards")
    inv, n_groups = _group_index(group_ids, len(r), r.device)
    r64 = r.to(torch.float64)  # (B,)
    if not bool(torch.isfinite(r64).all()):
        raise AlgoError("rewards must be finite numbers (map ungradable None scores to a value first)")
    count = torch.bincount(inv, minlength=n_groups).to(torch.float64)  # (G,)
    mean = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inv, r64) / count  # (G,)
    dev = r64 - mean[inv]  # (B,)
    ss = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inv, dev * dev)  # (G,)
    std = torch.sqrt(ss / (count - 1).clamp(min=1))  # (G,) unbiased
    single = count == 1  # (G,)
    mean = torch.where(single, torch.zeros_like(mean), mean)  # verl: singleton mean 0
    std = torch.where(single, torch.ones_like(std), std)  # verl: singleton std 1
    gmax = torch.full((n_groups,), -math.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r64, "amax")
    gmin = torch.full((n_groups,), math.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r64, "amin")
    all_equal = (gmax == gmin) & ~single  # (G,)
    adv = r64 - mean[inv]  # (B,)
    if scale == "std":
        adv = adv / (std[inv] + eps)
    adv = torch.where(all_equal[inv], torch.zeros_like(adv), adv)  # exact 0, not float noise
    return adv.to(out_dtype)


def dynamic_sampling_keep(scores: Tensor | Sequence[float], group_ids: Tensor | Sequence[Hashable]) -> Tensor:
    """DAPO's dynamic-sampling filter: a ``(B,)`` bool mask, True for rows whose group survives.

    A group with two or more members is dropped when its scores (accuracy or the chosen metric)
    have zero spread (all equal); a single-member group is kept, as in verl. The caller keeps
    generating until enough groups survive, then truncates (``docs/algorithms.md``). The fraction
    of dropped groups is the ``frac_zero_std_groups`` metric.
    """
    s, _ = _as_float_vector(scores, "scores")
    inv, n_groups = _group_index(group_ids, len(s), s.device)
    s64 = s.to(torch.float64)  # (B,)
    count = torch.bincount(inv, minlength=n_groups)  # (G,)
    gmax = torch.full((n_groups,), -math.inf, dtype=torch.float64, device=s.device).scatter_reduce(0, inv, s64, "amax")
    gmin = torch.full((n_groups,), math.inf, dtype=torch.float64, device=s.device).scatter_reduce(0, inv, s64, "amin")
    keep_group = (gmax != gmin) | (count == 1)  # (G,)
    return keep_group[inv]  # (B,)


def overlong_penalty(
    lengths: Tensor | Sequence[int], max_len: int, cache_len: int, factor: float = 1.0
) -> Tensor:
    """DAPO's soft overlong punishment, to be added to each response's reward (tensor form).

    ``rewardlab train`` and the ``Overlong`` reward use ``rewardlab.rewards.length.overlong_penalty``
    (per completion, float64), the one implementation the trainer runs; this batch form stays for
    code that holds a length tensor and for the tests that pin it to verl's numbers, and is to go
    once its tests move to tests/test_length.py.

    ``penalty = min(-(n - (max_len - cache_len)) / cache_len * factor, 0)``: 0 up to
    ``max_len - cache_len`` tokens, falling linearly to ``-factor`` at ``max_len``. ``lengths`` are
    response lengths in tokens (EOS included). Returns a ``(B,)`` float tensor (``lengths``' dtype
    when floating, else float32).
    """
    if not (isinstance(max_len, int) and isinstance(cache_len, int)) or not 0 < cache_len <= max_len:
        raise AlgoError(f"overlong shaping needs integers 0 < cache_len <= max_len, got cache_len={cache_len!r}, max_len={max_len!r}")
    if not _is_real(factor) or factor < 0:
        raise AlgoError(f"overlong factor must be a number >= 0, got {factor!r}")
    n, out_dtype = _as_float_vector(lengths, "lengths")
    n64 = n.to(torch.float64)  # (B,)
    exceed = n64 - (max_len - cache_len)  # (B,)
    return (-exceed / cache_len * factor).clamp(max=0.0).to(out_dtype)  # (B,)


# ----------------------------------------------------------------------------------------------
# KL, aggregation, policy loss
# ----------------------------------------------------------------------------------------------


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL(pi || pi_ref) estimate, ``(B, T)``, unmasked, with gradient through ``logp``.

    With ``x = ref_logp - logp``: ``k1 = -x``; ``k2 = x^2 / 2``; ``k3`` (``low_var_kl``) =
    ``exp(x) - x - 1`` with ``x`` clamped to [-20, 20] and the value to [-10, 10]; ``abs = |x|``
    (verl). ``X+`` (k1+, k2+, k3+, abs+) has the value of X and the gradient of k2 (straight-through), which is the
    unbiased gradient of KL(pi || pi_ref) when sampling from pi. Computed in float32 for low
    precision inputs and in float64 for float64 ``logp``.
    """
    kind = _kl_kind(kind)
    _check_choice("kl", kind, KL_KINDS)
    cdt = _compute_dtype(logp)
    lp = logp.to(cdt)  # (B, T)
    x = ref_logp.to(cdt) - lp  # (B, T)
    base = kind.rstrip("+")
    if base == "k1":
        value = -x  # (B, T)
    elif base == "abs":
        value = x.abs()  # (B, T)
    elif base == "k2":
        value = 0.5 * x * x  # (B, T)
    else:
        xc = x.clamp(-_K3_X_CLAMP, _K3_X_CLAMP)  # (B, T)
        value = (torch.exp(xc) - xc - 1).clamp(-_K3_VALUE_CLAMP, _K3_VALUE_CLAMP)  # (B, T)
    if kind.endswith("+"):  # straight-through: forward = value, backward = d(k2)
        k2 = 0.5 * x * x  # (B, T)
        value = value.detach() + (k2 - k2.detach())  # (B, T)
    return value


def aggregate(
    values: Tensor,
    mask: Tensor,
    agg: str,
    *,
    max_len: int | None = None,
    num_tokens: Number | Tensor | None = None,
    num_seqs: Number | Tensor | None = None,
) -> Tensor:
    """Reduce per-token ``values`` ``(B, T)`` to one number under ``agg`` (see ``AGGREGATIONS``).

    With ``S_i = sum_t m[i,t] values[i,t]``, ``n_i = sum_t m[i,t]``, ``B_eff`` = rows with
    ``n_i > 0``: ``token-mean`` = ``sum S_i / N``; ``seq-mean-token-mean`` = ``sum (S_i / n_i) / B_eff``;
    ``seq-mean-token-sum`` = ``sum S_i / B_eff``; ``seq-mean-token-sum-norm`` = ``sum S_i / max_len / B_eff``;
    ``token-sum`` = ``sum S_i``. ``N`` is ``num_tokens`` and ``B_eff`` is ``num_seqs`` when given
    (the whole optimizer step's counts, so micro-batch losses sum to the step's loss), else this
    batch's own counts.
    """
    _check_choice("agg", agg, AGGREGATIONS)
    m = mask.bool()  # (B, T)
    v = torch.where(m, values, torch.zeros((), dtype=values.dtype, device=values.device))  # (B, T)
    mf = m.to(values.dtype)  # (B, T)
    if agg == "token-mean":
        denom = _denominator(num_tokens, mf.sum(), "num_tokens")
        return v.sum() / denom
    if agg == "token-sum":
        return v.sum()
    n = mf.sum(-1)  # (B,)
    seq_sum = v.sum(-1)  # (B,)
    if agg == "seq-mean-token-mean":
        per_seq = seq_sum / n.clamp(min=1)  # (B,); empty rows contribute 0
    elif agg == "seq-mean-token-sum":
        per_seq = seq_sum  # (B,)
    else:  # seq-mean-token-sum-norm (Dr. GRPO): a constant L, never the padded width
        if max_len is None or not _is_real(max_len) or max_len <= 0:
            raise AlgoError("agg 'seq-mean-token-sum-norm' needs max_len = the max new tokens (a constant > 0)")
        per_seq = seq_sum / max_len  # (B,)
    denom = _denominator(num_seqs, (n > 0).sum().to(values.dtype), "num_seqs")
    return per_seq.sum() / denom


METRIC_REDUCE: dict[str, str] = {
    "loss": "sum",
    "pg_loss": "sum",
    "clip_frac": "token",
    "clip_frac_low": "token",
    "clip_frac_high": "token",
    "dual_clip_frac": "token",
    "trunc_frac": "token",
    "cov_frac": "token",
    "abs_kl_old": "token",
    "vf_loss": "sum",
    "bog/nll": "sum",
    "bog/rows": "sum",
    "dpo/loss": "sum",
    "dpo/pairs": "sum",
    "vf_clipfrac": "token",
    "value_group_mse": "sum",
    "values/mean": "token",
    "is_weight/mean": "token",
    "approx_kl_old": "token",
    "ratio/mean": "token",
    "ratio/min": "min",
    "ratio/max": "max",
    "kl_ref": "token",
    "entropy": "token",
    "tokens": "sum",
    "seqs": "sum",
}
"""How each ``policy_loss`` metric combines over micro-batches (and ranks): ``sum`` (the losses,
already divided by the step's denominators, and the counts), ``token`` (a mean over this batch's
response tokens: weight by ``tokens``), ``min`` / ``max``. :func:`combine_metrics` applies it."""


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss: str = "ppo",
    ratio: str = "token",
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_ratio_c: float | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    dro_beta: float = 0.1,
    cov_ratio: float = 2e-4,
    kl_cov_coef: float = 0.1,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    agg: str = "token-mean",
    max_len: int | None = None,
    ref_logp: Tensor | None = None,
    beta: float = 0.0,
    kl: str = "k3",
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    is_weights: Tensor | None = None,
    select: Tensor | None = None,
    num_tokens: Number | Tensor | None = None,
    num_seqs: Number | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The policy loss (to minimise) and its metrics, for any objective of :data:`OBJECTIVES`.

    Args:
        logp: ``(B, T)`` log-probs of the sampled tokens under the current policy (with grad).
        old_logp: ``(B, T)`` log-probs under the policy that generated the batch (no grad).
            On-policy (one optimizer step per rollout batch) pass ``logp.detach()``; in bypass mode
            the rollout engine's log-probs.
        advantages: ``(B,)`` per response (from :func:`group_advantages`) or ``(B, T)`` per token.
        mask: ``(B, T)`` 1/True on response tokens (EOS included), 0 on padding (and on tokens a
            rollout-correction rejection removed).
        loss: the objective (``rewardlab.algos.objectives``): ppo (GRPO/DAPO/GSPO's clipped
            surrogate), cispo, gmpo, sapo, gpg, dro, kl_cov, clip_cov, dppo_tv, dppo_kl.
        ratio: ``"token"`` or ``"sequence"`` (GSPO, in its GSPO-token form; ``loss="ppo"`` only).
        eps_low, eps_high: clip range ``[1 - eps_low, 1 + eps_high]`` (ppo, cispo, gmpo's log-ratio
            range, clip_cov); DPPO's trust-region sizes.
        clip_ratio_c: dual-clip constant (> 1) bounding the loss of A < 0 tokens at ``-A * c``
            (ppo); DPPO's ratio truncation. None = off. Not defined for ``ratio="sequence"``.
        tau_pos, tau_neg, dro_beta, cov_ratio, kl_cov_coef, clip_cov_lb, clip_cov_ub: the settings
            of SAPO, DRO, KL-Cov and Clip-Cov (see :class:`Algo`).
        agg: aggregation mode (see :func:`aggregate`); ``max_len`` is the constant L of
            ``seq-mean-token-sum-norm``. SAPO always uses seq-mean-token-mean and GMPO a mean over
            sequences (as verl).
        ref_logp, beta, kl: KL to a frozen reference, ``beta * k`` per token aggregated with
            ``agg``; with ``beta=0`` and ``ref_logp`` given, ``kl_ref`` is still reported.
        entropy, entropy_coef: ``(B, T)`` per-token entropy; ``- entropy_coef * H`` per token.
        is_weights: ``(B, T)`` rollout-correction weights (detached) that multiply the policy
            loss per token (GMPO: their per-sequence geometric mean), as verl's ``rollout_is_weights``.
        select: ``(B, T)`` bool, the KL-Cov / Clip-Cov token selection made over the whole step
            (:func:`rewardlab.algos.objectives.cov_select`); None = select within this call (verl).
        num_tokens, num_seqs: the whole optimizer step's response-token count and B_eff (summed
            over micro-batches and ranks). Pass them when a step is split, so that the sum of the
            micro-batch losses equals the loss of the step (exactly the same gradient).

    Returns:
        ``(loss, metrics)``: ``loss`` a 0-dim tensor (float32, or float64 for float64 ``logp``);
        ``metrics`` a dict of detached 0-dim tensors named in :data:`METRIC_REDUCE`
        (``kl_ref`` only with ``ref_logp``, ``entropy`` only with ``entropy``). Token metrics are
        means over this call's response tokens; combine calls with :func:`combine_metrics`.
    """
    _check_choice("loss", loss, tuple(OBJECTIVES))
    _check_choice("ratio", ratio, RATIO_LEVELS)
    _check_choice("agg", agg, AGGREGATIONS)
    kl = _kl_kind(kl)
    _check_choice("kl", kl, KL_KINDS)
    _check_clip(eps_low, eps_high, clip_ratio_c, ratio, loss)
    if logp.dim() != 2:
        raise AlgoError(f"logp must be (B, T), got shape {tuple(logp.shape)}")
    for name, t in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp), ("entropy", entropy),
                    ("is_weights", is_weights), ("select", select)):
        if t is not None and t.shape != logp.shape:
            raise AlgoError(f"{name} must have logp's shape {tuple(logp.shape)}, got {tuple(t.shape)}")
    if advantages.shape not in (logp.shape, logp.shape[:1]):
        raise AlgoError(f"advantages must be (B,) or (B, T) = {tuple(logp.shape)}, got {tuple(advantages.shape)}")
    if beta != 0 and ref_logp is None:
        raise AlgoError("beta != 0 needs ref_logp (log-probs under the reference model)")
    if entropy_coef != 0 and entropy is None:
        raise AlgoError("entropy_coef != 0 needs the per-token entropy tensor")

    cdt = _compute_dtype(logp)
    m = mask.bool()  # (B, T)
    mf = m.to(cdt)  # (B, T)
    zero = torch.zeros((), dtype=cdt, device=logp.device)
    lp = torch.where(m, logp.to(cdt), zero)  # (B, T) padding -> 0 (also blocks NaN gradients)
    lp_old = torch.where(m, old_logp.detach().to(cdt), zero)  # (B, T)
    adv = advantages.detach().to(cdt)
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(lp)  # (B, T)
    adv = torch.where(m, adv, zero)  # (B, T)
    params = objectives.Params(ratio=ratio, eps_low=eps_low, eps_high=eps_high, clip_ratio_c=clip_ratio_c,
                               tau_pos=tau_pos, tau_neg=tau_neg, dro_beta=dro_beta, cov_ratio=cov_ratio,
                               kl_cov_coef=kl_cov_coef, clip_cov_lb=clip_cov_lb, clip_cov_ub=clip_cov_ub)
    obj = objectives.OBJECTIVES[loss](lp, lp_old, adv, m, params, None if select is None else select.bool() & m)
    w = None if is_weights is None else torch.where(m, is_weights.detach().to(cdt), zero)  # (B, T)

    kw = {"max_len": max_len, "num_tokens": num_tokens, "num_seqs": num_seqs}
    if obj.seq is not None:
        # --- GMPO: one loss per sequence, averaged over the step's sequences (verl: all B rows) ---
        seq_loss = obj.seq  # (B,)
        if w is not None:  # the per-sequence geometric mean of the weights, as verl
            n = mf.sum(-1)  # (B,)
            seq_loss = seq_loss * torch.exp((torch.log(w + 1e-10) * mf).sum(-1) / (n + 1e-8))  # (B,)
        pg = seq_loss.sum() / _denominator(num_seqs, torch.tensor(float(len(seq_loss)), dtype=cdt), "num_seqs")
    else:
        tok_loss = obj.tok if w is None else obj.tok * w  # (B, T)
        pg = aggregate(tok_loss, m, obj.agg or agg, **kw)
    total = pg
    kl_tok = None
    if ref_logp is not None:
        lp_ref = torch.where(m, ref_logp.detach().to(cdt), zero)  # (B, T)
        kl_tok = kl_penalty(lp, lp_ref, kl)  # (B, T)
        if beta != 0:
            total = total + beta * aggregate(kl_tok, m, agg, **kw)
    ent = None
    if entropy is not None:
        ent = torch.where(m, entropy.to(cdt), zero)  # (B, T)
        if entropy_coef != 0:
            total = total - entropy_coef * aggregate(ent, m, agg, **kw)

    # --- metrics (detached; token means over this call's response tokens) ---
    with torch.no_grad():
        n_tok = mf.sum()
        denom = n_tok.clamp(min=1)
        r = obj.ratio if obj.ratio is not None else objectives.token_ratio(lp.detach() - lp_old)  # (B, T)
        big = torch.finfo(cdt).max
        one = torch.ones((), dtype=cdt, device=r.device)
        metrics: dict[str, Tensor] = {"loss": total.detach(), "pg_loss": pg.detach()}
        for name, per_tok in obj.metrics.items():
            metrics[name] = (per_tok.to(cdt) * mf).sum() / denom
        metrics.update({
            "approx_kl_old": ((lp_old - lp.detach()) * mf).sum() / denom,
            "ratio/mean": (r * mf).sum() / denom,
            # no host sync: an empty batch reports 1.0 (combine_metrics ignores it)
            "ratio/min": torch.where(n_tok > 0, torch.where(m, r, big).min(), one),
            "ratio/max": torch.where(n_tok > 0, torch.where(m, r, -big).max(), one),
        })
        if w is not None:
            metrics["is_weight/mean"] = (w * mf).sum() / denom
        if kl_tok is not None:
            metrics["kl_ref"] = (kl_tok.detach() * mf).sum() / denom
        if ent is not None:
            metrics["entropy"] = (ent.detach() * mf).sum() / denom
        metrics["tokens"] = n_tok
        metrics["seqs"] = (mf.sum(-1) > 0).sum().to(cdt)
    return total, metrics


def combine_metrics(parts: Iterable[Mapping[str, Tensor | float]]) -> dict[str, float]:
    """Combine ``policy_loss`` metrics of several micro-batches (or ranks' gathered lists) into floats.

    ``sum`` metrics are added (``loss`` then equals the step's loss when ``num_tokens``/``num_seqs``
    were passed), ``token`` metrics are averaged weighted by ``tokens``, ``min``/``max`` reduce.
    Micro-batches without response tokens do not affect means, minima or maxima. Keys not in
    :data:`METRIC_REDUCE` are averaged with equal weight.
    """
    parts = [{k: float(v) for k, v in p.items()} for p in parts]
    out: dict[str, float] = {}
    keys: list[str] = []
    for p in parts:
        keys.extend(k for k in p if k not in keys)
    total_tokens = sum(p.get("tokens", 0.0) for p in parts)
    for k in keys:
        have = [p for p in parts if k in p]
        how = METRIC_REDUCE.get(k, "plain")
        if how == "sum":
            out[k] = sum(p[k] for p in have)
        elif how == "token":
            w = sum(p.get("tokens", 0.0) for p in have)
            out[k] = sum(p[k] * p.get("tokens", 0.0) for p in have) / w if w > 0 else 0.0
        elif how in ("min", "max"):
            vals = [p[k] for p in have if p.get("tokens", 0.0) > 0] or [1.0]
            out[k] = min(vals) if how == "min" else max(vals)
        else:
            out[k] = sum(p[k] for p in have) / len(have)
    if parts and "tokens" not in keys:
        out["tokens"] = total_tokens
    return out


def step_counts(masks: Tensor | Iterable[Tensor]) -> tuple[int, int]:
    """``(num_tokens, num_seqs)`` of an optimizer step from its response mask(s) (all micro-batches).

    Sum these over ranks (``all_reduce_sum``) before passing them to :func:`policy_loss`.
    """
    if isinstance(masks, Tensor):
        masks = [masks]
    tokens = seqs = 0
    for mk in masks:
        mb = mk.bool()  # (B, T)
        tokens += int(mb.sum())
        seqs += int(mb.any(-1).sum())
    return tokens, seqs


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _compute_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _threshold(text: Any) -> float | str:
    """A correction threshold from text: a number stays a number, "l_u" or "a,b" stays text."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return str(text)


def _kl_kind(kind: Any) -> Any:
    return _KL_ALIASES.get(kind, kind) if isinstance(kind, str) else kind


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise AlgoError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


def _check_clip(eps_low: Any, eps_high: Any, clip_ratio_c: Any, ratio: str, loss: str = "ppo") -> None:
    if not _is_real(eps_low) or eps_low < 0 or (eps_low >= 1 and loss != "cispo"):
        # cispo alone: eps_low >= 1 means no lower clip (MiniMax-M1 / verl's example uses 10)
        raise AlgoError(f"eps_low must be in [0, 1), got {eps_low!r}")
    if not _is_real(eps_high) or eps_high < 0:
        raise AlgoError(f"eps_high must be >= 0, got {eps_high!r}")
    if clip_ratio_c is not None:
        if not _is_real(clip_ratio_c) or clip_ratio_c <= 1:
            raise AlgoError(f"clip_ratio_c (dual clip) must be > 1 or None, got {clip_ratio_c!r}")
        if ratio == "sequence":
            raise AlgoError("dual clip (clip_ratio_c) is not defined for the sequence ratio (GSPO); set it to None")
    if ratio == "sequence" and loss != "ppo":
        raise AlgoError(f"ratio 'sequence' (GSPO) is defined for loss 'ppo' only, got loss {loss!r}")


def _denominator(given: Number | Tensor | None, local: Tensor, name: str) -> Tensor | float:
    if given is None:
        return local.clamp(min=1)
    if isinstance(given, Tensor):
        return given.to(local.dtype)
    if not _is_real(given) or given <= 0:
        raise AlgoError(f"{name} must be > 0 (the optimizer step's total), got {given!r}")
    return float(given)


def _as_float_vector(x: Tensor | Sequence[float], name: str) -> tuple[Tensor, torch.dtype]:
    if isinstance(x, Tensor):
        t = x.detach()
        out_dtype = t.dtype if t.is_floating_point() else torch.float32
    else:
        t = torch.as_tensor(list(x), dtype=torch.float64)
        out_dtype = torch.float32
    if t.dim() != 1:
        raise AlgoError(f"{name} must be one value per response (B,), got shape {tuple(t.shape)}")
    return t, out_dtype


def _group_index(group_ids: Tensor | Sequence[Hashable], size: int, device: torch.device) -> tuple[Tensor, int]:
    """Dense group index ``(B,)`` in 0..G-1 and G, from arbitrary ids."""
    if isinstance(group_ids, Tensor):
        if group_ids.dim() != 1:
            raise AlgoError(f"group_ids must be (B,), got shape {tuple(group_ids.shape)}")
        _, inv = torch.unique(group_ids, return_inverse=True)
        n_groups = int(inv.max()) + 1 if inv.numel() else 0
    else:
        index: dict[Hashable, int] = {}
        inv = torch.tensor([index.setdefault(g, len(index)) for g in group_ids], dtype=torch.long)
        n_groups = len(index)
    if inv.numel() != size:
        raise AlgoError(f"group_ids has {inv.numel()} entries for {size} responses")
    return inv.to(device), n_groups


__all__ = [
    "AGGREGATIONS",
    "ALGOS",
    "Algo",
    "DAPO",
    "DR_GRPO",
    "FIELDS",
    "GRPO",
    "GSPO",
    "KL_KINDS",
    "LOSS_FIELDS",
    "METRIC_REDUCE",
    "PRESETS",
    "AlgoError",
    "aggregate",
    "combine_metrics",
    "dynamic_sampling_keep",
    "get",
    "group_advantages",
    "kl_penalty",
    "loss_kwargs",
    "optimizer_steps_per_rollout",
    "overlong_penalty",
    "policy_loss",
    "preset",
    "sequence_log_ratio",
    "step_counts",
    "validate_algo",
]
