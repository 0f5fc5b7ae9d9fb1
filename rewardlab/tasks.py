"""Tasks: datasets turned into rows of (prompt, reference, meta) that a reward can grade.

    from rewardlab.tasks import load_task
    rows = load_task("arith", "train", limit=256)        # built-in, offline, deterministic from seed
    rows = load_task("gsm8k", "test", limit=50)          # hub when reachable, else REWARDLAB_DATA_DIR
    rows[0].prompt        # [{"role": "user", "content": "..."}]  (chat messages)
    rows[0].reference     # "18"       -> rewardlab.rewards.math_reward(completion, reference)
    rows[0].meta          # {"reward": "math", "solution": "...", ...}

Tasks (``meta["reward"]`` names the reward that grades them):

=============  ===============  =============================================================
name           splits           source and reference
=============  ===============  =============================================================
``arith``      train, test      built in: "What is 6 + 3?" sums (``arith:2``/``arith:3`` harder)
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

Data comes from the Hugging Face Hub when it is reachable, otherwise from a local folder laid out
like ``../shared/data`` (see its README), named by the environment variable ``REWARDLAB_DATA_DIR``
or the ``data_dir=`` argument. ``limit`` keeps the first N rows in file order (a fixed, documented
selection); ``seed`` only changes the generated ``arith`` rows.

The ``arith`` task is the default for ``rewardlab train``: short prompts, a one-number answer and
difficulty chosen by measurement. The embedded SmolLM2-135M-Instruct starts at a mean math reward
of 0.20 at temperature 1.0 (0.29 at 0.8) with 48 new tokens, and improves within a few steps
(``bench/arith_baseline.py`` reproduces the figures; the README's "Models and tasks" has the table).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rewardlab.errors import RewardlabError

TASKS = ("arith", "gsm8k", "math", "math500", "humaneval")
"""Built-in task names (a path to a ``.jsonl`` file is also accepted)."""

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""Appended to GSM8K and MATH questions (the Qwen2.5-Math / DeepSeek convention)."""

ARITH_TRAIN_SIZE = 4096
ARITH_TEST_SIZE = 512


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


def data_dir() -> Path | None:
    """The local data folder from ``REWARDLAB_DATA_DIR``, or None when it is not set."""
    env = os.environ.get("REWARDLAB_DATA_DIR")
    return Path(env).expanduser() if env else None


def _user(content: str) -> list[dict]:
    return [{"role": "user", "content": content}]


# ----------------------------------------------------------------------------- answers


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched and stripped, else None.

    Shared by the tasks (training gold answers) and ``rewardlab.evaluate`` (eval gold answers).
    """
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    i = starts[-1]
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def gsm8k_gold(answer: str) -> str | None:
    """The GSM8K gold: text after the last ``####``, commas and spaces stripped."""
    if "####" not in answer:
        return None
    return answer.rsplit("####", 1)[1].strip().replace(",", "").replace(" ", "")


# ----------------------------------------------------------------------------- file helpers


