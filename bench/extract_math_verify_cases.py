"""Extract every labelled (gold, prediction, expected) case of Math-Verify's own test suite (issue 22).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/extract_math_verify_cases.py PATH \
        [--out bench/data/math_verify_cases.jsonl] [--commit SHA]

``PATH`` is a Math-Verify checkout (a work tree with ``tests/``) or a bare git directory (the ``fetch``
tool's ``/work/.mirror/huggingface+Math-Verify/repo``; files are then read with ``git show HEAD:...``).
Nothing is downloaded. The test sources are read with :mod:`ast`, never imported or executed: each
``@pytest.mark.parametrize`` row is turned into data by a small literal evaluator (constants, lists,
tuples, ``-x``, f-strings over ``math.<fn>(constant)``, and ``...Config(...)`` calls kept as
``{"__call__": name, "args", "kwargs"}``); anything else stops the script with the file and line, so a
new test shape is never dropped silently.

What each test asserts, and how a case is written down (``mv`` says how math-verify grades it, so that
``bench/math_verify_conformance.py`` can replay the peer's own call):

* ``assert compare_strings(gold, pred, match_types=..., precision=..., strict=..., allow_set_relation_comp=...) ==
expected``
  (the helper of ``tests/test_all.py``; its defaults and its LaTeX config are read from its source):
  ``mv = {"kind": "compare_strings", ...}``; ``check = "verify"``;
* ``assert int(verify(parse(gold), parse(pred))) == result`` (``test_yujianll.py``): ``mv.kind = "verify_parse"``;
* ``assert parse(pred, [config]) == expected`` (``test_string_extraction.py``): ``mv.kind = "parse"`` with
  ``expect_list``; for rewardlab the gold is the matched string (the list's last item) and the label
  True, or, for an expected ``[]``, ``check = "extracts"`` with label False (nothing may be extracted);
* non-parametrized tests: ``x = parse(text, configs, ...)`` followed by ``assert len(x) == n``
  (``check = "extracts"``, label ``n > 0``) or ``assert x[0] == sympy.X(...)`` (gold = that value);
  ``assert [not] sympy_expr_eq(sympy..., sympy..., float_rounding=..., ...)`` (gold / pred written as
  text: ``Rational(1, 3)`` -> ``1/3``); ``assert compare_strings(...) == 1`` with literal arguments.
* tests built on ``unittest.mock.patch`` (timeouts, error propagation) label no answer: listed under
  ``excluded`` in the header, not as cases.

``config_dependent`` (with ``config_reason``): a case whose label a plain reward call cannot know.
Always for ``parse``/``sympy_expr_eq`` cases (the assertion is about parse output or sympy objects under
an explicit config, not about two strings being equivalent). For ``verify`` cases, the test's own
settings are compared with math-verify's out-of-the-box call, ``verify(parse(gold), parse(pred))``
(LaTeX + expression extraction with their default configs, ``float_rounding=6``, ``strict=True``,
``allow_set_relation_comp=False``): when the test's settings differ (every ``compare_strings`` call
does: its LaTeX config has ``boxed_match_priority=0``, and some pass ``match_types``, ``precision``,
``strict`` or ``allow_set_relation_comp``), the installed math-verify is run both ways, and the case is
config-dependent exactly when the default call does *not* give the label. So a setting that the label
does not need does not move a case out of the main count, and the labels that need a non-default
setting are counted apart. One more rule: when a test gives the *same* (gold, pred) both labels under
different settings (``test_strict``: ``f(x)`` vs ``f(y)`` is 0 with ``strict=True``, 1 with ``strict=False``;
``test_set_rel_assymetry``: ``allow_set_relation_comp``), the label is a function of the setting, and
every such row is config-dependent, including the one whose setting is the default.

Output: JSON lines. The first line is ``{"_meta": {...}}`` (source repo, commit, commit date, licence,
the math-verify version used for ``config_dependent``, counts, excluded tests); then one object per
case: ``id``, ``file``, ``test``, ``line``, ``param_index`` (index in the parametrize list, or the assert's
ordinal), ``gold``, ``pred``, ``expected`` (bool), ``check``, ``mv``, ``config_dependent``,
``config_reason``, ``settings`` (the test's non-default settings, in words). A sidecar ``.md`` beside it
names the source and licence for readers.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "data" / "math_verify_cases.jsonl"
SOURCE_REPO = "huggingface/Math-Verify"

# math-verify's out-of-the-box settings (math_verify.grader.verify / parser.parse signatures).
VERIFY_DEFAULTS = {"float_rounding": 6, "strict": True, "allow_set_relation_comp": False}


class ShapeError(Exception):
    """A test whose shape this script does not understand (never skipped silently)."""


# -- reading the checkout or git dir -------------------------------------------------------------

@dataclass
class Source:
    path: Path
    git_dir: Path | None  # bare git dir (files read with git show) or None for a work tree

    @classmethod
    def open(cls, path: Path) -> "Source":
        path = path.resolve()
        if (path / "tests").is_dir():
            return cls(path, None)
        if (path / "HEAD").is_file() and (path / "objects").is_dir():
            return cls(path, path)
        if (path / ".git").is_dir():
            return cls(path, None)
        raise SystemExit(f"{path}: neither a Math-Verify checkout (no tests/) nor a git directory")

    def _git(self, *args: str) -> str:
        base = ["git", f"--git-dir={self.git_dir}"] if self.git_dir else ["git", "-C", str(self.path)]
        return subprocess.run(base + list(args), check=True, capture_output=True, text=True).stdout

    def commit(self) -> tuple[str | None, str | None]:
        if self.git_dir is None and not (self.path / ".git").exists():
            return None, None  # a plain tree (an archive): never a parent repository's commit; see --commit
        try:
            out = self._git("log", "-1", "--format=%H %cI").split()
            return out[0], out[1]
        except (subprocess.CalledProcessError, FileNotFoundError, IndexError):
            return None, None

    def list_tests(self) -> list[str]:
        if self.git_dir:
            names = self._git("ls-tree", "-r", "--name-only", "HEAD", "tests/").split()
        else:
            names = [str(p.relative_to(self.path)) for p in (self.path / "tests").rglob("*.py")]
        return sorted(n for n in names if Path(n).name.startswith("test_") and n.endswith(".py"))

    def read(self, name: str) -> str | None:
        if self.git_dir:
            try:
                return self._git("show", f"HEAD:{name}")
            except subprocess.CalledProcessError:
                return None
        p = self.path / name
        return p.read_text(encoding="utf-8") if p.is_file() else None


def licence(src: Source) -> dict:
    """The repository's licence, from its licence file and pyproject (checked, not assumed)."""
    found: dict = {}
    for name in ("LICENSE", "LICENCE", "LICENSE.md", "LICENSE.txt"):
        text = src.read(name)
        if text:
            found["file"] = name
            if "Apache License" in text and "Version 2.0" in text:
                found["spdx"] = "Apache-2.0"
            elif "MIT License" in text or "Permission is hereby granted, free of charge" in text:
                found["spdx"] = "MIT"
            break
    py = src.read("pyproject.toml") or ""
    for line in py.splitlines():
        if line.strip().startswith("license"):
            found["pyproject"] = line.strip()
            break
    return found


