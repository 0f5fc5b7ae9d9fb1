"""Episodes per second through the policy endpoint (``rewardlab.rollout.endpoint``) vs in-process, same run.

    python bench/envs.py --episodes 64 --max-new-tokens 16 --out bench/data/envs_endpoint.json
    PYTHONPATH=tests python bench/envs.py --episodes 32 --verifiers vf_tiny_qa     # + a verifiers taskset's episodes

An episode is one row of ``reasoning_gym:spell_backward``: its prompt rendered by the chat template, one
completion sampled, and reasoning-gym's score of it. Four ways, on the same rows, model and settings:

* ``in-process, batched``: ``HFEngine.generate`` on all prompts at once (the trainer's path);
* ``in-process, one at a time``: one ``generate_ids`` call per episode, seeded per row (``seeds=``) as the endpoint
  samples a seeded request;
* ``endpoint, sequential``: one HTTP request per episode to ``/inference/v1/generate`` (token ids in and out),
  one client;
* ``endpoint, 8 / 32 clients``: the same requests, unseeded, from 8 or 32 threads: requests that queue while the
  engine is busy share its next call (``ServedPolicy.max_batch``);
* ``endpoint, 8 / 32 clients, seeded``: the same, each request with a seed of its own (as verifiers sends one per
  episode): they share calls too, each row drawing from its own seed's stream.

The endpoint's overhead is its time over ``in-process, one at a time`` (same engine calls plus HTTP and JSON).
The model is the tiny random one (``rewardlab.testing``) unless ``--model`` names another; 1 torch thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ENV = "reasoning_gym:spell_backward?answer=text"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--model", default=None, help="a model folder or 'default' (default: a tiny random model)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cpu", help="where the model runs (cuda on a GPU machine)")
    ap.add_argument("--verifiers", default=None, metavar="TASKSET",
                    help="also time a verifiers taskset's episodes (its null harness driving the engine through the "
                         "endpoint, rewardlab.rollout.driven) against the same prompts sampled in-process, batched")
    ap.add_argument("--verifiers-concurrency", type=int, default=16, help="verifiers episodes in flight at once")
    args = ap.parse_args()

    import httpx
    import torch

    from rewardlab.envs import load_rows
    from rewardlab.envs.gym import gym_reward
    from rewardlab.models import load_model
    from rewardlab.rollout import SamplingParams, format_prompt, make_engine
    from rewardlab.rollout.driven import LoopbackServer
    from rewardlab.rollout.endpoint import ServedPolicy, create_app
    from rewardlab.testing import build_tiny_model

    torch.set_num_threads(1)
    path = args.model or str(build_tiny_model(Path(tempfile.mkdtemp()) / "tiny"))
    model, tok = load_model(None if path == "default" else path)
    model.to(args.device).eval()
    engine = make_engine("hf", model, tok)
    rows, _ = load_rows(ENV, "test", limit=args.episodes)
    prompts = [engine.encode(format_prompt(tok, r.prompt)) for r in rows]
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    body = {"max_tokens": args.max_new_tokens, "temperature": 1.0, "seed": 0}

    def score(texts: list[str]) -> float:
        return sum(float(gym_reward(t, r.reference).score or 0) for t, r in zip(texts, rows)) / len(rows)

    results: dict = {"made_by": "python bench/envs.py " + " ".join(sys.argv[1:]), "env": ENV, "device": args.device,
                     "episodes": args.episodes, "max_new_tokens": args.max_new_tokens, "model": args.model or "tiny",
                     "ways": {}}

    def record(name: str, seconds: float, texts: list[str]) -> None:
        results["ways"][name] = {"seconds": round(seconds, 3), "episodes_per_s": round(args.episodes / seconds, 2),
                                 "mean_score": round(score(texts), 4)}
        print(f"{name:28s} {args.episodes / seconds:8.2f} episodes/s  ({seconds:.2f} s)", flush=True)

    engine.generate_ids(prompts[:2], 1, sampling)  # warm-up
    t = time.perf_counter()
    done = engine.generate_ids(prompts, 1, sampling)
    record("in-process, batched", time.perf_counter() - t, [c.text for c in done])
    t = time.perf_counter()  # seeded as the endpoint's seeded requests are (one random stream per row)
    one = [engine.generate_ids([p], 1, dataclasses.replace(sampling, seed=None), seeds=[0])[0] for p in prompts]
    record("in-process, one at a time", time.perf_counter() - t, [c.text for c in one])

    policy = ServedPolicy(engine, tok, name="bench", max_model_len=4096)
    server = LoopbackServer(create_app(policy))
    url = f"{server.url}/inference/v1/generate"
    with httpx.Client(timeout=120) as client:
        def call(ids: list[int], seeded: bool = True, seed: int = 0) -> str:
            params = {**body, "seed": seed} if seeded else {k: v for k, v in body.items() if k != "seed"}
            reply = client.post(url, json={"token_ids": ids, "sampling_params": params}).json()
            return reply["choices"][0]["text"]

        call(prompts[0])  # warm-up
        t = time.perf_counter()
        texts = [call(p) for p in prompts]
        record("endpoint, sequential", time.perf_counter() - t, texts)
        for clients in (8, 32):  # requests queued together share an engine call
            t = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                texts = list(pool.map(lambda ids: call(ids, seeded=False), prompts))
            record(f"endpoint, {clients} clients", time.perf_counter() - t, texts)
            t = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:  # one seed per episode
                texts = list(pool.map(lambda k: call(prompts[k], seed=k), range(len(prompts))))
            record(f"endpoint, {clients} clients, seeded", time.perf_counter() - t, texts)
    server.close()
    if args.verifiers:
        results["verifiers"] = verifiers_way(args, engine, tok)
    ways = results["ways"]
    overhead = ways["endpoint, sequential"]["seconds"] / ways["in-process, one at a time"]["seconds"]
    results["endpoint_over_in_process_one_at_a_time"] = round(overhead, 3)
    results["endpoint_over_in_process_batched"] = round(
        ways["endpoint, sequential"]["seconds"] / ways["in-process, batched"]["seconds"], 3)
    extra_ms = (ways["endpoint, sequential"]["seconds"] - ways["in-process, one at a time"]["seconds"]) * 1000
    print(f"endpoint / in-process (one at a time): {overhead:.2f}x time; "
          f"per episode +{extra_ms / args.episodes:.1f} ms")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


def verifiers_way(args: argparse.Namespace, engine, tok) -> dict:
    """``--episodes`` episodes of a verifiers taskset (its tasks, repeated): verifiers' environment, harness process
    and train client driving ``engine`` through the endpoint, vs the same prompts sampled in-process at once."""
    from rewardlab.envs import drive, is_driven, load_rows
    from rewardlab.rollout import SamplingParams, format_prompt
    from rewardlab.rollout.driven import DrivenEngine

    spec = f"verifiers:{args.verifiers}?concurrency={args.verifiers_concurrency}"
    rows, _ = load_rows(spec, "train")
    n = max(1, args.episodes // len(rows))
    prompts = [format_prompt(tok, r.prompt) for r in rows]
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
    driven = DrivenEngine(engine, tok, drive=drive, is_driven=is_driven)
    driven.generate(prompts, 1, sampling, rows=rows)  # warm-up: the harness program, the endpoint
    t = time.perf_counter()
    outs = driven.generate(prompts, n, sampling, rows=rows)
    took = time.perf_counter() - t
    driven.close()
    t = time.perf_counter()
    engine.generate(prompts, n, sampling)
    base = time.perf_counter() - t
    ok = sum(c.episode["status"] == "ok" for c in outs)
    out = {"spec": spec, "episodes": len(outs), "ok": ok, "seconds": round(took, 3),
           "episodes_per_s": round(len(outs) / took, 2), "in_process_batched_seconds": round(base, 3),
           "over_in_process_batched": round(took / base, 2)}
    print(f"{'verifiers, null harness':28s} {len(outs) / took:8.2f} episodes/s  ({took:.2f} s; {ok}/{len(outs)} ok; "
          f"in-process batched {base:.2f} s: {took / base:.1f}x)", flush=True)
    return out


if __name__ == "__main__":
    main()
