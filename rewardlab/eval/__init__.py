"""The eval runner: GSM8K, MATH-500, MATH, HumanEval and the built-in `arith` task, with reproducible, self-describing
results.

What it simplifies: one command generates ``n`` samples per problem, grades them with rewardlab's
own rewards (math: symbolic equivalence; code: the sandboxed code reward), computes pass@k with
standard errors, and writes a ``results.json`` that records everything that changes the number
(prompt template and its sha256, chat-template sha256, sampling, grader, seed, data file sha256,
model provenance, rewardlab version and git hash, date).

    rewardlab eval default --suite gsm8k,math500,humaneval --limit 50
    rewardlab eval runs/x/checkpoints/step-000200 --suite gsm8k --n 8 --temperature 0.8 --k 1,4,8
    rewardlab eval --compare before/results.json after/results.json --plot delta.png

    from rewardlab.eval import EvalConfig, run_eval
    results = run_eval(EvalConfig(suite="gsm8k", limit=50, output="evals-out"), "default")

Every setting is a field of :class:`~rewardlab.eval.config.EvalConfig` (its docstring is the option's
``--help``; ``rewardlab eval``'s options are generated from the fields).

Layout of ``out_dir``: ``results.json`` (lm-evaluation-harness shape: ``results`` / ``configs`` /
``versions`` / ``n-shot`` / ``n-samples`` / ``config`` / ``git_hash`` / ``date``) and one
``samples_<benchmark>.jsonl`` per benchmark (a header line with the configuration fingerprint,
then one line per problem: prompt, completions, extracted answers, scores, grader info).

Resume: samples are appended one batch per ``write`` + ``fsync``; a rerun with the same command
reads the file, drops a torn last line, checks the fingerprint, and generates only the problems
that are missing, so an interrupted eval never loses or duplicates a sample. Batches occupy fixed
slots of the problem list and each slot's sampling seed is ``seed + slot start``, so a resumed
sampled (temperature > 0) run draws what the uninterrupted run would have drawn on the same machine.

``--limit N`` takes the first N problems in file order (the order of the task's data file), so
subsets are the same everywhere.

Layout: :mod:`~rewardlab.eval.spec` (benchmark specs and their rows, read through ``rewardlab.tasks``),
:mod:`~rewardlab.eval.config` (``EvalConfig``), :mod:`~rewardlab.eval.runner` (``run_eval``),
:mod:`~rewardlab.eval.report` (one benchmark's metrics and details), :mod:`~rewardlab.eval.store` (results and samples
files,
resume), :mod:`~rewardlab.eval.compare` (tables, paired comparison, chart), :mod:`~rewardlab.eval.passk`
(the statistics).

Graders (``--grader``, :mod:`~rewardlab.eval.graders`): rewardlab's own grader always runs; beside it
``lm-eval-strict`` / ``lm-eval-flexible`` (lm-evaluation-harness 0.4.13's GSM8K filters + exact_match)
and ``minerva`` / ``minerva-boxed`` (its minerva_math normalisation and equivalence), reimplemented and
tested equal to lm-eval's own code. Their pass@k sits next to ours in ``results`` (``pass@1,lm-eval-strict``)
and ``details[bench]["graders"]`` (agreement, disagreements by kind); ``graders_<benchmark>.jsonl``
lists every grader's verdicts per problem and each disagreement.

Beyond pass@k: ``avg@n`` with its standard error across problems, ``maj@k`` over answer classes that
the math reward calls equivalent (exact over all k-subsets, or seeded Monte Carlo, as reported in
``details[bench]["maj"]``), the per-problem solve-rate histogram, and ``details[bench]["reasoning"]``:
the share of completions that hit the token budget and the share with an unclosed ``<think>``.

Comparison (``--compare A B``) pairs two runs on the problem ids both evaluated and reports B-A per
metric with a 95% interval (Newcombe's paired score interval for 0/1 scores, else normal), the
counts of problems that improved / regressed, and an exact sign-test p-value.
"""

from __future__ import annotations

from rewardlab.eval.answer_classes import math_answer_classes
from rewardlab.eval.compare import compare_results, format_compare, format_table, plot_compare
from rewardlab.eval.config import EvalConfig
from rewardlab.eval.graders import GRADERS, LM_EVAL_VERSION, get_grader, parse_graders
from rewardlab.eval.passk import (
    Summary,
    avg_at_n,
    benchmark_majk,
    benchmark_metrics,
    maj_at_k,
    pass_at_k,
    problem_passk,
    solve_rate_histogram,
    summarize,
)
from rewardlab.eval.runner import DEFAULT_DEADLINES, LIMIT_RULE, chat_template_sha256, git_hash, run_eval
from rewardlab.eval.spec import (
    BenchmarkSpec,
    EvalRow,
    builtin_benchmarks,
    last_boxed,
    load_records,
    load_rows,
    load_spec,
    render_prompt,
    render_user_prompt,
)
from rewardlab.eval.store import RESULTS_FILE, SAMPLES_FORMAT, SampleStore, atomic_write_json
from rewardlab.models import resolve_model_path

__all__ = [
    "BenchmarkSpec", "DEFAULT_DEADLINES", "EvalConfig", "EvalRow", "GRADERS", "LIMIT_RULE", "LM_EVAL_VERSION",
    "RESULTS_FILE", "SAMPLES_FORMAT", "SampleStore",
    "Summary", "atomic_write_json", "benchmark_metrics", "builtin_benchmarks", "chat_template_sha256",
    "compare_results", "format_compare", "format_table", "git_hash", "last_boxed", "load_records", "load_rows",
    "load_spec", "pass_at_k", "plot_compare", "problem_passk", "render_prompt", "render_user_prompt",
    "resolve_model_path", "run_eval", "summarize", "avg_at_n", "benchmark_majk", "get_grader", "maj_at_k",
    "math_answer_classes", "parse_graders", "solve_rate_histogram",
]
