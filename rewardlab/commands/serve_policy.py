"""``rewardlab serve-policy``: a model behind an OpenAI-compatible endpoint that returns every token id and
log-prob (:mod:`rewardlab.rollout.endpoint`), for agent harnesses and environments that drive episodes over HTTP.

    rewardlab serve-policy default --port 8000
    rewardlab serve-policy runs/x/checkpoints/step-000020 --port 8000 --max-model-len 8192
    rewardlab serve-policy runs/x/checkpoints/step-000020 --rollout vllm --device cuda   # vLLM behind it

The engine is built as ``rewardlab eval`` builds it (its row of :data:`rewardlab.rollout.ENGINES`, eval's keywords:
the server owns the device), so ``--rollout`` offers exactly the engines the trainer and the eval offer.
"""

from __future__ import annotations

import click
import uvicorn

from rewardlab.commands.serve import listen
from rewardlab.errors import RewardlabError
from rewardlab.models import DTYPES
from rewardlab.rollout.base import SUPPORTS
from rewardlab.rollout.engines import DEFAULT_ENGINE, ENGINES


@click.command("serve-policy")
@click.argument("model", required=False, default="default")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 for all).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port (0: a free one).")
@click.option("--name", default=None, help="The model id reported by /v1/models (default: MODEL).")
@click.option("--max-model-len", default=4096, show_default=True, type=click.IntRange(min=2),
              help="Prompt plus completion tokens at most; longer requests are refused (400).")
@click.option("--rollout", default=DEFAULT_ENGINE, show_default=True, type=click.Choice(list(ENGINES)),
              help="The engine that samples: " + ", ".join(
                  f"{k}" + (f" (needs {e.requires})" if e.requires else "") for k, e in ENGINES.items()) + ".")
@click.option("--seed", default=0, show_default=True, type=int,
              help="The engine's seed (unseeded requests; a request's own seed decides its tokens).")
@click.option("--device", default="cpu", show_default=True, help="Model device (cpu, cuda, cuda:1...).")
@click.option("--dtype", default="auto", show_default=True, type=click.Choice(DTYPES), help="Model dtype.")
@click.option("--logprob-support", default="kept", show_default=True, type=click.Choice(list(SUPPORTS)),
              help="What returned log-probs describe under top-k / top-p: " +
                   "; ".join(f"{k}: {v}" for k, v in SUPPORTS.items()) + ".")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def serve_policy(model: str, host: str, port: int, name: str | None, max_model_len: int, rollout: str, seed: int,
                 device: str, dtype: str, logprob_support: str, log_level: str) -> None:
    """Serve MODEL at /v1/chat/completions and /inference/v1/generate, with token ids and log-probs."""
    from rewardlab.models import check_model, load_model, resolve_device  # lazy: --help stays fast (torch)
    from types import SimpleNamespace

    from rewardlab.rollout import make_engine
    from rewardlab.rollout.endpoint import ServedPolicy, create_app

    sock = listen(host, port)  # a busy port fails before a model load
    check_model(None if model == "default" else model)
    on = resolve_device(device)
    loaded, tokenizer = load_model(None if model == "default" else model, dtype=dtype, device=on)
    loaded.eval()
    if logprob_support == "full" and not ENGINES[rollout].reports_full_logprobs:
        raise RewardlabError(f"--rollout {rollout} records log-probs over the kept set only: use --logprob-support "
                             "kept")
    keywords = ENGINES[rollout].eval_keywords(SimpleNamespace(seed=seed, batch_size=32), str(on))
    policy = ServedPolicy(make_engine(rollout, loaded, tokenizer, **keywords), tokenizer, name=name or model,
                          max_model_len=max_model_len, support=logprob_support)
    if max_model_len > int(getattr(loaded.config, "max_position_embeddings", max_model_len)):
        raise RewardlabError(f"--max-model-len {max_model_len} is over the model's "
                             f"{loaded.config.max_position_embeddings} positions")
    port = sock.getsockname()[1]
    click.echo(f"rewardlab serve-policy: {policy.name} on http://{host}:{port}/v1 (token ids and log-probs in every "
               "reply)", err=True)
    uvicorn.Server(uvicorn.Config(create_app(policy), log_level=log_level, access_log=False)).run(sockets=[sock])
