"""The ``--judge-*`` settings, declared once (:class:`JudgeSettings`), and a judge (or a hybrid) built from them,
shared by ``rewardlab train --reward judge`` and ``rewardlab reward judge``: file-based prompts, a named or
dotted-path extractor, and errors that name the flag to fix.

``TrainConfig`` carries every field as a flat field of the same name (:func:`config_fields`, the way it carries
``ToolSettings``), ``rewardlab reward``'s ``--judge-*`` options are generated from the fields (their docstrings
are the help, read by ``rewardlab.fields.attribute_docs``), and :func:`settings_of` reads them back from a
config::

    build_judge("judge", JudgeSettings(judge_url="http://127.0.0.1:8000/v1", judge_model="Qwen/Qwen2.5-7B-Instruct"))
    build_judge("hybrid", JudgeSettings(judge_url=..., judge_model=..., judge_template="rubric.txt"))
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import get_reward
from rewardlab.rewards.judge.hybrid import HybridReward
from rewardlab.rewards.judge.options import JudgeOptions
from rewardlab.rewards.judge.prompts import DEFAULT_SYSTEM, DEFAULT_TEMPLATE
from rewardlab.rewards.judge.reward import JudgeReward

__all__ = ["FIELDS", "JUDGE_REWARDS", "JudgeSettings", "build_judge", "config_fields", "load_extractor", "read_prompt",
           "settings_of"]

JUDGE_REWARDS = ("judge", "hybrid")
"""The reward names that build a judge: ``judge`` grades every answer, ``hybrid`` only what the
rule reward could not decide."""


@dataclass(frozen=True)
class JudgeSettings:
    """The ``--judge-*`` settings (``--reward judge``: an LLM grades every answer; ``--reward hybrid``: only what
    ``--judge-rule`` cannot)."""

    judge_url: str | None = None
    ("""--reward judge/hybrid: the judge server's OpenAI-compatible base URL (vllm serve, SGLang, an API), e.g. """
     """http://127.0.0.1:8000/v1.""")
    judge_model: str | None = None
    """--reward judge/hybrid: the judge model's name on that server (the API key comes from $OPENAI_API_KEY)."""
    judge_rule: str = "math"
    ("""--reward hybrid: the rule reward that decides first (name or dotted path); the judge gets its """
     """too_complex/timeout/error/bad_gold items.""")
    judge_system: str | None = None
    ("""Judge: a file holding the system prompt, the rubric (None = the built-in strict grader); it must ask for """
     """the two-line verdict.""")
    judge_template: str | None = None
    ("""Judge: a file holding the user prompt, a template over {question}, {reference} and {answer} (None = the """
     """built-in blocks).""")
    judge_extract: str = "math"
    ("""Judge: the answer it is shown: math (boxed, ####, 'the answer is'), text (those, else the last paragraph), """
     """or a dotted fn(completion).""")
    judge_deadline: float = 30.0
    ("""Judge: wall seconds per answer for all its attempts and retries (then judge_timeout; a dead server is """
     """judge_error sooner).""")
    judge_concurrency: int = 8
    """Judge: requests in flight at once; the reward threads (--reward-workers, default min(8, CPUs)) bound it too."""
    judge_cache: str | None = None
    """Judge: an sqlite file of verdicts shared by runs and processes (None = in memory, this run only)."""
    judge_failure_score: float = 0.0
    ("""Judge: the score of judge_timeout, judge_error and judge_unparsed answers (counted as judge/status/... in """
     """metrics).""")


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(JudgeSettings))
"""The judge settings' names: the same names as fields of ``TrainConfig`` and options of ``rewardlab reward``."""


def config_fields() -> list[tuple[str, Any, Any]]:
    """``(name, type, dataclasses.field)`` per judge setting, for ``dataclasses.make_dataclass``: a config that
    carries these settings as its own fields, with :class:`JudgeSettings`' types and defaults."""
    hints = typing.get_type_hints(JudgeSettings)
    return [(f.name, hints[f.name], dataclasses.field(default=f.default)) for f in dataclasses.fields(JudgeSettings)]


def settings_of(config: Any) -> JudgeSettings:
    """The :class:`JudgeSettings` of a config that carries them as fields of the same names."""
    return JudgeSettings(**{name: getattr(config, name) for name in FIELDS})


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


def build_judge(kind: str, settings: JudgeSettings, **options: Any) -> JudgeReward | HybridReward:
    """``kind`` ``"judge"``: a :class:`JudgeReward` on ``judge_url`` / ``judge_model``; ``"hybrid"``: the
    ``judge_rule`` reward first, the judge for what it could not decide. ``judge_failure_score`` is the score of
    ``judge_timeout``, ``judge_error`` and ``judge_unparsed``; ``options`` replace fields of the judge's
    :class:`~rewardlab.rewards.judge.options.JudgeOptions`."""
    s = settings
    if kind not in JUDGE_REWARDS:
        raise RewardlabError(f"unknown judge reward {kind!r}; choose one of: {', '.join(JUDGE_REWARDS)}")
    if not s.judge_url or not s.judge_model:
        raise RewardlabError(f"--reward {kind} needs --judge-url (an OpenAI-compatible base URL, e.g. "
                             "http://127.0.0.1:8000/v1) and --judge-model (the model's name on that server)")
    if not s.judge_url.startswith(("http://", "https://")):
        raise RewardlabError(f"--judge-url {s.judge_url!r}: expected an http:// or https:// base URL")
    retries = options.get("retries", JudgeOptions.retries)
    if not s.judge_deadline > 0 or s.judge_concurrency < 1 or retries < 0:
        raise RewardlabError("--judge-deadline must be > 0, --judge-concurrency >= 1 and --judge-retries >= 0")
    failure = s.judge_failure_score
    judge = JudgeReward(s.judge_url, s.judge_model, JudgeOptions(**{
        "name": "judge", "system": read_prompt(s.judge_system, "--judge-system") or DEFAULT_SYSTEM,
        "template": read_prompt(s.judge_template, "--judge-template", needs=("answer",)) or DEFAULT_TEMPLATE,
        "extract": load_extractor(s.judge_extract), "deadline": s.judge_deadline,
        "max_concurrency": s.judge_concurrency, "cache_path": s.judge_cache, "timeout_score": failure,
        "error_score": failure, "unparsed_score": failure, **options}))
    if kind == "judge":
        return judge
    return HybridReward(get_reward(s.judge_rule), judge)
