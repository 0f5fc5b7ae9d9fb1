"""The OpenRLHF remote-reward server through a real HTTP client on loopback (uvicorn + httpx)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest

from rewardlab.rewards.base import RewardResult
from rewardlab.rewards.combine import Combined
from rewardlab.rewards.format import OneAnswer
from rewardlab.rollout.driven import LoopbackServer as LiveServer  # noqa: F401  (other tests import it from here)
from rewardlab.server import create_app


def boxed_label(completion: str, reference, **meta) -> RewardResult:
    """1.0 when the label appears boxed. No ``fast`` method: the pool scores it in worker processes."""
    if reference is None:
        return RewardResult(None, {"status": "no_reference"})
    return RewardResult(float("\\boxed{%s}" % reference in completion), {})


def live_reward() -> Combined:
    return Combined({"one": (OneAnswer(), 1.0), "label": (boxed_label, 0.5)})


@pytest.fixture(scope="module")
def live():
    reward = live_reward()
    from rewardlab.rewards.pool import get_pool

    get_pool().warmup(1)  # start a worker before the first request (sympy preload takes seconds on a busy box)
    with LiveServer(create_app(reward, pool=True, deadline=60.0, max_batch=64, max_body=16384)) as srv:
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
    # a null label means "no reference": that component is skipped, not 0; "queries" is accepted for "query"
    r = client.post("/get_reward", json={"queries": ["\\boxed{1}"], "prompts": [""], "labels": [None]})
    assert r.status_code == 200 and r.json()["rewards"] == [1.0]
    assert r.json()["extra_logs"]["label_graded"] == [0.0]
    r = client.post("/get_reward", json={"query": [], "prompts": [], "labels": []})  # an empty batch: empty lists
    assert r.status_code == 200 and r.json()["rewards"] == [] and r.json()["scores"] == []


def _body(**over) -> bytes:
    """A valid two-sample request with ``over`` replacing (or, as ``None``, deleting) top-level keys."""
    body = {"query": ["Q1 \\boxed{4}", "Q2 x"], "prompts": ["Q1 ", "Q2 "], "labels": ["4", "5"]}
    for k, v in over.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return json.dumps(body).encode()


# (what is wrong, body bytes, status, words the one-line reason must contain)
MALFORMED = [
    ("not JSON", b"{not json", 400, "not valid JSON"),
    ("empty body", b"", 400, "empty"),
    ("not UTF-8", b'{"query": ["\xff"]}', 400, "not"),
    ("NaN is not JSON", b'{"query": ["a"], "prompts": ["a"], "labels": [NaN]}', 400, "NaN"),
    ("nested too deeply", b"[" * 5000 + b"]" * 5000, 400, "nested too deeply"),
    ("JSON list, not an object", b"[1, 2]", 400, "JSON object"),
    ("JSON string, not an object", b'"query"', 400, "JSON object"),
    ("misspelt query key", _body(query=None, querys=["a", "b"]), 422, "unknown key 'querys' (did you mean 'query'?)"),
    ("misspelt labels key", _body(labels=None, lables=["4", "5"]), 422, "'lables' (did you mean 'labels'?)"),
    ("extra key", _body(extra=1), 422, "unknown key 'extra'"),
    ("both query and queries", _body(queries=["a", "b"]), 422, "not both"),
    ("missing labels", _body(labels=None), 422, "missing 'labels'"),
    ("missing prompts", _body(prompts=None), 422, "missing 'prompts'"),
    ("missing query", _body(query=None), 422, "missing 'query'"),
    ("empty object", b"{}", 422, "missing 'query', 'prompts', 'labels'"),
    ("query is a string", _body(query="abc"), 422, "'query' must be a list of strings, got a string"),
    ("query null", b'{"query": null, "prompts": [], "labels": []}', 422, "'query' must be a list of strings, got null"),
    ("query items not strings", _body(query=[1, 2]), 422, "query[0] must be a string, got a number"),
    ("prompts items not strings", _body(prompts=["a", None]), 422, "prompts[1] must be a string, got null"),
    ("prompts too short", _body(prompts=["a"]), 422, "'prompts' has 1 items but 'query' has 2"),
    ("labels not a list", _body(labels="4"), 422, "'labels' must be a list"),
    ("labels too long", _body(labels=["4", "5", "6"]), 422, "'labels' has 3 items but 'query' has 2"),
    ("labels empty", _body(labels=[]), 422, "'labels' has 0 items but 'query' has 2"),
    ("batch over max_batch", _body(query=["q"] * 65, prompts=[""] * 65, labels=[None] * 65), 413, "server limit of 64"),
    ("body over max_body", _body(query=["q" * 20_000, "x"]), 413, "bytes exceeds the server limit of 16384 bytes"),
]


@pytest.mark.parametrize("what,content,status,reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_requests_get_4xx_with_a_one_line_reason(client, what, content, status, reason):
    r = client.post("/get_reward", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert reason in error and "\n" not in error and len(error) < 400, error
    assert "rewards" not in r.json()  # never scored
    assert client.get("/health").status_code == 200  # and the server is still up


def test_labels_are_never_refused_and_follow_the_file_mode_rule(client):
    """A label is a dataset value: a list is a set of accepted answers (best score wins), a label
    that can be no reference (a boolean, a nested list) is an ungraded sample, never a 4xx (which
    OpenRLHF would retry five times and then train without a reward)."""
    query = ["Q \\boxed{4}"] * 5
    labels = [["5", "4"], ["5", "6"], [], True, [["4"]]]
    r = client.post("/get_reward", json={"query": query, "prompts": ["Q "] * 5, "labels": labels})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["extra_logs"]["label"] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert data["extra_logs"]["label_graded"] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert data["extra_logs"]["graded"] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert data["rewards"] == pytest.approx([1.5, 1.0, 1.0, 0.0, 0.0])
    from rewardlab.adapters.openrlhf import rewards_payload, score_queries

    from_file_mode = rewards_payload(score_queries(live_reward(), query, ["Q "] * 5, labels))
    assert from_file_mode == data


def test_a_streamed_body_over_the_limit_is_413(client):
    """No Content-Length (chunked upload): the limit is enforced while reading."""
    def chunks():
        yield b'{"query": ["'
        for _ in range(20):
            yield b"q" * 1000
        yield b'"], "prompts": [""], "labels": [null]}'

    r = client.post("/get_reward", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "exceeds the server limit" in r.json()["error"]


def test_wrong_method_and_path(client):
    r = client.get("/get_reward")
    assert r.status_code == 405 and r.json() == {"error": "GET /get_reward: method not allowed, use POST"}
    assert r.headers["allow"] == "POST"
    r = client.post("/health", json={})
    assert r.status_code == 405 and "use GET" in r.json()["error"]
    r = client.post("/nope", json={})
    assert r.status_code == 404 and r.json()["error"] == "no endpoint /nope; use POST /get_reward or GET /health"


def test_1000_requests_from_50_concurrent_clients(live):
    n_clients, per_client = 50, 20

    async def client(i: int) -> list[tuple[int, list[float], list[float]]]:
        out = []
        async with httpx.AsyncClient(base_url=live.url, timeout=120) as c:
            for j in range(per_client):
                k = i * per_client + j
                boxed = "\\boxed{%d}" % k if k % 3 else "\\boxed{%d} \\boxed{%d}" % (k, k)
                body = {"query": [f"P{k} {boxed}", f"P{k} plain"], "prompts": [f"P{k}", f"P{k}"],
                        "labels": [str(k), str(k)]}
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
