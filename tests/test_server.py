"""The OpenRLHF remote-reward server through a real HTTP client on loopback (uvicorn + httpx)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest
import uvicorn

from rewardlab.rewards.base import RewardResult
from rewardlab.rewards.combine import Combined
from rewardlab.rewards.format import OneAnswer
from rewardlab.server import create_app


class LiveServer:
    """uvicorn serving ``app`` in a background thread on an ephemeral 127.0.0.1 port."""

    def __init__(self, app) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", backlog=256)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            time.sleep(0.01)
        raise RuntimeError("uvicorn did not start")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def boxed_label(completion: str, reference, **meta) -> RewardResult:
    """1.0 when the label appears boxed. No ``fast`` method: the pool scores it in worker processes."""
    if reference is None:
        return RewardResult(None, {"status": "no_reference"})
    return RewardResult(float("\\boxed{%s}" % reference in completion), {})


@pytest.fixture(scope="module")
def live():
    reward = Combined({"one": (OneAnswer(), 1.0), "label": (boxed_label, 0.5)})
    from rewardlab.rewards.pool import get_pool

    get_pool().warmup(1)  # start a worker before the first request (sympy preload takes seconds on a busy box)
    with LiveServer(create_app(reward, pool=True, deadline=60.0, max_batch=64)) as srv:
        yield srv


@pytest.fixture()
def client(live):
    """A real HTTP client; generous timeouts because CI machines are shared and slow, not to time anything."""
    with httpx.Client(base_url=live.url, timeout=120) as c:
        yield c


def test_health(client):
    r = client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "reward": "total"}


def test_get_reward_protocol(client):
    prompts = ["<|im_start|>user\nQ1<|im_end|>\n", "<|im_start|>user\nQ2<|im_end|>\n"]
    body = {
        "query": [prompts[0] + "<think>x</think><answer>\\boxed{4}</answer>", prompts[1] + "no answer"],
        "prompts": prompts,
        "labels": ["4", "5"],
    }
    r = client.post("/get_reward", json=body)
    assert r.status_code == 200
    data = r.json()
    assert data["rewards"] == pytest.approx([1.5, 0.0])
    assert data["scores"] == data["rewards"]
    assert data["extra_logs"]["one"] == [1.0, 0.0]
    assert data["extra_logs"]["label"] == [1.0, 0.0]
    assert data["extra_logs"]["label_graded"] == [1.0, 1.0]
    assert data["extra_logs"]["graded"] == [1.0, 1.0]
    # prompts and labels are optional; without a label that component is skipped, not 0
    r = client.post("/get_reward", json={"query": ["\\boxed{1}"]})
    assert r.status_code == 200 and r.json()["rewards"] == [1.0]
    assert r.json()["extra_logs"]["label_graded"] == [0.0]
    assert client.post("/get_reward", json={"query": []}).json()["rewards"] == []


@pytest.mark.parametrize(
    "content,status",
    [
        (b"{not json", 400),  # body is not JSON
        (b"[1, 2]", 400),  # JSON but not an object
        (b'{"prompts": ["a"]}', 422),  # no query
        (b'{"query": "abc"}', 422),  # query not a list
        (b'{"query": [1, 2]}', 422),  # query items not strings
        (b'{"query": ["a", "b"], "prompts": ["a"]}', 422),  # prompts length mismatch
        (b'{"query": ["a"], "labels": "x"}', 422),  # labels not a list
        (b'{"query": ["a"], "labels": ["x", "y"]}', 422),  # labels length mismatch
        (b'{"query": [' + b",".join([b'"q"'] * 65) + b"]}", 413),  # larger than max_batch
    ],
)
def test_malformed_requests_get_4xx(client, content, status):
    r = client.post("/get_reward", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert "error" in r.json()
    assert client.get("/health").status_code == 200  # and the server is still up


def test_wrong_method_and_path(client):
    assert client.get("/get_reward").status_code == 405
    assert client.post("/nope", json={}).status_code == 404


def test_1000_requests_from_50_concurrent_clients(live):
    n_clients, per_client = 50, 20

    async def client(i: int) -> list[tuple[int, list[float], list[float]]]:
        out = []
        async with httpx.AsyncClient(base_url=live.url, timeout=120) as c:
            for j in range(per_client):
                k = i * per_client + j
                boxed = "\\boxed{%d}" % k if k % 3 else "\\boxed{%d} \\boxed{%d}" % (k, k)
                body = {"query": [f"P{k} {boxed}", f"P{k} plain"], "prompts": [f"P{k}", f"P{k}"], "labels": [str(k), str(k)]}
                r = await c.post("/get_reward", json=body)
                want = [1.5 if k % 3 else 0.5, 0.0]  # two boxes: the label is there, one_answer is not paid
                out.append((r.status_code, r.json()["rewards"], want))
        return out

    async def main():
        return await asyncio.gather(*(client(i) for i in range(n_clients)))

    from rewardlab.rewards.pool import get_pool

    calls_before = get_pool().stats["calls"]
    results = [row for rows in asyncio.run(main()) for row in rows]
    assert get_pool().stats["calls"] - calls_before == 2000  # every item went through the worker pool
    assert len(results) == 1000
    assert all(status == 200 for status, _, _ in results)
    assert all(got == want for _, got, want in results)  # every answer matches its own request


def test_reward_specs_build_rewards():
    """``rewardlab serve --reward`` and OpenRLHF's ``REWARDLAB_REWARD`` share one spec parser."""
    from click.testing import CliRunner

    from rewardlab.adapters.openrlhf import parse_reward_spec
    from rewardlab.commands.serve import serve
    from rewardlab.errors import RewardlabError
    from rewardlab.rewards.combine import RewardSpecError, reward_from_specs

    assert reward_from_specs(["one_answer"]).name == "one_answer"
    combined = reward_from_specs(["one_answer", "format=0.1"])
    assert isinstance(combined, Combined) and combined.weights == {"one_answer": 1.0, "format": 0.1}
    assert parse_reward_spec("one_answer, format=0.1").weights == combined.weights
    assert reward_from_specs(["rewardlab.rewards.code.code_reward=0.5"]).names == ["code_reward"]
    with pytest.raises(RewardlabError, match="unknown reward"):
        reward_from_specs(["no_such_reward"])
    for bad in [["format=heavy"], ["=1"], ["format", "format=2"], ["format=inf"], []]:
        with pytest.raises(RewardSpecError):
            reward_from_specs(bad)
    result = CliRunner().invoke(serve, ["--help"])
    assert result.exit_code == 0 and "--reward" in result.output


