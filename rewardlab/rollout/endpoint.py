"""An OpenAI-compatible policy endpoint over a rollout engine: any agent harness can drive episodes, and the
trainer trains on exactly the tokens the engine sampled.

    rewardlab serve-policy runs/x/checkpoints/step-000020 --port 8000

Routes (Starlette; ``create_app(policy)``):

    GET  /v1/models                  the served model, with max_model_len (vLLM's extension)
    POST /inference/v1/generate      token ids in, token ids out: vLLM's generate wire format, which
                                     verifiers' renderer client (``renderers.client.generate``) calls
    POST /v1/chat/completions        messages in (rendered by the model's chat template, ``tools`` declared to
                                     it); the reply, plus prompt_token_ids, choices[i].token_ids and per-token
                                     log-probs; with ``tools``, the model's own ``<tool_call>`` blocks (Hermes /
                                     Qwen format) come back as OpenAI ``tool_calls`` (finish_reason "tool_calls")
    GET  /health

Every reply carries ``policy_version``: how many times the served weights were replaced
(:meth:`ServedPolicy.load_weights`), so a trainer can tell which policy sampled a turn. The log-probs
are the engine's recorded ones, under the behaviour distribution of the request's sampling settings
(:mod:`rewardlab.rollout.behaviour`: logits / T, over the top-k / top-p kept set; greedy decoding, temperature 0,
records the raw model's). A request that cannot be served is answered
``400`` with OpenAI's error shape naming the field (``{"error": {"message", "type", "param"}}``); the
body is capped (:data:`MAX_BODY`). One engine serves one request at a time (a lock): requests from
concurrent episodes queue.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams, format_prompt
from rewardlab.rollout.toolcalls import tool_calls_of

MAX_BODY = 8 * 1024 * 1024
"""Largest request body in bytes (a long multi-turn prompt as token ids is well under this)."""
LIMITS: dict[str, tuple[float, float]] = {
    "max_tokens": (1, 131072), "n": (1, 64), "temperature": (0.0, 100.0), "top_p": (0.0, 1.0),
    "top_k": (-1, 1 << 20), "seed": (0, (1 << 63) - 1), "logprobs": (0, 20),
}
"""Bounds of the numeric request fields (``top_p`` excludes 0; ``top_k`` -1 or 0 mean off)."""


class BadRequest(Exception):
    """A request the endpoint refuses: 400 with the field it names."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class ServedPolicy:
    """The engine behind the endpoint, its tokenizer and the version of its weights."""

    engine: Any
    """A rollout engine with ``generate_ids(prompt_ids, n, sampling)`` (:class:`~rewardlab.rollout.hf.HFEngine`)."""
    tokenizer: Any
    name: str = "policy"
    """The model id the endpoint answers to (any id is accepted; this one is reported)."""
    max_model_len: int = 4096
    """Prompt plus completion tokens at most (``/v1/models`` reports it; longer requests are refused)."""
    support: str = "kept"
    """What recorded log-probs describe under top-k / top-p (:data:`rewardlab.rollout.base.SUPPORTS`)."""
    max_batch: int = 32
    """Requests with the same ``n`` and settings that queue while the engine is busy are sampled together, this many
    prompts at most per engine call (1: one request per call). Seeded requests batch with seeded ones (each keeps
    its own seed: the engine's ``generate_ids(..., seeds=)``, so a request's seed alone decides its tokens, up to the
    float rounding of another batch shape), unseeded
    with unseeded; an engine without ``seeds`` samples each seeded request alone."""
    version: int = 0
    """How many times :meth:`load_weights` replaced the served weights."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    pending: list = field(default_factory=list, repr=False)
    """Requests waiting for the engine (:meth:`generate`)."""
    pending_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    threads: int = field(default_factory=lambda: _torch().get_num_threads())
    """The torch (OpenMP) thread count of the thread that built the policy, set in every thread that calls the
    engine: a request runs in a worker thread, whose OpenMP count is the process default, and vLLM's CPU
    attention refuses to run under another count than it was built with (``thread_num == thread_num (2 vs. 1)``)."""
    failure: BaseException | None = field(default=None, repr=False)
    """The first error an engine call raised (an out-of-memory, a broken engine), kept for whoever drives the
    endpoint in-process (:class:`~rewardlab.rollout.driven.DrivenEngine` re-raises it): a client only sees a 500."""

    def load_weights(self, model: Any) -> int:
        """Serve ``model``'s weights from the next request on; returns the new version."""
        with self.lock:
            self.engine.load_weights(model)
            self.version += 1
            return self.version

    def generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams) -> tuple[list[Completion], int]:
        """``n`` completions of one prompt and the policy version that sampled them.

        The request joins :attr:`pending`; whichever request thread holds the engine next takes the oldest pending
        request and every one it can batch with (same ``n`` and settings but the seed, seeded alike; up to
        :attr:`max_batch`) and samples them in one engine call, with that request's ``n`` and settings (not
        necessarily its own), each seeded request with its own seed."""
        req = _Pending(prompt_ids, n, sampling)
        with self.pending_lock:
            self.pending.append(req)
        while not req.done.is_set():
            with self.lock:
                if req.done.is_set():
                    break
                with self.pending_lock:
                    batch = self._take()
                if not batch:  # abandoned meanwhile (:meth:`abandon`)
                    continue
                if _torch().get_num_threads() != self.threads:  # this thread's own OpenMP count (see threads)
                    _torch().set_num_threads(self.threads)
                first = batch[0]  # the oldest pending request: maybe another thread's, sampled with its settings
                seeds = {} if first.sampling.seed is None or not self._seeds() else {
                    "seeds": [r.sampling.seed for r in batch]}
                try:
                    out = self.engine.generate_ids([r.prompt_ids for r in batch], first.n, first.sampling, **seeds)
                except BaseException as e:
                    self.failure = self.failure or e
                    for r in batch:
                        r.error = e
                        r.done.set()
                    break
                for k, r in enumerate(batch):
                    r.result, r.version = out[k * first.n:(k + 1) * first.n], self.version
                    r.done.set()
        if req.error is not None:
            raise req.error
        return req.result, req.version

    def abandon(self) -> int:
        """Fail every request still waiting for the engine and wait out the engine call in flight; how many were
        failed. For an in-process driver whose episodes ended (cancelled at their deadline): their requests must not
        keep sampling on the model once the driver moves on (to an optimizer step on the same weights)."""
        with self.pending_lock:
            left, self.pending[:] = list(self.pending), []
            for r in left:
                r.error = RewardlabError("abandoned: the episode that sent it ended")
                r.done.set()
        with self.lock:  # the engine call in flight, if any, ends before this returns
            pass
        return len(left)

    def _take(self) -> list["_Pending"]:
        """The oldest pending request and those that can share its engine call (removed from :attr:`pending`);
        none when :meth:`abandon` emptied the queue."""
        if not self.pending:
            return []
        first = self.pending[0]
        batch = [first]
        if first.sampling.seed is None or self._seeds():
            batch += [r for r in self.pending[1:] if _batch_key(r) == _batch_key(first)][: self.max_batch - 1]
        taken = {id(r) for r in batch}
        self.pending[:] = [r for r in self.pending if id(r) not in taken]
        return batch

    def _seeds(self) -> bool:
        """Whether the engine samples a batch of prompts each with its own seed (``generate_ids(..., seeds=)``)."""
        params = inspect.signature(self.engine.generate_ids).parameters
        return "seeds" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def encode_messages(self, messages: list[dict], tools: list | None = None) -> list[int]:
        """The prompt token ids of chat ``messages`` (the model's chat template, generation prompt opened)."""
        if tools:
            text = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        else:
            text = format_prompt(self.tokenizer, messages)
        return list(self.engine.encode(text))


