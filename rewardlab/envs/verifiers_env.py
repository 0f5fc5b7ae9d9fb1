"""verifiers environments (Prime Intellect's ``verifiers`` 0.4, its v1 stack): the environment drives the policy.

    rewardlab train --env verifiers:my_taskset --steps 20
    rewardlab eval runs/x/checkpoints/step-000020 --env "verifiers:my_taskset?max_turns=4"

``verifiers:TASKSET`` loads an installed taskset (a package exporting one ``vf.Taskset`` subclass, found as
``vf.TasksetConfig(id=TASKSET)`` finds it) into verifiers' own single-agent environment, with the harness named
by ``harness=`` (``null``: the model answers the task's prompt, over as many turns as the harness runs). Each
task is a row. verifiers runs its agent itself and calls the model through its train client; rewardlab serves the
policy behind its endpoint on loopback (:mod:`rewardlab.rollout.driven`), so every turn is sampled by the run's
own engine with the run's sampling settings. Each episode's trace then holds the prompt ids verifiers rendered,
the ids the engine sampled (``sampled_mask``) with their log-probs, and the taskset's reward: :func:`drive` hands
those over unchanged, and the trainer trains on exactly those ids (never a re-tokenised text).

A multi-turn episode is one token sequence: the environment's and tools' turns sit between the replies with
``sampled_mask`` False, so they are context, never trained. A trace *branches* when a later turn's prompt is not
an extension of the tokens before it (a renderer that re-renders the conversation and tokenises a reply otherwise
than it was sampled; a template that drops earlier reasoning). The episode then trains on its last branch: the
replies sampled in it, in the context the model saw when it sampled them, paid the episode's reward; the replies
only in earlier branches are not trained, and the sample says how many tokens that left out (``branches``,
``untrained_tokens``): a partial gradient of the episode, never one computed on tokens it did not sample. With
``branches=all`` every branch trains, each a token sequence of its own in the context the model saw, paid the
episode's advantage (computed once per episode: group statistics never count a branch twice); the per-token
estimators (PPO's GAE, ...), online DPO and torchrun refuse it at start-up.

A trace is read as data from another package, never trusted: one not of verifiers' shape, or whose ids, mask and
log-probs cannot be trained on as they are (:func:`rewardlab.rollout.driven.untrainable`: ids outside the
vocabulary, lengths that disagree, a sampled token's log-prob that is no finite number <= 0) is status
``bad_trace`` and trains nothing; a reward that is no finite number is ``bad_reward`` (:mod:`rewardlab.envs.verdict`).

verifiers' harness programs run through ``uv`` (it installs their few dependencies on first use): the machine
needs ``uv`` or network access to install it, as verifiers itself does.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import threading
from typing import Any

from rewardlab.envs.spec import EnvSpec, parse_spec
from rewardlab.envs.verdict import graded
from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import RewardResult
from rewardlab.tasks import Row

REWARD = "rewardlab.envs.verifiers_env:episode_reward"
"""The rows' ``meta["reward"]``."""
TIMEOUT_S = 600.0
"""Seconds one episode may take by default (``timeout=``)."""
CONCURRENCY = 16
"""Episodes in flight at once by default (``concurrency=``): each runs its harness as a process."""
OPTIONS = {"harness": "the verifiers harness id (null: the model answers the prompt itself)",
           "max_turns": "model turns per episode at most (verifiers' AgentConfig.max_turns)",
           "timeout": f"seconds per episode, {TIMEOUT_S:.0f} by default (then it is cancelled: env_timeout)",
           "concurrency": f"episodes in flight at once, {CONCURRENCY} by default (each runs a harness process)",
           "renderer": "verifiers' renderer for the model (qwen3, llama-3, default, ...); by default the one its map "
                       "gives the model's name, else default (a local checkpoint's folder is never in the map)",
           "tool_parser": "the default renderer's tool-call parser (qwen3, glm, ...): a taskset with tools needs a "
                          "renderer that parses the model's calls",
           "branches": "a trace that branched trains its last branch (last, the default) or every branch, each a "
                       "sample of its own paid the episode's advantage (all)"}
"""The options a ``verifiers:`` spec takes (``rewardlab envs list``)."""
BRANCHES = ("last", "all")
"""``branches=``: which branches of a trace that branched are trained (the module docstring)."""
SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "seed")
"""The sampling settings :func:`drive` takes; verifiers' train client sends them to the endpoint as they are
(``vf.Sampling`` keeps extra fields). ``max_tokens`` is per model turn and also the episode's budget of sampled
tokens (``AgentConfig.max_output_tokens``: no turn starts past it); ``seed`` is the batch's, each episode's own
derived from it."""


