"""Environment classes written for TRL's ``GRPOTrainer(environment_factory=...)``, used as ``python:`` environments.

Nothing here imports rewardlab: these are what a TRL user already has (the shape of TRL's documented
``IncrementEnv``), so a test that runs them here checks the contract, not our own helper.
"""

import asyncio
import random
import time


class IncrementEnv:
    """Reach a target by incrementing a counter (TRL's documentation example, self-sampling its task)."""

    def reset(self, **kwargs) -> str:
        self.counter = 0
        self.target = random.randint(1, 6)
        return f"Increment the counter by {self.target}."

    def get_reward(self) -> float:
        return float(self.counter == self.target)

    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter


class TargetEnv:
    """The task comes from a dataset row (TRL's external-dataset form): ``reset(target=...)`` returns None."""

    def reset(self, target, **kwargs) -> None:
        self.counter = 0
        self.target = target

    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return float(self.counter == self.target)

    async def add(self, a: int, b: int) -> int:
        """
        Add two integers and remember the sum.

        Args:
            a: The first integer.
            b: The second integer.
        """
        self.counter = a + b
        return self.counter


class HangingEnv(IncrementEnv):
    """A tool that never answers in time."""

    def wait(self, seconds: float) -> str:
        """
        Wait.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return "done"


class NoisyEnv(IncrementEnv):
    """Not deterministic under its reset seed: each reset draws from the clock."""

    def reset(self, **kwargs) -> str:
        self.counter = 0
        self.target = time.perf_counter_ns() % 1000
        return f"Increment the counter by {self.target}."
