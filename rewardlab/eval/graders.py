"""Graders for ``rewardlab eval --grader NAME``: ours, and reference graders reproduced exactly.

Names (:data:`GRADERS`):

* ``rewardlab`` (the default): the benchmark spec's own grader (``math``: rewardlab's math reward,
  symbolic equivalence; ``code``: the sandboxed code reward).
* ``lm-eval-strict`` / ``lm-eval-flexible``: lm-evaluation-harness **0.4.13**'s GSM8K filters
  ``strict-match`` and ``flexible-extract`` followed by its ``exact_match`` metric, as configured in
  ``lm_eval/tasks/gsm8k/gsm8k.yaml`` (and the ``gsm8k-cot*.yaml`` variants, :data:`GSM8K_VARIANTS`),
  implemented by ``lm_eval/filters/extraction.py`` (``RegexFilter``: ``re.findall``, the match at
  ``group_select``, the first non-empty group of a tuple match, ``.strip()``, fallback
  ``"[invalid]"``), ``lm_eval/filters/selection.py`` (``TakeFirstFilter``) and
  ``lm_eval/api/metrics.py`` (``exact_match_hf_evaluate``: each of ``regexes_to_ignore`` removed
  with ``re.sub`` from prediction and reference, then ``ignore_case`` lower-casing, then
  ``ignore_punctuation``, then equality). The completion is first cut at the task's
  ``generation_kwargs.until`` stop strings, as lm-eval's ``postprocess_generated_text``
  (``lm_eval/models/utils.py``) does after generation; the target is the task's ``doc_to_target``
  (the full GSM8K solution for ``gsm8k``, the text after ``####`` for the CoT variants).
* ``minerva``: lm-evaluation-harness 0.4.13's ``minerva_math`` ``exact_match``
  (``lm_eval/tasks/minerva_math/utils.py``: ``process_results``: the answer is what follows
  ``Final Answer: The final answer is`` up to ``. I hope it is correct.``
  (``get_unnormalized_answer``), normalised by ``normalize_final_answer`` (Lewkowycz et al. 2022,
  appendix D, with lm-eval's fixes), compared to the gold ``normalize_final_answer(remove_boxed(
  last_boxed_only_string(solution)))`` by ``is_equiv``: identical strings are equal, else both are
  parsed with sympy's ``parse_latex`` (ANTLR backend), subtracted and ``sympy.simplify``-ed to 0;
  a parse/subtraction/simplify failure or a 5 s timeout is "not equal").
* ``minerva-boxed``: the same normalisation and equivalence, with the answer taken from the
  completion's last ``\\boxed{}`` (``remove_boxed(last_boxed_only_string(completion))``) instead of
  the "Final Answer" sentence: what a zero-shot boxed-answer prompt (ours) asks for. This variant is
  ours; lm-eval applies that extraction to the gold only.

The reimplementations are our own code, written from lm-eval 0.4.13's source; ``tests/test_eval_graders.py``
runs lm-eval's own filter classes, metric and minerva functions on the same completions and requires
equal verdicts on every one.

Parser note for ``minerva``: sympy's ``parse_latex`` (sympy 1.14) refuses to run unless
``antlr4-python3-runtime`` is 4.11, and lm-eval's module asserts 4.11 at import, while math-verify
(which our math reward uses) needs 4.13. :func:`parse_latex_antlr` runs sympy's own ANTLR lexer,
parser and converter (generated with ANTLR 4.11; the 4.13 runtime reads the same serialized ATN),
exactly as ``sympy.parsing.latex.parse_latex`` does, minus that version check. When sympy's ANTLR
parser cannot be loaded at all, ``latex2sympy2_extended`` is used and the grader's info says so
(``parser``).

Every grader is a reward in the sense of :mod:`rewardlab.rewards.base` (picklable; ``fast`` on the
caller's thread; ``minerva``'s sympy step is its ``slow`` part, run by the pool under the grader
deadline) and returns ``RewardResult(1.0 | 0.0, info)`` with ``info["pred"]`` (what it extracted).
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
import string
import threading
from dataclasses import dataclass
from typing import Any

from rewardlab.errors import RewardlabError
from rewardlab.eval.answer_classes import class_correctness, math_answer_classes  # noqa: F401 - re-exported
from rewardlab.rewards.base import RewardResult

LM_EVAL_VERSION = "0.4.13"
"""The lm-evaluation-harness release the reference graders reproduce."""

INVALID = "[invalid]"  # RegexFilter's default fallback
MINERVA_INVALID = "[invalidanswer]"  # get_unnormalized_answer's


# ============================================================================ GSM8K (lm-eval filters)


@dataclass(frozen=True)
class Gsm8kTask:
    """One lm-eval GSM8K task's grading settings (filters, exact_match kwargs, stop strings, target)."""

    task: str
    yaml: str
    strict_pattern: str
    strict_group: int
    flexible_pattern: str
    flexible_group: int
    until: tuple[str, ...]
    target: str  # "full": doc_to_target is the whole solution; "after_hashes": answer.split('####')[-1].strip()
    regexes_to_ignore: tuple[str, ...] = (",", "\\$", "(?s).*#### ", "\\.$")
    ignore_case: bool = True
    ignore_punctuation: bool = False


