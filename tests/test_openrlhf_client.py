"""rewardlab inside OpenRLHF's own reward client (OpenRLHF 0.11.2, ``openrlhf.utils.agent``).

``SingleTurnAgentExecutor`` is what OpenRLHF's vLLM actors run for every sample: it tokenizes the
prompt, asks the engine for a continuation, decodes prompt + response as the query and gets the
reward from ``--reward.remote_url``: a ``.py`` file is loaded and its ``reward_func`` called in a
thread; anything else is an HTTP endpoint, POSTed ``{"query", "prompts", "labels"}`` with five
tries (then reward ``None``). Here the engine is scripted (no vLLM) and the tokenizer is the tiny
local one; the file is ``rewardlab/adapters/openrlhf.py`` and the endpoint is ``rewardlab serve``
started as the README says, on a free 127.0.0.1 port. Both must give the same rewards for the
same samples, list labels included.
"""

from __future__ import annotations

import ast
import asyncio
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

agent = pytest.importorskip("openrlhf.utils.agent", reason="openrlhf is installed by setup.sh")
import openrlhf  # noqa: E402

from rewardlab.adapters import openrlhf as adapter  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SPEC = ["math", "one_answer=0.1"]  # the README's `rewardlab serve --reward math --reward one_answer=0.1`

PROMPT = "<|im_start|>user\nWhat is 2 + 2? Put the answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"

# (what, response, label, reward, extra_logs): the one rule for labels, the same in both modes
CASES = [
    ("right", r"so \boxed{4}", "4", 1.1, {"graded": 1.0, "math": 1.0, "math_graded": 1.0}),
    ("wrong", r"so \boxed{5}", "4", 0.1, {"graded": 1.0, "math": 0.0, "math_graded": 1.0}),
    ("number label", r"so \boxed{4}", 4, 1.1, {"graded": 1.0, "math": 1.0, "math_graded": 1.0}),
    ("list: any answer", r"so \boxed{4}", ["5", "4"], 1.1, {"graded": 1.0, "math": 1.0, "math_graded": 1.0}),
    ("list: none", r"so \boxed{4}", ["5", "6"], 0.1, {"graded": 1.0, "math": 0.0, "math_graded": 1.0}),
    ("list of one", r"so \boxed{4}", ["4"], 1.1, {"graded": 1.0, "math": 1.0, "math_graded": 1.0}),
    ("empty list = no reference", r"so \boxed{4}", [], 0.1, {"graded": 1.0, "math": 0.0, "math_graded": 0.0}),
    ("null = no reference", r"so \boxed{4}", None, 0.1, {"graded": 1.0, "math": 0.0, "math_graded": 0.0}),
    ("boolean: ungradable", r"so \boxed{4}", True, 0.0, {"graded": 0.0, "math": 0.0, "math_graded": 0.0,
                                                         "one_answer": 0.0, "one_answer_graded": 0.0}),
    ("nested list: ungradable", r"so \boxed{4}", [["4"]], 0.0, {"graded": 0.0, "math_graded": 0.0,
                                                                 "one_answer_graded": 0.0}),
]


