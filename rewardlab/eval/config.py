"""One typed eval config: every setting of ``rewardlab eval`` is a field of :class:`EvalConfig`.

Each field carries a one-line docstring, which is its ``--help`` text: ``rewardlab eval``'s options are
generated from the fields (:mod:`rewardlab.commands.eval`), the way ``TrainConfig`` generates
``rewardlab train``'s. The option of field ``max_new_tokens`` is ``--max-new-tokens``; a field's
``metadata`` says what a plain type cannot (choices, a path, a short alias, not on the command line)::

    from rewardlab.eval import EvalConfig, run_eval
    cfg = EvalConfig(suite="gsm8k,math500", limit=50, output="evals-out/base")
    results = run_eval(cfg, "default")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rewardlab.errors import RewardlabError
from rewardlab.eval.graders import GRADERS, GSM8K_VARIANTS, parse_graders
from rewardlab.fields import attribute_docs
from rewardlab.rollout.multiturn import TOOL_HINT

DEFAULT_SUITE = "gsm8k,math500,humaneval"
"""The benchmarks of ``rewardlab eval`` when neither ``--suite`` nor ``--spec`` names any."""
TOOLS = ("none", "python")
"""``--tools`` choices."""
TOOL_FORMATS = ("fenced", "chat")
"""``--tool-format`` choices."""


def _names(value: str | Sequence[str] | None) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (blank names dropped)."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    return [s.strip() for s in items if s and s.strip()]


def int_list(value: str | Sequence[int] | None) -> tuple[int, ...] | None:
    """``--k``: ``"1,5,10"`` or ``[1, 5, 10]`` -> ``(1, 5, 10)``; None or empty -> None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            out = tuple(int(v) for v in value.split(",") if v.strip())
        except ValueError:
            raise RewardlabError(f"--k expects comma-separated integers like 1,5,10, got {value!r}") from None
    else:
        out = tuple(int(v) for v in value)
    return out or None


