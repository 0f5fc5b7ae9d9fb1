"""An environment's traces become training samples without a crash and without a wrong token (issue 39).

A verifiers episode's trace (``rewardlab.envs.verifiers_env.sample_of``) becomes a sample, and the sample a
completion (``DrivenEngine.completion``) that the trainer forwards, masks and weighs. Both take what a third-party
package (or a custom ``drive``) hands over, so the property tests feed them traces written by an adversary: token
ids out of the vocabulary or negative, masks and log-probs of another length, NaN / infinite / positive log-probs,
rewards that are NaN, text or missing, fields of the wrong type, exceptions instead of episodes. The oracle is
computed here, independently: a well-formed trace trains exactly its last branch's sampled tokens, with its
reward; anything else trains nothing, says why in its status, and never raises.
"""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardlab.envs.verifiers_env import episode_reward, sample_of
from rewardlab.rollout.driven import DrivenEngine, untrainable

VOCAB = 512  # the tiny model's tokenizer is smaller; its config's vocab_size decides (see the engine fixture)
FUZZ = settings(max_examples=300, deadline=None)


class _Base:
    """The engine a DrivenEngine wraps: only ``encode`` and ``model.config`` are read here."""

    def __init__(self, tok):
        self.tok, self.model = tok, NS(config=NS(vocab_size=VOCAB))

    def encode(self, text):
        return self.tok.encode(text)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert len(tok) <= VOCAB
    return DrivenEngine(_Base(tok), tok, drive=None)


@st.composite
def wellformed(draw):
    """A trace verifiers could record: a prompt (mask 0), then turns whose sampled tokens have finite log-probs."""
    prompt = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6))
    rest = draw(st.lists(st.tuples(st.integers(0, VOCAB - 1), st.booleans(),
                                   st.floats(-30, 0, allow_nan=False)), min_size=1, max_size=10))
    rest[0] = (rest[0][0], True, rest[0][2])  # the first token after the prompt is the model's
    ids = prompt + [t for t, _, _ in rest]
    mask = [False] * len(prompt) + [m for _, m, _ in rest]
    lps = [0.0] * len(prompt) + [lp if m else 0.0 for _, m, lp in rest]
    reward = draw(st.floats(-5, 5, allow_nan=False))
    return {"ids": ids, "mask": mask, "lps": lps, "reward": reward, "ok": True, "branches": 1}


GARBAGE_TOKEN = st.one_of(st.integers(-3, -1), st.integers(VOCAB, 10**12), st.just(True), st.just(1.5), st.none(),
                          st.just("7"))
GARBAGE_LP = st.one_of(st.just(math.nan), st.just(math.inf), st.just(-math.inf), st.floats(0.01, 50), st.none(),
                       st.just("x"), st.just(True))
GARBAGE_REWARD = st.one_of(st.just(math.nan), st.just(math.inf), st.just("1"), st.just([1]), st.just(True))


@st.composite
def spoiled(draw):
    """A well-formed trace with one thing broken, and what it broke (the oracle's expectation)."""
    t = draw(wellformed())
    what = draw(st.sampled_from(["token", "prompt_token", "mask_length", "lp_length", "lp", "reward", "field",
                                 "not_ok", "raise"]))
    k = len(t["mask"]) - 1 - t["mask"][::-1].index(True)  # a sampled position
    if what == "token":
        t["ids"][k] = draw(GARBAGE_TOKEN)
    elif what == "prompt_token":
        t["ids"][0] = draw(GARBAGE_TOKEN)
    elif what == "mask_length":
        t["mask"] = t["mask"] + [True] if draw(st.booleans()) else t["mask"][:-1]
    elif what == "lp_length":
        t["lps"] = t["lps"] + [0.0] if draw(st.booleans()) else t["lps"][:-1]
    elif what == "lp":
        t["lps"][k] = draw(GARBAGE_LP)
    elif what == "reward":
        t["reward"] = draw(GARBAGE_REWARD)
    elif what == "field":
        t["field"] = draw(st.sampled_from(["token_ids", "sampled_mask", "logprobs", "branches", "calls"]))
    t["spoiled"] = what
    return t


