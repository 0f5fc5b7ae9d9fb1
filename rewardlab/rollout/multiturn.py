"""Multi-turn rollouts with token-exact trajectories: the loop that environment episodes, the fenced Python tool
and a critic's feedback between two answers all run on.

    trajs = multiturn(model, tok, prompts, n, sampling, limits, batch_size, after_turn, tools=True)
    t = trajs[0]; t.token_ids, t.loss_mask, t.logprobs, t.turns, t.finish_reason, t.answer
    rollout_with_feedback(model, tok, prompts, n, sampling, critic=...)         # answer, feedback, answer

**Turns.** The model samples a turn until EOS, a budget, or (``tools=True``: the fenced Python loop) the moment
the text it sampled *this turn* holds a closed fenced block (```` ```python ... ``` ```` or ```` ```py ````,
:func:`extract_code`; the turn's ``code``). Then ``after_turn(live)`` acts on the turns that ended: an
environment's tools run and their results are appended (:mod:`rewardlab.rollout.episodes`; the sandbox as the
model's Python tool is one such environment, :mod:`rewardlab.rollout.python_tool`), or a critic's feedback is;
then the model samples again. A block left unclosed is not a tool call.

**Token-exactness.** ``prompt_ids + token_ids`` is exactly the sequence the model was run on while
sampling. Sampled tokens are appended as the ids that were drawn (decoding only *detects* the
closing fence, and a turn ends at the token where it appears); only inserted text (an observation,
a feedback turn) is encoded, alone, and appended with ``loss_mask`` 0 and ``logprobs`` None.
Re-tokenizing the whole text instead would merge tokens across the boundary (BPE) and give the
trainer a different sequence than the one sampled. A forward pass of ``prompt_ids + token_ids``
gives, at each ``loss_mask == 1`` position, the recorded log-prob (up to float rounding), under the
same temperature / top-k / top-p warpers as :class:`~rewardlab.rollout.hf.HFEngine`.

**Batching.** Trajectories are decoded in batches, a turn at a time: each turn prefills every live
trajectory's exact context once (left-padded; rows with the same context, a group's first turn,
share one prefill) and decodes the rows in lockstep on a KV cache, rows leaving the batch as their
turn ends; then the turn's tool calls run. Each trajectory draws from its own random stream, so the
batching never changes what is sampled. An engine with ``continue_ids`` (the vLLM engine) can
sample instead, one call per fence.

``finish_reason``: ``"stop"`` (EOS), ``"length"`` (the token budget over sampled and inserted
tokens, the model-token budget, or ``sampling.max_new_tokens`` in one turn; an observation past the
budget is cut at it), ``"max_turns"`` (the ``max_turns``-th tool call was run and its observation
appended). The budgets are one :class:`Limits`.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams
from rewardlab.rollout.decode import decode, eos_ids, inference_mode, prefill, row_streams, seeded
from rewardlab.rollout.toolcalls import messages_ids
from rewardlab.seeds import derive_seed

_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)\n?```", re.DOTALL)
"""A closed python block: the opening fence (``python`` or ``py`` tag, end of line), the code, the closing fence."""


@dataclass
class Trajectory:
    """One multi-turn rollout of one prompt."""

    prompt_index: int
    """Index of the prompt in the list passed to :func:`rollout_with_tools`."""
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    """Everything after the prompt, in order: sampled tokens and inserted observation tokens."""
    loss_mask: list[int] = field(default_factory=list)
    """1 = sampled by the model, 0 = inserted (observation)."""
    logprobs: list[float | None] = field(default_factory=list)
    """Sampler log-prob of each sampled token (after the warpers); None for inserted tokens."""
    turns: list[dict] = field(default_factory=list)
    """Per model turn: ``sampled`` [start, end) span in token_ids, ``code`` (None: no tool call),
    ``status`` ("ok", "error", "timeout", "output_limit", "memory", "sandbox_error", ...),
    ``sandbox_status``, ``stdout`` (truncated), ``truncated``, ``observation`` [start, end) span."""
    tool_calls: int = 0
    tool_seconds: float = 0.0
    """Wall-clock seconds the tool calls took (what the per-episode budget counts)."""
    finish_reason: str | None = None
    """"stop" (EOS), "length" (a token budget), "max_turns" (max_turns tool calls made); None while sampling."""
    text: str = ""
    """token_ids decoded with special tokens skipped (model text and observations)."""
    answer: str = ""
    """The model's last turn, decoded: what a reward grades (a tool's output never counts as the answer)."""
    episode: dict | None = None
    """Environment episodes: the environment's verdict (:attr:`~rewardlab.rollout.base.Completion.episode`)."""

    def completion(self) -> Completion:
        """This trajectory as a :class:`~rewardlab.rollout.base.Completion` (what the trainer and the eval take)."""
        return Completion(prompt_index=self.prompt_index, prompt_ids=self.prompt_ids, token_ids=self.token_ids,
                          text=self.text, finish_reason=self.finish_reason or "length",
                          logprobs=[0.0 if lp is None else lp for lp in self.logprobs], loss_mask=self.loss_mask,
                          answer_text=self.answer, turns=self.turns, tool_calls=self.tool_calls,
                          episode=self.episode)


