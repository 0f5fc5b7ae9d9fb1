"""Multi-turn tool-using rollouts (rewardlab/rollout/multiturn.py) on the tiny random model.

The token-exactness test samples with the real model. Tool calls are made deterministic with
:class:`scripted.Scripted` (tests/scripted.py), a wrapper that runs the real model and forces a
scripted token sequence at the start of a trajectory (and, with ``times > 1``, after each
observation); forced tokens have log-prob 0 and are still recorded as sampled.
"""

from __future__ import annotations

import time

import pytest
import torch

from rewardlab.rollout.base import SamplingParams
from rewardlab.rollout.multiturn import Trajectory, extract_code
from rewardlab.rollout.python_tool import rollout_with_tools
from rewardlab.rollout.tool_settings import FIELDS, ToolSettings
from rewardlab.sandbox import Limits, execute
from scripted import Scripted, assert_sampler_logprobs


def rollout(model, tok, prompts, n, sampling, **kw):
    """:func:`rollout_with_tools` with the tool settings given as keywords (:class:`ToolSettings`' field names)."""
    settings = ToolSettings(**{k: kw.pop(k) for k in FIELDS if k in kw})
    return rollout_with_tools(model, tok, prompts, n, sampling, settings=settings, **kw)


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return model, tok


def _sampling(max_new_tokens=64, seed=0, **kw):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=seed, **kw)


def _check_shape(t: Trajectory, budget: int):
    assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs) <= budget
    for m, lp in zip(t.loss_mask, t.logprobs):
        assert (m == 1) == (lp is not None)


def test_extract_code():
    assert extract_code("x ```python\nprint(1)\n``` y") == "print(1)"
    assert extract_code("```python\nprint(1)\n") is None
    assert extract_code("```\nprint(1)\n```") is None


def test_token_exact_logprobs_with_the_real_model(lm):
    """The trainer's log-probs of a trajectory equal the sampler's, at every sampled position."""
    model, tok = lm
    prompts = ["What is 3 plus 4?", "def add(a, b):"]
    t0 = time.monotonic()
    trajs = rollout(model, tok, prompts, n=2, sampling=_sampling(32, seed=1), execute=execute,
                               max_turns=2, max_total_tokens=40)
    assert time.monotonic() - t0 < 20
    assert len(trajs) == 4 and [t.prompt_index for t in trajs] == [0, 0, 1, 1]
    assert trajs[0].token_ids != trajs[1].token_ids  # n samples differ
    for t in trajs:
        _check_shape(t, 40)
        assert t.finish_reason in ("stop", "length", "max_turns")
        assert_sampler_logprobs(model, t)
    again = rollout(model, tok, prompts[:1], n=2, sampling=_sampling(32, seed=1), execute=execute,
                               max_turns=2, max_total_tokens=40)
    assert [t.token_ids for t in again] == [t.token_ids for t in trajs[:2]]  # seeded: reproducible


def test_logprobs_are_under_the_warped_distribution(lm):
    """temperature / top-k: the recorded log-prob is log_softmax(top_k(logits / T)) at the token."""
    model, tok = lm
    T, K = 0.7, 20
    (t,) = rollout(model, tok, ["Hello"], n=1,
                              sampling=SamplingParams(max_new_tokens=16, temperature=T, top_k=K, seed=5),
                              execute=execute, max_total_tokens=16)
    full = torch.tensor([t.prompt_ids + t.token_ids])
    with torch.no_grad():
        logits = model(input_ids=full).logits[0].float() / T
    kth = logits.topk(K, dim=-1).values[:, -1:]
    logp = torch.log_softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)
    P = len(t.prompt_ids)
    for k, (tid, lp) in enumerate(zip(t.token_ids, t.logprobs)):
        assert abs(float(logp[P + k - 1, tid]) - lp) < 1e-4


def test_unclosed_block_is_not_a_tool_call(lm):
    model, tok = lm
    script = tok.encode("```python\nprint(1)\n", add_special_tokens=False) + [tok.eos_token_id]
    (t,) = rollout(Scripted(model, script), tok, ["Go:"], n=1, sampling=_sampling(32, seed=0),
                              execute=execute, max_total_tokens=64)
    assert t.token_ids == script and t.finish_reason == "stop" and t.tool_calls == 0
    assert len(t.turns) == 1 and t.turns[0]["code"] is None and t.turns[0]["observation"] is None


