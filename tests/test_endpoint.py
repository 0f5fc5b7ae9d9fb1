"""The policy endpoint (``rewardlab.rollout.endpoint``, ``rewardlab serve-policy``) through real clients on loopback:
verifiers' renderer client (``renderers.client.generate``, the token-in / token-out path verifiers trains through)
and the OpenAI SDK (``openai.OpenAI().chat.completions.create``).

The claim is token-exactness: every token id a reply returns is what the engine sampled, conditioned on exactly
the ids the client sent, and every log-prob equals the trainer's log-prob of that token (``behaviour.logprobs``
on a forward pass over those ids). A server that re-tokenised text would fail
``test_a_non_canonical_token_sequence_is_served_as_sent``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time

import httpx
import pytest
import torch

from rewardlab.errors import RewardlabError
from rewardlab.rollout import SamplingParams, behaviour, make_engine
from rewardlab.rollout.endpoint import ServedPolicy, create_app
from test_server import LiveServer

renderers = pytest.importorskip("renderers")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    from rewardlab.models import load_model

    model, tok = load_model(str(tiny_model_dir))
    model.eval()
    policy = ServedPolicy(make_engine("hf", model, tok), tok, name="tiny", max_model_len=512)
    with LiveServer(create_app(policy)) as live:
        yield live.url, policy, model, tok


def trainer_logprobs(model, prompt: list[int], completion: list[int], sampling: SamplingParams) -> list[float]:
    """The trainer's log-probs of ``completion`` after ``prompt``: one forward pass, the behaviour distribution."""
    ids = torch.tensor([prompt + completion])  # (1, P + C)
    with torch.no_grad():
        logits = model(ids).logits[:, len(prompt) - 1:-1]  # (1, C, V): the logits that predicted each completion token
    lp, _ = behaviour.logprobs(logits.float(), ids[:, len(prompt):], sampling)
    return lp[0].tolist()


def renderer_generate(url: str, tok, messages=None, prompt_ids=None, **sampling):
    from renderers import DefaultRendererConfig, create_renderer
    from renderers.client import generate

    async def go():
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x")
        try:
            return await generate(client=client, renderer=create_renderer(tok, DefaultRendererConfig()),
                                  messages=messages or [], model="tiny", prompt_ids=prompt_ids,
                                  sampling_params={"max_tokens": 12, **sampling})
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.mark.parametrize("sampling", [{"temperature": 1.0, "seed": 3}, {"temperature": 0.7, "top_p": 0.9, "seed": 4},
                                      {"temperature": 0.8, "top_k": 20, "seed": 5}, {"temperature": 0.0}])
def test_verifiers_renderer_client_gets_the_engines_tokens_and_the_trainers_logprobs(served, sampling):
    url, policy, model, tok = served
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    out = renderer_generate(url, tok, messages, **sampling)
    assert out["prompt_ids"] == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                        return_dict=False)
    assert 0 < len(out["completion_ids"]) <= 12 and len(out["completion_logprobs"]) == len(out["completion_ids"])
    params = SamplingParams(max_new_tokens=12, temperature=sampling["temperature"], top_p=sampling.get("top_p", 1.0),
                            top_k=sampling.get("top_k", 0))
    want = trainer_logprobs(model, out["prompt_ids"], out["completion_ids"], params if params.temperature else None)
    assert out["completion_logprobs"] == pytest.approx(want, rel=1e-4, abs=1e-5)
    again = renderer_generate(url, tok, messages, **sampling)
    assert again["completion_ids"] == out["completion_ids"]  # a seed (or greedy) repeats