def _vf() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise RewardlabError(f"verifiers: the package is not installed ({e}); pip install 'verifiers>=0.4'") from None
    return vf


@functools.lru_cache(maxsize=8)
def load_env(text: str, budget: int | None = None) -> Any:
    """The verifiers environment of spec ``text`` (loaded once per process and budget), its episodes ending once
    the model sampled ``budget`` tokens (None: verifiers' default, no budget)."""
    spec = parse_spec(text, ("verifiers",))
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise RewardlabError(f"{text}: unknown option {unknown[0]!r}; choose from {', '.join(OPTIONS)}")
    vf = _vf()
    from verifiers.v1.envs.single_agent import SingleAgentEnvConfig
    from verifiers.v1.runtimes import SubprocessConfig

    agent: dict[str, Any] = {"harness": vf.HarnessConfig(id=str(spec.options.get("harness", "null"))),
                             "runtime": SubprocessConfig()}
    if "max_turns" in spec.options:
        agent["max_turns"] = spec.options["max_turns"]
    if budget is not None:
        agent["max_output_tokens"] = budget
    renderer(text)  # a bad renderer or parser name: a one-line error here, at start-up
    if str(spec.options.get("branches", "last")) not in BRANCHES:
        raise RewardlabError(f"{text}: branches must be one of {', '.join(BRANCHES)}, got {spec.options['branches']!r}")
    for key, kinds in (("timeout", (int, float)), ("concurrency", int)):
        value = spec.options.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
            raise RewardlabError(f"{text}: {key} must be a positive {'integer' if kinds is int else 'number'}, "
                                 f"got {value!r}")
    try:
        return vf.load_environment(SingleAgentEnvConfig(
            taskset=vf.TasksetConfig(id=spec.name), agent=vf.AgentConfig(**agent)))
    except Exception as e:  # the taskset's own import, a bad option value: one line, the package's words
        raise RewardlabError(f"{text}: verifiers could not load it: {type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}") from None


def renderer(text: str) -> Any:
    """The renderer config of spec ``text``'s ``renderer=`` and ``tool_parser=`` (None when neither is given:
    verifiers resolves one from the model's name)."""
    options = parse_spec(text, ("verifiers",)).options
    name, parser = options.get("renderer"), options.get("tool_parser")
    if name is None and parser is None:
        return None
    from pydantic import TypeAdapter, ValidationError
    from renderers import RendererConfig
    from renderers.parsers import TOOL_PARSERS

    if parser is not None and name not in (None, "default"):
        raise RewardlabError(f"{text}: tool_parser is the default renderer's; renderer={name} parses its own calls")
    if parser is not None and str(parser) not in TOOL_PARSERS:
        raise RewardlabError(f"{text}: unknown tool_parser {parser!r}; choose from {', '.join(sorted(TOOL_PARSERS))}")
    try:
        return TypeAdapter(RendererConfig).validate_python(
            {"name": str(name or "default"), **({"tool_parser": str(parser)} if parser is not None else {})})
    except ValidationError as e:
        raise RewardlabError(f"{text}: renderer={name or 'default'} tool_parser={parser}: verifiers refuses it "
                             f"({e.errors()[0]['msg']})") from None


@functools.lru_cache(maxsize=1)
def _loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="rewardlab verifiers").start()
    return loop


def run_on_loop(coro: Any) -> Any:
    """Run ``coro`` on the one event loop every verifiers episode of this process runs on (a daemon thread), and
    return its result. verifiers keeps asyncio state bound to the first loop that contends for it (a module-level
    lock of its renderer client, locks of its environments), so episodes cannot run on a fresh ``asyncio.run``
    loop per step: after one loop had contended for that lock, every later episode on another loop failed ("is
    bound to a different event loop"). Code that drives verifiers in the same process as a run uses this too."""
    return asyncio.run_coroutine_threadsafe(coro, _loop()).result()


@functools.lru_cache(maxsize=8)
def _tasks(text: str, budget: int | None = None) -> tuple:
    try:
        return tuple(load_env(text, budget).taskset)
    except RewardlabError:
        raise
    except Exception as e:
        raise RewardlabError(f"{text}: the taskset raised while loading its tasks: {type(e).__name__}: {e}") from None


def _messages(task: Any) -> list[dict]:
    """A task's prompt as chat messages (for the run's logs and the in-process engines; the episode itself is
    rendered by verifiers)."""
    prompt = task.data.prompt
    msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt or []]
    system = task.data.system_prompt
    return ([{"role": "system", "content": system}] if system else []) + msgs


