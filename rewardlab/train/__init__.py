"""Training: the RL loop (:mod:`~rewardlab.train.loop`), its settings (:mod:`~rewardlab.train.config`),
the typed run state and its setup, model compute, checkpoints, and the process group.

    from rewardlab.train import TrainConfig, build_config, train
    run_dir = train(build_config(None, {"algo": "dapo", "steps": 5}))

Layout: ``loop.py`` (``train()``: setup, then a loop of stage calls), ``config.py`` (``TrainConfig``,
whose algorithm fields come from ``rewardlab.algos.Algo``; ``derive`` for the batch sizes),
``build.py`` (``build_plan`` -> a frozen ``Plan``, ``build_trainer`` -> a ``Trainer``, ``build_run``),
``state.py`` (``Plan``, ``Trainer``, ``Run``: the typed run state), ``samples.py`` (prompt stream,
samples, batches, rollout rows), ``process.py`` (threads, seeds, Ctrl-C, out-of-memory errors),
``runtime.py`` (the run's reward, run folder name, RNG state on resume, log-prob mismatch),
``saved_config.py``
(``config.yaml`` and what may change on resume), ``logprobs.py`` (log-probs of response tokens,
frozen-prefix replay, layer freezing), ``update.py`` (the optimizer stage), ``metrics.py`` (the log
stage), ``evaluation.py`` (``--eval-every``: held-out benchmarks during training), ``checkpoint.py``
(atomic save / resume), ``distributed.py`` (torchrun + FSDP2; no-ops in one process), ``feedback.py``
and ``critic.py`` (``--feedback``'s critic, PPO's value model), ``lora.py`` (PEFT adapters).
"""

from rewardlab.train.config import TrainConfig, build_config, parse_overrides, resolve_algo
from rewardlab.train.loop import train
from rewardlab.train.process import Interrupted, set_threads
from rewardlab.train.runtime import run_dir_of
from rewardlab.train.samples import PromptStream

__all__ = ["Interrupted", "PromptStream", "TrainConfig", "build_config", "parse_overrides", "resolve_algo",
           "run_dir_of", "set_threads", "train"]
