"""``rewardlab serve``: serve rewards over HTTP with OpenRLHF's remote reward-model protocol.

    rewardlab serve --port 5000 --reward math
    rewardlab serve --port 5000 --reward math --reward one_answer=0.1 --deadline 5

then train with OpenRLHF's ``--reward.remote_url http://HOST:5000/get_reward`` (0.10+) (bind ``--host 0.0.0.0``
when the trainer runs on another machine; ``--port 0`` picks a free port and prints it). See
:mod:`rewardlab.server` for the protocol. Bad specs, a busy port or an unknown host are one-line errors.
"""

from __future__ import annotations

import logging
import socket

import click
import uvicorn

from rewardlab.errors import RewardlabError
from rewardlab.rewards.base import reward_name
from rewardlab.rewards.combine import reward_from_specs
from rewardlab.server import create_app

LOG_LEVELS = ["debug", "info", "warning", "error"]
"""``--log-level`` choices: the logging levels the server's log may be set to."""


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; an unknown host or a busy port is a one-line error."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise RewardlabError(f"--host {host}: cannot resolve it ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it. uvicorn serving a socket it did not make leaves Nagle on, and each reply
        # (headers, then body) then waited out the client's 40 ms delayed ACK: 45 ms per request on loopback, 0.3 ms
        # with it (bench/envs.py).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise RewardlabError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


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
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Scoring worker processes (default: the pool's choice).")
@click.option("--no-pool", is_flag=True, help="Score in the server process instead of the worker pool.")
@click.option("--max-batch", default=65536, show_default=True, type=click.IntRange(min=1),
              help="Largest batch accepted per request.")
@click.option("--max-body-mb", default=64.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Largest request body accepted, in MiB (larger: 413).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(LOG_LEVELS))
def serve(
    host: str,
    port: int,
    rewards: tuple[str, ...],
    deadline: float,
    workers: int | None,
    no_pool: bool,
    max_batch: int,
    max_body_mb: float,
    log_level: str,
) -> None:
    """Serve rewards at POST /get_reward (OpenRLHF remote reward protocol) and GET /health."""

    if deadline <= 0:
        raise RewardlabError("--deadline must be positive")
    reward = reward_from_specs(rewards)
    app = create_app(reward, pool=not no_pool, deadline=deadline, workers=workers, max_batch=max_batch,
                     max_body=int(max_body_mb * 2**20))
    sock = listen(host, port)
    port = sock.getsockname()[1]  # the real port when --port 0 asked for a free one
    click.echo(f"rewardlab serve: reward {reward_name(reward)!r} on http://{host}:{port}/get_reward", err=True)
    handler = logging.StreamHandler()  # refused requests: one warning line each, beside uvicorn's own log
    handler.setFormatter(logging.Formatter("%(levelname)s:  rewardlab: %(message)s"))
    server_log = logging.getLogger("rewardlab.server")
    server_log.addHandler(handler)
    server_log.setLevel(log_level.upper())
    server_log.propagate = False
    config = uvicorn.Config(app, log_level=log_level, access_log=log_level == "debug")
    uvicorn.Server(config).run(sockets=[sock])
