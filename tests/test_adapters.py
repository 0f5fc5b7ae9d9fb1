"""Adapters called exactly as TRL, verl and OpenRLHF call them (no trainer needed for these tests).

The real-TRL test (``GRPOTrainer`` for one step) is in ``test_adapters_trl.py`` (slow).
"""

from __future__ import annotations

import asyncio
import logging
import math
import pickle

import numpy as np
import pytest

from rewardlab.adapters import openrlhf, verl
from rewardlab.adapters._common import coerce_reference, completion_text
from rewardlab.adapters.trl import as_trl, as_trl_async, as_trl_weighted
from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import RewardResult, registered_rewards
from rewardlab.rewards.combine import Combined
from rewardlab.rewards.format import OneAnswer
from rewardlab.rewards.length import Overlong

HAS_MATH = "math" in registered_rewards()


def exact(completion: str, reference, **meta) -> RewardResult:
    """1.0 when the last whitespace-separated token equals the reference; None without reference."""
    if reference is None:
        return RewardResult(None, {"status": "no_reference"})
    words = completion.split()
    return RewardResult(float(bool(words) and words[-1] == str(reference)), {"meta_keys": sorted(meta)})


def flaky(completion: str, reference, **meta) -> RewardResult:
    """Raises on 'boom' (a grader bug), otherwise 1.0."""
    if "boom" in completion:
        raise RuntimeError("grader bug")
    return RewardResult(1.0, {})


def seen_meta(completion: str, reference, **meta) -> RewardResult:
    return RewardResult(0.0, {"meta": meta, "reference": reference})


def nan_or_inf(completion: str, reference, **meta) -> RewardResult:
    return RewardResult(float(completion), {})


# --- TRL ------------------------------------------------------------------------------------------


def trl_call(fn, prompts, completions, completion_ids=None, **columns):
    """Exactly how TRL 1.16 GRPOTrainer._calculate_rewards calls a sync custom reward function."""
    logged: dict[str, float] = {}
    columns.update(trainer_state=object(), log_extra=lambda col, vals: None, log_metric=logged.__setitem__)
    return fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns), logged


def test_trl_text_completions_and_answer_column():
    fn = as_trl(exact)
    assert fn.__name__ == "exact"
    out, logged = trl_call(fn, ["p1", "p2", "p3"], ["so 4", "so 5", ""], [[1, 2], [3], []], answer=["4", "4", "4"])
    assert out == [1.0, 0.0, 0.0]
    assert logged == {"rewards/exact/not_ok_frac": 0.0}


def test_trl_chat_completions():
    fn = as_trl(OneAnswer(), name="boxed")
    assert fn.__name__ == "boxed"
    completions = [
        [{"role": "assistant", "content": r"it is \boxed{4}"}],
        [{"role": "assistant", "content": [{"type": "text", "text": r"\boxed{4}"},
                                           {"type": "text", "text": r"\boxed{5}"}]}],
        [{"role": "assistant", "content": "no box"}],
    ]
    prompts = [[{"role": "user", "content": "2+2?"}]] * 3
    out, _ = trl_call(fn, prompts, completions, None, solution=["4"] * 3)
    assert out == [1.0, 0.0, 0.0]


def test_trl_reference_column_choice_and_meta():
    fn = as_trl(seen_meta)
    out, _ = trl_call(fn, ["p"], ["c"], [[5, 6, 7]], solution=["S"], answer=["A"], level=["3"])
    assert out == [0.0]
    res = fn.score(["p"], ["c"], [[5, 6, 7]], solution=["S"], answer=["A"], level=["3"], trainer_state=object())
    assert res[0].info["reference"] == "A"  # "answer" is tried before "solution"
    meta = res[0].info["meta"]
    assert meta["completion_tokens"] == 3 and meta["prompt"] == "p" and meta["level"] == "3" and meta["solution"] == "S"
    assert "trainer_state" not in meta and "answer" not in meta
    explicit = as_trl(seen_meta, reference_key="solution").score(["p"], ["c"], None, solution=["S"], answer=["A"])
    assert explicit[0].info["reference"] == "S"
    code = as_trl(seen_meta, reference_key="tests").score(["p"], ["c"], None,
                                                          tests=['{"inputs": ["1"], "outputs": ["2"]}'])
    assert code[0].info["reference"] == {"cases": [{"stdin": "1", "stdout": "2"}]}
    with pytest.raises(RewardlabError, match="not found"):
        as_trl(seen_meta, reference_key="gold")(prompts=["p"], completions=["c"], answer=["A"])