FLEX_PATTERN = "(-?[$0-9.,]{2,})|(-?[0-9]+)"
GSM8K_VARIANTS: dict[str, Gsm8kTask] = {
    "gsm8k": Gsm8kTask("gsm8k", "lm_eval/tasks/gsm8k/gsm8k.yaml", "#### (\\-?[0-9\\.\\,]+)", 0, FLEX_PATTERN, -1,
                       ("Question:", "</s>", "<|im_end|>"), "full"),
    "gsm8k_cot": Gsm8kTask("gsm8k_cot", "lm_eval/tasks/gsm8k/gsm8k-cot.yaml", "The answer is (\\-?[0-9\\.\\,]+).", 0,
                           FLEX_PATTERN, -1, ("Q:", "</s>", "<|im_end|>"), "after_hashes"),
    "gsm8k_cot_zeroshot": Gsm8kTask("gsm8k_cot_zeroshot", "lm_eval/tasks/gsm8k/gsm8k-cot-zeroshot.yaml",
                                    "The answer is (\\-?[0-9\\.\\,]+).", 0, FLEX_PATTERN, -1,
                                    ("Q:", "</s>", "<|im_end|>"),
                                    "full"),
    "gsm8k_cot_llama": Gsm8kTask("gsm8k_cot_llama", "lm_eval/tasks/gsm8k/gsm8k-cot-llama.yaml",
                                 "The final answer is ((-?[$0-9.,]{2,})|(-?[0-9]+))", -1, FLEX_PATTERN, -1,
                                 ("<|eot_id|>", "<|start_header_id|>user<|end_header_id|>", "Q:", "</s>", "<|im_end|>"),
                                 "after_hashes"),
}
"""lm-eval 0.4.13's GSM8K tasks by task name; ``gsm8k`` (the 5-shot ``gsm8k.yaml``) is the default."""


def cut_at_stops(text: str, until: Any) -> str:
    """The text cut at each stop string in turn (empty strings ignored), as lm-eval's
    ``postprocess_generated_text`` cuts a generation (``lm_eval/models/utils.py``, 0.4.13)."""
    stops = [until] if isinstance(until, str) else list(until or ())
    for s in stops:  # one after another, as lm-eval's text.split(term)[0] (not the earliest of all)
        if s:
            k = text.find(s)
            if k >= 0:
                text = text[:k]
    return text


