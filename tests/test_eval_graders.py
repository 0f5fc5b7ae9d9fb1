"""The reference graders of ``rewardlab eval --grader`` equal lm-evaluation-harness 0.4.13's own code.

For every completion of a corpus (hand-written edge cases, generated ones, and the 900 real
completions of ``tests/data/real_completions.jsonl``) our ``lm-eval-strict`` / ``lm-eval-flexible``
verdict and extracted answer must equal what lm-eval's own ``postprocess_generated_text`` (stop
strings), ``RegexFilter`` + ``TakeFirstFilter`` (built from its installed task yaml by
``get_filter``) and ``exact_match_hf_evaluate`` (with the yaml's kwargs, against its
``doc_to_target`` rendered by ``lm_eval.utils.apply_template``) give, for each GSM8K task variant.
The minerva functions are compared with lm-eval's ``minerva_math/utils.py``, imported with its
antlr4 4.11 version assertion satisfied (this venv has 4.13 for math-verify; sympy's generated
ANTLR parser runs on it).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import random
from pathlib import Path

import pytest
import yaml

from rewardlab.eval import graders as G

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval (dev extra) is not installed")

HERE = Path(__file__).parent
LM_EVAL_DIR = Path(lm_eval.__file__).parent


def test_lm_eval_is_the_version_we_reproduce():
    assert md.version("lm_eval") == G.LM_EVAL_VERSION


# ----------------------------------------------------------------------------- the corpus

HAND = [
    "", " ", "#### 72", "####72", "#### -3", "#### 1,234", "#### 1,234.", "#### $5", "#### 5.50", "#### .5",
    "The answer is 42.", "The answer is 42", "The answer is -7.", "The answer is 3,000.", "The answer is $3.",
    "The answer is 12.\nQ: next", "Q: The answer is 9.", "The final answer is 18", "The final answer is $18",
    "The final answer is 1,000,000.", "The final answer is -0.5", "So 3 + 4 = 7.\n#### 7\nQuestion: 2+2?\n#### 4",
    "Answer: 10 apples, 20 pears, 30 total", "It costs $1,200.50 in total.", "Total: 1,2,3", "3.", "-5", "-",
    "--5", "5-", "$", "$$", "..", ",,", "1.2.3", "0.000", "007", "1e5", "1/2", "\\boxed{12}", "\\boxed{-3}",
    "so $\\boxed{1,000}$.", "The answer is \\boxed{8}.", "#### 12 </s> #### 13", "#### 12<|im_end|>#### 13",
    "<|eot_id|>The final answer is 3", "The final answer is 3<|eot_id|>The final answer is 4",
    "Question: #### 1", "#### 1 Question:", "ANSWER IS 5. The Answer Is 5.", "#### 5\n\n#### 6", "#### 5 #### 6",
    "İ #### 5", "#### ٣", "#### ５", "the answer is 5.", "The answer is 5.5.5.", "The answer is 5,",
    "The answer is ,5.",
    "The answer is 5 dollars.", "The answer is: 5.", "\n\n#### \n72", "#### 72\x00", "18 - 12 = 6\n6 * 2 = 12",
    "He pays 3 * $4 = $12. Then 12 + 5 = 17. 17", "Total = 24.00", "<think>maybe 4</think> The answer is 5.",
    "<think>#### 4", "Step 1: 2,5 and 3.75 -> 6.25$", "$-4", "-$4", "$-.5", "1,,2", "12,", "12.", "12.0", "12.00",
]
GOLD_SOLUTIONS = [
    "She eats 3 for breakfast <<16-3-4=9>>9.\n#### 18", "#### 72", "Total <<1000+234=1234>>1234\n#### 1,234",
    "#### -3", "#### 5", "#### 12", "#### 7", "#### 0", "#### 1000000", "#### 17", "#### 42", "#### 3000",
]
BARE_GOLDS = ["18", "72", "1234", "-3", "5", "12", "7", "0", "42", "6", "24", "3"]


def _generated(n: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)

    def num() -> str:
        x = rnd.choice([rnd.randint(-50, 50), rnd.randint(0, 10**7), rnd.random() * 1000, rnd.randint(0, 99)])
        s = f"{x:,}" if isinstance(x, int) and rnd.random() < 0.3 else (f"{x:.2f}" if isinstance(x, float) else str(x))
        if rnd.random() < 0.2:
            s = "$" + s
        if rnd.random() < 0.1:
            s = s + "."
        return s

    frames = ["#### {}", "The answer is {}.", "The answer is {}", "The final answer is {}", "so the total is {}",
              "{} + {} = {}", "\\boxed{{{}}}", "Question: {}", "{}</s>{}", "{} <|im_end|> {}", "Q: {}", "{}\n\n{}",
              "answer: {}, not {}", "We get {}. Then {}.", "{}%", "{} dollars"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(1, 4)):
            f = rnd.choice(frames)
            parts.append(f.format(*(num() for _ in range(f.count("{}")))))
        out.append(rnd.choice([" ", "\n", ". ", ""]).join(parts))
    return out


def _real() -> list[str]:
    path = HERE / "data" / "real_completions.jsonl"
    return [json.loads(line)["completion"] for line in path.read_text().splitlines() if line.strip()]


CORPUS = HAND + _generated(400) + _real()


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 1000
    assert len(set(CORPUS)) >= 900


# ----------------------------------------------------------------------------- GSM8K filters

TASK_FILES = {
    "gsm8k": "gsm8k.yaml", "gsm8k_cot": "gsm8k-cot.yaml", "gsm8k_cot_zeroshot": "gsm8k-cot-zeroshot.yaml",
    "gsm8k_cot_llama": "gsm8k-cot-llama.yaml",
}


def _task_yaml(task: str) -> dict:
    return yaml.safe_load((LM_EVAL_DIR / "tasks" / "gsm8k" / TASK_FILES[task]).read_text())


@pytest.mark.parametrize("task", sorted(TASK_FILES))
def test_our_task_table_is_lm_evals_yaml(task):
    cfg, ours = _task_yaml(task), G.GSM8K_VARIANTS[task]
    chains = {f["name"]: f["filter"] for f in cfg["filter_list"]}
    for name, pattern, group in (("strict-match", ours.strict_pattern, ours.strict_group),
                                 ("flexible-extract", ours.flexible_pattern, ours.flexible_group)):
        regex, take = chains[name]
        assert regex == {"function": "regex", "regex_pattern": pattern, **({"group_select": group} if group else {})}
        assert take == {"function": "take_first"}
    metric = next(m for m in cfg["metric_list"] if m["metric"] == "exact_match")
    assert metric["regexes_to_ignore"] == list(ours.regexes_to_ignore)
    assert (metric["ignore_case"], metric["ignore_punctuation"]) == (ours.ignore_case, ours.ignore_punctuation)
    assert cfg["generation_kwargs"]["until"] == list(ours.until)
    assert ours.yaml.endswith(TASK_FILES[task])


def _lm_eval_gsm8k(task: str, filter_name: str, completions: list[str],
                   docs: list[dict]) -> tuple[list[str], list[bool]]:
    import lm_eval.filters  # noqa: F401 - registers the filters
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.api.registry import get_filter
    from lm_eval.models.utils import postprocess_generated_text
    from lm_eval.utils import apply_template

    cfg = _task_yaml(task)
    chain = next(f for f in cfg["filter_list"] if f["name"] == filter_name)["filter"]
    metric = next(m for m in cfg["metric_list"] if m["metric"] == "exact_match")
    kwargs = {k: metric[k] for k in ("ignore_case", "ignore_punctuation", "regexes_to_ignore") if k in metric}
    until = cfg["generation_kwargs"]["until"]
    resps: list = [[postprocess_generated_text(c, stop=list(until), think_end_token=None)] for c in completions]
    for step in chain:  # as FilterEnsemble.apply runs the chain
        resps = list(get_filter(step["function"])(**{k: v for k, v in step.items() if k != "function"})
                     .apply(resps, docs))
    preds = [p if isinstance(p, str) else p[0] for p in resps]
    golds = [apply_template(cfg["doc_to_target"], d) for d in docs]
    ems = [exact_match_hf_evaluate(predictions=[p], references=[g], **kwargs)["exact_match"] == 1.0
           for p, g in zip(preds, golds)]
    return preds, ems


def _docs(n: int, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    return [{"answer": rnd.choice(GOLD_SOLUTIONS + BARE_GOLDS)} for _ in range(n)]


def _hits_golds(corpus: list[str], docs: list[dict]) -> list[str]:
    # make a share of the completions end in their own gold (in the phrasing each filter reads), so
    # that both verdicts occur often
    rnd = random.Random(2)
    out = []
    for c, d in zip(corpus, docs):
        gold = d["answer"].split("####")[-1].strip()
        r = rnd.random()
        out.append(c + (f"\n#### {gold}" if r < 0.2 else f" The answer is {gold}." if r < 0.4
                        else f" The final answer is {gold}" if r < 0.5 else f" so {gold}" if r < 0.7 else ""))
    return out


@pytest.mark.parametrize("task", sorted(TASK_FILES))
@pytest.mark.parametrize("mode,filter_name", [("strict", "strict-match"), ("flexible", "flexible-extract")])
def test_gsm8k_filters_equal_lm_evals_own_on_every_completion(task, mode, filter_name):
    docs = _docs(len(CORPUS))
    completions = _hits_golds(CORPUS, docs)
    ref_preds, ref_em = _lm_eval_gsm8k(task, filter_name, completions, docs)
    grader = G.LmEvalGsm8k(mode, task)
    ours = [grader(c, {"solution": d["answer"], "answer": d["answer"]} if "####" in d["answer"] else d["answer"])
            for c, d in zip(completions, docs)]
    bad = [(c, p, r.info["pred"], e, r.score) for c, p, e, r in zip(completions, ref_preds, ref_em, ours)
           if r.info["pred"] != p or (r.score == 1.0) != e]
    assert not bad, bad[:5]
    n_right = sum(ref_em)
    assert 0.05 * len(ref_em) < n_right < 0.95 * len(ref_em), n_right  # the corpus exercises both verdicts
    accuracy = sum(r.score for r in ours) / len(ours)
    assert accuracy == pytest.approx(n_right / len(ref_em))  # the benchmark number, too


def test_gsm8k_pieces_match_lm_eval_on_edge_cases():
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters.extraction import RegexFilter
    from lm_eval.models.utils import postprocess_generated_text

    rnd = random.Random(3)
    stops = [["Question:", "</s>"], ["ab", "b"], ["Yc", "XY"], ["", "x"], "Q:", []]
    for text in CORPUS[:300] + ["abXYc", "xxYcXY"]:
        for until in stops:
            assert G.cut_at_stops(text, until) == postprocess_generated_text(text, stop=until, think_end_token=None)
    flex = G.FLEX_PATTERN
    for pattern, group in [("#### (\\-?[0-9\\.\\,]+)", 0), (flex, -1), (flex, 0), ("(a)|(b)|(c)", -1),
                           ("(x*)", 0), ("\\d+", -1), ("((-?[$0-9.,]{2,})|(-?[0-9]+))", -1)]:
        f = RegexFilter(regex_pattern=pattern, group_select=group)
        for text in CORPUS[:300] + ["   ", "abc", "xx", "", " 12 "]:
            assert G.regex_extract(text, pattern, group) == f.apply([[text]], [{}])[0][0], (pattern, text)
    pairs = [("İ5", "i̇5"), ("aİb", "ai̇"), ("5\x00", "5"), ("ΑΣ", "ας"), ("A,B", "ab"), ("$1.", "1"), ("x#### 5", "5")]
    pairs += [(rnd.choice(CORPUS[:200]), rnd.choice(CORPUS[:200])) for _ in range(200)]
    for p, r in pairs:
        for kw in ({"regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"], "ignore_case": True},
                   {"ignore_case": True, "ignore_punctuation": True}, {"ignore_numbers": True}, {}):
            ref = exact_match_hf_evaluate(predictions=[p], references=[r], **kw)["exact_match"] == 1.0
            assert G.exact_match(p, r, **kw) == ref, (p, r, kw)


# ----------------------------------------------------------------------------- minerva_math


@pytest.fixture(scope="module")
def minerva():
    """lm-eval's own minerva_math/utils.py, its antlr4 4.11 assertion satisfied (4.13 is installed
    for math-verify), with sympy's parse_latex version check satisfied the same way."""
    real = md.version

    def version(name: str) -> str:
        return "4.11.1" if name == "antlr4-python3-runtime" else real(name)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(md, "version", version)
        try:
            import sympy.parsing.latex._parse_latex_antlr as antlr_mod
            import lm_eval.tasks.minerva_math.utils as U
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"lm-eval's minerva_math utils cannot be imported here: {type(e).__name__}: {e}")
        mp.setattr(antlr_mod, "version", version)
        if antlr_mod.LaTeXParser is None:
            pytest.skip("sympy's generated ANTLR LaTeX parser is not importable")
        yield U