def file_header_licence(text: str) -> str | None:
    """A licence named in a file's own header comment (it can differ from the repository's)."""
    head = text[:1500]
    if "MIT License" in head:
        who = next((ln.strip("# ").strip() for ln in head.splitlines() if "Copyright" in ln), "")
        return f"MIT License header ({who})" if who else "MIT License header"
    if "Apache License" in head:
        return "Apache-2.0 header"
    return None


# -- a literal evaluator for parametrize rows ----------------------------------------------------

def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return _name(node.value) + "." + node.attr
    raise ShapeError(f"line {getattr(node, 'lineno', '?')}: not a name: {ast.unparse(node)}")


def value(node: ast.AST):
    """Data from a parametrize element: literals, config calls as dicts, f-strings over math.fn(const)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [value(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = value(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v
    if isinstance(node, ast.Call):
        name = _name(node.func).split(".")[-1]
        if name.endswith("Config"):
            return {"__call__": name, "args": [value(a) for a in node.args],
                    "kwargs": {k.arg: value(k.value) for k in node.keywords}}
        if _name(node.func).startswith("math.") and not node.keywords:
            fn = getattr(math, _name(node.func)[5:])
            return fn(*[value(a) for a in node.args])
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(part.value)
            elif isinstance(part, ast.FormattedValue) and part.conversion == -1:
                spec = value(part.format_spec) if part.format_spec is not None else ""
                out.append(format(value(part.value), spec))
            else:
                raise ShapeError(f"line {node.lineno}: f-string part {ast.unparse(part)}")
        return "".join(out)
    raise ShapeError(f"line {getattr(node, 'lineno', '?')}: not a literal: {ast.unparse(node)[:120]}")


def sympy_text(node: ast.AST) -> tuple[str, str]:
    """(rewardlab text, sympy source) of a ``sympy.Integer/Rational/Float`` expression (with + - * /)."""
    if isinstance(node, ast.Call):
        fn = _name(node.func).split(".")[-1]
        args = [value(a) for a in node.args]
        src = f"{fn}({', '.join(repr(a) for a in args)})"
        if fn == "Integer" and len(args) == 1:
            return str(args[0]), src
        if fn == "Rational" and len(args) == 2:
            return f"{args[0]}/{args[1]}", src
        if fn == "Float" and len(args) == 1:
            return repr(float(args[0])), src
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return repr(node.value), repr(node.value)
    if isinstance(node, ast.BinOp):
        ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
        if type(node.op) in ops:
            lt, ls = sympy_text(node.left)
            rt, rs = sympy_text(node.right)
            op = ops[type(node.op)]
            return f"{lt} {op} {rt}", f"({ls}) {op} ({rs})"
    raise ShapeError(f"line {getattr(node, 'lineno', '?')}: not a sympy number: {ast.unparse(node)}")


# -- the compare_strings helper of tests/test_all.py ---------------------------------------------

@dataclass
class Helper:
    defaults: dict          # keyword defaults of compare_strings
    latex_kwargs: dict      # LatexExtractionConfig(...) kwargs inside it
    expr_kwargs: dict       # ExprExtractionConfig(...) kwargs inside it


def read_helper(text: str) -> Helper:
    tree = ast.parse(text)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compare_strings"), None)
    if fn is None:
        raise ShapeError("tests/test_all.py has no compare_strings helper")
    args = fn.args.args
    defaults = {a.arg: value(d) for a, d in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults)}
    latex = expr = None
    parse_calls = 0
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            name = _name(n.func) if isinstance(n.func, (ast.Name, ast.Attribute)) else ""
            if name == "LatexExtractionConfig":
                latex = {k.arg: value(k.value) for k in n.keywords}
            elif name == "ExprExtractionConfig":
                expr = {k.arg: value(k.value) for k in n.keywords}
            elif name == "parse":
                parse_calls += 1
                if len(n.args) != 2 or n.keywords:
                    raise ShapeError("compare_strings: parse() is not called as parse(text, targets)")
            elif name == "verify":
                got = {k.arg for k in n.keywords}
                if got != {"float_rounding", "strict", "allow_set_relation_comp"}:
                    raise ShapeError(f"compare_strings: verify() keywords changed: {sorted(got)}")
    if latex is None or expr is None or parse_calls != 2:
        raise ShapeError("compare_strings: not the expected parse(gold/pred, [Latex/Expr configs]) + verify shape")
    return Helper(defaults, latex, expr)


# -- one test file -------------------------------------------------------------------------------

def _is_patch(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute)):
            if _name(n.func).split(".")[-1] == "patch":
                return True
    return False


def _parametrize(fn: ast.FunctionDef) -> tuple[list[str], list[tuple[int, list]]] | None:
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "parametrize":
            names = [s.strip() for s in value(d.args[0]).split(",")] if isinstance(d.args[0], ast.Constant) \
                else value(d.args[0])
            rows = d.args[1]
            if not isinstance(rows, (ast.List, ast.Tuple)):
                raise ShapeError(f"line {d.lineno}: parametrize values are not a literal list")
            return names, [(e.lineno, value(e)) for e in rows.elts]
    return None


def _single_assert(fn: ast.FunctionDef) -> ast.Assert:
    asserts = [n for n in fn.body if isinstance(n, ast.Assert)]
    if len(asserts) != 1 or len(fn.body) != 1:
        raise ShapeError(f"{fn.name} (line {fn.lineno}): a parametrized test that is not one assert")
    return asserts[0]


def _arg(node: ast.AST, params: dict):
    """A call argument: a parameter name or a literal."""
    if isinstance(node, ast.Name):
        if node.id not in params:
            raise ShapeError(f"line {node.lineno}: unknown name {node.id}")
        return params[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_arg(e, params) for e in node.elts]
    return value(node)


def _compare_strings_case(call: ast.Call, params: dict, helper: Helper) -> tuple[str, str, dict]:
    gold = _arg(call.args[0], params)
    pred = _arg(call.args[1], params)
    kw = dict(helper.defaults)
    for k in call.keywords:
        kw[k.arg] = _arg(k.value, params)
    mv = {"kind": "compare_strings", "match_types": kw["match_types"], "precision": kw["precision"],
          "strict": kw["strict"], "allow_set_relation_comp": kw["allow_set_relation_comp"],
          "latex_config": helper.latex_kwargs, "expr_config": helper.expr_kwargs}
    return gold, pred, mv


def _fmt(v) -> str:
    """A config value (``{"__call__": ...}`` dicts as calls) as Python-like text."""
    if isinstance(v, dict) and "__call__" in v:
        parts = [_fmt(a) for a in v["args"]] + [f"{k}={_fmt(x)}" for k, x in v["kwargs"].items()]
        return f"{v['__call__']}({', '.join(parts)})"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return repr(v)


def _settings(mv: dict) -> str:
    """The test's settings that differ from math-verify's out-of-the-box call, in words."""
    kind = mv["kind"]
    if kind == "compare_strings":
        out = ["extraction " + "+".join(mv["match_types"])]
        if "latex" in mv["match_types"] and mv["latex_config"]:
            out.append("LatexExtractionConfig(" + ", ".join(f"{k}={v!r}" for k, v in mv["latex_config"].items()) + ")")
        if mv["precision"] != VERIFY_DEFAULTS["float_rounding"]:
            out.append(f"float_rounding={mv['precision']}")
        if mv["strict"] != VERIFY_DEFAULTS["strict"]:
            out.append(f"strict={mv['strict']}")
        if mv["allow_set_relation_comp"] != VERIFY_DEFAULTS["allow_set_relation_comp"]:
            out.append(f"allow_set_relation_comp={mv['allow_set_relation_comp']}")
        return ", ".join(out)
    if kind == "verify_parse":
        return ", ".join(f"{k}={v!r}" for k, v in mv.get("verify_kwargs", {}).items()) or "defaults"
    if kind == "parse":
        cfgs = _fmt(mv["configs"]) if mv.get("configs") else ""
        extra = ", ".join(f"{k}={v!r}" for k, v in mv.get("kwargs", {}).items())
        return "parse(" + ", ".join(x for x in (cfgs, extra) if x) + ")"
    if kind == "sympy_expr_eq":
        return "sympy_expr_eq(" + ", ".join(f"{k}={v!r}" for k, v in mv["kwargs"].items()) + ")"
    return kind


def _parse_call(call: ast.Call, params: dict) -> dict:
    """``parse(text, configs?, **kw)`` as data."""
    text = _arg(call.args[0], params)
    configs = _arg(call.args[1], params) if len(call.args) > 1 else None
    if isinstance(configs, dict):
        configs = [configs]
    kw = {k.arg: _arg(k.value, params) for k in call.keywords}
    if "parsing_timeout" in kw:
        raise ShapeError(f"line {call.lineno}: parse(..., parsing_timeout=...) is a timeout test")
    return {"text": text, "configs": configs, "kwargs": kw}


def _call_name(node: ast.AST) -> str:
    return (_name(node.func).split(".")[-1]
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) else "")


def _parametrized_cases(fn: ast.FunctionDef, names: list[str], rows: list[tuple[int, list]],
                        helper: Helper) -> list[dict]:
    a = _single_assert(fn)
    t = a.test
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)
            and isinstance(t.comparators[0], ast.Name)):
        raise ShapeError(f"{fn.name} (line {a.lineno}): assert is not `<call> == <param>`")
    left = t.left
    if _call_name(left) == "int":
        left = left.args[0]
    label_name = t.comparators[0].id
    out = []
    for i, (line, row) in enumerate(rows):
        if len(row) != len(names):
            raise ShapeError(f"{fn.name} line {line}: {len(row)} values for {names}")
        p = dict(zip(names, row))
        c: dict = {"line": line, "param_index": i}
        name = _call_name(left)
        if name == "compare_strings":
            gold, pred, mv = _compare_strings_case(left, p, helper)
            c.update(gold=gold, pred=pred, expected=bool(p[label_name]), check="verify", mv=mv)
        elif name == "verify" and all(_call_name(x) == "parse" for x in left.args[:2]):
            g, q = (_parse_call(x, p) for x in left.args[:2])
            if g["configs"] or q["configs"] or g["kwargs"] or q["kwargs"]:
                raise ShapeError(f"{fn.name}: verify(parse(..., config), ...) not handled")
            mv = {"kind": "verify_parse", "verify_kwargs": {k.arg: _arg(k.value, p) for k in left.keywords}}
            c.update(gold=g["text"], pred=q["text"], expected=bool(p[label_name]), check="verify", mv=mv)
        elif name == "parse":
            pc = _parse_call(left, p)
            want = p[label_name]
            if not isinstance(want, list):
                raise ShapeError(f"{fn.name} line {line}: parse(...) compared with a non-list")
            mv = {"kind": "parse", "configs": pc["configs"], "kwargs": pc["kwargs"], "expect": "equals_list",
                  "expect_list": want}
            if want:
                c.update(gold=str(want[-1]), pred=pc["text"], expected=True, check="verify", mv=mv)
            else:
                c.update(gold=None, pred=pc["text"], expected=False, check="extracts", mv=mv)
        else:
            raise ShapeError(f"{fn.name} (line {a.lineno}): unknown graded call {ast.unparse(left)[:80]}")
        out.append(c)
    return out


def _plain_cases(fn: ast.FunctionDef, helper: Helper) -> list[dict]:
    """Asserts of a non-parametrized test, in order."""
    parsed: dict[str, dict] = {}
    out = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and _call_name(stmt.value) == "parse":
            parsed[stmt.targets[0].id] = _parse_call(stmt.value, {})
            continue
        if not isinstance(stmt, ast.Assert):
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            raise ShapeError(f"{fn.name} line {stmt.lineno}: statement not understood: {ast.unparse(stmt)[:80]}")
        t = stmt.test
        c: dict = {"line": stmt.lineno, "param_index": len(out)}
        negated = isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)
        inner = t.operand if negated else t
        if _call_name(inner) == "sympy_expr_eq":
            (gt, gs), (pt, ps) = sympy_text(inner.args[0]), sympy_text(inner.args[1])
            kw = {k.arg: value(k.value) for k in inner.keywords}
            mv = {"kind": "sympy_expr_eq", "gold_sympy": gs, "pred_sympy": ps, "kwargs": kw}
            c.update(gold=gt, pred=pt, expected=not negated, check="verify", mv=mv)
        elif isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            left, right = t.left, t.comparators[0]
            if _call_name(left) == "compare_strings" and isinstance(right, ast.Constant):
                gold, pred, mv = _compare_strings_case(left, {}, helper)
                c.update(gold=gold, pred=pred, expected=bool(right.value), check="verify", mv=mv)
            elif _call_name(left) == "len" and isinstance(left.args[0], ast.Name) and left.args[0].id in parsed \
                    and isinstance(right, ast.Constant):
                pc = parsed[left.args[0].id]
                mv = {"kind": "parse", "configs": pc["configs"], "kwargs": pc["kwargs"], "expect": "len",
                      "expect_len": right.value}
                c.update(gold=None, pred=pc["text"], expected=right.value > 0, check="extracts", mv=mv)
            elif isinstance(left, ast.Subscript) and isinstance(left.value, ast.Name) and left.value.id in parsed \
                    and value(left.slice) == 0:
                pc = parsed[left.value.id]
                gt, gs = sympy_text(right)
                mv = {"kind": "parse", "configs": pc["configs"], "kwargs": pc["kwargs"], "expect": "first_equals",
                      "expect_sympy": gs}
                c.update(gold=gt, pred=pc["text"], expected=True, check="verify", mv=mv)
            else:
                raise ShapeError(f"{fn.name} line {stmt.lineno}: assert not understood: {ast.unparse(t)[:100]}")
        else:
            raise ShapeError(f"{fn.name} line {stmt.lineno}: assert not understood: {ast.unparse(t)[:100]}")
        out.append(c)
    return out


def extract_file(name: str, text: str, helper: Helper) -> tuple[list[dict], list[dict]]:
    """(cases, excluded tests) of one test file."""
    tree = ast.parse(text)
    cases, excluded = [], []
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test")):
            continue
        if any(_is_patch(d) for d in fn.decorator_list) or _is_patch(fn):
            excluded.append({"file": name, "test": fn.name, "line": fn.lineno,
                             "reason": "built on unittest.mock.patch (timeouts / error propagation): labels no answer"})
            continue
        par = _parametrize(fn)
        found = _parametrized_cases(fn, *par, helper) if par else _plain_cases(fn, helper)
        for c in found:
            c["settings"] = _settings(c["mv"])
            cases.append({"file": name, "test": fn.name, **c})
    return cases, excluded


# -- config dependence ---------------------------------------------------------------------------

def _mv_default(gold: str, pred: str) -> bool | None:
    """math-verify out of the box: verify(parse(gold), parse(pred)); None if it raised."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse(gold), parse(pred)))
    except Exception:  # noqa: BLE001
        return None


