"""Hybrid grading: the rule reward decides where it can, and the judge grades only what the rule could
not decide.

    hybrid = HybridReward(math_reward, judge)   # info["decided_by"]: "rule" or "judge"
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Callable

from rewardlab.rewards.base import RewardResult, as_result, fast_part
from rewardlab.rewards.judge.reward import JudgeReward

__all__ = ["HYBRID_JUDGE_STATUSES", "HybridReward"]

HYBRID_JUDGE_STATUSES = ("too_complex", "timeout", "error", "bad_gold", "gold_parse_error")
"""Statuses of the rule reward that :class:`HybridReward` sends to the judge by default: the rule
could not decide (an answer it cannot compare, its time ran out, it failed, or it cannot read the
reference). Refusals (``no_answer``, ``ambiguous``, ``box_spam``, ...) are decisions and stay."""


class HybridReward:
    """The rule reward decides where it can; the judge grades only what the rule could not decide.

    ``HybridReward(math_reward, judge)``: each completion is graded by ``rule`` first; a result
    whose status is in ``judge_statuses`` (default :data:`HYBRID_JUDGE_STATUSES`: ``too_complex``,
    ``timeout``, ``error``, ``bad_gold``, ``gold_parse_error``) is graded by ``judge`` instead, and
    every other result (right, wrong, or a refusal such as ``no_answer`` or ``ambiguous``) is the
    rule's. Sending ``no_answer`` to the judge is possible (``judge_statuses=(..., "no_answer")``)
    but re-opens the door to answers without an answer: the judge's own pre-filters then stand alone.

    ``info["decided_by"]`` is ``"rule"`` or ``"judge"``, ``info["judged"]`` says whether the judge was
    consulted (:func:`judge_metrics` reports the share), ``info["rule_info"]`` keeps the rule's
    verdict; the judge's keys (``verdict``, ``usage``, ``cache``, ...) are at the top level when it decided.
    """

    isolated = True

    def __init__(self, rule: Callable[..., RewardResult], judge: JudgeReward, *,
                 judge_statuses: Iterable[str] = HYBRID_JUDGE_STATUSES, name: str = "hybrid") -> None:
        self.rule = rule
        self.judge = judge
        self.judge_statuses = frozenset(judge_statuses)
        self.name = name
        self.timeout_score = judge.timeout_score

    def __repr__(self) -> str:
        return f"HybridReward({self.rule!r}, {self.judge!r}, judge_statuses={sorted(self.judge_statuses)})"

    def _rule_result(self, completion: Any, reference: Any, meta: dict) -> RewardResult:
        try:
            return as_result(self.rule(completion, reference, **meta))
        except Exception as e:  # noqa: BLE001 - the judge is asked instead
            return RewardResult(None, {"status": "error", "error": f"{type(e).__name__}: {e}"})

    def _by_rule(self, r: RewardResult) -> RewardResult:
        info = dict(r.info)
        info.update(decided_by="rule", judged=False)
        return RewardResult(r.score, info)

    def _by_judge(self, rule: RewardResult, j: RewardResult) -> RewardResult:
        info = dict(j.info)
        info.update(decided_by="judge", rule_info=rule.info)
        return RewardResult(j.score, info)

    def fast(self, completion: Any, reference: Any = None, **meta: Any) -> RewardResult | None:
        """The rule's verdict when its fast path decides, else the judge's fast path (refusal or
        cache hit) for a status the judge takes; None otherwise."""
        f = fast_part(self.rule)
        if f is None:
            return None
        try:
            r = f(completion, reference, **meta)
        except Exception:  # noqa: BLE001
            return None
        if r is None:
            return None
        r = as_result(r)
        if r.status not in self.judge_statuses:
            return self._by_rule(r)
        j = self.judge.fast(completion, reference, **meta)
        return None if j is None else self._by_judge(r, j)

    def __call__(self, completion: Any, reference: Any = None, **meta: Any) -> RewardResult:
        r = self._rule_result(completion, reference, meta)
        if r.status not in self.judge_statuses:
            return self._by_rule(r)
        return self._by_judge(r, self.judge(completion, reference, **meta))

    async def areward(self, completion: Any, reference: Any = None, **meta: Any) -> RewardResult:
        r = await asyncio.to_thread(self._rule_result, completion, reference, meta)
        if r.status not in self.judge_statuses:
            return self._by_rule(r)
        return self._by_judge(r, await self.judge.areward(completion, reference, **meta))
