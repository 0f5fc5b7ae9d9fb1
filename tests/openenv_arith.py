"""A small OpenEnv environment for tests/test_envs.py (served on loopback by openenv-core's own ``create_app``).

reset(seed) poses "What is a + b?" with a and b drawn from the seed; one step with ``message`` ends the
episode, rewarded 1.0 when the message's last number is the sum, else 0.0. ``mode`` (a class attribute)
lets a test make it misbehave: ``"multi"`` never ends an episode, ``"raise"`` fails every step; ``"retry"``
answers a wrong reply with "No. Try again." and ends at the right one or the third step.
"""

from __future__ import annotations

import random
import re
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class ArithAction(Action):
    message: str = Field(..., description="the model's reply")


class ArithObservation(Observation):
    prompt: str = Field(default="", description="the question")


class ArithEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    mode = "normal"

    def __init__(self) -> None:
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._answer = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs) -> ArithObservation:
        rng = random.Random(seed)
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        self._answer = a + b
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return ArithObservation(prompt=f"What is {a} + {b}?", done=False, reward=0.0)

    def step(self, action: ArithAction, timeout_s: float | None = None, **kwargs) -> ArithObservation:  # type: ignore[override]
        if self.mode == "raise":
            raise RuntimeError("the environment failed")
        self._state.step_count += 1
        numbers = re.findall(r"-?\d+", action.message)
        right = bool(numbers) and int(numbers[-1]) == self._answer
        if self.mode == "retry" and not right and self._state.step_count < 3:  # another try, told it was wrong
            return ArithObservation(prompt="No. Try again.", done=False, reward=0.0)
        return ArithObservation(prompt="", done=self.mode != "multi", reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state


def make_app():
    from openenv.core.env_server.http_server import create_app

    return create_app(ArithEnvironment, ArithAction, ArithObservation, env_name="arith", max_concurrent_envs=64)
