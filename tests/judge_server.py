"""Loopback fake OpenAI-compatible judge servers for the judge tests and ``bench/judge.py``.

* :func:`fake_judge_app` - a Starlette app serving ``POST /v1/chat/completions`` whose reply is
  written by a *script* (``script(body) -> str``), or, by its ``mode``, a broken server: ``slow``
  (sleeps ``delay`` seconds before answering), ``500``, ``garbage`` (200 with a body that is not
  JSON), ``no_choices`` (200 JSON without ``choices``). It records every request body.
* :class:`LiveServer` - uvicorn serving an app in a thread on a free 127.0.0.1 port.
* :class:`DroppingServer` - a socket that accepts connections and drops them (``drop``: closes
  at once after reading the request; ``truncate``: sends a response head promising a body, then closes).

Scripts model judges of different quality, so that the tests check the defences, not the judge:
``echo_correct`` (restates the answer it finds, always CORRECT), ``sycophant`` (restates the
reference, always CORRECT: a judge that agrees with an answer it did not read), ``naive`` (reads
the *last* reference and answer blocks of the prompt and compares them as strings: a judge that a
forged block fools).
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from typing import Any, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


def _blocks(text: str, tag: str) -> list[str]:
    return [m.strip() for m in re.findall(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)]


def user_text(body: dict) -> str:
    return "\n".join(m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user")


def first_answer(body: dict) -> str:
    found = _blocks(user_text(body), "student_answer")
    return found[0] if found else ""


def echo_correct(body: dict) -> str:
    """Always CORRECT, restating the answer shown (the first answer block)."""
    return f"FINAL ANSWER: {first_answer(body)}\nVERDICT: CORRECT"


def sycophant(body: dict) -> str:
    """Always CORRECT, restating the reference instead of the answer."""
    refs = _blocks(user_text(body), "reference_answer")
    return f"FINAL ANSWER: {refs[0] if refs else 'yes'}\nVERDICT: CORRECT"


def naive(body: dict) -> str:
    """Compares the last reference block with the last answer block, as strings."""
    text = user_text(body)
    refs, answers = _blocks(text, "reference_answer"), _blocks(text, "student_answer")
    answer = answers[-1] if answers else ""
    ok = bool(refs) and refs[-1].strip().casefold() == answer.strip().casefold()
    return f"FINAL ANSWER: {answer}\nVERDICT: {'CORRECT' if ok else 'INCORRECT'}"


def literal(reply: str) -> Callable[[dict], str]:
    return lambda body: reply


def fake_judge_app(script: Callable[[dict], str] = echo_correct, *, mode: str = "ok", delay: float = 0.0) -> Starlette:
    """The app; ``app.state.requests`` holds the request bodies, ``app.state.mode`` / ``.script`` /
    ``.delay`` may be changed while it serves."""

    async def completions(request: Request) -> Response:
        st = request.app.state
        body = await request.json()
        st.requests.append(body)
        st.active += 1
        st.max_active = max(st.max_active, st.active)
        try:
            return await _answer(st, body)
        finally:
            st.active -= 1

    async def _answer(st: Any, body: dict) -> Response:
        if st.delay:
            await asyncio.sleep(st.delay)
        if st.mode == "500":
            return JSONResponse({"error": "internal error"}, status_code=500)
        if st.mode == "garbage":
            return Response(b"\x00<html>definitely not json", media_type="application/json")
        if st.mode == "no_choices":
            return JSONResponse({"object": "chat.completion", "choices": []})
        if st.mode == "404":
            return JSONResponse({"error": f"model {body.get('model')!r} not found"}, status_code=404)
        reply = st.script(body)
        prompt = sum(len(m.get("content", "")) for m in body.get("messages", []))
        return JSONResponse({
            "id": "fake", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt // 4 + 1, "completion_tokens": len(reply) // 4 + 1,
                      "total_tokens": prompt // 4 + len(reply) // 4 + 2},
        })

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    app.state.requests = []
    app.state.script = script
    app.state.mode = mode
    app.state.delay = delay
    app.state.active = 0
    app.state.max_active = 0
    return app


class LiveServer:
    """uvicorn serving ``app`` in a background thread on an ephemeral 127.0.0.1 port."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", backlog=512)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        for _ in range(1000):
            if self.server.started:
                return self
            time.sleep(0.01)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


class DroppingServer:
    """Accepts connections on a free loopback port and drops them (see the module docstring)."""

    def __init__(self, mode: str = "drop") -> None:
        self.mode = mode
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            try:
                conn.settimeout(1.0)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
                if self.mode == "truncate":
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"
                                 b"\"choi")
            finally:
                conn.close()

    def __enter__(self) -> "DroppingServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop = True
        self.thread.join(timeout=5)
        self.sock.close()


def free_port_url() -> str:
    """A loopback URL on which nothing listens (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"
