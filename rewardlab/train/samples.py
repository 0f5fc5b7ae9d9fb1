"""What a step moves around: the prompt stream, a step's sampling seed, the scored sample, a step's batch, and its
``rollouts.jsonl`` rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewardlab.logging import JsonlWriter
from rewardlab.rollout.base import Completion
from rewardlab.seeds import derive_seed
from rewardlab.tasks import Row


@dataclass
class PromptStream:
    """An endless, seeded, epoch-shuffled stream of task rows whose position is checkpointable."""

    num_rows: int
    seed: int
    epoch: int = 0
    index: int = 0
    drawn: int = 0
    """Prompts drawn so far; also the source of unique group (prompt) ids."""
    _order: list[int] = field(default_factory=list, repr=False)

    def _perm(self) -> list[int]:
        rng = np.random.RandomState(derive_seed("prompt_order", self.seed, self.epoch))  # one order per epoch
        return rng.permutation(self.num_rows).tolist()

    def take(self, k: int) -> list[tuple[int, int]]:
        """The next ``k`` prompts as ``(row index, group id)``."""
        out = []
        for _ in range(k):
            if not self._order:
                self._order = self._perm()
            if self.index >= self.num_rows:
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._perm()
            out.append((self._order[self.index], self.drawn))
            self.index += 1
            self.drawn += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "drawn": self.drawn}

    def load(self, state: dict[str, int]) -> None:
        self.epoch, self.index, self.drawn = state["epoch"], state["index"], state["drawn"]
        self._order = self._perm()


def rollout_seed(seed: int, step: int, gen_round: int = 1, rank: int = 0) -> int:
    """The sampling seed of one generation round of a step on one rank: the run's ``seed`` split by step,
    round (DAPO's dynamic sampling draws again in round 2, 3, ...) and rank (each rank samples its own
    prompts), through :func:`rewardlab.seeds.derive_seed`. ``loop.generate`` seeds its engine call with it."""
    return derive_seed("rollout", seed, step, gen_round, rank)


@dataclass
class Sample:
    """One scored completion, as the update stage sees it."""

    group: int
    row: Row
    prompt_text: str
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    score: float  # total reward incl. shaping
    task_score: float | None  # the task reward alone (dynamic sampling's metric)
    components: dict[str, float | None]
    info: dict[str, Any]
    overlong: float = 0.0
    advantage: float | list[float] = 0.0
    """One advantage for every token (group z-score, RLOO, ...) or one per token (REINFORCE++ with gamma < 1)."""
    gen_round: int = 0
    baseline: float | None = None
    """ReMax: the reward of the prompt's greedy completion (the baseline subtracted from the score)."""
    values: list[float] | None = None
    """PPO: the critic's value before each response token, before the update (the clipped value loss's anchor)."""
    returns: list[float] | None = None
    """PPO: GAE's per-token returns (the value targets)."""
    bog: bool = False
    """Best-of-group option: this is its group's unique best completion (its NLL joins the loss)."""
    group_mean: float = 0.0
    """The mean reward of the sample's group (the value_group_coef option's target)."""
    loss_mask: list[int] | None = None
    """Tool rollouts: 1 at each token the model sampled, 0 at inserted observation tokens (None: all sampled)."""
    turns: list[dict] | None = None
    """Tool rollouts: the trajectory's turns (token spans, code, tool status; ``rewardlab.rollout.multiturn``)."""
    tool_calls: int = 0
    first_score: float | None = None
    """--feedback: the task reward of the first answer (before the critic's feedback)."""
    answer: str | None = None
    """Tool rollouts: the model's last turn, the text the reward graded (None: ``text``)."""
    rollout_logprobs: list[float] | None = None
    """The rollout engine's log-prob of each token in ``token_ids`` under the distribution it sampled
    from. Logged against the trainer's own log-probs (``rollout/*`` metrics); rollout correction
    weights the loss by their ratio, and bypass mode uses them as old log-probs."""
    branches: list["Sample"] = field(default_factory=list)
    """An environment trace that branched (``branches=all``): its earlier branches, trained with this sample and paid
    its advantage (:func:`trained`); every statistic of a step (groups, rewards, lengths) counts this sample alone."""

    @property
    def model_tokens(self) -> int:
        """Tokens the model sampled (a tool rollout's observations excluded): what lengths and budgets count."""
        return len(self.token_ids) if self.loss_mask is None else sum(self.loss_mask)