def regex_extract(text: Any, pattern: str, group_select: int = 0, fallback: str = INVALID) -> str:
    """One response through lm-eval's ``RegexFilter`` (``lm_eval/filters/extraction.py``, 0.4.13):
    all matches, the one at ``group_select`` (negative counts from the end), for a pattern with
    several groups its first non-empty group, stripped; ``fallback`` when nothing matches (or every
    group of the chosen match is empty). A non-string response is read as ``""``."""
    if not isinstance(text, str):
        text = ""
    found = re.findall(pattern, text)
    if not found:
        return fallback
    chosen = found[group_select]  # IndexError for an out-of-range group_select, as lm-eval
    if isinstance(chosen, tuple):
        nonempty = next((g for g in chosen if g), None)
        if nonempty is None:
            return fallback  # lm-eval returns the fallback unstripped here; it has no spaces
        chosen = nonempty
    return chosen.strip()


def _np_lower(s: str) -> str:
    # lm-eval lower-cases a numpy unicode array (np.char.lower): Python's str.lower, cut to the
    # array's fixed width, so a character that lengthens ("İ" -> "i̇") pushes the tail out.
    return s.lower()[: len(s)]


def exact_match(pred: str, ref: str, *, regexes_to_ignore: Any = None, ignore_case: bool = False,
                ignore_punctuation: bool = False, ignore_numbers: bool = False) -> bool:
    """lm-eval's ``exact_match_hf_evaluate`` (``lm_eval/api/metrics.py``, 0.4.13) on one pair.

    Order: remove each of ``regexes_to_ignore`` (``re.sub`` in list order) from both, then lower
    case, then drop ``string.punctuation``, then digits, then compare. lm-eval compares numpy
    unicode arrays, which ignore trailing NUL characters; so does this.
    """
    for rx in regexes_to_ignore or ():
        pred, ref = re.sub(rx, "", pred), re.sub(rx, "", ref)
    if ignore_case:
        pred, ref = _np_lower(pred), _np_lower(ref)
    if ignore_punctuation:
        table = str.maketrans("", "", string.punctuation)
        pred, ref = pred.translate(table), ref.translate(table)
    if ignore_numbers:
        table = str.maketrans("", "", string.digits)
        pred, ref = pred.translate(table), ref.translate(table)
    return pred.rstrip("\x00") == ref.rstrip("\x00")


def gsm8k_target(reference: Any, task: Gsm8kTask) -> str:
    """The task's ``doc_to_target`` for one of our references: a dict with the GSM8K ``solution``
    (the full answer text, ``... #### 72``) gives lm-eval's exact target; a bare gold (``"72"``) is
    used as is (``regexes_to_ignore``' ``(?s).*#### `` leaves it unchanged)."""
    if isinstance(reference, dict):
        sol = reference.get("solution")
        if isinstance(sol, str) and "####" in sol:
            return sol if task.target == "full" else sol.split("####")[-1].strip()
        reference = reference.get("answer", reference.get("gold"))
    return "" if reference is None else str(reference)


