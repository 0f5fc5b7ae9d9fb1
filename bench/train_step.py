"""Seconds per RL step: rewardlab's loop vs TRL's GRPOTrainer, same model, prompts and sizes, one run.

Both trainers get the same tiny random Qwen2 model (built here with a local tokenizer), the same
arith prompts (chat template applied by each), P prompts x G completions per step, the same
max new tokens, temperature 1.0, learning rate, one optimizer step per generation batch (on-policy,
no KL, all parameters trained), HF ``generate`` rollouts, the same cheap reward, and the same
thread count. Each runs ``--steps`` steps; the median of the steps after ``--warmup`` is reported.

    .venv/bin/python bench/train_step.py                      # defaults: 8 prompts x 8, 64 tokens
    .venv/bin/python bench/train_step.py --steps 8 --threads 1 --json out.json

Prints both figures, each trainer's phase times (generate, reward, update) and the ratio (rewardlab / TRL; below 1 means
rewardlab is faster), as wall
seconds and as CPU seconds of the training process (the fair figure on a machine shared with other
jobs; reward scoring is negligible here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def digit_reward(completion: str, reference=None, **meta):
    """Fraction of characters that are digits (cheap, varies across random completions)."""
    from rewardlab.rewards.base import RewardResult

    return RewardResult(sum(ch.isdigit() for ch in completion) / max(1, len(completion)))


def trl_digit_reward(prompts=None, completions=None, **kwargs):
    out = []
    for c in completions:
        text = c[-1]["content"] if isinstance(c, list) else c
        out.append(digit_reward(text).score)
    return out


PHASES: dict[str, list[float]] = {}
"""rewardlab's per-phase seconds of each step (from its metrics.jsonl)."""
TRL_CPU: list[float] = []
"""TRL's CPU seconds (this process) per step."""
TRL_PHASES: dict[str, list[float]] = {}
"""TRL's per-phase seconds of each step: ``time/generate`` (``GRPOTrainer._generate``: tokenising
and HF ``generate``), ``time/reward`` (``_calculate_rewards``) and ``time/update`` (the rest of the
step: log-probs, advantages, loss, backward, optimizer)."""


def run_rewardlab(model_dir: Path, args: argparse.Namespace, work: Path) -> list[float]:
    from rewardlab.train import build_config
    from rewardlab.logging import read_jsonl
    from rewardlab.train import train

    out = work / "rewardlab-run"
    cfg = build_config(None, {
        "algo": "grpo", "beta": 0.0, "model": str(model_dir), "task": "arith", "task_limit": 256,
        "steps": args.steps, "prompts_per_step": args.prompts, "group_size": args.group,
        "max_new_tokens": args.max_new_tokens, "micro_batch_size": args.prompts * args.group,
        "rollout_batch_size": args.prompts * args.group, "lr": args.lr, "train_top_layers": 0,
        "reward": f"{__name__}.digit_reward", "threads": args.threads, "output_dir": str(out),
        "progress": False, "plots": False, "save_every": 10_000, "seed": 0, "device": args.device,
        **({"lora_rank": args.lora, "lora_alpha": 2.0 * args.lora} if args.lora else {}),
    })
    train(cfg)
    rows = read_jsonl(out / "metrics.jsonl")
    for phase in ("time/generate", "time/reward", "time/update", "time/step_cpu"):
        PHASES[phase] = [float(r[phase]) for r in rows]
    return [float(r["time/step"]) for r in rows]