def _batch_key(r: "_Pending") -> tuple:
    """What requests sharing an engine call agree on: ``n``, the settings but the seed, and whether they are seeded."""
    return r.n, dataclasses.replace(r.sampling, seed=None), r.sampling.seed is None


def _torch() -> Any:
    import torch  # lazy: the endpoint's wire code stays importable without it

    return torch


@dataclass(eq=False)
class _Pending:
    """One request waiting for the engine."""

    prompt_ids: list[int]
    n: int
    sampling: SamplingParams
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Completion] = field(default_factory=list)
    version: int = 0
    error: BaseException | None = None


def _number(body: dict, key: str, default: Any, kind: type) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    integral = isinstance(value, (int, float)) and math.isfinite(value) and float(value).is_integer()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not integral):
        raise BadRequest(f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}", key)
    lo, hi = LIMITS[key]
    if not math.isfinite(value) or not lo <= value <= hi or (key == "top_p" and value == 0):
        raise BadRequest(f"{key} must be in [{lo}, {hi}]{' and > 0' if key == 'top_p' else ''}, got {value!r}", key)
    return kind(value)


def _int_list(body: dict, key: str, vocab: int, *, required: bool = False) -> list[int]:
    value = body.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise BadRequest(f"{key} must be a list of token ids", key)
    if any(not 0 <= x < vocab for x in value):
        raise BadRequest(f"{key} holds a token id outside the vocabulary [0, {vocab})", key)
    return value


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items) or len(items) > 16:
        raise BadRequest("stop must be a string or a list of at most 16 non-empty strings", "stop")
    return tuple(items)


