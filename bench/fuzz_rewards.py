"""Fuzz every text-parsing reward on the caller's thread: calls, max and p99 latency, and the worst input.

    .venv/bin/python bench/fuzz_rewards.py                      # 3,000 hostile texts per reward, up to 600 chars
    .venv/bin/python bench/fuzz_rewards.py --calls 20000 --max-chars 5000 --seed 7

It drives exactly what runs on a trainer's thread without a deadline: the math reward's extraction
and fast path (``MathReward.fast``; the slow path runs in killable workers and is not fuzzed here),
the format rewards, the length and repetition shaping, and code-block extraction. Texts come from
:mod:`rewardlab.rewards.fuzz` (the grammar the default tests use too). A call that takes longer than
``--hang-s`` prints its input and exits with status 3 (a call that raises: status 4): paste the input
into the regression table of ``tests/test_fuzz_rewards.py``.

``--differential`` hunts false positives instead (``bench/fuzz_diff.py``): it perturbs the
golds of GSM8K, MATH-500 and the public corpus (read at run time from ``REWARDLAB_DATA_DIR`` /
``../shared``) with named families, scores every pair with ``score_batch(math_reward, ...)`` and with
an independent oracle (its own reader + sympy/mpmath at 50 digits, and math-verify), and prints per
family the pairs tried, decided, FP and FN, then every FP pair with the reward's info:

    REWARDLAB_DATA_DIR=../shared/data .venv/bin/python bench/fuzz_rewards.py --differential --pairs 100000 --seed 0
    ... --differential --pairs 5000 --json out.json     # also every FP / FN / contested row as JSON

Exit status 5 when it found an FP.
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
            print(f"\nHANG: {name} ran over {hang_s:g} s on\n  text={texts[current]!r}\n  gold={golds[current]!r}",
                  flush=True)
            sys.exit(3)
        kind, value = parent.recv()
        if kind == "start":
            current = value
        elif kind == "end":
            lat.append(value)
        elif kind == "raised":
            proc.join()
            print(f"\nRAISED: {name} raised {value} on\n  text={texts[current]!r}\n  gold={golds[current]!r}",
                  flush=True)
            sys.exit(4)
        else:
            proc.join()
            return lat


def differential(args) -> None:
    import json

    from fuzz_diff import family_table, load_golds, make_pairs, run_differential

    t0 = time.perf_counter()
    golds = load_golds()
    by_src: dict[str, int] = {}
    for src, _ in golds:
        by_src[src] = by_src.get(src, 0) + 1
    pairs = make_pairs(golds, args.pairs, seed=args.seed, families=args.families.split(",") if args.families else None)
    print(f"fuzz_rewards --differential: {len(pairs)} pairs, seed {args.seed}, golds {by_src}, "
          f"generated in {time.perf_counter() - t0:.1f} s")
    print("families:\n" + family_table(sorted({p.family for p in pairs})))
    rep = run_differential(pairs, workers=args.workers, progress=lambda m: print(m, flush=True))
    print(rep.table())
    t = rep.timings
    print(f"time: reward {t['reward_s']:.1f} s, oracle A {t['oracle_a_s']:.1f} s, oracle B {t['oracle_b_s']:.1f} s "
          f"({rep.oracle_b_calls} math-verify calls), total {t['total_s']:.1f} s "
          f"({len(pairs) / t['total_s']:.0f} pairs/s)")
    print(f"\nFALSE POSITIVES ({len(rep.fp)}): the reward paid, the oracle says different")
    for r in rep.fp:
        print(f"  [{r['family']}/{r['variant']}] gold={r['gold']!r} pred={r['pred']!r} oracle A={r['judge_a']} "
              f"{r['why']} info={r['info']}")
    if rep.contested:
        print(f"\nCONTESTED ({len(rep.contested)}, not counted): paid; judge A reads two different values, math-verify "
              "says equal")
        for r in rep.contested[: args.show]:
            print(f"  [{r['family']}/{r['variant']}] gold={r['gold']!r} pred={r['pred']!r} info={r['info']}")
    print(f"\nFALSE NEGATIVES ({len(rep.fn)}; first {args.show} per family): the oracle says equal, the reward did not "
          "pay")
    shown: dict[str, int] = {}
    for r in rep.fn:
        if shown.get(r["family"], 0) < args.show:
            shown[r["family"]] = shown.get(r["family"], 0) + 1
            print(f"  [{r['family']}/{r['variant']}] gold={r['gold']!r} pred={r['pred']!r} score={r['score']} "
                  f"info={r['info']}")
    if args.json:
        from fuzz_diff import summary

        out = summary(rep)
        out["fn"] = rep.fn
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, ensure_ascii=False, default=str)
        print(f"wrote {args.json}")
    if rep.fp:
        sys.exit(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000, help="hostile texts per reward")
    ap.add_argument("--max-chars", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang-s", type=float, default=10.0)
    ap.add_argument("--differential", action="store_true", help="perturbed golds vs an independent oracle (FP/FN)")
    ap.add_argument("--pairs", type=int, default=100_000, help="--differential: pairs to try")
    ap.add_argument("--families", default="", help="--differential: comma-separated families (default all)")
    ap.add_argument("--workers", type=int, default=2, help="--differential: oracle processes")
    ap.add_argument("--show", type=int, default=5, help="--differential: FN/contested rows shown per family")
    ap.add_argument("--json", default="", help="--differential: write every FP/FN/contested row here")
    args = ap.parse_args()
    if args.differential:
        differential(args)
        return

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
        print(f"{name:22s} {len(lat):6d} {1e3 * sum(lat) / len(lat):8.3f} {1e3 * p99:8.3f} {1e3 * lat[w]:8.2f}  "
              f"{texts[w][:60]!r}")
        if lat[w] > worst_overall[0]:
            worst_overall = (lat[w], name, texts[w])
    print(f"worst call: {1e3 * worst_overall[0]:.2f} ms in {worst_overall[1]} on {worst_overall[2]!r}")


if __name__ == "__main__":
    main()
