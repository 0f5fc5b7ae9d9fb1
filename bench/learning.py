"""Does it learn as fast as TRL? rewardlab's loop vs TRL's GRPOTrainer: reward curves from one run.

Both trainers get the same model (the same weights folder), the same task and reward, the same
prompts in the same order, seed, P prompts x G completions per step, max new tokens, temperature,
learning rate (constant, no warm-up), AdamW betas, gradient clipping and number of steps; one
optimizer step per generation batch (on-policy), every parameter trained, HF ``generate`` rollouts,
one thread each.

    .venv/bin/python bench/learning.py --model tiny --seeds 0,1,2        # quick: tiny random model
    .venv/bin/python bench/learning.py --algo grpo                       # embedded SmolLM2-135M-Instruct
    .venv/bin/python bench/learning.py --algo dapo --seeds 0,1,2 --json dapo.json

``--algo grpo`` is like for like: rewardlab's grpo preset (z-score advantages, clip 0.2, sequence
mean of token means) against TRL ``loss_type="grpo"``, both with ``--beta`` (default 0, TRL's
default; rewardlab's preset would use 0.04). ``--algo dapo``: rewardlab's dapo preset (clip-higher
0.28, token mean, soft overlong shaping, dynamic sampling with at most ``--max-gen-batches``
rounds per step) against TRL ``loss_type="dapo"`` with ``epsilon_high=0.28`` and TRL's own soft
overlong punishment as a second reward (TRL has no dynamic sampling, so it always generates P x G).

Tasks. ``--model embedded`` (default): ``strict``, the built-in ``arith`` prompts ("What is 6 + 3?
Answer with just the number.") graded strictly: 1 when the completion is exactly the number (a
trailing period allowed), 0.25 when its last integer is the answer but there is other text, else 0.
The model starts near 0.01 (it almost never answers with the number alone). ``--model tiny``:
``letters``, the fraction of lowercase ASCII letters in the completion, on a random 2-block model
(the task of ``tests/test_learning.py``).

Printed: the configuration, each seed's reward curves (task reward averaged over every generated
completion of the step, for rewardlab including those dynamic sampling dropped) and mean completion
lengths in tokens, the mean of the
first 3 and the last 3 steps, completions generated per step, seconds per step (median), and the
rewardlab / TRL ratios; with several seeds, mean and standard deviation over seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

# --- rewards (module level: rewardlab loads them by dotted path) ----------------------------

_INT = re.compile(r"-?\d+")


def strict_score(text: str, answer) -> float:
    """1.0 for exactly the number, 0.25 for the right last integer amid other text, else 0."""
    t = text.strip()
    ans = str(answer).strip()
    if t.rstrip(".").strip() == ans:
        return 1.0
    nums = _INT.findall(t)
    return 0.25 if nums and nums[-1] == ans else 0.0


def letters_score(text: str, answer=None) -> float:
    """Share of characters that are lowercase ASCII letters."""
    return sum("a" <= c <= "z" for c in text) / max(1, len(text))


class _Reward:
    isolated = True  # pure Python, microseconds: scored on the trainer's thread, no worker processes

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn

    def fast(self, completion: str, reference=None, **meta):
        return self(completion, reference, **meta)

    def __call__(self, completion: str, reference=None, **meta):
        from rewardlab.rewards.base import RewardResult

        return RewardResult(self.fn(completion, reference))


strict = _Reward("strict", strict_score)
letters = _Reward("letters", letters_score)
SCORES = {"strict": strict_score, "letters": letters_score}


def trl_reward(task: str):
    fn = SCORES[task]

    def reward(prompts=None, completions=None, answer=None, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [fn(t, a) for t, a in zip(texts, answer)]

    reward.__name__ = task
    return reward


def embedded_model_dir() -> tuple[str, str]:
    """The embedded SmolLM2-135M-Instruct as a folder both trainers load, and a description of it."""
    from rewardlab import models

    model, _tok = models.load_model(None)
    prov = dict(getattr(model.config, "rewardlab_provenance", None) or {})
    del model
    model_dir = prov.get("path") or models.DEFAULT_MODEL  # the converted folder, else the Hub id
    return model_dir, f"SmolLM2-135M-Instruct ({prov.get('weights', 'original release')}) from {model_dir}"


# --- the two runs -----------------------------------------------------------------------------


def prompt_order(args: argparse.Namespace, seed: int, n: int) -> tuple[list, list[int]]:
    """The task rows and the first ``n`` row indices in rewardlab's seeded order (TRL gets the same)."""
    from rewardlab.tasks import load_task
    from rewardlab.train import PromptStream

    rows = load_task("arith", "train", seed=seed)
    return rows, [i for i, _ in PromptStream(len(rows), seed).take(n)]