def test_a_non_canonical_token_sequence_is_served_as_sent(served):
    """Multi-turn bridging sends token ids, never text: ids that the tokenizer would never produce for their text
    (a word spelled one byte-level token at a time) come back as ``prompt_token_ids`` unchanged, and the log-probs
    are those of a model conditioned on exactly them."""
    url, policy, model, tok = served
    canonical = tok.apply_chat_template([{"role": "user", "content": "hello there"}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)
    spelled = [tok.convert_tokens_to_ids(t) for t in tok.convert_ids_to_tokens(tok.encode("hello there"))]
    byte_ids = [i for ch in "hello" for i in tok.encode(ch)]
    odd = canonical[:3] + byte_ids + canonical[3:]
    assert tok.encode(tok.decode(odd)) != odd and spelled  # the text would re-tokenise differently
    out = renderer_generate(url, tok, prompt_ids=odd, temperature=1.0, seed=11)
    assert out["prompt_ids"] == odd
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    want = trainer_logprobs(model, odd, out["completion_ids"], params)
    assert out["completion_logprobs"] == pytest.approx(want, rel=1e-4, abs=1e-5)
    canon = trainer_logprobs(model, tok.encode(tok.decode(odd)), out["completion_ids"], params)
    assert canon != pytest.approx(want, rel=1e-4, abs=1e-5)  # the re-tokenised context would give other numbers


def test_openai_sdk_chat_completions_carry_token_ids_logprobs_and_the_policy_version(served):
    url, policy, model, tok = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
    messages = [{"role": "user", "content": "Name a colour."}]
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=10, temperature=1.0, seed=7,
                                           logprobs=True, n=2)
    extra = reply.model_extra
    prompt = extra["prompt_token_ids"]
    assert prompt == policy.engine.encode(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    assert len(reply.choices) == 2
    for choice in reply.choices:
        ids = choice.model_extra["token_ids"]
        lps = [c.logprob for c in choice.logprobs.content]
        assert choice.message.content == tok.decode(ids, skip_special_tokens=True)
        assert lps == pytest.approx(trainer_logprobs(model, prompt, ids, SamplingParams(10)), rel=1e-4, abs=1e-5)
    version = extra["policy_version"]
    assert policy.load_weights(model) == version + 1
    again = client.chat.completions.create(model="tiny", messages=messages, max_tokens=10, temperature=1.0, seed=7, n=2)
    assert again.model_extra["policy_version"] == version + 1
    assert [c.model_extra["token_ids"] for c in again.choices] == [c.model_extra["token_ids"] for c in reply.choices]
    models = client.models.list()
    assert models.data[0].id == "tiny" and models.data[0].model_extra["max_model_len"] == 512


@pytest.mark.parametrize(("route", "body", "param"), [
    ("/inference/v1/generate", {}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": []}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": [1, "2"]}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": [1, 10**9]}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": [1, True]}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": []}, "sampling_params"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"max_tokens": 0}}, "max_tokens"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"temperature": -1}}, "temperature"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"top_p": 0}}, "top_p"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"n": 1000}}, "n"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"seed": 1.5}}, "seed"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"stop_token_ids": ["x"]}}, "stop_token_ids"),
    ("/inference/v1/generate", {"token_ids": [1] * 600}, "messages"),  # over max_model_len
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": [{"content": "no role"}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "5"}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "temperature": float("nan")},
     "temperature"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stop": [1]}, "stop"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": {}}, "tools"),
])
def test_bad_requests_are_400_naming_the_field(served, route, body, param):
    url = served[0]
    r = httpx.post(url + route, content=json.dumps(body, allow_nan=True), timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000])
def test_garbage_bodies_are_400_and_the_server_keeps_serving(served, raw):
    url = served[0]
    r = httpx.post(url + "/inference/v1/generate", content=raw, timeout=30)
    assert r.status_code == 400 and "error" in r.json()
    ok = httpx.post(url + "/inference/v1/generate", json={"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}},
                    timeout=30)
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["token_ids"]) <= 2


def test_max_tokens_is_cut_to_the_room_left_and_stop_token_ids_end_a_choice(served):
    url, policy, model, tok = served
    prompt = [5 + i % 300 for i in range(505)]
    r = httpx.post(url + "/inference/v1/generate", json={"token_ids": prompt, "sampling_params": {
        "max_tokens": 100, "temperature": 1.0, "seed": 1}}, timeout=60).json()
    ids = r["choices"][0]["token_ids"]
    assert len(ids) <= 512 - 505
    if len(ids) > 1:  # the second sampled token, made a stop token, ends the choice right after it
        again = httpx.post(url + "/inference/v1/generate", json={"token_ids": prompt, "sampling_params": {
            "max_tokens": 100, "temperature": 1.0, "seed": 1, "stop_token_ids": [ids[1]]}}, timeout=60).json()
        cut = again["choices"][0]
        assert cut["token_ids"] == ids[: ids.index(ids[1]) + 1] and cut["finish_reason"] == "stop"


