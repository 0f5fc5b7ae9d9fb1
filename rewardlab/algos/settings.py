"""The algorithm settings, declared once (:class:`Algo`), and the presets written as deltas from GRPO.

GRPO, Dr. GRPO, DAPO and GSPO differ only in a handful of settings (advantage scale, ratio level, clip
range, aggregation, KL, DAPO's reward/batch shaping), and so do the objectives that followed: each
preset is ``replace(GRPO, ...)``. The specification is ``docs/algorithms.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rewardlab.algos import correction
from rewardlab.algos.checks import AlgoError, check_choice, is_real
from rewardlab.algos.estimators import ESTIMATORS, Estimator
from rewardlab.algos.objectives import OBJECTIVES

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
KL_CHOICES: tuple[str, ...] = KL_KINDS + tuple(a for a in _KL_ALIASES if a not in KL_KINDS)
"""What ``--kl`` accepts: the estimators, then verl's aliases (``low_var_kl`` = k3, ``kl`` = k1, ``mse`` = k2)."""
RATIO_LEVELS: tuple[str, ...] = ("token", "sequence")
ADVANTAGES: tuple[str, ...] = tuple(ESTIMATORS)
"""``Algo.advantage`` choices: the group scales, then the estimators (``rewardlab.algos.estimators``)."""
LOSSES: tuple[str, ...] = tuple(OBJECTIVES) + ("dpo",)
"""``Algo.loss`` choices: the per-token objectives, plus online DPO on group pairs (a branch of the update stage)."""
GROUP_SIZE_POLICIES: tuple[str, ...] = ("fixed", "variance")
"""``Algo.group_size_policy`` choices."""


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
    :func:`rewardlab.algos.policy_loss` takes an ``Algo`` whole; its ``loss``-marked fields are the
    objective's settings.
    """

    advantage: str = field(default="std", metadata={"choices": ADVANTAGES})
    ("""Advantage: std (group z-score, GRPO/DAPO/GSPO), none (r - group mean, Dr. GRPO), or an estimator of """
     """rewardlab.algos.advantages.""")
    gamma: float = 1.0
    """Discount of the per-token return for advantages reinforce_pp and gae (rewards sit on the last token)."""
    lam: float = 0.95
    """GAE lambda (advantage gae)."""
    critic: str | None = None
    ("""PPO value model for advantage gae: shared (a value head on the policy's trunk), separate (a copy of the """
     """policy as critic), or a model folder / hub id; None = none.""")
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
    loss: str = field(default="ppo", metadata={"loss": True, "choices": LOSSES})
    ("""Policy objective: ppo (clipped surrogate), an objective of rewardlab.algos.objectives, or dpo (online DPO """
     """on group pairs).""")
    ratio: str = field(default="token", metadata={"loss": True, "choices": RATIO_LEVELS})
    """Importance ratio level: token (GRPO, Dr. GRPO, DAPO) or sequence (GSPO, GSPO-token form; loss ppo only)."""
    eps_low: float = field(default=0.2, metadata={"loss": True})
    ("""Lower clip range: the ratio is clipped at 1 - eps_low (gmpo: the log-ratio at -eps_low; dppo: the trust """
     """region below).""")
    eps_high: float = field(default=0.2, metadata={"loss": True})
    ("""Upper clip range: the ratio is clipped at 1 + eps_high (DAPO's clip-higher raises it; gmpo: log-ratio; """
     """dppo: region above).""")
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
    agg: str = field(default="seq-mean-token-mean", metadata={"loss": True, "choices": AGGREGATIONS})
    """Loss aggregation (token-sum, verl's unnormalised sum, for comparison only)."""
    beta: float = field(default=0.04, metadata={"loss": True})
    """KL coefficient to the frozen reference model (0 = no reference model)."""
    kl: str = field(default="k3", metadata={"loss": True, "choices": KL_CHOICES})
    ("""KL estimator: Schulman's k estimators, verl's absolute difference; a + suffix = the value of X with the """
     """gradient of k2 (verl's aliases accepted).""")
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
    ("""Write-up option: kl = adapt the clip range to the measured KL (to the reference when beta > 0, else to the """
     """old policy), eps = eps_base (1 + alpha (target - kl) / target); None = off.""")
    clip_adapt_alpha: float = 1.0
    """KL-adaptive clip: alpha, the strength of the adaptation."""
    clip_adapt_target: float = 0.01
    """KL-adaptive clip: the KL target."""
    clip_adapt_min: float = 0.05
    """KL-adaptive clip: the smallest clip range."""
    clip_adapt_max: float = 0.4
    """KL-adaptive clip: the largest clip range."""
    reward_norm: str | None = None
    ("""Write-up option: ema = normalise rewards by a global, bias-corrected EMA of their mean and variance before """
     """the advantage; None = off.""")
    reward_norm_decay: float = 0.99
    """EMA reward normalisation: the decay."""
    group_size_policy: str = field(default="fixed", metadata={"choices": GROUP_SIZE_POLICIES})
    ("""Write-up option: fixed (group_size for every prompt) or variance (G = clamp(ceil(var_ema / threshold), min, """
     """max) per prompt, after a warm-up).""")
    group_size_min: int = 2
    """Variance-driven group size: the smallest G."""
    group_size_max: int = 16
    """Variance-driven group size: the largest G."""
    group_size_threshold: float = 0.02
    """Variance-driven group size: reward variance per extra completion."""
    group_size_warmup: int = 5
    """Variance-driven group size: steps with the fixed group_size before the policy applies."""
    bog_coef: float = 0.0
    ("""Write-up option: lambda of the best-of-group NLL (the unique best completion of each group, above the group """
     """mean); 0 = off.""")
    bog_warmup: float = 0.1
    """Best-of-group loss: fraction of the steps over which lambda rises linearly from 0."""
    dpo_beta: float = 0.1
    """Online DPO (loss dpo): beta of the sigmoid loss on (best, worst) pairs of each group against the reference."""
    correction: str | None = field(default=None, metadata={"choices": tuple(correction.PRESETS)})
    ("""Rollout correction with the engine's log-probs: a preset of rewardlab.algos.correction (verl's names); None """
     """= off.""")
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
        check_choice("advantage", self.advantage, ADVANTAGES)
        check_choice("loss", self.loss, LOSSES)
        check_choice("ratio", self.ratio, RATIO_LEVELS)
        check_choice("agg", self.agg, AGGREGATIONS)
        check_choice("kl", kl_kind(self.kl), KL_KINDS)
        check_clip(self.eps_low, self.eps_high, self.clip_ratio_c, self.ratio, self.loss)
        if not is_real(self.gamma) or not 0 < self.gamma <= 1:
            raise AlgoError(f"gamma must be in (0, 1], got {self.gamma!r}")
        if not is_real(self.lam) or not 0 <= self.lam <= 1:
            raise AlgoError(f"lam must be in [0, 1], got {self.lam!r}")
        if self.estimator.needs_values != (self.critic is not None):
            raise AlgoError("an advantage that reads values (gae) and a critic go together: set both (--advantage gae "
                            "--critic shared|separate|MODEL) "
                            f"or neither, got advantage {self.advantage!r} and critic {self.critic!r}")
        cdb = self.critic_detach_below
        if isinstance(cdb, bool) or not isinstance(cdb, int) or cdb < 0:
            raise AlgoError(f"critic_detach_below must be an integer >= 0, got {cdb!r}")
        if self.critic_lr is not None and (not is_real(self.critic_lr) or self.critic_lr <= 0):
            raise AlgoError(f"critic_lr must be a number > 0 or None, got {self.critic_lr!r}")
        if self.clip_adapt not in (None, "kl"):
            raise AlgoError(f"unknown clip_adapt {self.clip_adapt!r}; choose kl or None")
        if self.clip_adapt == "kl" and self.mini_batches == 1 and self.beta == 0:
            raise AlgoError("clip_adapt kl needs a KL to measure: beta > 0 (KL to the reference) or mini_batches > 1 "
                            "(KL to the old policy); one on-policy step without a reference has KL 0")
        if self.reward_norm not in (None, "ema"):
            raise AlgoError(f"unknown reward_norm {self.reward_norm!r}; choose ema or None")
        check_choice("group_size_policy", self.group_size_policy, GROUP_SIZE_POLICIES)
        for name in ("group_size_min", "group_size_max", "group_size_warmup"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "group_size_warmup" else 2):
                raise AlgoError(f"{name} must be an integer >= {0 if name == 'group_size_warmup' else 2}, got {v!r}")
        if self.group_size_min > self.group_size_max:
            raise AlgoError(f"group_size_min {self.group_size_min} is above group_size_max {self.group_size_max}")
        if self.group_size_policy == "variance" and (self.dynamic_sampling or self.mini_batches > 1):
            raise AlgoError("group_size_policy variance works with one mini-batch and no dynamic sampling")
        for name in ("clip_adapt_alpha", "clip_adapt_target", "clip_adapt_min", "clip_adapt_max",
                     "group_size_threshold",
                     "dpo_beta"):
            if not is_real(getattr(self, name)) or getattr(self, name) <= 0:
                raise AlgoError(f"{name} must be a number > 0, got {getattr(self, name)!r}")
        if not is_real(self.reward_norm_decay) or not 0 < self.reward_norm_decay < 1:
            raise AlgoError(f"reward_norm_decay must be in (0, 1), got {self.reward_norm_decay!r}")
        if not is_real(self.bog_warmup) or not 0 <= self.bog_warmup <= 1:
            raise AlgoError(f"bog_warmup must be in [0, 1], got {self.bog_warmup!r}")
        if self.loss == "dpo" and (self.critic is not None or self.mini_batches > 1 or self.correction is not None):
            raise AlgoError("loss dpo is an on-policy pairwise loss: no critic, one mini-batch, no rollout correction")
        for name in ("vf_coef", "cliprange_value", "value_group_coef", "bog_coef"):
            if not is_real(getattr(self, name)) or getattr(self, name) < 0:
                raise AlgoError(f"{name} must be a number >= 0, got {getattr(self, name)!r}")
        for name in ("tau_pos", "tau_neg", "cov_ratio"):
            if not is_real(getattr(self, name)) or getattr(self, name) <= 0:
                raise AlgoError(f"{name} must be a number > 0, got {getattr(self, name)!r}")
        for name in ("dro_beta", "kl_cov_coef"):
            if not is_real(getattr(self, name)) or getattr(self, name) < 0:
                raise AlgoError(f"{name} must be a number >= 0, got {getattr(self, name)!r}")
        if not (is_real(self.clip_cov_lb) and is_real(self.clip_cov_ub)) or self.clip_cov_lb >= self.clip_cov_ub:
            raise AlgoError(f"clip_cov_lb must be below clip_cov_ub, got {self.clip_cov_lb!r} and {self.clip_cov_ub!r}")
        if not is_real(self.beta) or self.beta < 0:
            raise AlgoError(f"beta must be a number >= 0, got {self.beta!r}")
        if not is_real(self.entropy_coef):
            raise AlgoError(f"entropy_coef must be a number, got {self.entropy_coef!r}")
        if not is_real(self.overlong_factor) or self.overlong_factor < 0:
            raise AlgoError(f"overlong_factor must be a number >= 0, got {self.overlong_factor!r}")
        mb, cache = self.mini_batches, self.overlong_cache
        if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
            raise AlgoError(f"mini_batches must be an integer >= 1, got {mb!r}")
        if cache is not None and (isinstance(cache, bool) or not isinstance(cache, int) or cache < 1):
            raise AlgoError(f"overlong_cache must be an integer >= 1 or None, got {cache!r}")
        if (self.correction is not None or self.correction_threshold is not None
                or self.correction_rs_threshold is not None):
            self.rollout_correction()  # a bad preset name or threshold raises here
        for name in ("dynamic_sampling", "overlong", "overlong_filter"):
            if not isinstance(getattr(self, name), bool):
                raise AlgoError(f"{name} must be true or false, got {getattr(self, name)!r}")
        return self

    @property
    def estimator(self) -> Estimator:
        """The :class:`~rewardlab.algos.estimators.Estimator` of ``advantage``: its computation and what it needs."""
        return ESTIMATORS[self.advantage]

    def rollout_correction(self) -> Any:
        """The :class:`rewardlab.algos.correction.Correction` these fields name, or None when off."""
        if self.correction is None:
            if self.correction_threshold is not None or self.correction_rs_threshold is not None:
                raise AlgoError("correction_threshold / correction_rs_threshold need a correction preset "
                                "(--correction)")
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
        return replace(out, kl=kl_kind(out.kl)).check()


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Algo))
"""The algorithm field names, in declaration order."""

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
("""CISPO (MiniMax-M1, 2025): clipped, stop-gradient IS weight times the REINFORCE term; no lower clip (verl's """
 """example).""")
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
("""PPO with a value model (Schulman et al. 2017; the RLHF form of Ouyang et al. 2022): GAE (gamma 1, lambda 0.95) """
 """on a separate critic, clipped value loss.""")

