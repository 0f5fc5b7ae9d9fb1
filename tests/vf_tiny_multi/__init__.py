"""A two-turn verifiers v1 taskset (taskset id ``vf_tiny_multi``), written as a verifiers user writes one: after the
model's first reply the environment says "Try again." as the user, and the model replies once more; the reward reads
the last reply. Nothing here imports rewardlab.

verifiers prefers an ``Env`` the taskset's package exports over its ``SingleAgentEnv``: :class:`TryAgainEnv` is
that env, and its ``run`` is the two-turn interaction."""

import verifiers.v1 as vf
import vf_tiny_qa

FEEDBACK = "Try again."


class TinyMulti(vf_tiny_qa.TinyQA):
    """vf_tiny_qa's two tasks and reward (the answer in the last reply)."""


class TryAgainEnv(vf.SingleAgentEnv):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as chat:
            first = await chat.turn()  # the model answers the task's prompt
            if not first.terminated:  # max_turns=1 (or the token budget) ends it here
                await chat.turn(FEEDBACK)  # the environment's user turn; the model answers again


__all__ = ["TinyMulti", "TryAgainEnv"]
