"""Benchmark: three math graders on real completions of the embedded model, labelled by eye (issue 22).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/real_completions.py \
        [--file tests/data/real_completions.jsonl] [--json OUT]

Every row of ``tests/data/real_completions.jsonl`` (``id``, ``source``, ``gold``, ``completion``, ``label``,
``note``, ``reviewed``; how the set was made is in ``tests/test_real_completions.py``) is graded by:

* **rewardlab**: ``score_batch(math_reward, completions, golds)``; paid = score 1.0;
* **lm-eval GSM8K flexible-extract** (``pip install lm-eval``; ``--no-deps`` plus ``sacrebleu`` is enough):
  the filter chain and the ``exact_match`` settings are read from lm-eval's own installed
  ``lm_eval/tasks/gsm8k/gsm8k.yaml`` (filter ``flexible-extract``: ``regex`` with
  ``(-?[$0-9.,]{2,})|(-?[0-9]+)`` and ``group_select: -1``, then ``take_first``), each step built with
  lm-eval's ``get_filter`` and applied as its ``FilterEnsemble`` does, then lm-eval's
  ``exact_match_hf_evaluate`` with the yaml's ``ignore_case`` / ``ignore_punctuation`` /
  ``regexes_to_ignore`` against the gold (the yaml's target is the GSM8K solution, whose
  ``(?s).*#### `` prefix it strips; our golds are the bare answer, which that regex leaves as is).
  The completion is first cut at the yaml's ``generation_kwargs.until`` strings, as lm-eval's
  generation would have stopped there;
* **math-verify**: ``verify(parse(gold), parse(completion))`` as its README shows (main thread).

Printed: for each grader FP (paid, label false) and FN (not paid, label true) as counts and as rates
(FP / rows labelled false, FN / rows labelled true), then every rewardlab FP and FN with its ``info``
(pred, extraction, status, rule). ``--json`` also writes the per-row verdicts.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FILE = REPO / "tests" / "data" / "real_completions.jsonl"


def load_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def grade_rewardlab(rows: list[dict]) -> list[tuple[bool, dict]]:
    from rewardlab.rewards import math_reward, score_batch

    res = score_batch(math_reward, [r["completion"] for r in rows], [r["gold"] for r in rows], deadline=5.0)
    return [(r.score == 1.0, dict(r.info)) for r in res]


def lm_eval_gsm8k_config() -> dict:
    """lm-eval's own gsm8k.yaml, from the installed package (not a copy)."""
    import importlib.util

    import yaml

    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lm-eval is not installed: pip install lm-eval (or --no-deps lm-eval sacrebleu)")
    path = Path(list(spec.submodule_search_locations)[0]) / "tasks" / "gsm8k" / "gsm8k.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["_path"] = str(path)
    return cfg


def grade_lm_eval(rows: list[dict]) -> tuple[list[tuple[bool, dict]], dict]:
    import lm_eval
    import lm_eval.filters  # noqa: F401 - registers lm-eval's filters (regex, take_first, ...)
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.api.registry import get_filter

    cfg = lm_eval_gsm8k_config()
    chain = next(f for f in cfg["filter_list"] if f["name"] == "flexible-extract")["filter"]
    metric = next(m for m in cfg["metric_list"] if m["metric"] == "exact_match")
    em_kwargs = {k: metric[k] for k in ("ignore_case", "ignore_punctuation", "regexes_to_ignore") if k in metric}
    until = cfg.get("generation_kwargs", {}).get("until", [])

    def cut(text: str) -> str:
        for s in until:
            k = text.find(s)
            if k >= 0:
                text = text[:k]
        return text

    # One instance per row, resps = [completion], as FilterEnsemble.apply passes them.
    resps: list = [[cut(r["completion"])] for r in rows]
    docs = [{"answer": r["gold"]} for r in rows]
    for step in chain:
        kwargs = {k: v for k, v in step.items() if k != "function"}
        resps = list(get_filter(step["function"])(**kwargs).apply(resps, docs))
    out = []
    for r, pred in zip(rows, resps):
        pred = pred if isinstance(pred, str) else pred[0]
        em = exact_match_hf_evaluate(predictions=[pred], references=[str(r["gold"])], **em_kwargs)["exact_match"]
        out.append((bool(em == 1.0), {"pred": pred}))
    meta = {"version": lm_eval.__version__, "yaml": cfg["_path"], "filter": chain, "exact_match": em_kwargs,
            "until": until}
    return out, meta


