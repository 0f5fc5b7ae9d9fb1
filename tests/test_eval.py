"""The eval runner end to end: specs, a tiny random model through the real CLI, oracle and
always-wrong "models" through the Python API, resume after SIGKILL, comparison and chart.

Data-dependent tests skip when no data directory is present (CI sets REWARDLAB_DATA_DIR).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from conftest import data_dir
from rewardlab import eval as evaluate
from rewardlab.errors import RewardlabError
from rewardlab.eval import EvalConfig, SampleStore, last_boxed, load_rows, load_spec, run_eval


def ev(model, suite, out, *, engine=None, tokenizer=None, progress=True, **settings):
    """The tests' shorthand: ``run_eval`` on the :class:`EvalConfig` of ``suite``, output folder ``out`` and
    ``settings`` (field names; ``progress=False`` is ``quiet``)."""
    cfg = EvalConfig(suite=suite, output=str(out), quiet=not progress, **settings)
    return run_eval(cfg, model, tokenizer=tokenizer, engine=engine)


DATA = data_dir()
needs_data = pytest.mark.skipif(DATA is None, reason="no evaluation data directory (set REWARDLAB_DATA_DIR)")


ONE_WORKER = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "REWARDLAB_REWARD_WORKERS": "1"}
"""The CLI's environment: offline, one thread, one reward worker (the default, one per core, starts a
second interpreter that preloads sympy; no test here depends on the pool's size)."""


def cli(*args: str, env_extra: dict | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **ONE_WORKER, **(env_extra or {})}
    if DATA is not None:
        env.setdefault("REWARDLAB_DATA_DIR", str(DATA))
    return subprocess.run([sys.executable, "-m", "rewardlab", "eval", *args], capture_output=True, text=True, env=env,
                          **kw)


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr


# ----------------------------------------------------------------------------- specs and parsing


@pytest.mark.parametrize("name,size,grader",
                         [("gsm8k", 1319, "math"), ("math500", 500, "math"), ("math", 5000, "math"),
                          ("humaneval", 164, "code")])
def test_builtin_specs_are_complete(name, size, grader):
    spec = load_spec(name)
    assert spec.name == name and spec.grader == grader
    assert spec.data["size"] == size and spec.data["local"] and spec.data["hub"]["path"]
    assert spec.prompt["shots"] == 0 and "{" in spec.prompt["template"]
    assert len(spec.template_sha256) == 64 and spec.sampling["temperature"] == 0.0


@needs_data
@pytest.mark.parametrize("name,size", [("gsm8k", 1319), ("math500", 500), ("math", 5000), ("humaneval", 164)])
def test_rows_and_references(name, size):
    rows, source = load_rows(load_spec(name), DATA)
    assert len(rows) == size == source["records"] and "warning" not in source
    assert len(source["sha256"]) == 64
    first = load_rows(load_spec(name), DATA, limit=3)[0]
    assert [r.id for r in first] == [r.id for r in rows[:3]]  # --limit = first N in file order


@needs_data
def test_reference_extraction_matches_the_data_readme():
    gsm = load_rows(load_spec("gsm8k"), DATA)[0]
    assert gsm[0].reference == "18"  # "#### 18"
    assert all("," not in r.reference for r in gsm)  # thousands separators stripped
    m500 = load_rows(load_spec("math500"), DATA, limit=1)[0][0]
    assert m500.reference == r"\left( 3, \frac{\pi}{2} \right)"
    math_rows = load_rows(load_spec("math"), DATA, limit=1)[0]
    assert math_rows[0].reference == "2"
    he = load_rows(load_spec("humaneval"), DATA, limit=1)[0][0]
    assert he.id == "HumanEval/0" and he.reference["entry_point"] == "has_close_elements"