def test_trl_none_and_exceptions_never_escape(caplog):
    out, logged = trl_call(as_trl(exact), ["p", "p"], ["4", "5"], None)  # no reference column at all
    assert out == [None, None]
    assert logged["rewards/exact/not_ok_frac"] == 1.0
    with caplog.at_level(logging.WARNING, logger="rewardlab.adapters"):
        out, logged = trl_call(as_trl(flaky), ["p", "p"], ["fine", "boom"], None)
    assert out == [1.0, None]
    assert logged["rewards/flaky/not_ok_frac"] == 0.5
    assert "grader bug" in caplog.text


def test_trl_through_the_worker_pool():
    fn = as_trl(exact, pool=True, deadline=60.0)
    out, logged = trl_call(fn, ["p"] * 3, ["so 4", "so 5", "4"], None, answer=["4", "4", None])
    assert out == [1.0, 0.0, None]
    assert logged["rewards/exact/not_ok_frac"] == pytest.approx(1 / 3)
    out, _ = trl_call(as_trl(flaky, pool=True, deadline=60.0), ["p", "p"], ["fine", "boom"], None)
    assert out == [1.0, None]  # a raising reward is None through the pool too


def test_trl_unknown_reward_fails_at_construction_and_non_finite_is_none():
    with pytest.raises(RewardlabError, match="unknown reward"):
        as_trl("no_such_reward_anywhere")
    out, _ = trl_call(as_trl(nan_or_inf), ["p", "p", "p"], ["nan", "inf", "1"], None)
    assert out == [None, None, 1.0]


def test_trl_weighted_components():
    funcs, weights = as_trl_weighted({"exact": (exact, 1.0), "boxed": (OneAnswer(), 0.1), "ov": Overlong(20, 8)})
    assert [f.__name__ for f in funcs] == ["exact", "boxed", "ov"] and weights == [1.0, 0.1, 1.0]
    outs = [trl_call(f, ["p"], [r"\boxed{4} 4"], [[0] * 16], answer=["4"])[0][0] for f in funcs]
    assert outs == [1.0, 1.0, -0.5]


def test_trl_length_reward_uses_completion_ids():
    out, _ = trl_call(as_trl(Overlong(20, 8)), ["p"] * 3, ["a", "b", "c"], [[0] * 12, [0] * 16, [0] * 20])
    assert out == pytest.approx([0.0, -0.5, -1.0])


def test_trl_registry_name_pickle_and_async():
    fn = as_trl("one_answer")
    assert fn.__name__ == "one_answer"
    clone = pickle.loads(pickle.dumps(fn))
    assert trl_call(clone, ["p"], [r"\boxed{1}"])[0] == [1.0]
    afn = as_trl_async(OneAnswer())
    assert afn.__name__ == "one_answer"
    assert asyncio.iscoroutinefunction(type(afn).__call__)
    # TRL's own checks (trl.trainer.utils.is_async_callable / get_callable_name) are exercised in
    # the slow test_adapters_trl.py, which imports trl.

    async def run():
        return await afn(prompts=["p", "p"], completions=[r"\boxed{1}", "x"], completion_ids=None,
                         log_metric=lambda *a: None)

    assert asyncio.run(run()) == [1.0, 0.0]
    assert pickle.loads(pickle.dumps(afn)).__name__ == "one_answer"


@pytest.mark.skipif(not HAS_MATH, reason="math reward not available yet")
def test_trl_with_math_reward():
    from rewardlab.rewards import math_reward

    fn = as_trl(math_reward)
    assert fn.__name__ == "math"
    out, _ = trl_call(fn, ["q", "q"], [r"so \boxed{\frac{1}{2}}", r"\boxed{3}"], None, answer=["0.5", "0.5"])
    assert out == [1.0, 0.0]