TOOL_HINT = ("You can run Python: write code in a ```python block that prints what you need, and its output "
             "will be shown to you. Give your final answer after the output.")
"""Appended (``--tools python``, train and eval) to the last user message of a prompt that does not already
say how to call the tool."""


def with_tool_hint(prompt: str | list[dict]) -> str | list[dict]:
    """``prompt`` with :data:`TOOL_HINT` at the end of its last user message, unless it mentions ```python already."""
    msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if any("```python" in str(m.get("content", "")) for m in msgs):
        return prompt
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=None)
    if last is None:
        return prompt
    msgs[last]["content"] = f"{msgs[last]['content']}\n{TOOL_HINT}"
    return msgs[0]["content"] if isinstance(prompt, str) else msgs


def extract_code(text: str) -> str | None:
    """The code of the first closed ```python block of ``text``, or None."""
    m = _BLOCK.search(text)
    return None if m is None else m.group(1)


def observation(status: str, stdout: str, error: str | None, truncated: bool, *, fenced: bool = True) -> str:
    """The text appended after a tool call (``fenced=False``: the bare content of a ``tool`` message)."""
    body = stdout.rstrip("\n")
    if truncated:
        body += "\n[output truncated]"
    if status == "timeout":
        body = (body + "\n" if body else "") + "[timed out]"
    elif status == "output_limit":
        body = (body + "\n" if body else "") + "[output limit exceeded]"
    elif status not in ("ok",) and error:
        body = (body + "\n" if body else "") + f"[{status}] {error.strip().splitlines()[-1][:200]}"
    return f"\n```output\n{body}\n```\n" if fenced else body


