"""Held-out evaluation during training: is the reward still tracking the task?

    rewardlab train --task gsm8k --eval-every 10 --eval-suite gsm8k,math500 --eval-limit 100

Every ``--eval-every`` steps (and before the first step of a fresh run, and after the last step)
the live policy answers ``--eval-limit`` problems of each benchmark's test split, greedy by default
(``--eval-temperature``, ``--eval-samples`` for sampled answers), graded by the benchmark's own
reward (``row.meta["reward"]``: the math reward for GSM8K and MATH-500), never by the training
reward with its shaping. The numbers land in ``metrics.jsonl`` as rows of their own, beside the
step's training row::

    {"step": 10, "eval/gsm8k/accuracy": 0.31, "eval/gsm8k/truncated": 0.02, ..., "time/eval": 41.0}

and ``rewardlab plot`` draws ``reward/mean`` and every ``eval/<bench>/accuracy`` on one chart
(``plots/reward_eval.png``). Each answer is kept in ``<run>/eval/samples.jsonl``.

Held-out means held out, checked at start-up and written to ``<run>/eval/heldout.json``:

* by id: an eval problem whose id is a training row's id (``--task math`` reads the MATH test
  file, so ``--eval-suite math`` shares 4500 ids with it) is dropped from the eval before the
  first ``--eval-limit`` are taken;
* by n-gram: each eval question is compared with every training question (the task's question
  text, without the prompt template's instruction, lower-cased, split into runs of letters and
  digits) for a shared ``--eval-ngram``-gram (13, the n of GPT-3's and lm-evaluation-harness's
  decontamination; a question shorter than n words is compared whole). Such problems stay in the
  eval, are named, and ``eval/<bench>/accuracy_clean`` is logged over the others.

What it simplifies: no eval spec files (``evals/*.yaml``): a benchmark here is a task name of
:mod:`rewardlab.tasks` (or a ``.jsonl`` file of rows), and its token budget is ``--eval-max-new-tokens``
(default ``--max-new-tokens``), so compare with ``rewardlab eval`` only at the same budget. The
package rule (train never imports eval) keeps pass@k estimators out: with ``--eval-samples n`` the
logged ``pass@n`` is the plain share of problems with a correct sample among all n.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewardlab import envs
from rewardlab.errors import RewardlabError
from rewardlab.logging import JsonlWriter, truncate_jsonl
from rewardlab.rewards import get_reward
from rewardlab.rollout import SamplingParams
from rewardlab.seeds import derive_seed
from rewardlab.train import distributed
from rewardlab.train.config import eval_suite_names
from rewardlab.train.state import Run

SAMPLE_LOG = "eval/samples.jsonl"
HELDOUT_REPORT = "eval/heldout.json"


# --- the held-out checks: pure functions of text ---


def words(text: str) -> list[str]:
    """``"Natalia sold 48 clips."`` -> ``["natalia", "sold", "48", "clips"]`` (lower case, letter/digit runs)."""
    return re.findall(r"[a-z0-9]+", text.lower())


def ngrams(text: str, n: int) -> set[str]:
    """The word ``n``-grams of ``text`` (joined by spaces); a text shorter than ``n`` words is one gram, itself."""
    w = words(text)
    if len(w) < n:
        return {" ".join(w)} if w else set()
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


def question_text(row: Any) -> str:
    """The problem itself, without the task's instruction: ``meta`` question / problem / code prompt, else the last user
    message."""
    meta = row.meta or {}
    for key in ("question", "problem", "code_prompt"):
        if isinstance(meta.get(key), str) and meta[key].strip():
            return meta[key]
    if isinstance(row.prompt, str):
        return row.prompt
    users = [m.get("content", "") for m in row.prompt if m.get("role") == "user"]
    return str(users[-1] if users else "")


def overlapping(train_texts: list[str], eval_items: list[tuple[str, str]], n: int) -> list[str]:
    """Ids of the ``(id, text)`` eval items that share a word ``n``-gram with any training text, in input order."""
    seen: set[str] = set()
    for t in train_texts:
        seen |= ngrams(t, n)
    return [i for i, t in eval_items if not ngrams(t, n).isdisjoint(seen)]


# --- the benchmarks of a run ---


@dataclass
class Benchmark:
    """One held-out benchmark: its rows (training ids removed, then the first ``--eval-limit``) and its grader."""

    name: str
    rows: list[Any]
    reward: Any
    reward_name: str
    dropped_ids: list[str] = field(default_factory=list)
    """Eval ids that are training ids: removed from the eval."""
    ngram_ids: list[str] = field(default_factory=list)
    """Eval ids sharing an n-gram with a training question: kept, reported, left out of ``accuracy_clean``."""


def bench_key(name: str) -> str:
    """The metric-name part of a benchmark: ``gsm8k``, ``arith:2`` -> ``arith-2``, ``data/x.jsonl`` -> ``x``."""
    if envs.is_env(name):
        return envs.short_name(name)
    return Path(name).stem if name.endswith(".jsonl") else name.replace(":", "-")


def load_benchmark(name: str, train_rows: list[Any], *, limit: int | None, n: int, seed: int) -> Benchmark:
    """The test split of ``name`` held out from ``train_rows``: by id (dropped), by ``n``-gram (reported)."""
    rows, _ = envs.load_rows(name, "test", seed=seed)
    train_ids = {r.id for r in train_rows}
    dropped = [r.id for r in rows if r.id in train_ids]
    rows = [r for r in rows if r.id not in train_ids]
    rows = rows if limit is None else rows[:limit]
    if not rows:
        raise RewardlabError(f"--eval-suite {name}: no test problem is left once the training rows' ids are removed "
                             f"({len(dropped)} shared); evaluate on another benchmark")
    reward_name = (rows[0].meta or {}).get("reward")
    if not reward_name:
        raise RewardlabError(f"--eval-suite {name}: its rows name no reward (meta['reward'])")
    ngram_ids = overlapping([question_text(r) for r in train_rows], [(r.id, question_text(r)) for r in rows], n)
    return Benchmark(bench_key(name), rows, get_reward(reward_name), reward_name, dropped, ngram_ids)


# --- one evaluation of the live policy ---


def correct(score: float | None) -> bool:
    """Graded 1.0 (the eval package's rule: a grader failure, None, is wrong)."""
    return score is not None and score >= 1.0 - 1e-9


def summarize(bench: Benchmark, records: list[dict[str, Any]], n: int) -> dict[str, float]:
    """``eval/<bench>/*`` from one eval's sample records (``id``, ``score``, ``finish_reason``, ``tokens``).

    accuracy: share of samples graded correct (avg@n); accuracy_clean: the same without the n-gram
    overlapping problems (only when there are some); pass@n (n > 1): share of problems with a
    correct sample; truncated: share that hit the token budget; response_len: mean tokens."""
    key = f"eval/{bench.name}"
    ok = [correct(r["score"]) for r in records]
    out = {f"{key}/accuracy": sum(ok) / len(ok), f"{key}/problems": float(len(bench.rows)),
           f"{key}/truncated": sum(r["finish_reason"] == "length" for r in records) / len(records),
           f"{key}/response_len": sum(r["tokens"] for r in records) / len(records)}
    if bench.ngram_ids:
        flagged = set(bench.ngram_ids)
        clean = [c for c, r in zip(ok, records) if r["id"] not in flagged]
        if clean:
            out[f"{key}/accuracy_clean"] = sum(clean) / len(clean)
    if n > 1:
        by_id: dict[str, bool] = {}
        for c, r in zip(ok, records):
            by_id[r["id"]] = by_id.get(r["id"], False) or c
        out[f"{key}/pass@{n}"] = sum(by_id.values()) / len(by_id)
    return out


def sampling_of(cfg: Any) -> SamplingParams:
    """The eval's sampling: greedy, or (``--eval-temperature > 0``) seeded with ``derive_seed("eval", --seed)``
    at every eval, so two evals differ by the policy, not by the draw."""
    tokens = cfg.eval_max_new_tokens or cfg.max_new_tokens
    if cfg.eval_temperature == 0:
        return SamplingParams(max_new_tokens=tokens, temperature=0.0)
    return SamplingParams(max_new_tokens=tokens, temperature=cfg.eval_temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                          seed=derive_seed("eval", cfg.seed))


def run_benchmark(run: Run, bench: Benchmark) -> list[dict[str, Any]]:
    """Every rank answers its share of ``bench``'s problems; all ranks get every sample record, in problem order."""
    cfg = run.cfg
    mine = distributed.shard(list(range(len(bench.rows))), run.dist, even=False)
    prompts = [run.trainer.render(bench.rows[i]) for i in mine]  # as training renders them
    kw = {"rows": [bench.rows[i] for i in mine]} if run.trainer.sampler.rows else {}  # episodes open on rows
    with run.trainer.sampler.gather():  # FSDP + HF engine: collective, so every rank enters, with prompts or not
        outs = run.trainer.engine.generate(prompts, cfg.eval_samples, sampling_of(cfg), **kw) if prompts else []
    rows = [bench.rows[mine[c.prompt_index]] for c in outs]
    results = run.grade(rows, [c.graded_text for c in outs], bench.reward, episodes=[c.episode for c in outs])
    local = [{"id": r.id, "sample": k % cfg.eval_samples, "score": res.score, "finish_reason": c.finish_reason,
              "tokens": c.model_tokens, "status": res.info.get("status"), "extracted": res.info.get("extracted"),
              "text": c.graded_text}
             for k, (c, r, res) in enumerate(zip(outs, rows, results))]
    return [rec for part in distributed.gather_objects(local) for rec in part]


# --- the stage the loop calls ---


@dataclass
class TrainEval:
    """``--eval-every``: the run's held-out benchmarks and when to evaluate (``every == 0``: never)."""

    every: int = 0
    benchmarks: list[Benchmark] = field(default_factory=list)

    def after_step(self, run: Run, step: int) -> None:
        """Evaluate after ``step`` when it is a multiple of ``--eval-every`` or the last step."""
        if self.every and (step % self.every == 0 or step == run.cfg.steps):
            self.evaluate(run, step)

    def evaluate(self, run: Run, step: int) -> dict[str, float]:
        """Run every benchmark on the live policy; rank 0 appends one ``metrics.jsonl`` row and the samples."""
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        samples: list[dict[str, Any]] = []
        for bench in self.benchmarks:
            records = run_benchmark(run, bench)
            metrics.update(summarize(bench, records, run.cfg.eval_samples))
            samples.extend({"step": step, "benchmark": bench.name, **r} for r in records)
        metrics["time/eval"] = time.perf_counter() - t0
        if run.main:
            _append(run.run_dir / "metrics.jsonl", [{"step": step, **metrics}])
            _append(run.run_dir / SAMPLE_LOG, samples)
            said = ", ".join(f"{b.name} {metrics[f'eval/{b.name}/accuracy']:.3f}" for b in self.benchmarks)
            run.log.message(f"eval step {step}: accuracy {said} ({metrics['time/eval']:.0f} s)")
        return metrics


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    writer = JsonlWriter(path)  # appends; flushed and closed at once (the metrics logger appends to the same file)
    try:
        writer.write_many(rows)
    finally:
        writer.close()


def start(run: Run) -> TrainEval:
    """Set up ``--eval-every`` after the logs are open: load and check the benchmarks, report the
    held-out checks, and on a fresh run evaluate the starting policy (step 0)."""
    cfg = run.cfg
    if not cfg.eval_every:
        return TrainEval()
    names = eval_suite_names(cfg.eval_suite)
    benches = [load_benchmark(name, run.rows, limit=cfg.eval_limit, n=cfg.eval_ngram, seed=cfg.seed) for name in names]
    how = "greedy" if cfg.eval_temperature == 0 else f"T={cfg.eval_temperature:g}, {cfg.eval_samples} per problem"
    run.say(f"  {'eval':<28}every {cfg.eval_every} steps: "
            + ", ".join(f"{b.name} ({len(b.rows)} problems)" for b in benches)
            + f", {how}, {cfg.eval_max_new_tokens or cfg.max_new_tokens} tokens, graded by "
            + ", ".join(dict.fromkeys(b.reward_name for b in benches)))
    for b in benches:
        run.say(f"  {'held out: ' + b.name:<28}{len(b.dropped_ids)} shared an id with the {len(run.rows)} training "
                "rows "
                f"(dropped); {len(b.ngram_ids)} of {len(b.rows)} share a {cfg.eval_ngram}-gram with a training question"
                + (f" (e.g. {', '.join(b.ngram_ids[:3])}; accuracy_clean leaves them out)" if b.ngram_ids else ""))
    if run.main:
        report = {"training_task": cfg.task, "training_rows": len(run.rows), "ngram": cfg.eval_ngram,
                  "benchmarks": {b.name: {"problems": len(b.rows), "reward": b.reward_name,
                                          "dropped_by_id": b.dropped_ids,
                                          "ngram_overlap": b.ngram_ids} for b in benches}}
        path = run.run_dir / HELDOUT_REPORT
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1) + "\n")
        truncate_jsonl(run.run_dir / SAMPLE_LOG, run.start_step)
    evals = TrainEval(cfg.eval_every, benches)
    if run.start_step == 0:
        evals.evaluate(run, 0)
    return evals


__all__ = ["Benchmark", "TrainEval", "load_benchmark", "ngrams", "overlapping", "question_text", "start",
           "summarize", "words"]