MATH_TEXTS = [
    "\\boxed{5}", "so $\\boxed{\\frac{1}{2}}$.", "\\boxed 5$ and more", "a \\boxed{x} b \\boxed{y}", "\\boxed{",
    "\\boxed}{x}", "\\fbox{3}", "\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "no box", "\\boxed{}", "\\boxed {4}",
    "\\boxed x {1}", "\\boxed{a}{b}", "$\\boxed{1,000}$", "\\boxed{10\\%}", "\\boxed{\\text{(A)}}", "\\boxed{\\$5}",
    "\\boxed{2\\sqrt{3}}", "\\boxed{\\dfrac{3}{4}}", "\\boxed{x^2+1}", "\\boxed{[2,5)}", "\\boxed{5 \\text{ cm}}",
    "\\boxed{90^\\circ}", "\\boxed{\\frac12}", "\\boxed{\\sqrt2}", "\\boxed{3\\text{ ways}}", "\\boxed{0.5}",
]
ANSWERS = [
    "5", "\\frac{1}{2}", "\\frac12", "1/2", "0.5", ".5", "\\dfrac{1}{2}", "x = 3", "y=2x+1", "\\$5.00", "5 dollars",
    "10\\%", "1,000", "0,1", "(1,2)", "[2,5)", "\\left( 3, \\frac{\\pi}{2} \\right)", "2\\sqrt{3}", "\\sqrt3",
    "\\sqrt[3]8",
    "\\sqrt[3]{8}", "90^\\circ", "90^{\\circ}", "3 \\text{ cm}", "\\text{(A)}", "\\textbf{B}", "\\overline{12}",
    "5\\text{ ways}", "\\mbox{ft}", "\\left(1\\right)", "12 inches", "a square", "an apple", "$x$ and $y$",
    "\\boxed{7}", "x^2 + 2x + 1", "(x+1)^2", "\\pi", "3.14159", "-\\frac{2}{3}", "\\frac{-2}{3}", "2/3", "4\\,000",
    "1{,}000", "\\dots", "1, 2, \\ldots", "\\infty", "e^{i\\pi}", "\\sin x", "\\frac{\\sqrt{2}}{2}", "\\tfrac{1}{2}",
    "\\mathrm{th}", "5^\\circ \\text{C}", "\\text{and}", "1,\\text{and}2", "students 5", "\\fracab", "\\fraca b",
]


