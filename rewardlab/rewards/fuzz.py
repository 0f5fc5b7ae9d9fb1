"""Hostile text for fuzzing the rewards: a grammar of fragments that models (and random-weight models) emit.

The fuzz tests (``tests/test_fuzz_rewards.py``, with Hypothesis) and ``bench/fuzz_rewards.py`` (plain
``random``, for a fixed number of calls) draw from the same grammar and drive the same
:func:`caller_thread_paths`. A text is a sequence of pieces;
each piece is one fragment, or one fragment repeated up to 64 times (what makes a backtracking
pattern explode is nearly always a long run of one shape). Fragments cover:

* what a trained model writes: LaTeX commands and environments, ``\\boxed{``, ``####``, answer
  phrases, numbers in every format, units, relations, lists, markdown, ``<think>`` tags;
* what a random-weight model writes: sub-word pieces (``ab``, ``ing``, ``▁the``), long runs of one
  letter, digit or space, stray punctuation, unbalanced brackets, byte junk and rare Unicode;
* what breaks parsers: unbalanced ``{``/``}``, ``\\`` at the end, ``$`` without a partner, chat
  stop tokens, NUL bytes, huge exponents and factorials.

    >>> import random
    >>> from rewardlab.rewards.fuzz import hostile_text
    >>> text = hostile_text(random.Random(0))
"""

from __future__ import annotations

import random
from typing import Callable

from rewardlab.rewards.code import extract_code
from rewardlab.rewards.format import OneAnswer, ThinkAnswerFormat
from rewardlab.rewards.length import CosineLength, Overlong, RepetitionPenalty
from rewardlab.rewards.math import math_reward

FRAGMENTS: tuple[str, ...] = (
    # sub-word pieces and junk a random-weight model emits
    "ab", "a", "Z", "ing", "▁the", "the ", "Ġ", "ĊĊ", "x", "e", "i", "pi", "mod", "kg", "cm", "miles",
    "degrees", "percent", "st", "th", " ", "  ", "\t", "\n", "\n\n", "\r", ".", ",", ";", ":", "!", "?",
    "-", "+", "*", "**", "/", "^", "_", "=", "<", ">", "|", "&", "~", "'", '"', "`", "```", "```python\n",
    "(", ")", "[", "]", "{", "}", "\\", "\\\\", "$", "$$", "%", "#", "##", "####", "\x00", "\ufeff", "é",
    "∞", "−", "×", "·", "≤", "√", "😀", "\u200b", "\U0001d465",
    # digits and numbers in every format
    "0", "1", "5", "9", "12", "007", "3.14", ".5", "1,234", ",000", "1e10", "10^{100}", "2^{2^{2^{2}}}",
    "100!", "-", "1/3", "0.333", "99999999999999999999", "1 000",
    # LaTeX a trained model writes
    "\\boxed{", "\\boxed{5}", "\\boxed", "\\fbox{", "\\frac{", "\\frac12", "\\dfrac{3}{4}", "\\sqrt{", "\\sqrt[3]{",
    "\\text{", "\\text{ cm}", "\\mathrm{", "\\left(", "\\right)", "\\left\\{", "\\right.", "\\cdot", "\\times",
    "\\pi", "\\infty", "\\in", "\\cup", "\\pm", "\\le", "\\ge", "\\ne", "\\overline{3}", "\\circ", "^\\circ",
    "\\begin{pmatrix}", "\\end{pmatrix}", "\\begin{array}{cc}", "&", "\\sum_{k=1}^{n}", "\\prod_{i=1}^{", "\\log_2",
    "\\sin", "\\binom{5}{2}", "\\{", "\\}", "\\,", "\\!", "\\quad", "\\(", "\\)", "\\[", "\\]",
    # markers, phrases and chat structure
    "The answer is ", "the final answer is", "Answer:", "**Answer:** ", "answer", "is", "or", "and", "between",
    "maybe", "either", "I hope", "<think>", "</think>", "<answer>", "</answer>", "<|im_end|>", "<|im_start|>",
    "<|endoftext|>", "</s>", "x = ", "(a, b)", "[1, 2)", "\\{1, 2\\}",
)


def hostile_text(rng: random.Random, max_chars: int = 600, max_pieces: int = 40) -> str:
    """One hostile text of at most ``max_chars`` characters."""
    out: list[str] = []
    size = 0
    for _ in range(rng.randint(1, max_pieces)):
        frag = rng.choice(FRAGMENTS)
        reps = rng.choice((1, 1, 1, 2, 3, 8, 16, 32, 64))
        piece = frag * reps
        if size + len(piece) > max_chars:
            piece = piece[: max_chars - size]
        out.append(piece)
        size += len(piece)
        if size >= max_chars:
            break
    return "".join(out)


GOLDS: tuple[str, ...] = ("5", "12", "0.75", "\\frac{3}{4}", "1,234", "x^2+1", "(1, 2)", "[0, \\infty)", "\\sqrt{2}",
                         "10\\%", "Evelyn", "B", "x = 3", "\\{1, 3\\}", "-7", "3.14", "2^{10}")
"""Golds the fuzzer pairs with hostile completions (one of each family the fast path decides)."""


def caller_thread_paths() -> dict[str, Callable[[str, str], object]]:
    """Everything that runs on a trainer's thread without a deadline, as ``fn(text, gold)``: the math
    reward's extraction and fast path (with the hostile text as completion and as gold), the format
    rewards, the length and repetition shaping, and code-block extraction."""
    fmt, strict, one = ThinkAnswerFormat(), ThinkAnswerFormat(strict=True), OneAnswer()
    rep, over, cos = RepetitionPenalty(), Overlong(max_len=64, cache_len=16), CosineLength(max_len=64)
    return {
        "math.fast": lambda t, g: math_reward.fast(t, g),
        "math.fast(hostile gold)": lambda t, g: math_reward.fast(g, t),
        "format": lambda t, g: fmt(t),
        "format.strict": lambda t, g: strict(t),
        "one_answer": lambda t, g: one(t),
        "repetition": lambda t, g: rep(t),
        "overlong": lambda t, g: over(t, num_tokens=len(t) // 4),
        "cosine_length": lambda t, g: cos(t, num_tokens=len(t) // 4, correct=True),
        "extract_code": lambda t, g: extract_code(t, "f"),
    }
