"""``rewardlab serve``: serve rewards over HTTP with OpenRLHF's remote reward-model protocol.

    rewardlab serve --port 5000 --reward math
    rewardlab serve --port 5000 --reward math --reward one_answer=0.1 --deadline 5

then train with OpenRLHF's ``--remote_rm_url http://HOST:5000/get_reward``. See
:mod:`rewardlab.server` for the protocol.
"""

from __future__ import annotations

import click

from rewardlab.errors import RewardlabError


def build_reward(specs: tuple[str, ...]):
    """One ``--reward`` is that reward; several (``NAME`` or ``NAME=WEIGHT``) are a weighted sum."""
    from rewardlab.rewards.base import get_reward
    from rewardlab.rewards.combine import Combined

    parsed: list[tuple[str, float]] = []
    for spec in specs:
        name, sep, weight = spec.partition("=")
        name = name.strip()
        if not name:
            raise RewardlabError(f"--reward {spec!r}: expected NAME or NAME=WEIGHT")
        try:
            w = float(weight) if sep else 1.0
        except ValueError:
            raise RewardlabError(f"--reward {spec!r}: weight {weight!r} is not a number") from None
        get_reward(name)  # fail now, with the list of known names, not on the first request
        parsed.append((name, w))
    if len(parsed) == 1 and parsed[0][1] == 1.0:
        return get_reward(parsed[0][0])
    keys = [n.replace(":", ".").rsplit(".", 1)[-1] for n, _ in parsed]
    if len(set(keys)) != len(keys):
        raise RewardlabError("--reward: the same reward is named twice")
    return Combined({k: (n, w) for k, (n, w) in zip(keys, parsed)})


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 for all).")
@click.option("--port", default=5000, show_default=True, type=click.IntRange(0, 65535), help="TCP port.")
@click.option(
    "--reward",
    "rewards",
    multiple=True,
    default=("math",),
    show_default=True,
    help="Reward name or dotted path, optionally NAME=WEIGHT; repeat for a weighted sum.",
)
@click.option("--deadline", default=10.0, show_default=True, type=float, help="Seconds allowed per sample.")
@click.option("--workers", default=None, type=int, help="Scoring worker processes (default: the pool's choice).")
@click.option("--no-pool", is_flag=True, help="Score in the server process instead of the worker pool.")
@click.option("--max-batch", default=65536, show_default=True, type=int, help="Largest batch accepted per request.")
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"]))
def serve(
    host: str,
    port: int,
    rewards: tuple[str, ...],
    deadline: float,
    workers: int | None,
    no_pool: bool,
    max_batch: int,
    log_level: str,
) -> None:
    """Serve rewards at POST /get_reward (OpenRLHF remote reward protocol) and GET /health."""
    import uvicorn

    from rewardlab.rewards.base import reward_name
    from rewardlab.server import create_app

    if deadline <= 0:
        raise RewardlabError("--deadline must be positive")
    reward = build_reward(rewards)
    app = create_app(reward, pool=not no_pool, deadline=deadline, workers=workers, max_batch=max_batch)
    click.echo(f"rewardlab serve: reward {reward_name(reward)!r} on http://{host}:{port}/get_reward", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=log_level == "debug")
