"""JudgeReward against loopback fake OpenAI-compatible servers (tests/judge_server.py): the protocol,
the strict verdict parser, the cache, bounded concurrency, and a broken server (slow, 500s,
garbage, dropped connections, nothing listening) giving the right status within the deadline."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest

from rewardlab.rewards import RewardResult, ascore_batch, math_reward, score_batch
from rewardlab.rewards.judge import (
    DEFAULT_TEMPLATE,
    HybridReward,
    JudgeCache,
    JudgeOptions,
    JudgeReward,
    VerdictError,
    judge_metrics,
    parse_verdict,
)
from judge_server import DroppingServer, LiveServer, echo_correct, fake_judge_app, free_port_url, literal, naive

Q = "Tom has 3 apples and buys 4 more. How many apples does Tom have now?"


def grader(body: dict) -> str:
    """A judge that is right: compares the (first) answer block with the reference block."""
    return naive(body)


@pytest.fixture(scope="module")
def live():
    with LiveServer(fake_judge_app(grader)) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(live):
    st = live.app.state
    st.script, st.mode, st.delay = grader, "ok", 0.0
    st.requests.clear()
    st.max_active = 0


def judge_for(url: str, **kw) -> JudgeReward:
    kw.setdefault("deadline", 5.0)
    kw.setdefault("backoff", 0.01)
    return JudgeReward(url, "fake-judge", JudgeOptions(**kw))


# ---------------------------------------------------------------------------- the parser

@pytest.mark.parametrize("reply, expected", [
    ("FINAL ANSWER: 7\nVERDICT: CORRECT", ("7", True)),
    ("FINAL ANSWER: 8\nVERDICT: INCORRECT", ("8", False)),
    ("  \nFINAL ANSWER: \\frac{1}{2}  \nVERDICT: CORRECT\n\n", ("\\frac{1}{2}", True)),
])
def test_parser_accepts_the_format(reply, expected):
    assert parse_verdict(reply) == expected


@pytest.mark.parametrize("reply, why", [
    ("VERDICT: CORRECT", "fewer than two lines"),
    ("CORRECT", "fewer than two lines"),
    ("FINAL ANSWER: 7\nVERDICT: correct", "last line"),
    ("FINAL ANSWER: 7\nVERDICT: CORRECT.", "last line"),
    ("FINAL ANSWER: 7\n**VERDICT: CORRECT**", "last line"),
    ("FINAL ANSWER: 7\nVERDICT: CORRECT or INCORRECT", "last line"),
    ("FINAL ANSWER:\nVERDICT: CORRECT", "FINAL ANSWER"),
    ("VERDICT: CORRECT\nFINAL ANSWER: 7", "FINAL ANSWER"),
    ("The answer is right.\nFINAL ANSWER: 7\nVERDICT: CORRECT", "not exactly two"),
    ("FINAL ANSWER: 7 VERDICT: CORRECT\nVERDICT: INCORRECT", "holds a verdict"),
    ("", "fewer than two lines"),
])
def test_parser_is_strict(reply, why):
    with pytest.raises(VerdictError, match=why):
        parse_verdict(reply)


def test_parser_preamble_is_opt_in_and_allows_one_verdict_only():
    assert parse_verdict("Let me compare.\nFINAL ANSWER: 7\nVERDICT: CORRECT", allow_preamble=True) == ("7", True)
    with pytest.raises(VerdictError, match="more than one"):
        parse_verdict("VERDICT: INCORRECT\nFINAL ANSWER: 7\nVERDICT: CORRECT", allow_preamble=True)
    with pytest.raises(VerdictError):
        parse_verdict(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- the protocol

def test_right_and_wrong_answers_with_usage_and_the_extracted_answer(live):
    judge = judge_for(live.url)
    right = judge("First 3 + 4. So the answer is \\boxed{7}.", "7", question=Q)
    wrong = judge("The answer is 8.", "7", question=Q)
    assert (right.score, right.status, right.info["verdict"]) == (1.0, "ok", "CORRECT"), right.info
    assert (wrong.score, wrong.status, wrong.info["verdict"]) == (0.0, "ok", "INCORRECT"), wrong.info
    assert right.info["usage"]["prompt_tokens"] > 0 and right.info["usage"]["completion_tokens"] > 0
    assert right.info["judged"] is True and right.info["cache"] == "miss" and right.info["attempts"] == 1
    body = live.app.state.requests[0]
    assert body["model"] == "fake-judge" and body["temperature"] == 0.0 and body["max_tokens"] == 128
    user = body["messages"][1]["content"]
    assert user == DEFAULT_TEMPLATE.format(question=Q, reference="7", answer="7")  # the extracted answer only
    assert "First 3 + 4" not in user


def test_question_from_a_chat_prompt_and_no_reference(live):
    judge = judge_for(live.url)
    prompt = [{"role": "system", "content": "be brief"}, {"role": "user", "content": Q}]
    judge("\\boxed{7}", None, prompt=prompt)
    user = live.app.state.requests[-1]["messages"][1]["content"]
    assert Q in user and "<reference_answer>" not in user and "be brief" not in user


def test_cache_hits_and_its_key(live, tmp_path):
    judge = judge_for(live.url)
    for _ in range(3):
        r = judge("\\boxed{7}", "7", question=Q)
    assert (r.score == 1.0 and r.info["cache"] == "hit"
            and r.info["usage"] == {"prompt_tokens": 0, "completion_tokens": 0})
    assert (len(live.app.state.requests) == 1 and judge.stats()["hits"] == 2
            and r.info["cache_hit_rate"] == pytest.approx(2 / 3, abs=1e-3))
    judge("\\boxed{7}", "7", question=Q + " ")  # another question: another key
    judge_for(live.url, temperature=0.5, cache=judge.cache)("\\boxed{7}", "7", question=Q)  # other sampling
    judge_for(live.url, template=DEFAULT_TEMPLATE + "\n", cache=judge.cache)("\\boxed{7}", "7", question=Q)
    assert len(live.app.state.requests) == 4
    # on disk: a new reward (a new run) reads the verdict back without asking
    path = tmp_path / "judge.sqlite"
    judge_for(live.url, cache_path=path)("\\boxed{7}", "7", question=Q)
    n = len(live.app.state.requests)
    again = judge_for(live.url, cache_path=path)("\\boxed{7}", "7", question=Q)
    assert again.info["cache"] == "hit" and again.score == 1.0 and len(live.app.state.requests) == n
    assert len(JudgeCache(path)) == 0 and JudgeCache(path).get(judge.cache_key(Q, "7", "7")) is not None


def test_failures_are_not_cached(live):
    judge = judge_for(live.url)
    live.app.state.script = literal("I think it is right")
    assert judge("\\boxed{7}", "7", question=Q).status == "judge_unparsed"
    live.app.state.script = grader
    assert judge("\\boxed{7}", "7", question=Q).status == "ok"


def test_a_group_of_identical_answers_is_judged_once(live):
    judge = judge_for(live.url)
    live.app.state.delay = 0.2
    group = ["\\boxed{7}"] * 6 + ["\\boxed{8}"] * 2  # a GRPO group of 8
    results = judge.score_many(group, ["7"] * 8, [{"question": Q}] * 8)
    assert [r.score for r in results] == [1.0] * 6 + [0.0] * 2
    assert len(live.app.state.requests) == 2
    assert judge_metrics(results)["judge/cache_hit_rate"] == pytest.approx(6 / 8)


def test_concurrency_is_bounded_per_process(live):
    live.app.state.delay = 0.2
    judge = judge_for(live.url, max_concurrency=3, cache=False)
    t0 = time.monotonic()
    results = judge.score_many([f"\\boxed{{{i}}}" for i in range(9)], ["7"] * 9, [{"question": Q}] * 9)
    assert all(r.status == "ok" for r in results)
    assert live.app.state.max_active == 3 and time.monotonic() - t0 >= 0.55


def test_sync_async_and_pool_paths_agree(live):
    judge = judge_for(live.url, cache=False)
    comps = ["\\boxed{7}", "The answer is 8.", "", "#### 7"]
    refs = ["7"] * 4
    metas = [{"question": Q}] * 4
    want = [1.0, 0.0, 0.0, 1.0]
    assert [judge(c, r, **m).score for c, r, m in zip(comps, refs, metas)] == want
    assert [r.score for r in judge.score_many(comps, refs, metas)] == want
    assert [r.score for r in score_batch(judge, comps, refs, metas, deadline=5.0)] == want

    async def main():
        one = await judge.areward("\\boxed{7}", "7", question=Q)
        many = await judge.ascore(comps, refs, metas)
        pooled = await ascore_batch(judge, comps, refs, metas, deadline=5.0)
        return one, many, pooled

    one, many, pooled = asyncio.run(main())
    assert one.score == 1.0 and [r.score for r in many] == want and [r.score for r in pooled] == want


def test_pickles(live):
    judge = judge_for(live.url)
    judge("\\boxed{7}", "7", question=Q)
    clone = pickle.loads(pickle.dumps(judge))
    assert clone("\\boxed{7}", "7", question=Q).score == 1.0
    assert clone.stats()["misses"] == 1  # the memory cache does not travel; a sqlite path does


# ---------------------------------------------------------------------------- a broken server

def _timed(judge: JudgeReward, n: int = 1):
    t0 = time.monotonic()
    out = [judge(f"\\boxed{{{i}}}", "7", question=Q) for i in range(n)]
    return out, time.monotonic() - t0


def test_slow_server_is_judge_timeout_within_the_deadline(live):
    live.app.state.delay = 3.0
    judge = judge_for(live.url, deadline=0.6, retries=3)
    [r], took = _timed(judge)
    assert r.status == "judge_timeout" and r.score == 0.0, r.info
    assert took < 0.6 + 0.5, took


@pytest.mark.parametrize("mode, attempts", [("500", 3), ("garbage", 3), ("no_choices", 3), ("404", 1)])
def test_http_errors_and_garbage_are_judge_error_after_retries(live, mode, attempts):
    live.app.state.mode = mode
    judge = judge_for(live.url, retries=2, breaker_threshold=100)
    [r], took = _timed(judge)
    assert r.status == "judge_error" and r.score == 0.0 and r.info["attempts"] == attempts, r.info
    assert len(live.app.state.requests) == attempts and took < 5.0


def test_unparsed_reply_is_judge_unparsed_and_not_retried(live):
    live.app.state.script = literal("Yes, the student is right.")
    r = judge_for(live.url)("\\boxed{7}", "7", question=Q)
    assert r.status == "judge_unparsed" and r.score == 0.0 and r.info["reply"] == "Yes, the student is right."
    assert len(live.app.state.requests) == 1


@pytest.mark.parametrize("mode", ["drop", "truncate"])
def test_dropped_connections_are_judge_error(mode):
    with DroppingServer(mode) as server:
        judge = judge_for(server.url, retries=1, breaker_threshold=100)
        [r], took = _timed(judge)
    assert r.status == "judge_error" and r.info["attempts"] == 2 and took < 5.0, r.info
    assert server.connections >= 2


def test_nothing_listening_is_judge_error_fast_and_the_breaker_opens():
    judge = judge_for(free_port_url(), retries=1, breaker_threshold=3, breaker_cooldown=60.0)
    results, took = _timed(judge, 6)
    assert all(r.status == "judge_error" for r in results) and took < 3.0, [r.info for r in results]
    assert [r.info.get("phase") for r in results][-3:] == ["circuit_open"] * 3
    assert results[-1].info["attempts"] == 0


def test_breaker_half_opens_after_the_cooldown_and_closes_on_success(live):
    live.app.state.mode = "500"
    judge = judge_for(live.url, retries=0, breaker_threshold=2, breaker_cooldown=0.5, cache=False)
    _timed(judge, 2)
    n = len(live.app.state.requests)
    [r], _ = _timed(judge)
    assert r.info.get("phase") == "circuit_open" and len(live.app.state.requests) == n
    live.app.state.mode = "ok"
    time.sleep(0.6)
    results, _ = _timed(judge, 2)
    assert [x.status for x in results] == ["ok", "ok"]


def test_user_chosen_failure_scores(live):
    live.app.state.mode = "500"
    judge = judge_for(live.url, retries=0, error_score=None, breaker_threshold=100)
    r = judge("\\boxed{7}", "7", question=Q)
    assert r.score is None and r.status == "judge_error"
    live.app.state.mode = "ok"
    live.app.state.script = literal("no idea")
    assert judge_for(live.url, unparsed_score=-1.0)("\\boxed{7}", "7", question=Q).score == -1.0


def test_a_dead_server_in_a_batch_gives_judge_error_rows_counted_in_metrics():
    judge = judge_for(free_port_url(), deadline=1.0, breaker_threshold=2)
    t0 = time.monotonic()
    results = score_batch(judge, [f"\\boxed{{{i}}}" for i in range(16)], ["7"] * 16, [{"question": Q}] * 16,
                          deadline=1.0, workers=8)
    assert time.monotonic() - t0 < 5.0
    assert {r.status for r in results} == {"judge_error"} and all(r.score == 0.0 for r in results)
    assert judge_metrics(results)["judge/status/judge_error"] == 16.0


# ---------------------------------------------------------------------------- hybrid grading

def fast_rule(completion, reference, **meta):
    """The math reward's fast path, ``too_complex`` where it cannot decide (deterministic, no pool)."""
    r = math_reward.fast(completion, reference)
    return r if r is not None else RewardResult(0.0, {"status": "too_complex", "rule": "unsupported"})