def grade_math_verify(rows: list[dict]) -> list[tuple[bool, dict]]:
    from math_verify import parse, verify

    logging.disable(logging.WARNING)  # math-verify logs every timeout
    out = []
    for r in rows:
        try:
            p = parse(r["completion"])
            ok = bool(verify(parse(str(r["gold"])), p))
            out.append((ok, {"pred": [str(x) for x in p]}))
        except Exception as e:  # noqa: BLE001 - the peer's own failures count as "not paid"
            out.append((False, {"error": repr(e)}))
    return out


def confusion(rows: list[dict], paid: list[bool]) -> dict:
    fp = [r["id"] for r, p in zip(rows, paid) if p and not r["label"]]
    fn = [r["id"] for r, p in zip(rows, paid) if not p and r["label"]]
    neg = sum(1 for r in rows if not r["label"])
    pos = len(rows) - neg
    return {"fp": len(fp), "fn": len(fn), "fp_rate": len(fp) / max(neg, 1), "fn_rate": len(fn) / max(pos, 1),
            "fp_ids": fp, "fn_ids": fn, "negatives": neg, "positives": pos}


def grade_all(rows: list[dict], peers: bool = True) -> dict:
    graders: dict = {}
    t = time.perf_counter()
    graders["rewardlab"] = grade_rewardlab(rows)
    times = {"rewardlab": time.perf_counter() - t}
    meta = {}
    if peers:
        t = time.perf_counter()
        graders["lm-eval flexible-extract"], meta["lm-eval"] = grade_lm_eval(rows)
        times["lm-eval flexible-extract"] = time.perf_counter() - t
        t = time.perf_counter()
        graders["math-verify"] = grade_math_verify(rows)
        times["math-verify"] = time.perf_counter() - t
    return {"graders": graders, "times": times, "meta": meta}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE)
    ap.add_argument("--json", type=Path, default=None, help="write per-row verdicts and the summary here")
    ap.add_argument("--no-peers", action="store_true", help="rewardlab only (no lm-eval / math-verify)")
    args = ap.parse_args(argv)

    rows = load_rows(args.file)
    from collections import Counter

    reviewed = sum(1 for r in rows if r.get("reviewed"))
    print(f"{args.file}: {len(rows)} rows ({reviewed} read by eye), {sum(r['label'] for r in rows)} labelled correct")
    print("  sources: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(r["source"] for r in rows).items())))
    res = grade_all(rows, peers=not args.no_peers)
    if "lm-eval" in res["meta"]:
        m = res["meta"]["lm-eval"]
        print(f"  lm-eval {m['version']}: {m['yaml']}: filter {m['filter']}, exact_match {m['exact_match']}, until "
              f"{m['until']}")
    print()
    print(f"{'grader':<26} {'FP':>4} {'FP rate':>8} {'FN':>4} {'FN rate':>8} {'paid':>5} {'time s':>7}")
    summary = {}
    for name, verdicts in res["graders"].items():
        c = confusion(rows, [p for p, _ in verdicts])
        summary[name] = c
        print(f"{name:<26} {c['fp']:>4} {c['fp_rate']:>8.1%} {c['fn']:>4} {c['fn_rate']:>8.1%} "
              f"{sum(p for p, _ in verdicts):>5} {res['times'][name]:>7.1f}")
    neg = sum(1 for r in rows if not r["label"])
    print(f"(FP rate = FP / {neg} rows labelled incorrect; FN rate = FN / {len(rows) - neg} rows labelled correct)")

    rl = res["graders"]["rewardlab"]
    for kind, want_paid in (("FP", True), ("FN", False)):
        bad = [(r, info) for r, (p, info) in zip(rows, rl) if p == want_paid and bool(r["label"]) != want_paid]
        print(f"\nrewardlab {kind} ({len(bad)}):")
        for r, info in bad:
            keep = {k: info.get(k) for k in ("pred", "extraction", "status", "rule") if k in info}
            print(f"- {r['id']}  gold={r['gold']!r}  {keep}")
            if r.get("note"):
                print(f"    note: {r['note']}")
            print("    " + json.dumps(r["completion"])[:600])
    if args.json:
        out = {"summary": summary, "times": res["times"], "meta": res["meta"],
               "rows": [{"id": r["id"], **{g: {"paid": v[i][0], **v[i][1]} for g, v in res["graders"].items()}}
                        for i, r in enumerate(rows)]}
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