def _lm_boxed(U, s):
    try:
        return U.remove_boxed(U.last_boxed_only_string(s))
    except (AssertionError, TypeError):
        return None


def test_minerva_extraction_and_normalisation_equal_lm_evals(minerva):
    U = minerva
    texts = MATH_TEXTS + ANSWERS + CORPUS[:400] + [f"x \\boxed{{{a}}} y" for a in ANSWERS]
    for t in texts:
        assert G.last_boxed_only_string(t) == U.last_boxed_only_string(t), t
        assert G.remove_boxed(G.last_boxed_only_string(t)) == _lm_boxed(U, t), t
        assert G.minerva_final_answer(t) == U.get_unnormalized_answer(t), t
        assert G.normalize_final_answer(t) == U.normalize_final_answer(t), t
    for a in ANSWERS:
        t = f"Work.\nFinal Answer: The final answer is ${a}$. I hope it is correct."
        assert G.minerva_final_answer(t) == U.get_unnormalized_answer(t)
        assert G.normalize_final_answer(a) == U.normalize_final_answer(a), a


def test_minerva_is_equiv_equals_lm_evals(minerva):
    U = minerva
    rnd = random.Random(4)
    norm = [G.normalize_final_answer(a) for a in ANSWERS]
    pairs = [(a, a) for a in norm[:10]] + [(norm[i], norm[j]) for i in range(len(norm)) for j in range(len(norm))
                                           if i != j and rnd.random() < 0.04]
    pairs += [("\\frac{1}{2}", "0.5"), ("\\frac{1}{2}", "1/2"), ("2\\sqrt{3}", "\\sqrt{12}"), ("(1,2)", "(1,2)"),
              ("(x+1)^2", "x^2+2x+1"), ("", ""), ("x=3", "3"), ("\\infty", "\\infty")]
    assert len(pairs) >= 100
    disagree = [(a, b) for a, b in pairs if G.minerva_is_equiv(a, b) != U.is_equiv(a, b)]
    assert not disagree, disagree
    assert G.minerva_is_equiv("\\frac{1}{2}", "0.5") and not G.minerva_is_equiv("\\frac{1}{2}", "\\frac{1}{3}")