def test_hybrid_asks_the_judge_only_where_the_rule_cannot_decide(live):
    live.app.state.script = echo_correct
    judge = judge_for(live.url)
    hybrid = HybridReward(fast_rule, judge)
    comps = ["\\boxed{7}", "\\boxed{8}", "Let's solve this step by step.", "\\boxed{\\int_0^1 7 \\, dx}"]
    refs = ["7"] * 4
    results = [hybrid(c, r, question=Q) for c, r in zip(comps, refs)]
    by = [r.info["decided_by"] for r in results]
    assert by == ["rule", "rule", "rule", "judge"], [r.info for r in results]
    assert [r.score for r in results] == [1.0, 0.0, 0.0, 1.0]
    assert results[2].status == "no_answer"  # a refusal is a decision: never sent to the judge
    assert results[3].info["rule_info"]["status"] == "too_complex" and len(live.app.state.requests) == 1
    assert results[3].info["verdict"] == "CORRECT"
    m = judge_metrics(results)
    assert m["judge/judged_frac"] == 0.25 and m["judge/prompt_tokens"] > 0
    pooled = score_batch(hybrid, comps, refs, [{"question": Q}] * 4, deadline=5.0)
    assert [r.score for r in pooled] == [1.0, 0.0, 0.0, 1.0] and pooled[3].info["cache"] == "hit"


def test_hybrid_with_the_real_math_reward_decides_on_the_fast_path(live):
    hybrid = HybridReward(math_reward, judge_for(live.url))
    r = hybrid("so \\boxed{\\frac{3}{4}}", "0.75", question="?")
    assert r.score == 1.0 and r.info["decided_by"] == "rule" and not live.app.state.requests
    assert hybrid.fast("so \\boxed{\\frac{3}{4}}", "0.75").info["decided_by"] == "rule"
