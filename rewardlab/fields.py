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

A utility: it imports nothing of rewardlab, so ``train``, ``eval`` and ``rollout`` may all use it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap


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


__all__ = ["attribute_docs"]