class LmEvalGsm8k:
    """lm-eval's GSM8K ``strict-match`` or ``flexible-extract`` filter + ``exact_match`` (see module doc)."""

    isolated = False
    timeout_score = 0.0

    def __init__(self, mode: str, task: str = "gsm8k"):
        if mode not in ("strict", "flexible"):
            raise ValueError(f"mode must be strict or flexible, got {mode!r}")
        if task not in GSM8K_VARIANTS:
            raise RewardlabError(f"unknown lm-eval GSM8K task {task!r}; choose from {', '.join(GSM8K_VARIANTS)}")
        self.mode, self.task = mode, task
        self.name = f"lm-eval-{mode}"

    def __repr__(self) -> str:
        return f"LmEvalGsm8k({self.mode!r}, {self.task!r})"

    @property
    def config(self) -> Gsm8kTask:
        return GSM8K_VARIANTS[self.task]

    def extract(self, completion: Any) -> str:
        cfg = self.config
        text = cut_at_stops(completion if isinstance(completion, str) else "", cfg.until)
        if self.mode == "strict":
            return regex_extract(text, cfg.strict_pattern, cfg.strict_group)
        return regex_extract(text, cfg.flexible_pattern, cfg.flexible_group)

    def __call__(self, completion: Any, reference: Any, **meta: Any) -> RewardResult:
        cfg = self.config
        pred = self.extract(completion)
        gold = gsm8k_target(reference, cfg)
        ok = exact_match(pred, gold, regexes_to_ignore=cfg.regexes_to_ignore, ignore_case=cfg.ignore_case,
                         ignore_punctuation=cfg.ignore_punctuation)
        return RewardResult(1.0 if ok else 0.0, {"status": "ok", "pred": pred, "filter": self.name, "task": self.task})

    fast = __call__

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        return {"grader": self.name, "reference": f"lm-evaluation-harness {LM_EVAL_VERSION}", "task": cfg.task,
                "files": [cfg.yaml, "lm_eval/filters/extraction.py", "lm_eval/filters/selection.py",
                          "lm_eval/api/metrics.py",
                          "lm_eval/models/utils.py"],
                "regex": cfg.strict_pattern if self.mode == "strict" else cfg.flexible_pattern,
                "group_select": cfg.strict_group if self.mode == "strict" else cfg.flexible_group,
                "until": list(cfg.until), "regexes_to_ignore": list(cfg.regexes_to_ignore),
                "ignore_case": cfg.ignore_case, "ignore_punctuation": cfg.ignore_punctuation}


