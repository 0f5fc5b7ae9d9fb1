"""EvalConfig: the one declaration of eval's settings and the click options generated from it (``run_eval(cfg,
model)`` takes nothing else)."""

from __future__ import annotations

import dataclasses

import click
import pytest

from rewardlab.commands.eval import eval_cmd
from rewardlab.errors import RewardlabError
from rewardlab.eval import EvalConfig
from rewardlab.eval.config import field_docs

OPTION_NAMES = [  # every option of `rewardlab eval` before EvalConfig (the README and the tests use them)
    "--suite", "--limit", "--n", "--k", "--temperature", "--top-p", "--max-new-tokens", "--batch-size", "--seed",
    "--output", "-o", "--rollout", "--dtype", "--device", "--threads", "--spec", "--data-dir", "--overwrite",
    "--compare", "--plot", "--json", "--quiet", "--tools", "--max-turns", "--tool-timeout", "--tool-format",
    "--grader", "--lm-eval-task",
]
OLD_DEFAULTS = {"batch_size": 8, "seed": 0, "rollout": "hf", "dtype": "auto", "device": "cpu", "tools": "none",
                "max_turns": 3, "tool_timeout": 2.0, "tool_format": "fenced", "lm_eval_task": "gsm8k"}


def _options() -> dict[str, click.Option]:
    return {p.name: p for p in eval_cmd.params if isinstance(p, click.Option)}


def test_every_field_has_a_docstring_and_every_cli_field_an_option_with_its_default():
    docs = field_docs()
    opts = _options()
    for f in dataclasses.fields(EvalConfig):
        assert docs.get(f.name), f"EvalConfig.{f.name} has no docstring"
        if not f.metadata.get("cli", True):
            assert f.name not in opts
            continue
        opt = opts[f.name]
        assert opt.opts[0] == "--" + f.name.replace("_", "-")
        assert opt.help == docs[f.name]
        assert (opt.default or ()) == f.default if opt.multiple else opt.default == f.default
    assert "{graders}" not in docs["grader"] and "minerva-boxed" in docs["grader"]


def test_the_option_names_and_defaults_of_before_are_kept():
    names = {o for p in eval_cmd.params for o in p.opts}
    assert set(OPTION_NAMES) <= names
    for name, default in OLD_DEFAULTS.items():
        assert _options()[name].default == default == getattr(EvalConfig(), name)


def test_k_is_a_comma_list_of_integers():
    with pytest.raises(RewardlabError, match="comma-separated integers"):
        EvalConfig(k="1,x")
    assert EvalConfig(k="1,4").k == (1, 4) and EvalConfig(k="").k is None and EvalConfig(k=[1, 2]).k == (1, 2)


def test_derived_settings():
    assert EvalConfig().suite_names() == ["gsm8k", "math500", "humaneval"]
    assert EvalConfig(spec=("my.yaml",)).suite_names() == []  # --spec alone: its own benchmark
    assert EvalConfig(suite=" gsm8k, ,math500").suite_names() == ["gsm8k", "math500"]
    assert str(EvalConfig().out_dir("runs/x/")) == "evals-out/x"
    assert EvalConfig(max_total_tokens=0).total_token_budget(24) == 96
    assert EvalConfig().tool_record() is None
    assert EvalConfig(tools="python", max_turns=2).tool_record()["max_turns"] == 2
    with pytest.raises(RewardlabError, match="no custom engine"):
        EvalConfig(tools="python").check(custom_engine=True)
    with pytest.raises(RewardlabError, match="batch-size"):
        EvalConfig(batch_size=0).check(custom_engine=False)