def classify(case: dict) -> None:
    mv = case["mv"]
    if mv["kind"] in ("parse", "sympy_expr_eq"):
        case["config_dependent"] = True
        case["config_reason"] = (("asserts on parse output under " + case["settings"] if mv["kind"] == "parse"
                                  else "asserts on sympy objects with " + case["settings"])
                                 + ", not on verify(gold, pred)")
        return
    if mv["kind"] == "verify_parse" and not mv["verify_kwargs"]:
        case["config_dependent"] = False
        case["config_reason"] = "math-verify's default call"
        return
    got = _mv_default(case["gold"], case["pred"])
    if got == case["expected"]:
        case["config_dependent"] = False
        case["config_reason"] = f"test uses {case['settings']}; math-verify's default call gives the same label"
    else:
        case["config_dependent"] = True
        case["config_reason"] = (f"the label needs {case['settings']}: math-verify's default call "
                                 f"verify(parse(gold), parse(pred)) gives {got}")


def flipped(cases: list[dict]) -> None:
    """A test that gives the same (gold, pred) both labels under different settings shows that its label
    is a function of the setting: every such row is config-dependent (``test_strict``'s ``f(x)``/``f(y)``
    under ``strict=True``/``False``, ``test_set_rel_assymetry``'s ``allow_set_relation_comp=True``/``False``),
    also the row whose setting is math-verify's default."""
    groups: dict = {}
    for c in cases:
        groups.setdefault((c["file"], c["test"], c["gold"], c["pred"]), []).append(c)
    for rows in groups.values():
        if len({c["expected"] for c in rows}) < 2:
            continue
        both = "; ".join(f"{c['expected']} under {c['settings']}" for c in rows)
        for c in rows:
            c["config_dependent"] = True
            c["config_reason"] = f"the test gives this pair both labels, by setting: {both}"


