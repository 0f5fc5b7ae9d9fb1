"""Update cost by micro-batch layout: padded (by count), token-budget, packed, group-packed. One run.

The update's compute is the forward + backward of every micro-batch of a step over the response tokens, the
loss normalised by the whole step's token count. This bench times exactly that, with the trainer's own code
(``rewardlab.train.sizes.micro_spans`` to cut, ``rewardlab.train.logprobs`` to lay out: ``shared_prompt_logprobs``
for padded rows, ``packed_logprobs`` for packed and group-packed rows), on batches of synthetic samples whose
lengths come from a distribution, and reports per layout: update seconds (median of ``--repeats``), response
tokens/s, the share of computed positions that are padding, micro-batches, peak RSS (each layout in its own
process, so peaks do not mix), and the loss and the gradient's norm (all layouts must agree: the same step).

Workloads:

* ``longtail``: a small random Qwen2 (hidden 256, 4 layers), 4 prompts x 8 completions, prompts of 60-200 tokens,
  completion lengths lognormal with mean about 300, capped at 2,048 (the reasoning-model shape);
* ``gsm8k``: the embedded SmolLM2-135M-Instruct (top 4 blocks trained), 4 GSM8K groups x 8, prompt and
  completion lengths those the embedded model itself sampled on GSM8K test questions at temperature 1
  (:data:`LENGTHS`, made by ``bench/rollout_lengths.py``): the shape of the default recipe's own batches.

    .venv/bin/python bench/packing.py                                  # both workloads
    .venv/bin/python bench/packing.py --workloads longtail --json out.json
    python bench/packing.py --workloads longtail --device cuda --shape qwen3-0.6b --budget 16384   # GPU (gpu_check.sh)

Padded by count uses ``--micro-batch-size`` rows (8); the token layouts use ``--budget`` positions (4,096).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

LENGTHS = Path(__file__).parent / "data" / "rollout_lengths.json"
"""The ``gsm8k`` workload's lengths: the embedded model's own GSM8K rollouts (``bench/rollout_lengths.py``)."""
LAYOUTS = {"padded": ("none", 0), "token-budget": ("none", 1), "packed": ("sequences", 1),
           "group-packed": ("groups", 1)}
"""Bench name -> (``--packing``, whether the micro-batches are cut by the token budget)."""


def shapes(workload: str, seed: int) -> list[tuple[int, int, int]]:
    """``(group, prompt tokens, completion tokens)`` for every sample of the step."""
    rng = random.Random(seed)
    if workload == "longtail":
        out = []
        for g in range(4):
            p = rng.randint(60, 200)
            out += [(g, p, min(2048, max(8, int(rng.lognormvariate(5.3, 0.75))))) for _ in range(8)]
        return out
    if not LENGTHS.is_file():
        raise SystemExit(f"{LENGTHS} is missing: make it with python bench/rollout_lengths.py (the embedded model's "
                         "real GSM8K rollouts)")
    groups = json.loads(LENGTHS.read_text())["groups"]
    out = []
    for g, group in enumerate(rng.sample(groups, 4)):  # 4 of the recorded groups, each with its 8 real completions
        out += [(g, int(group["prompt_tokens"]), max(1, int(n))) for n in group["completion_tokens"][:8]]
    return out


def build(workload: str, shape: str, device: str):
    """The workload's model (trained parameters set) and pad id."""
    import torch

    from rewardlab.models import load_model
    from rewardlab.testing import build_tiny_model
    from rewardlab.train.logprobs import freeze_to_top_layers

    if shape == "qwen3-0.6b":  # Qwen3-0.6B's shape, random weights, bf16 (the prime-rl trainer setting)
        from transformers import AutoModelForCausalLM, Qwen3Config

        cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                          num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                          max_position_embeddings=40960)
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).to(device), 0
    if workload == "longtail":
        path = build_tiny_model(Path(tempfile.mkdtemp()) / "m", hidden_size=256, num_layers=4, num_heads=4)
        model, tok = load_model(str(path))
    else:
        model, tok = load_model(None)
        freeze_to_top_layers(model, 4)
    return model.to(device), tok.pad_token_id


