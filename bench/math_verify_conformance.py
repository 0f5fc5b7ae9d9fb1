"""Math-Verify's own test suite as a conformance table for rewardlab's math reward (issue 22).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/math_verify_conformance.py \
        [--file bench/data/math_verify_cases.jsonl] [--json] [--no-peer]

Reads ``bench/data/math_verify_cases.jsonl`` (made by ``bench/extract_math_verify_cases.py`` from the
peer's ``tests/`` folder; its first line names the repository, commit and licence). No network.

How each case is fed to rewardlab, mirroring how the peer's test feeds math-verify:

* the peer's tests call ``parse(gold, targets)`` and ``parse(pred, targets)`` on the two strings exactly
  as written (``pred`` is often a whole model solution, ``gold`` sometimes too), then ``verify``. So
  rewardlab gets ``math_reward(completion=pred, gold=gold)`` with both strings untouched: the
  completion goes through rewardlab's answer extraction, the gold through its gold extraction
  (``extract_gold``: last box, ``####``, an answer phrase in a long text, else the whole string).
  Graded with ``score_batch(math_reward, preds, golds, deadline=5.0)``; *paid* = score 1.0;
* ``check == "extracts"`` (the peer asserts that ``parse`` finds something, or nothing, under an
  explicit config; no gold): rewardlab's verdict is whether its extraction stage, ``extract_answer(pred)``
  under the default policy, finds an answer;
* cases the extractor turned from sympy objects (``test_precision``'s ``sympy_expr_eq(Rational(1, 3),
  Float(0.333), float_rounding=3)``) arrive as text, ``1/3`` and ``0.333``.

Agreement: rewardlab's verdict equals the label. **FP**: paid, label False (we pay, the peer's test says
wrong). **FN**: not paid, label True. Cases marked ``config_dependent`` (their label needs a
non-default math-verify setting, such as ``strict=False`` or ``float_rounding=2``, or the test asserts on
``parse`` output under an explicit extraction config; see ``config_reason``) are counted apart: a plain
reward call cannot know them.

math-verify (installed in .venv) is graded twice: with the test's own call (``compare_strings``' configs
and options, ``verify(parse(...), parse(...))``, ``parse(text, [config], ...)`` or ``sympy_expr_eq``,
rebuilt from the case's ``mv`` field; this is the peer passing its own suite) and with its
out-of-the-box call ``verify(parse(gold), parse(pred))``, the call a reward would make.

Printed: agreement per test file (main cases, then config-dependent), the totals of rewardlab and of
math-verify both ways, then every rewardlab disagreement, FP first, then FN (main, then
config-dependent): id, file::test, label, gold, pred, and rewardlab's ``info["status"]``,
``info["pred"]``, ``info["rule"]``. ``--json`` prints the same as one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FILE = REPO / "bench" / "data" / "math_verify_cases.jsonl"


def load(path: Path = DEFAULT_FILE) -> tuple[dict, list[dict]]:
    """(meta, cases) of the JSONL; the first line is ``{"_meta": ...}``."""
    meta: dict = {}
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "_meta" in row:
            meta = row["_meta"]
        else:
            cases.append(row)
    return meta, cases


# -- rewardlab -----------------------------------------------------------------------------------

def grade_rewardlab(cases: list[dict], deadline: float = 5.0) -> list[tuple[bool, dict]]:
    """(rewardlab's verdict, info) per case, as the module docstring maps them."""
    from rewardlab.rewards import math_reward, score_batch
    from rewardlab.rewards.math import extract_answer

    out: list[tuple[bool, dict] | None] = [None] * len(cases)
    idx = [i for i, c in enumerate(cases) if c["check"] == "verify"]
    res = list(score_batch(math_reward, [cases[i]["pred"] for i in idx], [cases[i]["gold"] for i in idx],
                           deadline=deadline))
    # an item cut by the wall-clock cap (a loaded machine, not its CPU budget) is rescored once with a long cap
    retry = [k for k, r in enumerate(res) if r.info.get("status") == "timeout" and r.info.get("phase") != "cpu"]
    if retry:
        again = score_batch(math_reward, [cases[idx[k]]["pred"] for k in retry], [cases[idx[k]]["gold"] for k in retry],
                            deadline=deadline, wall_cap=60.0)
        for k, r in zip(retry, again):
            res[k] = r
    for i, r in zip(idx, res):
        out[i] = (r.score == 1.0, dict(r.info))
    for i, c in enumerate(cases):
        if c["check"] == "extracts":
            ex = extract_answer(c["pred"])
            out[i] = (ex.answer is not None, {"status": ex.problem or ("ok" if ex.answer is not None else "no_answer"),
                                              "pred": ex.answer, "rule": "extraction", "extraction": ex.method})
    return out  # type: ignore[return-value]


# -- math-verify ---------------------------------------------------------------------------------

def _build(v):
    """A config value of the JSONL (``{"__call__": name, "args", "kwargs"}``) as the peer's object."""
    if isinstance(v, dict) and "__call__" in v:
        import latex2sympy2_extended
        import math_verify
        import math_verify.parser

        name = v["__call__"]
        cls = next(getattr(m, name) for m in (math_verify, math_verify.parser, latex2sympy2_extended)
                   if hasattr(m, name))
        return cls(*[_build(a) for a in v["args"]], **{k: _build(x) for k, x in v["kwargs"].items()})
    if isinstance(v, list):
        return tuple(_build(x) for x in v)
    return v


def _mv_test_call(c: dict) -> bool:
    """The peer's own assertion for this case: True when it holds (math-verify passes this row)."""
    import sympy
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    from math_verify.grader import sympy_expr_eq

    mv = c["mv"]
    kind = mv["kind"]
    if kind == "compare_strings":
        targets = [LatexExtractionConfig(**mv["latex_config"]) if t == "latex"
                   else ExprExtractionConfig(**mv["expr_config"])
                   for t in mv["match_types"]]
        got = verify(parse(c["gold"], targets), parse(c["pred"], targets), float_rounding=mv["precision"],
                     strict=mv["strict"], allow_set_relation_comp=mv["allow_set_relation_comp"])
        return bool(got) == c["expected"]
    if kind == "verify_parse":
        return bool(verify(parse(c["gold"]), parse(c["pred"]), **mv["verify_kwargs"])) == c["expected"]
    if kind == "parse":
        args = [list(_build(mv["configs"]))] if mv["configs"] is not None else []
        out = parse(c["pred"], *args, **mv["kwargs"])
        if mv["expect"] == "equals_list":
            return out == mv["expect_list"]
        if mv["expect"] == "len":
            return len(out) == mv["expect_len"]
        if mv["expect"] == "first_equals":
            return bool(out) and out[0] == sympy.sympify(mv["expect_sympy"])
        raise ValueError(mv["expect"])
    if kind == "sympy_expr_eq":
        got = sympy_expr_eq(sympy.sympify(mv["gold_sympy"]), sympy.sympify(mv["pred_sympy"]), **mv["kwargs"])
        return bool(got) == c["expected"]
    raise ValueError(kind)


def _mv_default(c: dict) -> bool | None:
    """math-verify out of the box, as a reward would call it: verify(parse(gold), parse(pred))."""
    from math_verify import parse, verify

    if c["check"] != "verify":
        return None
    return bool(verify(parse(c["gold"]), parse(c["pred"])))


def grade_math_verify(cases: list[dict]) -> list[dict]:
    logging.disable(logging.WARNING)  # math-verify logs every timeout and parse failure
    out = []
    for c in cases:
        row: dict = {}
        for key, fn in (("test_call_passes", _mv_test_call), ("default_paid", _mv_default)):
            try:
                row[key] = fn(c)
            except Exception as e:  # noqa: BLE001 - the peer's own failures count as not passing
                row[key] = False
                row.setdefault("error", f"{type(e).__name__}: {e}")
        out.append(row)
    return out


# -- tables --------------------------------------------------------------------------------------

def confusion(cases: list[dict], paid: list[bool]) -> dict:
    fp = [c["id"] for c, p in zip(cases, paid) if p and not c["expected"]]
    fn = [c["id"] for c, p in zip(cases, paid) if not p and c["expected"]]
    n = len(cases)
    return {"n": n, "agree": n - len(fp) - len(fn), "fp": len(fp), "fn": len(fn),
            "agreement": (n - len(fp) - len(fn)) / n if n else 1.0, "fp_ids": fp, "fn_ids": fn}


def summarize(cases: list[dict], ours: list[tuple[bool, dict]], peer: list[dict] | None) -> dict:
    groups = {"main": [i for i, c in enumerate(cases) if not c["config_dependent"]],
              "config_dependent": [i for i, c in enumerate(cases) if c["config_dependent"]]}
    out: dict = {"rewardlab": {}, "per_file": {}}
    for g, idx in groups.items():
        out["rewardlab"][g] = confusion([cases[i] for i in idx], [ours[i][0] for i in idx])
    out["rewardlab"]["all"] = confusion(cases, [p for p, _ in ours])
    files = sorted({c["file"] for c in cases})
    for f in files:
        out["per_file"][f] = {g: confusion([cases[i] for i in idx if cases[i]["file"] == f],
                                           [ours[i][0] for i in idx if cases[i]["file"] == f])
                              for g, idx in groups.items()}
    if peer is not None:
        own = {g: sum(peer[i]["test_call_passes"] for i in idx) for g, idx in groups.items()}
        dflt = {g: confusion([cases[i] for i in idx if peer[i]["default_paid"] is not None],
                             [peer[i]["default_paid"] for i in idx if peer[i]["default_paid"] is not None])
                for g, idx in groups.items()}
        out["math_verify"] = {"own_tests_pass": own, "default_call": dflt,
                              "own_tests_failing": [cases[i]["id"] for i in range(len(cases))
                                                    if not peer[i]["test_call_passes"]]}
    return out


def disagreements(cases: list[dict], ours: list[tuple[bool, dict]], peer: list[dict] | None) -> list[dict]:
    rows = []
    for i, (c, (paid, info)) in enumerate(zip(cases, ours)):
        if paid == c["expected"]:
            continue
        rows.append({"id": c["id"], "kind": "FP" if paid else "FN", "config_dependent": c["config_dependent"],
                     "file": c["file"], "test": c["test"], "line": c["line"], "label": c["expected"],
                     "gold": c["gold"], "pred": c["pred"], "status": info.get("status"),
                     "our_pred": info.get("pred"), "our_gold": info.get("gold"), "rule": info.get("rule"),
                     "extraction": info.get("extraction"),
                     "mv_default_paid": peer[i]["default_paid"] if peer else None,
                     "config_reason": c["config_reason"] if c["config_dependent"] else None})
    rows.sort(key=lambda r: (r["config_dependent"], r["kind"] != "FP", r["id"]))
    return rows


def _short(s, n: int = 160) -> str:
    t = json.dumps(s, ensure_ascii=False)
    return t if len(t) <= n else t[: n - 20] + f"...[{len(s)} chars]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE)
    ap.add_argument("--json", action="store_true", help="print one JSON object (summary, disagreements) instead")
    ap.add_argument("--no-peer", action="store_true", help="rewardlab only (do not run math-verify)")
    args = ap.parse_args(argv)

    meta, cases = load(args.file)
    t = time.perf_counter()
    ours = grade_rewardlab(cases)
    t_ours = time.perf_counter() - t
    peer = None
    t_peer = None
    if not args.no_peer:
        t = time.perf_counter()
        peer = grade_math_verify(cases)
        t_peer = time.perf_counter() - t
    summary = summarize(cases, ours, peer)
    dis = disagreements(cases, ours, peer)
    import importlib.metadata as md

    versions = {"math-verify": md.version("math-verify") if peer is not None else None}
    if args.json:
        print(json.dumps({"source": {k: meta.get(k) for k in ("repo", "commit", "licence")}, "versions": versions,
                          "seconds": {"rewardlab": t_ours, "math_verify": t_peer}, "summary": summary,
                          "disagreements": dis}, indent=1, ensure_ascii=False, default=str))
        return 0

    rl = summary["rewardlab"]
    print(f"{args.file.name}: {len(cases)} cases from {meta.get('repo')}@{str(meta.get('commit'))[:12]} "
          f"({meta.get('licence', {}).get('spdx')}), {rl['config_dependent']['n']} config-dependent")
    print("\nrewardlab agreement per test file (main | config-dependent):")
    print(f"{'file':<34} {'n':>4} {'agree':>6} {'FP':>3} {'FN':>3} | {'n':>3} {'agree':>5} {'FP':>3} {'FN':>3}")
    for f, g in summary["per_file"].items():
        m, d = g["main"], g["config_dependent"]
        print(f"{f:<34} {m['n']:>4} {m['agree']:>6} {m['fp']:>3} {m['fn']:>3} | {d['n']:>3} {d['agree']:>5} "
              f"{d['fp']:>3} {d['fn']:>3}")
    for g in ("main", "config_dependent", "all"):
        c = rl[g]
        print(f"rewardlab {g:<17} {c['n']:>4} cases: FP {c['fp']:>2}  FN {c['fn']:>2}  agreement {c['agreement']:.1%}")
    print(f"(rewardlab {t_ours:.1f} s)")
    if peer is not None:
        mv = summary["math_verify"]
        print(f"\nmath-verify {versions['math-verify']} with each test's own call: passes "
              f"{mv['own_tests_pass']['main']}/{rl['main']['n']} main, "
              f"{mv['own_tests_pass']['config_dependent']}/{rl['config_dependent']['n']} config-dependent"
              + (f"; failing: {mv['own_tests_failing']}" if mv["own_tests_failing"] else ""))
        for g in ("main", "config_dependent"):
            c = mv["default_call"][g]
            print(f"math-verify default call verify(parse(gold), parse(pred)), {g}: {c['n']} cases, FP {c['fp']}, "
                  f"FN {c['fn']}, agreement {c['agreement']:.1%}")
        print(f"(math-verify {t_peer:.1f} s)")
    for cd in (False, True):
        for kind in ("FP", "FN"):
            rows = [r for r in dis if r["kind"] == kind and r["config_dependent"] == cd]
            what = "paid, label False" if kind == "FP" else "not paid, label True"
            print(f"\nrewardlab {kind} ({what}){' [config-dependent]' if cd else ''}: {len(rows)}")
            for r in rows:
                print(f"- {r['id']} {r['file']}::{r['test']} (line {r['line']}) label={r['label']} "
                      f"status={r['status']} rule={r['rule']} extraction={r['extraction']}"
                      + ("" if r["mv_default_paid"] is None else f" mv_default_paid={r['mv_default_paid']}"))
                print(f"    gold={_short(r['gold'])}  (ours: {_short(r['our_gold'], 80)})")
                print(f"    pred={_short(r['pred'])}")
                print(f"    our pred={_short(r['our_pred'], 120)}")
                if cd:
                    print(f"    config: {r['config_reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
