"""The files an eval writes: ``results.json`` (atomic replace) and one append-only
``samples_<benchmark>.jsonl`` per benchmark (a header with the configuration fingerprint, then one
line per problem), which is what makes resume safe.

Resume: samples are appended one batch per ``write`` + ``fsync``; a rerun reads the file, drops a
torn last line, checks the fingerprint, and generates only the problems that are missing, so an
interrupted eval never loses or duplicates a sample.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from rewardlab.errors import RewardlabError
from rewardlab.jsonl import read_jsonl

RESULTS_FILE = "results.json"
SAMPLES_FORMAT = 1


def samples_file(bench: str) -> str:
    """The per-sample file name of a benchmark."""
    return f"samples_{bench}.jsonl"


def fingerprint(cfg: dict[str, Any]) -> str:
    """Short sha256 of a configuration (what must match for a samples file to be resumed)."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_samples(path: Path) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """(header, records by id) of a samples file; a torn last line is ignored and the first record
    of an id wins (duplicates cannot arise, but a problem is never counted twice)."""
    try:
        lines = read_jsonl(path, torn_tail=True)
    except RewardlabError:
        raise RewardlabError(f"{path} is not a rewardlab samples file; remove it or use another --output") from None
    header = lines[0].get("header") if lines and isinstance(lines[0], dict) else None
    done: dict[str, dict[str, Any]] = {}
    for rec in lines[1:] if header is not None else lines:
        if "header" not in rec:
            done.setdefault(rec["id"], rec)
    return header, done


class SampleStore:
    """Append-only per-benchmark JSONL: a header with the fingerprint, then one line per problem."""

    def __init__(self, path: Path, header: dict[str, Any]):
        self.path = path
        self.header = header

    def load(self) -> dict[str, dict[str, Any]]:
        """Records already written (by id); creates the file with its header when new.

        A torn last line (the process was killed mid-write) is cut off; a header from another
        configuration is an error rather than a silent mix of two runs.
        """
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._write_bytes((json.dumps({"header": self.header}) + "\n").encode(), truncate=True)
            return {}
        data = self.path.read_bytes()
        good_end = data.rfind(b"\n") + 1
        if good_end < len(data):  # torn tail from a kill: drop it before appending
            with open(self.path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
        header, done = read_samples(self.path)
        if header is None:
            raise RewardlabError(f"{self.path} is not a rewardlab samples file; remove it or use another --output")
        if header.get("fingerprint") != self.header["fingerprint"]:
            diff = sorted(k for k in set(header.get("config", {})) | set(self.header["config"])
                          if header.get("config", {}).get(k) != self.header["config"].get(k))
            raise RewardlabError(
                f"{self.path} holds samples from a different configuration (differs in: "
                f"{', '.join(diff) or 'format'}); "
                "use another --output directory or --overwrite"
            )
        return done

    def append(self, records: Sequence[dict[str, Any]]) -> None:
        """Append records in one write, then fsync (a kill leaves whole records plus at most one torn line)."""
        blob = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
        self._write_bytes(blob)

    def _write_bytes(self, blob: bytes, truncate: bool = False) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb" if truncate else "ab") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` through a temporary file + rename (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_results(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """A results file (or the folder holding one) and its contents."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    if not p.is_file():
        raise RewardlabError(f"{path}: no results file")
    try:
        return p, json.loads(p.read_text())
    except json.JSONDecodeError:
        raise RewardlabError(f"{p} is not valid JSON") from None


def load_samples(results_path: Path, results: dict[str, Any], bench: str) -> dict[str, dict[str, Any]]:
    """A finished run's samples of ``bench`` by problem id (needed for a paired comparison)."""
    sp = results_path.parent / results.get("samples", {}).get(bench, samples_file(bench))
    if not sp.is_file():
        raise RewardlabError(f"{sp}: per-sample file missing (needed for a paired comparison)")
    return read_samples(sp)[1]


__all__ = ["RESULTS_FILE", "SAMPLES_FORMAT", "SampleStore", "atomic_write_json", "fingerprint", "load_results",
           "load_samples", "read_samples", "samples_file"]
