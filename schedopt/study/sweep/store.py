"""The SQLite store of sweep rows: one row per key, written as each row finishes.

The database runs in WAL mode with a busy timeout, and every write is its own short
``BEGIN IMMEDIATE`` transaction, so several sweeps (processes or hosts sharing a file system that
supports SQLite locking) may write to one file at once. A key is written at most once
(``INSERT OR IGNORE``); a failed row is stored with its error and rerun only on request.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from schedopt.errors import SchedoptError

__all__ = ["COLUMNS", "Store"]

#: Column name -> SQLite type, in table order.
COLUMNS: dict[str, str] = {
    "key": "TEXT PRIMARY KEY",
    "trace": "TEXT",
    "cluster": "TEXT",
    "nodes": "INTEGER",
    "kind": "TEXT",
    "policy": "TEXT",
    "options": "TEXT",
    "world_size": "INTEGER",
    "gpus_per_node": "INTEGER",
    "intra_bw_Bps": "REAL",
    "inter_bw_Bps": "REAL",
    "iteration_time_s": "REAL",
    "first_iteration_s": "REAL",
    "breakdown": "TEXT",
    "comm_busy_s": "REAL",
    "tail": "TEXT",
    "buckets": "INTEGER",
    "status": "TEXT",
    "objective_s": "REAL",
    "bound_s": "REAL",
    "gap": "REAL",
    "solve_time_s": "REAL",
    "method": "TEXT",
    "version": "TEXT",
    "host": "TEXT",
    "wall_s": "REAL",
    "error": "TEXT",
    "finished_at": "TEXT",
}
_JSON_COLUMNS = ("options", "breakdown", "tail")


class Store:
    """A sweep database.

    Parameters
    ----------
    path
        The SQLite file (created with its folder if missing).
    timeout_s
        How long a writer waits for another writer's lock.
    """

    def __init__(self, path: str | Path, timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
            self._con.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._setup(time.monotonic() + timeout_s)
        except (sqlite3.Error, OSError) as exc:
            raise SchedoptError(f"cannot open the sweep database: {exc}", "--db",
                                str(path)) from None

    def _setup(self, deadline: float) -> None:
        """WAL mode and the table; retried while another process creates the same database
        (switching to WAL can answer "locked" at once, without the busy handler)."""
        cols = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
        while True:
            try:
                self._con.execute("PRAGMA journal_mode = WAL")
                self._con.execute("PRAGMA synchronous = NORMAL")
                self._con.execute(f"CREATE TABLE IF NOT EXISTS rows ({cols})")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        """Close the connection."""
        self._con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def keys(self, *, include_failed: bool = True) -> set[str]:
        """Keys already stored (failed rows included unless ``include_failed`` is False)."""
        sql = "SELECT key FROM rows"
        if not include_failed:
            sql += " WHERE error IS NULL"
        return {k for (k,) in self._con.execute(sql)}

    def forget_failed(self, keys: Iterable[str]) -> int:
        """Delete the failed rows among ``keys`` (so that they run again); returns how many."""
        keys = list(keys)
        self._con.execute("BEGIN IMMEDIATE")
        try:
            n = 0
            for k in keys:
                n += self._con.execute("DELETE FROM rows WHERE key = ? AND error IS NOT NULL",
                                       (k,)).rowcount
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        return n

    def put(self, record: dict[str, Any]) -> bool:
        """Write one finished row; False when its key was already there (nothing written)."""
        values = []
        for name in COLUMNS:
            value = record.get(name)
            if name in _JSON_COLUMNS and value is not None:
                value = json.dumps(value, sort_keys=True)
            values.append(value)
        marks = ", ".join("?" for _ in COLUMNS)
        self._con.execute("BEGIN IMMEDIATE")
        try:
            cur = self._con.execute(
                f"INSERT OR IGNORE INTO rows ({', '.join(COLUMNS)}) VALUES ({marks})", values
            )
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        return cur.rowcount == 1

    def rows(self) -> list[dict[str, Any]]:
        """Every stored row as a dictionary (JSON columns decoded), ordered by key."""
        cur = self._con.execute(f"SELECT {', '.join(COLUMNS)} FROM rows ORDER BY key")
        out = []
        for values in cur:
            row = dict(zip(COLUMNS, values, strict=True))
            for name in _JSON_COLUMNS:
                if row[name] is not None:
                    row[name] = json.loads(row[name])
            out.append(row)
        return out

    def integrity_ok(self) -> bool:
        """Whether SQLite's integrity check passes."""
        return self._con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
