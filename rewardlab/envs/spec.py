"""Environment specs: the one string that names an environment on the command line and in YAML.

    reasoning_gym:spell_backward                       # a reasoning-gym dataset, its defaults
    reasoning_gym:basic_arithmetic?size=500&max_terms=2&answer=boxed
    openenv:http://127.0.0.1:8000                      # a running OpenEnv server

``KIND:NAME`` then an optional ``?key=value&key=value`` of options. Values read as JSON where they
parse (``3``, ``0.5``, ``true``, ``[1, 2]``), else as text. ``%XX`` escapes are decoded (``%26`` for an ``&`` in a
value); a ``+`` stays a ``+`` (a file path's, not a form's space). The kinds and their options are declared
once, in :data:`rewardlab.envs.KINDS`; this module only parses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from rewardlab.errors import RewardlabError


@dataclass(frozen=True)
class EnvSpec:
    """A parsed environment spec."""

    kind: str
    """The adapter: ``reasoning_gym``, ``openenv``, ... (a key of :data:`rewardlab.envs.KINDS`)."""
    name: str
    """What the adapter loads: a dataset name, a module, a URL."""
    options: dict[str, Any] = field(default_factory=dict)
    """The ``?key=value`` options, values decoded from JSON where they parse."""
    text: str = ""
    """The spec as written (the run's task name, the results' benchmark source)."""


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def looks_like_env(text: str, kinds: Any) -> bool:
    """Whether ``text`` names an environment of one of ``kinds`` (``KIND:...``), not a task or a file."""
    kind, sep, _ = str(text).strip().partition(":")
    return bool(sep) and kind in kinds


def parse_spec(text: str, kinds: Any) -> EnvSpec:
    """``KIND:NAME?key=value&...`` -> :class:`EnvSpec`; a one-line error for anything else."""
    text = str(text).strip()
    kind, sep, rest = text.partition(":")
    if not sep or kind not in kinds:
        raise RewardlabError(f"bad environment {text!r}: write KIND:NAME[?key=value&...] with KIND one of "
                             f"{', '.join(kinds)}")
    name, _, query = rest.partition("?")
    if not name:
        raise RewardlabError(f"bad environment {text!r}: {kind}: needs a name after the colon")
    pairs = [part.partition("=") for part in query.split("&")] if query else []
    if any(not sep or not key for key, sep, _ in pairs):
        raise RewardlabError(f"bad environment {text!r}: options are key=value pairs joined by '&'")
    pairs = [(unquote(key), unquote(value)) for key, _, value in pairs]
    options: dict[str, Any] = {}
    for key, value in pairs:
        if key in options:
            raise RewardlabError(f"bad environment {text!r}: option {key!r} given twice")
        options[key] = _value(value)
    return EnvSpec(kind=kind, name=name, options=options, text=text)


__all__ = ["EnvSpec"]