def episode(t: dict, earlier: list[dict] = ()):
    """The verifiers objects ``sample_of`` reads (``EpisodeResult`` -> trace -> branches), as the fuzzer wrote them;
    ``earlier``: branches before the last (a trace that branched)."""
    if t.get("spoiled") == "raise":
        return ValueError("the harness raised")
    branch = NS(token_ids=t["ids"], sampled_mask=t["mask"], logprobs=t["lps"])
    before = [NS(token_ids=e["ids"], sampled_mask=e["mask"], logprobs=e["lps"]) for e in earlier]
    trace = NS(branches=[*before, branch], errors=[], reward=t["reward"], ok=t.get("spoiled") != "not_ok",
               is_timeout=False, calls=[NS(finish_reason="stop")], last_reply="answer", nodes=[])
    if "field" in t:  # a field of another shape than verifiers 0.4's
        holder = trace if t["field"] in ("branches", "calls") else branch
        setattr(holder, t["field"], 7)
    return NS(traces=[trace], errors=[], ok=True, is_timeout=False)


def check_trainable(c, *, branch: bool = False) -> None:
    """What the trainer needs of any completion: one mask and one log-prob per token, ids it can embed, finite
    log-probs, a loss mask of 0 / 1 that trains only an episode graded ``ok`` (an earlier ``branch`` has no verdict:
    its episode's completion holds it)."""
    assert len(c.token_ids) == len(c.loss_mask) == len(c.logprobs) >= 1
    assert all(isinstance(t, int) and 0 <= t < VOCAB for t in [*c.prompt_ids, *c.token_ids]) and c.prompt_ids
    assert all(isinstance(x, float) and math.isfinite(x) for x in c.logprobs)
    assert set(c.loss_mask) <= {0, 1} and (branch or not any(c.loss_mask) or c.episode["status"] == "ok")


@FUZZ
@given(wellformed())
def test_a_wellformed_trace_trains_exactly_its_sampled_tokens_with_its_reward(engine, t):
    c = engine.completion(0, "p", sample_of(episode(t)))
    check_trainable(c)
    start = t["mask"].index(True)
    assert c.prompt_ids == t["ids"][:start] and c.token_ids == t["ids"][start:]
    assert c.loss_mask == [int(m) for m in t["mask"][start:]]
    assert c.logprobs == [lp if m else 0.0 for lp, m in zip(t["lps"][start:], t["mask"][start:])]
    got = episode_reward("", episode=c.episode)
    assert got.status == "ok" and got.score == t["reward"]


@FUZZ
@given(spoiled())
def test_a_spoiled_trace_trains_nothing_says_why_and_never_raises(engine, t):
    c = engine.completion(0, "p", sample_of(episode(t)))
    check_trainable(c)
    got = episode_reward("", episode=c.episode)
    assert math.isfinite(got.score)
    if t["spoiled"] == "reward":  # the tokens are fine; the reward is not a number: counted, scored 0
        assert got.status == "bad_reward" and got.score == 0.0
        return
    assert not any(c.loss_mask) and got.status != "ok" and got.score == 0.0
    want = {"token": "bad_trace", "prompt_token": "bad_trace", "mask_length": "bad_trace", "lp_length": "bad_trace",
            "lp": "bad_trace", "field": "bad_trace", "not_ok": "env_error", "raise": "env_error"}[t["spoiled"]]
    assert got.status == want, (got.status, got.info)


@FUZZ
@given(st.dictionaries(st.sampled_from(["prompt_ids", "token_ids", "sampled", "logprobs"]),
                       st.one_of(st.none(), st.integers(), st.text(max_size=3),
                                 st.lists(st.one_of(st.integers(-2, VOCAB + 2), st.floats(), st.booleans(),
                                                    st.none()), max_size=5))))
