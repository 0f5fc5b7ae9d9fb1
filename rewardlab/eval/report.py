"""What one benchmark's records add up to: the flat ``results`` row, ``details``, and the graders' lines.

:func:`bench_results` turns the stored records of a benchmark (one per problem, see
:mod:`rewardlab.eval.runner`) and the reference graders' scores into pass@k, avg@n and maj@k with
standard errors, the reasoning and tool statistics, and per grader its agreement with ours and each
disagreement, by kind (:func:`disagreement_kind`).
"""

from __future__ import annotations

from typing import Any, Sequence

from rewardlab.eval.answer_classes import class_correctness, math_answer_classes
from rewardlab.eval.graders import DEFAULT_GRADER, INVALID, MINERVA_INVALID
from rewardlab.eval.passk import (
    Summary,
    avg_at_n,
    benchmark_majk,
    benchmark_metrics,
    is_correct,
    pass_at_k,
    solve_rate_histogram,
    summarize,
)
from rewardlab.eval.spec import BenchmarkSpec
from rewardlab.rewards.math.equiv import fast_compare


def graded_texts(rec: dict[str, Any]) -> list[str]:
    """The texts a record's graders judged: tool rollouts grade the model's last turn."""
    return rec.get("answers") or rec["completions"]


def disagreement_kind(ours: bool, theirs: bool, our_pred: Any, their_pred: Any, gold: Any = None,
                      our_status: Any = None) -> str:
    """Why rewardlab's verdict and another grader's differ, as ``<who paid>:<why>``.

    ``rewardlab_only:`` (we pay, they do not): ``no_answer_extracted`` (their filter found nothing),
    ``same_value_other_format`` (what they extracted equals the gold by our math reward, e.g. ``18.0``
    or ``$18.`` against ``18``, but fails their string match), ``other_answer`` (they read another
    value, e.g. a later number). ``grader_only:`` (they pay, we do not): ``rewardlab_<status>`` when
    our reward extracted no answer or refused one (``no_answer``, ``number_spam``, ``box_spam``...),
    else ``rewardlab_other_answer``.
    """
    if ours and not theirs:
        if their_pred in (None, "", INVALID, MINERVA_INVALID):
            return "rewardlab_only:no_answer_extracted"
        same = False
        if isinstance(their_pred, str) and gold is not None and len(their_pred) <= 400:
            try:
                same = fast_compare(their_pred, str(gold)).equal is True
            except Exception:  # noqa: BLE001 - unreadable: counted as another answer
                same = False
        return "rewardlab_only:" + ("same_value_other_format" if same else "other_answer")
    if our_pred is None:
        return f"grader_only:rewardlab_{our_status or 'no_answer'}"
    return "grader_only:rewardlab_other_answer"


def gold_of(rec: dict[str, Any]) -> Any:
    """A record's gold answer (the ``answer`` or ``gold`` of a dict reference)."""
    ref = rec.get("reference")
    return ref.get("answer", ref.get("gold")) if isinstance(ref, dict) else ref


def think_state(prompt: Any, text: Any) -> tuple[bool, bool]:
    """(thinking, unclosed): the completion opened a ``<think>`` block (or the prompt ended inside
    one, as thinking-model chat templates do) and whether the last one is still open at the end."""
    text = text if isinstance(text, str) else ""
    opened, closed = text.rfind("<think>"), text.rfind("</think>")
    if opened >= 0:
        return True, closed < opened
    prompt_open = isinstance(prompt, str) and prompt.rfind("<think>") > prompt.rfind("</think>")
    if prompt_open:
        return True, closed < 0
    return False, False


def reasoning_stats(records: Sequence[dict[str, Any]], max_new_tokens: int | None) -> dict[str, Any]:
    """The share of completions that hit the token budget and the share with an unclosed ``<think>``."""
    total = budget = thinking = unclosed = 0
    for r in records:
        for j, text in enumerate(r["completions"]):
            total += 1
            fin = r["finish_reasons"][j] if j < len(r["finish_reasons"]) else None
            ntok = r["num_tokens"][j] if j < len(r["num_tokens"]) else 0
            if fin == "length" or (fin is None and max_new_tokens and ntok >= max_new_tokens):
                budget += 1
            t, u = think_state(r.get("prompt"), text)
            thinking += t
            unclosed += u
    share = (lambda c: c / total if total else 0.0)
    return {"completions": total, "hit_token_budget": budget, "hit_token_budget_share": share(budget),
            "max_new_tokens": max_new_tokens, "thinking": thinking, "unclosed_think": unclosed,
            "unclosed_think_share": share(unclosed),
            "unclosed_think_share_of_thinking": unclosed / thinking if thinking else 0.0,
            "rule": "token budget: finish_reason 'length'; unclosed: the last <think> (in the completion, or the "
                    "prompt's when the completion has none) has no </think> after it"}


