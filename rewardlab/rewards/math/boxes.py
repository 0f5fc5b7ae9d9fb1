"""Boxed answers in a completion: ``\\boxed{...}``, ``\\fbox{...}`` and ``\\boxed N``, found in one linear pass.

:func:`find_boxes` returns the outermost boxes with their spans (an unbalanced ``\\boxed{`` takes the rest
of its line); :func:`box_groups` joins boxes that a connector links into one list answer
(``\\boxed{2} and \\boxed{3}``).
"""

from __future__ import annotations

import re

BOX_COMMANDS = ("\\boxed", "\\fbox")
"""The box commands that mark a final answer."""


def _closing_braces(text: str) -> dict[int, int]:
    """Map each unescaped ``{`` to the index just past its closing ``}`` (unbalanced ones are absent).

    One linear pass for the whole text: matching each box's brace on its own would rescan to the end
    of the text for every unbalanced ``\\boxed{`` (quadratic in a completion of 10,000 of them)."""
    out: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            out[stack.pop()] = i + 1
        i += 1
    return out


def find_boxes(text: str) -> list[tuple[int, int, str]]:
    """Outermost ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed N`` spans as (start, end, content)."""
    out: list[tuple[int, int, str]] = []
    pos = 0
    n = len(text)
    nxt = {cmd: text.find(cmd) for cmd in BOX_COMMANDS}  # next occurrence of each command
    closers: dict[int, int] | None = None
    while True:
        for cmd in BOX_COMMANDS:
            if 0 <= nxt[cmd] < pos:
                nxt[cmd] = text.find(cmd, pos)
        starts = [(k, cmd) for cmd, k in nxt.items() if k >= 0]
        if not starts:
            break
        s, cmd = min(starts)
        j = s + len(cmd)
        if j < n and text[j].isalpha():  # \boxedx... is another command
            pos = j
            continue
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == "{":
            if closers is None:
                closers = _closing_braces(text)
            e = closers.get(j, -1)
            if e < 0:  # unbalanced: take the rest of the line, without the brace
                nl = text.find("\n", j)
                e = n if nl < 0 else nl
                content = text[j + 1:e]
            else:
                content = text[j + 1:e - 1]
        else:  # \boxed 5
            m = re.match(r"[^\s$]+", text[j:j + 200])
            if not m:
                pos = j
                continue
            e = j + m.end()
            content = m.group(0)
        out.append((s, e, content))
        pos = max(e, s + 1)
    return out


_WORD = re.compile(r"[A-Za-z]+")
_CONNECTOR_WORDS = {"and", "or"}


def _is_connector(sep: str) -> bool:
    """Whether the text between two boxes joins them into one list answer."""
    if len(sep) > 80 or "." in sep.replace("\\.", ""):
        return False
    s = re.sub(r"\\(?:quad|qquad|text|textbf|mathrm|mbox|,|;|!| )", " ", sep)
    s = re.sub(r"\\[\[\]()]|[${}]", " ", s)
    words = [w.lower() for w in _WORD.findall(s)]
    if not words:
        return True
    has_conn = any(w in _CONNECTOR_WORDS for w in words)
    others = [w for w in words if w not in _CONNECTOR_WORDS]
    return has_conn and len(others) <= 3


def box_groups(text: str, boxes: list[tuple[int, int, str]]) -> list[list[str]]:
    """The boxes' contents grouped into answers: boxes joined by a connector ("and", a comma) form one list."""
    groups: list[list[str]] = []
    prev_end = -1
    for s, e, content in boxes:
        if groups and _is_connector(text[prev_end:s]):
            groups[-1].append(content)
        else:
            groups.append([content])
        prev_end = e
    return groups
