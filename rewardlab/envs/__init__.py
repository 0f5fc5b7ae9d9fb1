"""Environments: the tasks people bring, as rows and rewards for ``rewardlab train`` and ``rewardlab eval``.

    rewardlab envs list                                        # every kind and what it offers
    rewardlab train --env "reasoning_gym:spell_backward?answer=text" --steps 20
    rewardlab eval runs/x/checkpoints/step-000020 --env reasoning_gym:spell_backward --limit 50
    rewardlab train --env "openenv:http://127.0.0.1:8000?size=256"    # a running OpenEnv server
    rewardlab train --env verifiers:my_taskset                        # an installed verifiers taskset

An environment spec (:mod:`rewardlab.envs.spec`) is ``KIND:NAME?options``; a run's ``--task`` may hold
one too, and ``--env`` is the same setting under its own name. Each kind is declared once, in
:data:`KINDS`: the module that turns a spec into rows (``Row(id, prompt, reference, meta)``, the
same rows the built-in tasks give) whose ``meta["reward"]`` names the environment's own scorer, so
the trainer, the in-training eval and ``rewardlab eval`` grade exactly what the environment grades.

:func:`load_rows` is the one loader train and eval call: a spec goes to its kind, anything else
(``gsm8k``, ``arith:2``, ``rows.jsonl``) to :func:`rewardlab.tasks.load_task_with_source`.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from rewardlab import tasks
from rewardlab.envs import gym, openenv, python_env, verifiers_env
from rewardlab.envs.spec import EnvSpec, looks_like_env, parse_spec
from rewardlab.errors import RewardlabError


@dataclass(frozen=True)
class Kind:
    """One kind of environment."""

    summary: str
    """One line for ``rewardlab envs list`` and ``--help``."""
    rows: Callable[..., tuple[list[tasks.Row], dict[str, Any]]]
    """``rows(spec, split, limit=, seed=) -> (rows, source)``."""
    catalogue: Callable[[], dict[str, dict[str, Any]]]
    """What the kind offers: name -> its options and their defaults."""
    package: str
    """The package it needs (installed by setup's dev extras)."""
    reward: str
    """The dotted path of its scorer: every row's ``meta["reward"]``, and ``eval --env``'s grader."""
    target: str = "NAME"
    """What follows ``KIND:`` (``NAME``, ``URL``), for help texts."""
    episode: Callable[[tasks.Row], Any] | None = None
    """Multi-turn kinds: opens one episode on a row (:class:`rewardlab.rollout.episodes.Episode`); train and eval
    then sample through the episode engine, the model calling the environment's tools."""
    drive: Callable[..., list[dict]] | None = None
    """Kinds whose environment runs its own agent loop and calls the model over HTTP: ``drive(rows, n, sampling,
    url=, model_dir=)`` runs the episodes against the policy endpoint (:class:`rewardlab.rollout.driven.DrivenEngine`)
    and returns what each trace recorded."""


KINDS: dict[str, Kind] = {
    "reasoning_gym": Kind("reasoning-gym's procedural datasets, scored by their own score_answer",
                          gym.rows, gym.catalogue, "reasoning-gym", gym.REWARD),
    "openenv": Kind("an OpenEnv server at a URL: one seeded reset per row, one step per model turn until it is done",
                    openenv.rows, openenv.catalogue, "openenv-core", openenv.REWARD,
                    target="URL", episode=openenv.OpenEnvEpisode),
    "python": Kind("a Python class in TRL's environment_factory shape (reset, tools as methods, get_reward): "
                   "multi-turn, the model calls its tools in its chat template's format",
                   python_env.rows, python_env.catalogue, "", python_env.REWARD, target="MODULE:CLASS",
                   episode=python_env.PythonEpisode),
    "verifiers": Kind("an installed verifiers (v1) taskset: its own harness drives the policy through rewardlab's "
                      "endpoint; the traces' token ids and the taskset's reward are trained on as recorded",
                      verifiers_env.rows, verifiers_env.catalogue, "verifiers", verifiers_env.REWARD,
                      target="TASKSET", drive=verifiers_env.drive),
}
"""Environment kinds: the ``KIND`` of a ``KIND:NAME`` spec."""


def is_env(name: str) -> bool:
    """Whether a ``--task`` / ``--env`` value names an environment (``KIND:...``)."""
    return looks_like_env(name, KINDS)


def spec_of(text: str) -> EnvSpec:
    """Parse an environment spec (one-line error when it names no kind of :data:`KINDS`)."""
    return parse_spec(text, KINDS)


def load_rows(name: str, split: str = "train", *, data_dir: str | os.PathLike | None = None,
              limit: int | None = None, seed: int = 0) -> tuple[list[tasks.Row], dict[str, Any]]:
    """The rows of a task or an environment and where they came from (``results.json``'s source)."""
    if not is_env(name):
        known = str(name).split(":")[0] in tasks.TASKS or str(name).endswith((".jsonl", ".jsonl.gz"))
        if not known:
            raise RewardlabError(f"unknown task {name!r}: choose {task_names()}")
        return tasks.load_task_with_source(name, split, data_dir=data_dir, limit=limit, seed=seed)
    if limit is not None and limit < 0:
        raise RewardlabError(f"limit must be >= 0, got {limit}")
    spec = spec_of(name)
    return KINDS[spec.kind].rows(spec, split, limit=limit, seed=seed)


def episode_opener(name: str) -> Callable[[tasks.Row], Any] | None:
    """How a task's episodes open when it is a multi-turn environment (:attr:`Kind.episode`), else None."""
    return KINDS[spec_of(name).kind].episode if is_env(name) else None


def driver(name: str) -> Callable[..., list[dict]] | None:
    """How a task's episodes run when its environment drives the policy itself (:attr:`Kind.drive`), else None."""
    return KINDS[spec_of(name).kind].drive if is_env(name) else None


def is_driven(row: tasks.Row) -> bool:
    """Whether a row is an environment's that drives the policy (its episodes run through :func:`drive`)."""
    return driver(str((row.meta or {}).get("env", ""))) is not None


def drive(rows: list[tasks.Row], n: int, sampling: dict, **endpoint: Any) -> list[dict]:
    """``n`` episodes of each row, run by the rows' environment against the policy endpoint (:attr:`Kind.drive`)."""
    run = driver(str((rows[0].meta or {}).get("env", ""))) if rows else None
    if run is None:
        raise RewardlabError("drive: the rows are not of an environment that drives the policy")
    return run(rows, n, sampling, **endpoint)


def is_episode(row: tasks.Row) -> bool:
    """Whether a row is a multi-turn environment's (its episodes open with :func:`open_episode`)."""
    return episode_opener(str((row.meta or {}).get("env", ""))) is not None


def open_episode(row: tasks.Row) -> Any:
    """A fresh episode on a multi-turn environment's row (its kind's :attr:`Kind.episode`)."""
    opener = episode_opener(str((row.meta or {}).get("env", "")))
    if opener is None:
        raise RewardlabError(f"row {row.id!r} is not a multi-turn environment's")
    return opener(row)


def short_name(text: str) -> str:
    """A folder- and metric-safe name of an environment spec: ``reasoning_gym-spell_backward``, plus the first 8
    hex digits of the spec's sha256 when it has options or characters that had to be replaced (two option sets,
    or two paths, never share a name)."""
    spec = spec_of(text)
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{spec.kind}-{spec.name}").strip("_")
    if not spec.options and base == f"{spec.kind}-{spec.name}":  # nothing was replaced: the name is the spec's
        return base
    return f"{base}-{hashlib.sha256(spec.text.encode()).hexdigest()[:8]}"


def task_names() -> str:
    """The ``--task`` help's list: the built-in tasks, the environment kinds, a file."""
    kinds = " | ".join(f"{k}:{v.target}" for k, v in KINDS.items())
    return f"{', '.join(tasks.TASKS)}, an environment {kinds}, or a FILE.jsonl"


def split_names(text: str) -> list[str]:
    """``"gsm8k, math500"`` -> ``["gsm8k", "math500"]`` (blank names dropped, order kept): the benchmark lists of
    ``--eval-suite``, ``--eval-before-after`` and ``rewardlab eval --suite``. A comma inside an environment's
    options (``reasoning_gym:x?sizes=[1, 2]``) stays in them: a piece that starts no benchmark (an environment, a
    task, a ``.jsonl`` file) belongs to the environment with options before it."""
    names: list[str] = []
    for piece in str(text or "").split(","):
        name = piece.strip()
        starts = is_env(name) or name.split(":")[0] in tasks.TASKS or name.endswith(".jsonl")
        if name and names and not starts and is_env(names[-1]) and "?" in names[-1]:
            names[-1] += "," + piece.rstrip()
        elif name:
            names.append(name)
    return names


__all__ = ["KINDS", "is_env", "load_rows", "short_name", "spec_of"]
