"""The eval runner: generate ``n`` samples per problem, grade them with rewardlab's own rewards
(math: symbolic equivalence; code: the sandboxed code reward), compute pass@k with standard
errors, and write a self-describing ``results.json`` (see :mod:`rewardlab.eval`).

Batches occupy fixed slots of the problem list and each slot's sampling seed is ``seed + slot
start``, so a resumed sampled (temperature > 0) run draws what the uninterrupted run would have
drawn on the same machine. ``--limit N`` takes the first N problems in file order.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata as md
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from rewardlab import __version__
from rewardlab.errors import RewardlabError
from rewardlab.eval.graders import (
    DEFAULT_GRADER,
    INVALID,
    MINERVA_INVALID,
    class_correctness,
    get_grader,
    grader_reference,
    math_answer_classes,
    parse_graders,
)
from rewardlab.eval.passk import avg_at_n, benchmark_majk, benchmark_metrics, is_correct, pass_at_k, solve_rate_histogram, summarize
from rewardlab.eval.spec import BenchmarkSpec, EvalRow, builtin_benchmarks, load_rows, load_spec, render_prompt
from rewardlab.eval.store import RESULTS_FILE, SAMPLES_FORMAT, SampleStore, atomic_write_json, fingerprint, samples_file
from rewardlab.locks import FolderLock
from rewardlab.models import check_model, load_model, resolve_device, resolve_model_path
from rewardlab.rewards import get_reward
from rewardlab.rewards.code import extract_code
from rewardlab.rewards.math.equiv import fast_compare
from rewardlab.rewards.pool import prewarm, score_batch
from rewardlab import sandbox
from rewardlab.rollout import SamplingParams, make_engine
from rewardlab.rollout.multiturn import TOOL_HINT, ToolEngine

DEFAULT_DEADLINES = {"math": 10.0, "code": 30.0}
LIMIT_RULE = "first N problems in data-file order"

# ----------------------------------------------------------------------------- provenance


def git_hash() -> str | None:
    """The rewardlab source tree's commit (``+dirty`` when modified), or None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]  # the checkout holding rewardlab/
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def chat_template_sha256(tokenizer: Any | None) -> str | None:
    tpl = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if not tpl:
        return None
    if not isinstance(tpl, str):
        tpl = json.dumps(tpl, sort_keys=True)
    return hashlib.sha256(tpl.encode()).hexdigest()