def test_completion_text_forms():
    assert completion_text("x") == "x"
    assert completion_text(None) == ""
    assert completion_text({"role": "assistant", "content": "y"}) == "y"
    msgs = [{"role": "assistant", "content": "a"}, {"role": "tool", "content": "T"},
            {"role": "assistant", "content": "b"}]
    assert completion_text(msgs) == "ab"
    assert completion_text([{"content": "u"}]) == "u"


# --- verl -----------------------------------------------------------------------------------------


def test_verl_routing():
    assert verl.route("openai/gsm8k") == "math"
    assert verl.route("DigitalLearningGmbH/MATH-lighteval") == "math"
    assert verl.route("HuggingFaceH4/MATH-500") == "math"
    assert verl.route("lighteval/MATH") == "math"
    assert verl.route("aime_2024") == "math"
    for code_source in ["codecontests", "apps", "taco", "openai_humaneval", "livecodebench/code_generation",
                        "PrimeIntellect/verifiable-coding"]:
        assert verl.route(code_source) == "code", code_source
    assert verl.route("my_private_set", {"inputs": ["1"], "outputs": ["2"]}) == "code"  # by shape
    assert verl.route("my_private_set", "42") == "math"


def test_coerce_reference_code_layouts():
    stdio = coerce_reference('{"inputs": ["1 2\\n", "3 4\\n"], "outputs": ["3\\n", "7\\n"]}')
    assert stdio == {"cases": [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "3 4\n", "stdout": "7\n"}]}
    he = coerce_reference({"test": "def check(c): pass", "entry_point": "f", "prompt": "def f():"})
    assert he == {"tests": "def check(c): pass", "entry_point": "f", "prompt": "def f():"}
    assert coerce_reference("72") == "72"
    assert coerce_reference(np.str_("72")) == "72"
    assert coerce_reference("{not json") == "{not json"


def _check_verl_dict(d):
    assert set(d) == {"score", "acc", "graded"}
    assert all(type(v) is float for v in d.values())


def test_verl_naive_manager_convention():
    # NaiveRewardManager: data_source from a numpy object array, extra_info dict with num_turns added
    data_sources = np.array(["openai/gsm8k", "openai/gsm8k", "openai/gsm8k"], dtype=object)
    responses = ["The answer is 72", "The answer is 71", ""]
    extra = {"split": "train", "index": 0}
    outs = []
    for i in range(3):
        extra_info = dict(extra)
        extra_info["num_turns"] = None
        score = verl.compute_score(
            data_source=data_sources[i], solution_str=responses[i], ground_truth="72", extra_info=extra_info,
            reward="test_adapters.exact",
        )
        _check_verl_dict(score)
        outs.append(score)
    assert [o["score"] for o in outs] == [1.0, 0.0, 0.0]
    assert [o["acc"] for o in outs] == [1.0, 0.0, 0.0]
    # verl collects every key into reward_extra_info and averages it in validation: must be numeric
    for key in outs[0]:
        assert np.isfinite(np.mean([o[key] for o in outs]))


def test_verl_reward_loop_convention():
    # verl's experimental reward loop: extra_info gains num_turns and rollout_reward_scores, and
    # router keywords (with a tokenizer object) may be added; coroutine functions are awaited
    extra_info = {"index": 3, "num_turns": None, "rollout_reward_scores": {}}
    router = {"reward_router_address": "127.0.0.1:1", "reward_model_tokenizer": object()}
    d = verl.compute_score(
        data_source="openai/gsm8k", solution_str="so 72", ground_truth="72", extra_info=extra_info,
        reward="test_adapters.seen_meta", return_info=True, **router,
    )
    assert d["graded"] == 1.0
    assert asyncio.iscoroutinefunction(verl.compute_score_async)
    assert not hasattr(verl, "compute_score_batch_async")  # no verl manager calls a batch function
    single = asyncio.run(verl.compute_score_async(
        data_source="openai/gsm8k", solution_str="so 72", ground_truth="72", extra_info=extra_info,
        reward="test_adapters.exact", **router,
    ))
    assert single == {"score": 1.0, "acc": 1.0, "graded": 1.0}
    # verl's legacy PrimeRewardManager: positional call, reads a number
    assert verl.compute_score_prime("openai/gsm8k", "so 72", "72", extra_info, reward="test_adapters.exact") == 1.0
    assert verl.compute_score_prime("openai/gsm8k", "so 7", "72", None, reward="test_adapters.exact") == 0.0


