"""Multi-turn, tool-using rollouts on a Hugging Face causal LM, with token-exact trajectories.

    from rewardlab.sandbox import execute
    trajs = rollout_with_tools(model, tok, prompts, n=4, sampling=SamplingParams(max_new_tokens=256, seed=0),
                               execute=execute, max_turns=3, max_total_tokens=512)
    t = trajs[0]; t.token_ids, t.loss_mask, t.logprobs, t.turns, t.finish_reason, t.text

Each trajectory alternates model turns and tool observations. The model samples until the text it
sampled *this turn* contains a closed fenced block (```` ```python ... ``` ````), EOS, or the token
budget. The code of the block runs in the sandbox (``execute``: the sandbox's
:func:`rewardlab.sandbox.execute` or a pool's ``execute``, passed in by the caller because the
import rules keep ``rollout`` from importing ``sandbox``; stdio style, empty stdin), and an
observation ``"\\n```output\\n{stdout}\\n```\\n"`` is appended; then the model samples again.

Token-exactness: ``prompt_ids + token_ids`` is exactly the sequence the model was run on while
sampling. Sampled tokens are appended as the ids that were drawn (never decoded and re-encoded:
decoding is used only to *detect* the closing fence, and a turn ends at the token where it
appears, so turns are cut at token boundaries of what was sampled); only the observation text is
encoded (``tokenizer.encode(obs, add_special_tokens=False)``) and its ids are appended with
``loss_mask`` 0 and ``logprobs`` None. Re-tokenizing the whole text instead would merge tokens
across the model/observation boundary (BPE) and give the trainer a different sequence than the one
sampled, so its log-probs would not match the sampler's. Here a forward pass of
``prompt_ids + token_ids`` gives, at each ``loss_mask == 1`` position, the recorded sampler log-prob
(up to float rounding of the KV-cached decode), under the same temperature / top-k / top-p warpers
(HF's own classes, as :class:`~rewardlab.rollout.hf.HFEngine` applies them).

Trajectories are sampled one at a time with a KV cache (the observation is fed to the cache as one
chunk). ``finish_reason``: ``"stop"`` (the model sampled EOS), ``"length"`` (``max_total_tokens``,
counted over sampled and inserted tokens, or ``sampling.max_new_tokens`` sampled tokens in one turn;
an observation past the budget is cut at it), ``"max_turns"`` (the ``max_turns``-th tool call was run
and its observation appended; generation stops there). A block left unclosed is not a tool call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import SamplingParams
from rewardlab.rollout.hf import _eos_ids, _inference_mode, _seeded, _warpers

_BLOCK = re.compile(r"```python[ \t]*\n(.*?)\n?```", re.DOTALL)
"""A closed python block: the opening fence (``python`` tag, end of line), the code, the closing fence."""


@dataclass
class Trajectory:
    """One multi-turn rollout of one prompt."""

    prompt_index: int
    """Index of the prompt in the list passed to :func:`rollout_with_tools`."""
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    """Everything after the prompt, in order: sampled tokens and inserted observation tokens."""
    loss_mask: list[int] = field(default_factory=list)
    """1 = sampled by the model, 0 = inserted (observation)."""
    logprobs: list[float | None] = field(default_factory=list)
    """Sampler log-prob of each sampled token (after the warpers); None for inserted tokens."""
    turns: list[dict] = field(default_factory=list)
    """Per model turn: ``sampled`` [start, end) span in token_ids, ``code`` (None: no tool call),
    ``status`` ("ok", "error", "timeout", "output_limit", "memory", "sandbox_error", ...),
    ``sandbox_status``, ``stdout`` (truncated), ``truncated``, ``observation`` [start, end) span."""
    tool_calls: int = 0
    finish_reason: str = "length"
    """"stop" (EOS), "length" (token budget), "max_turns" (max_turns tool calls made)."""
    text: str = ""
    """token_ids decoded with special tokens skipped (model text and observations), for rewards."""


def extract_code(text: str) -> str | None:
    """The code of the first closed ```python block of ``text``, or None."""
    m = _BLOCK.search(text)
    return None if m is None else m.group(1)


def observation(status: str, stdout: str, error: str | None, truncated: bool) -> str:
    """The text appended after a tool call."""
    body = stdout.rstrip("\n")
    if truncated:
        body += "\n[output truncated]"
    if status == "timeout":
        body = (body + "\n" if body else "") + "[timed out]"
    elif status == "output_limit":
        body = (body + "\n" if body else "") + "[output limit exceeded]"
    elif status not in ("ok",) and error:
        body = (body + "\n" if body else "") + f"[{status}] {error.strip().splitlines()[-1][:200]}"
    return f"\n```output\n{body}\n```\n"


def run_tool(execute: Callable[..., Any], code: str, timeout: float, max_output_chars: int) -> dict:
    """Run ``code`` with the sandbox's ``execute`` (stdio style, empty stdin); a turn's tool fields."""
    r = execute(code, stdin="", expected_stdout="", timeout=timeout)
    sb = str(r.status)
    # stdio runs are graded against expected_stdout="": "pass"/"fail" both mean the program ended normally
    status = "ok" if sb in ("pass", "fail") else sb
    details = getattr(r, "details", {}) or {}
    out = str(details.get("stdout") or "")
    error = details.get("error") if status != "ok" else None
    if status == "error" and details.get("traceback"):
        error = str(details["traceback"])
    truncated = len(out) > max_output_chars
    out = out[:max_output_chars]
    return {"status": status, "sandbox_status": sb, "stdout": out, "truncated": truncated,
            "error": None if error is None else str(error)[:500]}


def rollout_with_tools(model: Any, tokenizer: Any, prompts: list[str], n: int, sampling: SamplingParams, *,
                       execute: Callable[..., Any] | None = None, max_turns: int = 3, max_total_tokens: int = 256,
                       tool_timeout_s: float = 2.0, max_output_chars: int = 500) -> list[Trajectory]:
    """``len(prompts) * n`` trajectories, prompt-major (``out[i * n + j]`` is sample j of prompt i).

    ``sampling``: temperature / top-k / top-p / seed as for the engines; ``max_new_tokens`` caps the
    tokens sampled in one turn; ``stop`` strings are not used. ``execute`` runs the code (the
    sandbox's :func:`rewardlab.sandbox.execute`; never model code in this process).
    """
    if execute is None:
        raise RewardlabError("rollout_with_tools needs execute= (e.g. rewardlab.sandbox.execute): tool code "
                             "runs in the sandbox, which the rollout package does not import itself")
    if n < 1 or max_turns < 1 or max_total_tokens < 1:
        raise RewardlabError(f"n, max_turns and max_total_tokens must be >= 1, got {n}, {max_turns}, {max_total_tokens}")
    device = next(model.parameters()).device
    eos = set(_eos_ids(model, tokenizer))
    warpers = _warpers(sampling)
    greedy = sampling.temperature <= 0
    bos = tokenizer.bos_token
    encoded = [tokenizer(p, add_special_tokens=not (bos and p.startswith(bos)))["input_ids"] for p in prompts]
    out: list[Trajectory] = []
    with _inference_mode(model), _seeded(sampling.seed, device):
        for i, pids in enumerate(encoded):
            for _ in range(n):
                out.append(_one(model, tokenizer, i, list(pids), sampling, warpers, greedy, eos, device, execute,
                                max_turns, max_total_tokens, tool_timeout_s, max_output_chars))
    return out


def _one(model, tok, index, prompt_ids, sampling, warpers, greedy, eos, device, execute, max_turns, budget,
         timeout, max_chars) -> Trajectory:
    import torch  # lazy: see the module docstring

    traj = Trajectory(index, prompt_ids)
    ids, mask, lps = traj.token_ids, traj.loss_mask, traj.logprobs
    cache = None
    pending = list(prompt_ids)  # tokens not yet fed to the model
    seen = list(prompt_ids)  # what the warpers may read (they read scores only, but take input_ids)
    finish = None
    while finish is None:
        start = len(ids)
        turn: dict = {"sampled": None, "code": None, "status": None, "observation": None}
        called = False
        while True:
            if len(ids) >= budget:
                finish = "length"
                break
            if len(ids) - start >= sampling.max_new_tokens:
                finish = "length"
                break
            logits, cache = _feed(model, pending, cache, device)
            pending = []
            scores = logits.float()[None, :]  # (1, V)
            if greedy:
                token = int(scores.argmax(-1))
            else:
                seq = torch.tensor([seen], device=device)
                for w in warpers:
                    scores = w(seq, scores)
                token = int(torch.multinomial(torch.softmax(scores, dim=-1), 1))
            lp = float(scores[0, token] - torch.logsumexp(scores[0], dim=-1))
            ids.append(token)
            mask.append(1)
            lps.append(lp)
            seen.append(token)
            pending = [token]
            if token in eos:
                finish = "stop"
                break
            code = extract_code(tok.decode(ids[start:], skip_special_tokens=True))
            if code is not None:
                turn["code"] = code
                called = True
                break
        turn["sampled"] = [start, len(ids)]
        if called:
            traj.tool_calls += 1
            res = run_tool(execute, turn["code"], timeout, max_chars)
            turn.update(res)
            obs_ids = tok.encode(observation(res["status"], res["stdout"], res["error"], res["truncated"]),
                                 add_special_tokens=False)
            obs_ids = obs_ids[: max(0, budget - len(ids))]
            o0 = len(ids)
            ids.extend(obs_ids)
            mask.extend([0] * len(obs_ids))
            lps.extend([None] * len(obs_ids))
            seen.extend(obs_ids)
            pending = pending + obs_ids
            turn["observation"] = [o0, len(ids)]
            if traj.tool_calls >= max_turns:
                finish = "max_turns"
            elif len(ids) >= budget:
                finish = "length"
        traj.turns.append(turn)
    traj.finish_reason = finish
    traj.text = tok.decode(ids, skip_special_tokens=True)
    return traj


def _feed(model, tokens: list[int], cache, device):
    """Run ``tokens`` through the model after ``cache`` (None: from scratch); (last logits (V,), cache)."""
    import torch  # lazy: see the module docstring

    kw = {_cache_key(model): cache} if cache is not None else {}
    out = model(input_ids=torch.tensor([tokens], device=device), use_cache=True, **kw)
    new = getattr(out, "cache", None)
    if new is None:
        new = getattr(out, "past_key_values", None)
    if new is None:
        raise RewardlabError("multi-turn rollouts need the model to return a KV cache")
    return out.logits[0, -1, :], new


def _cache_key(model) -> str:
    """The forward's KV-cache argument: ``cache`` (transformers 5) or ``past_key_values``."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


__all__ = ["Trajectory", "extract_code", "observation", "rollout_with_tools", "run_tool"]
