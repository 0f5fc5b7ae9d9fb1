"""Python environment classes in TRL's ``environment_factory`` shape: ``python:MODULE:CLASS[?options]``.

    rewardlab train --env "python:my_envs:IncrementEnv" --steps 50          # an importable module
    rewardlab train --env "python:envs/increment.py:IncrementEnv?size=200"   # or a file

An environment written for TRL's ``GRPOTrainer(environment_factory=...)`` runs here unchanged: the class is
built fresh for every episode; ``reset(**kwargs) -> str | None`` starts it (a string is the user prompt);
its other public methods are the model's tools (their type hints and Google-style docstrings are the
schemas, declared to the chat template); ``get_reward() -> float`` (sync or async) scores the episode from
the environment's own state. The model calls tools in its chat template's own format (Hermes / Qwen
``<tool_call>`` JSON); results come back as ``tool`` messages (:mod:`rewardlab.rollout.episodes`).

Rows: ``size`` episodes per split (default 1,000 train / 200 test), each with its own reset seed (derived
from ``seed``, the split and the row). ``reset`` runs with Python's ``random`` (and numpy's global stream,
when numpy is loaded) seeded from the row's seed, so an environment that samples its task with them gives
every episode of a GRPO group the same task, and the task of a row never changes (TRL's self-sampling gives
each group member its own). ``dataset=FILE.jsonl`` takes the rows from a file instead, as TRL's external
dataset: each line's ``prompt`` (text or chat messages) is the prompt and its other fields are ``reset``'s
keyword arguments. The run's tool settings bound each episode (``--max-turns`` tool calls, ``--tool-timeout``
seconds per call, ``--tool-episode-timeout``, ``--max-total-tokens``).

Statuses besides ``ok``: ``env_error`` (``reset``, ``get_reward`` raised, or ``reset`` gave a different prompt
than the row's: the environment is not deterministic under its reset seed), ``env_timeout`` (a call into
the environment did not return in time), ``bad_reward`` (``get_reward`` returned no finite number),
``no_episode`` (the completion was graded outside an episode).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import random
import sys
import types
from pathlib import Path
from typing import Any, Callable

from rewardlab.bounded import Hung, Raised, bounded
from rewardlab.envs.spec import EnvSpec, parse_spec
from rewardlab.envs.verdict import graded, reward_value
from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import RewardResult
from rewardlab.seeds import derive_seed
from rewardlab.tasks import Row

SIZES = {"train": 1000, "test": 200}
"""Episodes (rows) per split when the spec gives no ``size``."""
REWARD = "rewardlab.envs.python_env:episode_reward"
"""The rows' ``meta["reward"]``."""
STARTUP_S = 60.0
"""Seconds one ``reset`` may take while the rows load (a one-line error past them)."""
RESERVED = ("reset", "get_reward")
"""Methods of an environment class that are not tools (TRL's reserved names)."""
OPTIONS = {"size": "episodes per split (1,000 train / 200 test)", "seed": "the reset seeds' seed (the run's)",
           "dataset": "a JSONL file of rows: prompt + reset's keyword arguments"}
"""The options a ``python:`` spec takes (``rewardlab envs list``)."""


