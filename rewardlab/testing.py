"""Tiny, randomly initialised causal LMs with a locally built tokenizer, for tests and benchmarks.

No hub access is needed: the tokenizer is a byte-level BPE trained in a fraction of a second on a
small built-in corpus, with a ChatML chat template and ``<|im_end|>`` as EOS (like Qwen2 and
SmolLM2), and the model is built from a config with random weights.

    from rewardlab.testing import build_tiny_model
    path = build_tiny_model("/tmp/tiny")        # a folder that from_pretrained loads

Learning probes for such models: ``rewardlab.testing.letters`` (``--reward rewardlab.testing.letters``), the
share of a completion's characters that are ASCII lowercase letters, a task a random model starts near 0.4
on and can move both ways; :func:`coin_reward`, a control independent of the completion.
"""

from __future__ import annotations

import os
from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "What is 3 plus 4? The answer is 7. #### 7",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? 48/2 = 24. 48 + 24 = 72. #### 72",
    "The final answer is \\boxed{\\frac{1}{2}}. Let x = 2, then x^2 + 1 = 5, so \\boxed{5}.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n```python\nimport math\n```",
    "<think> I add the numbers. </think> <answer> 12 </answer>",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 , . ? ! ( ) [ ] { } + - * / = ",
    "system user assistant You are a helpful assistant. Please reason step by step.",
]
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tokenizer(vocab_size: int = 384):
    """A byte-level BPE tokenizer (PreTrainedTokenizerFast) with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def eos_biased(model, tok, bias: float):
    """A copy of ``model`` whose LM head adds ``bias`` to the EOS logit (> 0: rows end early and at
    different steps; very negative: EOS impossible). For rollout tests that need both cases."""
    import copy

    import torch

    m = copy.deepcopy(model)
    head = m.get_output_embeddings()
    if head.bias is None:
        head.bias = torch.nn.Parameter(torch.zeros(head.weight.shape[0]))
    with torch.no_grad():
        head.bias[tok.eos_token_id] = bias
    return m


def build_tiny_model(
    path: str | os.PathLike,
    *,
    arch: str = "qwen2",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    dropout: float = 0.0,
) -> Path:
    """Save a random tiny causal LM plus tokenizer to ``path`` (created) and return the path.

    ``dropout`` > 0 sets the attention dropout (Qwen2's ``attention_dropout``), active in training mode: a
    model whose update consumes random numbers, for tests of the RNG state across a resume."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    config = AutoConfig.for_model(
        arch,
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **({"attention_dropout": dropout} if dropout else {}),
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=True
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def coin_reward():
    """A learning control: 0 or 1 with probability 1/2 from a seeded stream (``.rng``), independent of
    the completion. ``score_batch`` calls a cheap isolated reward on the caller's thread in input
    order, so reseeding ``.rng`` before a run makes the run deterministic."""
    import random

    from rewardlab.rewards.base import CheapReward, RewardResult

    class CoinReward(CheapReward):
        name = "coin"
        isolated = True

        def __init__(self) -> None:
            self.rng = random.Random(0)

        def __call__(self, completion: str, reference=None, **meta) -> RewardResult:
            return RewardResult(float(self.rng.random() < 0.5))

    return CoinReward()



def letter_fraction(text: str) -> float:
    """Share of characters that are ASCII lowercase letters (0 for an empty completion)."""
    return sum("a" <= c <= "z" for c in text) / max(1, len(text))


def letters_reward():
    """The learnable probe task: a completion's :func:`letter_fraction`, in [0, 1], graded on the caller's
    thread (cheap and isolated: no worker process)."""
    from rewardlab.rewards.base import CheapReward, RewardResult

    class LettersReward(CheapReward):
        name = "letters"
        isolated = True

        def __call__(self, completion: str, reference=None, **meta) -> RewardResult:
            return RewardResult(letter_fraction(completion))

    return LettersReward()


def __getattr__(name: str):
    """``letters``: one :func:`letters_reward`, built on first use (``--reward rewardlab.testing.letters``)."""
    if name == "letters":
        globals()["letters"] = reward = letters_reward()
        return reward
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def two_versions(path, scale: float = 0.5, seed: int = 0):
    """``(v0, v1, tokenizer)``: the model at ``path`` (float32, CPU) and a copy with every weight moved by
    ``scale`` x seeded noise, all of whose parameters are trainable: two policy versions that sample
    different tokens (the generation worker's weight-push tests)."""
    import copy

    import torch

    from rewardlab.models import load_model

    v0, tok = load_model(str(path), dtype="float32", device="cpu")
    v1 = copy.deepcopy(v0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in v1.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale)
    for p in v1.parameters():  # the trainable part a push sends: every parameter here
        p.requires_grad_(True)
    return v0, v1, tok
