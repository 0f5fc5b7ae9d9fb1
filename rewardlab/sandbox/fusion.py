"""A SandboxFusion-compatible ``POST /run_code`` endpoint on rewardlab's sandbox.

    rewardlab sandbox serve --port 8080        # then, in verl: sandbox_fusion.url=http://host:8080/run_code

    from rewardlab.sandbox.fusion import run_code
    run_code({"code": "print(input())", "language": "python", "stdin": "hi\\n"})

Request (SandboxFusion's ``RunCodeRequest``): ``code``, ``language`` (python, cpp, c, java,
nodejs/javascript, bash, go, rust), ``stdin``, ``compile_timeout`` (s, default 10),
``run_timeout`` (s, default 10), ``memory_limit_MB`` (default 1024), ``files`` (name -> base64
content, written next to the program), ``fetch_files`` (names to return after the run).

Response (SandboxFusion's ``RunCodeResponse``): ``status`` ("Success" when the program compiled
and ran to exit status 0, "Failed" otherwise, "SandboxError" when our side failed), ``message``,
``compile_result`` (None for interpreted languages) and ``run_result``, each
``{"status": "Finished" | "TimeLimitExceeded" | "Error", "execution_time", "return_code",
"stdout", "stderr"}``, ``files`` (name -> base64), ``executor_pod_name`` (None).

Every request runs in the same sandbox as ``code_reward`` (tier A or B, its rlimits, its
compile cache); the answer is plain data about the run, and nothing the program prints can
change the response's shape (it is JSON-encoded by us).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.sandbox.languages import LANGUAGES, Program, compile_program, file_entry, get_language, run_program
from rewardlab.sandbox.parent import Limits, SandboxPool, get_pool

_NAMES = {"nodejs": "javascript", "node": "javascript", "typescript": None, "python3": "python"}
_MAX_BODY = 64 << 20
_MAX_DEPTH = 64  # arrays/objects inside one another in a request body
_MAX_CONTAINERS = 100_000  # arrays and objects in one request body
# numeric fields: (default when absent, null or 0, lowest, highest, must be a whole number)
NUMBERS = {"compile_timeout": (10.0, 0.0, 600.0, False), "run_timeout": (10.0, 0.0, 600.0, False),
           "memory_limit_MB": (1024, 1, 65536, True)}
# one token of the pre-check: a whole string, a bracket, or a quote that opens no complete string
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|"', re.S)
_MAX_DIGITS = 400  # a longer JSON integer is read as infinite (the field's check then names it)


class BadRequest(RewardlabError, ValueError):
    """A request field the endpoint refuses (an HTTP 400); the message names the field."""


def _number(req: dict, name: str) -> float:
    """The numeric field ``name`` of a request: absent, null or 0 give the default; anything else
    must be a finite JSON number within the documented bounds (a whole number for memory)."""
    default, low, high, whole = NUMBERS[name]
    v = req.get(name)
    if v is None or (type(v) in (int, float) and v == 0):
        return default
    if type(v) not in (int, float):
        raise BadRequest(f"{name} must be a number, got {type(v).__name__}")
    if not math.isfinite(v) or not low < v <= high or (whole and v != int(v)):
        kind = "a whole number" if whole else "a finite number of seconds"
        raise BadRequest(f"{name} must be {kind} in ({low:g}, {high:g}], got {v!r}")
    return int(v) if whole else float(v)


def _parse_int(text: str) -> int | float:
    if len(text) > _MAX_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


def _check_nesting(text: str) -> None:
    """One linear pass over ``text``'s tokens (``_TOKEN``: each string is matched once, from its
    opening quote; an unterminated one ends the pass), counting brackets outside strings."""
    depth = containers = 0
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok == '"':
            raise BadRequest("bad JSON: an unterminated string")
        if tok in "[{":
            depth += 1
            containers += 1
            if depth > _MAX_DEPTH:
                raise BadRequest(f"the body's arrays/objects are nested deeper than {_MAX_DEPTH}")
            if containers > _MAX_CONTAINERS:
                raise BadRequest(f"the body has more than {_MAX_CONTAINERS} nested or listed arrays/objects")
        elif tok in "]}":
            depth -= 1


def parse_body(raw: bytes) -> dict:
    """A request body as a JSON object, refusing (``BadRequest``) what the stdlib parser cannot
    take safely: a body that is not UTF-8 (``json.loads`` of bytes would also take UTF-16/32,
    which the bracket count would misread), nesting deeper than ``_MAX_DEPTH`` or more than
    ``_MAX_CONTAINERS`` arrays and objects (counted outside strings in one linear pass before
    parsing), integers of more than ``_MAX_DIGITS`` digits (read as infinite)."""
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise BadRequest("the body must be UTF-8 JSON") from None
    _check_nesting(text)
    try:
        req = json.loads(text, parse_int=_parse_int)
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"bad JSON: {e}") from None
    if not isinstance(req, dict):
        raise BadRequest("the body must be a JSON object")
    return req


def _files_stdin_fetch(req: dict) -> tuple[dict[str, bytes], str, list[str]]:
    """``files`` (name -> base64 string), ``stdin`` (a string) and ``fetch_files`` (a list of
    names) of a request; anything else is a ``BadRequest`` naming the field."""
    files, stdin, fetch = req.get("files") or {}, req.get("stdin"), req.get("fetch_files") or []
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise BadRequest("files must be an object of file name -> base64 string")
    try:
        extra = {str(k): base64.b64decode(v) for k, v in files.items()}
    except ValueError as e:
        raise BadRequest(f"files: bad base64: {e}") from None
    if stdin is not None and not isinstance(stdin, str):
        raise BadRequest(f"stdin must be a string, got {type(stdin).__name__}")
    if not isinstance(fetch, list) or not all(isinstance(f, str) for f in fetch):
        raise BadRequest("fetch_files must be a list of file names")
    return extra, stdin or "", fetch


def _python_program(code: str) -> Program:
    """Python as a plain process (stderr, exit status and files as SandboxFusion reports them)."""
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "/usr/local/bin/python3"
    return Program("python", True, "ok", [py, "-I", "main.py"], {"main.py": file_entry(code)}, code)


def _result(status: str, t: float, rc: int | None, stdout: str, stderr: str) -> dict:
    return {"status": status, "execution_time": round(t, 6), "return_code": rc, "stdout": stdout, "stderr": stderr}


def run_code(req: dict, *, pool: SandboxPool | None = None) -> dict:
    """Answer one SandboxFusion ``run_code`` request (see the module docstring). A numeric field
    out of its bounds (``NUMBERS``) raises ``BadRequest`` naming the field."""
    out: dict[str, Any] = {"status": "Failed", "message": "", "compile_result": None, "run_result": None,
                           "executor_pod_name": None, "files": {}}
    code = req.get("code")
    if not isinstance(code, str):
        return dict(out, status="SandboxError", message="'code' must be a string")
    name = str(req.get("language") or "python")
    key = _NAMES.get(name.lower(), name.lower())
    lang = get_language(key) if key else None
    if lang is None:
        return dict(out, status="SandboxError", message=f"unsupported language {name!r}; "
                                                         f"supported: {', '.join(sorted(LANGUAGES))}, nodejs")
    compile_timeout, run_timeout = _number(req, "compile_timeout"), _number(req, "run_timeout")
    mem = int(_number(req, "memory_limit_MB"))
    pool = pool or get_pool()
    limits = Limits(memory_mb=max(64, mem))
    extra, stdin, fetch = _files_stdin_fetch(req)
    if lang.name == "python":
        prog = _python_program(code)
    else:
        t0 = time.monotonic()
        prog = compile_program(lang.name, code, timeout=compile_timeout, pool=pool)
        ct = time.monotonic() - t0
        if prog.status in ("unavailable", "sandbox_error"):
            return dict(out, status="SandboxError", message=str(prog.info.get("error")))
        if lang.compile is not None:
            cs = prog.info.get("compile_status", "ran")
            ct = float(prog.info.get("compile_s") or ct)
            if prog.ok:
                out["compile_result"] = _result("Finished", ct, 0, "", "")
            elif cs == "timeout":
                out["compile_result"] = _result("TimeLimitExceeded", ct, None, "", str(prog.info.get("error") or ""))
                return dict(out, message="compile timeout")
            else:
                out["compile_result"] = _result("Finished", ct, 1, "", str(prog.info.get("error") or ""))
                return dict(out, message="compile error")
    r = run_program(prog, stdin, timeout=run_timeout, pool=pool, limits=limits,
                    extra_files=extra or None)
    if r.status == "sandbox_error":
        return dict(out, status="SandboxError", message=str(r.error))
    if r.status == "ran":
        rr = _result("Finished", r.elapsed, 0, r.stdout, r.stderr)
    elif r.status == "timeout":
        rr = _result("TimeLimitExceeded", r.elapsed, None, r.stdout, r.stderr)
    elif r.status in ("error", "memory") and r.exit_code is not None:
        rr = _result("Finished", r.elapsed, r.exit_code, r.stdout, r.stderr)
    elif r.status in ("crash", "memory"):
        sig = _signal_of(r.error)
        rr = _result("Finished", r.elapsed, -sig if sig else 1, r.stdout, r.stderr or str(r.error or ""))
    else:  # output_limit
        rr = _result("Error", r.elapsed, None, r.stdout, r.stderr or str(r.error or r.status))
    out["run_result"] = rr
    if fetch:
        out["files"] = {}  # fetching files back after a run is not supported: an empty answer, said in the message
        out["message"] = "fetch_files is not supported by this endpoint"
    if rr["status"] == "Finished" and rr["return_code"] == 0:
        out["status"] = "Success"
    return out


def _signal_of(error: str | None) -> int:
    import re

    m = re.search(r"signal (\d+)", error or "")
    return int(m.group(1)) if m else 0


class _Handler(BaseHTTPRequestHandler):
    server_version = "rewardlab-sandbox"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default
        if getattr(self.server, "verbose", False):
            super().log_message(fmt, *args)

    def _send(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") in ("/v1/ping", "/ping", "/health"):
            self._send(200, "pong")
        else:
            self._send(404, {"detail": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") not in ("/run_code", "/v1/run_code"):
            self._send(404, {"detail": "not found"})
            return
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 < n <= _MAX_BODY:
            self._send(413 if n > _MAX_BODY else 400, {"detail": "bad Content-Length"})
            return
        try:
            req = parse_body(self.rfile.read(n))
            self._send(200, run_code(req, pool=self.server.pool))  # type: ignore[attr-defined]
        except BadRequest as e:
            self._send(400, {"detail": f"bad request: {e}"})
        except Exception as e:  # noqa: BLE001 - one bad request must not stop the server
            self._send(200, {"status": "SandboxError", "message": f"{type(e).__name__}: {e}", "compile_result": None,
                             "run_result": None, "executor_pod_name": None, "files": {}})


def make_server(host: str = "127.0.0.1", port: int = 8080, *, tier: str | None = None,
                verbose: bool = False) -> ThreadingHTTPServer:
    """A threaded HTTP server answering ``POST /run_code`` (call ``serve_forever``)."""
    srv = ThreadingHTTPServer((host, port), _Handler)
    srv.daemon_threads = True
    srv.pool = get_pool(tier)  # type: ignore[attr-defined]
    srv.verbose = verbose  # type: ignore[attr-defined]
    return srv


def serve_in_thread(host: str = "127.0.0.1", port: int = 0, *,
                    tier: str | None = None) -> tuple[ThreadingHTTPServer, str]:
    """Start a server in a daemon thread; returns it and its ``/run_code`` URL (tests, notebooks)."""
    srv = make_server(host, port, tier=tier)
    threading.Thread(target=srv.serve_forever, name="rewardlab-fusion", daemon=True).start()
    return srv, f"http://{srv.server_address[0]}:{srv.server_address[1]}/run_code"