def sampling_of(params: dict, policy: ServedPolicy, prompt_len: int) -> tuple[SamplingParams, int]:
    """The request's :class:`SamplingParams` and ``n`` (OpenAI / vLLM field names)."""
    room = policy.max_model_len - prompt_len
    if room < 1:
        raise BadRequest(f"the prompt has {prompt_len} tokens; this model serves at most {policy.max_model_len}",
                         "messages")
    key = "max_completion_tokens" if params.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _number({"max_tokens": params.get(key)}, "max_tokens", min(256, room), int)
    top_k = _number(params, "top_k", 0, int)
    sampling = SamplingParams(
        max_new_tokens=min(max_tokens, room), temperature=_number(params, "temperature", 1.0, float),
        top_p=_number(params, "top_p", 1.0, float), top_k=max(top_k, 0),
        seed=_number(params, "seed", None, int) if params.get("seed") is not None else None,
        stop=_stops(params.get("stop")), support=policy.support,
        stop_token_ids=tuple(_int_list(params, "stop_token_ids", len(policy.tokenizer))))
    return sampling, _number(params, "n", 1, int)


def _cut(c: Completion, stop_ids: set[int]) -> tuple[list[int], list[float], str]:
    """The completion up to and including its first stop token id (vLLM keeps it), its log-probs, the reason.
    The engine already stops there (``SamplingParams.stop_token_ids``); this holds whatever engine serves."""
    ids = list(c.token_ids)
    if c.logprobs is None:
        raise RewardlabError("the engine recorded no log-probs (build it with record_logprobs=True)")
    lps = list(c.logprobs)
    for i, t in enumerate(ids):
        if t in stop_ids:
            return ids[: i + 1], lps[: i + 1], "stop"
    return ids, lps, c.finish_reason if c.finish_reason in ("stop", "length") else "stop"


def _usage(prompt: list[int], choices: list[dict]) -> dict[str, int]:
    done = sum(len(ch["token_ids"]) for ch in choices)
    return {"prompt_tokens": len(prompt), "completion_tokens": done, "total_tokens": len(prompt) + done}