# ============================================================================ minerva_math (lm-eval)


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{...}`` (or ``\\fbox{...}``) with its braces, as lm-eval's
    ``minerva_math/utils.py`` (0.4.13) finds it. Its quirks are kept: once ``"\\boxed "`` (with a
    space) occurs anywhere, the answer is what follows its last occurrence up to the next ``$``;
    the brace walk starts at the command (so ``\\boxed x {1}`` returns ``\\boxed x {1}``) and an
    unbalanced box is None."""
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for j in range(start, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:j + 1]
    return None


def remove_boxed(boxed: str | None) -> str | None:
    """The inside of ``\\boxed{...}`` / after ``\\boxed ``; None where lm-eval's ``remove_boxed``
    would fail its assertions (an ``\\fbox``, a ``\\boxed`` not followed by ``{``, no closing ``}``)
    or get None."""
    if boxed is None:
        return None
    if "\\boxed " in boxed:
        return boxed[len("\\boxed "):] if boxed.startswith("\\boxed ") else None
    if boxed.startswith("\\boxed{") and boxed.endswith("}"):
        return boxed[len("\\boxed{"):-1]
    return None


def minerva_final_answer(text: str) -> str:
    """lm-eval's ``get_unnormalized_answer``: the text between ``Final Answer: The final answer is``
    and the first following ``. I hope it is correct.`` (lm-eval appends that sentence before
    searching, and its dots are regex dots: any character but a newline), stripped;
    ``[invalidanswer]`` when absent."""
    m = re.search(r"Final Answer: The final answer is(.*?). I hope it is correct.", text + "I hope it is correct.")
    return m.group(1).strip() if m else MINERVA_INVALID


# lm-eval 0.4.13 minerva_math/utils.py: SUBSTITUTIONS and REMOVED_EXPRESSIONS (appendix D of
# Lewkowycz et al. 2022 plus lm-eval's additions). Data, in lm-eval's order (order matters).
_SUBST = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
          (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"))
_REMOVED = ("square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units", "\\ldots", "sue",
            "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges",
            "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2",
            "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"',
            "\\dots")
_WORDS = tuple(e for e in _REMOVED if e.isalpha())
_WORD_RX = tuple(re.compile(rf"(?<!\\)\b{w}\b") for w in _WORDS)
_COMMAND_SPLIT = re.compile(r"(\\[a-zA-Z]+)")


def normalize_final_answer(answer: str) -> str:
    """lm-eval 0.4.13's ``normalize_final_answer`` (``minerva_math/utils.py``), step for step:
    keep what follows the last ``=``; drop unit words at word boundaries (not inside a command);
    apply the substitutions; drop the removed expressions (words only outside LaTeX command
    names); keep the inside of the first ``$...$``, ``\\text{}``, ``\\textbf{}``, ``\\overline{}``,
    ``\\boxed{}``; expand ``\\fracab`` and ``\\sqrta`` shorthands; drop ``$``; drop thousands
    separators of a plain grouped integer."""
    s = answer.split("=")[-1]
    for rx in _WORD_RX:
        s = rx.sub("", s)
    for old, new in _SUBST:
        s = s.replace(old, new)
    for expr in _REMOVED:
        if expr.isalpha():
            parts = _COMMAND_SPLIT.split(s)  # odd indices: command names, left alone
            s = "".join(p if i % 2 else p.replace(expr, "") for i, p in enumerate(parts))
        else:
            s = s.replace(expr, "")
    s = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s)
    for cmd in ("text", "textbf", "overline"):
        s = re.sub(r"(\\" + cmd + r"\{)(.*?)(\})", "\\2", s)
    s = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", s)
    s = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", s)
    s = re.sub(r"(sqrt)(\[[^\]]*\])(\w)", "\\1\\2{\\3}", s)
    s = re.sub(r"(sqrt)(?!\[)([^{])", "sqrt{\\2}", s)
    s = s.replace("$", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", s):
        s = s.replace(",", "")
    return s


_PARSER: tuple[str, Any] | None = None


def _load_parser() -> tuple[str, Any]:
    global _PARSER
    if _PARSER is None:
        try:
            from sympy.parsing.latex import _parse_latex_antlr as m

            if m.LaTeXParser is None or m.LaTeXLexer is None or m.MathErrorListener is None:
                raise ImportError("sympy's generated ANTLR parser is not loadable")
            _PARSER = ("sympy-antlr", m)
        except ImportError:
            _PARSER = ("latex2sympy2_extended", None)
    return _PARSER


def parser_name() -> str:
    """Which LaTeX parser :func:`minerva_is_equiv` uses here: ``sympy-antlr`` (lm-eval's) or the fallback."""
    return _load_parser()[0]


def parse_latex_antlr(text: str) -> Any:
    """sympy's ``parse_latex(text)`` (ANTLR backend, ``strict=False``) without its runtime-version
    check: the same lexer, parser, error listener and converter, in the same order. The runtime's
    "versions disagree" notice on stdout is swallowed."""
    kind, m = _load_parser()
    if kind != "sympy-antlr":
        from latex2sympy2_extended import latex2sympy

        return latex2sympy(text)
    import antlr4

    text = text.strip()
    listener = m.MathErrorListener(text)
    with contextlib.redirect_stdout(io.StringIO()):
        lexer = m.LaTeXLexer(antlr4.InputStream(text))
        lexer.removeErrorListeners()
        lexer.addErrorListener(listener)
        parser = m.LaTeXParser(antlr4.CommonTokenStream(lexer))
    parser.removeErrorListeners()
    parser.addErrorListener(listener)
    return m.convert_relation(parser.math().relation())


class _Alarm:
    """lm-eval's 5 s ``signal.alarm`` timeout, where a signal can be used (the main thread)."""

    def __init__(self, seconds: int):
        self.seconds = seconds
        self.armed = False

    def _fire(self, signum, frame):
        raise TimeoutError("minerva is_equiv timed out")

    def __enter__(self):
        if self.seconds and threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM"):
            self.old = signal.signal(signal.SIGALRM, self._fire)
            signal.alarm(self.seconds)
            self.armed = True
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, self.old)
        return False