def test_a_custom_drivers_sample_of_any_shape_is_a_counted_status(engine, fields):
    """``Kind.drive`` is pluggable: whatever a driver returns per episode becomes a trainable completion or a
    ``bad_trace``."""
    sample = {"prompt_ids": [1], "token_ids": [2], "sampled": [True], "logprobs": [-0.5], "reward": 1.0,
              "status": "ok", **fields}
    c = engine.completion(0, "p", sample)
    check_trainable(c)
    assert (c.episode["status"] == "ok") == (untrainable(sample, VOCAB) is None)


@FUZZ
@given(wellformed(), st.lists(st.one_of(wellformed(), spoiled()), max_size=2))
def test_branches_all_trains_each_wellformed_branch_and_no_spoiled_one(engine, t, earlier):
    """``branches=all``: a trace whose every branch is well-formed trains each earlier branch exactly (its sampled
    tokens in its own context); one spoiled branch makes the whole episode a ``bad_trace`` that trains nothing."""
    earlier = [e for e in earlier if e.get("spoiled") not in ("raise", "not_ok", "reward", "field")]  # branch-level
    t["ids"][0] = 0  # no two branches share a prefix here (a shared reply trains once: the test below)
    for k, e in enumerate(earlier):
        if e.get("spoiled") != "prompt_token":
            e["ids"][0] = k + 1
    c = engine.completion(0, "p", sample_of(episode(t, earlier), every_branch=True))
    check_trainable(c)
    if any("spoiled" in e for e in earlier):
        assert c.episode["status"] == "bad_trace" and not any(c.loss_mask) and c.branches is None
        return
    assert c.episode["status"] == "ok" and len(c.branches or []) == len(earlier)
    for b, e in zip(c.branches or [], earlier):
        check_trainable(b, branch=True)
        start = e["mask"].index(True)
        assert b.prompt_ids == e["ids"][:start] and b.token_ids == e["ids"][start:]
        assert b.loss_mask == [int(m) for m in e["mask"][start:]]


def test_a_reply_two_branches_share_trains_once_and_untrainable_branches_are_skipped(engine):
    """verifiers' branches are root-to-leaf paths: P R1 O1 R2 and P R1 O1 R2' O2 R3 share P R1 O1. With
    ``branches=all`` R1 trains once (in the last branch), the first branch trains R2 alone, nothing is left out; a
    branch verifiers marks untrainable (a compaction attempt) trains nothing."""
    P, R1, O1, R2, R2b, O2, R3 = [10, 11], [20, 21], [30], [40, 41], [50], [60], [70, 71]

    def node(ids, sampled):
        return NS(mask=[sampled] * len(ids), sampled=sampled)

    def branch(pieces, trainable=True):
        ids = [t for piece, _ in pieces for t in piece]
        mask = [m for piece, m in pieces for _ in piece]
        return NS(token_ids=ids, sampled_mask=mask, logprobs=[-0.5 if m else 0.0 for m in mask], trainable=trainable)

    first = branch([(P, False), (R1, True), (O1, False), (R2, True)])
    last = branch([(P, False), (R1, True), (O1, False), (R2b, True), (O2, False), (R3, True)])
    nodes = [node(P, False), node(R1, True), node(O1, False), node(R2, True), node(R2b, True), node(O2, False),
             node(R3, True)]

    def sample(branches):
        trace = NS(branches=branches, errors=[], reward=1.0, ok=True, is_timeout=False,
                   calls=[NS(finish_reason="stop")], last_reply="x", nodes=nodes)
        return sample_of(NS(traces=[trace], errors=[], ok=True, is_timeout=False), every_branch=True)

    c = engine.completion(0, "p", s := sample([first, last]))
    assert s["untrained_tokens"] == 0 and s["branches"] == 2
    (b,) = c.branches
    assert b.prompt_ids == P + R1 + O1 and b.token_ids == R2 and b.loss_mask == [1, 1]  # R1 is the last branch's
    assert c.prompt_ids == P and sum(c.loss_mask) == len(R1 + R2b + R3)
    c = engine.completion(0, "p", s := sample([branch([(P, False), (R1, True), (O1, False), (R2, True)], False),
                                              last]))
    assert c.branches is None and s["untrained_tokens"] == len(R2)  # skipped, and said so
