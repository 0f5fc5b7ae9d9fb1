"""Attribute docstrings of a dataclass: the string literal written under each field.

Python keeps no docstring for a class attribute, so the settings classes (``TrainConfig``'s settings,
``algos.Algo``, ``EvalConfig``, ``ToolSettings``) are read from their source: a field annotated in the
class body and followed at once by a string literal has that string as its one-line doc, which is the
``--help`` text of its option::

    @dataclass
    class Settings:
        limit: int = 0
        '''Most problems per benchmark (0 = all).'''

    attribute_docs(Settings) == {"limit": "Most problems per benchmark (0 = all)."}

A field whose ``metadata`` holds ``"choices"`` (a registry: ``algos.ADVANTAGES``, ``tasks.TASKS``, the
rollout engines, ...) gets its choice list appended to its help by :func:`help_texts`, so that no help text
types a list by hand (``tests/test_static_facts.py`` compares every list in the parsers with its registry)::

    ratio: str = field(default="token", metadata={"choices": RATIO_LEVELS})
    '''Importance ratio level.'''        # --help: "Importance ratio level. [choices: token, sequence]"

A utility: it imports nothing of rewardlab, so ``train``, ``eval`` and ``rollout`` may all use it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Iterable


def attribute_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal under it in ``cls``'s own body (stripped), in source order.

    Only ``cls``'s own class body is read (not its bases'); a field without a string right under it is
    absent. A docstring split over adjacent literals (``("a" "b")``) is one constant, read whole.
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = nxt.value.value.strip()
    return docs


def choices_of(cls: type) -> dict[str, tuple[str, ...]]:
    """Field name -> its ``metadata["choices"]`` (as a tuple), for every field of dataclass ``cls`` that has one."""
    return {f.name: tuple(f.metadata["choices"]) for f in dataclasses.fields(cls) if "choices" in f.metadata}


def with_choices(doc: str, choices: Iterable[str]) -> str:
    """A help text with its registry's names appended: ``"Doc. [choices: a, b, c]"``."""
    return f"{doc} [choices: {', '.join(choices)}]"


def help_texts(cls: type, docs: dict[str, str] | None = None) -> dict[str, str]:
    """Field name -> its help: ``docs`` (default :func:`attribute_docs`), with the choices of each field that has
    them appended (:func:`with_choices`)."""
    docs = attribute_docs(cls) if docs is None else docs
    lists = choices_of(cls)
    return {name: with_choices(doc, lists[name]) if name in lists else doc for name, doc in docs.items()}


__all__ = ["attribute_docs", "choices_of", "help_texts", "with_choices"]
