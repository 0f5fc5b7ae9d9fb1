"""Old import path of :mod:`rewardlab.rollout.vllm`, kept while ``rewardlab.train`` and the Makefile use it."""

from rewardlab.rollout.vllm import CPU_MAX_BATCHED_TOKENS, INSTALL_HINT, VLLMCompletion, VLLMEngine, logprob_mismatch  # noqa: F401

__all__ = ["CPU_MAX_BATCHED_TOKENS", "INSTALL_HINT", "VLLMCompletion", "VLLMEngine", "logprob_mismatch"]
