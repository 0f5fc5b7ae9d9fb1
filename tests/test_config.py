"""TrainConfig: YAML + --key value overrides, validation messages, derived batch sizes."""

from __future__ import annotations

import pytest
import yaml

from rewardlab.train.config import (
    TrainConfig,
    build_config,
    field_docs,
    parse_overrides,
    resolve_algo,
    to_dict,
)
from rewardlab.train.saved_config import save_yaml, settings_differ
from rewardlab.train.sizes import derive
from rewardlab.errors import RewardlabError


def test_every_field_has_a_docstring():
    docs = field_docs()
    assert set(docs) == set(to_dict(TrainConfig()))
    assert all(docs.values())


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--lr", "1e-5"], {"lr": "1e-5"}),  # space-separated
        (["--lr=1e-5"], {"lr": "1e-5"}),  # equals form
        (["--group_size", "4"], {"group_size": "4"}),  # underscores accepted
        (["--no-plots"], {"plots": "false"}),  # --no-FLAG for booleans
        (["--gradient-checkpointing"], {"gradient_checkpointing": "true"}),  # bare boolean flag
        (["--eps-low", "-0.1"], {"eps_low": "-0.1"}),  # a negative number is a value, not a flag
    ],
)
def test_parse_overrides(args, expected):
    assert parse_overrides(args) == expected


def test_unknown_setting_suggests_the_close_one():
    with pytest.raises(RewardlabError, match="did you mean --group-size"):
        parse_overrides(["--group-sise", "4"])


def test_yaml_then_cli_precedence_and_types(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("lr: 3.0e-5\ngroup_size: 4\nalgo: dapo\nbeta: 0\n")
    cfg = build_config(str(f), {"group_size": "8", "model": "none"})
    assert cfg.lr == 3e-5 and cfg.algo == "dapo"  # from YAML
    assert cfg.group_size == 8 and isinstance(cfg.group_size, int)  # CLI wins
    assert cfg.model is None and cfg.beta == 0.0 and isinstance(cfg.beta, float)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"algo": "trpo"}, "unknown algo 'trpo'"),
        ({"agg": "mean"}, "unknown agg"),
        ({"steps": "0"}, "--steps must be >= 1"),
        ({"group_size": "many"}, "expects an integer"),
        ({"clip_ratio_c": "1.0"}, "must be > 1"),
        ({"overlong_cache": "64", "max_new_tokens": "32"}, "--overlong-cache"),
        ({"vllm_gpu_memory_utilization": "0"}, r"--vllm-gpu-memory-utilization must be in \(0, 1\]"),
        ({"vllm_gpu_memory_utilization": "1.5"}, "--vllm-gpu-memory-utilization"),
    ],
)
def test_bad_values_are_one_line_errors(overrides, message):
    with pytest.raises(RewardlabError, match=message) as e:
        build_config(None, overrides)
    assert "\n" not in str(e.value)


def test_derived_sizes_and_divisibility():
    cfg = TrainConfig(prompts_per_step=8, group_size=6, micro_batch_size=5, steps=10)
    d = derive(cfg, world_size=2, mini_batches=4)
    assert d.completions_per_step == 48
    assert d.completions_per_mini_batch == 12 and d.completions_per_mini_batch_per_rank == 6
    assert d.micro_batches_per_mini_batch == 2  # 6 per rank in micro-batches of <= 5
    assert d.optimizer_steps_per_rollout == 4 and d.total_optimizer_steps == 40 and d.off_policy
    assert "48 completions" in d.describe()
    assert not derive(cfg, mini_batches=1).off_policy
    with pytest.raises(RewardlabError, match="does not split into 5 mini-batches"):
        derive(cfg, mini_batches=5)
    with pytest.raises(RewardlabError, match="divisible by the number of ranks"):
        derive(cfg, world_size=3)


