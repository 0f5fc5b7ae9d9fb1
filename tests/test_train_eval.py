"""``rewardlab train --eval-every``: held-out evaluation on the live policy during training (issue 24).

The held-out checks (by id, by word n-gram) and the metric summary are pure functions tested on
hand-made rows; the CLI runs use the tiny random model on arith (it never answers arithmetic, so
its accuracy is 0: these runs check where the numbers go, that the eval leaves the training
trajectory unchanged, resumes and plots, not how good the model is).
"""

from __future__ import annotations

import pytest

from rewardlab.errors import RewardlabError
from rewardlab.tasks import Row, load_task
from rewardlab.train.config import build_config, eval_suite_names
from rewardlab.train.evaluation import Benchmark, load_benchmark, ngrams, overlapping, question_text, summarize, words
from test_train import base_args, read_jsonl, run_cli

QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")


def row(id: str, question: str, **meta) -> Row:
    return Row(id=id, prompt=[{"role": "user", "content": question + "\nPlease reason step by step."}], reference="1",
               meta={"reward": "math", "question": question, **meta})


# --- n-grams and the overlap check ---


def test_words_are_lower_case_letter_and_digit_runs():
    assert words("Natalia sold 48 clips, in April!") == ["natalia", "sold", "48", "clips", "in", "april"]
    assert words("  ") == []


@pytest.mark.parametrize("text, n, expected", [
    ("a b c d", 2, {"a b", "b c", "c d"}),
    ("a b c d", 4, {"a b c d"}),
    ("a b", 3, {"a b"}),             # shorter than n: the whole text is its one gram
    ("", 3, set()),
    ("A, b. C", 2, {"a b", "b c"}),  # case and punctuation do not matter
])
def test_ngrams(text, n, expected):
    assert ngrams(text, n) == expected


def test_overlap_finds_a_shared_13_gram_and_not_a_shared_shorter_phrase():
    train = [QUESTION, "What is 2 + 3?"]
    reworded = QUESTION.replace("How many clips", "What number of clips")  # 13-grams of the first sentence survive
    other = "Natalia sold clips to her friends. How many friends did she have in April and May altogether?"
    assert overlapping(train, [("a", reworded), ("b", other), ("c", "what is 2 + 3"), ("d", "What is 2 + 4?")],
                       13) == ["a", "c"]
    assert overlapping(train, [("a", reworded)], 40) == []  # longer than any run they share


def test_question_text_leaves_the_template_out():
    r = row("x", "How many?")
    assert question_text(r) == "How many?"
    plain = Row(id="y", prompt=[{"role": "system", "content": "s"}, {"role": "user", "content": "What is 1?"}],
                reference="1", meta={})
    assert question_text(plain) == "What is 1?"
    # the shared instruction line is no overlap: two different questions under one template
    assert overlapping([question_text(row("t",
                                          "Tom has 3 apples and buys 4 more at the shop on Monday, how many now?"))],
                       [("e", question_text(row("e",
                                                "A train leaves at noon and travels 60 miles an hour for two "
                                                "hours.")))],
                       5) == []


def test_load_benchmark_drops_training_ids_and_reports_ngram_overlap():
    test_rows = load_task("arith", "test", seed=0)
    copied = Row(id="arith/train/copied", prompt=test_rows[1].prompt, reference="0",
                 meta={"reward": "math", "question": test_rows[1].meta["question"]})
    train_rows = [test_rows[0], copied]  # one shares an id, one the text under another id
    bench = load_benchmark("arith", train_rows, limit=3, n=13, seed=0)
    assert bench.dropped_ids == [test_rows[0].id]
    assert [r.id for r in bench.rows] == [r.id for r in test_rows[1:4]]  # the first 3 once the shared id is out
    assert test_rows[1].id in bench.ngram_ids and bench.reward_name == "math"


def test_load_benchmark_refuses_an_eval_set_that_is_all_training():
    rows = load_task("arith", "test", seed=0)
    with pytest.raises(RewardlabError, match="no test problem is left"):
        load_benchmark("arith", rows, limit=None, n=13, seed=0)


# --- the logged numbers ---


def test_summarize_hand_worked():
    bench = Benchmark("gsm8k", rows=[row("p1", "q1"), row("p2", "q2")], reward=None, reward_name="math",
                      ngram_ids=["p2"])
    records = [  # two problems x two samples
        {"id": "p1", "score": 1.0, "finish_reason": "stop", "tokens": 10},
        {"id": "p1", "score": 0.0, "finish_reason": "length", "tokens": 32},
        {"id": "p2", "score": None, "finish_reason": "stop", "tokens": 6},  # a grader failure is wrong
        {"id": "p2", "score": 0.0, "finish_reason": "stop", "tokens": 8},
    ]
    m = summarize(bench, records, n=2)
    assert m == {"eval/gsm8k/accuracy": 0.25, "eval/gsm8k/accuracy_clean": 0.5, "eval/gsm8k/pass@2": 0.5,
                 "eval/gsm8k/truncated": 0.25, "eval/gsm8k/response_len": 14.0, "eval/gsm8k/problems": 2.0}
    bench.ngram_ids = []
    assert "eval/gsm8k/accuracy_clean" not in summarize(bench, records[:1], n=1)
    assert "eval/gsm8k/pass@1" not in summarize(bench, records[:1], n=1)


