"""A run's saved settings: ``config.yaml`` written atomically, and which settings may change on resume.

``build.py`` writes the resolved config (with the derived sizes and the algorithm in force) into the run
folder and, on resume, refuses a run whose trajectory-changing settings differ from the saved ones, naming
each (``--lr 0.0001 -> 0.0002``); :data:`RESUME_FREE` lists the settings that may change.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from rewardlab.algos import Algo
from rewardlab.train.config import ALGO_FIELDS, TrainConfig, resolve_algo, to_dict
from rewardlab.train.sizes import Derived


def save_yaml(path: str | os.PathLike, cfg: TrainConfig, *, derived: Derived | None = None,
              algo: Algo | dict[str, Any] | None = None) -> None:
    """Write the resolved config (plus derived sizes and the algorithm settings in force) as YAML."""
    data = to_dict(cfg)
    extra: dict[str, Any] = {}
    if derived is not None:
        extra["sizes"] = dataclasses.asdict(derived)
    if algo is not None:
        extra["algorithm"] = {k: v for k, v in algo.items() if isinstance(v, (int, float, str, bool, type(None)))}
    if extra:
        data["derived"] = extra
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    os.replace(tmp, path)


RESUME_FREE = {"steps", "output_dir", "progress", "plots", "tensorboard", "wandb", "save_every", "save_merged",
                "keep_checkpoints", "eval_before_after", "eval_limit", "eval_every", "eval_suite", "eval_samples",
                "eval_temperature", "eval_max_new_tokens", "eval_ngram", "threads", "reward_workers",
                "rollout_batch_size", "device", "vllm_gpu_memory_utilization", "vllm_sleep_mode",
                "judge_url", "judge_concurrency", "judge_cache"}
"""Settings a run may resume with changed: they do not alter the training trajectory."""


def settings_diff(saved: dict[str, Any], cfg: TrainConfig) -> list[tuple[str, Any, Any]]:
    """``(name, saved value, value now)`` for each trajectory-changing setting that differs, by name.

    An algorithm field left at None now and saved as the very value the preset gives it is no
    difference (runs saved before those fields became optional wrote ``entropy_coef: 0.0``)."""
    now = to_dict(cfg)
    in_force = dict(resolve_algo(cfg)) if saved.get("algo") == cfg.algo else {}

    def differs(k: str, old: Any, new: Any) -> bool:
        return old != new and not (new is None and k in ALGO_FIELDS and k in in_force and in_force[k] == old)

    return sorted((k, saved[k], v) for k, v in now.items()
                  if k not in RESUME_FREE and k in saved and differs(k, saved[k], v))


def settings_differ(saved: dict[str, Any], cfg: TrainConfig) -> list[str]:
    """Names of settings that change the training trajectory and differ from a saved run's."""
    return [name for name, _, _ in settings_diff(saved, cfg)]


def describe_diff(diff: list[tuple[str, Any, Any]]) -> str:
    """``--lr 0.0001 -> 0.0002, --algo 'gspo' -> 'grpo'``: what :func:`settings_diff` found, for one line."""
    def show(v: Any) -> str:
        return repr(v) if isinstance(v, str) else str(v)

    return ", ".join(f"--{name.replace('_', '-')} {show(old)} -> {show(new)}" for name, old, new in diff)