def test_minerva_grader_equals_lm_evals_exact_match(minerva):
    U = minerva
    rnd = random.Random(5)
    solutions = ["so the answer is $\\boxed{\\frac{1}{2}}$.", "we get \\boxed{5}.", "\\boxed{(1,2)}",
                 "$\\boxed{2\\sqrt{3}}$", "\\boxed{x^2+1}", "\\boxed{10\\%}", "\\boxed{90^\\circ}"]
    phrasings = ["Final Answer: The final answer is ${}$. I hope it is correct.", "The answer is \\boxed{{{}}}.",
                 "Final Answer: The final answer is {}. I hope it is correct.\nFinal Answer: The final answer is 0. I "
                 "hope it is correct.",
                 "{}", "Final Answer: The final answer is {}"]
    answers = ["\\frac12", "0.5", "5", "(1,2)", "\\sqrt{12}", "x^2 + 1", "10\\%", "90", "7", "1/2"]
    same = {0: ["\\frac12", "0.5", "1/2", "\\dfrac{1}{2}"], 1: ["5", "5.0", "\\$5"], 2: ["(1,2)", "(1, 2)"],
            3: ["\\sqrt{12}", "2\\sqrt3"], 4: ["x^2 + 1", "1+x^2"], 5: ["10\\%", "10"], 6: ["90^\\circ", "90"]}
    cases = []
    for _ in range(120):
        i = rnd.randrange(len(solutions))
        ans = rnd.choice(same[i]) if rnd.random() < 0.5 else rnd.choice(answers)
        cases.append((rnd.choice(phrasings).format(ans), solutions[i]))
    ours, boxed = G.Minerva(), G.Minerva(boxed=True)
    got_right = 0
    for completion, sol in cases:
        gold = U.normalize_final_answer(U.remove_boxed(U.last_boxed_only_string(sol)))  # process_docs
        ref = U.is_equiv(U.normalize_final_answer(U.get_unnormalized_answer(completion)), gold)  # process_results
        res = ours(completion, {"solution": sol, "answer": "ignored when the solution is boxed"})
        assert (res.score == 1.0) == ref, (completion, sol, res.info)
        got_right += ref
        inner = _lm_boxed(U, completion)
        ref_boxed = inner is not None and U.is_equiv(U.normalize_final_answer(inner), gold)
        assert (boxed(completion, {"solution": sol}).score == 1.0) == ref_boxed, (completion, sol)
    assert 5 < got_right < 115


