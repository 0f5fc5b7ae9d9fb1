"""The math answer reward: extract the final answer, normalise the gold, decide equivalence, explain.

    >>> from rewardlab.rewards import math_reward
    >>> r = math_reward("... so she has 3*4=12 apples.\\n#### 12.0", "She has 3*4=<<3*4=12>>12 apples.\\n#### 12")
    >>> r.score, r.info["rule"]
    (1.0, 'fast_int')

Three stages, each with its own module:

1. extraction (:mod:`.extract`): last ``\\boxed{}`` group, GSM8K ``####``, "the answer is",
   or a fallback; the policy and the anti-hacking checks are an :class:`ExtractionPolicy`;
2. the fast path (:mod:`.equiv`): exact, pure Python, on the caller's thread. Integers,
   decimals, fractions, percentages, thousands separators, scientific notation, short arithmetic,
   polynomials, lists and text answers are decided here without touching a LaTeX parser;
3. the slow path (:mod:`.slow`, :meth:`MathReward.slow`): math-verify + sympy in a worker process
   of :mod:`rewardlab.rewards.pool`, killed when it has used its budget of *worker CPU* seconds (so
   the verdict does not depend on how busy the machine is) or when the call reaches its wall-clock
   cap (the hang guard, which also covers a cold start). A timeout scores ``timeout_score`` (0.0)
   with ``info["status"] = "timeout"`` and ``info["phase"]`` (``startup``, ``queue``, ``cpu`` or
   ``wall``); slow-path results carry ``cpu_s`` and ``wall_s``.

The reward never dispatches itself: the pool decides where each stage runs. In a batch
(``score_batch(..., deadline=...)``: the trainer's ``--reward-deadline``, the eval suite's grader
deadline) the batch's deadline and wall cap apply. ``MathReward(timeout=..., wall_cap=...)``
(defaults 1 s and 5 s) are only the limits of *direct* calls ``math_reward(completion, gold)``
outside a batch, which go through ``pool.score_one``.

Answers longer than :data:`FAST_MAX_CHARS` skip the fast path and go to the worker, so that the
caller's thread only ever handles bounded text: extraction is linear in the completion, and the
fast comparison runs on at most ``FAST_MAX_CHARS`` characters.

``info`` always holds ``status``, ``pred`` (extracted answer or None), ``gold``, ``extraction``
(how the answer was found), ``rule`` (what decided: ``fast_int``, ``fast_fraction``, ``fast_percent``,
``fast_list``, ``fast_poly``, ``fast_magnitude``, ``string``, ``text``, ``math_verify``, ...) and,
when parsed, ``pred_parsed`` / ``gold_parsed``. Statuses other than ``ok``: ``no_answer``,
``box_spam``, ``ambiguous``, ``number_spam``, ``empty_box``, ``negated``, ``junk``, ``restated``, ``timeout``,
``too_complex``,
``gold_parse_error``, ``bad_gold``, ``error``.

CLI: ``rewardlab reward math --completion "... \\boxed{3/4}" --gold "\\frac{3}{4}"``.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

from rewardlab.rewards import pool as _pool
from rewardlab.rewards.base import RewardResult, register
from rewardlab.rewards.math.equiv import FAST_MAX_CHARS, fast_compare
from rewardlab.rewards.math.commit import truncated
from rewardlab.rewards.math.extract import Extraction, ExtractionPolicy, extract_answer, extract_gold, find_boxes

_REFUSALS = {"box_spam", "ambiguous", "number_spam", "hedge", "withdrawn", "negated", "bound", "question",
             "truncated", "restated"}
_DETAILS = {
    "box_spam": "more than {boxes} different boxed answers",
    "ambiguous": "the answer offers several candidates",
    "number_spam": "the answer hides among many numbers",
    "hedge": "two or more different final answers and no correction: the completion commits to none",
    "withdrawn": "the answer is taken back and no corrected value is stated",
    "negated": "the text denies this value ('not', 'can't be')",
    "bound": "a bound ('at least', 'more than') is not an answer",
    "question": "the value is asked, not stated",
    "truncated": "the completion was cut by its token budget right after this number (it may be cut mid-number)",
    "restated": "the text restates the problem (its givens, or its question) and states no answer",
}
_MATRIX = re.compile(r"\\begin\s*+\{([pbBv]?matrix|Vmatrix)\}")
_INFO_CHARS = 300


def _clip(s: str | None) -> str | None:
    if s is None or len(s) <= _INFO_CHARS:
        return s
    return s[:_INFO_CHARS] + f"...[{len(s)} chars]"


class MathReward:
    """A configurable, picklable math answer reward. ``math_reward`` is the default instance.

    Args:
        policy: how the answer is extracted and which hacks are refused (:class:`ExtractionPolicy`).
        timeout: worker CPU seconds allowed for the slow (symbolic) path of one *direct* call
            (in a batch, ``score_batch``'s ``deadline`` applies instead).
        wall_cap: wall-clock seconds after which a direct call returns, whatever happens (hang
            guard; in a batch, ``score_batch``'s ``wall_cap``).
        timeout_score: the score of a call that ran out of time.
        correct_score / wrong_score: the scores of a graded answer.
        refused_score: the score of a refused (hacking) or missing answer.
    """

    name = "math"
    isolated = False

    def __init__(self, policy: ExtractionPolicy | None = None, *, timeout: float = 1.0, timeout_score: float = 0.0,
                 correct_score: float = 1.0, wrong_score: float = 0.0, refused_score: float = 0.0,
                 wall_cap: float = _pool.WALL_CAP):
        self.policy = policy or ExtractionPolicy()
        self.timeout = float(timeout)
        self.wall_cap = float(wall_cap)
        self.timeout_score = float(timeout_score)
        self.correct_score = float(correct_score)
        self.wrong_score = float(wrong_score)
        self.refused_score = float(refused_score)

    def __repr__(self) -> str:
        return (f"MathReward(policy={self.policy!r}, timeout={self.timeout}, wall_cap={self.wall_cap}, "
                f"timeout_score={self.timeout_score})")

    def __reduce__(self):
        # the default instance pickles by reference; others by value
        if self is math_reward:
            return "math_reward"
        return (_rebuild, (asdict(self.policy), self.timeout, self.timeout_score, self.correct_score,
                           self.wrong_score, self.refused_score, self.wall_cap))

    # -- stages
    def _prepare(self, completion: Any, reference: Any) -> tuple[Extraction, Extraction, dict]:
        pred = extract_answer(completion, self.policy)
        gold = extract_gold(reference.get("answer", reference.get("gold")) if isinstance(reference, dict)
                            else reference)
        info: dict[str, Any] = {
            "pred": _clip(pred.answer),
            "gold": _clip(gold.answer),
            "extraction": pred.method,
        }
        if pred.n_boxes:
            info["n_boxes"] = pred.n_boxes
        if pred.corrected:
            info["commitment"] = "corrected"
        return pred, gold, info

    def _result(self, equal: bool, info: dict) -> RewardResult:
        info.setdefault("status", "ok")
        return RewardResult(self.correct_score if equal else self.wrong_score, info)

    def fast(self, completion: Any, reference: Any, **meta: Any) -> RewardResult | None:
        """Decide on the caller's thread without sympy, or return None (the slow path is needed).
        Never raises: garbage in (a completion that is not text, ...) is an ``error`` result here."""
        try:
            return self._fast(completion, reference, meta)
        except Exception as e:  # noqa: BLE001 - garbage in never raises
            return RewardResult(self.wrong_score, {"status": "error", "error": f"{type(e).__name__}: {e}"})

    def _fast(self, completion: Any, reference: Any, meta: dict | None = None) -> RewardResult | None:
        pred, gold, info = self._prepare(completion, reference)
        cut = meta and (meta.get("finish_reason") == "length" or meta.get("truncated") is True)
        if cut and self.policy.commitment and truncated(completion, pred.answer):
            pred = Extraction(None, pred.method, "truncated", n_boxes=pred.n_boxes)
        if gold.answer is None:
            info.update(status="bad_gold", rule="none", detail="the reference holds no answer")
            return RewardResult(None, info)
        if pred.answer is None:
            problem = pred.problem or "no_answer"
            info.update(status=problem, rule="extraction")
            if problem in _REFUSALS:
                info["detail"] = _DETAILS[problem].format(boxes=self.policy.max_distinct_boxes)
            if problem in ("hedge", "ambiguous", "box_spam", "number_spam", "withdrawn"):
                info["commitment"] = "hedge" if problem != "withdrawn" else "withdrawn"
            return RewardResult(self.refused_score, info)
        kinds = {m.group(1)[0] in "vV" for x in (pred.answer, gold.answer) for m in _MATRIX.finditer(x)}
        if len(kinds) == 2:  # a determinant (vmatrix) is a number, not the matrix
            info.update(status="ok", rule="kind", detail="a determinant (vmatrix) and a matrix are different objects")
            return RewardResult(self.wrong_score, info)
        if len(pred.answer) > FAST_MAX_CHARS or len(gold.answer) > FAST_MAX_CHARS:
            return None  # long answers are compared where the pool can stop them
        d = fast_compare(pred.answer, gold.answer)
        if d.equal is None:
            return None
        info.update(rule=d.rule, pred_parsed=_clip(d.pred_norm), gold_parsed=_clip(d.gold_norm))
        if d.rule == "unsupported":
            info["status"] = "too_complex"
        if d.detail:
            info["detail"] = d.detail
        return self._result(d.equal, info)

    def slow(self, completion: Any, reference: Any, **meta: Any) -> RewardResult:
        """The symbolic comparison (math-verify + sympy). The pool runs this in a worker, under its
        CPU budget, for the answers :meth:`fast` left undecided; it never dispatches anywhere."""
        # lazy: sympy and math-verify take seconds to import; the pool's fork server preloads them
        from rewardlab.rewards.math.slow import slow_compare

        pred, gold, info = self._prepare(completion, reference)
        if pred.answer is None or gold.answer is None:  # fast decides these; only reached when called directly
            return self._fast(completion, reference) or RewardResult(self.wrong_score, info)
        try:
            out = slow_compare(pred.answer, gold.answer)
        except Exception as e:  # noqa: BLE001
            out = {"equal": False, "rule": "error", "status": "error", "detail": f"{type(e).__name__}: {e}"}
        info.update({k: v for k, v in out.items() if k != "equal"})
        if info.get("status") == "gold_parse_error":
            return RewardResult(None, info)  # the reference, not the completion, is at fault
        return self._result(bool(out.get("equal")), info)

    def on_failure(self, result: RewardResult, completion: Any, reference: Any, **meta: Any) -> RewardResult:
        """A timeout or error the pool reports for :meth:`slow`, with the answer that was being compared."""
        _, _, info = self._prepare(completion, reference)
        info.update(result.info)
        if result.status == "timeout":
            info["rule"] = "deadline"
            return RewardResult(self.timeout_score, info)
        info["rule"] = "error"
        return RewardResult(self.wrong_score, info)

    def __call__(self, completion: Any, reference: Any, **meta: Any) -> RewardResult:
        """Grade one completion: :meth:`fast` here, else :meth:`slow` where the pool puts it."""
        return _pool.score_one(self, completion, reference, deadline=self.timeout, wall_cap=self.wall_cap, **meta)


def _rebuild(policy: dict, timeout: float, timeout_score: float, correct: float, wrong: float, refused: float,
             wall_cap: float = _pool.WALL_CAP) -> MathReward:
    return MathReward(ExtractionPolicy(**policy), timeout=timeout, timeout_score=timeout_score,
                      correct_score=correct, wrong_score=wrong, refused_score=refused, wall_cap=wall_cap)


math_reward = register("math")(MathReward())
"""The default math reward (``rewardlab.rewards.math_reward``, registered as ``"math"``)."""

__all__ = ["MathReward", "ExtractionPolicy", "math_reward", "extract_answer", "extract_gold", "find_boxes"]