@pytest.mark.parametrize("n", [1, 2], ids=["generate", "shared-prefix"])
def test_stop_token_ids_reach_the_engine_which_stops_sampling_there(served, n, monkeypatch):
    """A chat template's end-of-turn token, sent as ``stop_token_ids``, ends the engine's decode loop, not a cut
    made after sampling the whole budget: the model runs as many forwards as the choices need, no more."""
    url, policy, model, tok = served
    body = {"token_ids": [5, 6, 7, 8], "sampling_params": {"max_tokens": 48, "temperature": 1.0, "seed": 3, "n": n}}
    full = [c["token_ids"] for c in httpx.post(url + "/inference/v1/generate", json=body, timeout=60).json()["choices"]]
    if min(len(ids) for ids in full) < 40:
        pytest.skip("the random model ended a choice early at this seed")
    stops = sorted({ids[2] for ids in full})
    needed = max(min(ids.index(t) for t in stops if t in ids) + 1 for ids in full)  # tokens the longest choice keeps
    seen, calls = [], []
    engine_call = policy.engine.generate_ids
    monkeypatch.setattr(policy.engine, "generate_ids", lambda p, k, sampling, **kw: (
        seen.append(sampling), engine_call(p, k, sampling, **kw))[1])
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        body["sampling_params"]["stop_token_ids"] = stops
        got = httpx.post(url + "/inference/v1/generate", json=body, timeout=60).json()["choices"]
    finally:
        hook.remove()
    assert [s.stop_token_ids for s in seen] == [tuple(stops)]
    for ids, choice in zip(full, got):
        cut = min(ids.index(t) for t in stops if t in ids) + 1
        assert choice["token_ids"] == ids[:cut] and choice["finish_reason"] == "stop"
    assert len(calls) <= needed + 1, (len(calls), needed)  # one prefill, then a forward per further token


def test_each_request_is_sampled_with_its_own_settings_when_another_thread_serves_it():
    """Whichever request thread holds the engine next serves the oldest pending request: with that request's seed,
    budget, stop ids and n, never its own (verifiers' episodes each send their own seed). Here request A's thread
    is slow to take the engine, so B's thread serves A first; the engine writes each call's settings into its
    tokens."""
    import threading

    from rewardlab.rollout import Completion

    class Echo:
        def generate_ids(self, prompts, n, sampling):
            ids = [sampling.seed, n, *sampling.stop_token_ids][: sampling.max_new_tokens]
            return [Completion(i, list(p), ids, "", "stop", [0.0] * len(ids)) for i, p in enumerate(prompts)
                    for _ in range(n)]

    class SlowForA:  # the engine's lock, handed to request A's thread 0.3 s late
        def __init__(self, inner) -> None:
            self.inner = inner

        def __enter__(self):
            if threading.current_thread().name == "A":
                time.sleep(0.3)
            return self.inner.__enter__()

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

    policy = ServedPolicy(Echo(), tokenizer=None)
    policy.lock = SlowForA(policy.lock)
    asked = {"A": (4, SamplingParams(max_new_tokens=3, seed=3, stop_token_ids=(9,))),
             "B": (1, SamplingParams(max_new_tokens=6, seed=5))}
    got: dict[str, list] = {}
    threads = [threading.Thread(target=lambda k=k: got.__setitem__(k, policy.generate([1], *asked[k])[0]), name=k)
               for k in asked]
    threads[0].start()
    time.sleep(0.1)  # A is pending, its thread still on its way to the engine
    threads[1].start()
    for t in threads:
        t.join(timeout=30)
    assert [c.token_ids for c in got["A"]] == [[3, 4, 9]] * 4
    assert [c.token_ids for c in got["B"]] == [[5, 1]]


def test_serve_policy_bad_input_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rewardlab", "serve-policy", str(tmp_path / "missing"), "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "missing" in lines[0], r.stderr


# ----------------------------------------------------------------------------- model-native tool calls

TOOL_ROWS = [
    # (model text, content, [(name, arguments)])
    ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', None, [("add", {"a": 1, "b": 2})]),
    ('Let me add.\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>\n<tool_call>{"name": "neg", '
     '"arguments": {}}</tool_call>', "Let me add.", [("add", {"a": 1}), ("neg", {})]),
    ('<tool_call>{"name": "f", "arguments": "{\\"x\\": 3}"}</tool_call>', None, [("f", {"x": 3})]),  # string args
    ("no call here", "no call here", []),
    ('<tool_call>{"name": "f"', '<tool_call>{"name": "f"', []),  # unclosed: no call, the text is content
    ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
    ('<tool_call>["f"]</tool_call>', '<tool_call>["f"]</tool_call>', []),  # not an object
    ('<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>', []),  # no name
]


