"""The docs name the tree as it is (issue 25): no page names a path that is gone, and docs/design.md's
layout names every module of ``rewardlab/``.

Two checks, on the text alone:

* every path a page names exists. A path is a token with a ``/`` whose first part is a folder of the
  repository (``rewardlab/train/build.py``, ``tests/test_imports.py``, ``evals/``) or a package of
  rewardlab written without the prefix (``rewards/pool/``, ``train/update.py``: then a folder or a
  ``.py`` file, looked up under ``rewardlab/``). Metric names (``rollout/logp_abs_diff``) and run files
  (``eval/heldout.json``) have neither form and are not paths; templates (``tests/test_<name>.py``)
  are skipped;
* the ``rewardlab/`` block of design.md's layout: each entry (two spaces in) names paths under
  ``rewardlab/`` in its first column, and the ``.py`` files of its text lie inside that path (a single
  folder) or beside it. Each named path must exist, and every module of the package that git tracks
  must be named, except ``__init__.py`` files and the modules of a folder whose entry lists none of
  them (``commands/``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "rewardlab"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DESIGN = ROOT / "docs" / "design.md"
REPO_DIRS = {"rewardlab", "tests", "bench", "evals", "sandbox", "docs", ".ci"}
SUBPACKAGES = {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
TOKEN = re.compile(r"[A-Za-z0-9_.\-/]+")
TEMPLATE = set("<{*[")


def named_paths(text: str) -> list[tuple[int, str, Path]]:
    """(line, token, the path it names) for every path-like token of ``text``."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in TOKEN.finditer(line):
            token = m.group().rstrip(".,")
            if "/" not in token or token.startswith("/") or "//" in token:
                continue
            after = line[m.start() + len(token):m.start() + len(token) + 1]
            if after in TEMPLATE:
                continue
            first = token.split("/")[0]
            if first in REPO_DIRS:
                out.append((lineno, token, ROOT / token))
            elif first in SUBPACKAGES and token.endswith(("/", ".py")):
                out.append((lineno, token, PKG / token))
    return out


def layout_entries(text: str) -> list[tuple[list[str], str]]:
    """design.md's ``rewardlab/`` block: (first-column names, the entry's text) per entry."""
    lines = text.splitlines()
    start = lines.index("rewardlab/") + 1
    entries: list[tuple[list[str], str]] = []
    for line in lines[start:]:
        if not line.startswith(" ") or line.startswith("```"):
            break
        if line.startswith("  ") and not line.startswith("   "):
            head, _, rest = line[2:].partition("  ")
            parts = [part.strip().split(" ", 1) for part in head.split(",")]  # "testing.py (tiny models)"
            entries.append(([part[0] for part in parts], " ".join([*(part[1] for part in parts if len(part) > 1),
                                                                   rest.strip()]).strip()))
        else:
            names, rest = entries[-1]
            entries[-1] = (names, f"{rest} {line.strip()}".strip())
    return entries


def layout_paths(text: str) -> tuple[set[Path], set[Path], set[Path]]:
    """(every path the layout names, the modules it names, the folders whose modules it does not list)."""
    named: set[Path] = set()
    modules: set[Path] = set()
    whole: set[Path] = set()
    for names, rest in layout_entries(text):
        heads = [PKG / n for n in names]
        named.update(heads)
        base = heads[0] if len(names) == 1 and names[0].endswith("/") else PKG
        listed = {base / m for m in re.findall(r"(?<![\w/.])[\w/]+\.py\b", rest)}
        for head in heads:
            if head.suffix == ".py":
                modules.add(head)
            elif base == PKG or not listed:
                whole.add(head)
        named.update(listed)
        modules.update(listed)
    return named, modules, whole


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_path_a_page_names_exists(doc):
    missing = [f"{doc.name}:{n}: {tok}" for n, tok, path in named_paths(doc.read_text()) if not path.exists()]
    assert not missing, "paths named in docs that are not in the tree:\n" + "\n".join(missing)


def test_layout_names_only_paths_that_exist():
    named, _, _ = layout_paths(DESIGN.read_text())
    missing = sorted(str(p.relative_to(ROOT)) for p in named if not p.exists())
    assert not missing, f"docs/design.md's layout names paths that are not in the tree: {missing}"


def committed_modules() -> list[Path]:
    """The ``.py`` files of ``rewardlab/`` that git tracks (a file still being written is not in the tree yet)."""
    try:
        out = subprocess.run(["git", "ls-files", "--", "rewardlab/*.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.splitlines() if (ROOT / line).exists()]


def test_layout_names_every_module():
    _, modules, whole = layout_paths(DESIGN.read_text())
    unnamed = sorted(str(p.relative_to(ROOT)) for p in committed_modules()
                     if p.name != "__init__.py" and p not in modules and p.parent not in whole)
    assert not unnamed, f"modules docs/design.md's layout does not name (add them to their entry): {unnamed}"


def test_the_checks_catch_a_stale_path():
    """The parsers see what they are meant to: a stale module, short forms, and an unnamed module."""
    stale = named_paths("see `rewardlab/algos.py`, `rewards/pool.py` and rollout/logp_abs_diff, `tests/test_<x>.py`")
    assert [(tok, path.exists()) for _, tok, path in stale] == [("rewardlab/algos.py", False),
                                                                 ("rewards/pool.py", False)]
    layout = ("rewardlab/\n  cli.py, commands/   click\n  plots.py (charts)\n"
              "  algos/   loss.py (KL),\n           nope.py\n```\n")
    named, modules, whole = layout_paths(layout)
    assert PKG / "algos" / "nope.py" in named and not (PKG / "algos" / "nope.py").exists()
    assert modules == {PKG / "cli.py", PKG / "plots.py", PKG / "algos" / "loss.py", PKG / "algos" / "nope.py"}
    assert whole == {PKG / "commands"}


# --- words generated from the code: the presets are listed from rewardlab.algos.PRESETS, never by hand ---


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text))


def test_algo_help_names_every_preset():
    from click.testing import CliRunner

    from rewardlab.algos import PRESETS
    from rewardlab.commands.train import train

    algo = next(p for p in train.params if p.name == "algo")
    assert set(PRESETS) <= words(algo.help), sorted(set(PRESETS) - words(algo.help))
    shown = CliRunner().invoke(train, ["--help"], terminal_width=80)
    assert shown.exit_code == 0
    options = shown.output.split("All settings")[0]  # the options block, before the settings epilog
    assert set(PRESETS) <= words(options), sorted(set(PRESETS) - words(options))


def test_no_docstring_lists_presets_by_hand():
    """The package docstrings either list every preset (rewardlab.algos, generated) or none: a hand-written
    short list ("GRPO, Dr. GRPO, DAPO or GSPO") goes stale with the next preset."""
    import rewardlab
    import rewardlab.algos
    import rewardlab.cli
    import rewardlab.commands.train
    import rewardlab.train
    import rewardlab.train.loop
    from rewardlab.algos import PRESETS

    assert set(PRESETS) <= words(rewardlab.algos.__doc__)
    modules = (rewardlab, rewardlab.train, rewardlab.train.loop, rewardlab.commands.train)
    texts = {m.__name__: m.__doc__ for m in modules}
    texts["rewardlab train (its help)"] = rewardlab.commands.train.train.help
    texts["rewardlab --help's train row"] = rewardlab.cli.COMMANDS["train"][2]
    stale = [name for name, text in texts.items() if re.search(r"Dr\. GRPO,? (?:/ )?DAPO", text or "")]
    assert not stale, f"hand-written preset lists in {stale}"