def run_rewardlab(model_dir: str, args: argparse.Namespace, seed: int, work: Path) -> dict:
    from rewardlab.train import build_config
    from rewardlab.logging import read_jsonl
    from rewardlab.train import train

    out = work / f"rewardlab-{args.algo}-{seed}"
    settings = {
        "algo": args.algo, "model": model_dir, "task": "arith", "steps": args.steps,
        "prompts_per_step": args.prompts, "group_size": args.group, "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature, "micro_batch_size": args.prompts * args.group,
        "rollout_batch_size": args.prompts * args.group, "lr": args.lr, "train_top_layers": 0,
        "adam_beta1": 0.9, "adam_beta2": 0.99, "max_grad_norm": 1.0, "warmup_steps": 0, "weight_decay": 0.0,
        "reward": f"{__name__}.{args.task}", "reward_workers": 1, "threads": args.threads,
        "output_dir": str(out), "progress": False, "plots": False, "save_every": 10_000, "seed": seed,
    }
    if args.algo == "grpo":
        settings["beta"] = args.beta
    else:
        settings["max_gen_batches"] = args.max_gen_batches
    with contextlib.redirect_stdout(io.StringIO()):  # its start-up table; the report prints the configuration
        train(build_config(None, settings))
    metrics = read_jsonl(out / "metrics.jsonl")
    by_step: dict[int, list[float]] = {}
    lengths: dict[int, list[int]] = {}
    for r in read_jsonl(out / "rollouts.jsonl"):  # every generated completion, kept or dropped
        by_step.setdefault(int(r["step"]), []).append(float(r["components"][f"{__name__}.{args.task}"] or 0.0))
        lengths.setdefault(int(r["step"]), []).append(int(r["length"]))
    return {
        "curve": [statistics.fmean(v) for _, v in sorted(by_step.items())],
        "length": [statistics.fmean(v) for _, v in sorted(lengths.items())],
        "generated": [int(m["completions/generated"]) for m in metrics],
        "kept": [int(m["completions/kept"]) for m in metrics],
        "rounds": [int(m["num_gen_batches"]) for m in metrics],
        "seconds": [float(m["time/step"]) for m in metrics],
    }


