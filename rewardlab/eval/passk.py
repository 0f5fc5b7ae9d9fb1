"""pass@k and the statistics behind every number an eval report prints.

Pure functions over per-problem counts and sample records; no torch, no I/O. Used by :mod:`rewardlab.eval`.

* :func:`pass_at_k` is the unbiased estimator of Chen et al. (2021, "Evaluating Large Language
  Models Trained on Code", eq. 1): with ``n`` samples of which ``c`` are correct,
  ``pass@k = 1 - C(n - c, k) / C(n, k)``, computed as a stable product.
* :func:`summarize` turns per-problem estimates into a mean, its standard error over problems
  (``sd(ddof=1) / sqrt(N)``, the way lm-evaluation-harness reports ``*_stderr``) and a 95%
  interval (Wilson score interval when every per-problem value is 0 or 1, else normal).
* :func:`paired_difference` compares two runs on the *same* problems: the mean per-problem
  difference, its paired standard error and 95% interval (Newcombe's paired score interval for
  0/1 outcomes, else normal), the counts of problems that improved or regressed, and an exact
  two-sided sign (McNemar) test p-value over the discordant problems.
* :func:`majority_correct` / :func:`maj_at_k`: majority vote over answer *equivalence classes*
  (labels from :func:`rewardlab.eval.graders.math_answer_classes`: ``0.5``, ``\\frac12`` and ``1/2``
  are one vote). maj@k of a problem with ``n >= k`` samples is the probability that a uniformly
  drawn k-subset of its samples votes for a correct class: computed **exactly** by enumerating
  every k-subset when there are at most :data:`MAJ_EXACT_LIMIT` of them, else estimated by
  **seeded Monte Carlo** over :data:`MAJ_MC_DRAWS` random k-subsets (the method is reported).
  Tie rule: among the classes with the most votes in the subset, the one whose first vote has the
  lowest sample index wins (what ``collections.Counter.most_common`` does for lm-eval's
  ``majority_vote`` filter, which sees the samples in order). Samples without an answer abstain;
  a subset where every sample abstains is wrong.
* :func:`avg_at_n`: the mean over problems of each problem's mean correctness over its n samples,
  with its standard error across problems; :func:`solve_rate_histogram`: how many problems were
  solved by c of their n samples, for each c. best@k is pass@k.

    >>> round(pass_at_k(5, 2, 1), 3)
    0.4
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from rewardlab.seeds import derive_seed

Z95 = 1.959963984540054  # two-sided 95% standard-normal quantile


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples, ``c`` of them correct (needs ``k <= n``)."""
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k / i): equal to 1 - C(n-c, k) / C(n, k) without huge binomials.
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass
class Summary:
    """Mean of per-problem values with its uncertainty."""

    value: float
    stderr: float
    ci_low: float
    ci_high: float
    ci_method: str
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def wilson_interval(successes: float, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sensible at 0/N and N/N, unlike the normal one)."""
    if total <= 0:
        return (0.0, 1.0)
    p = successes / total
    denom = 1.0 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact ends: no float dust at 0/N, N/N
    hi = 1.0 if successes >= total else min(1.0, centre + half)
    return (lo, hi)


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var)


def summarize(values: Sequence[float]) -> Summary:
    """Mean, standard error over problems and a 95% interval of per-problem scores in [0, 1]."""
    n = len(values)
    if n == 0:
        return Summary(float("nan"), float("nan"), float("nan"), float("nan"), "none", 0)
    mean, sd = _mean_sd(values)
    se = sd / math.sqrt(n)
    if all(v in (0.0, 1.0) for v in values):
        lo, hi = wilson_interval(sum(values), n)
        method = "wilson"
    else:
        lo, hi = max(0.0, mean - Z95 * se), min(1.0, mean + Z95 * se)
        method = "normal"
    return Summary(mean, se, lo, hi, method, n)


def sign_test_p(improved: int, regressed: int) -> float:
    """Exact two-sided binomial (McNemar / sign) test p-value over discordant pairs."""
    m = improved + regressed
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(0, min(improved, regressed) + 1)) / 2**m
    return min(1.0, 2.0 * tail)


@dataclass
class PairedDiff:
    """B minus A on the same problems."""

    a: float
    b: float
    delta: float
    stderr: float
    ci_low: float
    ci_high: float
    improved: int
    regressed: int
    p_value: float
    n: int
    ci_method: str = "normal"

    def to_dict(self) -> dict:
        return asdict(self)


def newcombe_paired_interval(a: Sequence[float], b: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """95% interval for ``mean(b) - mean(a)`` on paired 0/1 outcomes (Newcombe 1998, method 10).

    Built from the two Wilson intervals and the within-pair correlation; unlike the normal
    interval it does not collapse to a single point when no problem changed (0 of 16 discordant
    still leaves a difference of up to about +-19% plausible).
    """
    n = len(a)
    both = sum(1 for x, y in zip(a, b) if x and y)  # Newcombe's a (first = b, second = a)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)  # b
    only_a = sum(1 for x, y in zip(a, b) if x and not y)  # c
    neither = n - both - only_b - only_a  # d
    p1, p2 = (both + only_b) / n, (both + only_a) / n
    l1, u1 = wilson_interval(both + only_b, n, z)
    l2, u2 = wilson_interval(both + only_a, n, z)
    denom = (both + only_b) * (only_a + neither) * (both + only_a) * (only_b + neither)
    cross = both * neither - only_b * only_a
    if cross > 0:
        cross = max(cross - n / 2, 0.0)
    phi = cross / math.sqrt(denom) if denom > 0 else 0.0
    delta = p1 - p2
    lo = delta - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = delta + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, lo), min(1.0, hi)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDiff:
    """Paired comparison of per-problem scores ``a[i]`` and ``b[i]`` (same problem at the same index).

    The 95% interval is Newcombe's paired score interval when every value is 0 or 1 (greedy
    pass@1), else ``delta +- 1.96 * sd(b - a) / sqrt(N)`` (normal approximation over problems);
    ``p_value`` is the exact sign test over problems whose score went up or down.
    """
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        nan = float("nan")
        return PairedDiff(nan, nan, nan, nan, nan, nan, 0, 0, 1.0, 0)
    diffs = [y - x for x, y in zip(a, b)]
    delta, sd = _mean_sd(diffs)
    se = sd / math.sqrt(n)
    improved = sum(d > 0 for d in diffs)
    regressed = sum(d < 0 for d in diffs)
    if all(v in (0.0, 1.0) for v in list(a) + list(b)):
        lo, hi = newcombe_paired_interval(a, b)
        method = "newcombe"
    else:
        lo, hi = delta - Z95 * se, delta + Z95 * se
        method = "normal"
    return PairedDiff(
        a=sum(a) / n,
        b=sum(b) / n,
        delta=delta,
        stderr=se,
        ci_low=lo,
        ci_high=hi,
        improved=improved,
        regressed=regressed,
        p_value=sign_test_p(improved, regressed),
        n=n,
        ci_method=method,
    )


# ----------------------------------------------------------------------------- over sample records


def is_correct(score: float | None) -> bool:
    """A sample counts as correct when the grader gave it 1.0 (a grader failure, None, is wrong)."""
    return score is not None and score >= 1.0 - 1e-9


def problem_passk(rec: dict, ks: Sequence[int]) -> dict[str, float]:
    """pass@k of one problem's samples record (its ``scores`` list) for each k."""
    n = len(rec["scores"])
    c = sum(is_correct(s) for s in rec["scores"])
    return {f"pass@{k}": pass_at_k(n, c, k) for k in ks}


