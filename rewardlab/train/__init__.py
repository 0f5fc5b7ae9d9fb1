"""Training: the RL loop (:mod:`~rewardlab.train.loop`), its settings (:mod:`~rewardlab.train.config`),
model compute (:mod:`~rewardlab.train.logprobs`), checkpoints, and the process group.

    from rewardlab.train import TrainConfig, build_config, train
    run_dir = train(build_config(None, {"algo": "dapo", "steps": 5}))

Layout: ``loop.py`` (``train()``: setup, then a loop of stage calls), ``config.py`` (``TrainConfig``,
whose algorithm fields come from ``rewardlab.algos.Algo``; ``derive`` for the batch sizes),
``logprobs.py`` (log-probs of response tokens, frozen-prefix replay, layer freezing), ``runtime.py``
(threads, seeds, prompt stream, Ctrl-C), ``checkpoint.py`` (atomic save / resume),
``distributed.py`` (torchrun + FSDP2; no-ops in one process).
"""

from rewardlab.train.config import Derived, TrainConfig, build_config, derive, parse_overrides, resolve_algo
from rewardlab.train.logprobs import freeze_to_top_layers, pad_batch, token_logprobs
from rewardlab.train.loop import train
from rewardlab.train.runtime import Interrupted, PromptStream, run_dir_of, set_threads

__all__ = ["Derived", "Interrupted", "PromptStream", "TrainConfig", "build_config", "derive", "freeze_to_top_layers",
           "pad_batch", "parse_overrides", "resolve_algo", "run_dir_of", "set_threads", "token_logprobs", "train"]