def rollout_with_feedback(model: Any, tokenizer: Any, prompts: list[str], n: int, sampling: SamplingParams, *,
                          critic: Callable[[list[int], list[str]], list[Any]], max_total_tokens: int = 256,
                          max_model_tokens: int | None = None, batch_size: int = 64) -> list[Trajectory]:
    """Two attempts with feedback between them (the "dual-agent" loop): the model answers; ``critic(prompt
    indices, answers) -> feedback`` (texts, or the critic's Completions, kept as ``turns[0]["critic"]``)
    comments on each answer; the feedback is inserted as a user turn
    (:func:`feedback_ids`: the chat template's own separators, loss mask 0); the model answers again.
    ``Trajectory.answer`` is the second attempt; ``turns[0]`` holds ``feedback`` and its token span
    (``observation``). Same sampling, budgets and token-exactness as :func:`rollout_with_tools`."""
    limits = Limits(sampling.max_new_tokens, max_total_tokens, max_model_tokens or max_total_tokens, 1, 0.0, 0)
    eos = set(eos_ids(model, tokenizer))

    def feedback(live: list[Trajectory]) -> None:
        first = [t for t in live if len(t.turns) == 1 and len(t.token_ids) < limits.total
                 and sum(t.loss_mask) < limits.model]
        chosen = {id(t) for t in first}
        for t in live:
            if id(t) not in chosen and t.finish_reason is None:
                t.finish_reason = "length"
        if not first:
            return
        answers = [tokenizer.decode(t.token_ids, skip_special_tokens=True) for t in first]
        replies = critic([t.prompt_index for t in first], answers)
        if len(replies) != len(first):
            raise RewardlabError(f"the critic returned {len(replies)} feedback texts for {len(first)} answers")
        for t, reply in zip(first, replies):
            text = reply if isinstance(reply, str) else reply.text  # a str, or the critic's Completion
            if not isinstance(reply, str):
                t.turns[0]["critic"] = reply
            ids = feedback_ids(tokenizer, str(text), ended=bool(t.token_ids) and t.token_ids[-1] in eos)
            t.turns[0].update(feedback=str(text), observation=insert_ids(t, ids, limits.total))
            t.finish_reason = None if len(t.token_ids) < limits.total else "length"

    return multiturn(model, tokenizer, prompts, n, sampling, limits, batch_size, feedback, tools=False)


def feedback_ids(tokenizer: Any, feedback: str, *, ended: bool) -> list[int]:
    """The token ids that follow an assistant answer when ``feedback`` comes back as a user turn and the
    assistant answers again (:func:`~rewardlab.rollout.toolcalls.messages_ids` of one ``user`` message)."""
    return messages_ids(tokenizer, [{"role": "user", "content": feedback}], ended=ended)


def multiturn(model, tokenizer, prompts: list[str], n: int, sampling: SamplingParams, limits: "Limits",
               batch_size: int, after_turn: Callable[[list[Trajectory]], None], *, tools: bool,
               engine: Any = None, on_start: Callable[[list[Trajectory]], None] | None = None) -> list[Trajectory]:
    """Turns for every live trajectory (decoded in batches here, or by ``engine.continue_ids``), then
    ``after_turn(live)`` (tool calls, feedback), until every trajectory has a ``finish_reason``.
    ``on_start(trajectories)`` runs once before the first turn (environment episodes open there)."""
    if n < 1 or limits.total < 1 or batch_size < 1:
        raise RewardlabError(f"n, max_total_tokens and batch_size must be >= 1, got {n}, {limits.total}, {batch_size}")
    bos = tokenizer.bos_token  # chat templates often emit BOS themselves (the engines' rule)
    trajs = [Trajectory(i, list(tokenizer(p, add_special_tokens=not (bos and p.startswith(bos)))["input_ids"]))
             for i, p in enumerate(prompts) for _ in range(n)]
    with contextlib.ExitStack() as stack:
        if engine is None:  # one random stream per trajectory: its tokens do not depend on the batching
            import torch  # lazy: see the module docstring

            device = next(model.parameters()).device
            stack.enter_context(inference_mode(model))
            stack.enter_context(seeded(sampling.seed, device))
            base = int(torch.randint(0, 2**62, (1,)))  # from the seed (or the global stream when seed is None)
            rngs = {id(t): torch.Generator(device=device).manual_seed(derive_seed("trajectory", base, k))
                    for k, t in enumerate(trajs)}

            def turn(live: list[Trajectory]) -> None:
                for k in range(0, len(live), batch_size):
                    _turn(model, tokenizer, live[k : k + batch_size], sampling, limits, device, rngs, tools=tools)
        else:  # one seed per trajectory and call
            def stream(k: int) -> Callable[[], int | None]:
                calls = iter(range(10**9))
                return lambda: (None if sampling.seed is None
                                else derive_seed("trajectory_call", sampling.seed, k, next(calls)))

            seeds = {id(t): stream(k) for k, t in enumerate(trajs)}

            def turn(live: list[Trajectory]) -> None:
                _engine_turn(engine, tokenizer, live, sampling, limits, seeds, tools=tools)
        if on_start is not None:
            on_start(trajs)
        live = [t for t in trajs if t.finish_reason is None]
        while live:
            turn(live)
            after_turn(live)
            live = [t for t in live if t.finish_reason is None]
    for t in trajs:
        t.text = tokenizer.decode(t.token_ids, skip_special_tokens=True)
        a, b = t.turns[-1]["sampled"]
        t.answer = tokenizer.decode(t.token_ids[a:b], skip_special_tokens=True)
    return trajs


