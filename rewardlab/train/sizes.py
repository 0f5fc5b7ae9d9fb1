"""The batch arithmetic, computed once: prompts, completions, mini-batches, micro-batches, per rank or
global (:func:`derive`), and how a mini-batch is cut into micro-batches (:func:`micro_spans`).

The arithmetic that trips people up (prompts vs completions vs mini-batches vs micro-batches, per rank or
global) is computed once by :func:`derive`, validated with a message that says which numbers to change,
printed at start-up and saved with the run::

    from rewardlab.train.config import TrainConfig
    from rewardlab.train.sizes import derive
    cfg = TrainConfig(algo="gspo", prompts_per_step=8, group_size=4)
    sizes = derive(cfg, world_size=1)      # GSPO: 4 optimizer steps per rollout (its mini_batches)
    print(sizes.describe())

Micro-batches are cut by count (``--micro-batch-size``) or, with ``--max-tokens-per-micro-batch N``, by
tokens: a mini-batch's sequences are ordered longest first and cut into contiguous micro-batches whose cost
in the layout in force (:data:`LAYOUT_COST`: padded rows x width, or the tokens a packed row holds) stays
within N, into the same number on every rank (FSDP runs one forward per micro-batch on each). The loss
normalisers are the whole optimizer step's token and sequence counts, so how a step is cut never changes
its gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rewardlab import algos
from rewardlab.errors import RewardlabError
from rewardlab.train.config import PACKINGS, TrainConfig, resolve_algo

Shape = tuple[int, int, int]
"""One sequence's ``(prompt id, prompt tokens, response tokens)``; the prompt id tells shared prompts apart."""


def padded_cost(rows: Sequence[Shape]) -> int:
    """Positions a padded micro-batch computes: rows x (longest prompt + longest response)."""
    return len(rows) * (max(r[1] for r in rows) + max(r[2] for r in rows)) if rows else 0


def packed_cost(rows: Sequence[Shape]) -> int:
    """Positions a packed row computes: every prompt and response token, no padding."""
    return sum(r[1] + r[2] for r in rows)


def group_packed_cost(rows: Sequence[Shape]) -> int:
    """Positions a group-packed row computes: each distinct prompt once, then every response token."""
    return sum({r[0]: r[1] for r in rows}.values()) + sum(r[2] for r in rows)


LAYOUT_COST: dict[str, Callable[[Sequence[Shape]], int]] = dict(zip(PACKINGS[:3], (padded_cost, packed_cost,
                                                                                    group_packed_cost)))
"""A ``--packing`` layout -> what a micro-batch of that layout costs, in positions, against the token budget."""


class Layouts:
    """The layout each update step runs in: ``--packing``'s, or, with ``auto``, the fastest measured in this run.

    ``auto`` decides from a measurement, on the run's own batches, model and device (which layout wins depends
    on all three: on CPU a packed row's attention mask is quadratic in the row, on a GPU the varlen kernel is
    not). The first update step runs padded and is not timed (first-call allocations); the next ``rounds`` x 3
    run each layout in turn, timed as update seconds per response token (the slowest rank's, so every rank
    keeps the same layout); every later step runs the layout with the lowest of its timings (the least
    disturbed by other work on the machine). Every layout computes the same loss and gradients, so the trial
    changes how fast a step runs, not what it learns. A resumed run measures again."""

    def __init__(self, packing: str, rounds: int = 2) -> None:
        self.chosen = None if packing == "auto" else packing
        timed = [(layout, True) for layout in LAYOUT_COST] * rounds
        self.trials = [("none", False), *timed] if self.chosen is None else []
        """``auto``'s steps to come, ``(layout, timed)``: first the untimed warm-up."""
        self.timings: dict[str, list[float]] = {layout: [] for layout in LAYOUT_COST}

    @property
    def current(self) -> str:
        """The layout of the next update step."""
        return self.chosen or self.trials[0][0]

    def record(self, seconds: float, tokens: float) -> str | None:
        """Account the step just run in :attr:`current` (``seconds`` of update over ``tokens`` response tokens,
        already reduced over ranks); returns the decision's one-line summary on the step that makes it."""
        if self.chosen is not None:
            return None
        layout, timed = self.trials.pop(0)
        if timed:
            self.timings[layout].append(seconds / max(tokens, 1.0))
        if self.trials:
            return None
        best = {layout: min(t) for layout, t in self.timings.items()}
        self.chosen = min(best, key=best.__getitem__)
        return ("--packing auto: " + ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in best.items())
                + f" per response token (best of {len(self.timings[self.chosen])} steps each) -> {self.chosen}")


