"""Reports of finished runs: the results table, the paired comparison of two runs (B minus A on
the problems both evaluated, per metric, with a 95% interval: Newcombe's paired score interval for
0/1 scores, else normal; the counts of problems that improved / regressed; an exact sign-test
p-value) and its chart.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from rewardlab.errors import RewardlabError
from rewardlab.eval.passk import is_correct, maj_at_k, paired_difference, pass_at_k, problem_passk, summarize
from rewardlab.eval.store import load_results, load_samples, read_samples


def format_table(results: dict[str, Any]) -> str:
    """A plain-text table of one results file: benchmark, grader, metric (pass@k, maj@k, avg@n), value,
    stderr, 95% interval, problems, samples per problem; then per benchmark the mean score when the grader gave
    partial credit (an environment's), the share of completions that hit the token budget and with an unclosed
    ``<think>``, and each reference grader's disagreements with ours."""
    lines = [f"model: {results['config']['model']}"]
    head = (f"{'benchmark':<12} {'grader':<16} {'metric':<8} {'value':>7} {'stderr':>7} {'95% CI':>17} "
            f"{'problems':>9} {'n':>3}")
    lines += [head, "-" * len(head)]
    notes: list[str] = []
    for bench, flat in results["results"].items():
        bd = results.get("details", {}).get(bench, {})
        graders = [("rewardlab", bd.get("metrics", {}))]
        graders += [(g, d.get("metrics", {})) for g, d in (bd.get("graders") or {}).items() if d.get("applicable")]
        for grader, det in graders:
            for metric, d in det.items():
                ci = f"[{100 * d['ci_low']:5.1f}, {100 * d['ci_high']:5.1f}]"
                lines.append(
                    f"{bench:<12} {grader:<16} {metric:<8} {100 * d['value']:6.1f}% {100 * d['stderr']:6.1f}% {ci:>17} "
                    f"{flat['n']:>9} {flat['samples_per_problem']:>3}"
                )
        total = bd.get("total_samples") or 0
        if total and "mean_score" in bd and abs(bd["mean_score"] - bd.get("correct_samples", 0) / total) > 1e-9:
            notes.append(f"{bench}: mean score {bd['mean_score']:.3f} over {total} samples (partial credit; pass@k "
                         "counts a score of 1 as solved)")
        rs = bd.get("reasoning")
        if rs:
            notes.append(f"{bench}: hit the token budget ({rs['max_new_tokens']}): "
                         f"{100 * rs['hit_token_budget_share']:.1f}% "
                         f"({rs['hit_token_budget']}/{rs['completions']}); unclosed <think>: "
                         f"{100 * rs['unclosed_think_share']:.1f}% ({rs['unclosed_think']}/{rs['completions']})")
        how = (bd.get("maj") or {}).get("how") or {}
        if how:
            methods = ", ".join(f"{m}: {h['method']}" for m, h in how.items())
            notes.append(f"{bench}: maj@k over answer classes equivalent by the math reward ({methods}; "
                         "ties: earliest first vote)")
        for g, d in (bd.get("graders") or {}).items():
            if not d.get("applicable"):
                notes.append(f"{bench}: {g} not applicable ({d.get('why')})")
                continue
            kinds = ", ".join(f"{k} {v}" for k, v in d["disagreements_by_kind"].items()) or "none"
            notes.append(f"{bench}: {g} disagrees with rewardlab on {d['disagreements']} samples "
                         f"(agreement {100 * d['agreement_with_rewardlab']:.1f}%): {kinds}")
    return "\n".join(lines + notes)


def _side(
    spec: str | os.PathLike | Sequence[str | os.PathLike],
) -> tuple[str, str, dict[str, tuple[Path, dict[str, Any]]]]:
    """One side of a comparison: one or more results files (comma-separated) of the same model."""
    parts = [p for p in (spec.split(",") if isinstance(spec, str)
                         else [spec] if isinstance(spec, os.PathLike) else spec)
             if str(p).strip()]
    if not parts:
        raise RewardlabError("--compare needs a results file on each side")
    benches: dict[str, tuple[Path, dict[str, Any]]] = {}
    models, paths = [], []
    for part in parts:
        path, res = load_results(str(part).strip())
        models.append(res["config"]["model"])
        paths.append(str(path))
        for bench in res.get("results", {}):
            if bench in benches:
                raise RewardlabError(f"{bench} appears in both {benches[bench][0]} and {path}")
            benches[bench] = (path, res)
    return ",".join(paths), ",".join(dict.fromkeys(models)), benches


def compare_results(a_path: str | os.PathLike | Sequence[str],
                    b_path: str | os.PathLike | Sequence[str]) -> dict[str, Any]:
    """Paired comparison (B minus A) on the problems both runs evaluated.

    Each side is a results file (or folder holding one), or several separated by commas when one
    model's benchmarks were evaluated into different folders. Rows: pass@k for the common k; avg@n
    (when a run has n > 1); maj@k for k > 1 up to the smaller n (math benchmarks; answer classes by
    the math reward, as the runner computes them; ``how`` says exact or Monte Carlo); and pass@k of
    every reference grader both runs were graded with (``grader``; from their ``graders_<bench>.jsonl``).
    """
    a_where, a_model, a = _side(a_path)
    b_where, b_model, b = _side(b_path)
    common = [bench for bench in a if bench in b]
    if not common:
        raise RewardlabError(f"{a_where} and {b_where} share no benchmark")
    rows, warnings = [], []
    for bench in common:
        (pa, ra), (pb, rb) = a[bench], b[bench]
        sa, sb = load_samples(pa, ra, bench), load_samples(pb, rb, bench)
        ids = [i for i in sa if i in sb]
        if not ids:
            raise RewardlabError(f"{bench}: the two runs share no problem ids")
        na = min(len(sa[i]["scores"]) for i in ids)
        nb = min(len(sb[i]["scores"]) for i in ids)
        ks = sorted(set(ra["results"][bench].get("k", [1])) & set(rb["results"][bench].get("k", [1]))) or [1]
        ks = [k for k in ks if k <= min(na, nb)] or [1]

        def add(metric: str, va: list[float], vb: list[float], grader: str = "rewardlab",
                how: str | None = None) -> None:
            d = paired_difference(va, vb)
            rows.append({
                "benchmark": bench, "grader": grader, "metric": metric, **d.to_dict(),
                "a_summary": summarize(va).to_dict(), "b_summary": summarize(vb).to_dict(),
                "only_in_a": len(sa) - len(ids), "only_in_b": len(sb) - len(ids), **({"how": how} if how else {}),
            })

        for k in ks:
            add(f"pass@{k}", [problem_passk(sa[i], [k])[f"pass@{k}"] for i in ids],
                [problem_passk(sb[i], [k])[f"pass@{k}"] for i in ids])
        # avg@n: each problem's mean correctness over its own samples (n may differ between the runs);
        # with one sample each it is pass@1, already listed
        if max(na, nb) > 1:
            add(f"avg@{na}" if na == nb else "avg@n", [_mean_correct(sa[i]) for i in ids],
                [_mean_correct(sb[i]) for i in ids])
        grader_a = ra.get("configs", {}).get(bench, {}).get("grader", "math")
        if grader_a != "code" and min(na, nb) > 1:  # maj@k over answer classes, k > 1 (maj@1 is pass@1)
            seed_a, seed_b = ra.get("config", {}).get("seed", 0), rb.get("config", {}).get("seed", 0)
            maj_ks = sorted({k for k in ks if k > 1} | {min(na, nb)})
            va_all, ma = _maj_values([sa[i] for i in ids], maj_ks, seed_a)
            vb_all, mb = _maj_values([sb[i] for i in ids], maj_ks, seed_b)
            for k in maj_ks:
                add(f"maj@{k}", va_all[k], vb_all[k], how=f"A {ma[k]}, B {mb[k]}")
        # the reference graders both runs were graded with (their graders_<bench>.jsonl)
        ga, gb = _grader_scores(pa, ra, bench), _grader_scores(pb, rb, bench)
        for g in [g for g in ga if g in gb and g != "rewardlab"]:
            if all(i in ga[g] and i in gb[g] for i in ids):
                for k in ks:
                    add(f"pass@{k}", [_passk_of(ga[g][i], k) for i in ids], [_passk_of(gb[g][i], k) for i in ids],
                        grader=g)
        for key in ("prompt_template_sha256", "grader", "sampling"):
            ca, cb = ra.get("configs", {}).get(bench, {}).get(key), rb.get("configs", {}).get(bench, {}).get(key)
            if ca != cb:
                warnings.append(f"{bench}: {key} differs between the runs")
    return {"a": {"path": a_where, "model": a_model}, "b": {"path": b_where, "model": b_model},
            "rows": rows, "warnings": warnings, "ci": "95% CI of B-A paired on problems (Newcombe score interval for "
            "0/1 scores, else normal); p: exact sign test"}


def _mean_correct(rec: dict[str, Any]) -> float:
    return sum(is_correct(x) for x in rec["scores"]) / len(rec["scores"])


def _passk_of(scores: list[Any], k: int) -> float:
    return pass_at_k(len(scores), sum(is_correct(x) for x in scores), min(k, len(scores)))


def _maj_values(recs: list[dict[str, Any]], ks: list[int], seed: int) -> tuple[dict[int, list[float]], dict[int, str]]:
    """Per-problem maj@k of one run's records (answer classes by the math reward, as the runner does)."""
    from rewardlab.eval.answer_classes import class_correctness, math_answer_classes

    labels = math_answer_classes([[None if e is None else str(e) for e in r["extracted"]] for r in recs])
    vals: dict[int, list[float]] = {k: [] for k in ks}
    methods: dict[int, set] = {k: set() for k in ks}
    for lab, r in zip(labels, recs):
        cc, _ = class_correctness(lab, [bool(c) for c in r["correct"]])
        for k in ks:
            v, m = maj_at_k(lab, cc, k, seed=seed, key=r["id"])
            vals[k].append(v)
            methods[k].add(m)
    return vals, {k: "/".join(sorted(m)) or "exact" for k, m in methods.items()}


def _grader_scores(path: Path, res: dict[str, Any], bench: str) -> dict[str, dict[str, list[Any]]]:
    """{grader: {problem id: scores}} from a run's ``graders_<bench>.jsonl``, or {} when it has none."""
    name = (res.get("grader_samples") or {}).get(bench)
    if not name or not (path.parent / name).is_file():
        return {}
    _, by_id = read_samples(path.parent / name)
    out: dict[str, dict[str, list[Any]]] = {}
    for pid, line in by_id.items():
        for g, sc in (line.get("scores") or {}).items():
            out.setdefault(g, {})[pid] = sc
    return out


def format_compare(cmp: dict[str, Any]) -> str:
    """The delta table of :func:`compare_results`."""
    lines = [f"A: {cmp['a']['model']}  ({cmp['a']['path']})", f"B: {cmp['b']['model']}  ({cmp['b']['path']})"]
    head = (f"{'benchmark':<12} {'grader':<16} {'metric':<8} {'A':>7} {'B':>7} {'B-A':>7} {'95% CI (paired)':>17} "
            f"{'+/-':>7} "
            f"{'p':>6} {'problems':>9}")
    lines += [head, "-" * len(head)]
    for r in cmp["rows"]:
        ci = f"[{100 * r['ci_low']:+5.1f}, {100 * r['ci_high']:+5.1f}]"
        lines.append(
            f"{r['benchmark']:<12} {r.get('grader', 'rewardlab'):<16} {r['metric']:<8} {100 * r['a']:6.1f}% "
            f"{100 * r['b']:6.1f}% "
            f"{100 * r['delta']:+6.1f} {ci:>17} "
            f"{'+' + str(r['improved']) + '/-' + str(r['regressed']):>7} {r['p_value']:6.3f} {r['n']:>9}"
        )
    lines.append(f"({cmp['ci']}; +/-: problems improved/regressed)")
    lines += [f"warning: {w}" for w in cmp["warnings"]]
    return "\n".join(lines)


def plot_compare(cmp: dict[str, Any], path: str | os.PathLike) -> Path:
    """A PNG bar chart: A and B side by side per benchmark/metric, 95% intervals as error bars."""
    import matplotlib  # lazy: matplotlib takes a second to import and only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = cmp["rows"]
    labels = [f"{r['benchmark']}\n{r['metric']}"
              + ("" if r.get("grader", "rewardlab") == "rewardlab" else f"\n{r['grader']}")
              for r in rows]
    xs = list(range(len(rows)))
    w = 0.38
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(rows) + 1.5), 4.0), dpi=120)
    for off, key, name, color in ((-w / 2, "a_summary", "A", "#8c8c8c"), (w / 2, "b_summary", "B", "#1f77b4")):
        vals = [100 * r[key]["value"] for r in rows]
        lo = [100 * (r[key]["value"] - r[key]["ci_low"]) for r in rows]
        hi = [100 * (r[key]["ci_high"] - r[key]["value"]) for r in rows]
        model = cmp[name.lower()]["model"]
        short = "/".join(Path(model).parts[-2:]) if "/" in model else model
        ax.bar([x + off for x in xs], vals, w, yerr=[lo, hi], capsize=3, color=color, label=f"{name}: {short}")
        for x, v, h in zip(xs, vals, hi):
            ax.text(x + off, v + h + 0.3, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
    for x, r in zip(xs, rows):
        top = 100 * max(r["a_summary"]["ci_high"], r["b_summary"]["ci_high"])
        ax.text(x, top + 3.5, f"B-A {100 * r['delta']:+.1f}\n[{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]",
                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("score (%)")
    ymax = max([100 * max(r["a_summary"]["ci_high"], r["b_summary"]["ci_high"]) for r in rows] + [10.0])
    ax.set_ylim(0, min(100.0, ymax * 1.35 + 5))
    ax.set_title("B vs A (bars: 95% CI per run; text: paired delta and 95% CI)", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, out)
    return out


__all__ = ["compare_results", "format_compare", "format_table", "plot_compare"]
