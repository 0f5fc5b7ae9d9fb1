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

**Per call on bare-answer rows** (issue 40: verl's naive manager calls ``compute_score`` once per sample,
in sequence, so there the latency of one call is the cost): the rows whose ``pred`` is an answer alone
(:func:`bare_answer`: not the adversarial category, at most 120 characters, no ``\\boxed`` or ``####``,
no run of three words of prose), each graded in this process by ``math_reward(pred, gold)`` (a direct
call, on a warm pool) and by ``verify(parse(gold), parse(pred))`` (main thread, math-verify's own
signal timeouts), interleaved row by row so that both see the same machine load. Printed: the mean
and median per call of each and their ratios; the mean is the cost of a sequential caller.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import re
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


_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_PROSE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}\s+[A-Za-z]{2,}\s+[A-Za-z]{2,}")


def bare_answer(row: dict) -> bool:
    """Whether the row's prediction is an answer alone (no solution text around it)."""
    p = row["pred"]
    if row["category"] == "adversarial_hang" or len(p) > 120 or "\\boxed" in p or "####" in p:
        return False
    return not _PROSE.search(_LATEX_CMD.sub(" ", p))


def per_call(rows: list[dict]) -> dict:
    """Sequential direct calls on the bare-answer rows, ours and math-verify's interleaved (warm pool)."""
    import logging

    from math_verify import parse, verify

    from rewardlab.rewards import math_reward

    logging.disable(logging.WARNING)
    verify(parse("$1$"), parse("$1$"))
    bare = [r for r in rows if bare_answer(r)]
    ours, theirs, slow = [], [], []
    for r in bare:
        t = time.perf_counter()
        res = math_reward(r["pred"], r["gold"])
        ours.append(time.perf_counter() - t)
        if "cpu_s" in res.info or res.info.get("status") == "timeout":
            slow.append(r["id"])
        t = time.perf_counter()
        try:
            verify(parse(r["gold"]), parse(r["pred"]))
        except Exception:  # noqa: BLE001 - the peer's failures cost what they cost
            pass
        theirs.append(time.perf_counter() - t)
    fig = {"rows": len(bare), "slow_path_rows": slow}
    for name, xs in (("rewardlab", ours), ("math_verify", theirs)):
        fig[name] = {"mean_s": statistics.mean(xs), "median_s": statistics.median(xs), "max_s": max(xs),
                     "calls_per_s": len(xs) / sum(xs)}
    fig["ratio_mean"] = fig["math_verify"]["mean_s"] / fig["rewardlab"]["mean_s"]
    fig["ratio_median"] = fig["math_verify"]["median_s"] / fig["rewardlab"]["median_s"]
    return fig


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
    calls = per_call(rows)
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
    fig["per_call_bare"] = calls

    o, m = fig["rewardlab"], fig["math_verify"]
    print(f"corpus: {args.corpus} ({n} rows), {args.procs} processes each")
    print(f"{'':14}{'rows/s':>10}{'accuracy':>10}{'acc(no adv)':>12}{'median':>10}{'p99':>10}{'worst':>10}")
    for name, d in (("rewardlab", o), ("math-verify", m)):
        print(f"{name:14}{d['rows_per_s']:10.1f}{d['accuracy']:10.3f}{d['accuracy_non_adversarial']:12.3f}"
              f"{d['latency_median_s'] * 1e3:8.2f}ms{d['latency_p99_s'] * 1e3:8.0f}ms{d['latency_max_s']:9.2f}s")
    print(f"throughput ratio (rewardlab / math-verify): {fig['throughput_ratio']:.1f}x")
    print(f"rewardlab deciding rules: {dict(sorted(rules.items(), key=lambda kv: -kv[1]))}")
    print(f"per call, {calls['rows']} bare-answer rows, sequential direct calls (warm pool), interleaved:")
    for name, key in (("rewardlab", "rewardlab"), ("math-verify", "math_verify")):
        c = calls[key]
        print(f"  {name:12} mean {c['mean_s'] * 1e3:7.3f} ms  median {c['median_s'] * 1e3:7.3f} ms  "
              f"worst {c['max_s'] * 1e3:8.1f} ms  {c['calls_per_s']:8.1f} calls/s")
    print(f"  ratio (math-verify / rewardlab): mean {calls['ratio_mean']:.1f}x, median {calls['ratio_median']:.1f}x; "
          f"slow-path rows: {calls['slow_path_rows']}")

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
