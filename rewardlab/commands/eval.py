"""``rewardlab eval``: evaluate a model or checkpoint, or compare two results files.

    rewardlab eval default --suite gsm8k,math500,humaneval --limit 50
    rewardlab eval runs/x/checkpoints/step-000200 --suite gsm8k --output evals/step200
    rewardlab eval --compare before/results.json after/results.json --plot delta.png

See :mod:`rewardlab.eval` for what is recorded and how resume works.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from rewardlab.errors import RewardlabError
from rewardlab.eval import RESULTS_FILE, compare_results, format_compare, format_table, load_spec, plot_compare, run_eval
from rewardlab.eval.graders import GRADERS, GSM8K_VARIANTS, parse_graders


DEFAULT_SUITE = "gsm8k,math500,humaneval"


def _int_list(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise RewardlabError(f"--k expects comma-separated integers like 1,5,10, got {value!r}") from None
    return out or None


def _default_output(model: str) -> Path:
    name = Path(model.rstrip("/")).name or "model"
    return Path("evals-out") / name


@click.command("eval")
@click.argument("model", required=False)
@click.option("--suite", default=None,
              help="Comma-separated benchmarks: gsm8k, math500, math, humaneval, arith, or names from --spec files "
                   "[default: gsm8k,math500,humaneval; with --spec: the spec files' benchmarks].")
@click.option("--limit", type=int, default=None, help="Evaluate the first N problems of each benchmark, in data-file order.")
@click.option("--n", "n", type=int, default=None, help="Samples per problem (default from the spec: 1).")
@click.option("--k", "k", default=None, help="pass@k values, comma-separated, each <= n (default from the spec: 1).")
@click.option("--temperature", type=float, default=None, help="Sampling temperature (spec default 0 = greedy).")
@click.option("--top-p", type=float, default=None, help="Nucleus sampling top-p (spec default 1.0).")
@click.option("--max-new-tokens", type=int, default=None, help="Generation budget per completion (default from the spec).")
@click.option("--batch-size", type=int, default=8, show_default=True, help="Prompts per generation batch.")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed (batch slot i uses seed + first problem position).")
@click.option("--output", "-o", type=click.Path(file_okay=False), default=None,
              help="Output directory for results.json and samples (default evals-out/<model name>). Rerunning resumes.")
@click.option("--rollout", type=click.Choice(["hf", "vllm"]), default="hf", show_default=True, help="Generation engine.")
@click.option("--dtype", default="auto", show_default=True, help="Model dtype: auto, float32, bfloat16, float16.")
@click.option("--device", default="cpu", show_default=True, help="Model device (cpu, cuda, cuda:1...).")
@click.option("--threads", type=int, default=None, help="torch CPU threads (default 1 on machines with <= 4 cores).")
@click.option("--spec", "specs", multiple=True, type=click.Path(dir_okay=False),
              help="A benchmark spec YAML file (repeatable); its name can then be used in --suite (added if absent).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Data directory (default $REWARDLAB_DATA_DIR).")
@click.option("--overwrite", is_flag=True, help="Discard existing samples in --output instead of resuming.")
@click.option("--compare", nargs=2, type=str, default=None, metavar="A.json B.json",
              help="Compare two runs (paired on the same problems) instead of evaluating; a side may list "
                   "several results files of one model separated by commas.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="With --compare: write a PNG bar chart here.")
@click.option("--json", "as_json", is_flag=True, help="Print the results (or comparison) as JSON instead of a table.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--tools", type=click.Choice(["none", "python"]), default="none", show_default=True,
              help="python: multi-turn, the model's ```python blocks run in the sandbox; its last turn is graded.")
@click.option("--max-turns", type=int, default=3, show_default=True, help="--tools: most tool calls per completion.")
@click.option("--tool-timeout", type=float, default=2.0, show_default=True, help="--tools: seconds per tool call.")
@click.option("--tool-format", type=click.Choice(["fenced", "chat"]), default="fenced", show_default=True,
              help="--tools: the output as an ```output block in the turn, or a chat-template tool message.")
@click.option("--grader", "graders", multiple=True,
              help="Also grade with: " + ", ".join(g for g in GRADERS if g != "rewardlab") + " (repeatable or comma "
                   "list; rewardlab's own grader always runs). Side by side in results.json, disagreements in "
                   "graders_<benchmark>.jsonl.")
@click.option("--lm-eval-task", default="gsm8k", show_default=True, type=click.Choice(sorted(GSM8K_VARIANTS)),
              help="Which lm-eval GSM8K task's filters lm-eval-strict / lm-eval-flexible reproduce.")
def eval_cmd(model, suite, limit, n, k, temperature, top_p, max_new_tokens, batch_size, seed, output, rollout,
             dtype, device, threads, specs, data_dir, overwrite, compare, plot, as_json, quiet, tools, max_turns,
             tool_timeout, tool_format, graders, lm_eval_task) -> None:
    """Evaluate MODEL (hub id, checkpoint folder, run directory, or 'default') on a benchmark suite."""
    if compare:
        if model:
            raise RewardlabError("--compare takes two results files, not a model")
        cmp = compare_results(*compare)
        click.echo(json.dumps(cmp, indent=2) if as_json else format_compare(cmp))
        if plot:
            path = plot_compare(cmp, plot)
            if not as_json:
                click.echo(f"chart: {path}")
        return
    if plot:
        raise RewardlabError("--plot goes with --compare A.json B.json")
    grader_names = parse_graders(list(graders))  # a typo fails before any model load
    if not model:
        raise RewardlabError("missing MODEL: a hub id, a checkpoint folder, a run directory, or 'default'")
    if suite is None:
        suite = "" if specs else DEFAULT_SUITE
    names = [s.strip() for s in suite.split(",") if s.strip()]
    for sp in specs:  # a --spec file's benchmark is evaluated even when --suite does not name it
        name = load_spec(sp).name
        if name not in names:
            names.append(name)
    cores = os.cpu_count() or 1
    nthreads = threads if threads is not None else (1 if cores <= 4 else None)
    if nthreads is not None and device == "cpu":
        import torch

        torch.set_num_threads(nthreads)
    out = Path(output) if output else _default_output(model)
    results = run_eval(
        model, names, out, limit=limit, n=n, k=_int_list(k), temperature=temperature, top_p=top_p,
        max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed, rollout=rollout, dtype=dtype,
        device=device, spec_files=list(specs), data_dir=data_dir, overwrite=overwrite, progress=not quiet,
        tools=tools, max_turns=max_turns, tool_timeout=tool_timeout, tool_format=tool_format,
        grader=grader_names, lm_eval_task=lm_eval_task,
    )
    if as_json:
        click.echo(json.dumps(results, indent=2, default=str))
    else:
        click.echo(format_table(results))
        click.echo(f"results: {out / RESULTS_FILE}")
