"""A tool-using verifiers v1 taskset (taskset id ``vf_tiny_tools``), written as a verifiers user writes one: each
episode gets its own MCP tool server (:class:`Calculator`, one tool, ``add``); verifiers' null harness runs the
model's tool calls until it replies without one, and the reward (vf_tiny_qa's) reads the last reply. Nothing here
imports rewardlab."""

import verifiers.v1 as vf
import vf_tiny_qa

from vf_tiny_tools.tools import Calculator


class ToolTask(vf_tiny_qa.QATask):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Calculator(vf.ToolsetConfig())]  # started per episode as `python -m vf_tiny_tools.tools`


class TinyTools(vf.Taskset[ToolTask, vf.TasksetConfig]):
    def load(self):
        for question, answer in [("What is 2 + 3? Use the add tool.", "5"), ("What is 4 + 4? Use the add tool.", "8")]:
            yield ToolTask(vf_tiny_qa.QAData(prompt=question, answer=answer), self.config.task)


__all__ = ["Calculator", "TinyTools"]