def test_plot_finds_every_benchmark_with_an_accuracy():
    from rewardlab.plots import eval_benchmarks

    rows = [{"step": 0, "eval/gsm8k/accuracy": 0.1, "eval/gsm8k/truncated": 0.0}, {"step": 1, "reward/mean": 0.5},
            {"step": 2, "eval/gsm8k/accuracy": 0.2, "eval/math500/accuracy": 0.0, "eval/math500/accuracy_clean": 0.0}]
    assert eval_benchmarks(rows) == ["gsm8k", "math500"]
    assert eval_benchmarks(rows[1:2]) == []


# --- settings ---


@pytest.mark.parametrize("over, message", [
    ({"eval_every": "2"}, "needs --eval-suite"),
    ({"eval_every": "2", "eval_suite": "gsm8k,nope"}, "unknown benchmark 'nope'"),
    ({"eval_every": "2", "eval_suite": "arith", "eval_samples": "4"}, "needs --eval-temperature"),
    ({"eval_every": "-1", "eval_suite": "arith"}, "--eval-every must be >= 0"),
    ({"eval_every": "2", "eval_suite": "arith", "feedback": "ref"}, "not wired with --feedback"),
])
def test_bad_eval_settings_are_refused(over, message):
    with pytest.raises(RewardlabError, match=message):
        build_config(None, over)


def test_suite_names():
    assert eval_suite_names(" gsm8k, math500 ,gsm8k,") == ["gsm8k", "math500"]
    assert eval_suite_names("arith:2,mine.jsonl") == ["arith:2", "mine.jsonl"]
    # a comma inside an environment's options stays there; the next benchmark still starts after it
    assert eval_suite_names("reasoning_gym:chain_sum?size=5&list=[1, 2],gsm8k, reasoning_gym:spell_backward") == [
        "reasoning_gym:chain_sum?size=5&list=[1, 2]", "gsm8k", "reasoning_gym:spell_backward"]
    assert eval_suite_names("reasoning_gym:x?a=1, ,arith:1,") == ["reasoning_gym:x?a=1", "arith:1"]  # blanks dropped
    from rewardlab.eval import EvalConfig  # rewardlab eval --suite: the same rule

    assert EvalConfig(suite="reasoning_gym:x?l=[1, 2],gsm8k").suite_names() == ["reasoning_gym:x?l=[1, 2]", "gsm8k"]


# --- through the CLI ---

TRAIN_ONLY = ("time/", "tokens/s", "memory/", "eval/")  # wall-clock and memory readings differ between any two runs


def train_rows(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith(TRAIN_ONLY)} for m in metrics if "reward/mean" in m]


def test_eval_every_logs_held_out_accuracy_and_plots_it(tiny_model_dir, tmp_path):
    out = tmp_path / "eval"
    proc = run_cli(base_args(tiny_model_dir, out, steps=3, plots="true", eval_every=2, eval_suite="arith",
                             eval_limit=4, eval_max_new_tokens=6))
    assert "held out: arith" in proc.stdout and "0 of 4 share a 13-gram" in proc.stdout
    metrics = read_jsonl(out / "metrics.jsonl")
    evals = [m for m in metrics if "eval/arith/accuracy" in m]
    assert [m["step"] for m in evals] == [0, 2, 3]  # the start, every 2 steps, the last step
    for m in evals:
        assert m["eval/arith/problems"] == 4 and 0.0 <= m["eval/arith/accuracy"] <= 1.0
        assert 0 < m["eval/arith/response_len"] <= 6 and m["time/eval"] > 0
        assert "reward/mean" not in m  # its own row, beside the step's training row
    assert [m["step"] for m in metrics if "reward/mean" in m] == [1, 2, 3]
    samples = read_jsonl(out / "eval" / "samples.jsonl")
    assert len(samples) == 3 * 4 and {s["step"] for s in samples} == {0, 2, 3}
    assert {"id", "score", "text", "finish_reason", "status"} <= set(samples[0])
    heldout = (out / "eval" / "heldout.json").read_text()
    assert '"dropped_by_id": []' in heldout and '"ngram_overlap": []' in heldout
    plot = out / "plots" / "reward_eval.png"
    assert plot.stat().st_size > 1000
    plot.unlink()
    assert str(plot) in run_cli(["plot", str(out)]).stdout  # on demand, through the CLI

    # the eval leaves the training trajectory as it was: the same run without it logs the same training rows
    plain = tmp_path / "plain"
    run_cli(base_args(tiny_model_dir, plain, steps=3))
    assert train_rows(read_jsonl(plain / "metrics.jsonl")) == train_rows(metrics)


def test_eval_every_resumes_without_repeating_the_start(tiny_model_dir, tmp_path):
    out = tmp_path / "resume"
    args = dict(eval_every=1, eval_suite="arith", eval_limit=2, eval_max_new_tokens=4, save_every=1)
    run_cli(base_args(tiny_model_dir, out, steps=1, **args))
    run_cli(base_args(tiny_model_dir, out, steps=2, **args))
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics if "eval/arith/accuracy" in m] == [0, 1, 2]
    assert [s["step"] for s in read_jsonl(out / "eval" / "samples.jsonl")] == [0, 0, 1, 1, 2, 2]
