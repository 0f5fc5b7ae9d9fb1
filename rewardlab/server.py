"""An HTTP reward server speaking OpenRLHF's remote reward-model protocol (Starlette + uvicorn).

Run it with ``rewardlab serve --port 5000 --reward math`` (or ``--reward math --reward
one_answer=0.1`` for a weighted sum) and point OpenRLHF at it with
``--remote_rm_url http://HOST:5000/get_reward``.

Protocol::

    POST /get_reward   {"query": [str, ...], "prompts": [str, ...], "labels": [any, ...]}
                       -> 200 {"rewards": [float, ...], "scores": [float, ...],
                               "extra_logs": {"graded": [1.0 | 0.0, ...], <component>: [...], ...}}
    GET  /health       -> 200 {"status": "ok", "reward": NAME}

Each query is the prompt followed by the response (the prompt is stripped before scoring);
``prompts`` and ``labels`` are optional but must match ``query`` in length. A malformed request is
answered ``400`` (body is not JSON / not an object), ``422`` (wrong field types or lengths) or
``413`` (batch larger than ``max_batch``) with ``{"error": "..."}``; it never takes the server down.
Scoring runs in a worker thread (through :func:`rewardlab.rewards.pool.score_batch` when
``pool=True``), so the event loop keeps accepting requests while a batch is graded.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rewardlab.adapters._common import RewardLike, resolve
from rewardlab.adapters.openrlhf import rewards_payload, score_queries
from rewardlab.rewards.base import reward_name

__all__ = ["create_app", "BadRequest"]

log = logging.getLogger("rewardlab.server")


class BadRequest(Exception):
    """A client error: answered with ``status`` and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _string_list(body: dict[str, Any], key: str, n: int | None) -> list[str] | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(422, f"{key!r} must be a list of strings")
    if n is not None and len(value) != n:
        raise BadRequest(422, f"{key!r} has {len(value)} items but 'query' has {n}")
    return value


def parse_request(raw: bytes, max_batch: int) -> tuple[list[str], list[str] | None, list[Any] | None]:
    """Validate a ``/get_reward`` body; raise :class:`BadRequest` with a one-line reason."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "request body must be a JSON object with a 'query' list")
    if "query" not in body and "queries" in body:
        body["query"] = body["queries"]
    if "query" not in body:
        raise BadRequest(422, "missing 'query' (a list of prompt+response strings)")
    queries = _string_list(body, "query", None)
    assert queries is not None
    if len(queries) > max_batch:
        raise BadRequest(413, f"batch of {len(queries)} queries exceeds the server limit of {max_batch}")
    prompts = _string_list(body, "prompts", len(queries))
    labels = body.get("labels")
    if labels is not None:
        if not isinstance(labels, list):
            raise BadRequest(422, "'labels' must be a list")
        if len(labels) != len(queries):
            raise BadRequest(422, f"'labels' has {len(labels)} items but 'query' has {len(queries)}")
    return queries, prompts, labels


def create_app(
    reward: RewardLike,
    *,
    pool: bool = True,
    deadline: float = 10.0,
    workers: int | None = None,
    max_batch: int = 65536,
) -> Starlette:
    """The ASGI app serving ``reward`` (a reward object, registry name or dotted path)."""
    fn = resolve(reward)
    name = reward_name(fn)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "reward": name})

    async def get_reward(request: Request) -> JSONResponse:
        try:
            queries, prompts, labels = parse_request(await request.body(), max_batch)
        except BadRequest as e:
            return JSONResponse({"error": e.message}, status_code=e.status)
        try:
            results = await run_in_threadpool(
                score_queries, fn, queries, prompts, labels, pool=pool, deadline=deadline, workers=workers
            )
        except Exception as e:  # noqa: BLE001 - the server answers 500 and stays up
            log.exception("scoring failed")
            return JSONResponse({"error": f"scoring failed: {type(e).__name__}: {e}"}, status_code=500)
        return JSONResponse(rewards_payload(results))

    return Starlette(
        routes=[
            Route("/get_reward", get_reward, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