@functools.lru_cache(maxsize=32)
def load_class(target: str) -> type:
    """``MODULE:CLASS`` (an importable module) or ``PATH.py:CLASS`` -> the class; a one-line error otherwise."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise RewardlabError(f"python:{target}: write python:MODULE:CLASS or python:PATH.py:CLASS")
    try:
        if where.endswith(".py"):
            path = Path(where).resolve()
            if not path.is_file():
                raise RewardlabError(f"python:{target}: no file {where}")
            spec = importlib.util.spec_from_file_location(f"rewardlab_env_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except RewardlabError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module failed to import: one line, at start-up
        raise RewardlabError(f"python:{target}: cannot import {where}: {type(e).__name__}: {e}") from None
    cls = getattr(module, name, None)
    if not inspect.isclass(cls):
        raise RewardlabError(f"python:{target}: {where} has no class {name}")
    if not callable(getattr(cls, "reset", None)):
        raise RewardlabError(f"python:{target}: {name} has no reset method (TRL's environment_factory shape)")
    if not callable(getattr(cls, "get_reward", None)):
        raise RewardlabError(f"python:{target}: {name} has no get_reward method: the environment owns its reward")
    return cls


def tool_schema(fn: Callable[..., Any]) -> dict:
    """The OpenAI function schema of ``fn`` from its type hints and Google-style docstring (transformers'
    ``get_json_schema``, what TRL and the chat templates use); a one-line error naming what is missing."""
    from transformers.utils import get_json_schema  # lazy: transformers is heavy to import

    try:
        return get_json_schema(fn)
    except Exception as e:  # transformers raises its own DocstringParsingException / TypeHintParsingException
        raise RewardlabError(f"tool {getattr(fn, '__name__', fn)!r}: {str(e).splitlines()[0]} (a tool needs type "
                             "hints and a Google-style docstring with an Args section)") from None


def tool_names(cls: type) -> list[str]:
    """The class's tools: its public functions, inherited ones included, other than :data:`RESERVED`, by name (what
    TRL's ``GRPOTrainer`` exposes: ``inspect.getmembers`` of the class, so properties are never evaluated)."""
    return [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not n.startswith("_") and n not in RESERVED]


def schemas(cls: type) -> list[dict]:
    """The tools' OpenAI function schemas (a one-line error for a tool without hints or docstring)."""
    names = tool_names(cls)
    if not names:
        raise RewardlabError(f"{cls.__name__}: no public method to expose as a tool")
    out = []
    for n in names:  # each function bound to a stand-in (only its signature is read: no instance is built)
        fn = getattr(cls, n)
        static = isinstance(inspect.getattr_static(cls, n), staticmethod)
        out.append(tool_schema(fn if static else types.MethodType(fn, object())))
    return out


def seeded_reset(env: Any, kwargs: dict, seed: int) -> Any:
    """``env.reset(**kwargs)`` with ``random`` (and numpy's global stream, when loaded) seeded from ``seed``,
    the callers' streams restored after."""
    state = random.getstate()
    np = sys.modules.get("numpy")
    np_state = np.random.get_state() if np is not None else None
    random.seed(seed)
    if np is not None:
        np.random.seed(seed % 2**32)
    try:
        out = env.reset(**kwargs)
        return asyncio.run(out) if inspect.isawaitable(out) else out  # awaited here: under the seed
    finally:
        random.setstate(state)
        if np is not None:
            np.random.set_state(np_state)