def test_token_exact_across_an_inserted_observation(lm):
    """With a tool call in the middle, the real model's forward over prompt + trajectory still
    reproduces the sampled log-probs after the observation (scripted tokens have log-prob 0)."""
    model, tok = lm
    script = tok.encode("```python\nprint(2+3)\n```", add_special_tokens=False)
    wrapped = Scripted(model, script, times=1)
    (t,) = rollout(wrapped, tok, ["Compute:"], n=1, sampling=_sampling(32, seed=3), execute=execute,
                              max_turns=3, max_total_tokens=80)
    _check_shape(t, 80)
    assert t.tool_calls == 1
    assert t.token_ids[: len(script)] == script and t.logprobs[: len(script)] == [0.0] * len(script)
    o0, o1 = t.turns[0]["observation"]
    assert o0 == len(script) and o1 < len(t.token_ids)  # generation continued after the observation
    assert set(t.loss_mask[o1:]) == {1}
    assert_sampler_logprobs(model, t, o1)


def test_scripted_tool_call_inserts_the_output(lm):
    model, tok = lm
    script = tok.encode("```python\nprint(2+3)\n```", add_special_tokens=False)
    (t,) = rollout(Scripted(model, script), tok, ["Compute:"], n=1, sampling=_sampling(24, seed=0),
                              execute=execute, max_turns=3, max_total_tokens=96)
    _check_shape(t, 96)
    assert t.tool_calls == 1
    turn = t.turns[0]
    assert turn["code"] == "print(2+3)" and turn["status"] == "ok" and turn["stdout"] == "5\n"
    assert turn["sampled"] == [0, len(script)]
    o0, o1 = turn["observation"]
    obs = t.token_ids[o0:o1]
    assert obs == tok.encode("\n```output\n5\n```\n", add_special_tokens=False)  # only the observation encoded
    assert "5" in tok.decode(obs) and set(t.loss_mask[o0:o1]) == {0} and set(t.logprobs[o0:o1]) == {None}
    assert o1 < len(t.token_ids) and t.loss_mask[o1] == 1  # the model went on sampling
    assert len(t.turns) == 2 and t.turns[1]["sampled"][0] == o1
    assert "```output\n5\n```" in t.text