@dataclass
class EvalConfig:
    """Everything an eval run needs besides the model (and a custom engine): one field per setting."""

    suite: str | Sequence[str] | None = None
    ("""Comma-separated benchmarks: gsm8k, math500, math, humaneval, arith, or names from --spec files [default: """
     """gsm8k,math500,humaneval; with --spec: the spec files' benchmarks].""")
    limit: int | None = None
    """Evaluate the first N problems of each benchmark, in data-file order."""
    n: int | None = None
    """Samples per problem (default from the spec: 1)."""
    k: str | Sequence[int] | None = None
    """pass@k values, comma-separated, each <= n (default from the spec: 1)."""
    temperature: float | None = None
    """Sampling temperature (spec default 0 = greedy)."""
    top_p: float | None = None
    """Nucleus sampling top-p (spec default 1.0)."""
    max_new_tokens: int | None = None
    """Generation budget per completion (default from the spec)."""
    batch_size: int = 8
    """Prompts per generation batch."""
    seed: int = 0
    """Sampling seed (batch slot i uses seed + first problem position)."""
    output: str | None = field(default=None, metadata={"path": "dir", "aliases": ("-o",)})
    """Output directory for results.json and samples (default evals-out/<model name>). Rerunning resumes."""
    rollout: str = field(default="hf", metadata={"choices": ("hf", "vllm")})
    """Generation engine."""
    dtype: str = "auto"
    """Model dtype: auto, float32, bfloat16, float16."""
    device: str = "cpu"
    """Model device (cpu, cuda, cuda:1...)."""
    threads: int | None = None
    """torch CPU threads (default 1 on machines with <= 4 cores)."""
    spec: tuple[str, ...] = field(default=(), metadata={"path": "file"})
    """A benchmark spec YAML file (repeatable); its name can then be used in --suite (added if absent)."""
    data_dir: str | None = field(default=None, metadata={"path": "dir"})
    """Data directory (default $REWARDLAB_DATA_DIR)."""
    overwrite: bool = False
    """Discard existing samples in --output instead of resuming."""
    quiet: bool = False
    """No progress bar."""
    tools: str = field(default="none", metadata={"choices": TOOLS})
    """python: multi-turn, the model's ```python blocks run in the sandbox; its last turn is graded."""
    max_turns: int = 3
    """--tools: most tool calls per completion."""
    tool_timeout: float = 2.0
    """--tools: seconds per tool call."""
    tool_format: str = field(default="fenced", metadata={"choices": TOOL_FORMATS})
    """--tools: the output as an ```output block in the turn, or a chat-template tool message."""
    max_total_tokens: int | None = field(default=None, metadata={"cli": False})
    """--tools: most tokens per completion, observations included (None or 0 = 4 x max_new_tokens)."""
    grader: tuple[str, ...] = ()
    ("""Also grade with: {graders} (repeatable or comma list; rewardlab's own grader always runs). Side by side in """
     """results.json, disagreements in graders_<benchmark>.jsonl.""")
    lm_eval_task: str = field(default="gsm8k", metadata={"choices": tuple(sorted(GSM8K_VARIANTS))})
    """Which lm-eval GSM8K task's filters lm-eval-strict / lm-eval-flexible reproduce."""
    model_label: str | None = field(default=None, metadata={"cli": False})
    """The model's name in results.json (default: its path, hub id or class)."""

    def __post_init__(self) -> None:
        self.k = int_list(self.k)
        self.spec = tuple(str(p) for p in ([self.spec] if isinstance(self.spec, str) else self.spec or ()))
        self.grader = tuple([self.grader] if isinstance(self.grader, str) else self.grader or ())

    # --- derived settings
    def suite_names(self) -> list[str]:
        """The ``--suite`` names (default :data:`DEFAULT_SUITE`, or none when ``--spec`` files are given)."""
        return _names(DEFAULT_SUITE if self.suite is None and not self.spec else self.suite)

    def grader_names(self) -> list[str]:
        """The graders to run, ``rewardlab`` first (an unknown name is an error here)."""
        return parse_graders(list(self.grader))

    def out_dir(self, model: Any) -> Path:
        """``--output``, else ``evals-out/<model name>``."""
        if self.output:
            return Path(self.output)
        name = Path(str(model if model is not None else "default").rstrip("/")).name or "model"
        return Path("evals-out") / name

    def total_token_budget(self, max_new_tokens: int) -> int:
        """``--tools``: the most tokens of a completion, observations included."""
        return self.max_total_tokens or 4 * max_new_tokens

    def tool_record(self) -> dict[str, Any] | None:
        """``--tools python``: the tool settings as results.json and each sample file record them; None = off."""
        if self.tools != "python":
            return None
        return {"tools": "python", "max_turns": self.max_turns, "tool_timeout_s": self.tool_timeout,
                "max_total_tokens": self.max_total_tokens, "format": self.tool_format, "hint": TOOL_HINT}

    def check(self, custom_engine: bool) -> None:
        """Reject settings that cannot work, before any model load."""
        if self.batch_size < 1:
            raise RewardlabError("--batch-size must be at least 1")
        if self.tools not in TOOLS:
            raise RewardlabError(f"unknown --tools {self.tools!r}; choose none or python")
        if self.tools != "none" and custom_engine:
            raise RewardlabError("--tools python builds its own engine over the model (no custom engine)")
        if self.max_turns < 1 or not self.tool_timeout > 0 or self.tool_format not in TOOL_FORMATS:
            raise RewardlabError("--max-turns must be >= 1, --tool-timeout > 0 and --tool-format fenced or chat")


LEGACY_NAMES = {"out_dir": "output", "spec_files": "spec"}
"""``run_eval``'s keyword names of before :class:`EvalConfig` -> its field names (``progress`` is ``not quiet``)."""


def from_keywords(suite: str | Sequence[str] | None, out_dir: Any = None, **kw: Any) -> EvalConfig:
    """An :class:`EvalConfig` from the keywords of ``run_eval(model, suite, out_dir, limit=..., ...)``, the call
    shape of before this class (still accepted by ``run_eval``)."""
    values = {LEGACY_NAMES.get(k, k): v for k, v in kw.items()}
    if "progress" in values:
        values["quiet"] = not values.pop("progress")
    if out_dir is not None:
        values["output"] = str(out_dir)
    if values.get("grader") is None:
        values.pop("grader", None)
    known = {f.name for f in dataclasses.fields(EvalConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"run_eval() got unexpected keyword argument(s): {', '.join(unknown)}")
    return EvalConfig(suite=suite, **values)


def field_docs() -> dict[str, str]:
    """Field name -> its one-line docstring (the ``--help`` text of its option)."""
    docs = attribute_docs(EvalConfig)
    graders = ", ".join(g for g in GRADERS if g != "rewardlab")
    return {name: doc.replace("{graders}", graders) for name, doc in docs.items()}


__all__ = ["DEFAULT_SUITE", "EvalConfig", "TOOLS", "TOOL_FORMATS", "field_docs", "from_keywords", "int_list"]
