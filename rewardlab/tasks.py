"""Tasks: datasets turned into rows of (prompt, reference, meta) that a reward can grade.

    from rewardlab.tasks import load_task
    rows = load_task("arith", "train", limit=256)        # built-in, offline, deterministic from seed
    rows = load_task("gsm8k", "test", limit=50)          # REWARDLAB_DATA_DIR file, else the Hub
    rows[0].prompt        # [{"role": "user", "content": "..."}]  (chat messages)
    rows[0].reference     # "18"       -> rewardlab.rewards.math_reward(completion, reference)
    rows[0].meta          # {"reward": "math", "solution": "...", ...}

Tasks (``meta["reward"]`` names the reward that grades them):

=============  ===============  =============================================================
name           splits           source and reference
=============  ===============  =============================================================
``arith``      train, test      built in: "What is 6 + 3?" sums (``arith:2``/``arith:3`` harder)
``bigmul``     train, test      built in: "What is 51494 * 56125?", 4-5 digit products, for
                                ``--tools python`` (one worked example of a tool call in the prompt)
``gsm8k``      train, test      ``openai/gsm8k`` (main) / ``gsm8k/{split}.jsonl``; gold after ``####``
``math``       train, test      MATH test set (``DigitalLearningGmbH/MATH-lighteval`` test /
                                ``math/math_test_5000.jsonl``): test = all 5000, train = those minus
                                MATH-500 (4500, the prm800k recipe); gold = last ``\\boxed{}``
``math500``    test             ``HuggingFaceH4/MATH-500`` / ``math/math500_test.jsonl``
``humaneval``  test             ``openai/openai_humaneval`` / ``humaneval/HumanEval.jsonl.gz``;
                                reference = ``{"tests", "entry_point", "prompt"}`` for the code reward
``FILE.jsonl`` (any)            your own rows: ``prompt`` (text or chat messages) and ``answer``
                                (or ``reference``); optional ``id``, ``reward`` (default math)
=============  ===============  =============================================================

Where data comes from, one rule for training and eval (:func:`read_source`): a local data folder,
laid out like ``../shared/data`` (see its README) and named by the ``data_dir=`` argument (``--data-dir``)
or else the environment variable ``REWARDLAB_DATA_DIR``, is used for every file it holds, and the
file's sha256 is recorded; a file it lacks comes from the Hugging Face Hub when the Hub is reachable
(``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1`` turn it off); otherwise a one-line error names the
file and ``REWARDLAB_DATA_DIR``. Local first, so a number is tied to a file and an offline machine
never waits on a network. ``limit`` keeps the first N rows in file order (a fixed, documented
selection); ``seed`` only changes the generated ``arith`` rows.

Each task declares its data once (:data:`SOURCES`: local file and Hub twin) and its prompt once
(:data:`PROMPTS`, a ``str.format`` template over the record's fields); the eval specs in ``evals/``
read their rows, gold answers and prompts from here (``data: {task: ...}``) and keep only what is
eval-specific (sampling, metrics, grader, expected size).

The ``arith`` task is the default for ``rewardlab train``: short prompts, a one-number answer and
difficulty chosen by measurement. The embedded SmolLM2-135M-Instruct starts at a mean math reward
of 0.20 at temperature 1.0 (0.29 at 0.8) with 48 new tokens, and improves within a few steps
(``bench/arith_baseline.py`` reproduces the figures; the README's "Models and tasks" has the table).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewardlab import models
from rewardlab.jsonl import read_jsonl
from rewardlab.errors import RewardlabError
from rewardlab.models import file_sha256
from rewardlab.rewards.math import find_boxes

TASKS = ("arith", "bigmul", "gsm8k", "math", "math500", "humaneval")
"""Built-in task names (a path to a ``.jsonl`` file is also accepted)."""

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""Appended to GSM8K and MATH questions (the Qwen2.5-Math / DeepSeek convention)."""

ARITH_TRAIN_SIZE = 4096
ARITH_TEST_SIZE = 512

