"""JudgeReward benchmark: throughput and latency, cache hit rate on a rollout batch, agreement with math_reward.

    OMP_NUM_THREADS=1 .venv/bin/python bench/judge.py                      # loopback fake judge (subprocess)
    OMP_NUM_THREADS=1 .venv/bin/python bench/judge.py --url http://127.0.0.1:8000/v1 --model smollm2 \\
        --rollout-url http://127.0.0.1:8000/v1 --rollout-model smollm2 --structured

1. **Throughput**: requests/s and p50/p99 request latency at concurrency 1, 8 and 32 (``max_concurrency``),
   cache off, every answer distinct. Without ``--url`` the server is the scripted fake of
   ``tests/judge_server.py`` in its own process, answering after ``--fake-delay`` seconds (the
   figures then measure the client: event loop, semaphore, httpx, parsing).
2. **Cache hit rate on a rollout batch in groups of 8**: ``--rollout-url`` samples 8 completions
   (temperature 1.0) for each of ``--prompts`` arithmetic questions (``rewardlab.tasks.arith_rows``) from
   an OpenAI-compatible server serving the policy (e.g. ``vllm serve`` of the embedded SmolLM2);
   without it the batch is ``tests/data/real_completions.jsonl`` (real completions of the embedded
   model, in groups of up to 4 per problem: the figure is then for those groups, and says so).
3. **Agreement** between the judge and ``math_reward`` on the same answers: the share of items the
   judge graded (status ``ok``) on which its verdict equals the math reward's, and the judge's statuses.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rewardlab.rewards import math_reward  # noqa: E402
from rewardlab.rewards.judge import VERDICT_REGEX, JudgeOptions, JudgeReward, judge_metrics  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def start_fake(delay: float) -> tuple[subprocess.Popen, str]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import uvicorn; "
            f"from judge_server import fake_judge_app, naive; "
            f"uvicorn.run(fake_judge_app(naive, delay={delay}), host='127.0.0.1', port={port}, "
            f"log_level='warning', access_log=False, backlog=1024)")
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the fake judge server did not start")


def throughput(url: str, model: str, n: int, structured: bool, max_tokens: int) -> list[dict]:
    q = "Tom has 3 apples and buys 4 more. How many apples does Tom have now?"
    rows = []
    extra = {"structured_outputs": {"regex": VERDICT_REGEX}} if structured else None
    for c in (1, 8, 32):
        judge = JudgeReward(url, model, JudgeOptions(max_concurrency=c, cache=False, deadline=300.0,
                                                     queue_timeout=3600.0, retries=0, max_tokens=max_tokens,
                                                     extra_body=extra))
        k = max(n, 2 * c) if n else 0
        comps = [f"\\boxed{{{1000 * c + i}}}" for i in range(k)]
        t0 = time.monotonic()
        results = judge.score_many(comps, ["7"] * k, [{"question": q}] * k)
        wall = time.monotonic() - t0
        lat = [r.info["latency_s"] for r in results if "latency_s" in r.info]
        rows.append({"concurrency": c, "requests": k, "wall_s": round(wall, 3), "rps": round(k / wall, 2),
                     "p50_s": round(pct(lat, 0.5), 4), "p99_s": round(pct(lat, 0.99), 4),
                     "statuses": dict(Counter(r.status for r in results))})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def rollouts(url: str, model: str, prompts: int, max_tokens: int) -> tuple[list[dict], str]:
    import httpx

    from rewardlab.tasks import arith_rows

    rows = arith_rows("test", n=prompts, seed=0)
    out = []
    with httpx.Client(timeout=600.0, trust_env=False) as client:
        for row in rows:
            body = {"model": model, "messages": row.prompt, "n": 8, "temperature": 1.0, "max_tokens": max_tokens}
            data = client.post(url.rstrip("/") + "/chat/completions", json=body).json()
            for i, ch in enumerate(data["choices"]):
                out.append({"group": row.id, "question": row.meta.get("question"), "gold": row.reference,
                            "completion": ch["message"]["content"]})
    return out, f"{prompts} arith prompts x 8 completions from {model} at {url} (temperature 1.0, {max_tokens} tokens)"


def stored_rollouts() -> tuple[list[dict], str]:
    out = []
    for line in (ROOT / "tests" / "data" / "real_completions.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.append({"group": (r["source"], r["problem_id"]), "question": None, "gold": r["gold"],
                    "completion": r["completion"]})
    sizes = Counter(Counter(str(x["group"]) for x in out).values())
    return out, f"tests/data/real_completions.jsonl ({len(out)} completions; group sizes {dict(sizes)}, not 8)"


def grade(url: str, model: str, batch: list[dict], structured: bool, max_tokens: int) -> dict:
    extra = {"structured_outputs": {"regex": VERDICT_REGEX}} if structured else None
    judge = JudgeReward(url, model, JudgeOptions(max_concurrency=8, deadline=300.0, queue_timeout=3600.0,
                                                 max_tokens=max_tokens, extra_body=extra))
    t0 = time.monotonic()
    results = judge.score_many([b["completion"] for b in batch], [b["gold"] for b in batch],
                               [{"question": b["question"]} if b["question"] else {} for b in batch])
    wall = time.monotonic() - t0
    rule = [math_reward(b["completion"], b["gold"]) for b in batch]
    m = judge_metrics(results)
    graded = [(j, r) for j, r in zip(results, rule) if j.status == "ok" and r.ok]
    agree = sum((j.score == 1.0) == (r.score == 1.0) for j, r in graded)
    judged_items = [j for j in results if j.info.get("judged")]
    return {
        "items": len(batch), "wall_s": round(wall, 2),
        "judged_items": len(judged_items),
        "cache_hit_rate": round(m["judge/cache_hit_rate"], 4),
        "requests": int(m["judge/requests"]),
        "prompt_tokens": int(m["judge/prompt_tokens"]), "completion_tokens": int(m["judge/completion_tokens"]),
        "judge_statuses": dict(Counter(j.status for j in results)),
        "math_correct": sum(r.score == 1.0 for r in rule),
        "judge_correct": sum(j.score == 1.0 for j in results),
        "both_graded": len(graded), "agreement": round(agree / len(graded), 4) if graded else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="judge server (OpenAI-compatible /v1); default: a loopback fake")
    ap.add_argument("--model", default="fake-judge")
    ap.add_argument("--fake-delay", type=float, default=0.02, help="seconds the fake judge takes per reply")
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level (at least 2x it)")
    ap.add_argument("--rollout-url", help="policy server for the rollout batch (default: stored completions)")
    ap.add_argument("--rollout-model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--rollout-tokens", type=int, default=48)
    ap.add_argument("--judge-tokens", type=int, default=48)
    ap.add_argument("--structured", action="store_true", help="ask vLLM to constrain replies to VERDICT_REGEX")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()

    proc = None
    url, model = args.url, args.model
    if url is None:
        proc, url = start_fake(args.fake_delay)
        print(f"# judge: loopback fake (tests/judge_server.py naive script, {args.fake_delay} s per reply) at {url}")
    else:
        print(f"# judge: {model} at {url}" + (" (structured outputs)" if args.structured else ""))
    try:
        report: dict = {"judge": {"url": url, "model": model, "fake": proc is not None, "structured": args.structured}}
        if not args.skip_throughput:
            print("## throughput (cache off, distinct answers)")
            report["throughput"] = throughput(url, model, args.requests, args.structured, args.judge_tokens)
        if args.rollout_url:
            batch, what = rollouts(args.rollout_url, args.rollout_model, args.prompts, args.rollout_tokens)
        else:
            batch, what = stored_rollouts()
        print(f"## rollout batch: {what}")
        report["rollout_batch"] = what
        report["grading"] = grade(url, model, batch, args.structured, args.judge_tokens)
        print(json.dumps(report["grading"]))
        print("## summary\n" + json.dumps(report, indent=1))
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
