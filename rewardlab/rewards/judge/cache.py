"""The judge's verdict cache: parsed verdicts by key, in memory and optionally in a sqlite file shared by
processes and runs (WAL mode; each process opens its own connection).

    cache = JudgeCache("judge.sqlite")
    cache.put(key, {"restated": "7", "correct": True}); cache.get(key)
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from typing import Any

__all__ = ["JudgeCache"]


class JudgeCache:
    """Parsed verdicts by key, in memory and (``path``) in a sqlite file. Thread-safe."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = None if path is None else os.fspath(path)
        self._mem: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._db_pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])

    def _conn(self) -> sqlite3.Connection | None:
        if self.path is None:
            return None
        if self._db is None or self._db_pid != os.getpid():
            self._db = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db_pid = os.getpid()
        return self._db

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            if key in self._mem:
                return self._mem[key]
            db = self._conn()
            if db is None:
                return None
            row = db.execute("SELECT value FROM verdicts WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            value = json.loads(row[0])
            self._mem[key] = value
            return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._mem[key] = value
            db = self._conn()
            if db is not None:
                db.execute("INSERT OR REPLACE INTO verdicts (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def __len__(self) -> int:
        with self._lock:
            return len(self._mem)

    def clear(self) -> None:
        with self._lock:
            self._mem.clear()
            db = self._conn()
            if db is not None:
                db.execute("DELETE FROM verdicts")