HUMANEVAL_INSTRUCTION = ("Complete the following Python function. Reply with the complete function in one "
                         "```python code block.")
ARITH_INSTRUCTION = "Answer with just the number."


def _fmt_escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


PROMPTS: dict[str, str] = {
    "gsm8k": "{question}\n" + _fmt_escape(BOXED_INSTRUCTION),
    "math": "{problem}\n" + _fmt_escape(BOXED_INSTRUCTION),
    "math500": "{problem}\n" + _fmt_escape(BOXED_INSTRUCTION),
    "humaneval": _fmt_escape(HUMANEVAL_INSTRUCTION) + "\n```python\n{prompt}```",
    "arith": "{question} " + ARITH_INSTRUCTION,
}
"""The user message of each built-in task: a ``str.format`` template over the record's fields
(``question`` / ``problem`` stripped of surrounding whitespace). Training and eval both use it; the eval
records its sha256 as ``prompt_template_sha256``."""


@dataclass(frozen=True)
class Source:
    """Where a dataset task's records live: a file under the data folder and its Hub twin."""

    local: str
    """Path relative to the data folder (``.jsonl`` or ``.jsonl.gz``)."""
    hub: dict
    """``datasets.load_dataset(path, name, split=split)`` arguments: ``{"path", "name"?, "split"}``."""


SOURCES: dict[str, Any] = {
    "gsm8k": lambda split: Source(f"gsm8k/{split}.jsonl", {"path": "openai/gsm8k", "name": "main", "split": split}),
    "math": lambda split: Source("math/math_test_5000.jsonl",
                                 {"path": "DigitalLearningGmbH/MATH-lighteval", "split": "test"}),
    "math500": lambda split: Source("math/math500_test.jsonl", {"path": "HuggingFaceH4/MATH-500", "split": "test"}),
    "humaneval": lambda split: Source("humaneval/HumanEval.jsonl.gz",
                                      {"path": "openai/openai_humaneval", "split": "test"}),
}
"""Each dataset task's :class:`Source` for a split (``math`` train and test both read the MATH test file)."""


def task_source(name: str, split: str = "test") -> Source | None:
    """The declared data source of a built-in dataset task (None for ``arith`` and files)."""
    make = SOURCES.get(str(name).strip())
    return make(split) if make else None


@dataclass
class Row:
    """One task example."""

    id: str
    """Stable identifier, e.g. ``"gsm8k/test/17"`` or ``"HumanEval/0"``."""
    prompt: str | list[dict]
    """Chat messages ``[{"role": "user", "content": ...}]`` (or raw text for completion-style tasks)."""
    reference: Any
    """What the reward compares against: an answer string, or a dict for the code reward."""
    meta: dict = field(default_factory=dict)
    """Extra fields; ``meta["reward"]`` names the default reward ("math" or "code")."""


def data_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The local data folder: ``explicit`` when given, else ``REWARDLAB_DATA_DIR``, else None."""
    if explicit is not None:
        return Path(explicit).expanduser()
    env = os.environ.get("REWARDLAB_DATA_DIR")
    return Path(env).expanduser() if env else None


def _user(content: str) -> list[dict]:
    return [{"role": "user", "content": content}]


# ----------------------------------------------------------------------------- answers


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched and stripped, else None.

    The gold-answer reader of MATH solutions. It scans with the math reward's
    :func:`~rewardlab.rewards.math.find_boxes` (the one ``\\boxed`` scanner) and is stricter in one
    way: a gold answer must be brace-balanced, so an unclosed last box gives None (the reward, reading
    a completion, takes the rest of the line instead).
    """
    boxes = find_boxes(text)
    if not boxes:
        return None
    _, end, content = boxes[-1]
    opened = end - len(content) - 2  # where "{" sits when the box is braced and closed
    if opened >= 0 and text[opened] == "{" and text[end - 1] == "}":
        return content.strip()
    if text[end - len(content) - 1] == "{":  # unbalanced: find_boxes took the rest of the line
        return None
    return content.strip()  # \\boxed 5