def test_resolve_algo_applies_overrides_over_the_preset():
    gspo = resolve_algo(TrainConfig(algo="gspo"))
    assert gspo["ratio"] == "sequence" and gspo["mini_batches"] == 4 and gspo["eps_low"] == 3e-4
    dapo = resolve_algo(TrainConfig(algo="dapo", max_new_tokens=40))
    assert dapo["dynamic_sampling"] and dapo["overlong"] and dapo["overlong_cache"] == 10
    custom = resolve_algo(TrainConfig(algo="dapo", dynamic_sampling=False, overlong_weight=0.0, eps_high=0.3))
    assert not custom["dynamic_sampling"] and not custom["overlong"] and custom["eps_high"] == 0.3
    assert resolve_algo(TrainConfig(algo="grpo", beta=0.0))["beta"] == 0.0


def test_saved_config_round_trips_and_detects_changes(tmp_path):
    cfg = TrainConfig(lr=1e-4, group_size=4)
    path = tmp_path / "config.yaml"
    save_yaml(path, cfg, derived=derive(cfg), algo=resolve_algo(cfg))
    saved = yaml.safe_load(path.read_text())
    assert saved["derived"]["sizes"]["completions_per_step"] == 32
    assert build_config(str(path)) == cfg  # the saved file is itself a valid --config
    assert settings_differ(saved, TrainConfig(lr=1e-4, group_size=4, steps=99)) == []  # more steps: fine
    assert settings_differ(saved, TrainConfig(lr=2e-4, group_size=4)) == ["lr"]


def test_vllm_engine_settings_default_and_parse():
    cfg = TrainConfig()
    assert cfg.vllm_gpu_memory_utilization == 0.3 and cfg.vllm_sleep_mode is False
    cfg = build_config(None, parse_overrides(["--rollout", "vllm", "--vllm-gpu-memory-utilization", "0.5",
                                              "--vllm-sleep-mode"]))
    assert cfg.vllm_gpu_memory_utilization == 0.5 and cfg.vllm_sleep_mode is True
    # engine memory settings do not change the trajectory: a run may resume with other values
    assert settings_differ(to_dict(TrainConfig(rollout="vllm")), cfg) == []


def test_settings_diff_names_each_setting_with_old_and_new_value():
    from rewardlab.train.saved_config import describe_diff, settings_diff

    saved = to_dict(TrainConfig(algo="gspo", lr=1e-4, task="arith"))
    now = TrainConfig(algo="grpo", lr=2e-4, task="arith", steps=99, device="cpu")  # steps/device may change
    diff = settings_diff(saved, now)
    assert diff == [("algo", "gspo", "grpo"), ("lr", 1e-4, 2e-4)]
    assert describe_diff(diff) == "--algo 'gspo' -> 'grpo', --lr 0.0001 -> 0.0002"
    assert describe_diff(settings_diff(to_dict(TrainConfig(beta=None)), TrainConfig(beta=0.0))) == "--beta None -> 0.0"


def test_a_run_saved_with_explicit_preset_values_still_resumes():
    from rewardlab.train.saved_config import settings_diff

    saved = {**to_dict(TrainConfig(algo="gspo")), "entropy_coef": 0.0, "overlong_filter": False}  # the old defaults
    assert settings_diff(saved, TrainConfig(algo="gspo")) == []
    assert settings_diff({**saved, "eps_high": 0.3}, TrainConfig(algo="gspo")) == [("eps_high", 0.3, None)]


def test_device_is_checked_before_anything_heavy(monkeypatch):
    import torch

    from rewardlab.models import resolve_device

    assert resolve_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(RewardlabError, match=r"^--device cuda: CUDA is not available here \(.*\)"
                       r"; use --device cpu or auto$"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(RewardlabError, match=r"has 2 CUDA device\(s\), numbered 0..1"):
        resolve_device("cuda:2")
    with pytest.raises(RewardlabError, match="not a device torch knows"):
        resolve_device("gpu")
    with pytest.raises(RewardlabError, match="expected cpu, cuda, cuda:N or auto"):
        build_config(None, {"device": "cuda 0"})


def test_check_model_catches_typos_without_loading(tmp_path):
    from rewardlab.models import check_model

    check_model(None)
    check_model("default")
    check_model("Qwen/Qwen2.5-0.5B-Instruct")  # hub ids: the load decides
    (tmp_path / "m").mkdir()
    with pytest.raises(RewardlabError, match="is not a model folder"):
        check_model(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text("{}")
    check_model(str(tmp_path / "m"))
    with pytest.raises(RewardlabError, match="model path ./typo does not exist"):
        check_model("./typo")
