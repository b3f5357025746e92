"""The original's statement retry (``SessionProxy``, spec §7), as a store wrapper.

A statement the store could not run (``StoreError``: unreachable or timed out) is tried
again, up to 3 attempts in all, waiting exponentially between them (Guava's
``exponentialWait``: 2 ms, 4 ms, ..., capped at 250 ms) on the Runtime's clock. A
compare-and-set whose first attempt did apply then reports "not applied" on the retry, as
in the original: the caller's loop re-reads, so the cost is a wasted monoton, not a
duplicate.

The counter ``add`` is not retried: it is not idempotent (the original retried a counter
only when Cassandra said it was never attempted, which a ``StoreError`` cannot tell).
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar

from lab.backends.cassieq.core.store import DEFAULT_READ, CassStore, Condition, Consistency, Row, StoreError
from lab.design.runtime import Runtime

T = TypeVar("T")
log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
MAX_WAIT_SECONDS = 0.25
FIRST_WAIT_SECONDS = 0.002


def wait_before(attempt: int) -> float:
    """The wait after failed attempt number ``attempt`` (1-based)."""
    return min(FIRST_WAIT_SECONDS * 2 ** (attempt - 1), MAX_WAIT_SECONDS)


class RetryingStore:
    """A ``CassStore`` that retries every statement but ``add`` on ``StoreError``."""

    def __init__(self, store: CassStore, rt: Runtime, attempts: int = MAX_ATTEMPTS):
        self.inner = store
        self.rt = rt
        self.attempts = attempts

    async def _retry(self, what: str, statement: Callable[[], Awaitable[T]]) -> T:
        attempt = 1
        while True:
            try:
                return await statement()
            except StoreError as error:
                if attempt >= self.attempts:
                    raise
                log.debug("store %s failed (%s); attempt %d of %d", what, error, attempt + 1, self.attempts)
                await self.rt.sleep(wait_before(attempt))
                attempt += 1

    async def read(self, table: str, key: Mapping[str, Any], *,
                   consistency: Consistency = DEFAULT_READ) -> Row | None:
        return await self._retry("read", lambda: self.inner.read(table, key, consistency=consistency))

    async def read_partition(self, table: str, partition: Mapping[str, Any], *,
                             consistency: Consistency = DEFAULT_READ) -> list[Row]:
        return await self._retry("read", lambda: self.inner.read_partition(table, partition, consistency=consistency))

    async def read_all(self, table: str, *, consistency: Consistency = DEFAULT_READ) -> list[Row]:
        return await self._retry("read", lambda: self.inner.read_all(table, consistency=consistency))

    async def insert(self, table: str, row: Mapping[str, Any], *, if_not_exists: bool = False) -> bool:
        return await self._retry("insert", lambda: self.inner.insert(table, row, if_not_exists=if_not_exists))

    async def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
                     conditions: Sequence[Condition] = ()) -> bool:
        return await self._retry("update", lambda: self.inner.update(table, key, values, conditions=conditions))

    async def delete(self, table: str, key: Mapping[str, Any], *, conditions: Sequence[Condition] = ()) -> bool:
        return await self._retry("delete", lambda: self.inner.delete(table, key, conditions=conditions))

    async def delete_partition(self, table: str, partition: Mapping[str, Any]) -> None:
        await self._retry("delete", lambda: self.inner.delete_partition(table, partition))

    async def add(self, table: str, key: Mapping[str, Any], column: str, delta: int) -> None:
        await self.inner.add(table, key, column, delta)

    def close(self) -> None:
        self.inner.close()


def retrying(store: CassStore, rt: Runtime) -> RetryingStore:
    """``store`` with the retry, once (an already wrapped store is returned as it is)."""
    return store if isinstance(store, RetryingStore) else RetryingStore(store, rt)