# -- main ----------------------------------------------------------------------------------------

def extract(src: Source) -> tuple[dict, list[dict]]:
    files = src.list_tests()
    helper_text = src.read("tests/test_all.py")
    if helper_text is None:
        raise SystemExit("no tests/test_all.py: not a Math-Verify tree")
    helper = read_helper(helper_text)
    cases, excluded, per_file_licence, empty = [], [], {}, []
    for name in files:
        text = src.read(name) or ""
        try:
            got, exc = extract_file(name, text, helper)
        except ShapeError as e:
            raise SystemExit(f"{name}: {e}") from None
        cases += got
        excluded += exc
        if not got and not exc:
            empty.append(name)
        lic = file_header_licence(text)
        if lic:
            per_file_licence[name] = lic
    logging.disable(logging.WARNING)  # math-verify logs its timeouts and parse failures
    for i, c in enumerate(cases):
        c["id"] = f"mvt-{i:03d}"
        classify(c)
    flipped(cases)
    import importlib.metadata as md

    commit, date = src.commit()
    meta = {
        "source": f"https://github.com/{SOURCE_REPO}",
        "repo": SOURCE_REPO,
        "commit": commit,
        "commit_date": date,
        "licence": licence(src),
        "file_header_licences": per_file_licence,
        "what": "test DATA (inputs and labels) read from the repository's tests/ with ast; no code copied",
        "math_verify_version_for_config_dependent": md.version("math-verify"),
        "extracted_by": "bench/extract_math_verify_cases.py",
        "cases": len(cases),
        "config_dependent": sum(c["config_dependent"] for c in cases),
        "per_file": {f: sum(c["file"] == f for c in cases) for f in files if any(c["file"] == f for c in cases)},
        "excluded": excluded,
        "files_without_cases": empty,
    }
    order = ["id", "file", "test", "line", "param_index", "gold", "pred", "expected", "check", "config_dependent",
             "config_reason", "settings", "mv"]
    return meta, [{k: c[k] for k in order} for c in cases]


