"""A judge (or a hybrid) from the command line's settings, shared by ``rewardlab train --reward judge``
and ``rewardlab reward judge``: file-based prompts, a named or dotted-path extractor, and errors
that name the flag to fix.

    build_judge("judge", url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-7B-Instruct")
    build_judge("hybrid", url=..., model=..., rule=math_reward, template_file="rubric.txt")
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Callable

from rewardlab.errors import RewardlabError
from rewardlab.rewards.judge.hybrid import HybridReward
from rewardlab.rewards.judge.prompts import DEFAULT_SYSTEM, DEFAULT_TEMPLATE
from rewardlab.rewards.judge.reward import JudgeReward

__all__ = ["JUDGE_REWARDS", "build_judge", "load_extractor", "read_prompt"]

JUDGE_REWARDS = ("judge", "hybrid")
"""The reward names that build a judge: ``judge`` grades every answer, ``hybrid`` only what the
rule reward could not decide."""


def read_prompt(path: str | os.PathLike | None, flag: str, *, needs: tuple[str, ...] = ()) -> str | None:
    """The text of a prompt file (None: no file given), checked to be a ``str.format`` template over
    ``{question}``, ``{reference}``, ``{answer}`` that uses each name in ``needs``."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise RewardlabError(f"{flag} {str(path)!r}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RewardlabError(f"{flag} {str(path)!r}: not UTF-8 text") from None
    probe = {"question": "\0q", "reference": "\0r", "answer": "\0a"}
    try:
        shown = text.format(**probe)
    except (KeyError, IndexError, ValueError, AttributeError) as e:
        raise RewardlabError(f"{flag} {str(path)!r} must be a template over {{question}}, {{reference}} and "
                             f"{{answer}} (write literal braces as {{{{ }}}}): {type(e).__name__}: {e}") from None
    missing = [name for name in needs if probe[name] not in shown]
    if missing:
        raise RewardlabError(f"{flag} {str(path)!r} never shows the judge {', '.join('{' + m + '}' for m in missing)}")
    return text


def load_extractor(extract: str) -> str | Callable[[str], str | None]:
    """``"math"`` / ``"text"``, or a dotted path (``my_pkg.mod.fn``) to ``fn(completion) -> answer | None``."""
    if extract in ("math", "text"):
        return extract
    module, _, attr = extract.replace(":", ".").rpartition(".")
    if not module:
        raise RewardlabError(f"--judge-extract {extract!r}: choose math, text or a dotted path like my_pkg.mod.fn")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise RewardlabError(f"--judge-extract {extract!r}: cannot load it ({e})") from None
    if not callable(fn):
        raise RewardlabError(f"--judge-extract {extract!r} is not callable")
    return fn


def build_judge(kind: str, *, url: str | None, model: str | None, rule: Callable[..., Any] | None = None,
                system_file: str | None = None, template_file: str | None = None, extract: str = "math",
                deadline: float = 30.0, concurrency: int = 8, retries: int = 2, cache_path: str | None = None,
                failure_score: float = 0.0, **judge_kwargs: Any) -> JudgeReward | HybridReward:
    """``kind`` ``"judge"``: a :class:`JudgeReward` on ``url`` / ``model``; ``"hybrid"``: ``rule``
    first, the judge for what it could not decide. ``failure_score`` is the score of
    ``judge_timeout``, ``judge_error`` and ``judge_unparsed``; ``judge_kwargs`` go to
    :class:`JudgeReward` unchanged."""
    if kind not in JUDGE_REWARDS:
        raise RewardlabError(f"unknown judge reward {kind!r}; choose one of: {', '.join(JUDGE_REWARDS)}")
    if not url or not model:
        raise RewardlabError(f"--reward {kind} needs --judge-url (an OpenAI-compatible base URL, e.g. "
                             "http://127.0.0.1:8000/v1) and --judge-model (the model's name on that server)")
    if not url.startswith(("http://", "https://")):
        raise RewardlabError(f"--judge-url {url!r}: expected an http:// or https:// base URL")
    if not deadline > 0 or concurrency < 1 or retries < 0:
        raise RewardlabError("--judge-deadline must be > 0, --judge-concurrency >= 1 and --judge-retries >= 0")
    judge = JudgeReward(
        url, model, name="judge",
        system=read_prompt(system_file, "--judge-system") or DEFAULT_SYSTEM,
        template=read_prompt(template_file, "--judge-template", needs=("answer",)) or DEFAULT_TEMPLATE,
        extract=load_extractor(extract), deadline=deadline, max_concurrency=concurrency, retries=retries,
        cache_path=cache_path, timeout_score=failure_score, error_score=failure_score,
        unparsed_score=failure_score, **judge_kwargs)
    if kind == "judge":
        return judge
    if rule is None:
        raise RewardlabError("--reward hybrid needs a rule reward to decide first (--judge-rule, e.g. math)")
    return HybridReward(rule, judge)