@pytest.mark.parametrize(("text", "content", "calls"), TOOL_ROWS)
def test_hermes_tool_calls_are_parsed_as_vllm_reads_them(text, content, calls):
    from rewardlab.rollout.toolcalls import tool_calls_of

    got_content, got = tool_calls_of(text)
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got] == calls
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in got)


def test_tool_call_parsing_is_linear_on_hostile_text():
    import time

    from rewardlab.rollout.toolcalls import tool_calls_of

    t = time.perf_counter()
    assert tool_calls_of("<tool_call>" * 200_000)[1] == []
    assert tool_calls_of('<tool_call>{"name": "f"}</tool_call>' * 20_000)[1][-1]["function"]["name"] == "f"
    assert time.perf_counter() - t < 2.0


class Scripted:
    """An engine that replies with a fixed text (as token ids), recording what it was asked."""

    def __init__(self, tok, text: str) -> None:
        self.tok, self.ids, self.calls = tok, tok.encode(text, add_special_tokens=False), []

    def encode(self, text: str) -> list[int]:
        return self.tok(text)["input_ids"]

    def generate_ids(self, prompts, n, sampling):
        from rewardlab.rollout import Completion

        self.calls.append([list(p) for p in prompts])
        return [Completion(i // n, list(prompts[i // n]), list(self.ids), self.tok.decode(self.ids), "stop",
                           [-0.5] * len(self.ids)) for i in range(len(prompts) * n)]


HERMES_TEMPLATE = (  # a small tool-aware ChatML template (the shape of Qwen's): tools in a system turn, calls as
    # <tool_call> blocks in the assistant turn, results as tool turns
    "{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}{% endif %}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_chat_completions_return_the_models_tool_calls_and_take_tool_results(tiny_model_dir):
    from rewardlab.models import load_model

    _, tok = load_model(str(tiny_model_dir))
    tok.chat_template = HERMES_TEMPLATE
    engine = Scripted(tok, 'Sure.<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    policy = ServedPolicy(engine, tok, name="scripted")
    tools = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
    with LiveServer(create_app(policy)) as live:
        client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="x")
        messages = [{"role": "user", "content": "2 + 3?"}]
        reply = client.chat.completions.create(model="scripted", messages=messages, tools=tools, max_tokens=50)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure."
        call = choice.message.tool_calls[0]
        assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
        assert choice.model_extra["token_ids"] == engine.ids  # the tokens behind the call, for the trainer
        assert "Tools: [" in tok.decode(engine.calls[-1][0])  # the tools were declared to the chat template
        follow = messages + [choice.message.model_dump(exclude_none=True),
                             {"role": "tool", "tool_call_id": call.id, "content": "5"}]
        again = client.chat.completions.create(model="scripted", messages=follow, tools=tools, max_tokens=50)
        assert again.choices[0].finish_reason == "tool_calls"
        sent = tok.decode(engine.calls[-1][0])
        assert '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call><|im_end|>' in sent
        assert "<|im_start|>tool\n5<|im_end|>" in sent  # the call and its result went in, as the template writes them
        plain = client.chat.completions.create(model="scripted", messages=messages, max_tokens=50)
        assert plain.choices[0].message.tool_calls is None  # no tools declared: the text is the content


def test_concurrent_requests_share_engine_calls_and_each_seed_alone_decides_its_tokens(served):
    """Requests that queue while the engine is busy share its next call: unseeded ones, and seeded ones, each with
    its own seed (``generate_ids(..., seeds=)``), so a seeded request's reply is the one it gets sent alone. An
    engine without ``seeds`` samples each seeded request alone. Batching changes nothing a trainer reads."""
    from concurrent.futures import ThreadPoolExecutor

    url, policy, model, tok = served
    calls = []
    real = policy.engine.generate_ids

    def counting(prompts, n, sampling, seeds=None):
        calls.append(len(prompts))
        time.sleep(0.2)  # hold the engine so that the other requests queue
        return real(prompts, n, sampling, **({} if seeds is None else {"seeds": seeds}))

    def no_seeds(prompts, n, sampling):
        return counting(prompts, n, sampling)

    prompts = [tok.encode(f"question {i}") for i in range(8)]

    def ask(ids, seed=None):
        params = {"max_tokens": 6, "temperature": 1.0, **({"seed": seed} if seed is not None else {})}
        return httpx.post(url + "/inference/v1/generate", json={"token_ids": ids, "sampling_params": params},
                          timeout=120).json()

    def concurrently(seeded: bool) -> tuple[list[dict], list[int]]:
        calls.clear()
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda k: ask(prompts[k], seed=100 + k if seeded else None), range(8)))
        return replies, list(calls)

    alone = [ask(ids, seed=100 + k) for k, ids in enumerate(prompts)]  # one request at a time: nothing to batch
    policy.engine.generate_ids = counting
    try:
        replies, batched = concurrently(seeded=False)
        seeded_replies, seeded = concurrently(seeded=True)
        policy.engine.generate_ids = no_seeds
        _, without = concurrently(seeded=True)
    finally:
        policy.engine.generate_ids = real
    assert sum(batched) == 8 and len(batched) < 8, batched  # some requests shared a call
    assert sum(seeded) == 8 and len(seeded) < 8, seeded  # seeded ones too
    assert [r["choices"][0]["token_ids"] for r in seeded_replies] == [r["choices"][0]["token_ids"] for r in alone]
    assert without == [1] * 8  # an engine without seeds= samples a seeded request alone
    for ids, reply in zip(prompts * 2, replies + seeded_replies):  # batching changed nothing a trainer reads
        choice = reply["choices"][0]
        assert reply["prompt_token_ids"] == ids
        lps = [c["logprob"] for c in choice["logprobs"]["content"]]
        assert lps == pytest.approx(trainer_logprobs(model, ids, choice["token_ids"], SamplingParams(6)),
                                    rel=1e-4, abs=1e-4)


