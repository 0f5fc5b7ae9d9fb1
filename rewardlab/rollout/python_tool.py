"""The fenced Python loop as one tool environment: the sandbox is the model's ``python`` tool.

    from rewardlab.sandbox import execute
    trajs = rollout_with_tools(model, tok, prompts, n=4, sampling=SamplingParams(max_new_tokens=256, seed=0),
                               execute=execute, settings=ToolSettings(max_turns=3, max_total_tokens=512))
    ToolEngine(model, tok, execute=execute, settings=ToolSettings()).generate(prompts, n, sampling)  # engine

Each trajectory is an environment episode (:mod:`rewardlab.rollout.episodes`) on a fresh :class:`PythonTool`,
whose calls are written in the ``python_block`` syntax: the model samples until the text it sampled *this turn*
holds a closed ```python (or ```py) block, EOS, or a budget; the block's code runs in the sandbox (``execute``:
the sandbox's :func:`rewardlab.sandbox.execute`, passed in by the caller because the import rules keep
``rollout`` from importing ``sandbox``; stdio style, empty stdin), and the result is appended:
``"\\n```output\\n{stdout}\\n```\\n"`` (``tool_format="fenced"``) or a ``tool`` message through the chat template
(``"chat"``); then the model samples again. An empty block is a malformed call: not run, its result says so.
The environment has no verdict of its own: the task's reward grades the model's last turn (a tool's output never
counts as the answer). Token-exactness, batching and ``finish_reason`` are the multi-turn loop's
(:mod:`rewardlab.rollout.multiturn`); a turn's record keeps ``code``, ``status`` ("ok", "error", "timeout",
"output_limit", "memory", "sandbox_error", "malformed", "budget", ...), ``sandbox_status``, ``stdout`` (cut),
``truncated``, ``error`` and the ``observation`` span.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams
from rewardlab.rollout.episodes import rollout_episodes
from rewardlab.rollout.multiturn import Trajectory
from rewardlab.rollout.tool_settings import ToolSettings


def run_tool(execute: Callable[..., Any], code: str, timeout: float, max_output_chars: int) -> dict:
    """Run ``code`` with the sandbox's ``execute`` (stdio style, empty stdin); a turn's tool fields."""
    r = execute(code, stdin="", expected_stdout="", timeout=timeout)
    sb = str(r.status)
    # stdio runs are graded against expected_stdout="": "pass"/"fail" both mean the program ended normally
    status = "ok" if sb in ("pass", "fail") else sb
    details = getattr(r, "details", {}) or {}
    out = str(details.get("stdout") or "")
    error = details.get("error") if status != "ok" else None
    if status == "error" and details.get("traceback"):
        error = str(details["traceback"])
    truncated = len(out) > max_output_chars
    out = out[:max_output_chars]
    return {"status": status, "sandbox_status": sb, "stdout": out, "truncated": truncated,
            "error": None if error is None else str(error)[:500]}


@dataclass
class PythonTool:
    """One episode of the fenced Python loop: a tool environment with one tool, ``python(code)``, run in the sandbox
    under the timeout the loop gives it. It has no ``finish``: the task's reward grades the answer."""

    execute: Callable[..., Any]
    output_chars: int

    def call(self, name: str, arguments: dict, *, timeout: float) -> dict:
        """Run the block's code; the run's record (:func:`run_tool`)."""
        if name != "python":
            raise RewardlabError(f"the Python tool environment has one tool, python; got {name!r}")
        return run_tool(self.execute, str(arguments["code"]), timeout, self.output_chars)


def rollout_with_tools(model: Any, tokenizer: Any, prompts: list[str], n: int, sampling: SamplingParams, *,
                       execute: Callable[..., Any] | None = None, settings: ToolSettings | None = None,
                       max_model_tokens: int | None = None, batch_size: int = 64, engine: Any = None
                       ) -> list[Trajectory]:
    """``len(prompts) * n`` trajectories, prompt-major (``out[i * n + j]`` is sample j of prompt i): one
    :class:`PythonTool` episode each, through :func:`~rewardlab.rollout.episodes.rollout_episodes` (its sampling,
    budgets and ``engine``). ``execute`` runs the code (the sandbox's :func:`rewardlab.sandbox.execute`; never model
    code in this process); once the episode's tool seconds are spent, a call is not run and its result says so
    (status ``"budget"``)."""
    if execute is None:
        raise RewardlabError("rollout_with_tools needs execute= (e.g. rewardlab.sandbox.execute): tool code "
                             "runs in the sandbox, which the rollout package does not import itself")
    s = settings or ToolSettings()
    return rollout_episodes(model, tokenizer, prompts, n, sampling, settings=s, max_model_tokens=max_model_tokens,
                            open_episode=lambda i: PythonTool(execute, s.tool_output_chars),
                            batch_size=batch_size, engine=engine, call_syntax="python_block")


@dataclass
class ToolEngine:
    """A rollout engine whose completions are tool-using trajectories: :func:`rollout_with_tools` behind
    the engine interface (``generate(prompts, n, sampling) -> list[Completion]``, ``load_weights``).

    It samples from the live ``model`` (as the HF engine does), so ``load_weights`` has nothing to copy.
    ``sampling.max_new_tokens`` caps one turn *and* the model's tokens over the whole trajectory;
    the token budget of ``settings`` also counts the observations."""

    model: Any
    tokenizer: Any
    execute: Callable[..., Any]
    settings: ToolSettings = field(default_factory=ToolSettings)
    """Turns, budgets, timeouts, observation format (:class:`~rewardlab.rollout.tool_settings.ToolSettings`)."""
    batch_size: int = 64
    engine: Any = None
    """An engine that continues exact token ids (the vLLM engine): it samples instead of ``model``."""

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[Completion]:
        trajs = rollout_with_tools(self.model, self.tokenizer, prompts, n, sampling, execute=self.execute,
                                   settings=self.settings, max_model_tokens=sampling.max_new_tokens,
                                   batch_size=self.batch_size, engine=self.engine)
        return [t.completion() for t in trajs]

    def load_weights(self, model: Any) -> None:
        if self.engine is not None:
            self.engine.load_weights(model)
        self.model = model


__all__ = ["ToolEngine", "rollout_with_tools"]