def benchmark_metrics(records: Sequence[dict], ks: Sequence[int]) -> dict[str, Summary]:
    """pass@k summaries over problems (records in problem order)."""
    per = [problem_passk(r, ks) for r in records]
    return {f"pass@{k}": summarize([p[f"pass@{k}"] for p in per]) for k in ks}


# ----------------------------------------------------------------------------- maj@k, avg@n

MAJ_EXACT_LIMIT = 5000
"""Most k-subsets of one problem's samples that :func:`maj_at_k` enumerates exactly."""
MAJ_MC_DRAWS = 2000
"""Random k-subsets drawn per problem when there are more than :data:`MAJ_EXACT_LIMIT`."""


def majority_correct(labels: Sequence[int | None], class_correct: Sequence[bool] | dict[int, bool]) -> bool:
    """Whether the majority vote of these samples (in sample order) is correct.

    ``labels[i]`` is sample i's answer class (None: no answer, abstains); ``class_correct[c]``
    whether class c is right. Ties: the tied class whose first vote comes first wins.
    """
    counts: dict[int, int] = {}
    for lab in labels:
        if lab is not None:
            counts[lab] = counts.get(lab, 0) + 1  # dict order = order of first vote
    if not counts:
        return False
    top = max(counts.values())
    winner = next(c for c, v in counts.items() if v == top)
    return bool(class_correct[winner])


