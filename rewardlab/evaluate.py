"""The eval runner: GSM8K, MATH-500, MATH, HumanEval and the built-in `arith` task, with reproducible, self-describing results.

What it simplifies: one command generates ``n`` samples per problem, grades them with rewardlab's
own rewards (math: symbolic equivalence; code: the sandboxed code reward), computes pass@k with
standard errors, and writes a ``results.json`` that records everything that changes the number
(prompt template and its sha256, chat-template sha256, sampling, grader, seed, data file sha256,
model provenance, rewardlab version and git hash, date).

    rewardlab eval default --suite gsm8k,math500,humaneval --limit 50
    rewardlab eval runs/x/checkpoints/step-000200 --suite gsm8k --n 8 --temperature 0.8 --k 1,4,8
    rewardlab eval --compare before/results.json after/results.json --plot delta.png

    from rewardlab.evaluate import run_eval
    results = run_eval("default", ["gsm8k"], "evals-out", limit=50)

Layout of ``out_dir``: ``results.json`` (lm-evaluation-harness shape: ``results`` / ``configs`` /
``versions`` / ``n-shot`` / ``n-samples`` / ``config`` / ``git_hash`` / ``date``) and one
``samples_<benchmark>.jsonl`` per benchmark (a header line with the configuration fingerprint,
then one line per problem: prompt, completions, extracted answers, scores, grader info).

Resume: samples are appended one batch per ``write`` + ``fsync``; a rerun with the same command
reads the file, drops a torn last line, checks the fingerprint, and generates only the problems
that are missing, so an interrupted eval never loses or duplicates a sample. Batches occupy fixed
slots of the problem list and each slot's sampling seed is ``seed + slot start``, so a resumed
sampled (temperature > 0) run draws what the uninterrupted run would have drawn on the same machine.

``--limit N`` takes the first N problems in file order (the order of the data file named in the
spec), so subsets are the same everywhere.

Comparison (``--compare A B``) pairs two runs on the problem ids both evaluated and reports B-A per
metric with a 95% interval (Newcombe's paired score interval for 0/1 scores, else normal), the
counts of problems that improved / regressed, and an exact sign-test p-value.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.resources
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from rewardlab import __version__
from rewardlab.config import check_model, resolve_device
from rewardlab.errors import RewardlabError
from rewardlab.locks import FolderLock
from rewardlab.passk import Summary, paired_difference, pass_at_k, summarize
from rewardlab.tasks import file_sha256, last_boxed, read_jsonl

RESULTS_FILE = "results.json"
SAMPLES_FORMAT = 1
DEFAULT_DEADLINES = {"math": 10.0, "code": 30.0}
LIMIT_RULE = "first N problems in data-file order"

# ----------------------------------------------------------------------------- specs


@dataclass
class BenchmarkSpec:
    """One benchmark, as read from a YAML spec (see evals/README.md for every field)."""

    name: str
    description: str
    data: dict[str, Any]
    reference: dict[str, Any]
    prompt: dict[str, Any]
    grader: str
    sampling: dict[str, Any]
    metrics: dict[str, Any]
    path: str
    sha256: str
    grader_deadline: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def template_sha256(self) -> str:
        """sha256 of what shapes the prompt text: template, system message, shots, chat flag."""
        p = self.prompt
        blob = json.dumps(
            {"template": p["template"], "system": p.get("system"), "shots": p.get("shots", 0), "chat": p.get("chat", True)},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()


def builtin_benchmarks() -> list[str]:
    """Names of the specs shipped in ``rewardlab.evals``."""
    root = importlib.resources.files("rewardlab.evals")
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


_REQUIRED = ("name", "data", "reference", "prompt", "grader")


def load_spec(name_or_path: str | os.PathLike) -> BenchmarkSpec:
    """A built-in benchmark by name (``gsm8k``) or a user's spec file (``my_bench.yaml``)."""
    text: str
    path = Path(str(name_or_path)).expanduser()
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise RewardlabError(f"spec file {path} does not exist")
        text, where = path.read_text(), str(path.resolve())
    else:
        res = importlib.resources.files("rewardlab.evals") / f"{name_or_path}.yaml"
        if not res.is_file():
            raise RewardlabError(
                f"unknown benchmark {str(name_or_path)!r}; known: {', '.join(builtin_benchmarks())} "
                "(or pass a spec file with --spec)"
            )
        text, where = res.read_text(), f"rewardlab.evals/{name_or_path}.yaml"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RewardlabError(f"spec {where} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise RewardlabError(f"spec {where} must be a YAML mapping")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise RewardlabError(f"spec {where} is missing {', '.join(missing)}")
    prompt = dict(raw["prompt"])
    if "template" not in prompt:
        raise RewardlabError(f"spec {where}: prompt.template is required")
    shots = int(prompt.get("shots", 0))
    if shots != 0:
        raise RewardlabError(f"spec {where}: prompt.shots={shots}; rewardlab specs are zero-shot (put exemplars in the template)")
    data = dict(raw["data"])
    if "task" in data:
        if "local" in data or "hub" in data:
            raise RewardlabError(f"spec {where}: data.task cannot be combined with data.local or data.hub")
        if not isinstance(data["task"], dict) or "name" not in data["task"]:
            raise RewardlabError(f"spec {where}: data.task must be a mapping with a name (e.g. {{name: arith}})")
    elif "local" not in data and "hub" not in data:
        raise RewardlabError(f"spec {where}: data needs a local file name and/or a hub source, or a built-in task")
    sampling = {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 512, **(raw.get("sampling") or {})}
    metrics = {"k": [1], **(raw.get("metrics") or {})}
    return BenchmarkSpec(
        name=str(raw["name"]),
        description=str(raw.get("description", "")),
        data=data,
        reference=dict(raw["reference"]),
        prompt=prompt,
        grader=str(raw["grader"]),
        sampling=sampling,
        metrics=metrics,
        path=where,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        grader_deadline=raw.get("grader_deadline_s"),
        raw=raw,
    )


# ----------------------------------------------------------------------------- data


@dataclass
class EvalRow:
    """One problem: stable id, position in the data file, raw fields and the grader's reference."""

    id: str
    index: int
    fields: dict[str, Any]
    reference: Any


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The data directory: the argument, else ``REWARDLAB_DATA_DIR``, else tasks' default, else None."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("REWARDLAB_DATA_DIR")
    if env:
        return Path(env).expanduser()
    try:
        from rewardlab import tasks

        d = tasks.data_dir()
        return Path(d) if d else None
    except (ImportError, AttributeError):
        return None


def _load_hub(hub: dict[str, Any]) -> list[dict[str, Any]]:
    import datasets

    args = [hub["path"]] + ([hub["name"]] if hub.get("name") else [])
    ds = datasets.load_dataset(*args, split=hub.get("split", "test"))
    return [dict(r) for r in ds]


def _task_records(spec: BenchmarkSpec) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Records from a built-in ``rewardlab.tasks`` task (``data.task``), in the task's row order.

    Each record holds the row's ``meta`` fields plus ``id``, ``reference`` and ``user`` (the text of
    the row's single user message, i.e. exactly the prompt training uses). The generated rows have no
    file, so the sha256 of their canonical JSON is recorded instead.
    """
    from rewardlab.tasks import load_task

    task = spec.data["task"]
    name, split, seed = str(task["name"]), str(task.get("split", spec.data.get("split", "test"))), int(task.get("seed", 0))
    records = []
    for row in load_task(name, split, seed=seed):
        prompt = row.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1 or prompt[0].get("role") != "user":
                raise RewardlabError(f"{spec.name}: task {name} rows are not a single user message")
            prompt = prompt[0]["content"]
        records.append({**row.meta, "id": row.id, "reference": row.reference, "user": prompt})
    blob = json.dumps(records, sort_keys=True, default=str).encode()
    return records, {"source": "task", "task": name, "split": split, "seed": seed,
                     "sha256": hashlib.sha256(blob).hexdigest()}


def load_records(spec: BenchmarkSpec, data_dir: str | os.PathLike | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Raw records in file order and a description of where they came from.

    A built-in task (``data.task``) is generated by ``rewardlab.tasks``. Otherwise the local file
    (``data.local`` under the data directory) is used when present, so a number is tied to a file
    whose sha256 is recorded; otherwise the hub dataset (``data.hub``) is tried.
    """
    if "task" in spec.data:
        return _task_records(spec)
    root = resolve_data_dir(data_dir)
    local = spec.data.get("local")
    if local and root is not None and (root / local).is_file():
        path = root / local
        return read_jsonl(path), {"source": "local", "path": str(path.resolve()), "sha256": file_sha256(path)}
    hub = spec.data.get("hub")
    if hub:
        from rewardlab.models import hub_reachable

        if hub_reachable():
            try:
                records = _load_hub(hub)
            except Exception as e:  # noqa: BLE001 - any hub failure becomes the one-line error below
                raise RewardlabError(f"{spec.name}: loading {hub['path']} from the hub failed: {str(e).splitlines()[0]}") from None
            return records, {"source": "hub", **hub}
    where = f"{root / local}" if (root is not None and local) else f"{local} (no data directory; set REWARDLAB_DATA_DIR)"
    raise RewardlabError(f"{spec.name}: data not found at {where} and the hub is not reachable")


def _reference(spec: BenchmarkSpec, rec: dict[str, Any]) -> Any:
    ref = spec.reference
    kind = ref.get("kind", "field")
    if kind == "humaneval":
        return {"tests": rec["test"], "entry_point": rec["entry_point"], "prompt": rec["prompt"]}
    value = rec.get(ref.get("field", "answer"))
    if value is None:
        raise RewardlabError(f"{spec.name}: record has no field {ref.get('field')!r}")
    value = str(value)
    if kind == "field":
        out = value
    elif kind == "after_marker":
        marker = ref.get("marker", "####")
        if marker not in value:
            raise RewardlabError(f"{spec.name}: reference has no {marker!r} marker")
        out = value.rsplit(marker, 1)[1]
    elif kind == "last_boxed":
        out = last_boxed(value)
        if out is None:
            raise RewardlabError(f"{spec.name}: reference solution has no \\boxed{{...}}")
    else:
        raise RewardlabError(f"{spec.name}: unknown reference kind {kind!r} (field, after_marker, last_boxed, humaneval)")
    out = out.strip()
    if ref.get("strip_commas"):
        out = out.replace(",", "")
    return out


def load_rows(spec: BenchmarkSpec, data_dir: str | os.PathLike | None = None, limit: int | None = None) -> tuple[list[EvalRow], dict[str, Any]]:
    """The benchmark's problems (first ``limit`` in file order) and their data-source record."""
    records, source = load_records(spec, data_dir)
    expected = spec.data.get("size")
    source["records"] = len(records)
    if expected is not None and len(records) != int(expected):
        source["warning"] = f"expected {expected} records, found {len(records)}"
    if limit is not None:
        if limit < 1:
            raise RewardlabError("--limit must be at least 1")
        records = records[:limit]
    id_fmt = spec.data.get("id", spec.name + "/{index}")
    rows = []
    for i, rec in enumerate(records):
        try:
            rid = id_fmt.format(index=i, **rec)
        except KeyError as e:
            raise RewardlabError(f"{spec.name}: data.id uses field {e} that records do not have") from None
        rows.append(EvalRow(id=rid, index=i, fields=rec, reference=_reference(spec, rec)))
    if len({r.id for r in rows}) != len(rows):
        raise RewardlabError(f"{spec.name}: problem ids from data.id={id_fmt!r} are not unique")
    return rows, source


def render_user_prompt(spec: BenchmarkSpec, row: EvalRow) -> str:
    """The user message: the spec's template filled with the record's fields."""
    try:
        return spec.prompt["template"].format(**row.fields)
    except (KeyError, IndexError) as e:
        raise RewardlabError(f"{spec.name}: prompt.template uses {e} which records do not have") from None


def render_prompt(spec: BenchmarkSpec, row: EvalRow, tokenizer: Any | None) -> str:
    """The exact text given to the engine (chat template applied when the spec asks and the tokenizer has one)."""
    user = render_user_prompt(spec, row)
    if not spec.prompt.get("chat", True) or tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return user
    messages = ([{"role": "system", "content": spec.prompt["system"]}] if spec.prompt.get("system") else [])
    messages.append({"role": "user", "content": user})
    from rewardlab.rollout import format_prompt

    return format_prompt(tokenizer, messages)


# ----------------------------------------------------------------------------- samples file


def _fingerprint(cfg: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


class SampleStore:
    """Append-only per-benchmark JSONL: a header with the fingerprint, then one line per problem."""

    def __init__(self, path: Path, header: dict[str, Any]):
        self.path = path
        self.header = header

    def load(self) -> dict[str, dict[str, Any]]:
        """Records already written (by id); creates the file with its header when new.

        A torn last line (the process was killed mid-write) is cut off; a header from another
        configuration is an error rather than a silent mix of two runs.
        """
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._write_bytes((json.dumps({"header": self.header}) + "\n").encode(), truncate=True)
            return {}
        data = self.path.read_bytes()
        good_end = data.rfind(b"\n") + 1
        if good_end < len(data):  # torn tail from a kill: drop it before appending
            with open(self.path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
        # split on "\n" only: str.splitlines also breaks on U+2028/U+0085, which json.dumps(ensure_ascii=False) leaves raw
        lines = data[:good_end].decode("utf-8").split("\n")[:-1]
        try:
            header = json.loads(lines[0])["header"]
        except (IndexError, KeyError, json.JSONDecodeError):
            raise RewardlabError(f"{self.path} is not a rewardlab samples file; remove it or use another --output") from None
        if header.get("fingerprint") != self.header["fingerprint"]:
            diff = sorted(k for k in set(header.get("config", {})) | set(self.header["config"])
                          if header.get("config", {}).get(k) != self.header["config"].get(k))
            raise RewardlabError(
                f"{self.path} holds samples from a different configuration (differs in: {', '.join(diff) or 'format'}); "
                "use another --output directory or --overwrite"
            )
        done: dict[str, dict[str, Any]] = {}
        for line in lines[1:]:
            if line.strip():
                rec = json.loads(line)
                done.setdefault(rec["id"], rec)  # first write wins; duplicates cannot arise, but never double-count
        return done

    def append(self, records: Sequence[dict[str, Any]]) -> None:
        """Append records in one write, then fsync (a kill leaves whole records plus at most one torn line)."""
        blob = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
        self._write_bytes(blob)

    def _write_bytes(self, blob: bytes, truncate: bool = False) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb" if truncate else "ab") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` through a temporary file + rename (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- provenance


def git_hash() -> str | None:
    """The rewardlab source tree's commit (``+dirty`` when modified), or None outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
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
    import importlib.metadata as md

    out = {"rewardlab": __version__, "python": platform.python_version()}
    for dist in ("torch", "transformers", "math-verify", "sympy", "vllm"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


# ----------------------------------------------------------------------------- model / engine


def resolve_model_path(model: str) -> str:
    """A run directory resolves to its latest checkpoint; anything else is returned unchanged."""
    p = Path(model).expanduser()
    if p.is_dir() and not (p / "config.json").is_file():
        ckpts = sorted(c for c in (p / "checkpoints").glob("step-*") if (c / "config.json").is_file()) if (p / "checkpoints").is_dir() else []
        if ckpts:
            return str(ckpts[-1])
        raise RewardlabError(
            f"{model} is not a model (no config.json) nor a run directory with checkpoints/step-*/; "
            "pass a save_pretrained folder such as runs/x/checkpoints/step-000200 or a hub id"
        )
    if p.is_file():
        raise RewardlabError(f"{model} is a file, not a model folder (expected a save_pretrained folder with config.json)")
    return model


def _model_label(model: Any) -> str:
    prov = getattr(model, "rewardlab_provenance", None) or {}
    return str(prov.get("path") or prov.get("model") or getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__)


# ----------------------------------------------------------------------------- metrics


def _is_correct(score: float | None) -> bool:
    return score is not None and score >= 1.0 - 1e-9


def problem_passk(rec: dict[str, Any], ks: Sequence[int]) -> dict[str, float]:
    n = len(rec["scores"])
    c = sum(_is_correct(s) for s in rec["scores"])
    return {f"pass@{k}": pass_at_k(n, c, k) for k in ks}


def benchmark_metrics(records: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Summary]:
    """pass@k summaries over problems (records in problem order)."""
    per = [problem_passk(r, ks) for r in records]
    return {f"pass@{k}": summarize([p[f"pass@{k}"] for p in per]) for k in ks}


# ----------------------------------------------------------------------------- the runner


@dataclass
class _Ctx:
    engine: Any
    tokenizer: Any
    model_label: str
    model_info: dict[str, Any]


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
    from rewardlab.rewards import get_reward
    from rewardlab.rewards.pool import score_batch

    reward = get_reward(spec.grader)
    refs = [rows[j // n].reference for j in range(len(texts))]
    metas = [{"id": rows[j // n].id} for j in range(len(texts))]
    deadline = float(spec.grader_deadline or DEFAULT_DEADLINES.get(spec.grader, 10.0))
    results = score_batch(reward, list(texts), refs, metas, deadline=deadline)
    if spec.grader == "code":  # record the code the code reward ran (its own extraction rule)
        from rewardlab.rewards.code import extract_code

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
    from rewardlab.rollout import SamplingParams

    done = store.load()
    n = sampling["n"]
    pending_slots: dict[int, list[EvalRow]] = {}
    for pos, row in enumerate(rows):
        if row.id not in done:
            pending_slots.setdefault(pos // batch_size, []).append(row)
    todo = sum(len(v) for v in pending_slots.values())
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows), initial=len(rows) - todo, desc=spec.name, unit="problem", file=sys.stderr, dynamic_ncols=True)
    try:
        for slot, slot_rows in sorted(pending_slots.items()):
            prompts = [render_prompt(spec, r, ctx.tokenizer) for r in slot_rows]
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
            graded, results = _grade(spec, slot_rows, texts, n)
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
                    "correct": [_is_correct(r.score) for r in res],
                    "status": [r.info.get("status") for r in res],
                    "info": [_jsonable(r.info) for r in res],
                }
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


def _bench_results(spec: BenchmarkSpec, records: Sequence[dict[str, Any]], ks: Sequence[int], n: int) -> tuple[dict, dict]:
    metrics = benchmark_metrics(records, ks)
    flat: dict[str, Any] = {"alias": spec.name}
    for name, s in metrics.items():
        flat[f"{name},none"] = s.value
        flat[f"{name}_stderr,none"] = s.stderr
    flat["n"] = len(records)
    flat["samples_per_problem"] = n
    flat["k"] = list(ks)
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
    }
    return flat, details


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
    spec_files: Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    model_label: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
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
        overwrite: discard existing samples in ``out_dir`` instead of resuming.

    Returns:
        The results dict that was written to ``out_dir/results.json``.
    """
    t0 = time.time()
    out = Path(out_dir)
    names = [s.strip() for s in (suite.split(",") if isinstance(suite, str) else suite) if s and s.strip()]
    if not names:
        raise RewardlabError("empty --suite; choose from " + ", ".join(builtin_benchmarks()))
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

    if engine is None:  # cheap checks first: a typo must not cost a model load, nor leave a folder
        device = resolve_device(device)
        if model is None or isinstance(model, (str, os.PathLike)):
            check_model(resolve_model_path(str(model)) if model is not None else None)
    # One writer per output folder for the whole run; a second eval on it stops here, writing nothing.
    with FolderLock(out, "eval", hint="wait for it to finish (rerun then to resume), or choose another --output"):
        from rewardlab.rewards import get_reward
        from rewardlab.rewards.pool import prewarm

        for spec in specs:  # grader workers start while the model loads
            prewarm(get_reward(spec.grader))
        ctx = _make_ctx(model, tokenizer=tokenizer, engine=engine, rollout=rollout, dtype=dtype, device=device,
                        batch_size=batch_size, seed=seed, model_label=model_label)
        if overwrite:
            for spec in specs:
                (out / f"samples_{spec.name}.jsonl").unlink(missing_ok=True)
            (out / RESULTS_FILE).unlink(missing_ok=True)

        chat_sha = chat_template_sha256(ctx.tokenizer)
        results: dict[str, Any] = {
            "results": {}, "details": {}, "configs": {}, "versions": {}, "n-shot": {}, "higher_is_better": {},
            "n-samples": {}, "samples": {},
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
            }
            store = SampleStore(out / f"samples_{spec.name}.jsonl", {"fingerprint": _fingerprint(sample_cfg), "config": sample_cfg})
            records = _eval_benchmark(spec, rows, ctx, sampling, store, batch_size=batch_size, seed=seed, progress=progress)
            flat, details = _bench_results(spec, records, ks, sampling["n"])
            results["results"][spec.name] = flat
            results["details"][spec.name] = details
            results["configs"][spec.name] = {
                "spec": spec.path, "spec_sha256": spec.sha256, "description": spec.description,
                "data": {**spec.data, **source}, "reference": spec.reference,
                "prompt_template": spec.prompt["template"], "system": spec.prompt.get("system"), "chat": spec.prompt.get("chat", True),
                "prompt_template_sha256": spec.template_sha256, "chat_template_sha256": chat_sha,
                "num_fewshot": int(spec.prompt.get("shots", 0)), "grader": spec.grader,
                "grader_deadline_s": float(spec.grader_deadline or DEFAULT_DEADLINES.get(spec.grader, 10.0)),
                "sampling": sampling, "k": ks, "limit": limit, "limit_rule": LIMIT_RULE,
            }
            results["versions"][spec.name] = spec.sha256[:12]
            results["n-shot"][spec.name] = int(spec.prompt.get("shots", 0))
            results["higher_is_better"][spec.name] = {f"pass@{x}": True for x in ks}
            results["n-samples"][spec.name] = {"original": source.get("records"), "effective": len(rows)}
            results["samples"][spec.name] = store.path.name
            results["total_evaluation_time_seconds"] = round(time.time() - t0, 2)
            atomic_write_json(out / RESULTS_FILE, results)  # after each benchmark: partial results are usable
        return results


_PER_BENCH_KEYS = ("results", "details", "configs", "versions", "n-shot", "higher_is_better", "n-samples", "samples")


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
            if bench in old.get(key, {}):
                results[key][bench] = old[key][bench]


def _make_ctx(model: Any, *, tokenizer: Any, engine: Any, rollout: str, dtype: str, device: str,
              batch_size: int, seed: int, model_label: str | None) -> _Ctx:
    if engine is not None:
        label = model_label or (model if isinstance(model, str) else _model_label(model) if model is not None else "custom-engine")
        return _Ctx(engine=engine, tokenizer=tokenizer, model_label=str(label), model_info={"engine": type(engine).__name__})
    from rewardlab.rollout import make_engine

    if model is None or isinstance(model, (str, os.PathLike)):
        from rewardlab.models import load_model

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


# ----------------------------------------------------------------------------- reports


def format_table(results: dict[str, Any]) -> str:
    """A plain-text table of one results file: benchmark, metric, value, stderr, 95% interval, problems."""
    lines = [f"model: {results['config']['model']}"]
    head = f"{'benchmark':<12} {'metric':<8} {'value':>7} {'stderr':>7} {'95% CI':>17} {'problems':>9} {'n':>3}"
    lines += [head, "-" * len(head)]
    for bench, flat in results["results"].items():
        det = results.get("details", {}).get(bench, {}).get("metrics", {})
        for metric, d in det.items():
            ci = f"[{100 * d['ci_low']:5.1f}, {100 * d['ci_high']:5.1f}]"
            lines.append(
                f"{bench:<12} {metric:<8} {100 * d['value']:6.1f}% {100 * d['stderr']:6.1f}% {ci:>17} {flat['n']:>9} {flat['samples_per_problem']:>3}"
            )
    return "\n".join(lines)


def _load_results(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    if not p.is_file():
        raise RewardlabError(f"{path}: no results file")
    try:
        return p, json.loads(p.read_text())
    except json.JSONDecodeError:
        raise RewardlabError(f"{p} is not valid JSON") from None


def _load_samples(results_path: Path, results: dict[str, Any], bench: str) -> dict[str, dict[str, Any]]:
    name = results.get("samples", {}).get(bench, f"samples_{bench}.jsonl")
    sp = results_path.parent / name
    if not sp.is_file():
        raise RewardlabError(f"{sp}: per-sample file missing (needed for a paired comparison)")
    recs: dict[str, dict[str, Any]] = {}
    with open(sp, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # torn tail of an interrupted run
            obj = json.loads(line)
            if "header" in obj:
                continue
            recs.setdefault(obj["id"], obj)
    return recs


def _side(spec: str | os.PathLike | Sequence[str | os.PathLike]) -> tuple[str, str, dict[str, tuple[Path, dict[str, Any]]]]:
    """One side of a comparison: one or more results files (comma-separated) of the same model."""
    parts = [p for p in (spec.split(",") if isinstance(spec, str) else [spec] if isinstance(spec, os.PathLike) else spec) if str(p).strip()]
    if not parts:
        raise RewardlabError("--compare needs a results file on each side")
    benches: dict[str, tuple[Path, dict[str, Any]]] = {}
    models, paths = [], []
    for part in parts:
        path, res = _load_results(str(part).strip())
        models.append(res["config"]["model"])
        paths.append(str(path))
        for bench in res.get("results", {}):
            if bench in benches:
                raise RewardlabError(f"{bench} appears in both {benches[bench][0]} and {path}")
            benches[bench] = (path, res)
    return ",".join(paths), ",".join(dict.fromkeys(models)), benches


def compare_results(a_path: str | os.PathLike | Sequence[str], b_path: str | os.PathLike | Sequence[str]) -> dict[str, Any]:
    """Paired comparison (B minus A) on the problems both runs evaluated.

    Each side is a results file (or folder holding one), or several separated by commas when one
    model's benchmarks were evaluated into different folders.
    """
    a_where, a_model, a = _side(a_path)
    b_where, b_model, b = _side(b_path)
    common = [bench for bench in a if bench in b]
    if not common:
        raise RewardlabError(f"{a_where} and {b_where} share no benchmark")
    rows, warnings = [], []
    for bench in common:
        (pa, ra), (pb, rb) = a[bench], b[bench]
        sa, sb = _load_samples(pa, ra, bench), _load_samples(pb, rb, bench)
        ids = [i for i in sa if i in sb]
        if not ids:
            raise RewardlabError(f"{bench}: the two runs share no problem ids")
        na = min(len(sa[i]["scores"]) for i in ids)
        nb = min(len(sb[i]["scores"]) for i in ids)
        ks = sorted(set(ra["results"][bench].get("k", [1])) & set(rb["results"][bench].get("k", [1]))) or [1]
        ks = [k for k in ks if k <= min(na, nb)] or [1]
        for k in ks:
            va = [problem_passk(sa[i], [k])[f"pass@{k}"] for i in ids]
            vb = [problem_passk(sb[i], [k])[f"pass@{k}"] for i in ids]
            d = paired_difference(va, vb)
            rows.append({
                "benchmark": bench, "metric": f"pass@{k}", **d.to_dict(),
                "a_summary": summarize(va).to_dict(), "b_summary": summarize(vb).to_dict(),
                "only_in_a": len(sa) - len(ids), "only_in_b": len(sb) - len(ids),
            })
        for key in ("prompt_template_sha256", "grader", "sampling"):
            ca, cb = ra.get("configs", {}).get(bench, {}).get(key), rb.get("configs", {}).get(bench, {}).get(key)
            if ca != cb:
                warnings.append(f"{bench}: {key} differs between the runs")
    return {"a": {"path": a_where, "model": a_model}, "b": {"path": b_where, "model": b_model},
            "rows": rows, "warnings": warnings, "ci": "95% CI of B-A paired on problems (Newcombe score interval for 0/1 scores, else normal); p: exact sign test"}


def format_compare(cmp: dict[str, Any]) -> str:
    """The delta table of :func:`compare_results`."""
    lines = [f"A: {cmp['a']['model']}  ({cmp['a']['path']})", f"B: {cmp['b']['model']}  ({cmp['b']['path']})"]
    head = f"{'benchmark':<12} {'metric':<8} {'A':>7} {'B':>7} {'B-A':>7} {'95% CI (paired)':>17} {'+/-':>7} {'p':>6} {'problems':>9}"
    lines += [head, "-" * len(head)]
    for r in cmp["rows"]:
        ci = f"[{100 * r['ci_low']:+5.1f}, {100 * r['ci_high']:+5.1f}]"
        lines.append(
            f"{r['benchmark']:<12} {r['metric']:<8} {100 * r['a']:6.1f}% {100 * r['b']:6.1f}% {100 * r['delta']:+6.1f} {ci:>17} "
            f"{'+' + str(r['improved']) + '/-' + str(r['regressed']):>7} {r['p_value']:6.3f} {r['n']:>9}"
        )
    lines.append(f"({cmp['ci']}; +/-: problems improved/regressed)")
    lines += [f"warning: {w}" for w in cmp["warnings"]]
    return "\n".join(lines)


def plot_compare(cmp: dict[str, Any], path: str | os.PathLike) -> Path:
    """A PNG bar chart: A and B side by side per benchmark/metric, 95% intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = cmp["rows"]
    labels = [f"{r['benchmark']}\n{r['metric']}" for r in rows]
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


__all__ = [
    "BenchmarkSpec", "EvalRow", "SampleStore", "builtin_benchmarks", "compare_results",
    "format_compare", "format_table", "last_boxed", "load_rows", "load_spec", "plot_compare", "render_prompt", "render_user_prompt",
    "run_eval",
]