def _dataset_rows(path: str) -> list[tuple[Any, dict]]:
    """``(prompt, reset's keyword arguments)`` of each line of a JSONL file."""
    file = Path(path)
    if not file.is_file():
        raise RewardlabError(f"dataset={path}: no such file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise RewardlabError(f"dataset={path}: cannot read it as UTF-8 text ({type(e).__name__})") from None
    out = []
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            rec = None
        if not isinstance(rec, dict):
            raise RewardlabError(f"dataset={path}: line {k + 1} is not a JSON object")
        out.append((rec.pop("prompt", None), rec))
    return out


def _messages(prompt: Any, where: str) -> list[dict]:
    """A prompt as chat messages: text, or a list of ``{"role": str, "content": str}``."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                   and isinstance(m.get("content"), str) for m in prompt):
        return [dict(m) for m in prompt]
    if prompt is None:
        raise RewardlabError(f"{where}: no prompt (reset returned None and the row gives none)")
    raise RewardlabError(f"{where}: the prompt must be text or chat messages with a role and text content")


def _reset_once(cls: type, kwargs: dict, seed: int, where: str) -> str | None:
    """The row's reset at start-up (bounded by :data:`STARTUP_S`): what it returned, a str or None."""
    try:
        first = bounded(lambda: seeded_reset(cls(), kwargs, seed), STARTUP_S)
    except (Hung, Raised) as e:
        raise RewardlabError(f"{where}: reset failed ({e})") from None
    if first is not None and not isinstance(first, str):
        raise RewardlabError(f"{where}: reset returned {type(first).__name__}; it returns the prompt (str) or None")
    return first


def rows(spec: EnvSpec, split: str, *, limit: int | None = None, seed: int = 0) -> tuple[list[Row], dict[str, Any]]:
    """The episodes of a ``python:`` spec for ``split``: each one's prompt (from a seeded ``reset``), its reset
    arguments and seed as the reference, and the tools' schemas (``meta["tools"]``)."""
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise RewardlabError(f"{spec.text}: unknown option {unknown[0]!r}; choose from {', '.join(OPTIONS)}")
    cls = load_class(spec.name)
    tools = schemas(cls)
    for key in ("seed", "size"):
        value = spec.options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise RewardlabError(f"{spec.text}: {key} must be a non-negative integer, got {value!r}")
    base = int(spec.options.get("seed", seed))
    if "dataset" in spec.options:
        given = _dataset_rows(str(spec.options["dataset"]))
    else:
        size = spec.options.get("size", SIZES[split])
        if size < 1:
            raise RewardlabError(f"{spec.text}: size must be a positive integer, got {size!r}")
        given = [(None, {}) for _ in range(size)]
    given = given[:limit] if limit is not None else given
    out = []
    for k, (prompt, kwargs) in enumerate(given):
        rseed = derive_seed("python_env", base, split, k)
        first = _reset_once(cls, kwargs, rseed, f"{spec.text} row {k}")
        msgs = _messages(first if first is not None else prompt, f"{spec.text} row {k}")
        out.append(Row(id=f"python/{spec.name}/{split}/{k}", prompt=msgs,
                       reference={"reset": kwargs, "reset_seed": rseed, "reset_returned": first},
                       meta={"reward": REWARD, "env": spec.text, "tools": tools}))
    blob = json.dumps([[r.id, r.prompt, r.reference] for r in out], sort_keys=True, default=str)
    source = {"source": "env", "env": spec.text, "kind": "python", "class": spec.name, "split": split,
              "records": len(out), "tools": [t["function"]["name"] for t in tools],
              "sha256": hashlib.sha256(blob.encode()).hexdigest()}
    return out, source


def catalogue() -> dict[str, dict[str, Any]]:
    """What the kind offers: any class in TRL's environment_factory shape, and these options."""
    return {"MODULE:CLASS": dict(OPTIONS)}


class PythonEpisode:
    """One episode of an environment class: a fresh instance, reset as its row was (:class:`Episode`)."""

    def __init__(self, row: Row) -> None:
        cls = load_class(parse_spec(str(row.meta["env"]), ("python",)).name)
        self.env = cls()
        self.tools = set(tool_names(cls))
        first = seeded_reset(self.env, dict(row.reference["reset"]), int(row.reference["reset_seed"]))
        if first != row.reference.get("reset_returned"):
            raise RewardlabError("reset gave another prompt than the row's: the environment is not deterministic "
                                 "under its reset seed")

    def call(self, name: str, arguments: dict) -> Any:
        if name not in self.tools:
            raise LookupError(f"no tool {name!r}; the tools are {', '.join(sorted(self.tools))}")
        return getattr(self.env, name)(**arguments)

    def finish(self) -> dict:
        out = self.env.get_reward()
        out = asyncio.run(out) if inspect.isawaitable(out) else out
        value = reward_value(out)
        if value is None:
            return {"reward": None, "status": "bad_reward", "error": f"get_reward returned {type(out).__name__}"}
        return {"reward": value, "status": "ok"}


def episode_reward(completion: str, reference: Any = None, *, episode: dict | None = None, **meta: Any
                   ) -> RewardResult:
    """The environment's verdict on its episode (``Completion.episode``), as a reward: its ``get_reward``,
    or 0 with the status that says why there is none."""
    return graded(episode)


episode_reward.name = "python_env"  # type: ignore[attr-defined]  # metric key rewards/python_env/...


__all__ = ["episode_reward"]