def one_layout(workload: str, layout: str, seed: int, repeats: int, budget: int, micro: int, *,
               shape: str = "small", device: str = "cpu", peak_tflops: float = 989.0) -> dict:
    """Runs in its own process: build the model and batch, time the update ``repeats`` times."""
    import torch

    from rewardlab.algos import PRESETS, policy_loss
    from rewardlab.train.logprobs import packed_logprobs, pad_batch, shared_prompt_logprobs
    from rewardlab.train.sizes import LAYOUT_COST, longest_first, micro_spans

    torch.manual_seed(seed)
    model, pad = build(workload, shape, device)
    model.train()
    V = model.config.vocab_size
    rng = random.Random(seed)
    prompts = {}
    samples = []
    for g, p, r in shapes(workload, seed):
        prompts.setdefault(g, [rng.randrange(V) for _ in range(p)])
        samples.append(SimpleNamespace(prompt_ids=prompts[g], token_ids=[rng.randrange(V) for _ in range(r)],
                                       loss_mask=None, advantage=rng.gauss(0, 1)))
    packing, by_tokens = LAYOUTS[layout]
    sh = [(g, p, r) for g, p, r in shapes(workload, seed)]
    if by_tokens:
        order = longest_first(sh, by_prompt=packing == "groups")
        samples, sh = [samples[i] for i in order], [sh[i] for i in order]
    spans = micro_spans(sh, count=micro, budget=budget if by_tokens else 0, layout=packing)
    positions = sum(LAYOUT_COST[packing](sh[a:b]) for a, b in spans)
    tokens = sum(r for _, _, r in sh)
    algo = replace(PRESETS["grpo"], beta=0.0)  # the policy term only: no reference pass to time
    times, loss_total, gnorm = [], 0.0, 0.0
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss_total = 0.0
        for a, b in spans:
            micro_b = samples[a:b]
            mask = pad_batch(micro_b, pad, device)["response_mask"]  # (B, R)
            if packing == "none":
                lp = shared_prompt_logprobs(model, micro_b, pad, device, grad=True)[0]
            else:
                lp = packed_logprobs(model, micro_b, device, groups=packing == "groups", grad=True)[0]
            adv = torch.tensor([s.advantage for s in micro_b], device=device)
            loss, _ = policy_loss(lp, lp.detach(), adv, mask, algo, num_tokens=float(tokens), num_seqs=float(len(sh)))
            loss.backward()
            loss_total += float(loss)
        sync()
        times.append(time.perf_counter() - t0)
        gnorm = float(torch.sqrt(sum((p.grad.float() ** 2).sum() for p in model.parameters() if p.grad is not None)))
    sec = statistics.median(times)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    flops = 6 * trained * positions  # forward + backward, matmuls only (attention's own FLOPs left out)
    gpu_peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
    mfu = flops / sec / (peak_tflops * 1e12) if gpu_peak else None
    return {"shape": shape, "device": device, "mfu": mfu, "gpu_peak_mb": gpu_peak, "workload": workload,
            "layout": layout, "seconds": sec, "tokens_per_s": tokens / sec,
            "pad_fraction": 1 - LAYOUT_COST["sequences"](sh) / positions if packing == "none" else 0.0,
            "positions": positions, "micro_batches": len(spans), "loss": loss_total, "grad_norm": gnorm,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="longtail,gsm8k")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=int, default=4096)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default="small", choices=["small", "qwen3-0.6b"],
                    help="small: the workload's model; qwen3-0.6b: a random Qwen3-0.6B-shaped model (bf16)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the device's dense bf16 peak, for MFU")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: one (workload, layout) in this process
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.one:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(one_layout(*args.one, args.seed, args.repeats, args.budget, args.micro_batch_size,
                                    shape=args.shape, device=args.device, peak_tflops=args.peak_tflops)))
        return
    rows = []
    print(f"{'workload':9s} {'layout':13s} {'update s':>9s} {'tok/s':>8s} {'pad':>6s} {'micro':>5s} "
          f"{'peak MiB':>9s} {'vs padded':>9s} {'loss':>12s} {'|grad|':>12s}", flush=True)
    for workload in args.workloads.split(","):
        base = None
        for layout in args.layouts.split(","):
            cmd = [sys.executable, __file__, "--one", workload, layout, "--seed", str(args.seed), "--repeats",
                   str(args.repeats), "--budget", str(args.budget), "--micro-batch-size", str(args.micro_batch_size),
                   "--threads", str(args.threads), "--device", args.device, "--shape", args.shape,
                   "--peak-tflops", str(args.peak_tflops)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode:
                print(f"{workload} {layout}: failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            base = r["seconds"] if layout == "padded" else base
            r["speedup_vs_padded"] = base / r["seconds"] if base else None
            rows.append(r)
            mfu = f"  MFU {r['mfu']:.1%}" if r.get("mfu") else ""
            print(f"{workload:9s} {layout:13s} {r['seconds']:9.2f} {r['tokens_per_s']:8.0f} {r['pad_fraction']:6.1%} "
                  f"{r['micro_batches']:5d} {r['peak_rss_mb']:9.0f} "
                  f"{(r['speedup_vs_padded'] or float('nan')):8.2f}x {r['loss']:12.6f} {r['grad_norm']:12.6f}{mfu}",
                  flush=True)
    if args.json:
        import torch

        made = {"command": " ".join([sys.executable, *sys.argv]), "python": platform.python_version(),
                "torch": torch.__version__, "machine": platform.machine(), "cpus": os.cpu_count(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        args.json.write_text(json.dumps({"made_by": made, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
