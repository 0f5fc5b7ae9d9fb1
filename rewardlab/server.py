"""An HTTP reward server speaking OpenRLHF's remote reward-model protocol (Starlette + uvicorn).

Run it with ``rewardlab serve --port 5000 --reward math`` (or ``--reward math --reward
one_answer=0.1`` for a weighted sum) and point OpenRLHF at it with
``--reward.remote_url http://HOST:5000/get_reward`` (OpenRLHF 0.11).

Protocol::

    POST /get_reward   {"query": [str, ...], "prompts": [str, ...], "labels": [any JSON value, ...]}
                       -> 200 {"rewards": [float, ...], "scores": [float, ...],
                               "extra_logs": {"graded": [1.0 | 0.0, ...], <component>: [...], ...}}
    GET  /health       -> 200 {"status": "ok", "reward": NAME}

Each query is the prompt followed by the response (the prompt is stripped before scoring).
All three keys are required and must hold one item per sample (``queries`` is accepted for
``query``); an empty batch gets empty lists. Labels follow the same rule as OpenRLHF's file mode
(:func:`rewardlab.adapters.openrlhf.label_references`): a string, number or object is the reference,
``null`` means none, a list is a set of accepted answers (best score wins), and a label that can be
no reference (a boolean, a list holding a list) is an ungraded sample (reward 0.0, ``graded`` 0.0),
never a refused request. A malformed request is answered with ``{"error": "<one-line reason>"}`` and never scored:
``400`` (body not JSON / not an object), ``422`` (unknown or missing key, wrong type, lengths that
differ), ``413`` (more than ``max_batch`` queries, or a body over ``max_body`` bytes), ``404`` /
``405`` (wrong path / method). Each refusal is logged as one warning line, since OpenRLHF's client
only logs the status code. A malformed request never takes the server down.
Scoring runs in a worker thread (through :func:`rewardlab.rewards.pool.score_batch` when
``pool=True``), so the event loop keeps accepting requests while a batch is graded.
"""

from __future__ import annotations

import difflib
import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rewardlab.adapters._common import RewardLike, resolve
from rewardlab.adapters.openrlhf import rewards_payload, score_queries
from rewardlab.rewards.base import reward_name

__all__ = ["create_app", "BadRequest", "parse_request", "DEFAULT_MAX_BODY"]

log = logging.getLogger("rewardlab.server")


class BadRequest(Exception):
    """A client error: answered with ``status`` and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


FIELDS = ("query", "prompts", "labels")
"""The request's keys, all required (OpenRLHF always sends the three)."""
ALIASES = {"queries": "query"}
"""Accepted spellings of a field (some clients say ``queries``)."""
DEFAULT_MAX_BODY = 64 * 2**20
"""Largest request body accepted, in bytes (``rewardlab serve --max-body-mb``)."""

_SHAPE = '{"query": [str, ...], "prompts": [str, ...], "labels": [label, ...]}'


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise BadRequest(400, "request body is nested too deeply") from None
    except UnicodeDecodeError:
        raise BadRequest(400, "request body is not UTF-8 JSON") from None
    except ValueError as e:
        where = f" (line {e.lineno} column {e.colno}: {e.msg})" if isinstance(e, json.JSONDecodeError) else f" ({e})"
        raise BadRequest(400, "request body is not valid JSON" + (where if raw.strip() else " (it is empty)")) from None