@dataclass
class FeedbackEngine:
    """The dual-agent rollout (:func:`rollout_with_feedback`) behind the engine interface.

    ``critic(questions, answers, sampling) -> list[Completion]`` writes one feedback per answer (the
    trainer builds it: the frozen reference, another model, or the policy with a critic prompt);
    ``generate`` takes the questions the critic sees (default: the rendered prompts)."""

    model: Any
    tokenizer: Any
    critic: Callable[[list[str], list[str], SamplingParams], list[Completion]]
    max_total_tokens: int = 512
    batch_size: int = 64

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams, *,
                 questions: list[str] | None = None) -> list[Completion]:
        qs = questions if questions is not None else prompts

        def critic(indices: list[int], answers: list[str]) -> list[Completion]:
            return self.critic([qs[i] for i in indices], answers, sampling)

        trajs = rollout_with_feedback(self.model, self.tokenizer, prompts, n, sampling, critic=critic,
                                      max_total_tokens=self.max_total_tokens,
                                      max_model_tokens=2 * sampling.max_new_tokens,
                                      batch_size=self.batch_size)
        return [t.completion() for t in trajs]

    def load_weights(self, model: Any) -> None:
        self.model = model


@dataclass(frozen=True)
class Limits:
    """A multi-turn rollout's budgets (:func:`multiturn`)."""

    turn: int  # sampled tokens per turn
    total: int  # sampled + inserted tokens per trajectory
    model: int  # sampled tokens per trajectory
    turns: int  # tool calls per trajectory
    timeout: float
    chars: int
    chat: bool = False  # observations as chat-template tool messages
    episode: float = float("inf")  # tool seconds per trajectory


def _turn(model, tok, chunk: list[Trajectory], sampling: SamplingParams, lim: Limits, device,
          rngs: dict[int, Any], *, tools: bool = True) -> None:
    """Sample one model turn for every trajectory of ``chunk``, decoded together
    (:func:`rewardlab.rollout.decode.decode`).

    The context (prompt + every token so far, as ids) is prefilled once, left-padded, with position
    ids counting real tokens (rows with the same context, a group's first turn, share one prefill);
    then rows decode in lockstep on a KV cache, each until EOS, a closed python block (``tools``), or
    a budget, and rows that ended leave the batch at once. Each row draws from its own generator.
    Sets each trajectory's new turn (and ``finish_reason`` when it ended for good)."""
    import torch  # lazy: see the module docstring

    eos = set(eos_ids(model, tok))
    starts, caps = _open_turns(chunk, lim)
    rows = [i for i, c in enumerate(caps) if c > 0]  # decode row -> chunk index
    if not rows:
        return
    ctx = [chunk[i].prompt_ids + chunk[i].token_ids for i in rows]
    slot: dict[tuple[int, ...], int] = {}  # rows with the same context share one prefill
    for c in ctx:
        slot.setdefault(tuple(c), len(slot))
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else 0)
    T = max(caps[i] for i in rows)
    start = prefill(model, [list(c) for c in slot], [slot[tuple(c)] for c in ctx], pad_id=pad, room=T)

    def on_step(t: int, active: Any, token: Any, lp: Any, seq: Any, scores: Any) -> Any:
        ended = []
        for r, tid, logp in zip(active.tolist(), token.tolist(), lp.tolist()):
            ended.append(_take(tok, chunk[rows[r]], tid, logp, starts[rows[r]], caps[rows[r]], eos, tools))
        return torch.tensor(ended, dtype=torch.bool, device=token.device)  # (A,)

    decode(model, start, T, sampling=sampling, pick=row_streams([rngs[id(chunk[i])] for i in rows]),
           on_step=on_step, pad_id=pad, drop_share=0.0)


