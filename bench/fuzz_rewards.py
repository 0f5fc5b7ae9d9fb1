"""Fuzz every text-parsing reward on the caller's thread: calls, max and p99 latency, and the worst input.

    .venv/bin/python bench/fuzz_rewards.py                      # 3,000 hostile texts per reward, up to 600 chars
    .venv/bin/python bench/fuzz_rewards.py --calls 20000 --max-chars 5000 --seed 7

It drives exactly what runs on a trainer's thread without a deadline: the math reward's extraction
and fast path (``MathReward.fast``; the slow path runs in killable workers and is not fuzzed here),
the format rewards, the length and repetition shaping, and code-block extraction. Texts come from
:mod:`rewardlab.rewards.fuzz` (the grammar the default tests use too). A call that takes longer than
``--hang-s`` prints its input and exits with status 3 (a call that raises: status 4): paste the input
into the regression table of ``tests/test_fuzz_rewards.py``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rewardlab.rewards.fuzz import GOLDS, caller_thread_paths, hostile_text  # noqa: E402


def _child(name: str, texts: list[str], golds: list[str], conn) -> None:
    """Runs one reward over every text, reporting before and after each call (the parent watches)."""
    fn = caller_thread_paths()[name]
    for i, (text, gold) in enumerate(zip(texts, golds)):
        conn.send(("start", i))
        t = time.perf_counter()
        try:
            fn(text, gold)
        except Exception as e:  # noqa: BLE001 - a raise is a bug too: report it like a hang
            conn.send(("raised", f"{type(e).__name__}: {e}"))
            return
        conn.send(("end", time.perf_counter() - t))
    conn.send(("done", None))


def run_one(name: str, texts: list[str], golds: list[str], hang_s: float) -> list[float]:
    """Latencies of ``name`` over the texts, measured in a child process that is killed on a hang
    (a catastrophic regex holds the GIL, so no thread of the same process could interrupt it)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(name, texts, golds, child), daemon=True)
    proc.start()
    child.close()
    lat: list[float] = []
    current = -1
    while True:
        if not parent.poll(hang_s):
            proc.kill()
            print(f"\nHANG: {name} ran over {hang_s:g} s on\n  text={texts[current]!r}\n  gold={golds[current]!r}", flush=True)
            sys.exit(3)
        kind, value = parent.recv()
        if kind == "start":
            current = value
        elif kind == "end":
            lat.append(value)
        elif kind == "raised":
            proc.join()
            print(f"\nRAISED: {name} raised {value} on\n  text={texts[current]!r}\n  gold={golds[current]!r}", flush=True)
            sys.exit(4)
        else:
            proc.join()
            return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000, help="hostile texts per reward")
    ap.add_argument("--max-chars", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang-s", type=float, default=10.0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    texts = [hostile_text(rng, args.max_chars) for _ in range(args.calls)]
    golds = [rng.choice(GOLDS) for _ in range(args.calls)]
    print(f"fuzz_rewards: {args.calls} texts per reward, up to {args.max_chars} chars, seed {args.seed}")
    print(f"{'reward':22s} {'calls':>6s} {'mean ms':>8s} {'p99 ms':>8s} {'max ms':>8s}  worst input (first 60 chars)")
    worst_overall = (0.0, "", "")
    for name in caller_thread_paths():
        lat = run_one(name, texts, golds, args.hang_s)
        order = sorted(range(len(lat)), key=lat.__getitem__)
        p99 = lat[order[min(len(lat) - 1, int(0.99 * len(lat)))]]
        w = order[-1]
        print(f"{name:22s} {len(lat):6d} {1e3 * sum(lat) / len(lat):8.3f} {1e3 * p99:8.3f} {1e3 * lat[w]:8.2f}  {texts[w][:60]!r}")
        if lat[w] > worst_overall[0]:
            worst_overall = (lat[w], name, texts[w])
    print(f"worst call: {1e3 * worst_overall[0]:.2f} ms in {worst_overall[1]} on {worst_overall[2]!r}")


if __name__ == "__main__":
    main()