def test_minerva_slow_part_runs_in_the_pool():
    from rewardlab.rewards import score_batch

    g = G.Minerva(boxed=True)
    res = score_batch(g, ["\\boxed{0.5}", "\\boxed{\\frac12}", "\\boxed{3}", "no box"], ["\\frac{1}{2}"] * 4,
                      deadline=10.0)
    assert [r.score for r in res] == [1.0, 1.0, 0.0, 0.0], [r.info for r in res]
    assert res[1].info["rule"] == "identical" and res[0].info["rule"] == "sympy"


# ----------------------------------------------------------------------------- registry


def test_registry_and_parsing():
    assert G.parse_graders(None) == ["rewardlab"]
    assert G.parse_graders(["lm-eval-strict,minerva", "lm-eval-flexible", "rewardlab"]) == [
        "rewardlab", "lm-eval-strict", "minerva", "lm-eval-flexible"]
    with pytest.raises(Exception, match="unknown --grader 'nope'"):
        G.parse_graders("nope")
    assert G.get_grader("lm-eval-strict", "code") is None
    assert G.get_grader("rewardlab", "math").name == "math"
    assert G.get_grader("lm-eval-flexible").describe()["regex"] == G.FLEX_PATTERN
    assert G.parser_name() in ("sympy-antlr", "latex2sympy2_extended")