def _put(flat: dict[str, Any], name: str, s: Summary, grader: str = "none") -> None:
    """One metric and its standard error into the flat results row (lm-eval's ``name,filter`` keys)."""
    flat[f"{name},{grader}"] = s.value
    flat[f"{name}_stderr,{grader}"] = s.stderr


def _majority(spec: BenchmarkSpec, records: Sequence[dict[str, Any]], ks: Sequence[int], nmin: int,
              seed: int) -> tuple[dict[str, Summary], dict[str, Any], int]:
    """maj@k over answer classes the math reward calls equivalent: (metrics, how, mixed classes);
    nothing for code benchmarks or one sample per problem."""
    if spec.grader == "code" or nmin <= 1 or not records:
        return {}, {}, 0
    labels = math_answer_classes([[None if e is None else str(e) for e in r["extracted"]] for r in records],
                                 deadline=spec.deadline_s)
    classes = []
    mixed = 0
    for lab, r in zip(labels, records):
        cc, m = class_correctness(lab, [bool(c) for c in r["correct"]])
        classes.append(cc)
        mixed += m
    maj = benchmark_majk(labels, classes, sorted(set(ks) | {nmin}), ids=[r["id"] for r in records], seed=seed)
    return maj["metrics"], maj["how"], mixed


def _grader_summary(records: Sequence[dict[str, Any]], g: dict[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    """One applicable reference grader's pass@k, its agreement with ours and the disagreements by kind."""
    per = [{f"pass@{k}": pass_at_k(len(sc), sum(is_correct(x) for x in sc), k) for k in ks} for sc in g["scores"]]
    gm = {f"pass@{k}": summarize([p[f"pass@{k}"] for p in per]) for k in ks}
    kinds: dict[str, int] = {}
    agree = total = 0
    for rec, sc, ex in zip(records, g["scores"], g["extracted"]):
        for j, (theirs, ours) in enumerate(zip(sc, rec["scores"])):
            total += 1
            o, t = is_correct(ours), is_correct(theirs)
            if o == t:
                agree += 1
                continue
            kind = disagreement_kind(o, t, rec["extracted"][j], ex[j], gold_of(rec), rec["status"][j])
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"applicable": True, "summaries": gm, "metrics": {m: s.to_dict() for m, s in gm.items()},
            "agreement_with_rewardlab": agree / total if total else 1.0,
            "disagreements": total - agree, "disagreements_by_kind": dict(sorted(kinds.items())),
            "grader": g["describe"]}


def _grader_line(i: int, rec: dict[str, Any], extra: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Problem ``i``'s line of ``graders_<bench>.jsonl``: every grader's verdicts and each disagreement."""
    line: dict[str, Any] = {"id": rec["id"], "scores": {DEFAULT_GRADER: rec["scores"]},
                            "extracted": {DEFAULT_GRADER: rec["extracted"]}, "disagreements": []}
    for name, g in extra.items():
        if not g.get("applicable"):
            continue
        line["scores"][name] = g["scores"][i]
        line["extracted"][name] = g["extracted"][i]
        for j, (theirs, ours) in enumerate(zip(g["scores"][i], rec["scores"])):
            if is_correct(ours) != is_correct(theirs):
                line["disagreements"].append({
                    "sample": j, "grader": name, "rewardlab": ours, name: theirs,
                    "kind": disagreement_kind(is_correct(ours), is_correct(theirs), rec["extracted"][j],
                                              g["extracted"][i][j], gold_of(rec), rec["status"][j]),
                    "rewardlab_extracted": rec["extracted"][j], f"{name}_extracted": g["extracted"][i][j],
                    "completion_tail": str(graded_texts(rec)[j])[-300:]})
    return line


def _counts(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Grader statuses, finish reasons and completion lengths over every sample."""
    statuses: dict[str, int] = {}
    finish: dict[str, int] = {}
    ntok = []
    for r in records:
        for s in r["status"]:
            statuses[str(s)] = statuses.get(str(s), 0) + 1
        for f in r["finish_reasons"]:
            finish[str(f)] = finish.get(str(f), 0) + 1
        ntok.extend(r["num_tokens"])
    scores = [float(s or 0.0) for r in records for s in r["scores"]]
    return {"correct_samples": sum(sum(bool(c) for c in r["correct"]) for r in records),
            "total_samples": sum(len(r["scores"]) for r in records),
            "mean_score": (sum(scores) / len(scores)) if scores else 0.0,  # partial credit (environments), ungraded 0
            "grader_status": statuses, "finish_reasons": finish,
            "mean_completion_tokens": (sum(ntok) / len(ntok)) if ntok else 0.0}


def _tool_details(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Tool rollouts: calls per completion, use rate, turns, call statuses and model tokens."""
    calls = [c for r in records for c in r["tool_calls"]]
    status: dict[str, int] = {}
    for r in records:
        for per in r["tool_status"]:
            for s in per:
                status[str(s)] = status.get(str(s), 0) + 1
    return {
        "calls_mean": sum(calls) / len(calls), "use_rate": sum(c > 0 for c in calls) / len(calls),
        "turns_mean": sum(t for r in records for t in r["turns"]) / len(calls), "call_status": status,
        "mean_model_tokens": sum(t for r in records for t in r["model_tokens"]) / len(calls),
    }


def bench_results(spec: BenchmarkSpec, records: Sequence[dict[str, Any]], ks: Sequence[int], n: int,
                  extra: dict[str, dict[str, Any]] | None = None, *, seed: int = 0,
                  max_new_tokens: int | None = None) -> tuple[dict, dict, list[dict[str, Any]]]:
    """``(flat, details, grader lines)`` of one benchmark: its ``results`` row, its ``details`` and the
    lines of ``graders_<bench>.jsonl`` (empty when no reference grader applies)."""
    metrics = benchmark_metrics(records, ks)
    flat: dict[str, Any] = {"alias": spec.name}
    for name, s in metrics.items():
        _put(flat, name, s)
    flat["n"] = len(records)
    flat["samples_per_problem"] = n
    flat["k"] = list(ks)
    # --- avg@n +- stderr, maj@k over equivalence classes, solve-rate histogram (rewardlab's grader)
    nmin = min((len(r["scores"]) for r in records), default=0)
    metrics[f"avg@{nmin}"] = avg = avg_at_n(records)
    _put(flat, f"avg@{nmin}", avg)
    maj, maj_how, mixed = _majority(spec, records, ks, nmin, seed)
    for name, s in maj.items():
        metrics[name] = s
        _put(flat, name, s)
    reasoning = reasoning_stats(records, max_new_tokens)
    flat["hit_token_budget_share"] = reasoning["hit_token_budget_share"]
    flat["unclosed_think_share"] = reasoning["unclosed_think_share"]
    # --- the other graders, side by side, and where they disagree with ours
    graders_out: dict[str, Any] = {}
    extra = extra or {}
    for name, g in extra.items():
        if not g.get("applicable"):
            graders_out[name] = {"applicable": False, "why": g.get("why")}
            continue
        summary = _grader_summary(records, g, ks)
        for mname, s in summary.pop("summaries").items():
            _put(flat, mname, s, name)
        graders_out[name] = summary
    lines = [_grader_line(i, rec, extra) for i, rec in enumerate(records)] \
        if any(g.get("applicable") for g in extra.values()) else []
    details = {"metrics": {name: s.to_dict() for name, s in metrics.items()}, **_counts(records),
               "solve_rate_histogram": solve_rate_histogram(records), "reasoning": reasoning}
    if maj_how:
        details["maj"] = {"how": maj_how, "classes": "answers equivalent by rewardlab's math reward are one vote",
                          "mixed_classes": mixed}
    if graders_out:
        details["graders"] = graders_out
        side = {DEFAULT_GRADER: {f"pass@{k}": metrics[f"pass@{k}"].value for k in ks}}
        for name, g in graders_out.items():
            side[name] = {m: d["value"] for m, d in g["metrics"].items()} if g.get("applicable") else None
        details["side_by_side"] = side
    if records and "tool_calls" in records[0]:
        details["tools"] = _tool_details(records)
    return flat, details, lines


__all__ = ["bench_results", "disagreement_kind", "gold_of", "graded_texts", "reasoning_stats", "think_state"]