def _kind(value: Any) -> str:
    return "null" if value is None else {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _string_list(body: dict[str, Any], key: str, n: int | None) -> list[str]:
    value = body[key]
    if not isinstance(value, list):
        raise BadRequest(422, f"{key!r} must be a list of strings, got {_kind(value)}")
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise BadRequest(422, f"{key}[{i}] must be a string, got {_kind(v)}")
    if n is not None and len(value) != n:
        raise BadRequest(422, f"{key!r} has {len(value)} items but 'query' has {n}")
    return value


def parse_request(raw: bytes, max_batch: int) -> tuple[list[str], list[str], list[Any]]:
    """Validate a ``/get_reward`` body; raise :class:`BadRequest` with a one-line reason.

    ``query``, ``prompts`` and ``labels`` are all required and must have one item per sample: a
    misspelt or missing key is an error, never a batch silently scored 0. Each label may be any JSON
    value (see :func:`rewardlab.adapters.openrlhf.label_references` for what each one means).
    """
    body = _decode(raw)
    if not isinstance(body, dict):
        raise BadRequest(400, f"request body must be a JSON object {_SHAPE}, got {_kind(body)}")
    for alias, key in ALIASES.items():
        if alias in body:
            if key in body:
                raise BadRequest(422, f"give {key!r} or {alias!r}, not both")
            body[key] = body.pop(alias)
    unknown = [k for k in body if k not in FIELDS]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), [*FIELDS, *ALIASES], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        names = ", ".join(repr(k) for k in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise BadRequest(422, f"unknown key{'s' if len(unknown) > 1 else ''} {names}{hint}; "
                              f"the body is {_SHAPE}")
    missing = [k for k in FIELDS if k not in body]
    if missing:
        extra = " (null items for samples without a reference)" if "labels" in missing else ""
        raise BadRequest(422, f"missing {', '.join(repr(k) for k in missing)}{extra}; the body is {_SHAPE}")
    queries = _string_list(body, "query", None)
    if len(queries) > max_batch:
        raise BadRequest(413, f"batch of {len(queries)} queries exceeds the server limit of {max_batch} (--max-batch)")
    prompts = _string_list(body, "prompts", len(queries))
    labels = body["labels"]
    if not isinstance(labels, list):
        raise BadRequest(422, f"'labels' must be a list (one label per query), got {_kind(labels)}")
    if len(labels) != len(queries):
        raise BadRequest(422, f"'labels' has {len(labels)} items but 'query' has {len(queries)}")
    # each label is a dataset value: never a reason to refuse the batch (OpenRLHF would retry and then
    # drop the rewards); what a label means is decided where file mode decides it too, in score_queries
    return queries, prompts, labels


async def read_body(request: Request, max_body: int) -> bytes:
    """The request body, refusing (413) one larger than ``max_body`` bytes before reading it all."""
    declared = request.headers.get("content-length")
    limit = f"the server limit of {max_body} bytes (--max-body-mb)"
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise BadRequest(413, f"request body of {int(declared)} bytes exceeds {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise BadRequest(413, f"request body exceeds {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    reward: RewardLike,
    *,
    pool: bool = True,
    deadline: float = 10.0,
    workers: int | None = None,
    max_batch: int = 65536,
    max_body: int = DEFAULT_MAX_BODY,
) -> Starlette:
    """The ASGI app serving ``reward`` (a reward object, registry name or dotted path)."""
    fn = resolve(reward)
    name = reward_name(fn)

    def error(status: int, message: str, request: Request, headers: dict[str, str] | None = None) -> JSONResponse:
        log.warning("%s %s -> %d: %s", request.method, request.url.path, status, message)
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "reward": name})

    async def get_reward(request: Request) -> JSONResponse:
        try:
            queries, prompts, labels = parse_request(await read_body(request, max_body), max_batch)
        except BadRequest as e:
            # a refused body may be left unread: close the connection rather than parse the rest as a request
            headers = {"connection": "close"} if e.status == 413 else None
            return error(e.status, e.message, request, headers)
        try:
            results = await run_in_threadpool(
                score_queries, fn, queries, prompts, labels, pool=pool, deadline=deadline, workers=workers
            )
        except Exception as e:  # noqa: BLE001 - the server answers 500 and stays up
            log.exception("scoring failed")
            return JSONResponse({"error": f"scoring failed: {type(e).__name__}: {e}"}, status_code=500)
        return JSONResponse(rewards_payload(results))

    routes = {"/get_reward": "POST", "/health": "GET"}

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        path = request.url.path
        if status == 405 and path in routes:
            message = f"{request.method} {path}: method not allowed, use {routes[path]}"
        elif status == 404:
            message = f"no endpoint {path}; use " + " or ".join(f"{m} {p}" for p, m in routes.items())
        else:
            message = str(getattr(exc, "detail", "")) or f"HTTP {status}"
        return error(status, message, request, getattr(exc, "headers", None))

    return Starlette(
        routes=[
            Route("/get_reward", get_reward, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
    )