def run_trl(model_dir: Path, args: argparse.Namespace, work: Path) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rewardlab.tasks import load_task

    rows = load_task("arith", "train", limit=256)
    ds = Dataset.from_list([{"prompt": r.prompt} for r in rows])
    stamps: list[tuple[float, float]] = []
    phase_now = {"time/generate": 0.0, "time/reward": 0.0}  # this step's seconds so far
    phase_rows: list[dict[str, float]] = []

    def timed(fn, key):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                phase_now[key] += time.perf_counter() - t
        return wrapper

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if not stamps:
                stamps.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, a, state, control, **kw):
            stamps.append((time.perf_counter(), time.process_time()))
            phase_rows.append(dict(phase_now))
            phase_now.update({k: 0.0 for k in phase_now})

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = GRPOConfig(
        output_dir=str(work / "trl-run"), use_cpu=args.device == "cpu", bf16=args.device == "cuda", report_to="none",
        gradient_checkpointing=False, max_steps=args.steps, learning_rate=args.lr,
        per_device_train_batch_size=args.prompts * args.group, gradient_accumulation_steps=1,
        num_generations=args.group, max_completion_length=args.max_new_tokens, temperature=1.0,
        beta=0.0, loss_type="grpo", num_iterations=1, logging_steps=1, save_strategy="no",
        dataloader_num_workers=0, seed=0, disable_tqdm=True,
    )
    peft_config = None
    if args.lora:  # the same adapters on both sides: every linear layer of the blocks, alpha = 2 r
        from peft import LoraConfig

        peft_config = LoraConfig(r=args.lora, lora_alpha=2.0 * args.lora, lora_dropout=0.0,
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                 "down_proj"], task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=[trl_digit_reward], args=cfg, train_dataset=ds,
                          processing_class=tok, callbacks=[Clock()], peft_config=peft_config)
    trainer._generate = timed(trainer._generate, "time/generate")  # instance attributes: this trainer only
    trainer._calculate_rewards = timed(trainer._calculate_rewards, "time/reward")
    trainer.train()
    TRL_CPU[:] = [b[1] - a[1] for a, b in zip(stamps, stamps[1:])]
    steps = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])]
    TRL_PHASES.clear()
    for key in ("time/generate", "time/reward"):
        TRL_PHASES[key] = [row[key] for row in phase_rows]
    TRL_PHASES["time/update"] = [t - g - r for t, g, r in zip(steps, TRL_PHASES["time/generate"],
                                                              TRL_PHASES["time/reward"])]
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256, help="tiny model width (256 x 4 layers = about 3 M params)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4, help="tiny model attention heads")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="both trainers on this device (cuda: bf16 autocast on both sides, rewardlab's --dtype auto)")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank on both sides (0 = full fine-tune)")
    ap.add_argument("--model", default="tiny", help="tiny (random Qwen2 of --hidden x --layers) or embedded "
                    "(SmolLM2-135M-Instruct; try --prompts 4 --group 4 --max-new-tokens 32 --steps 3)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedded model never waits on a network
    import torch

    torch.set_num_threads(args.threads)
    import transformers
    import trl

    from rewardlab.testing import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.model == "embedded":
            from learning import embedded_model_dir  # bench/learning.py, beside this file

            model_dir, model_desc = embedded_model_dir()
            model_dir = Path(model_dir)
        else:
            model_dir = build_tiny_model(work / "model", hidden_size=args.hidden, num_layers=args.layers,
                                         num_heads=args.heads)
            model_desc = f"random qwen2, hidden {args.hidden}, {args.layers} layers, {args.heads} heads"
        ours = run_rewardlab(model_dir, args, work)
        theirs = run_trl(model_dir, args, work)
    ours_s = statistics.median(ours[args.warmup:])
    trl_s = statistics.median(theirs[args.warmup:])
    ours_cpu = statistics.median(PHASES["time/step_cpu"][args.warmup:])
    trl_cpu = statistics.median(TRL_CPU[args.warmup:])
    result = {
        "rewardlab_s_per_step": round(ours_s, 4),
        "trl_s_per_step": round(trl_s, 4),
        "ratio_rewardlab_over_trl": round(ours_s / trl_s, 3),
        "rewardlab_cpu_s_per_step": round(ours_cpu, 4),
        "trl_cpu_s_per_step": round(trl_cpu, 4),
        "cpu_ratio_rewardlab_over_trl": round(ours_cpu / trl_cpu, 3),
        "rewardlab_steps_s": [round(x, 4) for x in ours],
        "trl_steps_s": [round(x, 4) for x in theirs],
        "rewardlab_phase_median_s": {k: round(statistics.median(v[args.warmup:]), 4) for k, v in PHASES.items()},
        "trl_phase_median_s": {k: round(statistics.median(v[args.warmup:]), 4) for k, v in TRL_PHASES.items()},
        "setup": {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "model": model_desc, "lora_rank": args.lora,
            "prompts": args.prompts, "group": args.group, "max_new_tokens": args.max_new_tokens,
            "steps": args.steps, "warmup": args.warmup, "threads": args.threads, "device": args.device,
            "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    print(f"rewardlab: {ours_s:.3f} s/step   TRL GRPOTrainer: {trl_s:.3f} s/step   "
          f"ratio {ours_s / trl_s:.2f}x (target <= 0.5x)")
    print(f"CPU seconds per step (robust on a shared machine): rewardlab {ours_cpu:.3f}   TRL {trl_cpu:.3f}   "
          f"ratio {ours_cpu / trl_cpu:.2f}x")
    print("phase medians, s/step    generate   reward   update")
    for name, ph in (("rewardlab", PHASES), ("TRL GRPOTrainer", TRL_PHASES)):
        med = {k: statistics.median(ph[k][args.warmup:]) for k in ("time/generate", "time/reward", "time/update")}
        print(f"  {name:<20}{med['time/generate']:10.3f}{med['time/reward']:9.3f}{med['time/update']:9.3f}")
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
