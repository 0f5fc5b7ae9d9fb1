"""Benchmark: rewardlab's math reward vs math-verify on the public equivalence corpus, in one run.

    OMP_NUM_THREADS=1 .venv/bin/python bench/math_reward.py [--procs 2] \
        [--corpus ../shared/bench/math_equiv_public.jsonl] [--out results.json]

Both sides grade every (pred, gold) row of the corpus with the same number of processes:

* rewardlab: ``score_batch(math_reward, preds, golds, deadline=1.0, workers=P)`` on a warm pool
  (the fast path runs on the calling thread; undecided rows go to the P worker processes);
* math-verify: ``verify(parse(gold), parse(pred))`` exactly as its README shows (signal timeouts
  on, main thread of each of P ``multiprocessing`` processes), rows spread over the P processes.

Printed: throughput (rows/s) of each, the ratio, accuracy against the labels (all rows and
non-adversarial rows), and per-row latencies (median, p99, worst), the latter measured with
sequential calls on one thread (rewardlab) and inside the worker (math-verify). ``--out`` writes the
same figures as JSON with the command, versions, date and machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "bench" / "math_equiv_public.jsonl"


def _mv_grade(row: tuple[str, str]) -> tuple[bool, float]:
    """Peer grading of one row inside a peer worker process: (equal, seconds)."""
    from math_verify import parse, verify

    pred, gold = row
    t = time.perf_counter()
    try:
        eq = bool(verify(parse(gold), parse(pred)))
    except Exception:  # noqa: BLE001 - the peer's own failures count as "not equal"
        eq = False
    return eq, time.perf_counter() - t


def _mv_init() -> None:
    import logging

    logging.disable(logging.WARNING)  # math-verify logs every timeout
    from math_verify import parse, verify

    verify(parse("$1$"), parse("$1$"))  # import and build the grammar before timing


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--procs", type=int, default=2, help="processes for each side")
    ap.add_argument("--deadline", type=float, default=1.0, help="rewardlab per-item deadline (s)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"error: corpus not found: {args.corpus}")
    rows = [json.loads(line) for line in args.corpus.open(encoding="utf-8") if line.strip()]
    preds = [r["pred"] for r in rows]
    golds = [r["gold"] for r in rows]
    labels = [bool(r["equal"]) for r in rows]
    adv = [r["category"] == "adversarial_hang" for r in rows]
    n = len(rows)

    def acc(got: list[bool], mask: list[bool] | None = None) -> float:
        idx = [i for i in range(n) if mask is None or mask[i]]
        return sum(got[i] == labels[i] for i in idx) / len(idx)

    # --- rewardlab
    from rewardlab.rewards import math_reward, score_batch
    from rewardlab.rewards.pool import get_pool, shutdown_pool

    get_pool(args.procs).warmup()
    t = time.perf_counter()
    cpu0 = time.process_time()
    ours = score_batch(math_reward, preds, golds, deadline=args.deadline, workers=args.procs)
    ours_wall = time.perf_counter() - t
    ours_caller_cpu = time.process_time() - cpu0
    ours_eq = [r.score == 1.0 for r in ours]
    lat = []
    for p, g in zip(preds, golds):
        t = time.perf_counter()
        math_reward(p, g)
        lat.append(time.perf_counter() - t)
    rules: dict[str, int] = {}
    for r in ours:
        rules[r.info.get("rule", "?")] = rules.get(r.info.get("rule", "?"), 0) + 1
    shutdown_pool()

    # --- math-verify
    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(args.procs, initializer=_mv_init) as pool:
        pool.map(_mv_grade, [("$1$", "$1$")] * args.procs)  # started and warm
        t = time.perf_counter()
        peer = pool.map(_mv_grade, list(zip(preds, golds)), chunksize=1)
        peer_wall = time.perf_counter() - t
    peer_eq = [e for e, _ in peer]
    peer_lat = [s for _, s in peer]

    fig = {
        "rows": n,
        "procs": args.procs,
        "rewardlab": {
            "rows_per_s": n / ours_wall, "wall_s": ours_wall, "caller_cpu_s": ours_caller_cpu,
            "accuracy": acc(ours_eq), "accuracy_non_adversarial": acc(ours_eq, [not a for a in adv]),
            "latency_median_s": statistics.median(lat), "latency_p99_s": _pct(lat, 0.99), "latency_max_s": max(lat),
            "rules": rules,
        },
        "math_verify": {
            "rows_per_s": n / peer_wall, "wall_s": peer_wall,
            "accuracy": acc(peer_eq), "accuracy_non_adversarial": acc(peer_eq, [not a for a in adv]),
            "latency_median_s": statistics.median(peer_lat), "latency_p99_s": _pct(peer_lat, 0.99),
            "latency_max_s": max(peer_lat),
        },
    }
    fig["throughput_ratio"] = fig["rewardlab"]["rows_per_s"] / fig["math_verify"]["rows_per_s"]

    o, m = fig["rewardlab"], fig["math_verify"]
    print(f"corpus: {args.corpus} ({n} rows), {args.procs} processes each")
    print(f"{'':14}{'rows/s':>10}{'accuracy':>10}{'acc(no adv)':>12}{'median':>10}{'p99':>10}{'worst':>10}")
    for name, d in (("rewardlab", o), ("math-verify", m)):
        print(f"{name:14}{d['rows_per_s']:10.1f}{d['accuracy']:10.3f}{d['accuracy_non_adversarial']:12.3f}"
              f"{d['latency_median_s'] * 1e3:8.2f}ms{d['latency_p99_s'] * 1e3:8.0f}ms{d['latency_max_s']:9.2f}s")
    print(f"throughput ratio (rewardlab / math-verify): {fig['throughput_ratio']:.1f}x")
    print(f"rewardlab deciding rules: {dict(sorted(rules.items(), key=lambda kv: -kv[1]))}")

    if args.out:
        import math_verify

        fig["how"] = {
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "math_verify": getattr(math_verify, "__version__", "unknown"),
            "deadline_s": args.deadline,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(fig, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