def minerva_is_equiv(x1: str, x2: str, timeout_s: int = 5) -> bool:
    """lm-eval 0.4.13's ``is_equiv`` on two normalised answers: identical non-empty strings are
    equal; else parse both, subtract, and ``sympy.simplify(diff) == 0``; any failure (parse,
    subtraction, simplification, timeout) is False."""
    if isinstance(x1, str) and x1 and x1 == x2:
        return True
    import sympy

    try:
        with _Alarm(timeout_s):
            try:
                a, b = parse_latex_antlr(x1), parse_latex_antlr(x2)
            except Exception:  # noqa: BLE001 - lm-eval: LaTeXParsingError / SympifyError / TypeError -> False
                return False
            try:
                diff = a - b
            except TypeError:
                return False
            try:
                return bool(sympy.simplify(diff) == 0)
            except ValueError:
                return False
    except TimeoutError:
        return False
    except Exception:  # noqa: BLE001
        return False


def minerva_gold(reference: Any) -> str | None:
    """lm-eval's ``process_docs`` gold: ``normalize_final_answer(remove_boxed(last_boxed_only_string(solution)))``
    when the reference carries the MATH ``solution``; else our bare gold, normalised the same way."""
    if isinstance(reference, dict):
        sol = reference.get("solution")
        if isinstance(sol, str):
            inner = remove_boxed(last_boxed_only_string(sol))
            if inner is not None:
                return normalize_final_answer(inner)
        reference = reference.get("answer", reference.get("gold"))
    return None if reference is None else normalize_final_answer(str(reference))


FAST_MAX_COMPLETION = 20000
"""Longest completion :class:`Minerva` reads on the caller's thread (longer: in a pool worker)."""
FAST_MAX_ANSWER = 400
"""Longest extracted answer :class:`Minerva` normalises on the caller's thread."""


class Minerva:
    """lm-eval's minerva_math ``exact_match`` (``boxed=False``) or our boxed-answer variant (``boxed=True``)."""

    isolated = False
    timeout_score = 0.0

    def __init__(self, boxed: bool = False):
        self.boxed = bool(boxed)
        self.name = "minerva-boxed" if self.boxed else "minerva"

    def __repr__(self) -> str:
        return f"Minerva(boxed={self.boxed})"

    def _raw(self, completion: Any) -> str | None:
        text = completion if isinstance(completion, str) else ""
        if self.boxed:
            return remove_boxed(last_boxed_only_string(text))
        return minerva_final_answer(text)

    def extract(self, completion: Any) -> str:
        raw = self._raw(completion)
        return MINERVA_INVALID if raw is None else normalize_final_answer(raw)

    def _prepare(self, completion: Any, reference: Any) -> tuple[str, str | None, dict]:
        pred, gold = self.extract(completion), minerva_gold(reference)
        return pred, gold, {"status": "ok", "pred": pred, "gold": gold, "filter": self.name}

    def fast(self, completion: Any, reference: Any, **meta: Any) -> RewardResult | None:
        # lm-eval's regexes are not all linear ("(.*?)(\$)(.*?)(\$)(.*)" is quadratic on a long
        # answer with one "$"): long inputs are handled where the pool's deadline can stop them
        if isinstance(completion, str) and len(completion) > FAST_MAX_COMPLETION:
            return None
        raw = self._raw(completion)
        if raw is not None and len(raw) > FAST_MAX_ANSWER:
            return None
        pred, gold, info = self._prepare(completion, reference)
        if gold is None:
            info["status"] = "bad_gold"
            return RewardResult(None, info)
        if pred and pred == gold:
            return RewardResult(1.0, {**info, "rule": "identical"})
        return None  # sympy: in a pool worker

    def slow(self, completion: Any, reference: Any, **meta: Any) -> RewardResult:
        pred, gold, info = self._prepare(completion, reference)
        if gold is None:
            return RewardResult(None, {**info, "status": "bad_gold"})
        ok = minerva_is_equiv(pred, gold)
        return RewardResult(1.0 if ok else 0.0, {**info, "rule": "sympy", "parser": parser_name()})

    def on_failure(self, result: RewardResult, completion: Any, reference: Any, **meta: Any) -> RewardResult:
        _, _, info = self._prepare(completion, reference)
        return RewardResult(0.0, {**info, **result.info})  # lm-eval: a timeout is "not equal"

    def __call__(self, completion: Any, reference: Any, **meta: Any) -> RewardResult:
        return self.fast(completion, reference) or self.slow(completion, reference)

    def describe(self) -> dict[str, Any]:
        return {"grader": self.name, "reference": f"lm-evaluation-harness {LM_EVAL_VERSION}",
                "files": ["lm_eval/tasks/minerva_math/utils.py",
                          "lm_eval/tasks/minerva_math/minerva_math_algebra.yaml"],
                "extraction": "last \\boxed{} of the completion (our variant)" if self.boxed
                else "'Final Answer: The final answer is X. I hope it is correct.' (get_unnormalized_answer)",
                "gold": "normalize_final_answer(remove_boxed(last_boxed_only_string(solution)))",
                "equivalence": "is_equiv: identical, else sympy parse_latex + simplify(a - b) == 0 (5 s)",
                "parser": parser_name()}


