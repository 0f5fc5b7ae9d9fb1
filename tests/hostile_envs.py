"""Environments written to break the episode loop (tests/test_python_env.py): each misbehaves in one way.

Those named ``...Later`` behave while the rows load (their first ``reset`` per process) and misbehave in episodes.
"""


import sys
import time

import numpy as np


class Base:
    loads = 0

    def reset(self, **kwargs) -> str:
        type(self).loads += 1
        self.counter = 0
        return "Do the task."

    def get_reward(self) -> float:
        return float(self.counter)

    def ping(self, x: int) -> int:
        """
        Echo.

        Args:
            x: A number.
        """
        self.counter += 1
        return x


class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


class SlowText:
    def __str__(self):
        time.sleep(3)
        return "late"


class Hostile(Base):
    def exit(self, x: int) -> int:
        """
        Call sys.exit.

        Args:
            x: The code.
        """
        sys.exit(x)

    def interrupt(self, x: int) -> int:
        """
        Raise KeyboardInterrupt.

        Args:
            x: Unused.
        """
        raise KeyboardInterrupt

    def badstr(self, x: int) -> int:
        """
        Raise an exception whose text cannot be read.

        Args:
            x: Unused.
        """
        raise BadStr()

    def slowtext(self, x: int) -> object:
        """
        Return an object whose text takes 3 s to make.

        Args:
            x: Unused.
        """
        return {"value": SlowText()}


class ExitInRewardLater(Base):
    def get_reward(self) -> float:
        raise SystemExit(5)


class ExitInResetLater(Base):
    def reset(self, **kwargs) -> str:
        if type(self).loads:
            raise SystemExit(4)
        return super().reset(**kwargs)


class GarbageResetLater(Base):
    def reset(self, **kwargs):
        first = super().reset(**kwargs)
        return first if type(self).loads == 1 else 12345


class SlowResetLater(Base):
    def reset(self, **kwargs) -> str:
        if type(self).loads:
            time.sleep(5)
        return super().reset(**kwargs)


class NumpyReward(Base):
    def get_reward(self):
        return np.float32(0.5)


class MessagesReset(Base):
    def reset(self, **kwargs):
        return [{"role": "user", "content": "hi"}]


class DictEnv(dict, Base):
    pass