def read_jsonl(path: Path) -> list[dict]:
    """Records of a ``.jsonl`` or ``.jsonl.gz`` file, blank lines skipped; a bad line is a one-line error.

    The one reader of data files, used by the tasks and by ``rewardlab.evaluate``.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RewardlabError(f"{path} line {lineno}: not valid JSON ({e.msg})") from None
    return rows


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (recorded with every number a data file produces)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _need(rec: dict, fields: tuple[str, ...], where: str) -> None:
    missing = [f for f in fields if f not in rec or rec[f] is None]
    if missing:
        raise RewardlabError(f"{where}: missing field(s) {', '.join(missing)} (each row needs {', '.join(fields)})")


def _local_file(task: str, split: str, rel: str, root: Path | None) -> Path:
    root = root if root is not None else data_dir()
    if root is None:
        raise RewardlabError(
            f"{task} {split}: the Hugging Face Hub is unreachable and no local data folder is set; "
            f"set REWARDLAB_DATA_DIR to a folder holding {rel} (layout of ../shared/data)"
        )
    path = root / rel
    if not path.is_file():
        raise RewardlabError(
            f"{task} {split}: {path} does not exist; set REWARDLAB_DATA_DIR to a folder holding {rel}"
        )
    return path


def _hub(loader: Callable[[], list[dict]]) -> list[dict] | None:
    """Records from the Hub, or None when it is unreachable or the download fails (then local files are used)."""
    from rewardlab.models import hub_reachable

    if os.environ.get("HF_DATASETS_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"} or not hub_reachable():
        return None
    try:
        return loader()
    except Exception:  # noqa: BLE001 - any hub/datasets failure falls back to the local copy
        return None


def _load_dataset(path: str, name: str | None, split: str) -> list[dict]:
    import datasets

    return [dict(r) for r in datasets.load_dataset(path, name, split=split)]


def _records(task: str, split: str, rel: str, root: Path | None, hub: Callable[[], list[dict]] | None):
    """(records, source) from the Hub when possible, else the local file ``rel``."""
    if hub is not None and root is None:
        recs = _hub(hub)
        if recs is not None:
            return recs, "hub"
    path = _local_file(task, split, rel, root)
    return read_jsonl(path), str(path)


def _check_split(task: str, split: str, allowed: tuple[str, ...]) -> None:
    if split not in allowed:
        raise RewardlabError(f"task {task} has no split {split!r}: choose {' or '.join(allowed)}")


# ----------------------------------------------------------------------------- tasks


def _gsm8k(split: str, root: Path | None) -> list[Row]:
    _check_split("gsm8k", split, ("train", "test"))
    recs, source = _records("gsm8k", split, f"gsm8k/{split}.jsonl", root, lambda: _load_dataset("openai/gsm8k", "main", split))
    rows = []
    for i, rec in enumerate(recs):
        where = f"{source} row {i}"
        _need(rec, ("question", "answer"), where)
        gold = gsm8k_gold(rec["answer"])
        if gold is None:
            raise RewardlabError(f"{where}: answer has no '#### N' gold line")
        rows.append(Row(
            id=f"gsm8k/{split}/{i}",
            prompt=_user(f"{rec['question'].strip()}\n{BOXED_INSTRUCTION}"),
            reference=gold,
            meta={"reward": "math", "task": "gsm8k", "question": rec["question"], "solution": rec["answer"], "source": source},
        ))
    return rows


def _math500_records(root: Path | None):
    return _records("math500", "test", "math/math500_test.jsonl", root,
                    lambda: _load_dataset("HuggingFaceH4/MATH-500", None, "test"))


def _math(split: str, root: Path | None) -> list[Row]:
    _check_split("math", split, ("train", "test"))
    recs, source = _records("math", split, "math/math_test_5000.jsonl", root,
                            lambda: _load_dataset("DigitalLearningGmbH/MATH-lighteval", None, "test"))
    exclude: set[str] = set()
    if split == "train":  # the 4500-problem pool disjoint from MATH-500 (prm800k's construction)
        m500, m500_source = _math500_records(root)
        for i, rec in enumerate(m500):
            _need(rec, ("problem",), f"{m500_source} row {i}")
            exclude.add(rec["problem"].strip())
    rows = []
    for i, rec in enumerate(recs):
        where = f"{source} row {i}"
        _need(rec, ("problem", "solution"), where)
        if rec["problem"].strip() in exclude:
            continue
        gold = last_boxed(rec["solution"])
        if gold is None:
            raise RewardlabError(f"{where}: solution has no \\boxed{{}} answer")
        idx = rec.get("idx", i)
        rows.append(Row(
            id=f"math/{idx}",
            prompt=_user(f"{rec['problem'].strip()}\n{BOXED_INSTRUCTION}"),
            reference=gold,
            meta={"reward": "math", "task": "math", "problem": rec["problem"], "solution": rec["solution"],
                  "level": rec.get("level"), "subject": rec.get("type"), "source": source},
        ))
    return rows


def _math500(split: str, root: Path | None) -> list[Row]:
    _check_split("math500", split, ("test",))
    recs, source = _math500_records(root)
    rows = []
    for i, rec in enumerate(recs):
        where = f"{source} row {i}"
        _need(rec, ("problem", "answer"), where)
        rows.append(Row(
            id=rec.get("unique_id") or f"math500/{i}",
            prompt=_user(f"{rec['problem'].strip()}\n{BOXED_INSTRUCTION}"),
            reference=str(rec["answer"]),
            meta={"reward": "math", "task": "math500", "problem": rec["problem"], "solution": rec.get("solution"),
                  "level": rec.get("level"), "subject": rec.get("subject"), "source": source},
        ))
    return rows


HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function in one ```python code block.\n\n"
)


def _humaneval(split: str, root: Path | None) -> list[Row]:
    _check_split("humaneval", split, ("test",))
    recs, source = _records("humaneval", split, "humaneval/HumanEval.jsonl.gz", root,
                            lambda: _load_dataset("openai/openai_humaneval", None, "test"))
    rows = []
    for i, rec in enumerate(recs):
        where = f"{source} row {i}"
        _need(rec, ("task_id", "prompt", "test", "entry_point"), where)
        rows.append(Row(
            id=rec["task_id"],
            prompt=_user(f"{HUMANEVAL_INSTRUCTION}```python\n{rec['prompt']}```"),
            reference={"tests": rec["test"], "entry_point": rec["entry_point"], "prompt": rec["prompt"]},
            meta={"reward": "code", "task": "humaneval", "code_prompt": rec["prompt"],
                  "canonical_solution": rec.get("canonical_solution"), "source": source},
        ))
    return rows


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
ARITH_INSTRUCTION = "Answer with just the number."


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
            prompt=_user(f"{question} {ARITH_INSTRUCTION}"),
            reference=str(answer),
            meta={"reward": "math", "task": "arith", "level": level, "a": a, "b": b,
                  "op": "-" if subtract else "+", "question": question},
        ))
    return rows


# ----------------------------------------------------------------------------- entry point


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
        data_dir: local data folder; overrides ``REWARDLAB_DATA_DIR`` and skips the Hub.
        limit: keep the first ``limit`` rows (for ``arith``: generate that many).
        seed: seed of the generated ``arith`` rows (ignored by the dataset tasks).

    Raises:
        RewardlabError: unknown task or split, missing data file, rows missing required fields.
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
                raise RewardlabError(f"bad task {name!r}: use arith or arith:LEVEL with LEVEL in {sorted(_ARITH_LEVELS)}") from None
        return arith_rows(split, n=limit, seed=seed, level=level)
    loaders = {"gsm8k": _gsm8k, "math": _math, "math500": _math500, "humaneval": _humaneval}
    if key in loaders:
        rows = loaders[key](split, root)
    elif key.endswith((".jsonl", ".jsonl.gz")):
        path = Path(key).expanduser()
        if not path.is_file():
            raise RewardlabError(f"task file {path} does not exist")
        rows = _jsonl_file(path)
    else:
        raise RewardlabError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}, or a .jsonl file")
    return rows if limit is None else rows[:limit]


__all__ = [
    "ARITH_INSTRUCTION",
    "ARITH_LEVEL",
    "BOXED_INSTRUCTION",
    "Row",
    "TASKS",
    "arith_rows",
    "data_dir",
    "file_sha256",
    "gsm8k_gold",
    "last_boxed",
    "load_task",
    "read_jsonl",
]
