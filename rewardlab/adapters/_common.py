"""Helpers shared by the trainer adapters: completion text, reference coercion, safe batch scoring.

Nothing here is framework specific; each adapter module (``trl``, ``verl``, ``openrlhf``) is a thin
translation of one trainer's calling convention onto :func:`score_many`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from rewardlab.rewards.base import RewardResult, as_result, get_reward, reward_name
from rewardlab.rewards.pool import score_batch

log = logging.getLogger("rewardlab.adapters")

RewardLike = Callable[..., RewardResult] | str


def resolve(reward: RewardLike) -> Callable[..., RewardResult]:
    """A reward object from a reward or a registry name / dotted path."""
    return get_reward(reward) if isinstance(reward, str) else reward


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, a chat message, or a list of chat messages.

    TRL passes conversational completions as ``[{"role": "assistant", "content": ...}]``; content
    may itself be a list of parts (``{"type": "text", "text": ...}``). Assistant messages are
    joined; a list without any assistant message contributes all of its messages' text.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        msgs = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in msgs if m.get("role") == "assistant"]
        return "".join(_content_text(m.get("content")) for m in (assistant or msgs))
    return str(completion)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def coerce_reference(reference: Any) -> Any:
    """Normalise a reference arriving from a dataset column or JSON.

    * numpy scalars / arrays become Python values (verl hands numpy objects around);
    * a JSON string that decodes to a dict is decoded (code datasets often store tests as JSON);
    * code references in the common public layouts are mapped onto the code reward's contract:
      ``{"inputs": [...], "outputs": [...]}`` (APPS / TACO / CodeContests / verl's prime format)
      becomes ``{"cases": [{"stdin", "stdout"}, ...]}``; ``{"test": ..., "entry_point": ...}``
      (HumanEval) becomes ``{"tests": ..., "entry_point": ..., "prompt": ...}``.
    Anything else (a math answer string) is returned unchanged.
    """
    reference = plain_value(reference)
    if isinstance(reference, str) and reference.lstrip().startswith("{"):
        try:
            decoded = json.loads(reference)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            reference = decoded
    if not isinstance(reference, dict):
        return reference
    if "cases" in reference or ("tests" in reference and "entry_point" in reference):
        return reference
    if "inputs" in reference and "outputs" in reference and "fn_name" not in reference:
        ins, outs = reference["inputs"], reference["outputs"]
        if isinstance(ins, list) and isinstance(outs, list) and len(ins) == len(outs):
            return {"cases": [{"stdin": _stdio(i), "stdout": _stdio(o)} for i, o in zip(ins, outs)]}
    if "test" in reference and "entry_point" in reference:
        return {"tests": reference["test"], "entry_point": reference["entry_point"], "prompt": reference.get("prompt")}
    return reference


def _stdio(x: Any) -> str:
    if isinstance(x, list):
        return "\n".join(str(v) for v in x)
    return str(x)


def plain_value(x: Any) -> Any:
    """numpy scalar / 0-d / 1-d arrays -> Python objects, without importing numpy."""
    tolist = getattr(x, "tolist", None)
    if tolist is not None and type(x).__module__ == "numpy":
        return tolist()
    return x


RESERVED_META = frozenset({"self", "completion", "reference", "reward", "result", "deadline", "wall_cap"})
"""Names a trainer's per-sample fields (verl ``extra_info`` keys, TRL dataset columns) must not take
when passed to a reward as keywords: the reward's own parameters (``completion``, ``reference``, a
bound method's ``self``, ``on_failure``'s ``result``) and the worker pool's (``reward``,
``deadline``, ``wall_cap``). A field with one of these names would make the call fail ("got
multiple values") and leave the sample ungraded; :func:`user_meta` renames it instead."""

_renamed_warned: set[str] = set()


def user_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with every key in :data:`RESERVED_META` renamed ``<key>_`` (more underscores if that
    name is taken too), logged once per key, so a user's field never collides with a reward's
    parameters: the sample is graded and the field still reaches the reward under the new name."""
    clash = [k for k in meta if k in RESERVED_META]
    if not clash:
        return meta
    out = {k: v for k, v in meta.items() if k not in RESERVED_META}
    for k in clash:
        new = k + "_"
        while new in out or new in meta:
            new += "_"
        out[new] = meta[k]
        if k not in _renamed_warned:
            _renamed_warned.add(k)
            log.warning("per-sample field %r has the name of a reward parameter; the reward gets it as %r", k, new)
    return out


def safe_call(reward: Callable[..., RewardResult], completion: str, reference: Any,
              meta: dict[str, Any]) -> RewardResult:
    """Call a reward; an exception or a malformed return becomes ``RewardResult(None, status="error")``.

    ``meta`` goes through :func:`user_meta` first (a field named ``reference`` is passed as ``reference_``)."""
    try:
        return as_result(reward(completion, reference, **user_meta(meta)))
    except Exception as e:  # noqa: BLE001 - a reward bug must never stop a training run
        log.warning("reward %s failed: %s: %s", _name(reward), type(e).__name__, e)
        return RewardResult(None, {"status": "error", "error": f"{type(e).__name__}: {e}"})


def score_many(
    reward: Callable[..., RewardResult],
    completions: Sequence[str],
    references: Sequence[Any],
    metas: Sequence[dict[str, Any]],
    *,
    pool: bool = False,
    deadline: float = 10.0,
    workers: int | None = None,
) -> list[RewardResult]:
    """Score a batch in input order, never raising.

    ``pool=True`` goes through :func:`rewardlab.rewards.pool.score_batch` (worker processes, a
    per-item ``deadline`` in seconds, timeouts as ``status="timeout"``); otherwise the rewards run
    one after another in this process. Every meta dict goes through :func:`user_meta`.
    """
    metas = [user_meta(dict(m or {})) for m in metas]
    if pool and len(completions) > 0:
        try:
            results = score_batch(reward, list(completions), list(references), list(metas), deadline=deadline,
                                  workers=workers)
            return [_error_to_none(r) for r in results]
        except Exception as e:  # noqa: BLE001 - report every sample as failed rather than crash the trainer
            log.error("batch scoring failed (%s: %s); every sample of this batch is marked status=error",
                      type(e).__name__, e)
            return [RewardResult(None, {"status": "error", "error": f"{type(e).__name__}: {e}"}) for _ in completions]
    return [safe_call(reward, c, r, m) for c, r, m in zip(completions, references, metas, strict=True)]


def _error_to_none(r: RewardResult) -> RewardResult:
    """The pool reports a raising reward as score 0.0 / status "error"; adapters report ``None``."""
    if r.info.get("status") == "error" and r.score is not None:
        log.warning("reward failed in a worker: %s", r.info.get("error", "unknown error"))
        return RewardResult(None, {**r.info, "pool_score": r.score})
    return r


def _name(reward: Any) -> str:
    try:
        return reward_name(reward)
    except Exception:  # noqa: BLE001 - naming is best effort in a log line
        return repr(reward)