def test_per_prompt_seeds_make_each_prompts_tokens_its_own(served):
    """``HFEngine.generate_ids(..., seeds=)``: a prompt's completions are the same whichever prompts share the call,
    at any chunking; distinct seeds give distinct draws; and they are the behaviour distribution's samples."""
    _, policy, model, tok = served
    engine = policy.engine
    prompts = [tok.encode(f"say {w}") for w in ("a", "bb", "a longer prompt", "d")]
    sampling = SamplingParams(max_new_tokens=8, temperature=0.9, top_k=30, seed=123)
    together = engine.generate_ids(prompts, 2, sampling, seeds=[1, 2, 3, 4])
    assert [c.prompt_index for c in together] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all(together[k].token_ids != together[k + 1].token_ids for k in (0, 2, 4, 6))  # each row its own stream
    for k, ids in enumerate(prompts):
        alone = engine.generate_ids([ids], 2, dataclasses.replace(sampling, seed=None), seeds=[k + 1])
        assert [c.token_ids for c in alone] == [c.token_ids for c in together[2 * k: 2 * k + 2]]
    engine.batch_size = 3  # rows split across chunks: each row keeps its generator
    try:
        assert [c.token_ids for c in engine.generate_ids(prompts, 2, sampling, seeds=[1, 2, 3, 4])] == \
            [c.token_ids for c in together]
    finally:
        engine.batch_size = 32
    same = engine.generate_ids([prompts[0]] * 2, 1, sampling, seeds=[7, 8])
    assert same[0].token_ids != same[1].token_ids or same[0].text == ""  # two seeds, two streams
    for c in together:
        assert c.logprobs == pytest.approx(trainer_logprobs(model, c.prompt_ids, c.token_ids, sampling),
                                           rel=1e-4, abs=1e-4)
    with pytest.raises(RewardlabError, match="3 seeds for 4 prompts"):
        engine.generate_ids(prompts, 1, sampling, seeds=[1, 2, 3])


@pytest.mark.parametrize(("args", "needle"), [(("--rollout", "vllm", "--logprob-support", "full"), "kept set only"),
                                              (("--rollout", "nope"), "Invalid value for '--rollout'")])
def test_serve_policy_engine_choice_is_checked_in_one_line(tiny_model_dir, args, needle):
    r = subprocess.run([sys.executable, "-m", "rewardlab", "serve-policy", str(tiny_model_dir), "--port", "0", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert needle in r.stderr, r.stderr
