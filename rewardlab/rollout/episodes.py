"""Environment episodes: the model calls an environment's tools in its own chat-template format, token-exactly.

    engine = EpisodeEngine(model, tok, open_episode=lambda row: MyEpisode(row), settings=ToolSettings(max_turns=4))
    outs = engine.generate(prompts, n, sampling, rows=rows)   # prompt i's episodes open on rows[i]
    outs[0].token_ids, outs[0].loss_mask, outs[0].episode     # {"reward": 1.0, "status": "ok", ...}

An :class:`Episode` is one environment instance for one trajectory (TRL's ``environment_factory`` builds
one per rollout too: :mod:`rewardlab.envs.python_env`). The loop, per trajectory:

1. the model samples a turn until its end-of-turn token (or a budget);
2. the turn's ``<tool_call>`` blocks (Hermes / Qwen JSON, :func:`~rewardlab.rollout.toolcalls.tool_calls_of`,
   what vLLM's ``hermes`` parser reads) are the calls; a turn without one is the final answer (the
   ``python_block`` call syntax instead ends a turn at a closed ```python block, whose code is one call of the
   environment's ``python`` tool: the fenced Python loop, :mod:`rewardlab.rollout.python_tool`);
3. each call runs on the episode (in a thread, under ``tool_timeout`` and what is left of the episode's
   ``tool_episode_timeout``); its result or its error goes back as a ``tool`` message through the chat template
   (:func:`~rewardlab.rollout.toolcalls.messages_ids`: the template's own separators, encoded alone and appended
   with loss mask 0), and the model samples again, until ``max_turns`` tool calls, or the token budget.

A turn environment (an OpenEnv server: ``Episode.respond``) takes the whole turn as its action instead, and its
reply comes back as user messages until it says the episode is over (a turn cut by the budget is still sent,
as the last). Then the episode gives its verdict (``Episode.finish``: the environment's own reward, or a status
saying why there is none), kept on the completion as ``Completion.episode`` for the environment's reward to read. Every
trained token is a token the engine sampled: the turns are never re-tokenised (the multi-turn rollout's rule,
:mod:`rewardlab.rollout.multiturn`). A tool that hangs is left behind in its (daemon) thread and the episode
ends with status ``env_timeout``: Python cannot kill a thread, so a hung environment keeps its thread and the CPU
it spins on (:mod:`rewardlab.bounded`), never the run's progress. Environments run in the trainer's process, as
TRL runs them: one that calls ``os._exit`` ends the run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from rewardlab.bounded import Hung, Raised, bounded, bounded_all
from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams
from rewardlab.rollout.decode import eos_ids
from rewardlab.rollout.multiturn import Limits, Trajectory, insert_ids, multiturn, observation
from rewardlab.rollout.tool_settings import ToolSettings
from rewardlab.rollout.toolcalls import messages_ids, tool_calls_of


class Episode(Protocol):
    """One environment instance driving one trajectory. A tool environment has ``call``: the model's
    ``<tool_call>`` blocks run through it. A turn environment (OpenEnv: each model turn is one ``step``) has
    ``respond(turn_text) -> messages or None`` instead: the environment's reply to a turn (user messages), or
    None when the episode is over."""

    def call(self, name: str, arguments: dict) -> Any:
        """Run tool ``name`` with ``arguments``; its result (sent back as text). Raises on a bad call."""
        ...

    def finish(self) -> dict:
        """The verdict once the episode ended: ``{"reward": float or None, "status": str, ...}``. An environment
        without ``finish`` gives no verdict of its own: the task's reward grades the model's last turn."""
        ...


CALL_SYNTAXES = ("tool_call", "python_block")
"""How a tool environment's calls are written. ``tool_call``: ``<tool_call>`` JSON in the model's chat template, the
turn ending at its end-of-turn token, results back as ``tool`` messages. ``python_block``: a closed ```python block
ends the turn and is one call ``call("python", {"code": code}, timeout=seconds)`` that returns the run's record
(``status``, ``stdout``, ``truncated``, ``error``: :func:`rewardlab.rollout.python_tool.run_tool`); the result comes
back as an ```output block in the assistant's turn, or as a ``tool`` message (``--tool-format``)."""


@dataclass
class _Open:
    """An episode in flight: the environment, what it has cost, and why it broke (None while it is fine)."""

    episode: Any
    seconds: float = 0.0
    broken: str | None = None
    error: str | None = None


def _text(value: Any, chars: int) -> str:
    """A tool's result as the text the model sees (JSON unless it is text; awaited first when it is a coroutine:
    TRL's async tools), cut at ``chars``."""
    value = asyncio.run(value) if inspect.isawaitable(value) else value
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:chars] if chars else text


