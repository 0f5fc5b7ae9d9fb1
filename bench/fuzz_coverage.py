"""Coverage-guided fuzzing (atheris/libFuzzer) of every caller-thread entry point, with a cost oracle.

    .venv/bin/python bench/fuzz_coverage.py                       # 120 s, all entry points
    .venv/bin/python bench/fuzz_coverage.py --seconds 600 --time-bound-ms 50 --mem-bound-mb 50
    .venv/bin/python bench/fuzz_coverage.py --seed-only           # the seed corpus once: p50/p99/max cost

What it fuzzes: what runs on a trainer's thread without a deadline (:func:`rewardlab.rewards.fuzz.caller_thread_paths`:
the math reward's extraction and fast path with the input as completion and as gold, the format,
length and repetition rewards, code-block extraction) plus ``extract_answer``, ``extract_gold`` and
``fast_compare`` on their own (``fast_compare`` with both sides cut to ``FAST_MAX_CHARS``, as
``math_reward.fast`` calls it), and the model-native tool-call parser ``tool_calls_of``. An input is
UTF-8 (invalid bytes become U+FFFD); a ``\\x1f`` splits it into completion and gold, else the gold is one
of :data:`rewardlab.rewards.fuzz.GOLDS`.

The cost oracle: a call that uses more than ``--time-bound-ms`` of *thread CPU time* twice in a row
(so a scheduler hiccup on a loaded machine is no finding), or that raises the process's peak RSS by
more than ``--mem-bound-mb``, raises :class:`CostFinding`; an exception escaping an entry point is a
finding too. libFuzzer then writes the input to ``crash-*`` (``timeout-*`` when a call runs past
``--hang-s``: a real hang is stopped by libFuzzer's own alarm, since nothing in Python can
interrupt a regex or a big-integer operation holding the GIL). Each finding is printed with a
minimal repro (libFuzzer's ``-minimize_crash`` is run on it when ``--minimize`` is given).

The seed corpus (written to ``--corpus``, default a temporary folder) is built from the regression
tables of ``tests/test_fuzz_rewards.py`` and ``tests/test_math_reward.py``, the scaling families of
the former at small sizes, and the public corpus ``../shared/bench/math_equiv_public.jsonl``.

The fuzzing runs in a child process (the coverage instrumentation has to be in place before
rewardlab is imported). Exit status: 0 no finding, 6 a finding.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEP = "\x1f"
TIME_BOUND_MS = 50.0
"""Default cost bound per call (thread CPU). The seed corpus measures p99 < 2 ms and max ~10 ms per
entry point on this machine uninstrumented (see ``--seed-only``); instrumented calls are ~2-3x slower."""
MEM_BOUND_MB = 50.0


# ---------------------------------------------------------------------------- the seed corpus

def seed_inputs() -> list[tuple[str, str]]:
    """(completion, gold) seeds: regression tables, small scaling families, the public corpus, golds."""
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO))
    out: list[tuple[str, str]] = []
    try:
        import test_fuzz_rewards as tfr

        out += [(c, g) for c, g, *_ in tfr.REGRESSIONS]
        out += [(fam(n), "5") for fam in tfr.FAMILIES.values() for n in (1, 3, 40)]
    except Exception as e:  # noqa: BLE001 - a missing table is reported, not fatal
        print(f"fuzz_coverage: no seeds from tests/test_fuzz_rewards.py ({type(e).__name__}: {e})", file=sys.stderr)
    try:
        import test_math_reward as tmr

        out += [(c, g) for c, g, *_ in tmr.CASES if isinstance(c, str) and isinstance(g, str)]
        out += [(j[:5000], "5") for j in tmr.GARBAGE if isinstance(j, str)]
    except Exception as e:  # noqa: BLE001
        print(f"fuzz_coverage: no seeds from tests/test_math_reward.py ({type(e).__name__}: {e})", file=sys.stderr)
    corpus = REPO.parent / "shared" / "bench" / "math_equiv_public.jsonl"
    if corpus.is_file():
        for line in corpus.open(encoding="utf-8"):
            if line.strip():
                row = json.loads(line)
                out.append((row["pred"][:8000], row["gold"][:2000]))
    from rewardlab.rewards.fuzz import GOLDS

    out += [(g, g) for g in GOLDS]
    out += [(t, "5") for t in TOOL_CALL_SEEDS]
    return out


TOOL_CALL_SEEDS = [
    '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
    'Let me check.<tool_call>\n{"name": "f", "arguments": "{}"}\n</tool_call><tool_call>{"name": "g"}</tool_call>',
    '<tool_call>{"name": "f", "arguments": ' + "[" * 900 + "]" * 900 + "}</tool_call>",
    "<tool_call><tool_call></tool_call>{not json}</tool_call",
]
"""Seeds for the model-native tool-call parser (it reads every model turn of an episode, and every endpoint
reply with tools, without a deadline)."""


def encode(completion: str, gold: str) -> bytes:
    return (completion + SEP + gold).encode("utf-8", "surrogatepass")


def decode(data: bytes) -> tuple[str, str]:
    from rewardlab.rewards.fuzz import GOLDS

    text = data.decode("utf-8", "replace")
    if SEP in text:
        completion, gold = text.split(SEP, 1)
        return completion, gold
    return text, GOLDS[len(data) % len(GOLDS)]


def write_corpus(folder: Path, seeds: list[tuple[str, str]], max_len: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    for c, g in seeds:
        data = encode(c, g)[:max_len]
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
        n += 1
    return n


# ---------------------------------------------------------------------------- the entry points and the cost oracle

class CostFinding(Exception):
    """A call that cost more than the bound (time or memory): the input that atheris reports."""


def entry_points() -> dict:
    """Every caller-thread entry point as ``fn(completion, gold)``."""
    from rewardlab.rewards.fuzz import caller_thread_paths
    from rewardlab.rewards.math import FAST_MAX_CHARS
    from rewardlab.rewards.math.equiv import fast_compare
    from rewardlab.rewards.math.extract import extract_answer, extract_gold
    from rewardlab.rollout.toolcalls import tool_calls_of

    eps = dict(caller_thread_paths())
    eps["extract_answer"] = lambda t, g: extract_answer(t)
    eps["extract_gold"] = lambda t, g: extract_gold(t)
    eps["fast_compare"] = lambda t, g: fast_compare(t[:FAST_MAX_CHARS], g[:FAST_MAX_CHARS])
    eps["fast_compare(swapped)"] = lambda t, g: fast_compare(g[:FAST_MAX_CHARS], t[:FAST_MAX_CHARS])
    eps["tool_calls_of"] = lambda t, g: tool_calls_of(t)
    return eps


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_checker(eps: dict, time_bound_s: float, mem_bound_mb: float, costs: dict | None = None):
    """``check(completion, gold)``: every entry point under the cost oracle; raises on a finding.
    ``costs`` (if given) collects per entry point: calls, max ms and its input, and a sample of costs."""
    import random

    rng = random.Random(0)

    def timed(fn, t, g) -> float:
        start = time.thread_time()
        fn(t, g)
        return time.thread_time() - start

    def check(t: str, g: str) -> None:
        for name, fn in eps.items():
            before = _peak_rss_mb()
            try:
                took = timed(fn, t, g)
            except CostFinding:
                raise
            except Exception as e:  # noqa: BLE001 - no entry point may raise
                raise CostFinding(f"{name} raised {type(e).__name__}: {e}") from e
            if costs is not None:
                c = costs.setdefault(name, {"calls": 0, "max_ms": 0.0, "max_input": "", "sample_ms": []})
                c["calls"] += 1
                if 1e3 * took > c["max_ms"]:
                    c["max_ms"], c["max_input"] = 1e3 * took, (t[:200], g[:100])
                if len(c["sample_ms"]) < 5000:
                    c["sample_ms"].append(1e3 * took)
                elif rng.random() < 5000 / c["calls"]:
                    c["sample_ms"][rng.randrange(5000)] = 1e3 * took
            grew = _peak_rss_mb() - before
            if grew > mem_bound_mb:
                raise CostFinding(f"{name} raised the peak RSS by {grew:.0f} MB (bound {mem_bound_mb:g} MB)")
            if took > time_bound_s:
                again = timed(fn, t, g)  # twice in a row: noise does not repeat, a blow-up does
                if again > time_bound_s:
                    raise CostFinding(f"{name} took {1e3 * took:.1f} / {1e3 * again:.1f} ms of CPU "
                                      f"(bound {1e3 * time_bound_s:g} ms)")

    return check


# ---------------------------------------------------------------------------- the child: atheris

def child(args) -> None:
    import atheris

    with atheris.instrument_imports(include=["rewardlab"]):
        import rewardlab.rewards  # noqa: F401
        import rewardlab.rewards.fuzz  # noqa: F401
        import rewardlab.rewards.math.equiv  # noqa: F401
        import rewardlab.rollout.toolcalls  # noqa: F401

    eps = entry_points()
    if args.targets:
        eps = {k: v for k, v in eps.items() if k in args.targets.split(",")}
    costs: dict = {}
    warm = make_checker(eps, float("inf"), float("inf"))
    for t, g in [("warm up \\boxed{5}", "5"), ("#### 12", "12")]:
        warm(t, g)  # first-call costs (regex compilation) are not findings
    check = make_checker(eps, args.time_bound_ms / 1e3, args.mem_bound_mb, costs)
    counter = [0]
    costs_file = Path(args.artifacts) / "costs.json"

    def dump_costs() -> None:
        summary = {}
        for name, c in costs.items():
            xs = sorted(c["sample_ms"])
            summary[name] = {"calls": c["calls"], "p50_ms": xs[len(xs) // 2],
                             "p99_ms": xs[min(len(xs) - 1, int(0.99 * len(xs)))],
                             "max_ms": c["max_ms"], "max_input": c["max_input"]}
        costs_file.write_text(json.dumps(summary, indent=1, ensure_ascii=False))

    def test_one_input(data: bytes) -> None:
        t, g = decode(data)
        counter[0] += 1
        if counter[0] % 250 == 0:
            dump_costs()  # libFuzzer ends the process with exit(): no Python clean-up runs after it
        try:
            check(t, g)
        except CostFinding:
            dump_costs()
            raise

    argv = [sys.argv[0], str(args.corpus), f"-max_total_time={int(args.seconds)}", f"-timeout={int(args.hang_s)}",
            f"-rss_limit_mb={args.rss_limit_mb}", f"-max_len={args.max_len}", f"-artifact_prefix={args.artifacts}/",
            "-print_final_stats=1"]
    if args.runs:
        argv.append(f"-runs={args.runs}")
    if args.seed is not None:
        argv.append(f"-seed={args.seed}")
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


# ---------------------------------------------------------------------------- the parent

def seed_only(args) -> None:
    """Measure every entry point over the seed corpus once (uninstrumented): p50 / p99 / max."""
    sys.path.insert(0, str(REPO))
    seeds = seed_inputs()
    eps = entry_points()
    print(f"fuzz_coverage --seed-only: {len(seeds)} seeds")
    print(f"{'entry point':24s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s}  worst seed")
    for name, fn in eps.items():
        lat = []
        for t, g in seeds:
            start = time.thread_time()
            fn(t, g)
            lat.append((time.thread_time() - start, t))
        lat.sort(key=lambda x: x[0])
        p = lambda q: 1e3 * lat[min(len(lat) - 1, int(q * len(lat)))][0]  # noqa: E731
        print(f"{name:24s} {p(0.5):8.3f} {p(0.99):8.3f} {1e3 * lat[-1][0]:8.2f}  {lat[-1][1][:50]!r}")


def findings(artifacts: Path) -> list[dict]:
    out = []
    for f in sorted(artifacts.glob("*")):
        if f.name.split("-")[0] in ("crash", "timeout", "oom", "slow", "leak", "minimized"):
            data = f.read_bytes()
            text = data.decode("utf-8", "replace")
            completion, _, gold = text.partition(SEP)
            out.append({"kind": f.name.split("-")[0], "file": str(f), "completion": completion,
                        "gold": gold if _ else None, "bytes": len(data)})
    return out


def run_coverage(seconds: float = 30, *, time_bound_ms: float = TIME_BOUND_MS, mem_bound_mb: float = MEM_BOUND_MB,
                 hang_s: float = 5, runs: int = 0, seed: int | None = 0, corpus: Path | None = None,
                 artifacts: Path | None = None, max_len: int = 4096, targets: str = "", quiet: bool = False,
                 extra_env: dict | None = None) -> dict:
    """Build the seed corpus, run atheris in a child for ``seconds``; return its stats and findings."""
    tmp = Path(tempfile.mkdtemp(prefix="fuzz-coverage-"))
    corpus = corpus or tmp / "corpus"
    artifacts = artifacts or tmp / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    n = write_corpus(corpus, seed_inputs(), max_len)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--seconds", str(seconds), "--corpus", str(corpus),
           "--artifacts", str(artifacts), "--time-bound-ms", str(time_bound_ms), "--mem-bound-mb", str(mem_bound_mb),
           "--hang-s", str(hang_s), "--max-len", str(max_len), "--runs", str(runs)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if targets:
        cmd += ["--targets", targets]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **(extra_env or {}))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, errors="replace",
                          timeout=seconds + 4 * hang_s + 120)
    wall = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    stats = {}
    for line in log.splitlines():
        if line.startswith("stat::"):
            k, _, v = line[6:].partition(":")
            stats[k.strip()] = v.strip()
    cov = [line for line in log.splitlines() if " cov: " in line]
    res = {"rc": proc.returncode, "seeds": n, "wall_s": round(wall, 1), "stats": stats,
           "last_status": cov[-1] if cov else "", "findings": findings(artifacts), "artifacts": str(artifacts),
           "log_tail": log[-4000:]}
    costs_file = artifacts / "costs.json"
    res["costs"] = json.loads(costs_file.read_text()) if costs_file.is_file() else {}
    finding_lines = [line for line in log.splitlines() if "CostFinding" in line or "ALARM" in line
                     or "ERROR: libFuzzer" in line]
    res["finding_lines"] = finding_lines[:20]
    if not quiet:
        print(f"fuzz_coverage: {n} seeds, {seconds:g} s, rc {proc.returncode}, wall {wall:.1f} s")
        print(f"  {res['last_status']}")
        print(f"  runs {stats.get('number_of_executed_units', '?')}, {stats.get('average_exec_per_sec', '?')} exec/s, "
              f"peak RSS {stats.get('peak_rss_mb', '?')} MB")
        if res["costs"]:
            print(f"  {'entry point (instrumented)':28s} {'calls':>7s} {'p50 ms':>7s} {'p99 ms':>7s} {'max ms':>7s}  "
                  "slowest input")
            for name, c in res["costs"].items():
                print(f"  {name:28s} {c['calls']:7d} {c['p50_ms']:7.3f} {c['p99_ms']:7.3f} {c['max_ms']:7.2f}  "
                      f"{c['max_input'][0][:60]!r}")
        for line in finding_lines:
            print("  " + line)
        for f in res["findings"]:
            print(f"  FINDING [{f['kind']}] completion={f['completion'][:300]!r} gold={(f['gold'] or '')[:100]!r} "
                  f"({f['file']})")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--runs", type=int, default=0, help="stop after this many inputs (0: no limit)")
    ap.add_argument("--time-bound-ms", type=float, default=TIME_BOUND_MS)
    ap.add_argument("--mem-bound-mb", type=float, default=MEM_BOUND_MB)
    ap.add_argument("--hang-s", type=float, default=5, help="libFuzzer's own timeout (a real hang)")
    ap.add_argument("--rss-limit-mb", type=int, default=3072)
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--targets", default="", help="comma-separated entry points (default all)")
    ap.add_argument("--corpus", type=Path, default=None, help="corpus folder (kept; default a temporary one)")
    ap.add_argument("--artifacts", type=Path, default=None)
    ap.add_argument("--seed-only", action="store_true", help="measure the seed corpus once, no fuzzing")
    ap.add_argument("--json", default="")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.seed_only:
        seed_only(args)
        return
    res = run_coverage(args.seconds, time_bound_ms=args.time_bound_ms, mem_bound_mb=args.mem_bound_mb,
                       hang_s=args.hang_s,
                       runs=args.runs, seed=args.seed, corpus=args.corpus, artifacts=args.artifacts,
                       max_len=args.max_len,
                       targets=args.targets)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, ensure_ascii=False))
    sys.exit(6 if res["findings"] or res["finding_lines"] else 0)


if __name__ == "__main__":
    main()