def write_md(path: Path, meta: dict, cases: list[dict]) -> None:
    lic = meta["licence"]
    lines = [
        "# Math-Verify's own test cases (data for bench/math_verify_conformance.py)",
        "",
        f"* Source: {meta['source']} at commit `{meta['commit']}` ({meta['commit_date']}), folder `tests/`.",
        f"* Licence: {lic.get('spdx', '?')} (repository `{lic.get('file', '?')}` file; "
        f"pyproject: `{lic.get('pyproject', '?')}`)."
        + "".join(f" `{f}` also carries its own {v}." for f, v in meta["file_header_licences"].items())
        + " Both permit this use; the source and licence are named here and in the JSONL's first line.",
        "* What is here: the inputs and labels of the peer's tests, as data (no code copied), extracted with",
        "  `bench/extract_math_verify_cases.py PATH` (reads the test sources with `ast`).",
        f"* {meta['cases']} cases; {meta['config_dependent']} config-dependent (their label needs a non-default "
        "math-verify setting, or the test asserts on parse output; see `config_reason`), by math-verify "
        f"{meta['math_verify_version_for_config_dependent']}.",
        "",
        "| file | cases | config-dependent |",
        "|---|---:|---:|",
    ]
    for f, n in meta["per_file"].items():
        lines.append(f"| {f} | {n} | {sum(c['config_dependent'] for c in cases if c['file'] == f)} |")
    lines += ["", "Not cases (they label no answer):", ""]
    lines += [f"* `{e['file']}::{e['test']}`: {e['reason']}" for e in meta["excluded"]]
    lines += [f"* `{f}`: no test" for f in meta["files_without_cases"]]
    lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="Math-Verify checkout or git directory")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--commit", default=None, help="the source commit, for a tree without git metadata")
    args = ap.parse_args(argv)
    meta, cases = extract(Source.open(args.path))
    if args.commit:
        meta["commit"] = args.commit
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"_meta": meta}, ensure_ascii=False) + "\n")
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    write_md(args.out.with_suffix(".md"), meta, cases)
    print(f"{args.out}: {meta['cases']} cases from {meta['repo']}@{meta['commit']} "
          f"({meta['config_dependent']} config-dependent); excluded: "
          + ", ".join(f"{e['file']}::{e['test']}" for e in meta["excluded"]))
    for f, n in meta["per_file"].items():
        print(f"  {f}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
