"""CassieQ's store on a SQLite file, safe for several API processes on one machine.

WAL lets readers run beside the one writer; ``busy_timeout`` makes a writer wait for the
lock instead of failing; autocommit (``isolation_level=None``) makes each statement its
own transaction, and every lightweight transaction is one statement (``stores.sql``), so
two processes racing on ``IF value = c`` cannot both apply. The sqlite3 calls run inline
in the async methods: a statement takes microseconds, less than a hop to a thread pool.

Columns: maps as JSON text, booleans as 0/1 (read back as bool), timestamps and counters
as integers.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Sequence

from lab.backends.cassieq.core.store import StoreError
from lab.backends.cassieq.stores.sql import Dialect, SqlStore


def _to_db(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "map":
        return json.dumps(dict(value), sort_keys=True)
    if kind == "boolean":
        return int(bool(value))
    return value


def _from_db(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "map":
        return json.loads(value)
    if kind == "boolean":
        return bool(value)
    return value


SQLITE = Dialect(
    placeholder="?",
    same="IS",
    types={"text": "TEXT", "bigint": "INTEGER", "int": "INTEGER", "timestamp": "INTEGER",
           "counter": "INTEGER", "boolean": "INTEGER", "map": "TEXT"},
    table_suffix=" WITHOUT ROWID",
    to_db=_to_db,
    from_db=_from_db,
)


class SQLiteStore(SqlStore):
    """The store port on the SQLite file at ``path`` (created with its tables if missing).

    ``synchronous`` is SQLite's: NORMAL (the default) survives a process crash but may lose
    the last commits to a power cut, as Cassandra's periodic commit log; FULL fsyncs every
    commit."""

    dialect = SQLITE

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0, synchronous: str = "NORMAL") -> None:
        super().__init__()
        self.path = Path(path)
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA; got {synchronous!r}")
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=busy_timeout_s,
                                       cached_statements=256)
            # the busy timeout first: switching to WAL and creating tables take locks too
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            for statement in self.create_statements():
                self._db.execute(statement)
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the SQLite store {self.path}: {error}") from error

    async def _run(self, sql: str, params: Sequence[Any]) -> tuple[Sequence[Sequence[Any]], int]:
        try:
            cursor = self._db.execute(sql, params)
            rows = cursor.fetchall()
            return rows, cursor.rowcount
        except sqlite3.OperationalError as error:  # locked past the busy timeout, disk I/O
            raise StoreError(f"SQLite store {self.path}: {error}") from error

    def close(self) -> None:
        self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"
