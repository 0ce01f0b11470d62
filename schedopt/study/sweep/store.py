"""The SQLite store of sweep rows: one row per key, written as each row finishes.

The database runs in WAL mode with a busy timeout, and every write is its own short
``BEGIN IMMEDIATE`` transaction, so several sweeps (processes or hosts sharing a file system that
supports SQLite locking) may write to one file at once. A key is written at most once
(``INSERT OR IGNORE``); a failed row is stored with its error and rerun only on request.

A report opens the file read-only (``readonly=True``: an SQLite URI with ``mode=ro``), so it
neither creates nor changes the database; either way a file that is not a sweep database (not
SQLite, or SQLite without the table of sweep rows) is refused before anything is written.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterable
from contextlib import suppress
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
#: The columns a report needs (a database of an older version may lack the others).
CORE_COLUMNS = ("key", "trace", "cluster", "nodes", "kind", "policy", "options",
                "iteration_time_s", "error")


def _short(path: str | Path) -> str:
    text = str(path)
    return text if len(text) <= 200 else f"{text[:100]}...({len(text):,} characters)"


class Store:
    """A sweep database.

    Parameters
    ----------
    path
        The SQLite file (created with its folder if missing, unless ``readonly``).
    timeout_s
        How long a writer waits for another writer's lock.
    readonly
        Open an existing database for reading only (a missing file is an error).

    Raises
    ------
    SchedoptError
        The path is not a regular file, not an SQLite database, or a database without the
        sweep table (``--db`` and the path in one line).
    """

    def __init__(self, path: str | Path, timeout_s: float = 60.0, *,
                 readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._columns: list[str] = list(COLUMNS)
        exists = self._check_file(readonly)
        try:
            if readonly:
                uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro"
                self._con = sqlite3.connect(uri, uri=True, timeout=timeout_s,
                                            isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._con = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
        except (sqlite3.Error, OSError) as exc:
            raise SchedoptError(f"cannot open the sweep database: {exc}", "--db",
                                _short(path)) from None
        try:
            self._con.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            if exists or readonly:
                self._check_schema()
            if not readonly:
                self._setup(time.monotonic() + timeout_s)
        except sqlite3.DatabaseError as exc:
            self._con.close()
            why = ("not an SQLite database" if "not a database" in str(exc)
                   else f"cannot open the sweep database: {exc}")
            raise SchedoptError(why, "--db", _short(path)) from None
        except BaseException:
            self._con.close()
            raise

    def _check_file(self, readonly: bool) -> bool:
        """Whether the file exists; refuse a folder, a FIFO or a device before opening it (an
        SQLite open of a FIFO would block), and a missing file when ``readonly``."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            if readonly:
                raise SchedoptError("file not found", "--db", _short(self.path)) from None
            return False
        except OSError as exc:
            raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "--db",
                                _short(self.path)) from None
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise SchedoptError(f"cannot open the sweep database: {kind}", "--db",
                                _short(self.path))
        return st.st_size > 0

    def _check_schema(self) -> None:
        """Refuse an SQLite file that is not a sweep database (an empty one is fine for a
        writer: the table is created)."""
        names = {n for (n,) in self._con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "rows" not in names:
            if not names and not self.readonly:
                return
            raise SchedoptError("not a schedopt sweep database (no table of sweep rows)",
                                "--db", _short(self.path))
        have = [n for (n,) in self._con.execute("SELECT name FROM pragma_table_info('rows')")]
        need = CORE_COLUMNS if self.readonly else tuple(COLUMNS)
        missing = [c for c in need if c not in have]
        if missing:
            raise SchedoptError("not a schedopt sweep database (its table of rows lacks "
                                f"{', '.join(missing[:5])})", "--db", _short(self.path))
        self._columns = [c for c in COLUMNS if c in have]

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
        cur = self._con.execute(f"SELECT {', '.join(self._columns)} FROM rows ORDER BY key")
        out = []
        for values in cur:
            row = dict.fromkeys(COLUMNS)
            row.update(zip(self._columns, values, strict=True))
            for name in _JSON_COLUMNS:
                text = row[name]
                if isinstance(text, str):  # text that is not JSON stays text: a report
                    with suppress(ValueError, RecursionError):  # names the row
                        row[name] = json.loads(text)
            out.append(row)
        return out

    def integrity_ok(self) -> bool:
        """Whether SQLite's integrity check passes."""
        return self._con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