def longest_first(shapes: Sequence[Shape], *, by_prompt: bool = False) -> list[int]:
    """Indices of ``shapes`` by total length, longest first (ties keep their order): similar lengths end up
    in the same micro-batch, so a padded one wastes little. ``by_prompt`` (group packing): the rows of a
    prompt stay together, prompts ordered by their longest row."""
    total = [r[1] + r[2] for r in shapes]
    if not by_prompt:
        return sorted(range(len(shapes)), key=lambda i: -total[i])
    longest: dict[int, int] = {}
    for r, t in zip(shapes, total):
        longest[r[0]] = max(longest.get(r[0], 0), t)
    return sorted(range(len(shapes)), key=lambda i: (-longest[shapes[i][0]], shapes[i][0], -total[i]))


def _greedy(shapes: Sequence[Shape], budget: int, cost: Callable[[Sequence[Shape]], int]) -> list[tuple[int, int]]:
    spans, start = [], 0
    for i in range(1, len(shapes) + 1):
        if i == len(shapes) or cost(shapes[start : i + 1]) > budget:
            spans.append((start, i))
            start = i
    return spans


def micro_spans(shapes: Sequence[Shape], *, count: int, budget: int = 0, layout: str = "none",
                at_least: int = 0) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` micro-batches of ``shapes`` (already in their training order).

    ``budget`` 0: by count, ``count`` rows each. Else contiguous runs whose :data:`LAYOUT_COST` stays within
    ``budget`` (a sequence longer than the budget is alone), split further (the costliest first) until there
    are ``at_least`` (every rank's count, under torchrun)."""
    n = len(shapes)
    if not n:
        return []
    if budget <= 0:
        spans = [(i, min(i + count, n)) for i in range(0, n, count)]
    else:
        spans = _greedy(shapes, budget, LAYOUT_COST[layout])
    return split_to(spans, shapes, at_least, layout)


def split_to(spans: list[tuple[int, int]], shapes: Sequence[Shape], k: int, layout: str = "none"
             ) -> list[tuple[int, int]]:
    """``spans`` with the costliest split in halves until there are ``k`` (no-op when there are already)."""
    if k > len(shapes):
        raise RewardlabError(f"cannot cut {len(shapes)} sequences into {k} micro-batches (ranks disagree)")
    cost, spans = LAYOUT_COST[layout], list(spans)
    while len(spans) < k:
        j = max((i for i, (a, b) in enumerate(spans) if b - a > 1), key=lambda i: cost(shapes[slice(*spans[i])]))
        a, b = spans[j]
        spans[j : j + 1] = [(a, (a + b) // 2), ((a + b) // 2, b)]
    return spans


@dataclass
class Derived:
    """Batch sizes computed once from the config (global unless named per_rank)."""

    world_size: int
    prompts_per_step: int
    completions_per_step: int
    mini_batches: int
    epochs: int
    completions_per_mini_batch: int
    completions_per_mini_batch_per_rank: int
    micro_batch_size: int
    micro_batches_per_mini_batch: int
    optimizer_steps_per_rollout: int
    total_optimizer_steps: int
    off_policy: bool
    max_tokens_per_micro_batch: int = 0
    """Token budget of a micro-batch (0 = cut by ``micro_batch_size``)."""
    packing: str = "none"
    """``--packing``: a micro-batch layout (a key of :data:`LAYOUT_COST`), or ``auto`` (:class:`Layouts`)."""

    def describe(self) -> str:
        """A short human-readable table of the sizes."""
        return "\n".join(
            [
                f"  prompts per step            {self.prompts_per_step}"
                f"  x {self.completions_per_step // self.prompts_per_step} per group"
                f" = {self.completions_per_step} completions",
                f"  mini-batches x epochs       {self.mini_batches} x {self.epochs}"
                f" = {self.optimizer_steps_per_rollout} optimizer steps per rollout"
                f"  ({'off-policy: old log-probs recomputed' if self.off_policy else 'on-policy: ratio is 1'})",
                f"  completions per mini-batch  {self.completions_per_mini_batch} global,"
                f" {self.completions_per_mini_batch_per_rank} per rank"
                f" over {self.world_size} rank(s)",
                (f"  micro-batches               {self.micro_batches_per_mini_batch} of <= {self.micro_batch_size}"
                 f" per mini-batch per rank" if not self.max_tokens_per_micro_batch else
                 f"  micro-batches               <= {self.max_tokens_per_micro_batch} positions each"
                 f" (cut by tokens, longest first)") + f", layout {self.packing}",
                f"  total optimizer steps       {self.total_optimizer_steps}",
            ]
        )


def derive(cfg: TrainConfig, *, world_size: int = 1, mini_batches: int | None = None) -> Derived:
    """Compute and check the batch arithmetic. ``mini_batches`` defaults to the algorithm's in force
    (the preset's, or ``--mini-batches``): ``derive(TrainConfig(algo="gspo"))`` has 4 optimizer steps
    per rollout, as a GSPO run does."""
    if cfg.packing not in PACKINGS:
        raise RewardlabError(f"unknown packing {cfg.packing!r}; choose one of: {', '.join(PACKINGS)}")
    if cfg.max_tokens_per_micro_batch < 0:
        raise RewardlabError(f"--max-tokens-per-micro-batch must be >= 0 (0 = by count), got "
                             f"{cfg.max_tokens_per_micro_batch}")
    mb = mini_batches if mini_batches is not None else resolve_algo(cfg).mini_batches
    completions = cfg.prompts_per_step * cfg.group_size
    if cfg.prompts_per_step % world_size:
        raise RewardlabError(
            f"prompts_per_step ({cfg.prompts_per_step}) must be divisible by the number of ranks ({world_size})"
        )
    if completions % mb:
        raise RewardlabError(
            f"prompts_per_step x group_size = {completions} completions does not split into {mb} mini-batches;"
            f" change --prompts-per-step, --group-size or --mini-batches"
        )
    per_mini = completions // mb
    if per_mini % world_size:
        raise RewardlabError(
            f"a mini-batch of {per_mini} completions does not split over {world_size} ranks;"
            f" change --prompts-per-step or --mini-batches"
        )
    per_rank = per_mini // world_size
    micro = min(cfg.micro_batch_size, per_rank)
    n_micro = -(-per_rank // micro)
    opt_per_rollout = algos.optimizer_steps_per_rollout({"mini_batches": mb}, cfg.epochs)
    return Derived(
        world_size=world_size,
        prompts_per_step=cfg.prompts_per_step,
        completions_per_step=completions,
        mini_batches=mb,
        epochs=cfg.epochs,
        completions_per_mini_batch=per_mini,
        completions_per_mini_batch_per_rank=per_rank,
        micro_batch_size=micro,
        micro_batches_per_mini_batch=n_micro,
        optimizer_steps_per_rollout=opt_per_rollout,
        total_optimizer_steps=opt_per_rollout * cfg.steps,
        off_policy=opt_per_rollout > 1,
        max_tokens_per_micro_batch=cfg.max_tokens_per_micro_batch,
        packing=cfg.packing,
    )


__all__ = ["Derived", "LAYOUT_COST", "Layouts", "derive", "group_packed_cost", "longest_first", "micro_spans",
           "packed_cost", "padded_cost", "split_to"]