def test_timeout_and_flood_are_reported(lm):
    model, tok = lm
    loop = tok.encode("```python\nwhile True: pass\n```", add_special_tokens=False)
    t0 = time.monotonic()
    (t,) = rollout(Scripted(model, loop), tok, ["Go:"], n=1, sampling=_sampling(32, seed=0),
                              execute=execute, max_turns=1, max_total_tokens=64, tool_timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert t.turns[0]["status"] == "timeout" and "timed out" in tok.decode(t.token_ids)
    assert t.finish_reason == "max_turns"

    flood = tok.encode("```python\nprint('x' * 10**6)\n```", add_special_tokens=False)
    (t,) = rollout(Scripted(model, flood), tok, ["Go:"], n=1, sampling=_sampling(32, seed=0),
                              execute=execute, max_turns=1, max_total_tokens=400, tool_output_chars=50)
    turn = t.turns[0]
    assert turn["status"] == "ok" and turn["truncated"] and turn["stdout"] == "x" * 50
    assert "[output truncated]" in t.text

    def small_cap(code, **kw):  # a sandbox whose output cap is below the flood: an output_limit verdict
        return execute(code, limits=Limits(output_kb=16), **kw)

    (t,) = rollout(Scripted(model, flood), tok, ["Go:"], n=1, sampling=_sampling(32, seed=0),
                              execute=small_cap, max_turns=1, max_total_tokens=400)
    assert t.turns[0]["status"] == "output_limit" and "output limit" in t.text


def test_max_turns(lm):
    model, tok = lm
    script = tok.encode("```python\nprint(1)\n```", add_special_tokens=False)
    (t,) = rollout(Scripted(model, script, times=10), tok, ["Go:"], n=1, sampling=_sampling(32, seed=0),
                              execute=execute, max_turns=2, max_total_tokens=200)
    assert t.finish_reason == "max_turns" and t.tool_calls == 2
    assert [turn["code"] for turn in t.turns] == ["print(1)", "print(1)"]
    assert t.turns[-1]["observation"][1] == len(t.token_ids)  # stopped right after the 2nd observation
    _check_shape(t, 200)


def test_token_budget(lm):
    model, tok = lm
    for budget in (1, 7, 30):
        trajs = rollout(model, tok, ["Hello"], n=2, sampling=_sampling(64, seed=2), execute=execute,
                                   max_total_tokens=budget)
        for t in trajs:
            _check_shape(t, budget)
            assert t.finish_reason == "stop" or len(t.token_ids) == budget
    # the budget also cuts an observation (inserted tokens count)
    script = tok.encode("```python\nprint(2+3)\n```", add_special_tokens=False)
    budget = len(script) + 3
    (t,) = rollout(Scripted(model, script), tok, ["Go:"], n=1, sampling=_sampling(64, seed=0),
                              execute=execute, max_total_tokens=budget)
    assert len(t.token_ids) == budget and t.finish_reason == "length" and t.loss_mask[-3:] == [0, 0, 0]


def test_execute_is_required(lm):
    from rewardlab.errors import RewardlabError

    model, tok = lm
    with pytest.raises(RewardlabError, match="execute"):
        rollout(model, tok, ["x"], n=1, sampling=_sampling(4))


def test_empty_block_is_a_malformed_call_with_an_observation_that_says_so(lm):
    model, tok = lm
    script = tok.encode("```python\n```", add_special_tokens=False)
    (t,) = rollout(Scripted(model, script), tok, ["Go:"], n=1, sampling=_sampling(16, seed=0),
                              execute=execute, max_turns=1, max_total_tokens=80)
    assert t.tool_calls == 1 and t.turns[0]["status"] == "malformed" and t.turns[0]["sandbox_status"] is None
    o0, o1 = t.turns[0]["observation"]
    assert "[malformed] empty code block" in tok.decode(t.token_ids[o0:o1])


def test_a_syntax_error_is_an_error_observation(lm):
    model, tok = lm
    script = tok.encode("```python\nprint(1 +\n```", add_special_tokens=False)
    (t,) = rollout(Scripted(model, script), tok, ["Go:"], n=1, sampling=_sampling(16, seed=0),
                              execute=execute, max_turns=1, max_total_tokens=120)
    assert t.turns[0]["status"] == "error" and "SyntaxError" in t.text


def test_trajectories_do_not_depend_on_the_batching(lm):
    """One random stream per trajectory: batch size 1 and 64 sample the same tokens."""
    model, tok = lm
    kw = dict(n=3, sampling=_sampling(12, seed=4), execute=execute, max_total_tokens=20)
    one = rollout(model, tok, ["a", "bb b"], batch_size=1, **kw)
    all_ = rollout(model, tok, ["a", "bb b"], batch_size=64, **kw)
    assert [t.token_ids for t in one] == [t.token_ids for t in all_]
    for a, b in zip(one, all_):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


# Attacks made from inside an episode: each is the model's tool call; each must be contained (the check),
# and the trajectory goes on with an observation. Rows: (name, code, check(trajectory, context) -> None).
def _no_file(t, ctx):
    assert not ctx["victim"].exists()


def _no_secret(t, ctx):
    assert "rlsecret-" not in t.text


def _no_connection(t, ctx):
    ctx["server"].settimeout(0.2)
    with pytest.raises(OSError):  # socket.timeout: nobody connected
        ctx["server"].accept()


def _timed_out(t, ctx):
    assert t.turns[0]["status"] == "timeout"


ATTACKS = [
    ("write outside the scratch dir", "open('{victim}', 'w').write('pwned')\nprint('done')", _no_file),
    ("read the trainer's secret env", "import os\nprint(os.environ.get('SECRET_TOKEN'))", _no_secret),
    ("kill the parent", "import posix\nposix.kill(posix.getppid(), 9)\nprint('x')", lambda t, ctx: None),
    ("connect to the trainer's port", "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
     _no_connection),
    ("sleep forever", "import time\ntime.sleep(3600)", _timed_out),
]


@pytest.mark.parametrize("name,code,check", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attacks_inside_an_episode_are_contained(lm, tmp_path, monkeypatch, name, code, check):
    import socket

    model, tok = lm
    monkeypatch.setenv("SECRET_TOKEN", "rlsecret-do-not-leak")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    ctx = {"victim": tmp_path / "pwned", "server": server}
    script = tok.encode("```python\n" + code.format(victim=ctx["victim"], port=server.getsockname()[1]) + "\n```",
                        add_special_tokens=False)
    t0 = time.monotonic()
    (t,) = rollout(Scripted(model, script), tok, ["Go:"], n=1, sampling=_sampling(len(script) + 8, seed=0),
                              execute=execute, max_turns=2, max_total_tokens=len(script) + 120, tool_timeout=1.0)
    assert time.monotonic() - t0 < 30
    assert t.tool_calls == 1 and t.turns[0]["observation"] is not None  # counted, and answered with an observation
    assert t.turns[0]["status"] is not None
    check(t, ctx)
    server.close()


class ContinuingEngine:
    """Stands in for the vLLM engine's ``continue_ids`` (vLLM is not installed here): continues exact ids
    with the tiny model, one token at a time, stopping at EOS, ``max_tokens`` or a stop string (keeping the
    token that completes it), as vLLM does. A context without ``script`` in it gets the script first."""

    def __init__(self, model, tok, script):
        self.model, self.tok, self.script, self.calls = model, tok, script, []

    def continue_ids(self, contexts, sampling, *, max_tokens, seeds, stop):
        self.calls.append(len(contexts))
        out = []
        for ctx, m, seed in zip(contexts, max_tokens, seeds):
            gen = torch.Generator().manual_seed(seed)
            ids, lps, reason = [], [], "length"
            while len(ids) < m:
                has_script = any(ctx[i : i + len(self.script)] == self.script for i in range(len(ctx)))
                k = next((j for j in range(len(self.script), 0, -1) if ctx[-j:] == self.script[:j]), 0)
                if not has_script:  # forced: the script's next token
                    token, lp = self.script[k], 0.0
                else:
                    with torch.no_grad():
                        logp = torch.log_softmax(self.model(input_ids=torch.tensor([ctx])).logits[0, -1].float(), -1)
                    token = int(torch.multinomial(logp.exp(), 1, generator=gen))
                    lp = float(logp[token])
                ctx, ids, lps = ctx + [token], ids + [token], lps + [lp]
                if token == self.tok.eos_token_id:
                    reason = "stop"
                    break
                if any(s in self.tok.decode(ids) for s in stop):
                    reason = "stop_string"
                    break
            out.append((ids, lps, reason))
        return out


def test_the_engine_path_continues_exact_ids_across_fences_and_tools(lm):
    model, tok = lm
    script = tok.encode("```python\nprint(2+3)\n```", add_special_tokens=False)
    engine = ContinuingEngine(model, tok, script)
    (t,) = rollout(None, tok, ["Compute:"], n=1, sampling=_sampling(40, seed=3), execute=execute,
                              max_turns=2, max_total_tokens=90, engine=engine)
    _check_shape(t, 90)
    assert t.token_ids[: len(script)] == script and t.turns[0]["code"] == "print(2+3)" and t.turns[0]["stdout"] == "5\n"
    assert len(engine.calls) >= 3  # the opening fence, the closing fence, then the turn after the observation
    o1 = t.turns[0]["observation"][1]
    assert t.token_ids[t.turns[0]["observation"][0] : o1] == tok.encode("\n```output\n5\n```\n",
                                                                        add_special_tokens=False)
    assert_sampler_logprobs(model, t, o1)


def test_chat_format_observations_are_the_templates_tool_message(lm):
    """``tool_format="chat"``: the output comes back as a ``tool`` message rendered by the chat template,
    which adds its own tokens around it (end of the assistant turn, the tool header, the assistant header);
    the ids up to the next turn decode to exactly the template's rendering, and log-probs stay exact."""
    model, tok = lm
    question = "What is 2 + 3?"
    prompt = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                     add_generation_prompt=True)
    script = tok.encode("```python\nprint(2+3)\n```", add_special_tokens=False)
    (t,) = rollout(Scripted(model, script), tok, [prompt], n=1, sampling=_sampling(24, seed=1),
                              execute=execute, max_turns=2, max_total_tokens=120, tool_format="chat")
    o0, o1 = t.turns[0]["observation"]
    convo = [{"role": "user", "content": question}, {"role": "assistant", "content": tok.decode(script)},
             {"role": "tool", "content": "5"}]
    assert tok.decode(t.prompt_ids + t.token_ids[:o1]) == tok.apply_chat_template(convo, tokenize=False,
                                                                                  add_generation_prompt=True)
    assert "```output" not in t.text and o1 < len(t.token_ids)
    assert_sampler_logprobs(model, t, o1)


def test_the_episode_tool_time_budget(lm):
    """Each call gets what is left of the episode's tool seconds; once spent, a call is not run."""
    model, tok = lm
    sleep = tok.encode("```python\nimport time\ntime.sleep(60)\n```", add_special_tokens=False)
    t0 = time.monotonic()
    (t,) = rollout(Scripted(model, sleep, times=3), tok, ["Go:"], n=1,
                              sampling=_sampling(len(sleep) + 4, seed=0), execute=execute, max_turns=3,
                              max_total_tokens=400, tool_timeout=1.0, tool_episode_timeout=1.5)
    assert time.monotonic() - t0 < 20
    statuses = [turn["status"] for turn in t.turns if turn["code"] is not None]
    assert statuses[:2] == ["timeout", "timeout"] and 1.0 <= t.tool_seconds
    assert statuses[2:] == ["budget"] and "[budget] the episode's tool time budget is spent" in t.text


class _Calculator:
    """An environment of its own in the ``python_block`` call syntax (not the sandbox): it evaluates a block's one
    sum itself, counts its calls and gives a verdict, as an environment with ``finish`` does."""

    def __init__(self):
        self.calls = []

    def call(self, name, arguments, *, timeout):
        self.calls.append((name, arguments["code"], timeout))
        a, b = arguments["code"].removeprefix("print(").removesuffix(")").split("+")
        return {"status": "ok", "sandbox_status": None, "stdout": f"{int(a) + int(b)}\n", "truncated": False,
                "error": None}

    def finish(self):
        return {"reward": float(len(self.calls)), "status": "ok"}


def test_the_fenced_loop_runs_any_environment_in_the_python_block_syntax(lm):
    """The fenced Python loop is the episode loop in its ``python_block`` syntax: another environment written in it
    gets the block's code as a ``python`` call (under the loop's timeout), its result comes back as the same
    observation, and its verdict is kept, as for a ``<tool_call>`` environment. The sandbox's own loop has no
    verdict (the task's reward grades the answer)."""
    from rewardlab.rollout.episodes import rollout_episodes

    model, tok = lm
    script = tok.encode("```python\nprint(2+3)\n```", add_special_tokens=False)
    opened = []

    def open_episode(i):
        opened.append(_Calculator())
        return opened[-1]

    (t,) = rollout_episodes(Scripted(model, script), tok, ["Compute:"], 1, _sampling(24, seed=0),
                            open_episode=open_episode, call_syntax="python_block",
                            settings=ToolSettings(max_turns=3, max_total_tokens=96, tool_timeout=1.5))
    assert opened[0].calls == [("python", "print(2+3)", 1.5)]
    o0, o1 = t.turns[0]["observation"]
    assert t.token_ids[o0:o1] == tok.encode("\n```output\n5\n```\n", add_special_tokens=False)
    assert t.episode["reward"] == 1.0 and t.episode["status"] == "ok"
    (s,) = rollout(Scripted(model, script), tok, ["Compute:"], n=1, sampling=_sampling(24, seed=0),
                   execute=execute, max_turns=3, max_total_tokens=96)
    assert s.token_ids[: o1] == t.token_ids[: o1] and s.episode is None  # the sandbox printed the same 5


def test_an_unknown_call_syntax_is_a_one_line_error(lm):
    from rewardlab.errors import RewardlabError
    from rewardlab.rollout.episodes import rollout_episodes

    model, tok = lm
    with pytest.raises(RewardlabError, match="call syntax 'fenced'; choose one of: tool_call, python_block"):
        rollout_episodes(model, tok, ["x"], 1, _sampling(4), open_episode=lambda i: None, call_syntax="fenced")


class _Broken(_Calculator):
    """A ``python_block`` environment whose tool raises on its first call and returns no record on its second."""

    def call(self, name, arguments, *, timeout):
        self.calls.append(name)
        if len(self.calls) == 1:
            raise ValueError("the tool broke")
        return "not a record"


def test_a_python_block_tool_that_raises_or_returns_garbage_is_a_counted_tool_error(lm):
    from rewardlab.rollout.episodes import rollout_episodes

    model, tok = lm
    script = tok.encode("```python\nprint(2+3)\n```", add_special_tokens=False)
    env = _Broken()
    (t,) = rollout_episodes(Scripted(model, script, times=2), tok, ["Compute:"], 1, _sampling(24, seed=0),
                            open_episode=lambda i: env, call_syntax="python_block",
                            settings=ToolSettings(max_turns=2, max_total_tokens=160))
    assert [turn["status"] for turn in t.turns[:2]] == ["tool_error", "tool_error"] and t.tool_calls == 2
    assert "the tool broke" in t.turns[0]["error"] and "not a record" in t.turns[1]["error"]
    assert "[tool_error] ValueError: the tool broke" in tok.decode(t.token_ids) and t.episode["status"] == "ok"
