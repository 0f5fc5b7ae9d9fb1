"""Starting reward of a model on the built-in ``arith`` task: how the default task's difficulty was chosen.

Samples ``N`` completions for each of the first ``P`` train prompts of each level, grades them with
``rewardlab.rewards.math_reward`` and prints one JSON line per (level, temperature): mean reward,
the fraction of prompt groups with mixed rewards (those carry GRPO signal), grader statuses, mean
length, truncations and generation time. One thread, fixed seeds, so the figures reproduce.

    python bench/arith_baseline.py                                  # embedded SmolLM2, levels 1-3
    python bench/arith_baseline.py --levels 1 --temperatures 1.0,0.7 --prompts 48 --n 4 --max-new-tokens 48
    python bench/arith_baseline.py --model Qwen/Qwen2.5-0.5B-Instruct
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF id or folder (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--temperatures", default="1.0")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from rewardlab.models import load_model
    from rewardlab.rewards import math_reward
    from rewardlab.rollout import HFEngine, SamplingParams, format_prompt
    from rewardlab.tasks import load_task

    model, tok = load_model(args.model)
    engine = HFEngine(model, tok, batch_size=32)
    for level in args.levels.split(","):
        rows = load_task(f"arith:{level}", "train", limit=args.prompts, seed=args.seed)
        texts = [format_prompt(tok, r.prompt) for r in rows]
        for temperature in (float(t) for t in args.temperatures.split(",")):
            t0 = time.perf_counter()
            sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=temperature, seed=args.seed)
            outs = engine.generate(texts, args.n, sampling)
            seconds = time.perf_counter() - t0
            scores = [math_reward(c.text, rows[c.prompt_index].reference) for c in outs]
            statuses: dict[str, int] = {}
            for r in scores:
                statuses[r.info["status"]] = statuses.get(r.info["status"], 0) + 1
            per_prompt = [sum(scores[i * args.n + j].score or 0.0 for j in range(args.n)) / args.n
                          for i in range(len(rows))]
            print(json.dumps({
                "model": model.rewardlab_provenance.get("model"),
                "weights": model.rewardlab_provenance.get("weights"),
                "task": f"arith:{level}", "temperature": temperature, "prompts": len(rows), "n": args.n,
                "max_new_tokens": args.max_new_tokens, "threads": args.threads, "seed": args.seed,
                "mean_reward": round(sum(r.score or 0.0 for r in scores) / len(scores), 4),
                "groups_with_signal": round(sum(0 < p < 1 for p in per_prompt) / len(per_prompt), 3),
                "status": statuses,
                "mean_length": round(sum(len(c.token_ids) for c in outs) / len(outs), 1),
                "truncated": sum(c.finish_reason == "length" for c in outs),
                "generate_s": round(seconds, 1),
            }), flush=True)


if __name__ == "__main__":
    main()
