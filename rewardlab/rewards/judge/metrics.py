"""Batch metrics of judge (or hybrid) results: ``judge/...`` keys for a trainer's or a benchmark's log."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rewardlab.rewards.base import RewardResult

__all__ = ["judge_metrics"]


def judge_metrics(results: Iterable[RewardResult], prefix: str = "judge") -> dict[str, float]:
    """Batch metrics of judge (or hybrid) results: ``<prefix>/judged_frac`` (share of items the judge
    was consulted for), ``cache_hits`` and ``cache_hit_rate`` (over those), ``prompt_tokens`` / ``completion_tokens``
    (totals), ``requests`` (HTTP attempts), ``latency_p50_s`` / ``latency_max_s`` (wall time of the
    items that asked the server, retries included) and ``status/<status>`` counts of non-``ok``
    statuses. A figure without items to measure is NaN."""
    results = list(results)
    judged = [r for r in results if r.info.get("judged")]
    hits = sum(1 for r in judged if r.info.get("cache") == "hit")
    looked = sum(1 for r in judged if r.info.get("cache") in ("hit", "miss"))
    latencies = sorted(float(r.info["latency_s"]) for r in judged if r.info.get("latency_s") is not None)
    out = {
        f"{prefix}/judged_frac": len(judged) / len(results) if results else float("nan"),
        f"{prefix}/cache_hits": float(hits),
        f"{prefix}/cache_hit_rate": hits / looked if looked else float("nan"),
        f"{prefix}/prompt_tokens": float(sum(r.info.get("usage", {}).get("prompt_tokens", 0) for r in judged)),
        f"{prefix}/completion_tokens": float(sum(r.info.get("usage", {}).get("completion_tokens", 0) for r in judged)),
        f"{prefix}/requests": float(sum(r.info.get("attempts", 0) for r in judged)),
        f"{prefix}/latency_p50_s": latencies[(len(latencies) - 1) // 2] if latencies else float("nan"),
        f"{prefix}/latency_max_s": latencies[-1] if latencies else float("nan"),
    }
    for status, n in Counter(r.info.get("status", "ok") for r in results).items():
        if status != "ok":
            out[f"{prefix}/status/{status}"] = float(n)
    return out
