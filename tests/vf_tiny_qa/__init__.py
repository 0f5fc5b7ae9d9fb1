"""A two-task single-turn verifiers v1 taskset (taskset id ``vf_tiny_qa``), written as a verifiers user writes one:
nothing here imports rewardlab."""

import verifiers.v1 as vf


class QAData(vf.TaskData):
    answer: str = ""


class QATask(vf.Task[QAData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: QAData, trace: vf.Trace) -> float:
        return float(task.answer in trace.last_reply)


class TinyQA(vf.Taskset[QATask, vf.TasksetConfig]):
    def load(self):
        for question, answer in [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]:
            yield QATask(QAData(prompt=question, answer=answer), self.config.task)


__all__ = ["TinyQA"]
