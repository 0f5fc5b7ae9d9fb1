"""The import rules between rewardlab's packages (issue 13), checked on the source with ``ast``.

Every module under ``rewardlab/`` is parsed and each of its imports (at the top, inside functions,
under ``if TYPE_CHECKING``: all of them) is mapped to the package of the imported module. An import
from one package to another must be an arrow of :data:`ALLOWED`, and the package graph must have
no cycle. Packages are the concerns of docs/design.md:

* utilities, which import nothing of rewardlab but ``errors``: errors, locks, logging, plots, jsonl, fields, seeds
  (``testing`` may also import models, tasks and rewards);
* ``algos`` (pure tensor code), ``models``, ``sandbox`` (the parent-side client of the code sandbox),
  ``rewards`` (which may use the sandbox), ``tasks`` (datasets and their rewards), ``rollout``
  (generation engines), then ``train`` and ``eval``, which never import each other;
* on top: ``commands``, ``cli`` and ``server`` may import anything; ``adapters`` only rewards.

Nothing may import a top package. The map also accepts the flat modules that predate the packages
(``rewardlab/train.py``, ``evaluate.py``, ...), so the rules hold during and after the move.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rewardlab"

FLAT = {  # first dotted part under rewardlab -> package (flat modules of the old layout included)
    "train": "train", "config": "train", "checkpoint": "train", "distributed": "train",
    "eval": "eval", "passk": "eval",
    "rollout": "rollout",
    "sandbox": "sandbox", "isolation": "sandbox",
    "__main__": "cli",
}
UTILITIES = {"errors", "locks", "logging", "plots", "jsonl", "fields", "seeds", "forkserver", "bounded"}
TOP = {"commands", "cli", "server"}
ALLOWED: dict[str, set[str]] = {
    **{u: {"errors"} for u in UTILITIES},
    "testing": {"errors", "models", "tasks", "rewards"},
    "sandbox": {"errors"},
    "rewards": {"errors", "sandbox", "jsonl", "forkserver"},
    "algos": {"errors"},
    "models": {"errors"},
    "tasks": {"models", "errors", "rewards", "jsonl"},
    # environments: rows (tasks.Row) and their own rewards (RewardResult) from outside packages
    "envs": {"tasks", "rewards", "errors", "seeds", "bounded"},
    "rollout": {"models", "errors", "fields", "seeds", "bounded"},
    # train and eval run a tool rollout's code in the sandbox (--tools python)
    "train": {"algos", "rewards", "rollout", "sandbox", "tasks", "envs", "models", "logging", "plots", "locks",
              "errors", "fields", "seeds", "forkserver"},
    "eval": {"rewards", "rollout", "sandbox", "tasks", "envs", "models", "plots", "locks", "errors", "jsonl",
             "fields",
             "seeds"},
    "adapters": {"rewards", "errors"},
}
ALWAYS = {"root"}  # rewardlab/__init__.py (the version string): importable from anywhere
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
    # (importer, imported): why it is still there. Keep this list empty; each entry is a debt, and
    # test_known_exceptions_are_still_needed fails once the import is gone (then delete the entry).
    ("plots", "logging"): "plots reads the run's metrics.jsonl with logging.read_jsonl (utility to utility)",
}


def package_of(module: str) -> str:
    """``rewardlab.rewards.math.slow`` -> ``rewards``; ``rewardlab`` -> ``root``."""
    parts = module.split(".")
    assert parts[0] == "rewardlab", module
    if len(parts) == 1:
        return "root"
    return FLAT.get(parts[1], parts[1])


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    p = ROOT.parent.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def imports_of(path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """``(imported rewardlab module, line)`` for every import statement of the file, wherever it is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # "from pkg import mod" imports the module pkg.mod; "from pkg import name" the package pkg
            subs = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
            if len(subs) < len(node.names):
                out.append((target, node.lineno))
            out += [(s, node.lineno) for s in subs]
    return [(m, line) for m, line in out if m == "rewardlab" or m.startswith("rewardlab.")]


def package_graph() -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> where ("file:line imports module")."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        src = package_of(module_name(path))
        for mod, line in imports_of(path):
            dst = package_of(mod)
            if dst != src:
                edges.setdefault((src, dst), []).append(f"{path.relative_to(ROOT.parent)}:{line} imports {mod}")
    return edges