def _seed_for(seed: int, key: str) -> int:
    return derive_seed("maj_at_k", int(seed), key)


def maj_at_k(labels: Sequence[int | None], class_correct: Sequence[bool] | dict[int, bool], k: int, *,
             seed: int = 0, key: str = "", exact_limit: int = MAJ_EXACT_LIMIT,
             draws: int = MAJ_MC_DRAWS) -> tuple[float, str]:
    """maj@k of one problem from its ``n >= k`` samples: (value, ``"exact"`` | ``"monte_carlo"``).

    Exact: the share of all C(n, k) k-subsets (each in sample order) whose majority vote is correct.
    Monte Carlo (more than ``exact_limit`` subsets): the share over ``draws`` uniform k-subsets drawn
    with ``random.Random`` seeded by ``seed`` and ``key`` (the problem id), so reruns agree.
    """
    n = len(labels)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    present = [lab for lab in labels if lab is not None]
    if not any(class_correct[lab] for lab in present):
        return 0.0, "exact"
    if k == n:
        return float(majority_correct(labels, class_correct)), "exact"
    if len(present) == n and all(class_correct[lab] for lab in present):
        return 1.0, "exact"
    if math.comb(n, k) <= exact_limit:
        total = hits = 0
        for idx in itertools.combinations(range(n), k):
            total += 1
            hits += majority_correct([labels[i] for i in idx], class_correct)
        return hits / total, "exact"
    rng = random.Random(_seed_for(seed, key))
    hits = 0
    for _ in range(draws):
        idx = sorted(rng.sample(range(n), k))
        hits += majority_correct([labels[i] for i in idx], class_correct)
    return hits / draws, "monte_carlo"


def benchmark_majk(labels: Sequence[Sequence[int | None]], class_correct: Sequence[Sequence[bool] | dict[int, bool]],
                   ks: Sequence[int], *, ids: Sequence[str] | None = None, seed: int = 0) -> dict[str, Any]:
    """maj@k summaries over problems for each ``k`` (skipping k larger than some problem's n), and
    how each was computed: ``{"maj@k": Summary, ...}, {"maj@k": {"method": ..., "problems_exact": ...}}``."""
    out: dict[str, Summary] = {}
    how: dict[str, dict[str, Any]] = {}
    ids = list(ids) if ids is not None else [str(i) for i in range(len(labels))]
    nmin = min((len(x) for x in labels), default=0)
    for k in ks:
        if k > nmin or k < 1:
            continue
        vals, methods = [], []
        for lab, cc, pid in zip(labels, class_correct, ids):
            v, m = maj_at_k(lab, cc, k, seed=seed, key=pid)
            vals.append(v)
            methods.append(m)
        exact = sum(m == "exact" for m in methods)
        out[f"maj@{k}"] = summarize(vals)
        how[f"maj@{k}"] = {
            "method": "exact" if exact == len(methods) else "monte_carlo" if exact == 0 else "mixed",
            "problems_exact": exact, "problems_monte_carlo": len(methods) - exact,
            "exact_limit": MAJ_EXACT_LIMIT, "mc_draws": MAJ_MC_DRAWS, "seed": seed,
            "tie_rule": "most votes; ties to the class whose first vote has the lowest sample index",
        }
    return {"metrics": out, "how": how}


def avg_at_n(records: Sequence[dict]) -> Summary:
    """avg@n: the mean over problems of each problem's mean correctness over its samples, with the
    standard error across problems (``sd(ddof=1) / sqrt(N)``)."""
    per = [sum(is_correct(s) for s in r["scores"]) / len(r["scores"]) for r in records if r["scores"]]
    return summarize(per)


def solve_rate_histogram(records: Sequence[dict]) -> dict[str, int]:
    """Problems by how many of their samples are correct: ``{"0/4": 12, "1/4": 3, ...}`` (every c from
    0 to n listed, in order; problems with different n are listed under their own n)."""
    counts: dict[tuple[int, int], int] = {}
    for r in records:
        n = len(r["scores"])
        c = sum(is_correct(s) for s in r["scores"])
        counts[(c, n)] = counts.get((c, n), 0) + 1
    ns = sorted({n for _, n in counts})
    return {f"{c}/{n}": counts.get((c, n), 0) for n in ns for c in range(n + 1)}
