"""A sequence-classifier reward model: ``AutoModelForSequenceClassification`` (``num_labels=1``)
scoring prompt + completion, with the formatting TRL's ``GRPOTrainer`` uses for reward models.

    from rewardlab.rewards.reward_model import RewardModelReward

    rm = RewardModelReward("path/or/hub-id")                       # loaded on first use
    rm("Sure! 2 + 2 = 4.", None, prompt="What is 2 + 2?").score   # the model's logit
    rm.score_many(completions, prompts)                           # batched forward passes

Formatting (TRL 1.16, ``GRPOTrainer._calculate_rewards``, for a reward function that is a model):

* a conversational prompt (a list of ``{"role", "content"}`` messages) is followed by the
  completion as an assistant message (a completion given as messages is used as is), and the
  conversation is rendered with the tokenizer's chat template
  (``apply_chat_template(messages, tools=None, tokenize=False, **chat_template_kwargs)``);
* a plain-text prompt is concatenated with the completion: ``prompt + completion``;
* the texts are tokenized together with ``padding=True, padding_side="right",
  add_special_tokens=False``; the reward is ``logits[:, 0]``. As in TRL, a tokenizer without a pad
  token pads with its EOS token, and the model's ``pad_token_id`` is set to the tokenizer's.

The model is loaded lazily in the calling process and kept there (``isolated = True``: the pool
calls it from threads here, under a lock around the forward pass), so it is never pickled into
workers; :meth:`score_many` is the batched path (``batch_size`` texts per forward pass).
``tests/test_reward_model.py`` checks the scores against TRL's own ``_calculate_rewards`` on a
tiny random model.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from rewardlab.rewards.base import RewardResult

__all__ = ["RewardModelReward"]


class RewardModelReward:
    """A reward model's scalar output as the reward (see the module docstring).

    Args:
        path: a local folder or a Hub id of a model loadable by ``AutoModelForSequenceClassification``.
        batch_size: texts per forward pass in :meth:`score_many`.
        device: ``"cpu"``, ``"cuda"``, ... (default: CUDA when available, else CPU).
        dtype: passed to ``from_pretrained`` (default ``"auto"``).
        max_length: truncate inputs to this many tokens (default: no truncation, as TRL).
        chat_template_kwargs: extra arguments of the chat template (TRL's ``chat_template_kwargs``).
        model, tokenizer: an already loaded model and tokenizer (then ``path`` is only a label).
    """

    isolated = True

    def __init__(self, path: str | os.PathLike, *, batch_size: int = 16, device: str | None = None,
                 dtype: Any = "auto", max_length: int | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, name: str = "reward_model",
                 model: Any = None, tokenizer: Any = None) -> None:
        self.path = os.fspath(path)
        self.batch_size = int(batch_size)
        self.device = device
        self.dtype = dtype
        self.max_length = max_length
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.name = name
        self._model = model
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        if model is not None or tokenizer is not None:
            if model is None or tokenizer is None:
                raise ValueError("give both model and tokenizer, or neither")
            self._prepare(model, tokenizer)

    def __repr__(self) -> str:
        return f"RewardModelReward({self.path!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_model=None, _tokenizer=None, _lock=None)  # reloaded from the path where unpickled
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _prepare(self, model: Any, tokenizer: Any) -> None:
        if tokenizer.pad_token_id is None:  # as GRPOTrainer does for reward processing classes
            tokenizer.pad_token = tokenizer.eos_token
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        config.pad_token_id = tokenizer.pad_token_id
        model.eval()
        self._model, self._tokenizer = model, tokenizer

    def load(self) -> tuple[Any, Any]:
        """The model and tokenizer, loaded on first use."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    import torch
                    from transformers import AutoModelForSequenceClassification, AutoTokenizer

                    device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
                    tok = AutoTokenizer.from_pretrained(self.path)
                    model = AutoModelForSequenceClassification.from_pretrained(self.path, num_labels=1,
                                                                               dtype=self.dtype)
                    self._prepare(model.to(device), tok)
        return self._model, self._tokenizer

    def text(self, prompt: Any, completion: Any) -> str:
        """The text the model scores for ``prompt`` + ``completion`` (TRL's formatting)."""
        _, tok = self.load()
        if isinstance(prompt, list):
            if isinstance(completion, list):
                tail = completion
            else:
                tail = [{"role": "assistant", "content": "" if completion is None else str(completion)}]
            return tok.apply_chat_template(list(prompt) + tail, tools=None, tokenize=False, **self.chat_template_kwargs)
        if isinstance(completion, list):  # a conversational completion after a text prompt: its contents
            completion = "".join(str(m.get("content", "")) for m in completion)
        return ("" if prompt is None else str(prompt)) + ("" if completion is None else str(completion))

    def score_texts(self, texts: Sequence[str]) -> list[float]:
        """The model's scalar output for each text, ``batch_size`` texts per forward pass."""
        import torch

        model, tok = self.load()
        device = next(model.parameters()).device
        out: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start:start + self.batch_size])
            kw: dict[str, Any] = {"truncation": True, "max_length": self.max_length} if self.max_length else {}
            inputs = tok(text=chunk, return_tensors="pt", padding=True, padding_side="right",
                         add_special_tokens=False, **kw)
            inputs = {k: v.to(device) for k, v in inputs.items()}
            with self._lock, torch.inference_mode():
                logits = model(**inputs).logits[:, 0]
            out.extend(float(x) for x in logits.float().cpu())
        return out

    def score_many(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None) -> list[RewardResult]:
        """Batched rewards of ``completions`` after ``prompts`` (text or chat messages), in order."""
        prompts = list(prompts) if prompts is not None else [""] * len(completions)
        if len(prompts) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(prompts)} prompts")
        try:
            scores = self.score_texts([self.text(p, c) for p, c in zip(prompts, completions)])
        except Exception as e:  # noqa: BLE001 - a reward never raises
            return [RewardResult(None, {"status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"})
                    for _ in completions]
        return [RewardResult(s, {"status": "ok", "reward_model": self.path}) for s in scores]

    def __call__(self, completion: Any, reference: Any = None, **meta: Any) -> RewardResult:
        """One completion's reward; the prompt comes from ``meta["prompt"]`` (else ``question``/``problem``).
        The reference is not used: a reward model scores the text alone."""
        prompt = next((meta[k] for k in ("prompt", "question", "problem") if meta.get(k) is not None), "")
        return self.score_many([completion], [prompt])[0]