# Names a user field must not take as a keyword: a reward's own parameters and the worker pool's.
RESERVED = ["reference", "completion", "reward", "deadline", "wall_cap", "self", "result"]


@pytest.mark.parametrize("key", RESERVED)
def test_verl_extra_info_named_like_a_parameter_is_graded(key):
    extra_info = {key: "user value", "index": 0}
    d = verl.compute_score("openai/gsm8k", "so 72", "72", extra_info, reward="test_adapters.seen_meta",
                           return_info=True)
    assert d["graded"] == 1.0 and d["status"] == "ok", d
    got = verl.compute_score("openai/gsm8k", "so 72", "72", extra_info, reward="test_adapters.exact")
    assert got == {"score": 1.0, "acc": 1.0, "graded": 1.0}
    if HAS_MATH:  # the math reward goes through the worker pool, whose own keywords are reserved too
        assert verl.compute_score("openai/gsm8k", "#### 72", "72", extra_info)["graded"] == 1.0
    batch = verl.compute_score_batch(["openai/gsm8k"] * 2, ["so 72", "so 7"], ["72", "72"], [extra_info] * 2,
                                     reward="test_adapters.exact", deadline=60.0)
    assert [b["score"] for b in batch] == [1.0, 0.0] and [b["graded"] for b in batch] == [1.0, 1.0]


@pytest.mark.parametrize("key", RESERVED)
def test_trl_column_named_like_a_parameter_is_graded(key):
    columns = {key: ["user value"] * 2, "answer": ["4", "4"]}
    fn = as_trl(exact, reference_key="answer")  # a "reference" column is then just another column
    out, logged = trl_call(fn, ["p", "p"], ["so 4", "so 5"], None, **columns)
    assert out == [1.0, 0.0] and logged["rewards/exact/not_ok_frac"] == 0.0
    res = fn.score(["p"], ["so 4"], None, **{k: v[:1] for k, v in columns.items()})
    assert f"{key}_" in res[0].info["meta_keys"] and key not in res[0].info["meta_keys"]
    pooled, _ = trl_call(as_trl(exact, reference_key="answer", pool=True, deadline=60.0), ["p", "p"], ["so 4", "so 5"],
                         None, **columns)
    assert pooled == [1.0, 0.0]
    if HAS_MATH:
        from rewardlab.rewards import math_reward

        math_out, _ = trl_call(as_trl(math_reward, reference_key="answer"), ["p"], [r"\boxed{4}"], None,
                               **{k: v[:1] for k, v in columns.items()})
        assert math_out == [1.0]