def _take(tok, t: Trajectory, tid: int, logp: float, start: int, cap: int, eos: set[int], tools: bool) -> bool:
    """Append one sampled token to ``t``'s open turn; whether the turn ended with it (EOS, a tool call, its budget)."""
    t.token_ids.append(tid)
    t.loss_mask.append(1)
    t.logprobs.append(logp)
    turn = t.turns[-1]
    turn["sampled"][1] = len(t.token_ids)
    if tid in eos:
        t.finish_reason = "stop"
        return True
    if tools and "`" in tok.decode([tid]):  # a closing fence needs a backtick in the token that completes it
        code = extract_code(tok.decode(t.token_ids[start:], skip_special_tokens=True))
        if code is not None:
            turn["code"] = code
            return True
    if len(t.token_ids) - start >= cap:
        t.finish_reason = "length"
        return True
    return False


def _engine_turn(engine, tok, chunk: list[Trajectory], sampling: SamplingParams, lim: Limits, seeds: dict[int, Any],
                 *, tools: bool = True) -> None:
    """One model turn through an engine that continues exact token ids (``engine.continue_ids``: the vLLM
    engine): each call runs until EOS, the budget or the next fence (`````), and a row whose turn now holds
    a closed python block has made its tool call; the others continue from their exact ids."""
    starts, caps = _open_turns(chunk, lim)
    active = [i for i, c in enumerate(caps) if c > 0]
    while active:
        ts = [chunk[i] for i in active]
        outs = engine.continue_ids([t.prompt_ids + t.token_ids for t in ts], sampling,
                                   max_tokens=[caps[i] - (len(chunk[i].token_ids) - starts[i]) for i in active],
                                   seeds=[seeds[id(t)]() for t in ts], stop=["```"] if tools else [])
        still = []
        for i, (ids, lps, reason) in zip(active, outs):
            t = chunk[i]
            t.token_ids.extend(ids)
            t.loss_mask.extend([1] * len(ids))
            t.logprobs.extend(lps if lps is not None else [0.0] * len(ids))
            t.turns[-1]["sampled"][1] = len(t.token_ids)
            code = extract_code(tok.decode(t.token_ids[starts[i]:], skip_special_tokens=True)) if tools else None
            if reason == "stop":
                t.finish_reason = "stop"
            elif code is not None:
                t.turns[-1]["code"] = code
            elif reason == "length" or len(t.token_ids) - starts[i] >= caps[i] or not ids:
                t.finish_reason = "length"
            else:  # a fence that did not close a python block: go on sampling this turn
                still.append(i)
        active = still


def insert_ids(t: Trajectory, ids: list[int], total: int) -> list[int]:
    """Append inserted (not sampled) ids, cut at the ``total`` token budget, with loss mask 0; their [start, end)
    span."""
    ids = ids[: max(0, total - len(t.token_ids))]
    start = len(t.token_ids)
    t.token_ids.extend(ids)
    t.loss_mask.extend([0] * len(ids))
    t.logprobs.extend([None] * len(ids))
    return [start, len(t.token_ids)]


def _open_turns(chunk: list[Trajectory], lim: Limits) -> tuple[list[int], list[int]]:
    """Start a turn in every trajectory of ``chunk``: each one's start index and the tokens it may sample now
    (a trajectory with none left ends with ``"length"``)."""
    starts = [len(t.token_ids) for t in chunk]
    caps = [min(lim.turn, lim.total - len(t.token_ids), lim.model - sum(t.loss_mask)) for t in chunk]
    for start, cap, t in zip(starts, caps, chunk):
        t.turns.append({"sampled": [start, start], "code": None, "status": None, "observation": None})
        if cap <= 0:
            t.finish_reason = "length"
    return starts, caps


__all__ = ["TOOL_HINT", "FeedbackEngine", "Trajectory", "extract_code", "observation", "rollout_with_feedback",
           "with_tool_hint"]