DPO = replace(GRPO, loss="dpo", beta=0.0)
("""Online DPO (Rafailov et al. 2023; on-policy pairs as in Guo et al. 2024): the best and worst completion of each """
 """group, beta 0.1.""")

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
        raise AlgoError(f"unknown algorithm field(s) {', '.join(map(repr, unknown))}; valid fields: "
                        f"{', '.join(FIELDS)}")
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


def optimizer_steps_per_rollout(algo: Mapping[str, Any], epochs: int = 1) -> int:
    """Optimizer steps one rollout batch gets: ``mini_batches x epochs`` (GSPO: 4 per epoch)."""
    return int(algo["mini_batches"]) * epochs


def kl_kind(kind: Any) -> Any:
    """A KL estimator name with its aliases resolved (``low_var_kl`` -> ``k3``, ``mse`` -> ``k2``, ...)."""
    return _KL_ALIASES.get(kind, kind) if isinstance(kind, str) else kind


def check_clip(eps_low: Any, eps_high: Any, clip_ratio_c: Any, ratio: str, loss: str = "ppo") -> None:
    """Raise :class:`AlgoError` for a clip range, dual clip or ratio level that cannot work together."""
    if not is_real(eps_low) or eps_low < 0 or (eps_low >= 1 and loss != "cispo"):
        # cispo alone: eps_low >= 1 means no lower clip (MiniMax-M1 / verl's example uses 10)
        raise AlgoError(f"eps_low must be in [0, 1), got {eps_low!r}")
    if not is_real(eps_high) or eps_high < 0:
        raise AlgoError(f"eps_high must be >= 0, got {eps_high!r}")
    if clip_ratio_c is not None:
        if not is_real(clip_ratio_c) or clip_ratio_c <= 1:
            raise AlgoError(f"clip_ratio_c (dual clip) must be > 1 or None, got {clip_ratio_c!r}")
        if ratio == "sequence":
            raise AlgoError("dual clip (clip_ratio_c) is not defined for the sequence ratio (GSPO); set it to None")
    if ratio == "sequence" and loss != "ppo":
        raise AlgoError(f"ratio 'sequence' (GSPO) is defined for loss 'ppo' only, got loss {loss!r}")


def _threshold(text: Any) -> float | str:
    """A correction threshold from text: a number stays a number, "l_u" or "a,b" stays text."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return str(text)