def test_openrlhf_list_labels_in_file_mode():
    """The one label rule (also the server's, see test_server.py / test_openrlhf_client.py)."""
    fn = openrlhf.make_reward_func(Combined({"exact": (exact, 1.0), "one": (OneAnswer(), 0.5)}), pool=False)
    out = fn(["Q 4", "Q 4", "Q 4", "Q 4"], ["Q", "Q", "Q", "Q"], [["3", "4"], ["3"], True, [["4"]]])
    assert out["rewards"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert out["extra_logs"]["graded"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert set(out["extra_logs"]) == {"graded", "exact", "exact_graded", "one", "one_graded"}


def test_verl_meta_excludes_router_objects():
    meta = verl.meta_of({"index": 1, "num_turns": None}, {"reward_model_tokenizer": object(), "k": 2}, "ds")
    assert meta == {"index": 1, "k": 2, "data_source": "ds"}


def test_verl_ungraded_is_marked_not_hidden():
    d = verl.compute_score("x", "text", None, None, reward="test_adapters.exact", return_info=True)
    assert d["score"] == 0.0 and d["graded"] == 0.0 and d["status"] == "no_reference"
    bad = verl.compute_score("x", "boom", "1", reward="test_adapters.flaky", return_info=True)
    assert bad["graded"] == 0.0 and bad["status"] == "error"
    unknown = verl.compute_score("x", "a", "1", reward="no_such_reward_anywhere")
    assert unknown == {"score": 0.0, "acc": 0.0, "graded": 0.0}


def test_verl_batch_manager_convention():
    # BatchRewardManager.verify: data_sources = non_tensor_batch[...] (numpy object array),
    # extras = non_tensor_batch.get("extra_info", [None] * len(data)), then **reward_kwargs
    data_sources = np.array(["openai/gsm8k", "lighteval/MATH", "openai/gsm8k", "lighteval/MATH"], dtype=object)
    solution_strs = ["so 72", "so 1/2", "so 5", r"\boxed{3}"]
    ground_truths = ["72", "1/2", "6", "3"]
    extras = np.array([{"index": i} for i in range(4)], dtype=object)
    reward_kwargs = {"reward": "test_adapters.exact", "deadline": 60.0}  # generous: shared CI machines
    scores = verl.compute_score_batch(
        data_sources=data_sources, solution_strs=solution_strs, ground_truths=ground_truths, extra_infos=extras,
        **reward_kwargs,
    )
    assert len(scores) == 4
    for s in scores:
        _check_verl_dict(s)
    assert [s["score"] for s in scores] == [1.0, 1.0, 0.0, 0.0]
    no_extras = verl.compute_score_batch(
        data_sources=data_sources, solution_strs=solution_strs, ground_truths=ground_truths,
        extra_infos=[None] * 4, **reward_kwargs,
    )
    assert [s["score"] for s in no_extras] == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="lengths differ"):
        verl.compute_score_batch(data_sources=data_sources, solution_strs=[], ground_truths=ground_truths,
                                 extra_infos=extras)


@pytest.mark.skipif(not HAS_MATH, reason="math reward not available yet")
def test_verl_routes_gsm8k_and_math_to_math_reward():
    assert verl.compute_score("openai/gsm8k", "48/2 = 24, 48 + 24 = 72\n#### 72", "72")["score"] == 1.0
    assert verl.compute_score("HuggingFaceH4/MATH-500", r"so \boxed{\frac12}", r"\frac{1}{2}")["score"] == 1.0
    assert verl.compute_score("lighteval/MATH", r"\boxed{3}", "4")["score"] == 0.0
    batch = verl.compute_score_batch(
        data_sources=["openai/gsm8k"] * 2, solution_strs=["#### 72", "#### 70"], ground_truths=["72", "72"],
        extra_infos=[None, None], deadline=60.0,
    )
    assert [b["score"] for b in batch] == [1.0, 0.0]


# --- OpenRLHF -------------------------------------------------------------------------------------


def test_strip_prompt():
    assert openrlhf.strip_prompt("<|im_start|>user\nQ<|im_end|>\nA: 4", "<|im_start|>user\nQ<|im_end|>\n") == "A: 4"
    assert openrlhf.strip_prompt("<s>Q? A: 4", "Q?") == " A: 4"  # BOS added in front of the prompt
    assert openrlhf.strip_prompt("Q  ?\nA: 4", "Q ?") == "\nA: 4"  # whitespace changed at detokenisation
    assert openrlhf.strip_prompt("A: 4", "") == "A: 4"
    assert openrlhf.strip_prompt("totally different", "Q?") == "totally different"


def test_openrlhf_reward_func_convention():
    import torch  # imported here: pool workers import this module to unpickle the test rewards

    fn = openrlhf.make_reward_func(Combined({"exact": (exact, 1.0), "one": (OneAnswer(), 0.5)}), pool=False)
    prompts = ["Q: 2+2? ", "Q: 3+3? ", "Q: 1+1? "]
    queries = [prompts[0] + r"\boxed{4} 4", prompts[1] + "7", prompts[2] + r"\boxed{2} \boxed{3}"]
    out = fn(queries, prompts, ["4", "6", "2"])  # positional, as OpenRLHF calls it
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert isinstance(out["rewards"], torch.Tensor) and out["rewards"].shape == (3,)
    assert out["rewards"].dtype == torch.float32
    assert out["rewards"].tolist() == pytest.approx([1.5, 0.0, 0.0])
    assert torch.equal(out["scores"], out["rewards"])
    logs = out["extra_logs"]
    assert logs["exact"].tolist() == [1.0, 0.0, 0.0] and logs["one"].tolist() == [1.0, 0.0, 0.0]
    assert logs["graded"].tolist() == [1.0, 1.0, 1.0]
    assert all(isinstance(v, torch.Tensor) and v.shape == (3,) for v in logs.values())
    # OpenRLHF concatenates extra_logs across batches and splits per sample: same keys every call
    again = fn(queries[:1], prompts[:1], ["4"], **{"some_future_kwarg": 1})
    assert set(again["extra_logs"]) == set(logs)


def test_openrlhf_module_entry_point(monkeypatch):
    monkeypatch.setenv("REWARDLAB_REWARD", "one_answer,overlong=1.0")
    monkeypatch.setattr(openrlhf, "cached_reward_func", None)
    out = openrlhf.reward_func([r"Q \boxed{1}", "Q none"], ["Q", "Q"], ["1", "1"])
    # overlong has no token count here: skipped (not 0), and its graded flag says so
    assert out["rewards"].tolist() == [1.0, 0.0]
    assert out["extra_logs"]["overlong_graded"].tolist() == [0.0, 0.0]
    assert out["extra_logs"]["graded"].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError):
        openrlhf.parse_reward_spec("math,one_answer=lots")