def test_minerva_long_inputs_leave_the_callers_thread():
    g = G.Minerva(boxed=True)
    long_answer = "\\boxed{" + "$" + "1" * 5000 + "}"
    assert g.fast(long_answer, "1") is None  # normalised in a worker, under the pool's deadline
    assert g.fast("x" * 30000 + "\\boxed{1}", "1") is None
    assert g.fast("\\boxed{1}", "1").score == 1.0
    assert G.Minerva().fast("Final Answer: The final answer is $1$. I hope it is correct.", "1").score == 1.0


# ----------------------------------------------------------------------------- on a sample store

def _data_dir():
    from conftest import data_dir

    return data_dir()


def test_on_a_sample_store_lm_eval_strict_and_flexible_equal_lm_evals_own(tmp_path):
    """A run's own samples (samples_gsm8k.jsonl) graded by lm-eval's filter chain and exact_match, with
    the GSM8K solution as the target, give the verdicts of graders_gsm8k.jsonl on every sample and
    the pass@1 of results.json."""
    data = _data_dir()
    if data is None:
        pytest.skip("no evaluation data directory (set REWARDLAB_DATA_DIR)")
    from rewardlab.eval import EvalConfig, load_rows, load_spec, render_prompt, run_eval
    from rewardlab.rollout import Completion

    spec = load_spec("gsm8k")
    rows, _ = load_rows(spec, data, limit=24)
    by_prompt = {render_prompt(spec, r, None): r for r in rows}
    rnd = random.Random(7)

    class Engine:
        def generate(self, prompts, n, sampling):
            out = []
            for i, p in enumerate(prompts):
                gold = by_prompt[p].reference
                for _ in range(n):
                    c = rnd.choice(CORPUS)
                    c += rnd.choice([f"\n#### {gold}", f" The answer is {gold}.", f" so {gold}", f" \\boxed{{{gold}}}",
                                     ""])
                    out.append(Completion(i, [], [1], c, "stop"))
            return out

    cfg = EvalConfig(suite="gsm8k", output=str(tmp_path), limit=24, n=6, k=[1], temperature=1.0, data_dir=data,
                     quiet=True, grader=("lm-eval-strict,lm-eval-flexible",))
    res = run_eval(cfg, "corpus", engine=Engine())
    samples = [json.loads(x) for x in (tmp_path / "samples_gsm8k.jsonl").read_text().splitlines()[1:]]
    verdicts = {json.loads(x)["id"]: json.loads(x)
                for x in (tmp_path / "graders_gsm8k.jsonl").read_text().splitlines()[1:]}
    solution = {r.id: r.fields["solution"] for r in rows}
    for mode, filter_name in (("strict", "strict-match"), ("flexible", "flexible-extract")):
        completions = [c for s in samples for c in s["completions"]]
        docs = [{"answer": solution[s["id"]]} for s in samples for _ in s["completions"]]
        preds, ems = _lm_eval_gsm8k("gsm8k", filter_name, completions, docs)
        ours = [v for s in samples for v in verdicts[s["id"]]["scores"][f"lm-eval-{mode}"]]
        ours_pred = [v for s in samples for v in verdicts[s["id"]]["extracted"][f"lm-eval-{mode}"]]
        assert [x == 1.0 for x in ours] == ems
        assert ours_pred == preds
        assert res["results"]["gsm8k"][f"pass@1,lm-eval-{mode}"] == pytest.approx(sum(ems) / len(ems))
        assert 0 < sum(ems) < len(ems)


