"""Size and coupling facts of the source tree (issue 25), checked on the source with ``ast``.

The import graph's rules live in ``tests/test_imports.py``; these are the facts that keep each file
readable: a file says one thing (at most 600 lines), a function fits on a screen (at most 80 lines;
the eval runner's stages at most 60), the training loop is a page of stage calls (at most 350
lines), ``rewardlab.algos`` only re-exports, and no module reaches into another's private names
(a leading underscore means "not part of my interface": an importer of it breaks on a refactor that
the owner thought was internal).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "rewardlab"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_LINES_OF = {"train/loop.py": 350, "algos/__init__.py": 60}
MAX_FUNCTION_LINES_OF = {"eval/runner.py": 60}


def _sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted(ROOT.rglob("*.py"))}


def _module(rel: str) -> str:
    parts = ["rewardlab", *rel[:-3].split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_file_is_over_its_line_budget() -> None:
    over = []
    for rel, text in _sources().items():
        limit = MAX_LINES_OF.get(rel, MAX_FILE_LINES)
        n = len(text.splitlines())
        if n > limit:
            over.append(f"{rel}: {n} lines > {limit}")
    assert not over, "\n".join(over)


def test_no_function_is_over_its_line_budget() -> None:
    over = []
    for rel, text in _sources().items():
        limit = MAX_FUNCTION_LINES_OF.get(rel, MAX_FUNCTION_LINES)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    over.append(f"{rel}:{node.lineno} {node.name}: {n} lines > {limit}")
    assert not over, "\n".join(over)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    """The absolute module named by ``from X import ...`` inside ``importer``, or None outside rewardlab."""
    if node.level == 0:
        return node.module if node.module and node.module.split(".")[0] == "rewardlab" else None
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports(sources: dict[str, str]) -> list[str]:
    """Every ``from other_module import _name`` and ``other_module._name`` between two rewardlab modules."""
    found = []
    for rel, text in sources.items():
        importer = _module(rel)
        tree = ast.parse(text)
        aliases: dict[str, str] = {}  # local name -> rewardlab module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(importer, rel.endswith("__init__.py"), node)
                if target is None:
                    continue
                for a in node.names:
                    full = f"{target}.{a.name}"
                    if (ROOT.parent / Path(*full.split("."))).with_suffix(".py").is_file() or \
                            (ROOT.parent / Path(*full.split(".")) / "__init__.py").is_file():
                        aliases[a.asname or a.name] = full  # a submodule imported by name
                    elif a.name.startswith("_") and not a.name.startswith("__") and target != importer:
                        found.append(f"{rel}: from {target} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "rewardlab" and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and aliases[node.value.id] != importer):
                found.append(f"{rel}: {aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_no_module_imports_private_names_of_another() -> None:
    found = private_imports(_sources())
    assert not found, "\n".join(found)


def test_the_private_import_rule_can_fail() -> None:
    """The checker itself, on a made-up pair of modules: each way of reaching in is found."""
    fake = {
        "rollout/multiturn.py": "from rewardlab.rollout.hf import _decode, public\nfrom . import hf\nx = hf._step\n",
        "rollout/hf.py": "from rewardlab.rollout.hf import _own\n",  # a module's own private names are its own
        "train/loop.py": "from ..rollout.hf import _sample\n",
    }
    assert private_imports(fake) == [
        "rollout/multiturn.py: from rewardlab.rollout.hf import _decode",
        "rollout/multiturn.py: rewardlab.rollout.hf._step",
        "train/loop.py: from rewardlab.rollout.hf import _sample",
    ]


def test_every_package_ships_in_the_wheel() -> None:
    """pyproject.toml lists its packages by hand: a new subpackage (rewards/pool/, rewards/judge/) missing from the
    list works in the editable checkout and is absent from an installed wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {_module(p.relative_to(ROOT).as_posix()) for p in ROOT.rglob("__init__.py")}
    assert found <= listed, f"missing from pyproject.toml's packages: {sorted(found - listed)}"