def rows(spec: EnvSpec, split: str, *, limit: int | None = None, seed: int = 0) -> tuple[list[Row], dict[str, Any]]:
    """The taskset's tasks as rows (a verifiers taskset has one list of tasks: train and eval read the same)."""
    tasks = _tasks(spec.text)
    tasks = tasks[:limit] if limit is not None else tasks
    if not tasks:
        raise RewardlabError(f"{spec.text}: the taskset has no tasks")
    out = [Row(id=f"verifiers/{spec.name}/{k}", prompt=_messages(t), reference={"task": k},
               meta={"reward": REWARD, "env": spec.text}) for k, t in enumerate(tasks)]
    blob = json.dumps([[r.id, r.prompt] for r in out], sort_keys=True, default=str)
    source = {"source": "env", "env": spec.text, "kind": "verifiers", "taskset": spec.name, "split": split,
              "records": len(out), "note": "a verifiers taskset has one list of tasks; every split reads it",
              "sha256": hashlib.sha256(blob.encode()).hexdigest()}
    return out, source


def catalogue() -> dict[str, dict[str, Any]]:
    """What the kind offers: any installed verifiers taskset, and these options."""
    return {"TASKSET": dict(OPTIONS)}


def drive(rows: list[Row], n: int, sampling: dict, *, url: str, model_dir: str) -> list[dict]:
    """``n`` episodes of each row's task, the model served at ``url`` (an OpenAI-compatible endpoint with
    verifiers' token route) and rendered with the tokenizer at ``model_dir``; ``sampling``: :data:`SAMPLING`.

    One sample per episode, row-major: ``{"prompt_ids", "token_ids", "sampled", "logprobs", "reward", "status",
    "answer"}``, the trace's ids as verifiers recorded them (``sampled``: its mask over ``token_ids``). An episode
    that failed has ``reward`` None and a status that says why; ``token_ids`` then hold what it sampled, if anything.
    One whose trace branched is its last branch, with ``branches`` and ``untrained_tokens`` (the module docstring)."""
    extra = sorted(set(sampling) - set(SAMPLING))
    if extra:
        raise RewardlabError(f"verifiers environments sample with {', '.join(SAMPLING)}; not {', '.join(extra)}")
    vf = _vf()
    envs = {str(r.meta["env"]) for r in rows}
    if len(envs) != 1:
        raise RewardlabError(f"verifiers: one environment per batch, got {sorted(envs)}")
    text = envs.pop()
    budget = int(sampling["max_tokens"]) if sampling.get("max_tokens") else None
    env, tasks = load_env(text, budget), _tasks(text, budget)
    for r in rows:  # the rows were read from another load of the taskset: the same task at the same index
        if _messages(tasks[int(r.reference["task"])]) != r.prompt:
            raise RewardlabError(f"{text}: task {r.reference['task']} changed between two loads of the taskset "
                                 "(its load() must give the same tasks in the same order)")
    client = vf.TrainClientConfig(base_url=f"{url}/v1", renderer_model_name=model_dir, renderer=renderer(text))
    seed = sampling.get("seed")

    def ctx(k: int) -> Any:  # episode k's model context: its own seed (it alone decides the episode's tokens)
        own = {**sampling, "seed": (seed * 1_000_003 + k) % (1 << 63)} if seed is not None else sampling
        return vf.ModelContext(model="policy", client=client, sampling=vf.Sampling(**own))

    options = parse_spec(text, ("verifiers",)).options
    timeout, width = float(options.get("timeout", TIMEOUT_S)), int(options.get("concurrency", CONCURRENCY))

    async def episodes() -> list[Any]:
        gate = asyncio.Semaphore(width)

        async def one(k: int, slot: Any) -> Any:  # the deadline counts from the episode's start, not its wait
            async with gate:
                return await asyncio.wait_for(env.run_slot(slot, ctx(k)), timeout)

        async with env.serving():
            slots = [s for r in rows for s in env.slots(tasks[int(r.reference["task"])], n)]
            return await asyncio.gather(*(one(k, s) for k, s in enumerate(slots)), return_exceptions=True)

    every = options.get("branches", "last") == "all"
    return [sample_of(ep, every_branch=every) for ep in run_on_loop(episodes())]


def sample_of(ep: Any, *, every_branch: bool = False) -> dict:
    """One episode's training sample (:func:`drive`): its last branch's ids, mask and log-probs, its reward and
    status; an episode whose trace is not of verifiers' shape (a field missing, or of another type) is status
    ``bad_trace``, never an error of the run. ``every_branch``: a trace that branched also gives its earlier
    branches, each as ``{"prompt_ids", "token_ids", "sampled", "logprobs"}`` in ``earlier`` (``branches=all``)."""
    try:
        return _sample(ep, every_branch)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError) as e:
        return _broken("bad_trace", f"the episode's trace could not be read: {type(e).__name__}: {e}")


