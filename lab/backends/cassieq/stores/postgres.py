"""CassieQ's store on PostgreSQL (psycopg 3, one async connection in autocommit).

Each lightweight transaction is one statement (``stores.sql``): under READ COMMITTED a
conditional UPDATE that waits for a competing one re-checks its WHERE on the row the other
left, so of N racing ``IF value = c`` updates exactly one applies.

The connection opens on the first statement (so ``open_store`` needs no event loop) and
again after the server dropped it. Text columns use the "C" collation so ordering matches
Python's (and SQLite's) code-point order; maps are JSONB.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import psycopg
from psycopg.types.json import Jsonb

from lab.backends.cassieq.core.store import StoreError
from lab.backends.cassieq.stores.sql import Dialect, SqlStore
from lab.backends.cassieq.stores.urls import redacted


def _to_db(kind: str, value: Any) -> Any:
    if kind == "map" and value is not None:
        return Jsonb(dict(value))
    return value


def _from_db(kind: str, value: Any) -> Any:
    return value  # psycopg gives bool, int and dict (JSONB) back as they went in


POSTGRES = Dialect(
    placeholder="%s",
    same="IS NOT DISTINCT FROM",
    types={"text": 'text COLLATE "C"', "bigint": "bigint", "int": "integer", "timestamp": "bigint",
           "counter": "bigint", "boolean": "boolean", "map": "jsonb"},
    table_suffix="",
    to_db=_to_db,
    from_db=_from_db,
    converted=frozenset(),
)


class PostgresStore(SqlStore):
    """The store port on the PostgreSQL database at ``url`` (``postgresql://...``); its
    tables are created if missing."""

    dialect = POSTGRES

    def __init__(self, url: str, *, connect_timeout_s: float = 5.0) -> None:
        super().__init__()
        self.url = url
        self._connect_timeout_s = connect_timeout_s
        self._connection: psycopg.AsyncConnection | None = None
        self._opening = asyncio.Lock()

    async def _connect(self) -> psycopg.AsyncConnection:
        async with self._opening:
            if self._connection is not None and not self._connection.closed:
                return self._connection
            connection = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=max(1, round(self._connect_timeout_s)))
            for statement in self.create_statements():
                try:
                    await connection.execute(statement)
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                    pass  # another process created it between our IF NOT EXISTS and its commit
            self._connection = connection
            return connection

    async def _run(self, sql: str, params: Sequence[Any]) -> tuple[Sequence[Sequence[Any]], int]:
        try:
            connection = self._connection
            if connection is None or connection.closed:
                connection = await self._connect()
            cursor = await connection.execute(sql, params)
            rows = await cursor.fetchall() if cursor.description is not None else []
            return rows, cursor.rowcount
        except psycopg.OperationalError as error:  # unreachable, dropped, timed out: outcome unknown
            raise StoreError(f"PostgreSQL store: {error}") from error

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.close()

    def close(self) -> None:
        # AsyncConnection.close awaits nothing but a pool; finishing the libpq connection is
        # the same, and the port's close is synchronous
        if self._connection is not None and not self._connection.closed:
            self._connection.pgconn.finish()

    def __repr__(self) -> str:
        return f"PostgresStore({redacted(self.url)!r})"
