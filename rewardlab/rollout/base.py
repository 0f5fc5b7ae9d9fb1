"""What every rollout engine shares: sampling parameters, completions, the engine protocol, prompt
rendering, and the collectives a multi-process trainer lends an engine.

Pure Python (no torch at import time): the eval runner and the CLI import these types cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol, runtime_checkable

from rewardlab.errors import RewardlabError

FinishReason = Literal["stop", "length", "max_turns"]

SUPPORTS = {
    "kept": "softmax(logits / T) renormalised over the sampler's top-k / top-p kept set (the drawn distribution)",
    "full": "softmax(logits / T) over the whole vocabulary (TRL's and verl's trainers)",
}
"""What a recorded or trained log-prob is a log-prob of, under top-k / top-p (:mod:`rewardlab.rollout.behaviour`)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch of completions."""

    max_new_tokens: int
    """Most tokens generated per completion (EOS included)."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off)."""
    seed: int | None = None
    """Seed for this call (None = use and advance the global torch RNG)."""
    stop: tuple[str, ...] = ()
    """Extra stop strings; the completion keeps the text up to and including the stop string."""
    support: str = "kept"
    """What recorded log-probs describe under top-k / top-p: a key of :data:`SUPPORTS`."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end a completion as EOS does, kept in it (a chat template's end-of-turn token)."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise RewardlabError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise RewardlabError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise RewardlabError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise RewardlabError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.support not in SUPPORTS:
            raise RewardlabError(f"unknown log-prob support {self.support!r}; choose one of: {', '.join(SUPPORTS)}")
        if isinstance(self.stop, str):  # a single string is a common slip
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))


@dataclass
class Completion:
    """One sampled completion of one prompt."""

    prompt_index: int
    """Index of the prompt in the list passed to ``generate``."""
    prompt_ids: list[int]
    """Prompt token ids, without padding."""
    token_ids: list[int]
    """Generated token ids, without padding; ends with EOS when finish_reason is "stop" by EOS."""
    text: str
    """Decoded completion with special tokens skipped."""
    finish_reason: FinishReason
    """"stop" (EOS or a stop string), "length" (a token budget reached) or, for tool rollouts,
    "max_turns" (the last allowed tool call was run)."""
    logprobs: list[float] | None = None
    """log-prob of each token in token_ids under the behaviour distribution of the call's
    ``SamplingParams`` (tempered; over the kept set or the full vocabulary:
    :mod:`rewardlab.rollout.behaviour`), the same for every engine. Same length as ``token_ids``;
    None when the engine did not record them. Tool rollouts: 0.0 at inserted (observation) tokens,
    which ``loss_mask`` marks."""
    loss_mask: list[int] | None = None
    """Tool rollouts (``rewardlab.rollout.multiturn``): 1 for each token the model sampled, 0 for
    each inserted observation token; None = every token was sampled."""
    answer_text: str | None = None
    """Tool rollouts: the model's last turn (what a reward grades: never a tool's output); None = ``text``."""
    turns: list[dict] | None = None
    """Tool rollouts: the turns (``Trajectory.turns``: token spans, code, tool status, stdout)."""
    tool_calls: int = 0
    """Tool rollouts: how many tool calls were run."""
    episode: dict | None = None
    """Environment episodes (:mod:`rewardlab.rollout.episodes`): the environment's verdict when the episode
    ended, ``{"reward": float or None, "status": str, ...}``, which its reward reads; None otherwise."""
    branches: list["Completion"] | None = None
    """An environment trace that branched, ``branches=all``: its earlier branches, each a token sequence of its own
    (its context the one the model saw), trained as samples paid this completion's advantage."""

    @property
    def graded_text(self) -> str:
        """What a reward grades: the model's last turn for a tool or feedback rollout, else the whole text."""
        return self.text if self.answer_text is None else self.answer_text

    @property
    def model_tokens(self) -> int:
        """Tokens the model sampled (inserted observation tokens excluded)."""
        return len(self.token_ids) if self.loss_mask is None else sum(self.loss_mask)


@runtime_checkable
class RolloutEngine(Protocol):
    """What the trainer and the evaluator need from a generator."""

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[Completion]:
        """``len(prompts) * n`` completions in prompt-major order."""
        ...

    def load_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...


def format_prompt(tokenizer, prompt: str | list[dict], *, chat: bool | None = None) -> str:
    """Render a prompt to the text the model sees.

    ``prompt`` is a plain string or chat messages ``[{"role": "user", "content": ...}, ...]``.
    With ``chat=None`` (default) the tokenizer's chat template is used when it has one (a plain
    string becomes one user message, and the assistant turn is opened); ``chat=False`` forces raw
    text (for completion-style prompts). Without a template, messages are joined by blank lines.
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    if use_chat:
        if not getattr(tokenizer, "chat_template", None):
            raise RewardlabError("chat formatting was requested but the tokenizer has no chat template")
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(m["content"]) for m in messages)


def _local_world_size() -> int:
    import torch.distributed as dist  # torch loads only when a vLLM engine asks (never at import)

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _local_all_reduce_max(x: int) -> int:
    import torch  # lazy (as above)
    import torch.distributed as dist  # lazy (as above)

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return x
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    buf = torch.tensor([int(x)], device=device)
    dist.all_reduce(buf, op=dist.ReduceOp.MAX)
    return int(buf.item())


def _local_full_state_dict(model: Any, *, cpu: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in model.state_dict().items():
        full = value.full_tensor() if hasattr(value, "full_tensor") else value  # FSDP2 DTensor: gather
        out[name] = full.detach().cpu() if cpu else full.detach()
    return out


@dataclass(frozen=True)
class Collectives:
    """What an engine needs from the process group it runs in, passed in by its caller.

    The trainer passes ``rewardlab.train.distributed``'s functions (so rollout never imports the
    trainer); the defaults work in one process and on a plain ``torch.distributed`` group, but
    ``on_destroy`` then registers nothing (the caller closes the engine itself).
    """

    world_size: Callable[[], int] = _local_world_size
    """Number of ranks sharing this job (1 in a single process)."""
    all_reduce_max: Callable[[int], int] = _local_all_reduce_max
    """Maximum of an int over ranks (every rank takes the same branch)."""
    full_state_dict: Callable[..., dict[str, Any]] = _local_full_state_dict
    """``(model, cpu=True) -> {name: tensor}``, unsharded on every rank (collective under FSDP)."""
    on_destroy: Callable[[Callable[[], None]], None] = lambda fn: None
    """Registers a shutdown hook to run before the process group goes away."""


LOCAL = Collectives()
"""Single-process (or plain ``torch.distributed``) collectives: the default of every engine."""
