"""``rewardlab reward NAME``: score completions with any registered (or dotted-path) reward and explain why.

    rewardlab reward math --completion 'So the answer is $\\boxed{\\frac34}$.' --gold '0.75'
    rewardlab reward math --file rows.jsonl --json      # rows: {"completion", "gold", "meta"?}

Without ``--json`` it prints one line per row: the score, the status and the reward's explanation
(extracted answer, gold, deciding rule). With ``--json`` it prints one JSON object per row.
Rows are scored through :func:`rewardlab.rewards.pool.score_batch` (parallel, per-item
``--deadline``), exactly as the trainer scores them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from rewardlab.errors import RewardlabError
from rewardlab.rewards import get_reward
from rewardlab.rewards.pool import score_batch


def _read_rows(path: str) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise RewardlabError(f"--file {path}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RewardlabError(f"--file {path}: not UTF-8 text") from None
    rows = []
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): JSON strings may hold U+2028
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RewardlabError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict) or "completion" not in row or not ({"gold", "reference"} & row.keys()):
            raise RewardlabError(f"{path}:{n}: each row needs 'completion' and 'gold' (or 'reference') fields")
        meta = row.get("meta") or {}
        if not isinstance(meta, dict):
            raise RewardlabError(f"{path}:{n}: 'meta' must be an object")
        rows.append({"completion": row["completion"], "gold": row.get("gold", row.get("reference")), "meta": meta})
    if not rows:
        raise RewardlabError(f"{path}: no rows")
    return rows


def _explain(info: dict[str, Any]) -> str:
    keys = ("pred", "gold", "extraction", "rule", "pred_parsed", "gold_parsed", "detail", "error")
    parts = [f"{k}={info[k]!r}" for k in keys if info.get(k) not in (None, "")]
    parts += [f"{k}={v!r}" for k, v in info.items() if k not in keys and k != "status"][:8]
    return "  ".join(parts)


@click.command("reward")
@click.argument("name")
@click.option("--completion", "-c", help="The model's text to score.")
@click.option("--gold", "-g", help="The reference answer (a bare answer, a GSM8K solution, a MATH solution).")
@click.option("--file", "file_", type=click.Path(dir_okay=False), help="JSONL rows with completion/gold (and optional meta).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per row.")
@click.option("--deadline", type=float, default=1.0, show_default=True, help="Per-item deadline in seconds.")
def reward(name: str, completion: str | None, gold: str | None, file_: str | None, as_json: bool, deadline: float) -> None:
    """Score completions with reward NAME (math, code, format, ... or a dotted path) and explain each score."""
    fn = get_reward(name)
    if file_ and (completion is not None or gold is not None):
        raise RewardlabError("give either --file or --completion/--gold, not both")
    if file_:
        rows = _read_rows(file_)
    else:
        if completion is None or gold is None:
            raise RewardlabError("give --completion TEXT and --gold TEXT (or --file rows.jsonl)")
        rows = [{"completion": completion, "gold": gold, "meta": {}}]
    if deadline <= 0:
        raise RewardlabError("--deadline must be positive")

    results = score_batch(fn, [r["completion"] for r in rows], [r["gold"] for r in rows],
                          [r["meta"] for r in rows], deadline=deadline)
    for i, res in enumerate(results):
        if as_json:
            click.echo(json.dumps({"row": i, "score": res.score, "info": res.info}, default=str))
        else:
            score = "None" if res.score is None else f"{res.score:g}"
            prefix = f"[{i}] " if len(results) > 1 else ""
            click.echo(f"{prefix}score={score}  status={res.info.get('status')}  {_explain(res.info)}")
