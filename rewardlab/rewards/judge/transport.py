"""The judge's requests: one ``POST {base_url}/chat/completions`` per answer (``httpx``) on one
background event loop per process, with retries, backoff with full jitter and a circuit breaker per
``base_url``, all within the item's deadline.

    rt = runtime()                                   # the process's loop thread (a forked child gets its own)
    out = await ask(rt, endpoint, policy, messages, info)   # an Attempt: ok / timeout / error
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["Attempt", "Breaker", "Endpoint", "RetryPolicy", "Runtime", "ask", "post_chat", "runtime"]


@dataclass
class Attempt:
    """The outcome of one request (or of all of an item's attempts)."""

    kind: str  # "ok", "timeout", "error", "fatal"
    detail: str = ""
    content: str | None = None
    usage: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class Endpoint:
    """Where and what to ask: the server, the judge model, its key and the sampling settings."""

    base_url: str
    model: str
    api_key: str | None
    max_concurrency: int
    sampling: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RetryPolicy:
    """An item's limits: ``deadline`` seconds for all its attempts, each capped by ``request_timeout``;
    ``retries`` more attempts after the first, with backoff; the breaker's threshold and cooldown."""

    deadline: float
    request_timeout: float
    retries: int
    backoff: float
    backoff_max: float
    breaker_threshold: int
    breaker_cooldown: float


class Breaker:
    """Consecutive-failure circuit breaker (used on the runtime's loop thread only)."""

    def __init__(self) -> None:
        self.failures = 0
        self.opened_at: float | None = None
        self.probing = False

    def allow(self, cooldown: float) -> tuple[bool, float]:
        """``(may ask now, seconds until the next probe)``; half-open lets exactly one probe through."""
        if self.opened_at is None:
            return True, 0.0
        left = self.opened_at + cooldown - time.monotonic()
        if left > 0 or self.probing:
            return False, max(left, 0.0)
        self.probing = True  # half-open: this one request is the probe
        return True, 0.0

    def success(self) -> None:
        self.failures, self.opened_at, self.probing = 0, None, False

    def failure(self, threshold: int) -> None:
        self.failures += 1
        if self.probing or self.failures >= threshold:
            self.opened_at = time.monotonic()
        self.probing = False


class Runtime:
    """One daemon thread per process running the event loop every judge request goes through."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.clients: dict[tuple[str, int], Any] = {}
        self.semaphores: dict[tuple[str, int], asyncio.Semaphore] = {}
        self.breakers: dict[str, Breaker] = {}
        self.inflight: dict[str, asyncio.Future] = {}
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="rewardlab-judge-loop")
        self.thread.start()

    def client(self, base_url: str, max_concurrency: int) -> "httpx.AsyncClient":
        import httpx  # lazy: the optional `judge` extra; importing rewardlab.rewards must not need it

        c = self.clients.get((base_url, max_concurrency))
        if c is None:
            limits = httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency)
            c = self.clients[(base_url, max_concurrency)] = httpx.AsyncClient(
                base_url=base_url.rstrip("/") + "/", limits=limits, timeout=None, trust_env=False)
        return c

    def semaphore(self, base_url: str, n: int) -> asyncio.Semaphore:
        s = self.semaphores.get((base_url, n))
        if s is None:
            s = self.semaphores[(base_url, n)] = asyncio.Semaphore(n)
        return s

    def breaker(self, base_url: str) -> Breaker:
        return self.breakers.setdefault(base_url, Breaker())


_RT: Runtime | None = None
_RT_LOCK = threading.Lock()


def runtime() -> Runtime:
    """This process's :class:`Runtime`, started on first use (a forked child gets a loop of its own)."""
    global _RT
    with _RT_LOCK:
        if _RT is None or _RT.pid != os.getpid():
            _RT = Runtime()
        return _RT


def _reply_of(resp: "httpx.Response") -> Attempt:
    """An HTTP response as an attempt: 429/5xx retryable errors, other 4xx fatal, a body without a
    text message a (retryable) protocol error."""
    if resp.status_code == 429 or resp.status_code >= 500:
        return Attempt("error", f"HTTP {resp.status_code}: {resp.text[:200]}")
    if resp.status_code >= 400:
        return Attempt("fatal", f"HTTP {resp.status_code}: {resp.text[:200]}")
    try:
        data = resp.json()
        content = data["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise TypeError(f"message content is {type(content).__name__}")
    except Exception as e:  # noqa: BLE001 - any malformed body is a protocol error
        return Attempt("error", f"garbage response ({type(e).__name__}): {resp.text[:120]!r}")
    usage = data.get("usage") or {}
    try:
        tokens = (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    except (TypeError, ValueError):
        tokens = (0, 0)
    return Attempt("ok", content=content, usage=tokens)


async def post_chat(rt: Runtime, endpoint: Endpoint, messages: list[dict[str, str]], timeout: float) -> Attempt:
    """One chat-completions request, at most ``timeout`` seconds."""
    import httpx  # lazy: the optional `judge` extra

    body = {**endpoint.sampling, "model": endpoint.model, "messages": messages}
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        resp = await rt.client(endpoint.base_url, endpoint.max_concurrency).post(
            "chat/completions", json=body, headers=headers, timeout=httpx.Timeout(timeout))
    except httpx.TimeoutException as e:
        return Attempt("timeout", f"{type(e).__name__}: no reply within {timeout:.3g} s")
    except httpx.HTTPError as e:
        return Attempt("error", f"{type(e).__name__}: {str(e)[:200]}")
    return _reply_of(resp)


async def ask(rt: Runtime, endpoint: Endpoint, policy: RetryPolicy, messages: list[dict[str, str]],
              info: dict[str, Any]) -> Attempt:
    """Attempts with retries, backoff and the breaker, within the deadline (the caller holds a slot).
    Sets ``info["attempts"]``, ``info["latency_s"]``, ``info["usage"]`` (and ``info["phase"]`` when
    the circuit is open)."""
    start = time.monotonic()
    end = start + policy.deadline
    breaker = rt.breaker(endpoint.base_url)
    last = Attempt("timeout", f"no reply within the {policy.deadline:g} s deadline")
    prompt_tokens = completion_tokens = 0
    attempts = 0
    for attempt in range(policy.retries + 1):
        allowed, left = breaker.allow(policy.breaker_cooldown)
        if not allowed:
            info["phase"] = "circuit_open"
            last = Attempt("error", f"circuit open after {breaker.failures} consecutive failures; "
                                    f"retrying the server in {left:.1f} s"
                                    + (f" (last: {last.detail})" if attempts else ""))
            break
        remaining = end - time.monotonic()
        if remaining <= 0:
            break
        attempts += 1
        try:
            out = await asyncio.wait_for(post_chat(rt, endpoint, messages, min(policy.request_timeout, remaining)),
                                         remaining + 0.05)
        except asyncio.TimeoutError:
            out = Attempt("timeout", f"no reply within {remaining:.3g} s")
        if out.kind == "ok":
            breaker.success()
            prompt_tokens, completion_tokens = out.usage
            last = out
            break
        if out.kind == "fatal":  # a 4xx: the server is up and refuses this request; no retry
            breaker.success()
            last = Attempt("error", out.detail)
            break
        breaker.failure(policy.breaker_threshold)
        last = out
        if attempt < policy.retries:
            delay = random.uniform(0, min(policy.backoff_max, policy.backoff * 2 ** attempt))  # full jitter
            if time.monotonic() + delay >= end:
                break
            await asyncio.sleep(delay)
    info["attempts"] = attempts
    info["latency_s"] = round(time.monotonic() - start, 4)
    info["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return last
