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

from rewardlab.envs import split_names
from rewardlab.errors import RewardlabError
from rewardlab.eval.graders import GRADERS, GSM8K_VARIANTS, parse_graders
from rewardlab.eval.spec import builtin_benchmarks
from rewardlab.fields import attribute_docs, with_choices
from rewardlab.models import DTYPES
from rewardlab.rollout import tool_settings
from rewardlab.rollout.engines import DEFAULT_ENGINE, ENGINES
from rewardlab.rollout.multiturn import TOOL_HINT
from rewardlab.rollout.tool_settings import TOOLS, ToolSettings

DEFAULT_SUITE = "gsm8k,math500,humaneval"
"""The benchmarks of ``rewardlab eval`` when neither ``--suite`` nor ``--spec`` names any."""
TOOL_FIELDS = ("max_turns", "max_total_tokens", "tool_timeout", "tool_format")
"""The :class:`ToolSettings` fields that are eval settings too (the others keep their defaults in eval)."""


def _names(value: str | Sequence[str] | None) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (blank names dropped; a comma in an environment's options
    stays there: :func:`rewardlab.envs.split_names`)."""
    if isinstance(value, str):
        return split_names(value)
    return [s.strip() for s in value or () if s and s.strip()]


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
class _EvalSettings:
    """Every eval setting but the tool settings (:data:`TOOL_FIELDS`), which :class:`EvalConfig` adds."""

    suite: str | Sequence[str] | None = None
    ("""Comma-separated benchmarks: built-in ones (evals/), or names from --spec files [default: """
     """{default_suite}; with --spec: the spec files' benchmarks].""")
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
    rollout: str = field(default=DEFAULT_ENGINE, metadata={"choices": tuple(ENGINES)})
    """Generation engine."""
    dtype: str = field(default="auto", metadata={"choices": DTYPES})
    """Model dtype (auto = bf16 on GPU, fp32 on CPU)."""
    device: str = "cpu"
    """Model device (cpu, cuda, cuda:1...)."""
    threads: int | None = None
    """torch CPU threads (default 1 on machines with <= 4 cores)."""
    spec: tuple[str, ...] = field(default=(), metadata={"path": "file"})
    """A benchmark spec YAML file (repeatable); its name can then be used in --suite (added if absent)."""
    env: tuple[str, ...] = ()
    ("""An environment as one more benchmark (repeatable): KIND:NAME[?key=value&...], e.g. """
     """reasoning_gym:spell_backward; its test split, graded by its own scorer (rewardlab envs list).""")
    data_dir: str | None = field(default=None, metadata={"path": "dir"})
    """Data directory (default $REWARDLAB_DATA_DIR)."""
    overwrite: bool = False
    """Discard existing samples in --output instead of resuming."""
    quiet: bool = False
    """No progress bar."""
    tools: str = field(default="none", metadata={"choices": TOOLS})
    """python: multi-turn, the model's ```python blocks run in the sandbox; its last turn is graded."""
    grader: tuple[str, ...] = ()
    ("""Also grade with: {graders} (repeatable or comma list; rewardlab's own grader always runs). Side by side in """
     """results.json, disagreements in graders_<benchmark>.jsonl.""")
    lm_eval_task: str = field(default="gsm8k", metadata={"choices": tuple(sorted(GSM8K_VARIANTS))})
    """Which lm-eval GSM8K task's filters lm-eval-strict / lm-eval-flexible reproduce."""
    model_label: str | None = field(default=None, metadata={"cli": False})
    """The model's name in results.json (default: its path, hub id or class)."""

    def __post_init__(self) -> None:
        self.k = int_list(self.k)
        self.max_total_tokens = self.max_total_tokens or 0  # type: ignore[attr-defined] # None (of before) = 0
        self.spec = tuple(str(p) for p in ([self.spec] if isinstance(self.spec, str) else self.spec or ()))
        self.env = tuple(str(p) for p in ([self.env] if isinstance(self.env, str) else self.env or ()))
        self.grader = tuple([self.grader] if isinstance(self.grader, str) else self.grader or ())

    # --- derived settings
    def suite_names(self) -> list[str]:
        """The ``--suite`` names (default :data:`DEFAULT_SUITE`, or none when ``--spec`` files are given)."""
        default = self.suite is None and not self.spec and not self.env
        return [*_names(DEFAULT_SUITE if default else self.suite), *(e for e in self.env)]

    def grader_names(self) -> list[str]:
        """The graders to run, ``rewardlab`` first (an unknown name is an error here)."""
        return parse_graders(list(self.grader))

    def out_dir(self, model: Any) -> Path:
        """``--output``, else ``evals-out/<model name>``."""
        if self.output:
            return Path(self.output)
        name = Path(str(model if model is not None else "default").rstrip("/")).name or "model"
        return Path("evals-out") / name

    def tool_settings(self) -> ToolSettings:
        """``--tools``: the tool rollout's settings (this config's :data:`TOOL_FIELDS`, the others' defaults)."""
        return tool_settings.settings_of(self)

    def total_token_budget(self, max_new_tokens: int) -> int:
        """``--tools``: the most tokens of a completion, observations included."""
        return self.tool_settings().token_budget(max_new_tokens)

    def tool_record(self) -> dict[str, Any] | None:
        """``--tools python``: the tool settings as results.json and each sample file record them; None = off.
        (Keys and values as before :class:`ToolSettings`, a budget of 0 as None, so older eval folders resume.)"""
        if self.tools != "python":
            return None
        s = self.tool_settings()
        return {"tools": "python", "max_turns": s.max_turns, "tool_timeout_s": s.tool_timeout,
                "max_total_tokens": s.max_total_tokens or None, "format": s.tool_format, "hint": TOOL_HINT}

    def check(self, custom_engine: bool) -> None:
        """Reject settings that cannot work, before any model load."""
        if self.batch_size < 1:
            raise RewardlabError("--batch-size must be at least 1")
        if self.tools not in TOOLS:
            raise RewardlabError(f"unknown --tools {self.tools!r}; choose one of: {', '.join(TOOLS)}")
        if self.tools != "none" and custom_engine:
            raise RewardlabError("--tools python builds its own engine over the model (no custom engine)")
        self.tool_settings().check()


EvalConfig = dataclasses.make_dataclass(
    "EvalConfig", tool_settings.config_fields(TOOL_FIELDS, off_cli=("max_total_tokens",)), bases=(_EvalSettings,))
EvalConfig.__module__ = __name__
EvalConfig.__doc__ = """Everything an eval run needs besides the model (and a custom engine): one field per setting (the
``--tools`` ones of :data:`TOOL_FIELDS` from :class:`ToolSettings`, same names and defaults)."""


def field_docs() -> dict[str, str]:
    """Field name -> its one-line docstring (the ``--help`` text of its option), in option order: the tool
    settings' (from :class:`ToolSettings`) right after ``tools``."""
    tool_docs = tool_settings.docs()
    docs: dict[str, str] = {}
    for name, doc in attribute_docs(_EvalSettings).items():
        docs[name] = doc
        if name == "tools":
            docs.update({k: " ".join(tool_docs[k].split()) for k in TOOL_FIELDS})  # one line, as eval's others
    graders = ", ".join(g for g in GRADERS if g != "rewardlab")
    docs["suite"] = with_choices(docs["suite"], builtin_benchmarks())
    return {name: doc.replace("{graders}", graders).replace("{default_suite}", DEFAULT_SUITE)
            for name, doc in docs.items()}


__all__ = ["DEFAULT_SUITE", "EvalConfig", "field_docs", "int_list"]