class ScriptedEngine:
    """The one method OpenRLHF's executor calls on its vLLM engine, answering a fixed response."""

    def __init__(self, tok, response: str) -> None:
        self.tok, self.response = tok, response

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        ids = self.tok.encode(self.response, add_special_tokens=False)
        out = SimpleNamespace(token_ids=ids, text=self.response, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def run_executor(executor, tok, response: str, label) -> dict:
    params = SimpleNamespace(max_tokens=64, logprobs=None)  # the two fields the executor reads
    return asyncio.run(executor.execute(PROMPT, label, params, 1024, tok, ScriptedEngine(tok, response)))


def reward_number(value) -> float:
    """What OpenRLHF's samples generator makes of the reward (``torch.tensor([reward])``): one number."""
    import torch

    t = torch.tensor([value.tolist() if isinstance(value, torch.Tensor) else value], dtype=torch.float32).flatten()
    assert t.numel() == 1, value
    return float(t[0])


def plain_logs(extra_logs: dict) -> dict[str, float]:
    """extra_logs as OpenRLHF turns them into per-sample info (a tensor's first item, or the number)."""
    import torch

    out = {}
    for k, v in extra_logs.items():
        v = v.flatten()[0].item() if isinstance(v, torch.Tensor) else (v[0] if isinstance(v, list) else v)
        out[k] = float(v)
    return out


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from rewardlab.testing import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def served():
    """``rewardlab serve`` (the real CLI, in a subprocess) on a free loopback port."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "rewardlab", "serve", "--host", "127.0.0.1", "--port", str(port),
           *[a for spec in SPEC for a in ("--reward", spec)], "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    give_up = time.monotonic() + 180  # start-up on a shared machine, not a performance check
    try:
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
        yield f"{url}/get_reward"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def executors(served):
    """OpenRLHF's executor for each README mode: the HTTP endpoint, and our adapter file."""
    old = os.environ.get("REWARDLAB_REWARD")
    os.environ["REWARDLAB_REWARD"] = ",".join(SPEC)
    try:
        file_mode = agent.SingleTurnAgentExecutor(adapter.__file__)  # OpenRLHF loads the file itself
        assert file_mode.reward_func is not None
        yield {"http": agent.SingleTurnAgentExecutor(served), "file": file_mode}
    finally:
        if old is None:
            os.environ.pop("REWARDLAB_REWARD", None)
        else:
            os.environ["REWARDLAB_REWARD"] = old


@pytest.mark.parametrize("mode", ["http", "file"])
@pytest.mark.parametrize("what,response,label,reward,logs", CASES, ids=[c[0] for c in CASES])
def test_openrlhf_client_gets_the_same_rewards(executors, tok, mode, what, response, label, reward, logs):
    out = run_executor(executors[mode], tok, response, label)
    assert out["reward"] is not None, f"{mode}: OpenRLHF got no reward (it logs the error at info level)"
    assert reward_number(out["reward"]) == pytest.approx(reward)
    assert reward_number(out["scores"]) == pytest.approx(reward)
    got = plain_logs(out["extra_logs"])
    # the same keys on every call: OpenRLHF stacks extra_logs across samples
    assert set(got) == {"graded", "math", "math_graded", "one_answer", "one_answer_graded"}
    for k, v in logs.items():
        assert got[k] == pytest.approx(v), (k, got)
    assert all(math.isfinite(v) for v in got.values())


def test_both_modes_agree_sample_by_sample(executors, tok):
    """Identical numbers from the file and the server for every sample, not only the expected ones."""
    http = [run_executor(executors["http"], tok, r, label) for _, r, label, _, _ in CASES]
    file = [run_executor(executors["file"], tok, r, label) for _, r, label, _, _ in CASES]
    for (what, *_), h, f in zip(CASES, http, file):
        assert reward_number(h["reward"]) == reward_number(f["reward"]), what
        assert plain_logs(h["extra_logs"]) == plain_logs(f["extra_logs"]), what


def test_label_references_rule():
    assert adapter.label_references("4") == ["4"]
    assert adapter.label_references(["4", "four"]) == ["4", "four"]
    assert adapter.label_references([]) == [None]
    assert adapter.label_references(None) == [None]
    assert adapter.label_references(True) is None and adapter.label_references([["4"]]) is None
    assert (adapter.label_references(['{"inputs": ["1"], "outputs": ["2"]}'])
            == [{"cases": [{"stdin": "1", "stdout": "2"}]}])
    res = adapter.score_queries("math", ["Q \\boxed{4}"], ["Q "], [["5", "4", "4.0"]])
    assert res[0].score == 1.0 and res[0].info["label_index"] == 1 and res[0].info["label_choices"] == 3


def test_readme_openrlhf_flags_exist_in_openrlhf():
    """Every ``--flag`` the README gives ``openrlhf.cli.train_ppo_ray`` is one its parser defines."""
    text = README.read_text()
    section = text[text.index("## Rewards in your trainer"):]
    section = section[: section.index("\n## ", 1)]
    block = next(b for b in section.split("```") if "openrlhf.cli.train_ppo_ray" in b)
    ours = {"--host", "--port", "--reward"}  # rewardlab serve's own options
    flags = set(re.findall(r"(?<![\w-])--[a-z][\w.]*", block[block.index("# OpenRLHF"):])) - ours
    assert flags >= {"--reward.remote_url", "--data.label_key"}, flags
    source = (Path(openrlhf.__file__).parent / "cli" / "train_ppo_ray.py").read_text()
    defined = {node.args[0].value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
               and node.args and isinstance(node.args[0], ast.Constant)}
    assert flags <= defined, sorted(flags - defined)
    assert "/get_reward" in block  # the path rewardlab serve answers


def test_version_under_test():
    from importlib.metadata import version

    assert version("openrlhf") == "0.11.2"