def _versions() -> dict[str, str]:
    out = {"rewardlab": __version__, "python": platform.python_version()}
    for dist in ("torch", "transformers", "math-verify", "sympy", "vllm"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def _model_label(model: Any) -> str:
    prov = getattr(model, "rewardlab_provenance", None) or {}
    return str(prov.get("path") or prov.get("model") or getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__)


# ----------------------------------------------------------------------------- the runner


@dataclass
class _Ctx:
    engine: Any
    tokenizer: Any
    model_label: str
    model_info: dict[str, Any]
    tools: dict[str, Any] | None = None
    """``--tools python``: the tool settings (recorded in results.json and each sample file's config); None = off."""


def _sampling_for(spec: BenchmarkSpec, overrides: dict[str, Any]) -> dict[str, Any]:
    s = dict(spec.sampling)
    for key, val in overrides.items():
        if val is not None:
            s[key] = val
    s["n"] = int(s["n"])
    s["temperature"] = float(s["temperature"])
    s["top_p"] = float(s["top_p"])
    s["max_new_tokens"] = int(s["max_new_tokens"])
    if s["n"] < 1:
        raise RewardlabError("--n must be at least 1")
    if s["n"] > 1 and s["temperature"] == 0.0:
        raise RewardlabError(f"--n {s['n']} with greedy decoding gives {s['n']} identical samples; pass --temperature > 0 (e.g. 0.8)")
    return s


def _ks_for(spec: BenchmarkSpec, k: Sequence[int] | None, n: int) -> list[int]:
    ks = sorted(set(int(x) for x in (k if k else spec.metrics.get("k", [1]))))
    bad = [x for x in ks if x < 1 or x > n]
    if bad:
        if k:
            raise RewardlabError(f"pass@k needs 1 <= k <= n; got k={bad[0]} with n={n} samples per problem")
        ks = [x for x in ks if 1 <= x <= n] or [1]
    return ks


def _grade(spec: BenchmarkSpec, rows: Sequence[EvalRow], texts: Sequence[str], n: int) -> tuple[list[str], list[Any]]:
    """Score each completion; returns (graded code or text per completion, RewardResult per completion)."""
    reward = get_reward(spec.grader)
    refs = [rows[j // n].reference for j in range(len(texts))]
    metas = [{"id": rows[j // n].id} for j in range(len(texts))]
    deadline = float(spec.grader_deadline or DEFAULT_DEADLINES.get(spec.grader, 10.0))
    results = score_batch(reward, list(texts), refs, metas, deadline=deadline)
    if spec.grader == "code":  # record the code the code reward ran (its own extraction rule)
        extracted = [extract_code(t, r.get("entry_point") if isinstance(r, dict) else None)[0] for t, r in zip(texts, refs)]
    else:
        extracted = list(texts)
    return extracted, results


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def _extracted(spec: BenchmarkSpec, graded_text: str, info: dict[str, Any]) -> Any:
    """What the grader judged: the code that ran, or the math reward's extracted answer."""
    if spec.grader == "code":
        return graded_text
    for key in ("pred", "extracted", "answer", "prediction"):
        if key in info:
            return info[key]
    return None


def _eval_benchmark(
    spec: BenchmarkSpec,
    rows: list[EvalRow],
    ctx: _Ctx,
    sampling: dict[str, Any],
    store: SampleStore,
    *,
    batch_size: int,
    seed: int,
    progress: bool,
) -> list[dict[str, Any]]:
    done = store.load()
    n = sampling["n"]
    pending_slots: dict[int, list[EvalRow]] = {}
    for pos, row in enumerate(rows):
        if row.id not in done:
            pending_slots.setdefault(pos // batch_size, []).append(row)
    todo = sum(len(v) for v in pending_slots.values())
    bar = None
    if progress and todo:
        bar = tqdm(total=len(rows), initial=len(rows) - todo, desc=spec.name, unit="problem", file=sys.stderr, dynamic_ncols=True)
    try:
        for slot, slot_rows in sorted(pending_slots.items()):
            prompts = [render_prompt(spec, r, ctx.tokenizer, tools=ctx.tools is not None) for r in slot_rows]
            params = SamplingParams(
                max_new_tokens=sampling["max_new_tokens"],
                temperature=sampling["temperature"],
                top_p=sampling["top_p"],
                seed=seed + slot * batch_size,
            )
            comps = ctx.engine.generate(prompts, n, params)
            if len(comps) != len(prompts) * n:
                raise RewardlabError(f"engine returned {len(comps)} completions for {len(prompts)} prompts x n={n}")
            texts = [c.text for c in comps]
            answers = [getattr(c, "graded_text", c.text) for c in comps]
            graded, results = _grade(spec, slot_rows, answers, n)  # tools: the model's last turn is the answer
            records = []
            for i, row in enumerate(slot_rows):
                sl = slice(i * n, (i + 1) * n)
                res = results[sl]
                rec = {
                    "id": row.id,
                    "index": row.index,
                    "prompt": prompts[i],
                    "reference": row.reference if spec.grader != "code" else {"entry_point": row.reference.get("entry_point")},
                    "completions": texts[sl],
                    "finish_reasons": [getattr(c, "finish_reason", None) for c in comps[sl]],
                    "num_tokens": [len(getattr(c, "token_ids", []) or []) for c in comps[sl]],
                    "extracted": [_jsonable(_extracted(spec, g, r.info)) for g, r in zip(graded[sl], res)],
                    "scores": [r.score for r in res],
                    "correct": [is_correct(r.score) for r in res],
                    "status": [r.info.get("status") for r in res],
                    "info": [_jsonable(r.info) for r in res],
                }
                if ctx.tools is not None:  # --- tool rollouts: what was asked of the tool, per completion ---
                    rec["answers"] = answers[sl]
                    rec["turns"] = [len(c.turns or []) for c in comps[sl]]
                    rec["tool_calls"] = [c.tool_calls for c in comps[sl]]
                    rec["tool_status"] = [[t["status"] for t in (c.turns or []) if t.get("code") is not None]
                                          for c in comps[sl]]
                    rec["model_tokens"] = [c.model_tokens for c in comps[sl]]
                records.append(rec)
            store.append(records)
            for rec in records:
                done[rec["id"]] = rec
            if bar is not None:
                bar.update(len(slot_rows))
    finally:
        if bar is not None:
            bar.close()
    return [done[r.id] for r in rows]


def graders_file(bench: str) -> str:
    """The per-problem file of every requested grader's verdicts and the disagreements."""
    return f"graders_{bench}.jsonl"


def _graded_texts(rec: dict[str, Any]) -> list[str]:
    return rec.get("answers") or rec["completions"]  # tool rollouts: the model's last turn is graded


def _extra_grades(spec: BenchmarkSpec, rows: Sequence[EvalRow], records: Sequence[dict[str, Any]],
                  names: Sequence[str], lm_eval_task: str) -> dict[str, dict[str, Any]]:
    """Each requested reference grader's scores and extracted answers per record (``rewardlab`` is
    the records' own); graders that do not apply to the benchmark (math graders on code) are listed
    as ``{"applicable": False}``."""
    out: dict[str, dict[str, Any]] = {}
    by_id = {r.id: r for r in rows}
    deadline = float(spec.grader_deadline or DEFAULT_DEADLINES.get(spec.grader, 10.0))
    for name in names:
        if name == DEFAULT_GRADER:
            continue
        g = get_grader(name, spec.grader, lm_eval_task)
        if g is None:
            out[name] = {"applicable": False, "why": f"{name} grades math answers; {spec.name} is graded by {spec.grader}"}
            continue
        texts, refs, sizes = [], [], []
        for rec in records:
            row = by_id[rec["id"]]
            t = _graded_texts(rec)
            texts.extend(t)
            refs.extend([grader_reference(row.reference, row.fields)] * len(t))
            sizes.append(len(t))
        res = score_batch(g, texts, refs, deadline=deadline)
        scores, extracted, pos = [], [], 0
        for size in sizes:
            scores.append([r.score for r in res[pos:pos + size]])
            extracted.append([r.info.get("pred") for r in res[pos:pos + size]])
            pos += size
        out[name] = {"applicable": True, "scores": scores, "extracted": extracted, "describe": g.describe(),
                     "status": [r.info.get("status") for r in res]}
    return out


def _disagreement_kind(ours: bool, theirs: bool, our_pred: Any, their_pred: Any, gold: Any = None,
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


def _gold_of(rec: dict[str, Any]) -> Any:
    ref = rec.get("reference")
    return ref.get("answer", ref.get("gold")) if isinstance(ref, dict) else ref


def _think_state(prompt: Any, text: Any) -> tuple[bool, bool]:
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


def _reasoning_stats(records: Sequence[dict[str, Any]], max_new_tokens: int | None) -> dict[str, Any]:
    total = budget = thinking = unclosed = 0
    for r in records:
        for j, text in enumerate(r["completions"]):
            total += 1
            fin = r["finish_reasons"][j] if j < len(r["finish_reasons"]) else None
            ntok = r["num_tokens"][j] if j < len(r["num_tokens"]) else 0
            if fin == "length" or (fin is None and max_new_tokens and ntok >= max_new_tokens):
                budget += 1
            t, u = _think_state(r.get("prompt"), text)
            thinking += t
            unclosed += u
    share = (lambda c: c / total if total else 0.0)
    return {"completions": total, "hit_token_budget": budget, "hit_token_budget_share": share(budget),
            "max_new_tokens": max_new_tokens, "thinking": thinking, "unclosed_think": unclosed,
            "unclosed_think_share": share(unclosed),
            "unclosed_think_share_of_thinking": unclosed / thinking if thinking else 0.0,
            "rule": "token budget: finish_reason 'length'; unclosed: the last <think> (in the completion, or the "
                    "prompt's when the completion has none) has no </think> after it"}


def _bench_results(spec: BenchmarkSpec, records: Sequence[dict[str, Any]], ks: Sequence[int], n: int,
                   extra: dict[str, dict[str, Any]] | None = None, *, seed: int = 0,
                   max_new_tokens: int | None = None) -> tuple[dict, dict, list[dict[str, Any]]]:
    metrics = benchmark_metrics(records, ks)
    flat: dict[str, Any] = {"alias": spec.name}
    for name, s in metrics.items():
        flat[f"{name},none"] = s.value
        flat[f"{name}_stderr,none"] = s.stderr
    flat["n"] = len(records)
    flat["samples_per_problem"] = n
    flat["k"] = list(ks)
    # --- avg@n +- stderr, maj@k over equivalence classes, solve-rate histogram (rewardlab's grader)
    nmin = min((len(r["scores"]) for r in records), default=0)
    avg = avg_at_n(records)
    metrics[f"avg@{nmin}"] = avg
    flat[f"avg@{nmin},none"], flat[f"avg@{nmin}_stderr,none"] = avg.value, avg.stderr
    maj_how: dict[str, Any] = {}
    mixed = 0
    if spec.grader != "code" and nmin > 1 and records:
        labels = math_answer_classes([[None if e is None else str(e) for e in r["extracted"]] for r in records],
                                     deadline=float(spec.grader_deadline or DEFAULT_DEADLINES.get(spec.grader, 10.0)))
        classes = []
        for lab, r in zip(labels, records):
            cc, m = class_correctness(lab, [bool(c) for c in r["correct"]])
            classes.append(cc)
            mixed += m
        maj = benchmark_majk(labels, classes, sorted(set(ks) | {nmin}), ids=[r["id"] for r in records], seed=seed)
        for name, s in maj["metrics"].items():
            metrics[name] = s
            flat[f"{name},none"], flat[f"{name}_stderr,none"] = s.value, s.stderr
        maj_how = maj["how"]
    reasoning = _reasoning_stats(records, max_new_tokens)
    flat["hit_token_budget_share"] = reasoning["hit_token_budget_share"]
    flat["unclosed_think_share"] = reasoning["unclosed_think_share"]
    # --- the other graders, side by side, and where they disagree with ours
    graders_out: dict[str, Any] = {}
    lines: list[dict[str, Any]] = []
    extra = extra or {}
    for name, g in extra.items():
        if not g.get("applicable"):
            graders_out[name] = {"applicable": False, "why": g.get("why")}
            continue
        per = [{f"pass@{k}": pass_at_k(len(sc), sum(is_correct(x) for x in sc), k) for k in ks} for sc in g["scores"]]
        gm = {f"pass@{k}": summarize([p[f"pass@{k}"] for p in per]) for k in ks}
        for mname, s in gm.items():
            flat[f"{mname},{name}"] = s.value
            flat[f"{mname}_stderr,{name}"] = s.stderr
        kinds: dict[str, int] = {}
        agree = total = 0
        for rec, sc, ex in zip(records, g["scores"], g["extracted"]):
            for j, (theirs, ours) in enumerate(zip(sc, rec["scores"])):
                total += 1
                o, t = is_correct(ours), is_correct(theirs)
                if o == t:
                    agree += 1
                    continue
                kind = _disagreement_kind(o, t, rec["extracted"][j], ex[j], _gold_of(rec), rec["status"][j])
                kinds[kind] = kinds.get(kind, 0) + 1
        graders_out[name] = {"applicable": True, "metrics": {m: s.to_dict() for m, s in gm.items()},
                             "agreement_with_rewardlab": agree / total if total else 1.0,
                             "disagreements": total - agree, "disagreements_by_kind": dict(sorted(kinds.items())),
                             "grader": g["describe"]}
    if any(g.get("applicable") for g in extra.values()):
        for i, rec in enumerate(records):
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
                            "kind": _disagreement_kind(is_correct(ours), is_correct(theirs), rec["extracted"][j],
                                                       g["extracted"][i][j], _gold_of(rec), rec["status"][j]),
                            "rewardlab_extracted": rec["extracted"][j], f"{name}_extracted": g["extracted"][i][j],
                            "completion_tail": str(_graded_texts(rec)[j])[-300:]})
            lines.append(line)
    statuses: dict[str, int] = {}
    finish: dict[str, int] = {}
    ntok = []
    for r in records:
        for s in r["status"]:
            statuses[str(s)] = statuses.get(str(s), 0) + 1
        for f in r["finish_reasons"]:
            finish[str(f)] = finish.get(str(f), 0) + 1
        ntok.extend(r["num_tokens"])
    details = {
        "metrics": {name: s.to_dict() for name, s in metrics.items()},
        "correct_samples": sum(sum(bool(c) for c in r["correct"]) for r in records),
        "total_samples": sum(len(r["scores"]) for r in records),
        "grader_status": statuses,
        "finish_reasons": finish,
        "mean_completion_tokens": (sum(ntok) / len(ntok)) if ntok else 0.0,
        "solve_rate_histogram": solve_rate_histogram(records),
        "reasoning": reasoning,
    }
    if maj_how:
        details["maj"] = {"how": maj_how, "classes": "answers equivalent by rewardlab's math reward are one vote",
                          "mixed_classes": mixed}
    if graders_out:
        details["graders"] = graders_out
        side = {DEFAULT_GRADER: {f"pass@{k}": metrics[f"pass@{k}"].value for k in ks}}
        for name, g in graders_out.items():
            side[name] = {m: d["value"] for m, d in g["metrics"].items()} if g.get("applicable") else None
        details["side_by_side"] = side
    if records and "tool_calls" in records[0]:  # --- tool rollouts ---
        calls = [c for r in records for c in r["tool_calls"]]
        status: dict[str, int] = {}
        for r in records:
            for per in r["tool_status"]:
                for s in per:
                    status[str(s)] = status.get(str(s), 0) + 1
        details["tools"] = {
            "calls_mean": sum(calls) / len(calls), "use_rate": sum(c > 0 for c in calls) / len(calls),
            "turns_mean": sum(t for r in records for t in r["turns"]) / len(calls), "call_status": status,
            "mean_model_tokens": sum(t for r in records for t in r["model_tokens"]) / len(calls),
        }
    return flat, details, lines


def run_eval(
    model: Any,
    suite: Sequence[str] | str,
    out_dir: str | os.PathLike,
    *,
    limit: int | None = None,
    n: int | None = None,
    k: Sequence[int] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    batch_size: int = 8,
    seed: int = 0,
    rollout: str = "hf",
    dtype: str = "auto",
    device: str = "cpu",
    tokenizer: Any | None = None,
    engine: Any | None = None,
    tools: str = "none",
    max_turns: int = 3,
    tool_timeout: float = 2.0,
    tool_format: str = "fenced",
    max_total_tokens: int | None = None,
    spec_files: Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    model_label: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    grader: Sequence[str] | str | None = None,
    lm_eval_task: str = "gsm8k",
) -> dict[str, Any]:
    """Evaluate a model on a suite of benchmarks and write ``results.json`` + samples to ``out_dir``.

    Args:
        model: a hub id, a ``save_pretrained`` folder, a run directory (latest checkpoint), ``"default"``
            / ``None`` (the embedded SmolLM2-135M-Instruct), or an in-memory model (pass ``tokenizer``).
        suite: benchmark names (``["gsm8k", "math500"]`` or ``"gsm8k,math500"``); a name that matches a
            spec in ``spec_files`` uses that spec.
        out_dir: where ``results.json`` and ``samples_<benchmark>.jsonl`` go; an existing run with the
            same configuration is resumed.
        limit: evaluate the first ``limit`` problems in file order.
        n, temperature, top_p, max_new_tokens: override the spec's sampling defaults.
        k: pass@k values to report (each ``<= n``); default from the spec.
        engine: any object with ``generate(prompts, n, sampling) -> list[Completion]`` (for tests and
            custom backends); when given, ``model`` is only a label.
        tools: ``"python"``: multi-turn tool rollouts (``rewardlab.rollout.multiturn``, HF or vLLM): the
            model's ```python blocks run in the sandbox (``tool_timeout`` s each, at most ``max_turns``
            calls, ``max_total_tokens`` tokens with observations, default 4 x max_new_tokens; the output
            as ``tool_format`` fenced or chat), the prompt
            ends with the tool hint, and the model's last turn is graded; each record gains answers,
            turns, tool_calls, tool_status and model_tokens, and details gain ``tools``.
        overwrite: discard existing samples in ``out_dir`` instead of resuming.
        grader: extra graders beside ``rewardlab`` (names of :data:`rewardlab.eval.graders.GRADERS`, a
            list or a comma list): each one's pass@k goes into ``results`` as ``pass@k,<grader>`` and
            ``details[bench]["graders"]`` (with agreement and disagreements by kind), and
            ``graders_<bench>.jsonl`` lists every grader's verdicts per problem and each disagreement.
            Graders run on the stored samples, so adding one never regenerates.
        lm_eval_task: the lm-eval GSM8K task whose filters ``lm-eval-strict`` / ``-flexible`` use.

    Returns:
        The results dict that was written to ``out_dir/results.json``.
    """
    t0 = time.time()
    out = Path(out_dir)
    names = [s.strip() for s in (suite.split(",") if isinstance(suite, str) else suite) if s and s.strip()]
    if not names:
        raise RewardlabError("empty --suite; choose from " + ", ".join(builtin_benchmarks()))
    grader_names = parse_graders(grader)
    for name in grader_names:
        get_grader(name, "math", lm_eval_task)  # an unknown --lm-eval-task fails here, before data or model loads
    user_specs = {sp.name: sp for sp in (load_spec(p) for p in (spec_files or []))}
    specs = [user_specs[nm] if nm in user_specs else load_spec(nm) for nm in names]
    if len({s.name for s in specs}) != len(specs):
        raise RewardlabError("a benchmark appears twice in --suite")
    # Load data before the model: a missing file should fail in a second, not after a model load.
    loaded = [(spec, *load_rows(spec, data_dir, limit)) for spec in specs]
    samplings = [_sampling_for(spec, {"n": n, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}) for spec in specs]
    kss = [_ks_for(spec, k, s["n"]) for spec, s in zip(specs, samplings)]
    if batch_size < 1:
        raise RewardlabError("--batch-size must be at least 1")
    if tools not in ("none", "python"):
        raise RewardlabError(f"unknown --tools {tools!r}; choose none or python")
    if tools != "none" and engine is not None:
        raise RewardlabError("--tools python builds its own engine over the model (no custom engine)")
    if max_turns < 1 or not tool_timeout > 0 or tool_format not in ("fenced", "chat"):
        raise RewardlabError("--max-turns must be >= 1, --tool-timeout > 0 and --tool-format fenced or chat")

    if engine is None:  # cheap checks first: a typo must not cost a model load, nor leave a folder
        device = resolve_device(device)
        if model is None or isinstance(model, (str, os.PathLike)):
            check_model(resolve_model_path(str(model)) if model is not None else None)
    # One writer per output folder for the whole run; a second eval on it stops here, writing nothing.
    with FolderLock(out, "eval", hint="wait for it to finish (rerun then to resume), or choose another --output"):
        for spec in specs:  # grader workers start while the model loads
            prewarm(get_reward(spec.grader))
        ctx = _make_ctx(model, tokenizer=tokenizer, engine=engine, rollout=rollout, dtype=dtype, device=device,
                        batch_size=batch_size, seed=seed, model_label=model_label)
        if tools == "python":  # --- the sandbox is the model's Python tool; one ToolEngine per benchmark budget ---
            ctx.tools = {"tools": "python", "max_turns": max_turns, "tool_timeout_s": tool_timeout,
                         "max_total_tokens": max_total_tokens, "format": tool_format, "hint": TOOL_HINT}
        base = ctx.engine  # the HF engine's live model, or the vLLM engine, under each benchmark's ToolEngine
        if overwrite:
            for spec in specs:
                (out / samples_file(spec.name)).unlink(missing_ok=True)
                (out / graders_file(spec.name)).unlink(missing_ok=True)
            (out / RESULTS_FILE).unlink(missing_ok=True)

        chat_sha = chat_template_sha256(ctx.tokenizer)
        results: dict[str, Any] = {
            "results": {}, "details": {}, "configs": {}, "versions": {}, "n-shot": {}, "higher_is_better": {},
            "n-samples": {}, "samples": {}, "grader_samples": {},
            "config": {
                "model": ctx.model_label,
                "model_info": ctx.model_info,
                "dtype": dtype if engine is None else None,
                "device": device,
                "rollout": "custom" if engine is not None else rollout,
                "batch_size": batch_size,
                "seed": seed,
                "limit": limit,
                "limit_rule": LIMIT_RULE,
                "chat_template_sha256": chat_sha,
                "versions": _versions(),
                "command": ("rewardlab " + shlex.join(sys.argv[1:])) if Path(sys.argv[0]).name in ("rewardlab", "__main__.py") else None,
            },
            "rewardlab_version": __version__,
            "git_hash": git_hash(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        _carry_over(out / RESULTS_FILE, results, {spec.name for spec in specs})
        for (spec, rows, source), sampling, ks in zip(loaded, samplings, kss):
            sample_cfg = {
                "format": SAMPLES_FORMAT, "benchmark": spec.name, "spec_sha256": spec.sha256, "model": ctx.model_label,
                "chat_template_sha256": chat_sha, "n": sampling["n"], "temperature": sampling["temperature"],
                "top_p": sampling["top_p"], "max_new_tokens": sampling["max_new_tokens"], "seed": seed,
                "batch_size": batch_size if sampling["temperature"] > 0 else None,
                "data_sha256": source.get("sha256"),
                **({} if ctx.tools is None else {"tools": ctx.tools}),
            }
            if ctx.tools is not None:
                ctx.engine = ToolEngine(getattr(base, "model", None), ctx.tokenizer, execute=sandbox.execute,
                                        max_turns=max_turns,
                                        max_total_tokens=max_total_tokens or 4 * sampling["max_new_tokens"],
                                        tool_timeout_s=tool_timeout, batch_size=batch_size,
                                        engine=base if rollout == "vllm" else None, observation_format=tool_format)
            store = SampleStore(out / samples_file(spec.name), {"fingerprint": fingerprint(sample_cfg), "config": sample_cfg})
            records = _eval_benchmark(spec, rows, ctx, sampling, store, batch_size=batch_size, seed=seed, progress=progress)
            extra = _extra_grades(spec, rows, records, grader_names, lm_eval_task)
            flat, details, grader_lines = _bench_results(spec, records, ks, sampling["n"], extra, seed=seed,
                                                         max_new_tokens=sampling["max_new_tokens"])
            results["results"][spec.name] = flat
            results["details"][spec.name] = details
            if grader_lines:
                _write_jsonl(out / graders_file(spec.name), [{"header": {"benchmark": spec.name, "graders": grader_names,
                                                                        "lm_eval_task": lm_eval_task}}] + grader_lines)
                results["grader_samples"][spec.name] = graders_file(spec.name)
            else:  # no reference grader asked for this time: no stale verdicts of an earlier run beside the results
                (out / graders_file(spec.name)).unlink(missing_ok=True)
            results["configs"][spec.name] = {
                "spec": spec.path, "spec_sha256": spec.sha256, "description": spec.description,
                "data": {**spec.data, **source}, "reference": spec.reference,
                "prompt_template": spec.prompt["template"], "system": spec.prompt.get("system"), "chat": spec.prompt.get("chat", True),
                "prompt_template_sha256": spec.template_sha256, "chat_template_sha256": chat_sha, "tools": ctx.tools,
                "num_fewshot": int(spec.prompt.get("shots", 0)), "grader": spec.grader, "graders": grader_names,
                "lm_eval_task": lm_eval_task if len(grader_names) > 1 else None,
                "grader_deadline_s": float(spec.grader_deadline or DEFAULT_DEADLINES.get(spec.grader, 10.0)),
                "sampling": sampling, "k": ks, "limit": limit, "limit_rule": LIMIT_RULE,
            }
            results["versions"][spec.name] = spec.sha256[:12]
            results["n-shot"][spec.name] = int(spec.prompt.get("shots", 0))
            results["higher_is_better"][spec.name] = {m: True for m in details["metrics"]}
            results["n-samples"][spec.name] = {"original": source.get("records"), "effective": len(rows)}
            results["samples"][spec.name] = store.path.name
            results["total_evaluation_time_seconds"] = round(time.time() - t0, 2)
            atomic_write_json(out / RESULTS_FILE, results)  # after each benchmark: partial results are usable
        return results


_PER_BENCH_KEYS = ("results", "details", "configs", "versions", "n-shot", "higher_is_better", "n-samples", "samples",
                   "grader_samples")


def _write_jsonl(path: Path, lines: Sequence[dict[str, Any]]) -> None:
    """Write a whole JSONL file through a temporary file + rename (it is rewritten on every run)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(_jsonable(line), ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _carry_over(path: Path, results: dict[str, Any], names: set[str]) -> None:
    """Keep benchmarks that an earlier run of the same model wrote to this directory (so a suite can
    be evaluated one benchmark at a time into one results.json)."""
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError:
        return
    if old.get("config", {}).get("model") != results["config"]["model"]:
        return
    for bench in old.get("results", {}):
        if bench in names or not (path.parent / old.get("samples", {}).get(bench, "-")).is_file():
            continue
        for key in _PER_BENCH_KEYS:
            if bench in (old.get(key) or {}):
                results[key][bench] = old[key][bench]


def _make_ctx(model: Any, *, tokenizer: Any, engine: Any, rollout: str, dtype: str, device: str,
              batch_size: int, seed: int, model_label: str | None) -> _Ctx:
    if engine is not None:
        label = model_label or (model if isinstance(model, str) else _model_label(model) if model is not None else "custom-engine")
        return _Ctx(engine=engine, tokenizer=tokenizer, model_label=str(label), model_info={"engine": type(engine).__name__})
    if model is None or isinstance(model, (str, os.PathLike)):
        name = "default" if model is None else resolve_model_path(str(model))
        model_obj, tok = load_model(name, dtype=dtype, device=device)
        model_obj.eval()
        info = dict(getattr(model_obj, "rewardlab_provenance", None) or {})
        label = model_label or (str(Path(name).resolve()) if Path(name).exists() else name)
    else:
        if tokenizer is None:
            raise RewardlabError("run_eval with an in-memory model needs its tokenizer (tokenizer=...)")
        model_obj, tok = model, tokenizer
        info = dict(getattr(model_obj, "rewardlab_provenance", None) or {})
        label = model_label or _model_label(model_obj)
    if rollout == "hf":
        kw: dict[str, Any] = {"batch_size": batch_size}
    else:  # eval owns the GPU (no trainer beside it): let vLLM take most of it
        kw = {"seed": seed, **({"gpu_memory_utilization": 0.85} if str(device).startswith("cuda") else {})}
    try:
        eng = make_engine(rollout, model_obj, tok, **kw)
    except ImportError as e:
        raise RewardlabError(f"--rollout {rollout} is not available here: {e}") from None
    info["num_parameters"] = sum(p.numel() for p in model_obj.parameters())
    info["dtype"] = str(next(model_obj.parameters()).dtype).replace("torch.", "")
    return _Ctx(engine=eng, tokenizer=tok, model_label=label, model_info=info)


__all__ = ["DEFAULT_DEADLINES", "LIMIT_RULE", "chat_template_sha256", "git_hash", "run_eval"]