def generate_route(body: dict, policy: ServedPolicy) -> dict:
    """``POST /inference/v1/generate``: ``{"token_ids", "sampling_params"}`` -> vLLM's generate reply."""
    vocab = len(policy.tokenizer)
    prompt = _int_list(body, "token_ids", vocab, required=True)
    if not prompt:
        raise BadRequest("token_ids is empty", "token_ids")
    params = body.get("sampling_params")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object", "sampling_params")
    sampling, n = sampling_of(params, policy, len(prompt))
    done, version = policy.generate(prompt, n, sampling)
    choices = []
    for i, c in enumerate(done):
        ids, lps, reason = _cut(c, set(sampling.stop_token_ids))
        choices.append({"index": i, "token_ids": ids, "text": policy.tokenizer.decode(ids, skip_special_tokens=True),
                        "finish_reason": reason, "logprobs": {"content": [
                            {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                            for t, lp in zip(ids, lps)]}})
    return {"request_id": f"gen-{uuid.uuid4().hex}", "model": policy.name, "prompt_token_ids": prompt,
            "choices": choices, "usage": _usage(prompt, choices), "policy_version": version}


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", "messages")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("each message must be an object with a role", "messages")
        if m.get("content") is not None and not isinstance(m["content"], str):
            raise BadRequest("message content must be a string (text only)", "messages")
        for call in m.get("tool_calls") or []:  # arguments come back as JSON text: the chat templates want objects
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    raise BadRequest("a tool call's arguments are not JSON", "messages") from None
    return messages


def chat_route(body: dict, policy: ServedPolicy) -> dict:
    """``POST /v1/chat/completions``: OpenAI's reply plus the token ids and log-probs of every choice."""
    messages = _messages(body)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("tools must be a list", "tools")
    try:
        prompt = policy.encode_messages(messages, tools)
    except (TypeError, ValueError, KeyError) as e:  # the chat template refused the conversation
        raise BadRequest(f"the chat template cannot render these messages: {e}", "messages") from None
    sampling, n = sampling_of(body, policy, len(prompt))
    want_logprobs = bool(body.get("logprobs"))
    done, version = policy.generate(prompt, n, sampling)
    choices = []
    for i, c in enumerate(done):
        ids, lps, reason = _cut(c, set())
        text = policy.tokenizer.decode(ids, skip_special_tokens=True)
        logprobs = {"content": [{"token": policy.tokenizer.decode([t]), "logprob": lp, "top_logprobs": []}
                                for t, lp in zip(ids, lps)]} if want_logprobs else None
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tools:
            message["content"], calls = tool_calls_of(text)
            if calls:
                message["tool_calls"], reason = calls, "tool_calls"
        choices.append({"index": i, "message": message, "finish_reason": reason, "logprobs": logprobs,
                        "token_ids": ids})
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": policy.name, "choices": choices, "prompt_token_ids": prompt, "usage": _usage(prompt, choices),
            "policy_version": version}


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": param}},
                        status_code=status)


async def _body(request: Request) -> dict:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequest(f"body over {MAX_BODY} bytes")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadRequest("body is not UTF-8 JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def create_app(policy: ServedPolicy) -> Starlette:
    """The Starlette app serving ``policy`` (run it with uvicorn)."""

    def handler(route: Any) -> Any:
        async def endpoint(request: Request) -> JSONResponse:
            try:
                body = await _body(request)
                return JSONResponse(await run_in_threadpool(route, body, policy))
            except BadRequest as e:
                return _error(400, str(e), e.param)
            except RewardlabError as e:
                return _error(400, str(e))
        return endpoint

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": policy.name, "object": "model", "owned_by": "rewardlab",
                                                         "max_model_len": policy.max_model_len}]})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "model": policy.name, "policy_version": policy.version})

    return Starlette(routes=[
        Route("/v1/models", models, methods=["GET"]), Route("/health", health, methods=["GET"]),
        Route("/inference/v1/generate", handler(generate_route), methods=["POST"]),
        Route("/v1/chat/completions", handler(chat_route), methods=["POST"]),
    ])


__all__ = ["ServedPolicy", "create_app"]
