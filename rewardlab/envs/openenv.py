"""OpenEnv servers as environments: ``openenv:URL[?size=N&seed=S&prompt_field=F&action_field=A]``.

An OpenEnv environment (Meta / Hugging Face ``openenv-core``) runs as a server; its client keeps one
WebSocket session per episode (``reset`` then ``step``s):

* rows: ``size`` sessions (default 256 for train, 64 for test), each reset with its own seed (derived from
  ``seed``, the split and the row), whose observation's ``prompt_field`` (default ``prompt``) is the user
  message;
* episodes (:class:`OpenEnvEpisode`, through :mod:`rewardlab.rollout.episodes` in train and eval): a session
  reset with the row's seed, then one ``step({action_field: turn})`` per model turn (default field
  ``message``); while the server says not done, the observation's ``prompt_field`` is the next user message;
* reward: the episode's last step's reward (:func:`openenv_reward` reads the episode's verdict; outside an
  episode it plays the completion as the one action of a fresh session).

So the environment must be deterministic given its reset seed (it is reset once for the prompt and again for
the episode). Statuses besides ``ok``: ``not_done`` (the turns or tokens ran out first), ``no_reward`` (done
without a reward), ``env_error`` (the server refused the action or raised), ``env_timeout``, ``env_unreachable``
(no server at the URL). A server that is down when the rows are loaded is a one-line error at start-up.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from typing import Any

from rewardlab.envs.spec import EnvSpec
from rewardlab.envs.verdict import as_reward
from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import RewardResult
from rewardlab.seeds import derive_seed
from rewardlab.tasks import Row

SIZES = {"train": 256, "test": 64}
"""Episodes (rows) per split when the spec gives no ``size``."""
REWARD = "rewardlab.envs.openenv:openenv_reward"
"""The rows' ``meta["reward"]``."""
CONNECT_S = 10.0
"""Seconds to open a session before the server counts as unreachable."""
MESSAGE_S = 30.0
"""Seconds to wait for one reply (reset or step) before the episode counts as an error."""


def _client(url: str) -> Any:
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError:
        raise RewardlabError("openenv: the package is not installed (pip install openenv-core)") from None
    return GenericEnvClient(base_url=url, connect_timeout_s=CONNECT_S, message_timeout_s=MESSAGE_S)


async def _episode(url: str, reset: dict, action: dict | None) -> tuple[dict, Any]:
    """One session: reset(**reset), then (when ``action``) one step. Returns (observation dict, step result)."""
    client = _client(url)
    try:
        await client.connect()
        first = await client.reset(**reset)
        result = await client.step(action) if action is not None else None
        return dict(first.observation or {}), result
    finally:
        await client.close()


def _run(url: str, reset: dict, action: dict | None) -> tuple[dict, Any]:
    return asyncio.run(_episode(url, reset, action))


class OpenEnvEpisode:
    """One multi-turn episode on the server (:class:`rewardlab.rollout.episodes.Episode`, a turn environment): a
    session reset with the row's seed, then one ``step({action_field: turn})`` per model turn; while the episode is
    not done, the observation's ``prompt_field`` comes back as the next user message."""

    def __init__(self, row: Row) -> None:
        ref = row.reference
        self.action_field, self.field = str(ref.get("action_field", "message")), str(ref.get("prompt_field", "prompt"))
        self.client = _client(ref["url"]).sync()
        self.client.connect()
        self.result: Any = None
        first = dict(self.client.reset(**dict(ref.get("reset") or {})).observation or {})
        if first.get(self.field) != row.prompt[-1]["content"]:
            self.close()
            raise RewardlabError("reset gave a different prompt than the row's: the environment is not deterministic "
                                 "under its reset seed")

    def respond(self, turn: str) -> list[dict] | None:
        self.result = self.client.step({self.action_field: turn})
        if self.result.done:
            return None
        text = dict(self.result.observation or {}).get(self.field)
        if not isinstance(text, str):
            raise RewardlabError(f"the observation has no text field {self.field!r} to show the model")
        return [{"role": "user", "content": text}]

    def finish(self) -> dict:
        self.close()
        if self.result is None or not self.result.done:
            return {"reward": None, "status": "not_done"}
        reward = self.result.reward
        if reward is None or isinstance(reward, bool) or not math.isfinite(float(reward)):
            return {"reward": None, "status": "no_reward", "error": f"the server's reward: {reward!r}"}
        return {"reward": float(reward), "status": "ok"}

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing a session that already failed
            pass


