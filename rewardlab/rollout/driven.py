"""Environments that drive the policy themselves (verifiers: its harness calls the model over HTTP).

    engine = DrivenEngine(base, tok, drive=verifiers_env.drive, is_driven=lambda row: ...)
    outs = engine.generate(prompts, n, sampling, rows=rows)   # rows[i]'s n episodes, run by the environment
    outs[0].prompt_ids, outs[0].token_ids, outs[0].loss_mask  # the ids the environment's trace recorded

The inverse of :mod:`rewardlab.rollout.episodes` (where rewardlab runs the loop and calls the environment): here
the environment runs its own agent loop and asks the model for each turn. The engine serves ``base`` behind the
policy endpoint (:mod:`rewardlab.rollout.endpoint`) on a loopback port, started on first use and kept for the run;
``drive(rows, n, sampling, url=, model_dir=)`` runs the episodes against it and returns one sample per episode:
the prompt ids the environment rendered, the ids the engine sampled and their log-probs under the run's sampling
settings (the endpoint's recorded ones), and the environment's verdict. The completion holds them unchanged:
every trained token is one the engine sampled, after exactly the ids the environment sent. Tokens the
environment inserted between turns (tool results, user turns) have loss mask 0.

An episode that did not end ``ok`` (failed, timed out) is not trained on: its loss mask is 0 throughout, and its
verdict (reward None, the environment's status) is counted like any other ungraded episode; one with no token at
all (it failed before the model's first turn) becomes one masked end-of-sequence token, so the batch keeps its
shape. When ``drive`` returns, requests still queued at the endpoint (sent by episodes cancelled at their deadline)
are failed and the engine call in flight is waited out (:meth:`ServedPolicy.abandon`): the model is the trainer's
again before its update. An error of the engine itself (out of memory) is re-raised as the run's, not counted as
the episodes'.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rewardlab.errors import RewardlabError
from rewardlab.rollout.base import Completion, SamplingParams
from rewardlab.rollout.decode import eos_ids
from rewardlab.rollout.endpoint import ServedPolicy, create_app
from rewardlab.rollout.episodes import environment_batch

STARTUP_S = 30.0
"""Seconds the loopback endpoint may take to start (a one-line error past them)."""


class LoopbackServer:
    """An ASGI ``app`` served by uvicorn in a daemon thread on an ephemeral 127.0.0.1 port."""

    def __init__(self, app: Any) -> None:
        import uvicorn  # lazy: only environments that drive the policy need a server

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # see rewardlab.commands.serve.listen
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="off", backlog=1024)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name="rewardlab-policy-endpoint")
        self.thread.start()
        deadline = time.monotonic() + STARTUP_S
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RewardlabError(f"the policy endpoint did not start on {self.url} in {STARTUP_S:.0f} s")
            time.sleep(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> "LoopbackServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def untrainable(sample: dict, vocab: int) -> str | None:
    """Why an environment's sample cannot be trained on as it is (None: it can): ``prompt_ids`` / ``token_ids`` that
    are not token ids below ``vocab``, ``sampled`` and ``logprobs`` not one per token, a sampled token's log-prob that
    is no finite number <= 0 (a NaN would reach every importance weight of the batch). Linear in the sample."""
    for key in ("prompt_ids", "token_ids"):
        ids = sample.get(key)
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab
                                                for t in ids):
            return f"{key}: not a list of token ids below {vocab}"
    n, sampled, lps = len(sample["token_ids"]), sample.get("sampled"), sample.get("logprobs")
    if not isinstance(sampled, list) or not isinstance(lps, list) or len(sampled) != n or len(lps) != n:
        return f"sampled and logprobs must hold one entry per token ({n})"
    for m, lp in zip(sampled, lps):
        if m and not (isinstance(lp, (int, float)) and not isinstance(lp, bool) and -math.inf < lp <= 1e-4):
            return f"a sampled token's log-prob is {lp!r:.40}, not a finite number <= 0"
    return None


@dataclass
class DrivenEngine:
    """Episodes of an environment that drives the policy (``drive``) behind the engine interface: ``generate(
    prompts, n, sampling, rows=rows)``. Prompts whose rows are not driven (``is_driven``: a held-out benchmark of
    plain tasks) are sampled by ``base`` alone."""

    base: Any
    """The plain engine (``generate_ids`` / ``encode``: HF or vLLM); it samples every turn."""
    tokenizer: Any
    drive: Callable[..., list[dict]]
    is_driven: Callable[[Any], bool] = lambda row: True
    max_model_len: int = 0
    """Prompt plus completion tokens at most per request (the endpoint refuses longer ones); 0: the base model's
    ``max_position_embeddings`` (4096 when it has none)."""
    policy: ServedPolicy | None = field(default=None, init=False)
    server: LoopbackServer | None = field(default=None, init=False)

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams, *,
                 rows: list[Any] | None = None) -> list[Completion]:
        if not environment_batch("DrivenEngine", prompts, rows, self.is_driven):
            return self.base.generate(prompts, n, sampling)
        url = self._serve(sampling)
        settings = {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens}
        settings |= {"top_k": sampling.top_k} if sampling.top_k else {}
        settings |= {"seed": sampling.seed} if sampling.seed is not None else {}
        try:
            samples = self.drive(list(rows), n, settings, url=url, model_dir=str(self.tokenizer.name_or_path))
        finally:
            self.policy.abandon()  # a cancelled episode's requests stop here: the model is the trainer's again
        failure, self.policy.failure = self.policy.failure, None
        if failure is not None:  # the engine itself failed (out of memory...): the run's error, not an episode's
            raise failure
        if len(samples) != len(prompts) * n:
            raise RewardlabError(f"the environment returned {len(samples)} episodes for {len(prompts)} x {n}")
        return [self.completion(k // n, prompts[k // n], s) for k, s in enumerate(samples)]

    def _serve(self, sampling: SamplingParams) -> str:
        if self.policy is None:
            config = getattr(getattr(self.base, "model", None), "config", None)
            longest = self.max_model_len or int(getattr(config, "max_position_embeddings", 4096))
            self.policy = ServedPolicy(self.base, self.tokenizer, name="policy", max_model_len=longest)
            self.server = LoopbackServer(create_app(self.policy))
        self.policy.support = sampling.support  # the recorded log-probs describe what the trainer scores
        return self.server.url

    def completion(self, index: int, prompt: str, s: dict) -> Completion:
        """Episode sample ``s`` (what ``drive`` returned) of prompt ``index`` as the trainer's completion: its ids and
        log-probs unchanged, trained where sampled when the episode ended ``ok``; a sample that cannot be trained on
        as it is (:func:`untrainable`, its ``earlier`` branches too) keeps only its verdict, status ``bad_trace``, on
        one masked token. An episode ``ok`` with ``earlier`` branches (``branches=all``) carries them as
        ``Completion.branches``, each trained where sampled."""
        episode = {k: v for k, v in s.items()
                   if k not in ("prompt_ids", "token_ids", "sampled", "logprobs", "answer", "finish", "earlier")}
        earlier = s.get("earlier") or []
        vocab = self._vocab()
        why = untrainable(s, vocab) or next((f"earlier branch {k}: {w}" for k, b in enumerate(earlier)
                                             if (w := untrainable(b, vocab)) is not None), None)
        if why is not None:  # the trace cannot be trained on as it is: counted, and nothing of it reaches the trainer
            episode.update(reward=None, status="bad_trace", error=why)
            s, earlier = {**s, "prompt_ids": [] if why.startswith("prompt_ids") else s["prompt_ids"], "token_ids": [],
                          "sampled": [], "logprobs": []}, []
        ok = episode.get("status") == "ok"
        c = self._sequence(index, list(s["prompt_ids"]) or list(self.base.encode(prompt)), s, trained=ok)
        c.finish_reason = "length" if s.get("finish") == "length" else "stop"
        c.answer_text, c.episode = str(s.get("answer") or ""), episode
        if ok and earlier:
            c.branches = [self._sequence(index, list(b["prompt_ids"]), b, trained=True)
                          for b in earlier if b["token_ids"] and b["prompt_ids"]]
        return c

    def _sequence(self, index: int, prompt_ids: list[int], s: dict, *, trained: bool) -> Completion:
        """One token sequence of a sample (its ``token_ids``, ``sampled`` and ``logprobs``, checked trainable), its
        sampled tokens trained when ``trained``; nothing sampled: one masked end-of-sequence token."""
        ids, sampled = list(s["token_ids"]), [bool(m) for m in s["sampled"]]
        lps = [float(lp) if m else 0.0 for lp, m in zip(s["logprobs"], sampled)]  # inserted tokens: none recorded
        if not ids:  # nothing sampled: one masked end-of-sequence token (the module docstring)
            ids, sampled, lps = [eos_ids(getattr(self.base, "model", None), self.tokenizer)[0]], [False], [0.0]
        return Completion(prompt_index=index, prompt_ids=prompt_ids, token_ids=ids,
                          text=self.tokenizer.decode(ids, skip_special_tokens=True), finish_reason="stop",
                          logprobs=lps, loss_mask=[int(m and trained) for m in sampled])

    def _vocab(self) -> int:
        """Token ids a trace may hold: below the tokenizer's size or the model's embedding rows, whichever is more."""
        config = getattr(getattr(self.base, "model", None), "config", None)
        return max(len(self.tokenizer), int(getattr(config, "vocab_size", 0) or 0))

    def load_weights(self, model: Any) -> None:
        if self.policy is not None:
            self.policy.load_weights(model)  # the endpoint reports the new policy version from the next request
        else:
            self.base.load_weights(model)

    def close(self) -> None:
        """Stop the endpoint (the base engine is the caller's: it stays open)."""
        if self.server is not None:
            self.server.close()
            self.server, self.policy = None, None
