"""The one reader of JSONL data files (tasks, eval specs, code rows, the eval's samples files).

A utility: it imports nothing of rewardlab but ``errors``, so that rewards, tasks and eval share it.
(``rewardlab.logging.read_jsonl`` is the lenient reader of a run's own metrics, which skips bad lines.)
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from rewardlab.errors import RewardlabError


def read_jsonl(path: Path, *, torn_tail: bool = False) -> list[dict]:
    """Records of a ``.jsonl`` or ``.jsonl.gz`` file, blank lines skipped; a bad line is a one-line error.

    The one JSONL reader: data files (tasks, eval specs) and the eval's samples files. With
    ``torn_tail=True`` a last line without its newline (a writer killed mid-line) is dropped instead
    of parsed. Lines split on ``\\n`` only (U+2028 inside a JSON string is not a line break).
    """
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        for lineno, line in enumerate(f, 1):
            if torn_tail and not line.endswith("\n"):
                break
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RewardlabError(f"{path} line {lineno}: not valid JSON ({e.msg})") from None
    return rows