def openenv_reward(completion: str, reference: Any = None, *, episode: dict | None = None, **meta: Any
                   ) -> RewardResult:
    """The OpenEnv server's reward. In train and eval the episode ran through :class:`OpenEnvEpisode` and
    ``episode`` is its verdict; outside an episode, ``completion`` is the one action of the row's episode, a fresh
    session (``reference`` is ``{"url", "reset": {...}, "action_field"}``)."""
    if episode is not None:
        return as_reward(episode)
    if not isinstance(reference, dict) or not isinstance(reference.get("url"), str):
        return RewardResult(None, {"status": "not_gradable", "reason": "reference is not an OpenEnv row"})
    action = {str(reference.get("action_field", "message")): str(completion)}
    try:
        _, result = _run(reference["url"], dict(reference.get("reset") or {}), action)
    except (OSError, ConnectionError, asyncio.TimeoutError) as e:
        return RewardResult(0.0, {"status": "env_unreachable", "error": f"{type(e).__name__}: {e}"[:300]})
    except Exception as e:  # noqa: BLE001 - the server refused the action or failed: counted, never a silent 0
        return RewardResult(0.0, {"status": "env_error", "error": f"{type(e).__name__}: {e}"[:300]})
    if not result.done:
        return RewardResult(0.0, {"status": "not_done", "reason": "the episode wants more turns (single-turn adapter)"})
    if result.reward is None or not math.isfinite(float(result.reward)):
        return RewardResult(0.0, {"status": "no_reward", "reward": str(result.reward)})
    return RewardResult(float(result.reward), {"status": "ok"})


openenv_reward.name = "openenv"  # type: ignore[attr-defined]  # metric key rewards/openenv/...
# The work happens on the server, which keeps its own limits, and the client's waits are bounded (CONNECT_S,
# MESSAGE_S): the pool calls it from threads of this process. In a worker process each first call would also pay
# openenv-core's import (7 s here: it loads gradio), over the trainer's default 5 s reward deadline.
openenv_reward.isolated = True  # type: ignore[attr-defined]


def rows(spec: EnvSpec, split: str, *, limit: int | None = None, seed: int = 0) -> tuple[list[Row], dict[str, Any]]:
    """One row per seeded reset of the server at the spec's URL."""
    opts = dict(spec.options)
    unknown = set(opts) - {"size", "seed", "prompt_field", "action_field"}
    if unknown:
        raise RewardlabError(f"openenv:{spec.name}: unknown option(s) {', '.join(sorted(unknown))} (size, seed, "
                             "prompt_field, action_field)")
    url = spec.name
    if not url.startswith(("http://", "https://", "ws://", "wss://")):
        raise RewardlabError(f"openenv:{url}: give the server's URL, e.g. openenv:http://127.0.0.1:8000")
    size = int(opts.get("size", SIZES.get(split, SIZES["test"])))
    size = size if limit is None else min(size, limit)
    base = int(opts.get("seed", seed))
    field, action_field = str(opts.get("prompt_field", "prompt")), str(opts.get("action_field", "message"))
    out = []
    for i in range(size):
        reset = {"seed": derive_seed("openenv", url, split, base, i)}
        try:
            obs, _ = _run(url, reset, None)
        except Exception as e:  # noqa: BLE001 - one line at start-up, whatever the client raised
            raise RewardlabError(f"openenv:{url}: cannot reset the environment ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else 'no reason given'})") from None
        if not isinstance(obs.get(field), str):
            raise RewardlabError(f"openenv:{url}: the observation has no text field {field!r} (fields: "
                                 f"{', '.join(sorted(obs)) or 'none'}); pass ?prompt_field=NAME")
        out.append(Row(id=f"openenv/{split}/{i}", prompt=[{"role": "user", "content": obs[field]}],
                       reference={"url": url, "reset": reset, "action_field": action_field, "prompt_field": field},
                       meta={"reward": REWARD, "env": spec.text}))
    blob = json.dumps([[r.id, r.prompt, r.reference] for r in out], sort_keys=True)
    return out, {"source": "env", "env": spec.text, "kind": "openenv", "url": url, "split": split, "seed": base,
                 "records": len(out), "sha256": hashlib.sha256(blob.encode()).hexdigest()}


def catalogue() -> dict[str, dict[str, Any]]:
    """OpenEnv environments are servers: any URL (``rewardlab envs list`` shows the spec's options)."""
    return {"URL": {"size": SIZES, "seed": "the run's", "prompt_field": "prompt", "action_field": "message"}}


__all__ = ["openenv_reward"]