def test_openrlhf_ungraded_and_non_finite():
    def inf_reward(completion, reference, **meta):
        return RewardResult(math.inf, {})

    payload = openrlhf.rewards_payload([RewardResult(None, {"status": "timeout"}), inf_reward("", None),
                                        RewardResult(2.0, {})])
    assert payload["rewards"] == [0.0, 0.0, 2.0]
    assert payload["extra_logs"]["graded"] == [0.0, 0.0, 1.0]


@pytest.mark.skipif("code" not in registered_rewards(), reason="code reward not available")
def test_verl_routes_code_datasets_to_sandboxed_code_reward():
    program = "```python\nprint(int(input()) * 2)\n```"
    tests = '{"inputs": ["2\\n", "5\\n"], "outputs": ["4\\n", "10\\n"]}'  # verl prime-style JSON string
    d = verl.compute_score("codecontests", program, tests, {"index": 0}, return_info=True)
    assert d["reward"] == "code" and d["status"] == "ok" and d["score"] == 1.0
    humaneval = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add",
                 "prompt": "def add(a, b):\n"}
    batch = verl.compute_score_batch(
        data_sources=np.array(["openai_humaneval", "openai_humaneval"], dtype=object),
        solution_strs=["    return a + b\n", "    return a - b\n"],
        ground_truths=[humaneval, humaneval],
        extra_infos=[None, None], deadline=60.0,
    )
    assert [b["score"] for b in batch] == [1.0, 0.0]
    assert [b["graded"] for b in batch] == [1.0, 1.0]


def test_openrlhf_loads_the_file_by_path(monkeypatch):
    """OpenRLHF's --remote_rm_url FILE.py: the file is executed as a fresh module and its
    ``reward_func`` called with (queries, prompts, labels)."""
    import importlib.util

    monkeypatch.setenv("REWARDLAB_REWARD", "one_answer")
    spec = importlib.util.spec_from_file_location("reward_func", openrlhf.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.reward_func(["Q: \\boxed{3}", "Q: 3"], ["Q: ", "Q: "], ["3", "3"])
    assert out["rewards"].tolist() == [1.0, 0.0]