@dataclass
class Batch:
    """One step's completions: every one generated, and those kept for the update."""

    target: int
    kept: list[Sample] = field(default_factory=list)
    generated: list[Sample] = field(default_factory=list)
    gen_round: int = 0
    groups_seen: int = 0
    groups_zero_std: int = 0
    generated_tokens: int = 0
    step: int = 0
    timings: dict[str, float] = field(default_factory=lambda: {"time/generate": 0.0, "time/reward": 0.0})


def logprobs_of(completion: Completion) -> list[float] | None:
    """The engine's sampled-token log-probs of a completion (vLLM sets ``logprobs``), else None."""
    lps = getattr(completion, "logprobs", None)
    return None if lps is None else [float(x) for x in lps]


def rollout_rows(step: int, samples: list[Sample], kept: list[Sample]) -> list[dict[str, Any]]:
    """The ``rollouts.jsonl`` rows of one step: every generated completion, kept (trained on) or dropped."""
    kept_ids = {id(s) for s in kept}
    return [
        {
            "step": step, "gen_round": s.gen_round, "group": s.group, "row_id": s.row.id,
            "prompt": s.prompt_text, "completion": s.text, "reference": _jsonable(s.row.reference),
            "reward": s.score, "components": s.components, "overlong_penalty": s.overlong,
            "advantage": _mean_advantage(s.advantage) if id(s) in kept_ids else None, "kept": id(s) in kept_ids,
            "finish_reason": s.finish_reason, "length": len(s.token_ids), "info": s.info,
            **({} if s.turns is None else {"answer": s.answer, "model_tokens": s.model_tokens,
                                           "tool_calls": s.tool_calls, "turns": turn_rows(s)}),
        }
        for s in samples
    ]


def turn_rows(s: Sample) -> list[dict[str, Any]]:
    """A tool rollout's turns for rollouts.jsonl: each model turn's sampled token ids, then its tool call
    (code, status, the observation's inserted token ids)."""
    out: list[dict[str, Any]] = []
    for turn in s.turns or []:
        a, b = turn["sampled"]
        out.append({"role": "model", "token_ids": s.token_ids[a:b]})
        if turn.get("feedback") is not None:  # --feedback: the critic's turn, inserted
            o0, o1 = turn["observation"]
            out.append({"role": "critic", "feedback": turn["feedback"], "token_ids": s.token_ids[o0:o1]})
        elif turn.get("observation") is not None:
            o0, o1 = turn["observation"]
            out.append({"role": "tool", "code": turn["code"], "status": turn["status"],
                        "truncated": turn.get("truncated", False), "token_ids": s.token_ids[o0:o1]})
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, (str, int, float, bool, type(None), list, dict)):
        return x
    return str(x)


def trained(samples: list[Sample]) -> list[Sample]:
    """The sequences an update trains: each sample, then its earlier branches (:attr:`Sample.branches`)."""
    return [x for s in samples for x in (s, *s.branches)]


def _mean_advantage(adv: float | list[float]) -> float:
    """A row's advantage for rollouts.jsonl: the value, or the mean of per-token advantages."""
    return sum(adv) / len(adv) if isinstance(adv, list) and adv else float(adv or 0.0)




class RolloutLog:
    """``rollouts.jsonl``, written on the main rank only (a quiet writer elsewhere)."""

    def __init__(self, path: Path, *, enabled: bool):
        self._writer = JsonlWriter(path) if enabled else None

    def write(self, step: int, batch: Batch) -> None:
        """Every completion the step generated, kept (trained on) or dropped."""
        if self._writer is not None:
            self._writer.write_many(rollout_rows(step, batch.generated, batch.kept))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


__all__ = ["Batch", "PromptStream", "RolloutLog", "Sample", "logprobs_of", "rollout_rows", "turn_rows"]