def test_on_a_sample_store_minerva_equals_lm_evals_process_results(tmp_path, minerva):
    """MATH-500 samples of a run, graded by lm-eval's own ``process_results`` (its ``exact_match``) on
    docs built by its ``process_docs`` rule, give the minerva verdicts of graders_math500.jsonl."""
    U = minerva
    data = _data_dir()
    if data is None:
        pytest.skip("no evaluation data directory (set REWARDLAB_DATA_DIR)")
    from rewardlab.eval import EvalConfig, load_rows, load_spec, render_prompt, run_eval
    from rewardlab.rollout import Completion

    spec = load_spec("math500")
    rows, _ = load_rows(spec, data, limit=12)
    by_prompt = {render_prompt(spec, r, None): r for r in rows}
    forms = ["Final Answer: The final answer is ${}$. I hope it is correct.", "so \\boxed{{{}}}.",
             "Final Answer: The final answer is {}. I hope it is correct.", "The answer is {}"]

    class Engine:
        def generate(self, prompts, n, sampling):
            out = []
            for i, p in enumerate(prompts):
                gold = by_prompt[p].reference
                for j in range(n):
                    ans = [gold, "7", f"{gold} \\text{{ units}}", "\\frac{1}{2}"][j % 4]
                    out.append(Completion(i, [], [1], forms[(i + j) % len(forms)].format(ans), "stop"))
            return out

    cfg = EvalConfig(suite="math500", output=str(tmp_path), limit=12, n=4, k=[1], temperature=1.0, data_dir=data,
                     quiet=True, grader=("minerva,minerva-boxed",))
    res = run_eval(cfg, "m", engine=Engine())
    samples = [json.loads(x) for x in (tmp_path / "samples_math500.jsonl").read_text().splitlines()[1:]]
    verdicts = {json.loads(x)["id"]: json.loads(x)
                for x in (tmp_path / "graders_math500.jsonl").read_text().splitlines()[1:]}
    sol = {r.id: r.fields["solution"] for r in rows}
    ref_all, ours_all = [], []
    for s in samples:
        doc = {"solution": sol[s["id"]], "problem": "",
               "answer": U.normalize_final_answer(U.remove_boxed(U.last_boxed_only_string(sol[s["id"]])))}
        for j, c in enumerate(s["completions"]):
            ref_all.append(U.process_results(doc, [c])["exact_match"] == 1)
            ours_all.append(verdicts[s["id"]]["scores"]["minerva"][j] == 1.0)
    assert ours_all == ref_all
    assert 0 < sum(ref_all) < len(ref_all)
    assert res["results"]["math500"]["pass@1,minerva"] == pytest.approx(sum(ref_all) / len(ref_all))