def _sample(ep: Any, every_branch: bool = False) -> dict:
    """:func:`sample_of`, for a trace of verifiers' shape."""
    if isinstance(ep, asyncio.TimeoutError):
        return _broken("env_timeout", "the episode ran past its deadline (timeout=)")
    if isinstance(ep, BaseException):
        return _broken("env_error", f"{type(ep).__name__}: {ep}")
    trace = ep.traces[0] if ep.traces else None
    errors = "; ".join(str(getattr(e, "message", e)) for e in [*ep.errors, *(trace.errors if trace else [])])
    if trace is None or not trace.branches:
        timeout = ep.is_timeout or bool(trace and trace.is_timeout)
        return _broken("env_timeout" if timeout else "env_error",
                       f"no model turn recorded: {errors[-400:]}" if errors else "no model turn recorded")
    # the episode, or its branches (the module docstring): not those verifiers marks untrainable (compaction attempts)
    used = [b for b in trace.branches[:-1] if every_branch and getattr(b, "trainable", True)] + trace.branches[-1:]
    parts = [_branch(list(b.token_ids), [bool(m) for m in b.sampled_mask], list(b.logprobs)) for b in used]
    bad = next((p for p in parts if isinstance(p, str)), None)
    if bad is not None:
        return _broken("bad_trace", bad)
    parts = _each_token_once(parts)
    last = parts[-1]
    status, reward = "ok", trace.reward
    if not (ep.ok and trace.ok):
        status, reward = ("env_timeout" if ep.is_timeout or trace.is_timeout else "env_error"), None
    finish = str(trace.calls[-1].finish_reason or "") if trace.calls else ""  # the endpoint's: "stop" or "length"
    branched: dict[str, Any] = {}
    if len(trace.branches) > 1:
        sampled = sum(sum(map(bool, n.mask)) for n in trace.nodes if n.sampled)  # every reply's tokens, once
        trained = sum(sum(p["sampled"]) for p in parts)
        branched = {"branches": len(trace.branches), "untrained_tokens": sampled - trained}
        if every_branch:
            branched["earlier"] = parts[:-1]
    return {**last, "reward": reward, "status": status, "answer": trace.last_reply, "finish": finish, **branched,
            **({"error": errors} if errors else {})}


def _branch(ids: list[int], mask: list[bool], lps: list[float]) -> dict | str:
    """A branch's ids, mask and log-probs as a sample's (its prompt: the ids before the first sampled token), or why
    they cannot be one."""
    if not len(ids) == len(mask) == len(lps):
        return (f"the trace's token_ids, sampled_mask and logprobs disagree in length "
                f"({len(ids)}, {len(mask)}, {len(lps)})")
    start = mask.index(True) if any(mask) else len(ids)
    return {"prompt_ids": ids[:start], "token_ids": ids[start:], "sampled": mask[start:], "logprobs": lps[start:]}


def _each_token_once(parts: list[dict]) -> list[dict]:
    """Branches are root-to-leaf paths of one conversation: a reply on the path two branches share is in both. It
    trains once, in the last branch that samples it: an earlier branch drops a sampled token that a later branch
    holds at the same place after the same ids (their common prefix) and samples too; a branch left with none is
    dropped. The last branch is kept whole."""
    full = [p["prompt_ids"] + p["token_ids"] for p in parts]
    masks = [[False] * len(p["prompt_ids"]) + list(p["sampled"]) for p in parts]
    out = []
    for i in range(len(parts) - 1):
        later = set()  # positions of branch i that a later branch samples, after the same ids
        for j in range(i + 1, len(parts)):
            later.update(k for k in range(len(os.path.commonprefix([full[i], full[j]]))) if masks[j][k])
        mask = [m and k not in later for k, m in enumerate(masks[i])]
        if any(mask):
            out.append(_branch(full[i], mask, [0.0] * len(parts[i]["prompt_ids"]) + parts[i]["logprobs"]))
    return [*out, parts[-1]]


def _broken(status: str, error: str) -> dict:
    return {"prompt_ids": [], "token_ids": [], "sampled": [], "logprobs": [], "reward": None, "status": status,
            "answer": "", "error": error[:500]}


def episode_reward(completion: str, reference: Any = None, *, episode: dict | None = None, **meta: Any
                   ) -> RewardResult:
    """The taskset's reward for its episode (``Completion.episode``), or 0 with the status that says why there is
    none."""
    return graded(episode)


episode_reward.name = "verifiers"  # type: ignore[attr-defined]  # metric key rewards/verifiers/...