def test_serve_unknown_reward_is_a_one_line_error(capsys):
    from rewardlab.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--reward", "no_such_reward", "--port", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown reward 'no_such_reward'") and "\n" not in err


@pytest.mark.parametrize("args, message", [
    (["--port", "70000"], "Invalid value for '--port'"),
    (["--workers", "0"], "Invalid value for '--workers'"),
    (["--port", "BUSY"], "cannot listen on 127.0.0.1:"),
])
def test_serve_bad_options_are_one_line_errors(capsys, args, message):
    from rewardlab.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        args = [str(busy.getsockname()[1]) if a == "BUSY" else a for a in args]
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", "--reward", "one_answer", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_rewardlab_serve_command_end_to_end(tmp_path):
    """The real CLI: ``python -m rewardlab serve`` in a subprocess, answered over loopback."""
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "rewardlab", "serve", "--port", str(port), "--reward", "one_answer",
           "--reward", "format=0.5", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        give_up = time.monotonic() + 180  # start-up wait on a shared machine, not a performance check
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"rewardlab serve exited: {proc.stdout.read()}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.1)
        body = {"query": ["Q <think>t</think><answer>\\boxed{2}</answer>"], "prompts": ["Q "], "labels": ["2"]}
        r = httpx.post(f"{url}/get_reward", json=body, timeout=120)
        assert r.status_code == 200
        assert r.json()["rewards"] == [1.5]
        assert httpx.post(f"{url}/get_reward", content=b"nope", timeout=120).status_code == 400
    finally:
        proc.terminate()
        proc.wait(timeout=20)
