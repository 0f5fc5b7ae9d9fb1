"""The judge reward: :class:`JudgeReward` asks an OpenAI-compatible server whether an extracted answer
is right, after the pre-filters, through the cache, within its deadlines; the contract, the limits
and the defences are described in :mod:`rewardlab.rewards.judge`.

    judge = JudgeReward("http://127.0.0.1:8000/v1", "my-judge-model", JudgeOptions(cache_path="judge.sqlite"))
    judge("... so the answer is \\boxed{7}", "7", question="Tom has 3 apples and buys 4 more ...")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rewardlab.rewards.base import RewardResult
from rewardlab.rewards.judge.cache import JudgeCache
from rewardlab.rewards.judge.defences import defang, prefilter
from rewardlab.rewards.judge.inputs import extract_judge_answer, question_of, reference_of
from rewardlab.rewards.judge.options import JudgeOptions
from rewardlab.rewards.judge.prompts import DEFENCES
from rewardlab.rewards.judge.transport import Endpoint, RetryPolicy, ask, runtime
from rewardlab.rewards.judge.verdict import VerdictError, parse_verdict, restatement_matches

__all__ = ["JudgeReward"]


class JudgeReward:
    """An LLM-as-judge reward (:mod:`rewardlab.rewards.judge` describes the protocol, limits and defences).

    Args:
        base_url: the server's OpenAI-compatible root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the judge model's name on that server.
        options: everything else, one documented field each (:class:`~rewardlab.rewards.judge.options.JudgeOptions`:
            prompts, sampling, extraction, limits, circuit breaker, cache, the score of each outcome, defences).
    """

    isolated = True  # its own deadlines bound every call; the pool calls it from threads of this process

    def __init__(self, base_url: str, model: str, options: JudgeOptions | None = None) -> None:
        o = options or JudgeOptions()
        unknown = set(o.disable) - set(DEFENCES)
        if unknown:
            raise ValueError(f"unknown defence(s) {sorted(unknown)}; known: {', '.join(DEFENCES)}")
        if o.extract not in ("math", "text") and not callable(o.extract):
            raise ValueError(f"extract must be 'math', 'text' or a callable, got {o.extract!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = o.api_key if o.api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.name = o.name
        self.system, self.template, self.no_reference_template = o.system, o.template, o.no_reference_template
        self.sampling = {"temperature": o.temperature, "max_tokens": int(o.max_tokens)}
        if o.top_p is not None:
            self.sampling["top_p"] = o.top_p
        if o.seed is not None:
            self.sampling["seed"] = int(o.seed)
        if o.extra_body:
            self.sampling.update(o.extra_body)
        self.extract = o.extract
        self.deadline = float(o.deadline)
        self.request_timeout = float(o.request_timeout) if o.request_timeout is not None else self.deadline
        self.queue_timeout = float(o.queue_timeout)
        self.retries, self.backoff, self.backoff_max = int(o.retries), float(o.backoff), float(o.backoff_max)
        self.max_concurrency = int(o.max_concurrency)
        self.breaker_threshold, self.breaker_cooldown = int(o.breaker_threshold), float(o.breaker_cooldown)
        if isinstance(o.cache, JudgeCache):
            self.cache: JudgeCache | None = o.cache
        else:
            self.cache = JudgeCache(o.cache_path) if (o.cache or o.cache_path is not None) else None
        self.scores = {"correct": o.correct_score, "wrong": o.wrong_score, "refused": o.refused_score,
                       "judge_timeout": o.timeout_score, "judge_error": o.error_score,
                       "judge_unparsed": o.unparsed_score, "judge_mismatch": o.mismatch_score}
        self.timeout_score = 0.0 if o.timeout_score is None else float(o.timeout_score)
        self.disabled = frozenset(o.disable)
        self.allow_preamble = o.allow_preamble
        self.max_answer_chars = int(o.max_answer_chars)
        self._stats_lock = threading.Lock()
        self._stats: Counter = Counter()

    def __repr__(self) -> str:
        return f"JudgeReward({self.base_url!r}, {self.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_stats_lock")
        state["_stats"] = Counter()
        if callable(self.extract) and getattr(self.extract, "__name__", "") == "<lambda>":
            raise TypeError("JudgeReward(extract=<lambda>) cannot be pickled; use a module-level function")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stats_lock = threading.Lock()

    # -- statistics
    def stats(self) -> dict[str, float]:
        """Totals of this reward in this process: requests, cache hits/misses, hit rate, tokens."""
        with self._stats_lock:
            s = dict(self._stats)
        looked = s.get("hits", 0) + s.get("misses", 0)
        s["cache_hit_rate"] = s.get("hits", 0) / looked if looked else float("nan")
        return s

    def _count(self, **kw: int) -> float:
        with self._stats_lock:
            self._stats.update(kw)
            looked = self._stats["hits"] + self._stats["misses"]
            return round(self._stats["hits"] / looked, 4) if looked else 0.0

    # -- stage 1: the answer and the pre-filters (linear time, caller's thread)
    def _extract(self, completion: str) -> tuple[str | None, dict[str, Any]]:
        return extract_judge_answer(completion, self.extract, disabled=self.disabled, max_chars=self.max_answer_chars)

    def prefilter(self, answer: str, question: str | None, reference: str | None, *,
                  sentence: bool = False) -> tuple[str, str] | None:
        """``(status, why)`` when a defence refuses ``answer`` before any judge is asked, else None.
        (``sentence``: ``answer`` is the whole "the answer is ..." sentence around the extracted answer.)"""
        return prefilter(answer, question, reference, disabled=self.disabled, sentence=sentence)

    def _prepare(self, completion: Any, reference: Any, meta: dict[str, Any]) -> tuple[RewardResult | None, dict]:
        """The refusal of this item, or None and what the request needs."""
        question = question_of(meta)
        ref = reference_of(reference)
        text = completion if isinstance(completion, str) else ("" if completion is None else str(completion))
        answer, info = self._extract(text)
        info["judged"] = False
        if answer is None:
            status = info.pop("extraction_problem", "no_answer")
            info.update(status=status, answer=None, detail="no final answer was found; the judge is not asked")
            return RewardResult(self.scores["refused"], info), {}
        info["answer"] = answer[:300]
        refused = self.prefilter(answer, question, ref)
        if refused is None and info.get("answer_sentence"):
            refused = self.prefilter(info["answer_sentence"], question, ref, sentence=True)
        if refused is not None:
            info.update(status=refused[0], detail=refused[1])
            return RewardResult(self.scores["refused"], info), {}
        return None, {"question": question, "reference": ref, "answer": answer, "info": info}

    def messages(self, question: str | None, reference: str | None, answer: str) -> list[dict[str, str]]:
        """The chat messages sent to the judge for this item."""
        fence = (lambda s: s) if "fence" in self.disabled else defang
        template = self.template if reference is not None else self.no_reference_template
        user = template.format(question=fence(question or "(no question given)"),
                               reference=fence(reference if reference is not None else "(none given)"),
                               answer=fence(answer))
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def cache_key(self, question: str | None, reference: str | None, answer: str) -> str:
        blob = json.dumps([self.model, self.system,
                           self.template if reference is not None else self.no_reference_template,
                           sorted(self.sampling.items()), sorted(self.disabled), self.allow_preamble,
                           question, reference, answer], ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _from_verdict(self, verdict: dict[str, Any], answer: str, info: dict[str, Any]) -> RewardResult:
        """The result of a parsed verdict (fresh or cached)."""
        restated, correct = verdict["restated"], verdict["correct"]
        info.update(verdict=("CORRECT" if correct else "INCORRECT"), restated=restated[:300])
        if "restate" not in self.disabled and not restatement_matches(restated, answer):
            info.update(status="judge_mismatch", detail="the judge restated a different answer than the one it was "
                        "shown")
            return RewardResult(self.scores["judge_mismatch"], info)
        info["status"] = "ok"
        return RewardResult(self.scores["correct" if correct else "wrong"], info)

    def fast(self, completion: Any, reference: Any = None, **meta: Any) -> RewardResult | None:
        """Refusals and cache hits, on the caller's thread; None when the judge must be asked."""
        try:
            refused, req = self._prepare(completion, reference, meta)
        except Exception:  # noqa: BLE001 - the full call reports it
            return None
        if refused is not None:
            return refused
        if self.cache is None:
            return None
        key = self.cache_key(req["question"], req["reference"], req["answer"])
        hit = self.cache.get(key)
        if hit is None:
            return None
        info = req["info"]
        rate = self._count(hits=1)
        info.update(judged=True, cache="hit", cache_hit_rate=rate, usage={"prompt_tokens": 0, "completion_tokens": 0})
        return self._from_verdict(hit, req["answer"], info)

    # -- stage 2: the request (on the runtime's loop)
    @property
    def endpoint(self) -> Endpoint:
        """The server, model, key and sampling settings of this judge's requests."""
        return Endpoint(self.base_url, self.model, self.api_key, self.max_concurrency, dict(self.sampling))

    @property
    def policy(self) -> RetryPolicy:
        """This judge's per-item limits: deadline, retries, backoff and the circuit breaker."""
        return RetryPolicy(self.deadline, self.request_timeout, self.retries, self.backoff, self.backoff_max,
                           self.breaker_threshold, self.breaker_cooldown)

    async def _judge(self, req: dict[str, Any]) -> RewardResult:
        """The item's result, on the runtime loop: cache, in-flight sharing, a slot, the request."""
        rt = runtime()
        question, ref, answer, info = req["question"], req["reference"], req["answer"], req["info"]
        info["judged"] = True
        key = self.cache_key(question, ref, answer)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is None and key in rt.inflight:
                try:
                    hit = await asyncio.shield(rt.inflight[key])
                except Exception:  # noqa: BLE001 - the first one failed: ask again
                    hit = None
            if hit is not None:
                info.update(cache="hit", cache_hit_rate=self._count(hits=1),
                            usage={"prompt_tokens": 0, "completion_tokens": 0})
                return self._from_verdict(hit, answer, info)
        fut: asyncio.Future | None = None
        if self.cache is not None:
            fut = rt.loop.create_future()
            rt.inflight[key] = fut
        verdict = None
        try:
            info.update(cache="miss" if self.cache is not None else "off",
                        cache_hit_rate=self._count(misses=1) if self.cache is not None else 0.0)
            sem = rt.semaphore(self.base_url, self.max_concurrency)
            try:
                await asyncio.wait_for(sem.acquire(), self.queue_timeout)
            except asyncio.TimeoutError:
                info.update(status="judge_timeout", phase="queue",
                            detail=f"no request slot within the {self.queue_timeout:g} s queue timeout")
                return RewardResult(self.scores["judge_timeout"], info)
            try:
                out = await ask(rt, self.endpoint, self.policy, self.messages(question, ref, answer), info)
            finally:
                sem.release()
            usage = info.get("usage", {})
            self._count(requests=info.get("attempts", 0), prompt_tokens=usage.get("prompt_tokens", 0),
                        completion_tokens=usage.get("completion_tokens", 0))
            if out.kind != "ok":
                status = "judge_timeout" if out.kind == "timeout" else "judge_error"
                info.update(status=status, detail=out.detail)
                return RewardResult(self.scores[status], info)
            info["reply"] = out.content[:500]
            try:
                restated, correct = parse_verdict(out.content, allow_preamble=self.allow_preamble)
            except VerdictError as e:
                info.update(status="judge_unparsed", detail=str(e))
                return RewardResult(self.scores["judge_unparsed"], info)
            verdict = {"restated": restated, "correct": correct}
            if self.cache is not None:
                self.cache.put(key, verdict)
            return self._from_verdict(verdict, answer, info)
        finally:
            if fut is not None:
                rt.inflight.pop(key, None)
                if verdict is not None:
                    fut.set_result(verdict)
                else:
                    fut.set_exception(RuntimeError("no verdict"))
                    fut.exception()  # retrieved: no "never retrieved" warning

    def _failure(self, status: str, detail: str, info: dict[str, Any] | None = None) -> RewardResult:
        info = dict(info or {})
        info.update(status=status, detail=detail)
        return RewardResult(self.scores[status], info)

    def _submit(self, req: dict[str, Any]) -> "concurrent.futures.Future[RewardResult]":
        return asyncio.run_coroutine_threadsafe(self._judge(req), runtime().loop)

    @property
    def hard_cap(self) -> float:
        """No call returns later than this many seconds after it starts."""
        return self.queue_timeout + self.deadline + 2.0

    def _start(self, completion: Any, reference: Any, meta: dict) -> tuple[RewardResult | None, Any, Any]:
        """``(result, None, None)`` when the fast part or a pre-filter decides; else ``(None, future, request)``."""
        first = self.fast(completion, reference, **meta)
        if first is not None:
            return first, None, None
        refused, req = self._prepare(completion, reference, meta)
        if refused is not None:
            return refused, None, None
        return None, self._submit(req), req

    def __call__(self, completion: Any, reference: Any = None, **meta: Any) -> RewardResult:
        """Grade one completion (blocking; bounded by :attr:`hard_cap`). Never raises."""
        try:
            done, fut, req = self._start(completion, reference, meta)
            if done is not None:
                return done
            try:
                return fut.result(timeout=self.hard_cap)
            except TimeoutError:
                fut.cancel()
                return self._failure("judge_timeout", f"no result within the {self.hard_cap:g} s hard cap", req["info"])
        except Exception as e:  # noqa: BLE001 - a reward never raises
            return self._failure("judge_error", f"{type(e).__name__}: {e}")

    async def areward(self, completion: Any, reference: Any = None, **meta: Any) -> RewardResult:
        """:meth:`__call__` for asyncio code (any event loop); the request runs on the judge's loop."""
        try:
            done, fut, req = self._start(completion, reference, meta)
            if done is not None:
                return done
            try:
                return await asyncio.wait_for(asyncio.wrap_future(fut), self.hard_cap)
            except asyncio.TimeoutError:
                fut.cancel()
                return self._failure("judge_timeout", f"no result within the {self.hard_cap:g} s hard cap", req["info"])
        except Exception as e:  # noqa: BLE001
            return self._failure("judge_error", f"{type(e).__name__}: {e}")

    async def ascore(self, completions: Sequence[Any], references: Sequence[Any],
                     metas: Sequence[dict] | None = None) -> list[RewardResult]:
        """A batch, concurrently (up to ``max_concurrency`` requests in flight), in input order."""
        metas = metas if metas is not None else [{} for _ in completions]
        if not (len(completions) == len(references) == len(metas)):
            raise ValueError("ascore: completions, references and metas differ in length")
        return list(await asyncio.gather(*(self.areward(c, r, **(m or {}))
                                           for c, r, m in zip(completions, references, metas))))

    def score_many(self, completions: Sequence[Any], references: Sequence[Any],
                   metas: Sequence[dict] | None = None) -> list[RewardResult]:
        """:meth:`ascore` from sync code (do not call it from the judge's own loop)."""
        metas = metas if metas is not None else [{} for _ in completions]
        if not (len(completions) == len(references) == len(metas)):
            raise ValueError("score_many: completions, references and metas differ in length")
        out: list[RewardResult | None] = [None] * len(completions)
        pending: list[tuple[int, Any]] = []
        for i, (c, r, m) in enumerate(zip(completions, references, metas)):
            try:
                first = self.fast(c, r, **(m or {}))
                if first is None:
                    refused, req = self._prepare(c, r, m or {})
                    if refused is not None:
                        first = refused
                    else:
                        pending.append((i, self._submit(req)))
                        continue
                out[i] = first
            except Exception as e:  # noqa: BLE001
                out[i] = self._failure("judge_error", f"{type(e).__name__}: {e}")
        end = time.monotonic() + self.hard_cap
        for i, fut in pending:
            try:
                out[i] = fut.result(timeout=max(0.0, end - time.monotonic()))
            except TimeoutError:
                fut.cancel()
                out[i] = self._failure("judge_timeout", f"no result within the {self.hard_cap:g} s hard cap")
            except Exception as e:  # noqa: BLE001
                out[i] = self._failure("judge_error", f"{type(e).__name__}: {e}")
        return out  # type: ignore[return-value]