def run_trl(model_dir: str, args: argparse.Namespace, seed: int, work: Path) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows, order = prompt_order(args, seed, args.steps * args.prompts)
    ds = Dataset.from_list([{"prompt": rows[i].prompt, "answer": str(rows[i].reference)} for i in order])
    stamps: list[float] = []
    logs: dict[int, dict] = {}

    class Record(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if not stamps:
                stamps.append(time.perf_counter())

        def on_step_end(self, a, state, control, **kw):
            stamps.append(time.perf_counter())

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and f"rewards/{args.task}/mean" in logs:
                logs_by_step.setdefault(state.global_step, {}).update(logs)

    logs_by_step = logs
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    extra: dict = {}
    reward_funcs = [trl_reward(args.task)]
    if args.algo == "grpo":
        extra.update(loss_type="grpo", epsilon=0.2, beta=args.beta)
    else:
        from trl.rewards import get_soft_overlong_punishment

        extra.update(loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.0)
        reward_funcs.append(get_soft_overlong_punishment(args.max_new_tokens, max(1, args.max_new_tokens // 4)))
    cfg = GRPOConfig(
        output_dir=str(work / f"trl-{args.algo}-{seed}"), use_cpu=True, bf16=False, report_to="none",
        activation_checkpointing=False, max_steps=args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.99, max_grad_norm=1.0,
        per_device_train_batch_size=args.prompts * args.group, gradient_accumulation_steps=1,
        num_generations=args.group, max_completion_length=args.max_new_tokens, temperature=args.temperature,
        top_p=1.0, top_k=0, num_iterations=1, scale_rewards="group", shuffle_dataset=False, logging_steps=1,
        save_strategy="no", dataloader_num_workers=0, seed=seed, disable_tqdm=True, **extra,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=cfg, train_dataset=ds,
                          processing_class=tok, callbacks=[Record()])
    trainer.remove_callback(PrinterCallback)  # its per-step dicts; the report prints the curves
    trainer.train()
    steps = sorted(logs)
    return {
        "curve": [float(logs[s][f"rewards/{args.task}/mean"]) for s in steps],
        "length": [float(logs[s]["completions/mean_length"]) for s in steps],
        "generated": [args.prompts * args.group] * len(steps),
        "kept": [args.prompts * args.group] * len(steps),
        "rounds": [1] * len(steps),
        "seconds": [b - a for a, b in zip(stamps, stamps[1:])],
    }


# --- report -----------------------------------------------------------------------------------


def first_last(curve: list[float], k: int = 3) -> tuple[float, float]:
    return statistics.fmean(curve[:k]), statistics.fmean(curve[-k:])


def summary(run: dict) -> dict:
    first, last = first_last(run["curve"])
    return {"first3": first, "last3": last, "gain": last - first,
            "generated_per_step": statistics.fmean(run["generated"]),
            "s_per_step": statistics.median(run["seconds"])}


def mean_sd(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    return f"{statistics.fmean(xs):.3f} +- {statistics.stdev(xs):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded", help="embedded (SmolLM2-135M-Instruct), tiny, or a model folder")
    ap.add_argument("--algo", choices=("grpo", "dapo"), default="grpo")
    ap.add_argument("--seeds", default="0", help="comma-separated, e.g. 0,1,2")
    ap.add_argument("--task", choices=("strict", "letters"), help="default: strict (embedded), letters (tiny)")
    ap.add_argument("--prompts", type=int, help="P prompts per step (default 4)")
    ap.add_argument("--group", type=int, help="G completions per prompt (default 4 embedded, 8 tiny)")
    ap.add_argument("--max-new-tokens", type=int, help="default 32 embedded, 8 tiny")
    ap.add_argument("--steps", type=int, help="default 8 embedded, 20 tiny")
    ap.add_argument("--lr", type=float, help="default 3e-5 embedded, 1e-2 tiny")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient, grpo only (both sides)")
    ap.add_argument("--max-gen-batches", type=int, default=4, help="rewardlab dapo: generation rounds per step")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write all numbers to this file")
    args = ap.parse_args()
    tiny = args.model == "tiny"
    defaults = dict(task="letters" if tiny else "strict", prompts=4, group=8 if tiny else 4,
                    max_new_tokens=8 if tiny else 32, steps=20 if tiny else 8, lr=1e-2 if tiny else 3e-5)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedded model never waits on a network
    from rewardlab.train import set_threads

    set_threads(args.threads)
    import torch
    import transformers
    import trl

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if tiny:
            from rewardlab.testing import build_tiny_model

            model_dir, model_desc = str(build_tiny_model(work / "tiny")), "random tiny qwen2 (64 wide, 2 blocks)"
        elif args.model == "embedded":
            model_dir, model_desc = embedded_model_dir()
        else:
            model_dir, model_desc = args.model, args.model
        n_params = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_pretrained(model_dir).parameters())
        config = {
            "model": model_desc, "params": n_params, "algo": args.algo, "task": args.task,
            "prompts x group": f"{args.prompts} x {args.group}", "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature, "lr": args.lr, "steps": args.steps, "seeds": seeds,
            "beta": args.beta if args.algo == "grpo" else 0.0, "threads": args.threads,
            "trained": "all parameters, both sides",
            "rewardlab": f"--algo {args.algo}" + (f" --beta {args.beta}" if args.algo == "grpo" else
                                                   f" (dynamic sampling, --max-gen-batches {args.max_gen_batches})"),
            "trl": (f"loss_type=grpo beta={args.beta}" if args.algo == "grpo"
                    else "loss_type=dapo epsilon_high=0.28 + soft overlong punishment"),
            "versions": f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}",
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        }
        print("configuration")
        for k, v in config.items():
            print(f"  {k:<16} {v}")
        sys.stdout.flush()
        runs: dict[str, list[dict]] = {"rewardlab": [], "trl": []}
        for seed in seeds:
            runs["rewardlab"].append(run_rewardlab(model_dir, args, seed, work))
            runs["trl"].append(run_trl(model_dir, args, seed, work))
            print(f"\nseed {seed}: task reward per step (mean over every completion generated)")
            print("  step       " + " ".join(f"{i:>5d}" for i in range(1, args.steps + 1)))
            for side in ("rewardlab", "trl"):
                r = runs[side][-1]
                print(f"  {side:<10} " + " ".join(f"{x:5.2f}" for x in r["curve"]))
            for side in ("rewardlab", "trl"):
                print("  tokens     " + " ".join(f"{x:5.1f}" for x in runs[side][-1]["length"])
                      + f"   ({side}: mean completion length)")
            r = runs["rewardlab"][-1]
            print("  generated  " + " ".join(f"{x:5d}" for x in r["generated"]) + "   (rewardlab; TRL "
                  f"{args.prompts * args.group} every step)")
            print("  s/step     " + " ".join(f"{x:5.1f}" for x in r["seconds"]) + "   (rewardlab)")
            print("  s/step     " + " ".join(f"{x:5.1f}" for x in runs["trl"][-1]["seconds"]) + "   (TRL)")
            sys.stdout.flush()

    sums = {side: [summary(r) for r in rs] for side, rs in runs.items()}
    print(f"\nsummary over {len(seeds)} seed(s) (mean +- sd)")
    print(f"  {'':<10} {'first 3':>16} {'last 3':>16} {'gain':>16} {'generated/step':>16} {'s/step':>16}")
    for side in ("rewardlab", "trl"):
        s = sums[side]
        print(f"  {side:<10} " + " ".join(f"{mean_sd([x[k] for x in s]):>16}" for k in
                                           ("first3", "last3", "gain", "generated_per_step", "s_per_step")))
    ratio_s = [a["s_per_step"] / b["s_per_step"] for a, b in zip(sums["rewardlab"], sums["trl"])]
    print(f"  ratio rewardlab / TRL: s/step {mean_sd(ratio_s)}; gain "
          f"{statistics.fmean([x['gain'] for x in sums['rewardlab']]):+.3f} vs "
          f"{statistics.fmean([x['gain'] for x in sums['trl']]):+.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"config": config, "runs": runs, "summary": sums}, indent=2) + "\n")


if __name__ == "__main__":
    main()