def violations(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    bad = []
    for (src, dst), where in sorted(edges.items()):
        if dst in ALWAYS or (src, dst) in KNOWN_EXCEPTIONS:
            continue
        if dst in TOP and src not in TOP:
            bad.append(f"{src} -> {dst}: nothing below the top may import it: " + "; ".join(where[:3]))
        elif src not in TOP and dst not in ALLOWED.get(src, set()):
            bad.append(f"{src} -> {dst} is not an allowed arrow: " + "; ".join(where[:3]))
    return bad


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one package (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_parses_and_maps_to_a_known_package():
    known = set(ALLOWED) | TOP | ALWAYS | {"testing", "adapters"}
    unknown = sorted({package_of(module_name(p)) for p in ROOT.rglob("*.py")} - known)
    assert not unknown, f"modules in packages the import rules do not know: {unknown} (add them to ALLOWED)"


def test_imports_follow_the_allowed_arrows():
    bad = violations(package_graph())
    assert not bad, "forbidden imports between packages:\n" + "\n".join(bad)


def test_no_import_cycle_between_packages():
    found = cycles(package_graph())
    assert not found, f"import cycles between packages: {found}"


def test_known_exceptions_are_still_needed():
    edges = package_graph()
    stale = [k for k in KNOWN_EXCEPTIONS if k not in edges]
    assert not stale, f"these known exceptions no longer occur: remove them from KNOWN_EXCEPTIONS: {stale}"


def test_the_checker_catches_a_forbidden_arrow_and_a_cycle():
    edges = {("rewards", "train"): ["rewardlab/rewards/x.py:1 imports rewardlab.train"],
             ("train", "rewards"): ["rewardlab/train/loop.py:1 imports rewardlab.rewards"],
             ("adapters", "commands"): ["rewardlab/adapters/x.py:1 imports rewardlab.commands.train"]}
    bad = violations(edges)
    assert any(b.startswith("rewards -> train") for b in bad) and any(b.startswith("adapters -> commands") for b in bad)
    assert not any(b.startswith("train -> rewards") for b in bad)
    assert cycles(edges) == [["rewards", "train"]]


@pytest.mark.parametrize("source,expected", [
    ("from rewardlab import algos, models\n", ["rewardlab.algos", "rewardlab.models"]),
    ("from rewardlab import errors, __version__\n", ["rewardlab", "rewardlab.errors"]),
    ("from rewardlab import __version__\n", ["rewardlab"]),
    ("def f():\n    import rewardlab.rewards.pool as p\n", ["rewardlab.rewards.pool"]),
    ("from .base import RewardResult\n", ["rewardlab.rewards.base"]),
])
def test_imports_are_resolved_to_modules(source, expected):
    assert [m for m, _ in imports_of(ROOT / "rewards" / "probe.py", source)] == expected


def module_graph() -> dict[tuple[str, str], list[str]]:
    """(importer module, imported module) -> where, for every import of every module (lazy ones included)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        src = module_name(path)
        for mod, line in imports_of(path):
            if mod != src:
                edges.setdefault((src, mod), []).append(f"{path.relative_to(ROOT.parent)}:{line}")
    return edges


MODULE_CYCLES_KNOWN: dict[tuple[str, ...], str] = {
    # a module cycle still there, and why. Keep this list empty: test_known_module_cycles_are_still_there fails
    # once the cycle is gone (then delete the entry).
}


def test_no_import_cycle_between_modules():
    """No module imports, however lazily, a module that imports it back (issue 37: the circle
    async_rollout -> async_worker -> build and settings -> objectives -> settings are gone)."""
    found = [tuple(c) for c in cycles(module_graph()) if tuple(c) not in MODULE_CYCLES_KNOWN]
    assert not found, f"import cycles between modules: {found}"


def test_known_module_cycles_are_still_there():
    stale = [c for c in MODULE_CYCLES_KNOWN if c not in {tuple(x) for x in cycles(module_graph())}]
    assert not stale, f"these module cycles are gone: remove them from MODULE_CYCLES_KNOWN: {stale}"