@pytest.mark.parametrize(
    "text,expected",
    [
        (r"so \boxed{5}", "5"),  # plain
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # the last one wins
        (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)"),  # nested braces
        (r"\fbox{7}", "7"),  # fbox variant
        (r"\boxed{unclosed", None),  # unbalanced
        ("no box", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_user_spec_file(tmp_path):
    spec = tmp_path / "tiny.yaml"
    data = tmp_path / "data"
    (data / "t").mkdir(parents=True)
    (data / "t" / "q.jsonl").write_text("\n".join(json.dumps({"q": f"{i}+1?", "a": str(i + 1)}) for i in range(3))
                                        + "\n")
    spec.write_text(
        "name: tiny\ndata: {local: t/q.jsonl, size: 3}\nreference: {kind: field, field: a}\n"
        "prompt: {shots: 0, chat: false, template: 'Q: {q}'}\ngrader: math\n"
    )
    s = load_spec(str(spec))
    rows, _ = load_rows(s, data)
    assert [r.reference for r in rows] == ["1", "2", "3"] and rows[0].id == "tiny/0"
    assert evaluate.render_prompt(s, rows[1], tokenizer=None) == "Q: 1+1?"


def test_bad_specs_are_one_line_errors(tmp_path):
    with pytest.raises(RewardlabError, match="unknown benchmark 'nope'"):
        load_spec("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(RewardlabError, match="missing data, reference, prompt, grader"):
        load_spec(str(bad))
    with pytest.raises(RewardlabError, match="does not exist"):
        load_spec(str(tmp_path / "absent.yaml"))


# ----------------------------------------------------------------------------- samples file


def test_sample_store_drops_torn_tail_and_rejects_other_configs(tmp_path):
    path = tmp_path / "samples_x.jsonl"
    header = {"fingerprint": "abc", "config": {"n": 1}}
    store = SampleStore(path, header)
    assert store.load() == {}
    store.append([{"id": "a", "scores": [1.0]}, {"id": "b", "scores": [0.0]}])
    with open(path, "ab") as f:
        f.write(b'{"id": "c", "sco')  # killed mid-write
    done = SampleStore(path, header).load()
    assert sorted(done) == ["a", "b"]
    assert path.read_bytes().endswith(b"\n")  # the torn tail was cut before any new append
    SampleStore(path, header).append([{"id": "c", "scores": [1.0]}])
    assert sorted(SampleStore(path, header).load()) == ["a", "b", "c"]
    with pytest.raises(RewardlabError, match=r"different configuration \(differs in: n\)"):
        SampleStore(path, {"fingerprint": "zzz", "config": {"n": 4}}).load()


# ----------------------------------------------------------------------------- oracle engines


class OracleEngine:
    """A "model" that answers each prompt from a lookup table (prompt text -> completion)."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers
        self.calls = 0

    def generate(self, prompts, n, sampling):
        from rewardlab.rollout import Completion

        self.calls += 1
        return [
            Completion(prompt_index=i, prompt_ids=[], token_ids=[0, 1], text=self.answers[p], finish_reason="stop")
            for i, p in enumerate(prompts)
            for _ in range(n)
        ]


def _humaneval_records(limit: int) -> dict[str, dict]:
    with gzip.open(DATA / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f][:limit]
    return {r["task_id"]: r for r in recs}


def _oracle(bench: str, limit: int, correct: bool) -> OracleEngine:
    spec = load_spec(bench)
    rows, _ = load_rows(spec, DATA, limit=limit)
    answers = {}
    he = _humaneval_records(limit) if bench == "humaneval" else {}
    for row in rows:
        prompt = evaluate.render_prompt(spec, row, tokenizer=None)
        if bench == "humaneval":
            rec = he[row.id]
            body = rec["canonical_solution"] if correct else "    raise ValueError('wrong on purpose')\n"
            answers[prompt] = "Here is the function:\n```python\n" + rec["prompt"] + body + "```\n"
        elif correct:
            answers[prompt] = f"Let me think step by step. The final answer is $\\boxed{{{row.reference}}}$."
        else:
            answers[prompt] = "Let me think step by step. The final answer is $\\boxed{-987654321}$."
    return OracleEngine(answers)


ORACLE_LIMITS = {"gsm8k": 5, "math500": 5, "humaneval": 3}


@needs_data
@pytest.mark.parametrize("correct", [True, False], ids=["perfect", "always-wrong"])
def test_oracle_scores_100_and_always_wrong_scores_0(tmp_path, correct):
    for bench, limit in ORACLE_LIMITS.items():
        engine = _oracle(bench, limit, correct)
        res = ev("oracle", [bench], tmp_path / bench, limit=limit, engine=engine, data_dir=DATA, progress=False)
        flat = res["results"][bench]
        assert flat["pass@1,none"] == (1.0 if correct else 0.0), res["details"][bench]
        assert flat["n"] == limit
        det = res["details"][bench]
        assert det["grader_status"] == {"ok": limit} or not correct, det["grader_status"]
        if correct:
            assert det["metrics"]["pass@1"]["ci_high"] == 1.0


@needs_data
def test_pass_at_k_through_the_runner(tmp_path):
    # n=4 samples at temperature > 0 from an engine that is right on samples 0 and 2 only.
    spec = load_spec("gsm8k")
    rows, _ = load_rows(spec, DATA, limit=3)

    class Alternating:
        def generate(self, prompts, n, sampling):
            from rewardlab.rollout import Completion

            assert sampling.temperature == 0.7
            out = []
            for i, p in enumerate(prompts):
                ref = next(r.reference for r in rows if evaluate.render_prompt(spec, r, None) == p)
                for j in range(n):
                    text = f"\\boxed{{{ref}}}" if j % 2 == 0 else "\\boxed{-1}"
                    out.append(Completion(i, [], [1], text, "stop"))
            return out

    res = ev("alt", ["gsm8k"], tmp_path, limit=3, n=4, k=[1, 2, 4], temperature=0.7, engine=Alternating(),
                   data_dir=DATA, progress=False)
    flat = res["results"]["gsm8k"]
    assert flat["pass@1,none"] == pytest.approx(0.5)
    assert flat["pass@2,none"] == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert flat["pass@4,none"] == pytest.approx(1.0)
    assert flat["pass@2_stderr,none"] == pytest.approx(0.0)
    with pytest.raises(RewardlabError, match="k=8 with n=4"):
        ev("alt", ["gsm8k"], tmp_path / "b", limit=3, n=4, k=[8], temperature=0.7, engine=Alternating(),
                 data_dir=DATA)
    with pytest.raises(RewardlabError, match="identical samples"):
        ev("alt", ["gsm8k"], tmp_path / "c", limit=3, n=4, engine=Alternating(), data_dir=DATA)


@needs_data
def test_resume_generates_only_missing_problems(tmp_path):
    eng = _oracle("gsm8k", 6, True)
    ev("oracle", ["gsm8k"], tmp_path, limit=4, batch_size=2, engine=eng, data_dir=DATA, progress=False)
    assert eng.calls == 2
    res = ev("oracle", ["gsm8k"], tmp_path, limit=6, batch_size=2, engine=eng, data_dir=DATA, progress=False)
    assert eng.calls == 3  # only the last slot was generated
    lines = (tmp_path / "samples_gsm8k.jsonl").read_text().splitlines()
    ids = [json.loads(x)["id"] for x in lines[1:]]
    assert ids == [f"gsm8k/test/{i}" for i in range(6)]
    assert res["results"]["gsm8k"]["n"] == 6


@needs_data
def test_compare_and_plot(tmp_path):
    a = tmp_path / "a"
    b = tmp_path / "b"
    ev("wrong", ["gsm8k", "math500"], a, limit=4,
             engine=_merge(_oracle("gsm8k", 4, False), _oracle("math500", 4, False)), data_dir=DATA, progress=False)
    ev("right", ["gsm8k", "math500"], b, limit=4,
             engine=_merge(_oracle("gsm8k", 4, True), _oracle("math500", 4, True)), data_dir=DATA, progress=False)
    png = tmp_path / "cmp.png"
    r = cli("--compare", str(a / "results.json"), str(b / "results.json"), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "gsm8k" in r.stdout and "+100.0" in r.stdout and "+4/-0" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cmp = evaluate.compare_results(a, b)
    row = cmp["rows"][0]
    assert row["delta"] == 1.0 and row["n"] == 4 and row["p_value"] == pytest.approx(2 / 16)


@needs_data
def test_compare_sides_can_span_several_results_files(tmp_path):
    for bench in ("gsm8k", "math500"):
        ev("wrong", [bench], tmp_path / f"a_{bench}", limit=3, engine=_oracle(bench, 3, False), data_dir=DATA,
                 progress=False)
        ev("right", [bench], tmp_path / f"b_{bench}", limit=3, engine=_oracle(bench, 3, True), data_dir=DATA,
                 progress=False)
    cmp = evaluate.compare_results(f"{tmp_path / 'a_gsm8k'},{tmp_path / 'a_math500'}",
                                   f"{tmp_path / 'b_gsm8k'},{tmp_path / 'b_math500'}")
    assert [(r["benchmark"], r["delta"], r["n"]) for r in cmp["rows"]] == [("gsm8k", 1.0, 3), ("math500", 1.0, 3)]
    with pytest.raises(RewardlabError, match="appears in both"):
        evaluate.compare_results(f"{tmp_path / 'a_gsm8k'},{tmp_path / 'a_gsm8k'}", str(tmp_path / "b_gsm8k"))


def _merge(*engines: OracleEngine) -> OracleEngine:
    answers: dict[str, str] = {}
    for e in engines:
        answers.update(e.answers)
    return OracleEngine(answers)


# ----------------------------------------------------------------------------- the real CLI


def test_cli_bad_input_is_one_line(tmp_path, tiny_model_dir):
    one_line_error(cli(str(tiny_model_dir), "--suite", "gsm8k,nope"), "unknown benchmark 'nope'")
    not_model = tmp_path / "not-a-model"
    not_model.mkdir()
    (not_model / "weights.txt").write_text("hello")
    if DATA is not None:  # data loads before the model, so this check needs the data
        one_line_error(cli(str(not_model), "--suite", "gsm8k", "--data-dir", str(DATA)), "is not a model")
    one_line_error(cli(str(tiny_model_dir), "--suite", "gsm8k", "--data-dir", str(tmp_path)), "data not found")
    one_line_error(cli("--compare", str(tmp_path / "x.json"), str(tmp_path / "y.json")), "no results file")


@needs_data
def test_cli_tiny_model_every_benchmark(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    r = cli(str(tiny_model_dir), "--suite", "gsm8k,math500,math,humaneval", "--limit", "2", "--max-new-tokens", "12",
            "--batch-size", "2", "--output", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "results.json").read_text())
    for bench in ("gsm8k", "math500", "math", "humaneval"):
        assert bench in r.stdout
        flat = res["results"][bench]
        assert flat["n"] == 2 and 0.0 <= flat["pass@1,none"] <= 1.0 and "pass@1_stderr,none" in flat
        conf = res["configs"][bench]
        assert len(conf["prompt_template_sha256"]) == 64 and len(conf["chat_template_sha256"]) == 64
        assert conf["sampling"]["max_new_tokens"] == 12 and conf["grader"] in ("math", "code")
        assert conf["data"]["source"] == "local" and len(conf["data"]["sha256"]) == 64
        lines = (out / f"samples_{bench}.jsonl").read_text().splitlines()
        assert "header" in json.loads(lines[0]) and len(lines) == 3
        rec = json.loads(lines[1])
        assert {"prompt", "completions", "extracted", "scores", "status", "info"} <= set(rec)
        assert "<|im_start|>assistant" in rec["prompt"]  # the chat template was applied
    for key in ("versions", "n-shot", "higher_is_better"):  # lm-evaluation-harness top-level sections
        assert set(res[key]) == {"gsm8k", "math500", "math", "humaneval"}
    assert res["n-samples"]["math500"] == {"original": 500, "effective": 2}
    cfg = res["config"]
    assert cfg["model"] == str(Path(tiny_model_dir).resolve()) and cfg["seed"] == 0 and cfg["limit"] == 2
    assert res["rewardlab_version"] and res["date"] and "git_hash" in res


@needs_data
def test_cli_kill_and_resume(tmp_path, tiny_model_dir):
    args = [str(tiny_model_dir), "--suite", "gsm8k", "--limit", "8", "--batch-size", "1", "--max-new-tokens", "32",
            "--quiet"]
    killed = tmp_path / "killed"
    samples = killed / "samples_gsm8k.jsonl"
    env = {**os.environ, **ONE_WORKER, "REWARDLAB_DATA_DIR": str(DATA)}
    proc = subprocess.Popen([sys.executable, "-m", "rewardlab", "eval", *args, "--output", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if samples.exists() and samples.read_bytes().count(b"\n") >= 3:  # header + 2 problems
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the eval finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = samples.read_bytes().count(b"\n") - 1
    assert 2 <= partial < 8
    r = cli(*args, "--output", str(killed))
    assert r.returncode == 0, r.stderr
    full = tmp_path / "full"
    r2 = cli(*args, "--output", str(full))
    assert r2.returncode == 0, r2.stderr

    def recs(d):
        lines = (d / "samples_gsm8k.jsonl").read_text().splitlines()[1:]
        return [json.loads(x) for x in lines]

    resumed, straight = recs(killed), recs(full)
    assert sorted(r["id"] for r in resumed) == sorted(f"gsm8k/test/{i}" for i in range(8))  # none lost, none twice
    by_id = {r["id"]: r for r in straight}
    for rec in resumed:
        assert rec["completions"] == by_id[rec["id"]]["completions"]
        assert rec["scores"] == by_id[rec["id"]]["scores"]
    ra = json.loads((killed / "results.json").read_text())
    rb = json.loads((full / "results.json").read_text())
    assert ra["results"] == rb["results"] and ra["details"] == rb["details"]


def test_run_directory_resolves_to_latest_checkpoint(tmp_path):
    run = tmp_path / "run"
    for step in ("step-000005", "step-000010"):
        (run / "checkpoints" / step).mkdir(parents=True)
        (run / "checkpoints" / step / "config.json").write_text("{}")
    (run / "checkpoints" / "step-000020").mkdir()  # a half-written save without config.json is skipped
    assert evaluate.resolve_model_path(str(run)) == str(run / "checkpoints" / "step-000010")
    assert evaluate.resolve_model_path("org/model") == "org/model"  # hub ids pass through
    with pytest.raises(RewardlabError, match="not a model"):
        evaluate.resolve_model_path(str(tmp_path / "run" / "checkpoints"))


# ----------------------------------------------------------------------------- built-in task source (arith)


def test_cli_arith_suite_uses_the_training_task_and_sampling(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    from rewardlab.rollout import format_prompt
    from rewardlab.tasks import load_task

    out = tmp_path / "out"
    r = cli(str(tiny_model_dir), "--suite", "arith", "--limit", "3", "--output", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["results"]["arith"]["n"] == 3 and res["n-samples"]["arith"] == {"original": 512, "effective": 3}
    conf = res["configs"]["arith"]
    assert conf["sampling"] == {"n": 4, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 32}
    assert conf["data"]["source"] == "task" and conf["data"]["task"] == "arith" and len(conf["data"]["sha256"]) == 64
    rows = load_task("arith", "test", limit=3)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    recs = [json.loads(line) for line in (out / "samples_arith.jsonl").read_text().split("\n")[1:-1]]
    assert [x["id"] for x in recs] == [row.id for row in rows]
    assert [x["reference"] for x in recs] == [row.reference for row in rows]
    assert [x["prompt"] for x in recs] == [format_prompt(tok, row.prompt) for row in rows]  # the training prompt
    assert all(len(x["completions"]) == 4 for x in recs)


def test_task_source_cannot_be_mixed_with_files(tmp_path):
    spec = tmp_path / "mixed.yaml"
    spec.write_text("name: m\ndata: {task: {name: arith}, local: a.jsonl}\nreference: {kind: field, field: reference}\n"
                    "prompt: {template: '{user}'}\ngrader: math\n")
    with pytest.raises(RewardlabError, match="data.task cannot be combined"):
        load_spec(str(spec))
    spec.write_text("name: m\ndata: {task: arith}\nreference: {kind: field, field: reference}\n"
                    "prompt: {template: '{user}'}\ngrader: math\n")
    with pytest.raises(RewardlabError, match="data.task must be a mapping"):
        load_spec(str(spec))


def test_sample_store_keeps_records_with_unicode_line_separators(tmp_path):
    # json.dumps(ensure_ascii=False) leaves U+2028 / U+0085 raw; a random model emits them
    store = SampleStore(tmp_path / "s.jsonl", {"fingerprint": "f", "config": {}})
    assert store.load() == {}
    store.append([{"id": "a", "completions": ["x\u2028y\x85z"]}, {"id": "b", "completions": ["ok"]}])
    done = SampleStore(tmp_path / "s.jsonl", {"fingerprint": "f", "config": {}}).load()
    assert sorted(done) == ["a", "b"] and done["a"]["completions"] == ["x\u2028y\x85z"]


@needs_data
@pytest.mark.parametrize("bench,task", [("gsm8k", "gsm8k"), ("math500", "math500"), ("math", "math"),
                                        ("humaneval", "humaneval")])
def test_eval_reads_the_training_rows(bench, task):
    """One data path: a benchmark's problems, gold answers and user prompts are the task's test rows."""
    from rewardlab.tasks import load_task

    spec = load_spec(bench)
    rows, _ = load_rows(spec, DATA, limit=20)
    task_rows = load_task(task, "test", data_dir=DATA, limit=20)
    assert [r.id for r in rows] == [t.id for t in task_rows]
    assert [r.reference for r in rows] == [t.reference for t in task_rows]
    assert [evaluate.render_user_prompt(spec, r) for r in rows] == [t.prompt[0]["content"] for t in task_rows]


# ----------------------------------------------------------------------------- graders, maj@k, avg@n (issue 24)


class Scripted:
    """n samples per problem from a list of templates (``{ref}`` is the problem's gold)."""

    def __init__(self, spec, rows, templates, finish=None):
        self.spec, self.rows, self.templates, self.finish = spec, rows, templates, finish or {}
        self.calls = 0

    def generate(self, prompts, n, sampling):
        from rewardlab.rollout import Completion

        self.calls += 1
        out = []
        for i, p in enumerate(prompts):
            ref = next(r.reference for r in self.rows if evaluate.render_prompt(self.spec, r, None) == p)
            for j in range(n):
                out.append(Completion(i, [], [1, 2], self.templates[j % len(self.templates)].format(ref=ref),
                                      self.finish.get(j, "stop")))
        return out


GSM_TEMPLATES = [
    "so \\boxed{{{ref}}}\n#### {ref}",  # every grader pays
    "The answer is {ref}.0",  # ours pays; strict finds no "####"; flexible reads "{ref}.0" != "{ref}"
    "<think>let me see \\boxed{{-1}}",  # nobody pays; unclosed think; budget hit (below)
    "{ref}",  # ours pays; flexible pays; strict: no "####"
]


@needs_data
def test_graders_side_by_side_with_disagreements(tmp_path):
    spec = load_spec("gsm8k")
    rows, _ = load_rows(spec, DATA, limit=3)
    eng = Scripted(spec, rows, GSM_TEMPLATES, finish={2: "length"})
    res = ev("scripted", ["gsm8k"], tmp_path, limit=3, n=4, k=[1, 2], temperature=0.7, engine=eng, data_dir=DATA,
                   progress=False, grader=["lm-eval-strict,lm-eval-flexible", "minerva-boxed"])
    flat, det = res["results"]["gsm8k"], res["details"]["gsm8k"]
    assert flat["pass@1,none"] == pytest.approx(0.75)  # ours: samples 0, 1, 3
    assert flat["pass@1,lm-eval-strict"] == pytest.approx(0.25)  # sample 0 only
    assert flat["pass@1,lm-eval-flexible"] == pytest.approx(0.5)  # samples 0 and 3
    assert flat["pass@1,minerva-boxed"] == pytest.approx(0.25)  # sample 0 (sample 2's box is wrong)
    assert flat["pass@2,lm-eval-flexible"] == pytest.approx(1 - 1 / 6)
    g = det["graders"]["lm-eval-strict"]
    assert g["disagreements"] == 6 and g["agreement_with_rewardlab"] == pytest.approx(0.5)
    assert g["disagreements_by_kind"] == {"rewardlab_only:no_answer_extracted": 6}
    assert det["graders"]["lm-eval-flexible"]["disagreements_by_kind"] == {"rewardlab_only:same_value_other_format": 3}
    assert g["grader"]["reference"] == "lm-evaluation-harness 0.4.13"
    # reasoning outputs: sample 2 of each problem hit the budget and left <think> open
    assert flat["hit_token_budget_share"] == pytest.approx(0.25) and flat["unclosed_think_share"] == pytest.approx(0.25)
    assert det["reasoning"]["unclosed_think"] == 3 and det["reasoning"]["thinking"] == 3
    # avg@4 = mean per-problem correctness; maj@4: {ref, ref.0, ref} one class (3 votes) -> right
    assert flat["avg@4,none"] == pytest.approx(0.75) and flat["avg@4_stderr,none"] == pytest.approx(0.0)
    assert flat["maj@4,none"] == 1.0
    # maj@2 by hand: pairs (01)(03)(13) right; (02)(12)(23): tie -> first vote (0, 1 or 3? the earlier) -> right
    # except (23)? samples 2 (-1) votes first -> wrong: 5/6
    assert flat["maj@2,none"] == pytest.approx(5 / 6)
    assert det["maj"]["how"]["maj@2"]["method"] == "exact"
    assert det["solve_rate_histogram"] == {"0/4": 0, "1/4": 0, "2/4": 0, "3/4": 3, "4/4": 0}
    assert res["configs"]["gsm8k"]["graders"] == ["rewardlab", "lm-eval-strict", "lm-eval-flexible", "minerva-boxed"]
    side = det["side_by_side"]
    assert list(side) == ["rewardlab", "lm-eval-strict", "lm-eval-flexible", "minerva-boxed"]
    assert (side["rewardlab"]["pass@1"] == pytest.approx(0.75)
            and side["lm-eval-strict"]["pass@1"] == pytest.approx(0.25))
    # the sample store: one line per problem with every grader's verdicts and the disagreements
    lines = [json.loads(x) for x in (tmp_path / res["grader_samples"]["gsm8k"]).read_text().splitlines()]
    assert lines[0]["header"]["graders"][0] == "rewardlab" and len(lines) == 4
    first = lines[1]
    assert first["scores"]["lm-eval-strict"] == [1.0, 0.0, 0.0, 0.0]
    assert first["extracted"]["lm-eval-strict"][1] == "[invalid]"
    assert {(d["sample"], d["grader"]) for d in first["disagreements"]} == {
        (1, "lm-eval-strict"), (3, "lm-eval-strict"), (1, "lm-eval-flexible"), (1, "minerva-boxed"),
        (3, "minerva-boxed")}
    table = evaluate.format_table(res)
    for needle in ("lm-eval-strict", "maj@4", "avg@4", "hit the token budget", "unclosed <think>",
                   "disagrees with rewardlab"):
        assert needle in table, table
    # adding a grader later grades the stored samples: nothing is generated again
    res2 = ev("scripted", ["gsm8k"], tmp_path, limit=3, n=4, k=[1, 2], temperature=0.7, engine=eng, data_dir=DATA,
                    progress=False, grader="minerva")
    assert eng.calls == 1 and "pass@1,minerva" in res2["results"]["gsm8k"]
    assert "pass@1,lm-eval-strict" not in res2["results"]["gsm8k"]


@needs_data
def test_maj_at_k_counts_equivalent_answers_as_one_vote(tmp_path):
    spec = load_spec("gsm8k")
    rows, _ = load_rows(spec, DATA, limit=2)
    # 18, 18.0 and 36/2 are one answer (3 votes) against -1 twice; a string vote would pick -1
    templates = ["\\boxed{{-1}}", "\\boxed{{{ref}}}", "\\boxed{{-1}}", "\\boxed{{{ref}.0}}",
                 "\\boxed{{\\frac{{{ref}0}}{{10}}}}"]
    res = ev("votes", ["gsm8k"], tmp_path, limit=2, n=5, k=[1], temperature=0.7,
                   engine=Scripted(spec, rows, templates),
                   data_dir=DATA, progress=False)
    flat = res["results"]["gsm8k"]
    assert flat["pass@1,none"] == pytest.approx(0.6)
    assert flat["maj@5,none"] == 1.0
    assert res["details"]["gsm8k"]["maj"]["mixed_classes"] == 0
    assert "grader_samples" in res and res["grader_samples"] == {}


@needs_data
def test_reference_graders_do_not_apply_to_code(tmp_path):
    engine = _oracle("humaneval", 2, True)
    res = ev("oracle", ["humaneval"], tmp_path, limit=2, engine=engine, data_dir=DATA, progress=False,
                   grader="lm-eval-strict")
    g = res["details"]["humaneval"]["graders"]["lm-eval-strict"]
    assert g["applicable"] is False and "code" in g["why"]
    assert res["results"]["humaneval"]["pass@1,none"] == 1.0


def test_unknown_grader_is_one_line(tmp_path):
    one_line_error(cli("default", "--suite", "gsm8k", "--grader", "lm-eval-strict,nope", "--output", str(tmp_path)),
                   "unknown --grader 'nope'")
    with pytest.raises(RewardlabError, match="unknown --grader"):
        ev("x", ["gsm8k"], tmp_path, engine=OracleEngine({}), grader=["bogus"], progress=False)


@needs_data
def test_compare_reports_avg_maj_and_reference_graders(tmp_path):
    spec = load_spec("gsm8k")
    rows, _ = load_rows(spec, DATA, limit=3)
    wrong = ["\\boxed{{-1}}", "\\boxed{{-2}}", "\\boxed{{-1}}", "#### {ref}"]  # right once in 4 (by every grader)
    kw = dict(limit=3, n=4, k=[1, 2], temperature=0.7, data_dir=DATA, progress=False, grader="lm-eval-strict")
    ev("a", ["gsm8k"], tmp_path / "a", engine=Scripted(spec, rows, wrong), **kw)
    ev("b", ["gsm8k"], tmp_path / "b", engine=Scripted(spec, rows, GSM_TEMPLATES), **kw)
    cmp = evaluate.compare_results(tmp_path / "a", tmp_path / "b")
    got = {(r["grader"], r["metric"]): r for r in cmp["rows"]}
    assert set(got) == {("rewardlab", "pass@1"), ("rewardlab", "pass@2"), ("rewardlab", "avg@4"),
                        ("rewardlab", "maj@2"),
                        ("rewardlab", "maj@4"), ("lm-eval-strict", "pass@1"), ("lm-eval-strict", "pass@2")}
    assert (got[("rewardlab", "avg@4")]["a"] == pytest.approx(0.25)
            and got[("rewardlab", "avg@4")]["b"] == pytest.approx(0.75))
    # A: -1 twice, -2 once, ref once: maj@4 votes -1 -> 0; B: 1.0 (see test_graders_side_by_side_with_disagreements)
    assert got[("rewardlab", "maj@4")]["a"] == 0.0 and got[("rewardlab", "maj@4")]["delta"] == 1.0
    assert got[("rewardlab", "maj@2")]["how"] == "A exact, B exact"
    assert got[("lm-eval-strict", "pass@1")]["a"] == pytest.approx(0.25)
    assert got[("lm-eval-strict", "pass@1")]["b"] == pytest.approx(0.25)
    text = evaluate.format_compare(cmp)
    assert "lm-eval-strict" in text and "maj@4" in text and "avg@4" in text
    evaluate.plot_compare(cmp, tmp_path / "c.png")


def test_disagreement_kinds():
    from rewardlab.eval.report import disagreement_kind as kind

    assert kind(True, False, "18", "[invalid]", "18") == "rewardlab_only:no_answer_extracted"
    assert kind(True, False, "18", "$18.", "18") == "rewardlab_only:same_value_other_format"
    assert kind(True, False, "18", "17", "18") == "rewardlab_only:other_answer"
    assert kind(False, True, None, "18", "18", "number_spam") == "grader_only:rewardlab_number_spam"
    assert kind(False, True, "19", "18", "18", "ok") == "grader_only:rewardlab_other_answer"


@needs_data
def test_run_eval_takes_its_settings_in_one_config(tmp_path):
    cfg = EvalConfig(suite="gsm8k", output=str(tmp_path), limit=3, batch_size=2, data_dir=DATA, quiet=True,
                     grader=("lm-eval-flexible",))
    res = run_eval(cfg, "oracle", engine=_oracle("gsm8k", 3, True))
    assert res["results"]["gsm8k"]["pass@1,none"] == 1.0 and "pass@1,lm-eval-flexible" in res["results"]["gsm8k"]
    with pytest.raises(TypeError):  # one call shape: the settings go in cfg
        run_eval(cfg, "oracle", limit=2)


def test_an_eval_runs_every_test_of_a_code_problem(monkeypatch):
    """Training stops a code problem at its first failing test; an eval passes early_exit=False (issue 27)."""
    from rewardlab.eval import runner
    from rewardlab.rewards.base import RewardResult

    seen = []

    def fake_score_batch(reward, texts, refs, metas, deadline):
        seen.extend(metas)
        return [RewardResult(0.0, {"status": "ok"}) for _ in texts]

    monkeypatch.setattr(runner, "score_batch", fake_score_batch)
    spec = types.SimpleNamespace(grader="code", deadline_s=10.0)
    rows = [types.SimpleNamespace(id="p1", reference={"tests": "assert f() == 1", "entry_point": "f"})]
    runner.grade_texts(spec, rows, ["def f():\n    return 1\n"], 1)
    assert seen == [{"id": "p1", "early_exit": False}]
    seen.clear()
    runner.grade_texts(types.SimpleNamespace(grader="math", deadline_s=10.0),
                       [types.SimpleNamespace(id="m", reference="1")], ["1"], 1)
    assert seen == [{"id": "m"}]
