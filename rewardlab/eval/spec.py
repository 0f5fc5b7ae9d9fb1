"""Benchmark specs (``evals/*.yaml``, or a user's file) and the rows they name.

A spec keeps only what is eval-specific: name, description, grader, sampling defaults, pass@k
values, expected size, and the chat / system choices. Rows, gold answers and prompt text come from
``rewardlab.tasks`` (``data: {task: {name: gsm8k, split: test}}``), the same rows training uses,
read under the same data-folder rule. A spec of your own may instead name a file (``data.local``
under the data folder and/or ``data.hub``), with a ``reference`` rule and a ``prompt.template``;
that file is read by the same :func:`rewardlab.tasks.read_source`. See evals/README.md.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rewardlab import envs, tasks
from rewardlab.errors import RewardlabError
from rewardlab.rollout import format_prompt
from rewardlab.rollout.multiturn import with_tool_hint
from rewardlab.rollout.toolcalls import render_with_tools
from rewardlab.tasks import gsm8k_gold, last_boxed


DEFAULT_DEADLINES = {"math": 10.0, "code": 30.0}
"""A grader's default per-item deadline in seconds (a spec's ``grader_deadline_s`` wins), by spec grader."""


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
    def deadline_s(self) -> float:
        """The per-item deadline of this benchmark's graders: ``grader_deadline_s``, else :data:`DEFAULT_DEADLINES`."""
        return float(self.grader_deadline or DEFAULT_DEADLINES.get(self.grader, 10.0))

    @property
    def task_prompt(self) -> bool:
        """True when the prompt is the task's own user message (the spec gave no template)."""
        return "task" in self.data and "template" not in (self.raw.get("prompt") or {})

    @property
    def template_sha256(self) -> str:
        """sha256 of what shapes the prompt text: template, system message, shots, chat flag."""
        p = self.prompt
        blob = json.dumps(
            {"template": p["template"], "system": p.get("system"), "shots": p.get("shots", 0),
             "chat": p.get("chat", True)},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()


def builtin_benchmarks() -> list[str]:
    """Names of the specs shipped in ``rewardlab.evals``."""
    root = importlib.resources.files("rewardlab.evals")
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


_REQUIRED = ("name", "data", "reference", "prompt", "grader")
_TASK_OPTIONAL = ("reference", "prompt")  # a task brings its own gold answers and prompt


def env_spec_text(env: str) -> str:
    """The YAML spec of an environment as a benchmark (``rewardlab eval --env SPEC``): its test split, graded
    by the environment's own reward (its kind's, :data:`rewardlab.envs.KINDS`), greedy, 512 new tokens, pass@1."""
    spec = {"name": envs.short_name(env), "description": f"environment {env}",
            "data": {"task": {"name": env, "split": "test"}}, "grader": envs.KINDS[envs.spec_of(env).kind].reward,
            "prompt": {"template": "{user}"}, "sampling": {"n": 1, "temperature": 0.0, "max_new_tokens": 512},
            "metrics": {"k": [1]}}
    return yaml.safe_dump(spec, sort_keys=False)


def load_spec(name_or_path: str | os.PathLike) -> BenchmarkSpec:
    """A built-in benchmark by name (``gsm8k``), an environment (``reasoning_gym:NAME``) or a user's spec file
    (``my_bench.yaml``)."""
    text: str
    path = Path(str(name_or_path)).expanduser()
    if envs.is_env(str(name_or_path)):
        text, where = env_spec_text(str(name_or_path)), str(name_or_path)
    elif path.suffix in (".yaml", ".yml") or path.is_file():
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
    from_task = isinstance(raw.get("data"), dict) and "task" in raw["data"]
    missing = [k for k in _REQUIRED if k not in raw and not (from_task and k in _TASK_OPTIONAL)]
    if missing:
        raise RewardlabError(f"spec {where} is missing {', '.join(missing)}")
    data = dict(raw["data"])
    prompt = {"shots": 0, "chat": True, "system": None, **(raw.get("prompt") or {})}
    if from_task:
        if "local" in data or "hub" in data:
            raise RewardlabError(f"spec {where}: data.task cannot be combined with data.local or data.hub")
        task = data["task"]
        if not isinstance(task, dict) or "name" not in task:
            raise RewardlabError(f"spec {where}: data.task must be a mapping with a name (e.g. {{name: arith}})")
        base = str(task["name"]).split(":", 1)[0]
        src = tasks.task_source(base, str(task.get("split", data.get("split", "test"))))
        if src is not None:  # recorded with every result: the file and Hub dataset the task reads
            data.update(local=src.local, hub=src.hub)
        data.setdefault("id", "{id}")
        if "template" not in prompt:
            if base not in tasks.PROMPTS:
                raise RewardlabError(f"spec {where}: task {task['name']} has no built-in prompt; give prompt.template")
            prompt["template"] = tasks.PROMPTS[base]
    elif "local" not in data and "hub" not in data:
        raise RewardlabError(f"spec {where}: data needs a local file name and/or a hub source, or a built-in task")
    if "template" not in prompt:
        raise RewardlabError(f"spec {where}: prompt.template is required")
    shots = int(prompt.get("shots", 0))
    if shots != 0:
        raise RewardlabError(f"spec {where}: prompt.shots={shots}; rewardlab specs are zero-shot (put exemplars in the "
                             "template)")
    sampling = {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 512, **(raw.get("sampling") or {})}
    metrics = {"k": [1], **(raw.get("metrics") or {})}
    return BenchmarkSpec(
        name=str(raw["name"]),
        description=str(raw.get("description", "")),
        data=data,
        reference=dict(raw.get("reference") or {"kind": "task"}),
        prompt=prompt,
        grader=str(raw["grader"]),
        sampling=sampling,
        metrics=metrics,
        path=where,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        grader_deadline=raw.get("grader_deadline_s"),
        raw=raw,
    )


# ----------------------------------------------------------------------------- rows


@dataclass
class EvalRow:
    """One problem: stable id, position in the data file, raw fields and the grader's reference."""

    id: str
    index: int
    fields: dict[str, Any]
    reference: Any


def _task_records(spec: BenchmarkSpec,
                  data_dir: str | os.PathLike | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Records of a ``data.task`` spec, in the task's row order: the row's ``meta`` fields plus
    ``id``, ``reference`` and ``user`` (the text of its single user message: the training prompt)."""
    task = spec.data["task"]
    name, split, seed = (str(task["name"]), str(task.get("split", spec.data.get("split", "test"))),
                         int(task.get("seed", 0)))
    rows, source = envs.load_rows(name, split, data_dir=data_dir, seed=seed)
    records = []
    for row in rows:
        prompt = row.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1 or prompt[0].get("role") != "user":
                raise RewardlabError(f"{spec.name}: task {name} rows are not a single user message")
            prompt = prompt[0]["content"]
        records.append({**row.meta, "id": row.id, "reference": row.reference, "user": prompt})
    if source["source"] == "task":
        source = {**source, "task": name}
    return records, source


def load_records(spec: BenchmarkSpec,
                 data_dir: str | os.PathLike | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Raw records in file order and a description of where they came from (``source``: local,
    hub or task, with the sha256 of the file or of the generated rows)."""
    if "task" in spec.data:
        return _task_records(spec, data_dir)
    return tasks.read_source(spec.name, spec.data.get("local"), spec.data.get("hub"), data_dir)


def _reference(spec: BenchmarkSpec, rec: dict[str, Any]) -> Any:
    ref = spec.reference
    kind = ref.get("kind", "field")
    if kind == "task":
        return rec["reference"]
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
        out = gsm8k_gold(value) if marker == "####" else value.rsplit(marker, 1)[1]
    elif kind == "last_boxed":
        out = last_boxed(value)
        if out is None:
            raise RewardlabError(f"{spec.name}: reference solution has no \\boxed{{...}}")
    else:
        raise RewardlabError(f"{spec.name}: unknown reference kind {kind!r} (task, field, after_marker, last_boxed, "
                             "humaneval)")
    out = out.strip()
    if ref.get("strip_commas"):
        out = out.replace(",", "")
    return out


def load_rows(spec: BenchmarkSpec, data_dir: str | os.PathLike | None = None,
              limit: int | None = None) -> tuple[list[EvalRow], dict[str, Any]]:
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
    """The user message: the task's own prompt, or the spec's template filled with the record's fields."""
    if spec.task_prompt:
        return row.fields["user"]
    try:
        return spec.prompt["template"].format(**row.fields)
    except (KeyError, IndexError) as e:
        raise RewardlabError(f"{spec.name}: prompt.template uses {e} which records do not have") from None


def render_prompt(spec: BenchmarkSpec, row: EvalRow, tokenizer: Any | None, *, tools: bool = False) -> str:
    """The exact text given to the engine (chat template applied when the spec asks and the tokenizer has one);
    ``tools``: the user message ends with the tool hint (``rewardlab.rollout.multiturn.TOOL_HINT``)."""
    user = render_user_prompt(spec, row)
    if tools:
        user = with_tool_hint(user)
    if not spec.prompt.get("chat", True) or tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return user
    messages = ([{"role": "system", "content": spec.prompt["system"]}] if spec.prompt.get("system") else [])
    messages.append({"role": "user", "content": user})
    if row.fields.get("tools"):  # an environment's tools, declared to the chat template (as training renders them)
        return render_with_tools(tokenizer, messages, row.fields["tools"])
    return format_prompt(tokenizer, messages)


def task_row(row: EvalRow) -> tasks.Row:
    """An environment benchmark's problem as the task row it was made from (what its episodes open on)."""
    meta = {k: v for k, v in row.fields.items() if k not in ("id", "reference", "user")}
    return tasks.Row(id=row.id, prompt=[{"role": "user", "content": row.fields.get("user", "")}],
                     reference=row.reference, meta=meta)


__all__ = ["BenchmarkSpec", "DEFAULT_DEADLINES", "EvalRow", "builtin_benchmarks", "last_boxed", "load_records",
           "load_rows", "load_spec",
           "render_prompt", "render_user_prompt"]