def gsm8k_gold(answer: str) -> str | None:
    """The GSM8K gold: text after the last ``####``, commas and spaces stripped."""
    if "####" not in answer:
        return None
    return answer.rsplit("####", 1)[1].strip().replace(",", "").replace(" ", "")


# ----------------------------------------------------------------------------- file helpers


def _need(rec: dict, fields: tuple[str, ...], where: str) -> None:
    missing = [f for f in fields if f not in rec or rec[f] is None]
    if missing:
        raise RewardlabError(f"{where}: missing field(s) {', '.join(missing)} (each row needs {', '.join(fields)})")


def _hub_online() -> bool:
    if os.environ.get("HF_DATASETS_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        return False
    return models.hub_reachable()


def load_hub_dataset(path: str, name: str | None, split: str) -> list[dict]:
    import datasets  # lazy: loading `datasets` takes seconds and most runs read local files

    return [dict(r) for r in datasets.load_dataset(path, name, split=split)]


def read_source(what: str, local: str | None, hub: dict | None,
                folder: str | os.PathLike | None = None) -> tuple[list[dict], dict]:
    """Records of one data source and a description of where they came from: THE data rule.

    The local file ``local`` under the data folder (:func:`data_dir`) when it is there
    (``{"source": "local", "path", "sha256"}``), else the Hub dataset ``hub`` when the Hub is
    reachable (``{"source": "hub", "path", "name", "split"}``), else a one-line error naming the file
    and ``REWARDLAB_DATA_DIR``.
    """
    root = data_dir(folder)
    if local and root is not None and (root / local).is_file():
        path = root / local
        return read_jsonl(path), {"source": "local", "path": str(path.resolve()), "sha256": file_sha256(path)}
    why = "the Hugging Face Hub is not reachable"
    if hub and _hub_online():
        try:
            recs = load_hub_dataset(hub["path"], hub.get("name"), hub.get("split", "test"))
            return recs, {"source": "hub", **hub}
        except Exception as e:  # noqa: BLE001 - any hub/datasets failure becomes the one-line error below
            why = f"loading {hub['path']} from the Hub failed ({(str(e).splitlines() or [type(e).__name__])[0]})"
    elif not hub:
        why = "it has no Hub source"
    where = f"{root / local}" if (root is not None and local) else f"{local} (no local data folder is set)"
    raise RewardlabError(
        f"{what}: data not found: {where}, and {why}; "
        f"set REWARDLAB_DATA_DIR to a folder holding {local} (layout of ../shared/data)"
    )


def _records(task: str, split: str, root: Path | None) -> tuple[list[dict], dict, str]:
    """(records, source, where) of a dataset task's split; ``where`` names rows in errors and meta."""
    src = SOURCES[task](split)
    recs, source = read_source(f"{task} {split}", src.local, src.hub, root)
    return recs, source, "hub" if source["source"] == "hub" else source["path"]


def _check_split(task: str, split: str, allowed: tuple[str, ...]) -> None:
    if split not in allowed:
        raise RewardlabError(f"task {task} has no split {split!r}: choose {' or '.join(allowed)}")


# ----------------------------------------------------------------------------- tasks


def _prompt(task: str, **fields: Any) -> list[dict]:
    return _user(PROMPTS[task].format(**fields))


def _gsm8k(split: str, root: Path | None) -> tuple[list[Row], dict]:
    _check_split("gsm8k", split, ("train", "test"))
    recs, source, where0 = _records("gsm8k", split, root)
    rows = []
    for i, rec in enumerate(recs):
        where = f"{where0} row {i}"
        _need(rec, ("question", "answer"), where)
        gold = gsm8k_gold(rec["answer"])
        if gold is None:
            raise RewardlabError(f"{where}: answer has no '#### N' gold line")
        rows.append(Row(
            id=f"gsm8k/{split}/{i}",
            prompt=_prompt("gsm8k", question=rec["question"].strip()),
            reference=gold,
            meta={"reward": "math", "task": "gsm8k", "question": rec["question"], "solution": rec["answer"],
                  "source": where0},
        ))
    return rows, source


def _math(split: str, root: Path | None) -> tuple[list[Row], dict]:
    _check_split("math", split, ("train", "test"))
    recs, source, where0 = _records("math", split, root)
    exclude: set[str] = set()
    if split == "train":  # the 4500-problem pool disjoint from MATH-500 (prm800k's construction)
        m500, _, m500_where = _records("math500", "test", root)
        for i, rec in enumerate(m500):
            _need(rec, ("problem",), f"{m500_where} row {i}")
            exclude.add(rec["problem"].strip())
    rows = []
    for i, rec in enumerate(recs):
        where = f"{where0} row {i}"
        _need(rec, ("problem", "solution"), where)
        if rec["problem"].strip() in exclude:
            continue
        gold = last_boxed(rec["solution"])
        if gold is None:
            raise RewardlabError(f"{where}: solution has no \\boxed{{}} answer")
        idx = rec.get("idx", i)
        rows.append(Row(
            id=f"math/test/{idx}",  # position in the MATH test file, whichever split the row is in
            prompt=_prompt("math", problem=rec["problem"].strip()),
            reference=gold,
            meta={"reward": "math", "task": "math", "problem": rec["problem"], "solution": rec["solution"],
                  "level": rec.get("level"), "subject": rec.get("type"), "source": where0},
        ))
    return rows, source


def _math500(split: str, root: Path | None) -> tuple[list[Row], dict]:
    _check_split("math500", split, ("test",))
    recs, source, where0 = _records("math500", split, root)
    rows = []
    for i, rec in enumerate(recs):
        where = f"{where0} row {i}"
        _need(rec, ("problem", "answer"), where)
        rows.append(Row(
            id=rec.get("unique_id") or f"math500/{i}",
            prompt=_prompt("math500", problem=rec["problem"].strip()),
            reference=str(rec["answer"]),
            meta={"reward": "math", "task": "math500", "problem": rec["problem"], "solution": rec.get("solution"),
                  "level": rec.get("level"), "subject": rec.get("subject"), "source": where0},
        ))
    return rows, source


def _humaneval(split: str, root: Path | None) -> tuple[list[Row], dict]:
    _check_split("humaneval", split, ("test",))
    recs, source, where0 = _records("humaneval", split, root)
    rows = []
    for i, rec in enumerate(recs):
        where = f"{where0} row {i}"
        _need(rec, ("task_id", "prompt", "test", "entry_point"), where)
        rows.append(Row(
            id=rec["task_id"],
            prompt=_prompt("humaneval", prompt=rec["prompt"]),
            reference={"tests": rec["test"], "entry_point": rec["entry_point"], "prompt": rec["prompt"]},
            meta={"reward": "code", "task": "humaneval", "code_prompt": rec["prompt"],
                  "canonical_solution": rec.get("canonical_solution"), "source": where0},
        ))
    return rows, source


def _jsonl_file(path: Path) -> list[Row]:
    recs = read_jsonl(path)
    rows = []
    for i, rec in enumerate(recs):
        where = f"{path} row {i}"
        if "prompt" not in rec:
            raise RewardlabError(f"{where}: missing field prompt (each row needs prompt and answer or reference)")
        if "answer" not in rec and "reference" not in rec:
            raise RewardlabError(f"{where}: missing field answer (each row needs prompt and answer or reference)")
        prompt = rec["prompt"]
        if isinstance(prompt, list) and not all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
            raise RewardlabError(f"{where}: prompt messages need 'role' and 'content'")
        extra = {k: v for k, v in rec.items() if k not in {"id", "prompt", "answer", "reference"}}
        meta = {"reward": "math", "task": path.stem, "source": str(path), **extra}
        rows.append(Row(
            id=str(rec.get("id", f"{path.stem}/{i}")),
            prompt=_user(prompt) if isinstance(prompt, str) else prompt,
            reference=rec.get("reference", rec.get("answer")),
            meta=meta,
        ))
    return rows


# ----------------------------------------------------------------------------- arith

# Question phrasings; {a} {b} are the operands. Digits and words both appear ("6 + 3", "6 plus 3").
_ADD = ("What is {a} + {b}?", "What is {a} plus {b}?")
_SUB = ("What is {a} - {b}?", "What is {a} minus {b}?")
_ARITH_LEVELS = {
    # level: (subtraction allowed, smallest operand, largest operand)
    1: (False, 1, 9),    # single-digit addition
    2: (True, 1, 9),     # single-digit addition and subtraction (results >= 0)
    3: (True, 10, 99),   # two-digit addition and subtraction
}
ARITH_LEVEL = 1
"""Default difficulty of ``arith`` (``arith:1`` .. ``arith:3`` pick one explicitly)."""


def arith_rows(split: str = "train", *, n: int | None = None, seed: int = 0, level: int = ARITH_LEVEL) -> list[Row]:
    """Generate arithmetic questions, deterministic in (split, seed, level).

    Train and test draw from separate random streams. Each prompt is one short question plus
    ``ARITH_INSTRUCTION``; the reference is the integer answer as a string, graded by the math
    reward (which reads "The answer is 9.", a bare "9" or the last number of the final sentence).
    """
    _check_split("arith", split, ("train", "test"))
    if level not in _ARITH_LEVELS:
        raise RewardlabError(f"arith level must be one of {sorted(_ARITH_LEVELS)}, got {level}")
    allow_sub, lo, hi = _ARITH_LEVELS[level]
    count = n if n is not None else (ARITH_TRAIN_SIZE if split == "train" else ARITH_TEST_SIZE)
    rng = random.Random(f"rewardlab-arith/{split}/{level}/{seed}")  # str seeds hash deterministically
    rows = []
    for i in range(count):
        subtract = allow_sub and rng.random() < 0.5
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if subtract:
            a, b = max(a, b), min(a, b)
        question = rng.choice(_SUB if subtract else _ADD).format(a=a, b=b)
        answer = a - b if subtract else a + b
        rows.append(Row(
            id=f"arith/{split}/{level}/{seed}/{i}",
            prompt=_prompt("arith", question=question),
            reference=str(answer),
            meta={"reward": "math", "task": "arith", "level": level, "a": a, "b": b,
                  "op": "-" if subtract else "+", "question": question},
        ))
    return rows


# ----------------------------------------------------------------------------- bigmul

TOOL_INSTRUCTION = ("Use Python to compute it: write a ```python code block that prints the result. "
                    "Then answer with the number.")
"""The ``bigmul`` instruction: the product is too long to work out token by token, so the tool is the way to score."""
BIGMUL_EXAMPLE = (3417, 2209)
"""The worked example in every ``bigmul`` prompt (a user turn and the assistant's tool call, output, answer)."""


def bigmul_rows(split: str = "train", *, n: int | None = None, seed: int = 0) -> list[Row]:
    """"What is a * b?" with 4-5 digit operands, deterministic in (split, seed): a task a small model scores
    on only by calling the Python tool (``--tools python``) and copying its output.

    The prompt is chat messages: one worked example (the question, then an assistant turn with a
    ```python block, the tool's output block exactly as the tool rollout inserts it, and "The answer
    is N."), then the question. The reference is the product, graded by the math reward.
    """
    _check_split("bigmul", split, ("train", "test"))
    count = n if n is not None else (ARITH_TRAIN_SIZE if split == "train" else ARITH_TEST_SIZE)
    rng = random.Random(f"rewardlab-bigmul/{split}/{seed}")
    ea, eb = BIGMUL_EXAMPLE
    example = [{"role": "user", "content": f"What is {ea} * {eb}? {TOOL_INSTRUCTION}"},
               {"role": "assistant", "content": f"```python\nprint({ea} * {eb})\n```\n```output\n{ea * eb}\n```\n"
                                                f"The answer is {ea * eb}."}]
    rows = []
    for i in range(count):
        a, b = rng.randint(1000, 99999), rng.randint(1000, 99999)
        question = f"What is {a} * {b}?"
        rows.append(Row(id=f"bigmul/{split}/{seed}/{i}", prompt=example + _user(f"{question} {TOOL_INSTRUCTION}"),
                        reference=str(a * b), meta={"reward": "math", "task": "bigmul", "a": a, "b": b,
                                                    "question": question}))
    return rows


# ----------------------------------------------------------------------------- entry point


def _rows_sha256(rows: list[Row]) -> str:
    blob = json.dumps([[r.id, r.prompt, r.reference, r.meta] for r in rows], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def load_task_with_source(
    name: str,
    split: str = "train",
    *,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> tuple[list[Row], dict]:
    """:func:`load_task`'s rows and where they came from (what the eval records in ``results.json``).

    The source is :func:`read_source`'s (``{"source": "local", "path", "sha256"}`` or ``{"source":
    "hub", ...}``) for a dataset task, ``{"source": "task", "task", "split", "seed", "sha256"}`` for
    the generated ``arith`` rows (sha256 of their canonical JSON), or the local file of a ``.jsonl``
    task. ``source["records"]`` counts the rows before ``limit``.
    """
    if limit is not None and limit < 0:
        raise RewardlabError(f"limit must be >= 0, got {limit}")
    root = Path(data_dir).expanduser() if data_dir is not None else None
    if root is not None and not root.is_dir():
        raise RewardlabError(f"data directory {root} does not exist")
    key = str(name).strip()
    if key == "arith" or key.startswith("arith:"):
        level = ARITH_LEVEL
        if ":" in key:
            try:
                level = int(key.split(":", 1)[1])
            except ValueError:
                raise RewardlabError(f"bad task {name!r}: use arith or arith:LEVEL with LEVEL in "
                                     f"{sorted(_ARITH_LEVELS)}") from None
        rows = arith_rows(split, n=limit, seed=seed, level=level)
        return rows, {"source": "task", "task": key, "split": split, "seed": seed, "records": len(rows),
                      "sha256": _rows_sha256(rows)}
    if key == "bigmul":
        rows = bigmul_rows(split, n=limit, seed=seed)
        return rows, {"source": "task", "task": key, "split": split, "seed": seed, "records": len(rows),
                      "sha256": _rows_sha256(rows)}
    loaders = {"gsm8k": _gsm8k, "math": _math, "math500": _math500, "humaneval": _humaneval}
    if key in loaders:
        rows, source = loaders[key](split, root)
    elif key.endswith((".jsonl", ".jsonl.gz")):
        path = Path(key).expanduser()
        if not path.is_file():
            raise RewardlabError(f"task file {path} does not exist")
        rows = _jsonl_file(path)
        source = {"source": "local", "path": str(path.resolve()), "sha256": file_sha256(path)}
    else:
        raise RewardlabError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}, or a .jsonl file")
    source["records"] = len(rows)
    return (rows if limit is None else rows[:limit]), source


def load_task(
    name: str,
    split: str = "train",
    *,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> list[Row]:
    """Load a task's rows.

    Args:
        name: ``arith`` (or ``arith:LEVEL``), ``gsm8k``, ``math``, ``math500``, ``humaneval``, or a
            path to a ``.jsonl`` file of your own rows.
        split: ``train`` or ``test`` (``math500`` and ``humaneval`` only have ``test``).
        data_dir: local data folder (else ``REWARDLAB_DATA_DIR``); a file it holds is used, one it
            lacks comes from the Hub when reachable (:func:`read_source`).
        limit: keep the first ``limit`` rows (for ``arith``: generate that many).
        seed: seed of the generated ``arith`` rows (ignored by the dataset tasks).

    Raises:
        RewardlabError: unknown task or split, missing data file, rows missing required fields.
    """
    return load_task_with_source(name, split, data_dir=data_dir, limit=limit, seed=seed)[0]


__all__ = ["ARITH_INSTRUCTION", "BOXED_INSTRUCTION", "PROMPTS", "Row", "SOURCES", "Source", "TASKS", "arith_rows",
           "data_dir", "gsm8k_gold", "last_boxed", "load_task", "load_task_with_source", "read_source", "task_source"]
