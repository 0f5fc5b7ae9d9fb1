"""The settings of a multi-turn tool rollout, declared once: :class:`ToolSettings`.

``rewardlab train`` and ``rewardlab eval`` carry these as flat fields of their configs (``--max-turns``,
``--tool-timeout``, ...), generated from this class by :func:`config_fields` the way ``TrainConfig``'s
algorithm fields come from ``algos.Algo``; :func:`settings_of` reads them back from a config, and the
tool engine (:class:`rewardlab.rollout.python_tool.ToolEngine`) and the environment episodes
(:func:`rewardlab.rollout.episodes.rollout_episodes`) take the result. Each default, each docstring (the
``--help`` text) and the token-budget rule live here::

    from rewardlab.rollout.tool_settings import ToolSettings
    settings = ToolSettings(max_turns=2, tool_format="chat")
    settings.token_budget(max_new_tokens=256)  # 1024: 0 = 4 x max_new_tokens
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Iterable

from rewardlab.errors import RewardlabError
from rewardlab.fields import attribute_docs

TOOLS = ("none", "python")
"""``--tools`` choices: no tool, or the sandbox as the model's Python tool."""
TOOL_FORMATS = ("fenced", "chat")
"""How a tool's output comes back: ``fenced`` (an ```output block inside the assistant's turn) or ``chat``
(a ``tool`` message through the chat template, which closes the assistant turn and opens the next)."""
BUDGET_FACTOR = 4
"""``max_total_tokens`` 0: a trajectory may hold this many times ``max_new_tokens`` tokens, observations included."""
MAX_SECONDS = 86_400.0
"""The longest tool timeout accepted (a day): a thread's wait cannot take an infinite or huge deadline."""


@dataclass(frozen=True)
class ToolSettings:
    """How a tool-using trajectory is run: its turns, its token and time budgets, its observations."""

    max_turns: int = 3
    """--tools: most tool calls per trajectory (it ends after the last one's output)."""
    max_total_tokens: int = 0
    """--tools: most tokens per trajectory, observations included (0 = 4 x max_new_tokens); --max-new-tokens caps
    the model's own tokens, in one turn and in all."""
    tool_timeout: float = 2.0
    """--tools: seconds one tool call may run in the sandbox."""
    tool_episode_timeout: float = 0.0
    """--tools: tool seconds per trajectory, all calls together (0 = max_turns x tool_timeout); once spent, a call
    is not run and its observation says so."""
    tool_format: str = "fenced"
    """--tools: how a tool's output comes back: fenced (an ```output block inside the assistant's turn) or chat
    (a tool message through the chat template, with its own separators)."""
    tool_output_chars: int = 500
    """--tools: most characters of a tool's output inserted (the rest is cut, and the observation says so)."""

    def token_budget(self, max_new_tokens: int) -> int:
        """The most tokens of a trajectory, observations included: ``max_total_tokens``, or 4 x ``max_new_tokens``."""
        return self.max_total_tokens or BUDGET_FACTOR * max_new_tokens

    def episode_seconds(self) -> float:
        """The tool seconds of one trajectory: ``tool_episode_timeout``, or ``max_turns`` x ``tool_timeout``."""
        return self.tool_episode_timeout or self.max_turns * self.tool_timeout

    def check(self) -> None:
        """Reject settings that cannot work (the messages name the command-line options)."""
        if self.tool_format not in TOOL_FORMATS:
            raise RewardlabError(f"unknown tool_format {self.tool_format!r}; choose one of: {', '.join(TOOL_FORMATS)}")
        if (self.max_turns < 1 or self.max_total_tokens < 0 or self.tool_output_chars < 1
                or not 0 < self.tool_timeout <= MAX_SECONDS or not 0 <= self.tool_episode_timeout <= MAX_SECONDS):
            raise RewardlabError("--max-turns and --tool-output-chars must be >= 1, --max-total-tokens >= 0, "
                                 f"--tool-timeout in (0, {MAX_SECONDS:g}] and --tool-episode-timeout in "
                                 f"[0, {MAX_SECONDS:g}] seconds")


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ToolSettings))
"""The tool settings' names: the same names as fields of ``TrainConfig`` and (some) of ``EvalConfig``."""


def docs() -> dict[str, str]:
    """Field name -> its one-line docstring (the ``--help`` text of its option)."""
    return attribute_docs(ToolSettings)


def config_fields(names: Iterable[str] = FIELDS, *, off_cli: Iterable[str] = ()) -> list[tuple[str, Any, Any]]:
    """``(name, type, dataclasses.field)`` per tool setting in ``names``, for ``dataclasses.make_dataclass``: a
    config that carries these settings as its own fields, with :class:`ToolSettings`' types and defaults.
    ``off_cli``: fields whose ``metadata`` says they are no command-line option (``{"cli": False}``);
    ``tool_format`` carries its ``choices``."""
    hints = typing.get_type_hints(ToolSettings)
    defaults = {f.name: f.default for f in dataclasses.fields(ToolSettings)}
    hidden = set(off_cli)
    out = []
    for name in names:
        meta: dict[str, Any] = {"choices": TOOL_FORMATS} if name == "tool_format" else {}
        if name in hidden:
            meta["cli"] = False
        out.append((name, hints[name], dataclasses.field(default=defaults[name], metadata=meta)))
    return out


def settings_of(config: Any, **overrides: Any) -> ToolSettings:
    """The :class:`ToolSettings` of a config that carries (some of) them as fields of the same names; a field it
    lacks keeps the default. ``overrides`` replace single settings."""
    values = {name: getattr(config, name) for name in FIELDS if hasattr(config, name)}
    return ToolSettings(**{**values, **overrides})


__all__ = ["BUDGET_FACTOR", "FIELDS", "TOOLS", "TOOL_FORMATS", "ToolSettings", "config_fields", "docs",
           "settings_of"]