# ============================================================================ registry

DEFAULT_GRADER = "rewardlab"
GRADERS = {
    "rewardlab": "the benchmark's own rewardlab grader (math: symbolic equivalence; code: sandboxed tests)",
    "lm-eval-strict": f"lm-eval {LM_EVAL_VERSION} GSM8K strict-match + exact_match",
    "lm-eval-flexible": f"lm-eval {LM_EVAL_VERSION} GSM8K flexible-extract + exact_match",
    "minerva": f"lm-eval {LM_EVAL_VERSION} minerva_math exact_match (Final Answer sentence)",
    "minerva-boxed": f"lm-eval {LM_EVAL_VERSION} minerva_math normalisation + is_equiv on the last \\boxed{{}}",
}
"""Grader names for ``--grader`` and what each is."""


def parse_graders(value: Any) -> list[str]:
    """``--grader`` values (repeatable, or comma lists) as an ordered list of known names; ``rewardlab`` first."""
    items: list[str] = []
    for v in ([value] if isinstance(value, str) else list(value or ())):
        items.extend(x.strip() for x in str(v).split(",") if x.strip())
    bad = [x for x in items if x not in GRADERS]
    if bad:
        raise RewardlabError(f"unknown --grader {bad[0]!r}; choose from {', '.join(GRADERS)}")
    out = [DEFAULT_GRADER] + [x for x in dict.fromkeys(items) if x != DEFAULT_GRADER]
    return out


def get_grader(name: str, spec_grader: str = "math", task: str = "gsm8k") -> Any | None:
    """The reward object of grader ``name`` for a benchmark whose own grader is ``spec_grader``;
    None when the grader does not apply (a math grader on a code benchmark)."""
    if name not in GRADERS:
        raise RewardlabError(f"unknown --grader {name!r}; choose from {', '.join(GRADERS)}")
    if name == "rewardlab":
        from rewardlab.rewards import get_reward

        return get_reward(spec_grader)
    if spec_grader == "code":
        return None
    if name == "lm-eval-strict":
        return LmEvalGsm8k("strict", task)
    if name == "lm-eval-flexible":
        return LmEvalGsm8k("flexible", task)
    return Minerva(boxed=name == "minerva-boxed")


def grader_reference(row_reference: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """What the reference graders read from a row: our gold plus the dataset's ``solution``."""
    return {"answer": row_reference, "solution": fields.get("solution")}


__all__ = ["DEFAULT_GRADER", "GRADERS", "GSM8K_VARIANTS", "INVALID", "LM_EVAL_VERSION", "LmEvalGsm8k",
           "MINERVA_INVALID", "Minerva", "class_correctness", "cut_at_stops", "exact_match", "get_grader",
           "grader_reference", "last_boxed_only_string", "math_answer_classes", "minerva_final_answer",
           "minerva_is_equiv", "normalize_final_answer", "parse_graders", "parser_name", "regex_extract",
           "remove_boxed"]