def _run_calls(ep: _Open, calls: list[dict], lim: Limits, allowed: int) -> list[dict]:
    """Run a turn's calls in order, at most ``allowed`` of them (what ``--max-turns`` leaves); one record per call
    (name, arguments, status, result text). A call past the limit is not run; its record says so."""
    records = []
    for k, call in enumerate(calls):
        name = call["function"]["name"]
        rec: dict[str, Any] = {"name": name, "status": "ok"}
        if k >= allowed:
            rec.update(status="max_turns", result="error: the episode's tool-call limit is reached; not run")
            records.append(rec)
            continue
        try:
            args = json.loads(call["function"]["arguments"] or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as e:
            rec.update(status="bad_arguments", result=f"error: {e}")
            records.append(rec)
            continue
        rec["arguments"] = args
        left = lim.episode - ep.seconds
        if ep.broken is not None or left <= 0:
            rec.update(status="budget", result="error: the episode's tool time budget is spent")
            ep.broken = ep.broken or "env_timeout"
            records.append(rec)
            continue
        t0 = time.monotonic()
        try:  # the result's text is made inside the bound too (a hostile __str__ or a huge object)
            rec["result"] = bounded(lambda: _text(ep.episode.call(name, args), lim.chars), min(lim.timeout, left))
        except Hung as e:
            rec.update(status="timeout", result=f"error: {e}")
            ep.broken, ep.error = "env_timeout", f"tool {name!r}: {e}"
        except Raised as e:  # the environment's error goes back to the model as its result
            rec.update(status="tool_error", result=f"error: {e}"[: lim.chars or None])
        ep.seconds += time.monotonic() - t0
        records.append(rec)
    return records


def _respond(ep: _Open, turn: str, lim: Limits) -> tuple[list[dict], list[dict]]:
    """A turn environment's reply to ``turn`` (bounded like a tool call): its messages ([] when the episode is over
    or broke) and one record of the step."""
    left = lim.episode - ep.seconds
    if left <= 0:
        ep.broken, ep.error = "env_timeout", "the episode's time budget is spent"
        return [], [{"name": "step", "status": "budget"}]
    t0 = time.monotonic()
    try:
        msgs = bounded(lambda: _reply(ep.episode.respond(turn), lim.chars), min(lim.timeout, left))
    except Hung as e:
        ep.broken, ep.error = "env_timeout", f"step: {e}"
        return [], [{"name": "step", "status": "timeout"}]
    except Raised as e:  # the environment failed: the episode ends, counted
        ep.broken, ep.error = "env_error", f"step: {e}"
        return [], [{"name": "step", "status": "env_error"}]
    finally:
        ep.seconds += time.monotonic() - t0
    return msgs, [{"name": "step", "status": "ok", "result": " ".join(m["content"] for m in msgs)}]


def _reply(reply: Any, chars: int) -> list[dict]:
    """A turn environment's reply as messages: a list of ``{"role", "content": str}`` (None: the episode is over)."""
    reply = asyncio.run(reply) if inspect.isawaitable(reply) else reply
    if reply is None:
        return []
    if not isinstance(reply, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in reply):
        raise TypeError(f"a reply must be a list of messages with a role, got {type(reply).__name__}")
    return [{**m, "content": _text(m.get("content", ""), chars)} for m in reply]


def rollout_episodes(model: Any, tokenizer: Any, prompts: list[str], n: int, sampling: SamplingParams, *,
                     open_episode: Callable[[int], Any], settings: ToolSettings | None = None,
                     max_model_tokens: int | None = None, batch_size: int = 64, engine: Any = None,
                     call_syntax: str = "tool_call") -> list[Trajectory]:
    """``len(prompts) * n`` environment episodes, prompt-major; ``open_episode(i)`` opens a fresh
    :class:`Episode` for prompt ``i`` (an exception there ends that episode before it starts, status
    ``env_error``); its calls are written in ``call_syntax`` (:data:`CALL_SYNTAXES`).

    ``sampling``: temperature / top-k / top-p / seed as for the engines; ``max_new_tokens`` caps the tokens
    sampled in one turn; ``stop`` strings are not used. ``settings`` (default :class:`ToolSettings`): the
    turns, the trajectory's token budget (:meth:`~rewardlab.rollout.tool_settings.ToolSettings.token_budget` of
    ``sampling.max_new_tokens``, inserted tokens included), the time budgets (each call gets at most what is left
    of the episode's seconds), the result format and cut. ``max_model_tokens`` caps the sampled tokens of a
    whole trajectory (None: only the token budget). ``batch_size``: trajectories decoded together in one turn.
    ``engine``: sample through an engine that continues exact token ids (``continue_ids``: the vLLM engine)
    instead of ``model``."""
    if call_syntax not in CALL_SYNTAXES:
        raise RewardlabError(f"unknown call syntax {call_syntax!r}; choose one of: {', '.join(CALL_SYNTAXES)}")
    s = settings or ToolSettings()
    s.check()
    blocks = call_syntax == "python_block"
    total = s.token_budget(sampling.max_new_tokens)
    lim = Limits(sampling.max_new_tokens, total, max_model_tokens or total, s.max_turns, s.tool_timeout,
                 s.tool_output_chars, chat=not blocks or s.tool_format == "chat", episode=s.episode_seconds())
    eos = set(eos_ids(model, tokenizer))
    open_: dict[int, _Open] = {}

    def start(trajs: list[Trajectory]) -> None:  # every episode opens at once, under one deadline: the episode's
        opened = bounded_all([lambda t=t: open_episode(t.prompt_index) for t in trajs], lim.episode)
        for t, ep in zip(trajs, opened):
            if not isinstance(ep, (Hung, Raised)):
                open_[id(t)] = _Open(ep)
                continue
            status = "env_timeout" if isinstance(ep, Hung) else "env_error"  # counted per episode, never a crash
            open_[id(t)] = _Open(None, broken=status, error=f"reset: {ep}")
            t.finish_reason = "stop"
            t.turns.append({"sampled": [0, 0], "calls": [], "observation": None})

    def after_turn(live: list[Trajectory]) -> None:
        for t in live:
            if blocks:  # the fenced Python loop: the turn's closed block (if any) is the call
                if t.turns[-1]["code"] is not None:
                    _block_call(tokenizer, t, open_[id(t)], lim)
                continue
            t.turns[-1]["calls"] = []
            ep = open_[id(t)]
            turn_env = hasattr(ep.episode, "respond")
            if t.finish_reason != "stop" and not (turn_env and t.finish_reason == "length"):
                continue  # a budget ended a tool environment's turn: the episode is over, the turn not parsed
            a, b = t.turns[-1]["sampled"]
            if turn_env and a == b:  # the budget left no token for this turn: nothing to send
                continue
            if turn_env:  # a turn environment: the turn is the action (a turn cut by the budget is its last)
                msgs, records = _respond(ep, tokenizer.decode(t.token_ids[a:b], skip_special_tokens=True), lim)
                msgs = msgs if t.finish_reason == "stop" else []
            else:  # a tool environment: the turn's tool calls run
                _, calls = tool_calls_of(tokenizer.decode(t.token_ids[a:b], skip_special_tokens=False))
                records = _run_calls(ep, calls, lim, allowed=lim.turns - t.tool_calls)
                msgs = [{"role": "tool", "name": r["name"], "content": r["result"]} for r in records]
            t.turns[-1]["calls"] = records
            t.tool_calls += sum(r["status"] != "max_turns" for r in records)
            if not msgs:  # the final answer (or the environment ended the episode)
                continue
            ids = messages_ids(tokenizer, msgs, ended=bool(t.token_ids) and t.token_ids[-1] in eos)
            t.turns[-1]["observation"] = insert_ids(t, ids, lim.total)
            t.finish_reason = None
            if ep.broken is not None or t.tool_calls >= lim.turns:
                t.finish_reason = "max_turns" if ep.broken is None else "stop"
            elif len(t.token_ids) >= lim.total or sum(t.loss_mask) >= lim.model:
                t.finish_reason = "length"

    trajs = multiturn(model, tokenizer, prompts, n, sampling, lim, batch_size, after_turn, tools=blocks,
                      engine=engine, on_start=start)
    for t in trajs:
        t.episode = _verdict(open_[id(t)], lim)
    return trajs


def _block_call(tok: Any, t: Trajectory, ep: _Open, lim: Limits) -> None:
    """Run the last turn's ```python block as a call of the environment's ``python`` tool and append its result
    (loss mask 0). An empty block is a malformed call, and a call once the episode's seconds are spent is not
    run: their results say so, and the episode goes on."""
    turn = t.turns[-1]
    t.tool_calls += 1
    left = lim.episode - t.tool_seconds
    if not turn["code"].strip():
        res = {"status": "malformed", "sandbox_status": None, "stdout": "", "truncated": False,
               "error": "empty code block"}
    elif left <= 0:
        res = {"status": "budget", "sandbox_status": None, "stdout": "", "truncated": False,
               "error": "the episode's tool time budget is spent"}
    else:
        t0 = time.monotonic()
        res = _run_block(ep, turn["code"], min(lim.timeout, left))
        t.tool_seconds += time.monotonic() - t0
        ep.seconds = t.tool_seconds
    turn.update(res)
    if lim.chat:  # a tool message through the chat template (its own separators around it)
        body = observation(res["status"], res["stdout"], res["error"], res["truncated"], fenced=False)
        ids = messages_ids(tok, [{"role": "tool", "content": body}], ended=False)
    else:
        ids = tok.encode(observation(res["status"], res["stdout"], res["error"], res["truncated"]),
                         add_special_tokens=False)
    turn["observation"] = insert_ids(t, ids, lim.total)
    if t.tool_calls >= lim.turns:
        t.finish_reason = "max_turns"
    elif len(t.token_ids) >= lim.total or sum(t.loss_mask) >= lim.model:
        t.finish_reason = "length"


BLOCK_GRACE_S = 5.0
"""Seconds past its own timeout that a ``python_block`` call may take before it counts as hung (the environment
bounds the call itself: the sandbox kills the process at the timeout; this catches one that does not)."""


def _run_block(ep: _Open, code: str, timeout: float) -> dict:
    """One ``python_block`` call's record: what the environment returned (``status`` "ok" unless it says otherwise),
    or ``tool_error`` when it raised or returned no record, ``timeout`` when it did not return in time."""
    record = {"status": "ok", "sandbox_status": None, "stdout": "", "truncated": False, "error": None}
    try:
        out = bounded(lambda: ep.episode.call("python", {"code": code}, timeout=timeout), timeout + BLOCK_GRACE_S)
    except Hung as e:
        return {**record, "status": "timeout", "error": str(e)}
    except Raised as e:
        return {**record, "status": "tool_error", "error": str(e)[:500]}
    if not isinstance(out, dict) or not isinstance(out.get("stdout", ""), str):
        return {**record, "status": "tool_error", "error": f"the tool returned {type(out).__name__}, not a record"}
    return {**record, **out}


def _verdict(ep: _Open, lim: Limits) -> dict | None:
    """The episode's verdict: the environment's own (``finish``), or why there is none (a broken episode is still
    closed, when its environment has ``close``: an OpenEnv session); None from an environment that has no
    ``finish`` (the task's reward grades the answer)."""
    if ep.broken is None and not callable(getattr(ep.episode, "finish", None)):
        return None
    if ep.broken is not None:
        if ep.episode is not None and callable(getattr(ep.episode, "close", None)):
            try:
                bounded(ep.episode.close, max(lim.timeout, 1.0))
            except (Hung, Raised):
                pass  # closing what already failed: the verdict below says why
        return {"reward": None, "status": ep.broken, "error": ep.error, "tool_seconds": round(ep.seconds, 4)}
    try:
        out = dict(bounded(lambda: dict(ep.episode.finish()), max(lim.timeout, 1.0)))
    except Hung as e:
        out = {"reward": None, "status": "env_timeout", "error": f"finish: {e}"}
    except Raised as e:  # counted, never a crash
        out = {"reward": None, "status": "env_error", "error": f"finish: {e}"}
    out["tool_seconds"] = round(ep.seconds, 4)
    return out


def environment_batch(engine: str, prompts: list[str], rows: list[Any] | None, is_env: Callable[[Any], bool]) -> bool:
    """Whether an environment engine's batch is its environment's episodes (True) or plain prompts that its base
    engine samples (False: no rows, or rows of plain tasks, as a held-out benchmark's); a batch that mixes both, or
    whose rows do not match its prompts, is an error."""
    if rows is None:
        return False
    if len(rows) != len(prompts):
        raise RewardlabError(f"{engine}.generate: {len(rows)} rows for {len(prompts)} prompts")
    marked = [is_env(r) for r in rows]
    if any(marked) and not all(marked):
        raise RewardlabError(f"{engine}.generate: a batch mixes environment episodes with plain prompts")
    return any(marked)


@dataclass
class EpisodeEngine:
    """Environment episodes (:func:`rollout_episodes`) behind the engine interface: ``generate(prompts, n,
    sampling, rows=rows)``, prompt ``i``'s episodes opened by ``open_episode(rows[i])``. Prompts whose rows are
    not episodes (``is_episode``: a held-out benchmark of plain tasks) are sampled by ``base`` alone."""

    model: Any
    tokenizer: Any
    open_episode: Callable[[Any], Any]
    base: Any
    """The plain engine: it samples the turns too when ``drives`` (an engine with ``continue_ids``: vLLM)."""
    settings: ToolSettings = field(default_factory=ToolSettings)
    batch_size: int = 64
    drives: bool = False
    is_episode: Callable[[Any], bool] = lambda row: True

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams, *,
                 rows: list[Any] | None = None) -> list[Completion]:
        if not environment_batch("EpisodeEngine", prompts, rows, self.is_episode):
            return self.base.generate(prompts, n, sampling)
        trajs = rollout_episodes(self.model, self.tokenizer, prompts, n, sampling,
                                 open_episode=lambda i: self.open_episode(rows[i]), settings=self.settings,
                                 max_model_tokens=sampling.max_new_tokens, batch_size=self.batch_size,
                                 engine=self.base if self.drives else None)
        return [t.completion() for t in trajs]

    def load_weights(self, model: Any) -> None:
        self.base.load_weights(model)
        self.model = model


__all__ = ["EpisodeEngine"]
