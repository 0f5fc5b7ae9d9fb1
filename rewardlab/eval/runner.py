"""The eval runner: generate ``n`` samples per problem, grade them with rewardlab's own rewards
(math: symbolic equivalence; code: the sandboxed code reward), compute pass@k with standard
errors, and write a self-describing ``results.json`` (see :mod:`rewardlab.eval`).

``run_eval(cfg, model)`` runs in stages: :func:`_plan` (benchmarks, data and sampling, every
cheap check before a model load), the model and engine (:func:`_make_ctx`), the results header,
then per benchmark generation (:func:`_eval_benchmark`), the reference graders
(:func:`_extra_grades`) and the benchmark's entry (:mod:`rewardlab.eval.report`), written after each.

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

from rewardlab import __version__, envs, sandbox
from rewardlab.errors import RewardlabError
from rewardlab.eval.config import EvalConfig
from rewardlab.eval.graders import DEFAULT_GRADER, get_grader, grader_reference
from rewardlab.eval.passk import is_correct
from rewardlab.eval.report import bench_results, graded_texts
from rewardlab.eval.spec import (
    DEFAULT_DEADLINES,
    BenchmarkSpec,
    EvalRow,
    builtin_benchmarks,
    load_rows,
    load_spec,
    render_prompt,
    task_row,
)
from rewardlab.eval.store import RESULTS_FILE, SAMPLES_FORMAT, SampleStore, atomic_write_json, fingerprint, samples_file
from rewardlab.locks import FolderLock
from rewardlab.models import check_model, load_model, resolve_device, resolve_model_path
from rewardlab.rewards import get_reward
from rewardlab.rewards.code import extract_code
from rewardlab.rewards.pool import prewarm, score_batch
from rewardlab.rollout import ENGINES, SamplingParams, make_engine
from rewardlab.rollout.driven import DrivenEngine
from rewardlab.rollout.episodes import EpisodeEngine
from rewardlab.rollout.python_tool import ToolEngine

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
    engines = [e.requires for e in ENGINES.values() if e.requires]  # an engine's optional package (vLLM)
    for dist in ("torch", "transformers", "math-verify", "sympy", *engines):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def _model_label(model: Any) -> str:
    prov = getattr(model, "rewardlab_provenance", None) or {}
    return str(prov.get("path") or prov.get("model") or getattr(getattr(model, "config", None), "_name_or_path", "")
               or type(model).__name__)


# ----------------------------------------------------------------------------- the plan


@dataclass
class _Bench:
    """One benchmark of the run: its spec, rows (and where they came from), sampling and pass@k values."""

    spec: BenchmarkSpec
    rows: list[EvalRow]
    source: dict[str, Any]
    sampling: dict[str, Any]
    ks: list[int]


@dataclass
class _Plan:
    """What a run will do, settled before any model load."""

    cfg: EvalConfig
    out: Path
    graders: list[str]
    benches: list[_Bench]
    device: str
    custom_engine: bool


@dataclass
class _Ctx:
    engine: Any
    """The model's engine (under a benchmark's ToolEngine with ``--tools python``)."""
    tokenizer: Any
    model_label: str
    model_info: dict[str, Any]
    tools: dict[str, Any] | None = None
    """``--tools python``: the tool settings (recorded in results.json and each sample file's config); None = off."""


def _benchmarks(cfg: EvalConfig) -> list[BenchmarkSpec]:
    """The suite's specs: ``--suite`` names (a ``--spec`` file's name uses that file), then the spec files not named."""
    user_specs = {sp.name: sp for sp in (load_spec(p) for p in cfg.spec)}
    names = cfg.suite_names()
    names += [name for name in user_specs if name not in names]  # a --spec file is evaluated even when not named
    if not names:
        raise RewardlabError("empty --suite; choose from " + ", ".join(builtin_benchmarks()))
    specs = [user_specs[nm] if nm in user_specs else load_spec(nm) for nm in names]
    if len({s.name for s in specs}) != len(specs):
        raise RewardlabError("a benchmark appears twice in --suite")
    return specs


def _plan(cfg: EvalConfig, model: Any, engine: Any) -> _Plan:
    """Benchmarks, graders, data and sampling of a run, with every check that needs no model."""
    grader_names = cfg.grader_names()
    for name in grader_names:
        get_grader(name, "math", cfg.lm_eval_task)  # an unknown --lm-eval-task fails here, before data or model loads
    specs = _benchmarks(cfg)
    # Load data before the model: a missing file should fail in a second, not after a model load.
    loaded = [(spec, *load_rows(spec, cfg.data_dir, cfg.limit)) for spec in specs]
    overrides = {"n": cfg.n, "temperature": cfg.temperature, "top_p": cfg.top_p, "max_new_tokens": cfg.max_new_tokens}
    benches = []
    for spec, rows, source in loaded:
        sampling = _sampling_for(spec, overrides)
        benches.append(_Bench(spec, rows, source, sampling, _ks_for(spec, cfg.k, sampling["n"])))
    cfg.check(custom_engine=engine is not None)
    device = cfg.device
    if engine is None:  # cheap checks first: a typo must not cost a model load, nor leave a folder
        device = resolve_device(device)
        if model is None or isinstance(model, (str, os.PathLike)):
            check_model(resolve_model_path(str(model)) if model is not None else None)
    return _Plan(cfg, cfg.out_dir(model), grader_names, benches, device, engine is not None)


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
        raise RewardlabError(f"--n {s['n']} with greedy decoding gives {s['n']} identical samples; pass --temperature "
                             "> 0 (e.g. 0.8)")
    return s


def _ks_for(spec: BenchmarkSpec, k: Sequence[int] | None, n: int) -> list[int]:
    ks = sorted(set(int(x) for x in (k if k else spec.metrics.get("k", [1]))))
    bad = [x for x in ks if x < 1 or x > n]
    if bad:
        if k:
            raise RewardlabError(f"pass@k needs 1 <= k <= n; got k={bad[0]} with n={n} samples per problem")
        ks = [x for x in ks if 1 <= x <= n] or [1]
    return ks


def grade_texts(spec: BenchmarkSpec, rows: Sequence[EvalRow], texts: Sequence[str],
                n: int, episodes: Sequence[dict | None] | None = None) -> tuple[list[str], list[Any]]:
    """Score each completion; returns (graded code or text per completion, RewardResult per completion).
    ``episodes``: an environment's verdict on each completion's episode (what its reward reads)."""
    reward = get_reward(spec.grader)
    refs = [rows[j // n].reference for j in range(len(texts))]
    # an eval runs every test of a code problem (training stops at the first failure), so info["tests"] is whole
    every_test = {"early_exit": False} if spec.grader == "code" else {}
    metas = [{"id": rows[j // n].id, **every_test} for j in range(len(texts))]
    for meta, episode in zip(metas, episodes or []):
        if episode is not None:
            meta["episode"] = episode
    results = score_batch(reward, list(texts), refs, metas, deadline=spec.deadline_s)
    if spec.grader == "code":  # record the code the code reward ran (its own extraction rule)
        extracted = [extract_code(t, r.get("entry_point") if isinstance(r, dict) else None)[0]
                     for t, r in zip(texts, refs)]
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


# ----------------------------------------------------------------------------- generation and grading


def _record(spec: BenchmarkSpec, row: EvalRow, prompt: Any, comps: Sequence[Any], answers: Sequence[str],
            graded: Sequence[str], res: Sequence[Any], tools: bool) -> dict[str, Any]:
    """One problem's line of ``samples_<bench>.jsonl``: its completions, what was graded and the verdicts."""
    rec = {
        "id": row.id,
        "index": row.index,
        "prompt": prompt,
        "reference": row.reference if spec.grader != "code" else {"entry_point": row.reference.get("entry_point")},
        "completions": [c.text for c in comps],
        "finish_reasons": [getattr(c, "finish_reason", None) for c in comps],
        "num_tokens": [len(getattr(c, "token_ids", []) or []) for c in comps],
        "extracted": [_jsonable(_extracted(spec, g, r.info)) for g, r in zip(graded, res)],
        "scores": [r.score for r in res],
        "correct": [is_correct(r.score) for r in res],
        "status": [r.info.get("status") for r in res],
        "info": [_jsonable(r.info) for r in res],
    }
    if tools:  # --- tool rollouts: what was asked of the tool, per completion ---
        rec["answers"] = list(answers)
        rec["turns"] = [len(c.turns or []) for c in comps]
        rec["tool_calls"] = [c.tool_calls for c in comps]
        rec["tool_status"] = [[t["status"] for t in (c.turns or []) if t.get("code") is not None]
                              + [call["status"] for t in (c.turns or []) for call in t.get("calls") or []]
                              for c in comps]
        rec["model_tokens"] = [c.model_tokens for c in comps]
    return rec


def _generate_slot(spec: BenchmarkSpec, slot_rows: list[EvalRow], engine: Any, ctx: _Ctx, sampling: dict[str, Any],
                   seed: int) -> list[dict[str, Any]]:
    """Generate and grade one batch slot's problems (sampling seed ``seed``); one record per problem."""
    n = sampling["n"]
    prompts = [render_prompt(spec, r, ctx.tokenizer, tools=ctx.tools is not None) for r in slot_rows]
    params = SamplingParams(max_new_tokens=sampling["max_new_tokens"], temperature=sampling["temperature"],
                            top_p=sampling["top_p"], seed=seed)
    episodes = isinstance(engine, (EpisodeEngine, DrivenEngine))
    kw = {"rows": [task_row(r) for r in slot_rows]} if episodes else {}
    comps = engine.generate(prompts, n, params, **kw)
    if len(comps) != len(prompts) * n:
        raise RewardlabError(f"engine returned {len(comps)} completions for {len(prompts)} prompts x n={n}")
    answers = [getattr(c, "graded_text", c.text) for c in comps]
    graded, results = grade_texts(spec, slot_rows, answers, n,  # tools: the model's last turn is the answer
                                  [getattr(c, "episode", None) for c in comps])
    return [_record(spec, row, prompts[i], comps[i * n:(i + 1) * n], answers[i * n:(i + 1) * n],
                    graded[i * n:(i + 1) * n], results[i * n:(i + 1) * n], ctx.tools is not None or episodes)
            for i, row in enumerate(slot_rows)]


def _eval_benchmark(spec: BenchmarkSpec, rows: list[EvalRow], engine: Any, ctx: _Ctx, sampling: dict[str, Any],
                    store: SampleStore, *, batch_size: int, seed: int, progress: bool) -> list[dict[str, Any]]:
    """Every problem's record: those already in ``store`` (resume), and the others generated slot by slot."""
    done = store.load()
    pending_slots: dict[int, list[EvalRow]] = {}
    for pos, row in enumerate(rows):
        if row.id not in done:
            pending_slots.setdefault(pos // batch_size, []).append(row)
    todo = sum(len(v) for v in pending_slots.values())
    bar = None
    if progress and todo:
        bar = tqdm(total=len(rows), initial=len(rows) - todo, desc=spec.name, unit="problem", file=sys.stderr,
                   dynamic_ncols=True)
    try:
        for slot, slot_rows in sorted(pending_slots.items()):
            records = _generate_slot(spec, slot_rows, engine, ctx, sampling, seed + slot * batch_size)
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


def _extra_grades(spec: BenchmarkSpec, rows: Sequence[EvalRow], records: Sequence[dict[str, Any]],
                  names: Sequence[str], lm_eval_task: str) -> dict[str, dict[str, Any]]:
    """Each requested reference grader's scores and extracted answers per record (``rewardlab`` is
    the records' own); graders that do not apply to the benchmark (math graders on code) are listed
    as ``{"applicable": False}``."""
    out: dict[str, dict[str, Any]] = {}
    by_id = {r.id: r for r in rows}
    for name in names:
        if name == DEFAULT_GRADER:
            continue
        g = get_grader(name, spec.grader, lm_eval_task)
        if g is None:
            out[name] = {"applicable": False, "why": f"{name} grades math answers; {spec.name} is graded by "
                         f"{spec.grader}"}
            continue
        texts, refs, sizes = [], [], []
        for rec in records:
            row = by_id[rec["id"]]
            t = graded_texts(rec)
            texts.extend(t)
            refs.extend([grader_reference(row.reference, row.fields)] * len(t))
            sizes.append(len(t))
        res = score_batch(g, texts, refs, deadline=spec.deadline_s)
        scores, extracted, pos = [], [], 0
        for size in sizes:
            scores.append([r.score for r in res[pos:pos + size]])
            extracted.append([r.info.get("pred") for r in res[pos:pos + size]])
            pos += size
        out[name] = {"applicable": True, "scores": scores, "extracted": extracted, "describe": g.describe(),
                     "status": [r.info.get("status") for r in res]}
    return out


# ----------------------------------------------------------------------------- the run


def run_eval(cfg: EvalConfig, model: Any = None, *, tokenizer: Any | None = None,
             engine: Any | None = None) -> dict[str, Any]:
    """Evaluate ``model`` on the suite of ``cfg`` and write ``results.json`` + samples to ``cfg.out_dir(model)``.

    Args:
        cfg: the settings (:class:`~rewardlab.eval.config.EvalConfig`, one field per ``rewardlab eval``
            option); an existing run in the output folder with the same configuration is resumed.
        model: a hub id, a ``save_pretrained`` folder, a run directory (latest checkpoint), ``"default"``
            / ``None`` (the embedded SmolLM2-135M-Instruct), or an in-memory model (pass ``tokenizer``).
        engine: any object with ``generate(prompts, n, sampling) -> list[Completion]`` (for tests and
            custom backends); when given, ``model`` is only a label.

    ``--tools python`` runs multi-turn tool rollouts (``rewardlab.rollout.multiturn``): each record gains
    answers, turns, tool_calls, tool_status and model_tokens, and details gain ``tools``. Extra graders
    (``cfg.grader``) run on the stored samples, so adding one never regenerates.

    Returns:
        The results dict that was written to ``results.json``.
    """
    if not isinstance(cfg, EvalConfig):
        raise TypeError(f"run_eval(cfg, model, *, tokenizer=None, engine=None): cfg is an EvalConfig, got "
                        f"{type(cfg).__name__}")
    t0 = time.time()
    plan = _plan(cfg, model, engine)
    # One writer per output folder for the whole run; a second eval on it stops here, writing nothing.
    with FolderLock(plan.out, "eval", hint="wait for it to finish (rerun then to resume), or choose another --output"):
        for b in plan.benches:  # grader workers start while the model loads
            prewarm(get_reward(b.spec.grader))
        ctx = _make_ctx(model, cfg, plan.device, tokenizer=tokenizer, engine=engine)
        ctx.tools = cfg.tool_record()
        if cfg.overwrite:
            _discard(plan)
        results = _results_header(plan, ctx)
        _carry_over(plan.out / RESULTS_FILE, results, {b.spec.name for b in plan.benches})
        for b in plan.benches:
            _run_benchmark(plan, ctx, b, results)
            results["total_evaluation_time_seconds"] = round(time.time() - t0, 2)
            atomic_write_json(plan.out / RESULTS_FILE, results)  # after each benchmark: partial results are usable
        return results


def _discard(plan: _Plan) -> None:
    """``--overwrite``: the run's samples, graders' files and results go before anything is generated."""
    for b in plan.benches:
        (plan.out / samples_file(b.spec.name)).unlink(missing_ok=True)
        (plan.out / graders_file(b.spec.name)).unlink(missing_ok=True)
    (plan.out / RESULTS_FILE).unlink(missing_ok=True)


def _results_header(plan: _Plan, ctx: _Ctx) -> dict[str, Any]:
    """``results.json`` before any benchmark: empty per-benchmark tables and the run's provenance."""
    cfg = plan.cfg
    return {
        "results": {}, "details": {}, "configs": {}, "versions": {}, "n-shot": {}, "higher_is_better": {},
        "n-samples": {}, "samples": {}, "grader_samples": {},
        "config": {
            "model": ctx.model_label,
            "model_info": ctx.model_info,
            "dtype": cfg.dtype if not plan.custom_engine else None,
            "device": plan.device,
            "rollout": "custom" if plan.custom_engine else cfg.rollout,
            "batch_size": cfg.batch_size,
            "seed": cfg.seed,
            "limit": cfg.limit,
            "limit_rule": LIMIT_RULE,
            "chat_template_sha256": chat_template_sha256(ctx.tokenizer),
            "versions": _versions(),
            "command": (("rewardlab " + shlex.join(sys.argv[1:]))
                        if Path(sys.argv[0]).name in ("rewardlab", "__main__.py") else None),
        },
        "rewardlab_version": __version__,
        "git_hash": git_hash(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _engine_for(plan: _Plan, ctx: _Ctx, b: _Bench) -> Any:
    """The engine of one benchmark: the model's, or (``--tools python``) a ToolEngine over it with the
    benchmark's token budget, the sandbox as the model's Python tool."""
    cfg = plan.cfg
    env = str(b.rows[0].fields.get("env", "")) if b.rows else ""
    if envs.driver(env):  # an environment running its own agent: it calls the policy endpoint
        return DrivenEngine(ctx.engine, ctx.tokenizer, drive=envs.drive, is_driven=envs.is_driven)
    if b.rows and envs.episode_opener(env):  # a multi-turn environment
        return EpisodeEngine(getattr(ctx.engine, "model", None), ctx.tokenizer, open_episode=envs.open_episode,
                             base=ctx.engine, settings=cfg.tool_settings(), batch_size=cfg.batch_size,
                             drives=ENGINES[cfg.rollout].drives_tool_loop, is_episode=envs.is_episode)
    if ctx.tools is None:
        return ctx.engine
    base = ctx.engine  # the HF engine's live model, or the vLLM engine
    # the trajectory budget: ToolSettings.token_budget of the benchmark's max_new_tokens (the sampling it is given)
    return ToolEngine(getattr(base, "model", None), ctx.tokenizer, execute=sandbox.execute,
                      settings=cfg.tool_settings(), batch_size=cfg.batch_size,
                      engine=base if ENGINES[cfg.rollout].drives_tool_loop else None)


def _sample_config(plan: _Plan, ctx: _Ctx, b: _Bench) -> dict[str, Any]:
    """What a sample file's records depend on (its fingerprint decides whether a rerun resumes)."""
    s = b.sampling
    return {
        "format": SAMPLES_FORMAT, "benchmark": b.spec.name, "spec_sha256": b.spec.sha256, "model": ctx.model_label,
        "chat_template_sha256": chat_template_sha256(ctx.tokenizer), "n": s["n"], "temperature": s["temperature"],
        "top_p": s["top_p"], "max_new_tokens": s["max_new_tokens"], "seed": plan.cfg.seed,
        "batch_size": plan.cfg.batch_size if s["temperature"] > 0 else None,
        "data_sha256": b.source.get("sha256"),
        **({} if ctx.tools is None else {"tools": ctx.tools}),
    }


def _bench_config(plan: _Plan, ctx: _Ctx, b: _Bench) -> dict[str, Any]:
    """The benchmark's ``configs`` entry in results.json: everything that changes its numbers."""
    spec, cfg = b.spec, plan.cfg
    return {
        "spec": spec.path, "spec_sha256": spec.sha256, "description": spec.description,
        "data": {**spec.data, **b.source}, "reference": spec.reference,
        "prompt_template": spec.prompt["template"], "system": spec.prompt.get("system"),
        "chat": spec.prompt.get("chat", True),
        "prompt_template_sha256": spec.template_sha256, "chat_template_sha256": chat_template_sha256(ctx.tokenizer),
        "tools": ctx.tools, "num_fewshot": int(spec.prompt.get("shots", 0)), "grader": spec.grader,
        "graders": plan.graders, "lm_eval_task": cfg.lm_eval_task if len(plan.graders) > 1 else None,
        "grader_deadline_s": spec.deadline_s, "sampling": b.sampling, "k": b.ks, "limit": cfg.limit,
        "limit_rule": LIMIT_RULE,
    }


def _run_benchmark(plan: _Plan, ctx: _Ctx, b: _Bench, results: dict[str, Any]) -> None:
    """Generate (or resume), grade and summarise one benchmark into ``results`` and its files."""
    spec, cfg, name = b.spec, plan.cfg, b.spec.name
    sample_cfg = _sample_config(plan, ctx, b)
    store = SampleStore(plan.out / samples_file(name), {"fingerprint": fingerprint(sample_cfg), "config": sample_cfg})
    engine = _engine_for(plan, ctx, b)
    try:
        records = _eval_benchmark(spec, b.rows, engine, ctx, b.sampling, store,
                                  batch_size=cfg.batch_size, seed=cfg.seed, progress=not cfg.quiet)
    finally:
        if isinstance(engine, DrivenEngine):  # its endpoint (the model engine is the run's: it stays)
            engine.close()
    extra = _extra_grades(spec, b.rows, records, plan.graders, cfg.lm_eval_task)
    flat, details, grader_lines = bench_results(spec, records, b.ks, b.sampling["n"], extra, seed=cfg.seed,
                                                max_new_tokens=b.sampling["max_new_tokens"])
    results["results"][name] = flat
    results["details"][name] = details
    if grader_lines:
        header = {"header": {"benchmark": name, "graders": plan.graders, "lm_eval_task": cfg.lm_eval_task}}
        _write_jsonl(plan.out / graders_file(name), [header] + grader_lines)
        results["grader_samples"][name] = graders_file(name)
    else:  # no reference grader asked for this time: no stale verdicts of an earlier run beside the results
        (plan.out / graders_file(name)).unlink(missing_ok=True)
    results["configs"][name] = _bench_config(plan, ctx, b)
    results["versions"][name] = spec.sha256[:12]
    results["n-shot"][name] = int(spec.prompt.get("shots", 0))
    results["higher_is_better"][name] = {m: True for m in details["metrics"]}
    results["n-samples"][name] = {"original": b.source.get("records"), "effective": len(b.rows)}
    results["samples"][name] = store.path.name


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


def _make_ctx(model: Any, cfg: EvalConfig, device: str, *, tokenizer: Any, engine: Any) -> _Ctx:
    """The model, tokenizer and engine of a run (a custom ``engine`` is used as given)."""
    if engine is not None:
        label = cfg.model_label or (model if isinstance(model, str)
                                    else _model_label(model) if model is not None else "custom-engine")
        return _Ctx(engine=engine, tokenizer=tokenizer, model_label=str(label),
                    model_info={"engine": type(engine).__name__})
    if model is None or isinstance(model, (str, os.PathLike)):
        name = "default" if model is None else resolve_model_path(str(model))
        model_obj, tok = load_model(name, dtype=cfg.dtype, device=device)
        model_obj.eval()
        info = dict(getattr(model_obj, "rewardlab_provenance", None) or {})
        label = cfg.model_label or (str(Path(name).resolve()) if Path(name).exists() else name)
    else:
        if tokenizer is None:
            raise RewardlabError("run_eval with an in-memory model needs its tokenizer (tokenizer=...)")
        model_obj, tok = model, tokenizer
        info = dict(getattr(model_obj, "rewardlab_provenance", None) or {})
        label = cfg.model_label or _model_label(model_obj)
    try:  # eval owns the device (no trainer beside it): the engine row's eval keywords
        eng = make_engine(cfg.rollout, model_obj, tok, **ENGINES[cfg.rollout].eval_keywords(cfg, device))
    except ImportError as e:
        raise RewardlabError(f"--rollout {cfg.rollout} is not available here: {e}") from None
    info["num_parameters"] = sum(p.numel() for p in model_obj.parameters())
    info["dtype"] = str(next(model_obj.parameters()).dtype).replace("torch.", "")
    return _Ctx(engine=eng, tokenizer=tok, model_label=label, model_info=info)


__all__ = ["DEFAULT_DEADLINES", "LIMIT_RULE", "chat_template_sha256", "git_hash",
           "graders_file", "run_eval"]
