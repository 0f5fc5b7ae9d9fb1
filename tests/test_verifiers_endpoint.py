"""A real verifiers 0.4 (v1) environment driven through rewardlab's policy endpoint, token-exactly.

verifiers records training tokens only through its train client, which renders the prompt to ids itself and
calls the endpoint's ``/inference/v1/generate`` (vLLM's token-in / token-out format). The episode's trace must
hold exactly the ids the engine sampled, each with the trainer's log-prob, and the taskset's own reward.

verifiers' chat harness runs its small chat program through ``uv sync --script``, which fetches packages from
the internet; this machine is offline, so the test runs that program with this interpreter instead (its imports,
openai / mcp / httpx, are installed by setup). That shim is the only thing replaced: the environment, its
taskset, reward, harness, runtime and train client are verifiers' own.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
import torch

from rewardlab.envs.verifiers_env import run_on_loop
from rewardlab.rollout import SamplingParams, behaviour, format_prompt, make_engine
from rewardlab.rollout.endpoint import ServedPolicy, create_app
from test_endpoint import Scripted
from test_server import LiveServer

vf = pytest.importorskip("verifiers.v1")


@pytest.fixture
def offline_harness(monkeypatch, tmp_path):
    from verifiers.v1.runtimes.base import Runtime

    async def local(self, script, env=None, *, activate=True):  # run the chat program with this interpreter
        path = tmp_path / f"chat_{os.getpid()}_{len(list(tmp_path.iterdir()))}.py"
        path.write_bytes(script.encode() if isinstance(script, str) else script)
        return [sys.executable, str(path)]

    monkeypatch.setattr(Runtime, "prepare_uv_script", local)


def run_episodes(url: str, model_dir: str, n: int, temperature: float) -> list:
    from verifiers.v1.envs.single_agent import SingleAgentEnvConfig
    from verifiers.v1.runtimes import SubprocessConfig

    env = vf.load_environment(SingleAgentEnvConfig(
        taskset=vf.TasksetConfig(id="vf_tiny_qa"),
        agent=vf.AgentConfig(harness=vf.HarnessConfig(id="null"), runtime=SubprocessConfig())))
    client = vf.TrainClientConfig(base_url=f"{url}/v1", renderer_model_name=model_dir)
    ctx = vf.ModelContext(model="tiny", client=client, sampling=vf.Sampling(temperature=temperature, max_tokens=8))

    async def go():
        async with env.serving():
            slots = [s for task in env.taskset for s in env.slots(task, n)]
            return await asyncio.gather(*(env.run_slot(s, ctx) for s in slots))

    return run_on_loop(go())  # verifiers' one loop per process (an asyncio.run here broke later episodes elsewhere)


def test_a_verifiers_episode_holds_the_engines_tokens_the_trainers_logprobs_and_its_own_reward(
        tiny_model_dir, offline_harness):
    from rewardlab.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    model.eval()
    policy = ServedPolicy(make_engine("hf", model, tok), tok, name="tiny", max_model_len=512)
    with LiveServer(create_app(policy)) as live:
        episodes = run_episodes(live.url, str(tiny_model_dir), n=2, temperature=1.0)
    traces = [tr for ep in episodes for tr in ep.traces]
    assert len(traces) == 4 and all(ep.ok for ep in episodes), [e.message for ep in episodes for e in ep.errors]
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
    for tr in traces:
        (branch,) = tr.branches
        ids, mask = list(branch.token_ids), [bool(m) for m in branch.sampled_mask]
        start = mask.index(True)
        assert mask[start:] == [True] * (len(ids) - start) and 0 < len(ids) - start <= 8
        # the prompt verifiers rendered is the chat template's, token for token (no re-tokenised drift)
        user = tr.task.data.prompt
        assert ids[:start] == tok(format_prompt(tok, [{"role": "user", "content": user}]))["input_ids"]
        # every sampled token carries the trainer's log-prob of it after exactly these ids (one forward pass)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[:, start - 1:-1]  # (1, C, V)
        want, _ = behaviour.logprobs(logits.float(), torch.tensor([ids[start:]]), sampling)
        assert [lp for lp, m in zip(branch.logprobs, mask) if m] == pytest.approx(want[0].tolist(), abs=1e-4)
        assert tr.reward == float(tr.task.data.answer in tr.last_reply)  # the taskset's rule on what was sampled


def test_the_tasksets_reward_pays_the_answer_the_policy_gave(tiny_model_dir, offline_harness):
    from rewardlab.models import load_model

    _, tok = load_model(str(tiny_model_dir))
    engine = Scripted(tok, "The answer is 5")  # an engine that answers the same whatever it is asked
    five = list(engine.ids)
    policy = ServedPolicy(engine, tok, name="tiny", max_model_len=512)
    with LiveServer(create_app(policy)) as live:
        episodes = run_episodes(live.url, str(tiny_model_dir), n=1, temperature=1.0)
    rewards = {tr.task.data.prompt: tr.reward for ep in episodes for tr in ep.traces}
    assert rewards == {"What is 2 + 3?": 1.0, "What is 4 + 4?": 0.0}
    for ep in episodes:
        (branch,) = ep.traces[0].branches
        sampled = [i for i, m in zip(branch.token_ids, branch.sampled_mask) if m]
        assert sampled == five  # the engine's answer, its own ids
