"""ToolSettings (rewardlab/rollout/tool_settings.py): the tool rollout's settings declared once, and the train and
eval configs and the tool engine that take them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rewardlab.errors import RewardlabError
from rewardlab.fields import with_choices
from rewardlab.eval.config import TOOL_FIELDS, EvalConfig
from rewardlab.eval.config import field_docs as eval_docs
from rewardlab.rollout.base import SamplingParams
from rewardlab.rollout.python_tool import ToolEngine, rollout_with_tools
from rewardlab.rollout.tool_settings import (
    FIELDS,
    TOOL_FORMATS,
    ToolSettings,
    config_fields,
    docs,
    settings_of,
)
from rewardlab.train.config import TrainConfig, build_config, tools_of, total_token_budget
from rewardlab.train.config import field_docs as train_docs

DEFAULTS = {"max_turns": 3, "max_total_tokens": 0, "tool_timeout": 2.0, "tool_episode_timeout": 0.0,
            "tool_format": "fenced", "tool_output_chars": 500}
"""The defaults of ``rewardlab train``'s tool options before ToolSettings (--help listed these)."""


def test_the_defaults_are_trains_of_before_and_every_field_is_documented():
    assert dataclasses.asdict(ToolSettings()) == DEFAULTS
    assert set(docs()) == set(FIELDS) and all(doc.startswith("--tools: ") for doc in docs().values())


def test_one_budget_rule_and_one_episode_rule():
    assert ToolSettings().token_budget(24) == 96  # 0 = 4 x max_new_tokens
    assert ToolSettings(max_total_tokens=50).token_budget(24) == 50
    assert ToolSettings().episode_seconds() == 6.0  # 0 = max_turns x tool_timeout
    assert ToolSettings(max_turns=2, tool_timeout=0.5).episode_seconds() == 1.0
    assert ToolSettings(tool_episode_timeout=1.5).episode_seconds() == 1.5


@pytest.mark.parametrize("bad", [{"max_turns": 0}, {"max_total_tokens": -1}, {"tool_timeout": 0.0},
                                 {"tool_episode_timeout": -1.0}, {"tool_output_chars": 0}])
def test_check_rejects_each_impossible_setting(bad):
    ToolSettings().check()
    with pytest.raises(RewardlabError, match="--max-turns and --tool-output-chars must be >= 1"):
        ToolSettings(**bad).check()


def test_check_rejects_an_unknown_format():
    with pytest.raises(RewardlabError, match="unknown tool_format 'xml'"):
        ToolSettings(tool_format="xml").check()


def test_train_carries_every_tool_setting_with_the_same_name_default_and_help():
    cfg = TrainConfig()
    assert {name: getattr(cfg, name) for name in FIELDS} == DEFAULTS
    # the same help, with the registry of tool_format's choices listed (rewardlab.fields.with_choices)
    assert {name: train_docs()[name] for name in FIELDS} == {**docs(), "tool_format": with_choices(
        docs()["tool_format"], TOOL_FORMATS)}
    names = list(train_docs())
    assert names[names.index("tools") + 1:names.index("tools") + 1 + len(FIELDS)] == list(FIELDS)  # under --tools
    cfg = build_config(None, {"tools": "python", "max_turns": "2", "tool_format": "chat", "max_new_tokens": "16"})
    assert tools_of(cfg) == ToolSettings(max_turns=2, tool_format="chat")
    assert total_token_budget(cfg) == 64
    assert tools_of(cfg, max_total_tokens=80).max_total_tokens == 80
    with pytest.raises(RewardlabError, match="--max-turns"):
        build_config(None, {"tools": "python", "tool_timeout": "0"})


def test_eval_carries_its_tool_settings_from_the_same_declaration():
    cfg = EvalConfig()
    assert {name: getattr(cfg, name) for name in TOOL_FIELDS} == {k: DEFAULTS[k] for k in TOOL_FIELDS}
    assert all(eval_docs()[name] == " ".join(docs()[name].split()) for name in TOOL_FIELDS)
    assert EvalConfig(tools="python", max_turns=2, tool_format="chat").tool_settings() == ToolSettings(
        max_turns=2, tool_format="chat")  # the settings eval has no field for keep their defaults
    assert EvalConfig(max_total_tokens=None).max_total_tokens == 0  # None, the default of before, is 0
    for bad in (0.0, float("inf"), 1e10):
        with pytest.raises(RewardlabError, match=r"--tool-timeout in \(0, 86400\]"):
            EvalConfig(tools="python", tool_timeout=bad).check(custom_engine=False)


def test_config_fields_and_settings_of():
    fields = {name: (typ, f) for name, typ, f in config_fields(("max_turns", "tool_format"), off_cli=("max_turns",))}
    assert list(fields) == ["max_turns", "tool_format"]
    assert fields["max_turns"][0] is int and fields["max_turns"][1].default == 3
    assert fields["max_turns"][1].metadata == {"cli": False}
    assert fields["tool_format"][1].metadata == {"choices": ("fenced", "chat")}

    @dataclasses.dataclass
    class Partial:
        max_turns: int = 5
        unrelated: str = "x"

    assert settings_of(Partial()) == ToolSettings(max_turns=5)
    assert settings_of(Partial(), tool_timeout=1.0) == ToolSettings(max_turns=5, tool_timeout=1.0)


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return model, tok


def _never_called(*a, **kw):
    raise AssertionError("no tool call expected from the random model in 12 tokens")


def test_the_rollout_takes_its_settings_whole(lm):
    model, tok = lm
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, seed=3)
    settings = ToolSettings(max_turns=2, max_total_tokens=20)
    new = rollout_with_tools(model, tok, ["a", "bb b"], 2, sampling, execute=_never_called, settings=settings)
    assert all(len(t.token_ids) <= 20 for t in new)
    # the engine passes its settings through: a 2-token trajectory budget cuts a 5-token turn
    engine = ToolEngine(model, tok, execute=_never_called, settings=ToolSettings(max_total_tokens=2))
    comps = engine.generate(["a"], 2, SamplingParams(max_new_tokens=5, temperature=1.0, seed=3))
    assert [(len(c.token_ids), c.finish_reason) for c in comps] == [(2, "length")] * 2
    with pytest.raises(TypeError, match="bogus"):
        rollout_with_tools(model, tok, ["a"], 1, sampling, execute=_never_called, bogus=1)
