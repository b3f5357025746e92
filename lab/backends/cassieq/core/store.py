"""CassieQ's store port: the Cassandra semantics its algorithms rely on, and the schema.

A table has partition-key columns, clustering columns (rows of a partition are ordered by
them, ascending) and value columns (spec §3). What the algorithms need, and every store
gives exactly:

- ``read`` one row by its full key, ``read_partition`` a partition's rows in clustering
  order, ``read_all`` a small table whole; each read at a ``Consistency`` (only the
  simulated Cassandra can tell levels apart: a read below QUORUM may see a lagging replica;
  SQLite and PostgreSQL are always up to date).
- ``insert`` (an upsert, as CQL's INSERT) or ``insert(..., if_not_exists=True)`` (a
  lightweight transaction that says whether it applied);
- ``update`` (an upsert of the given columns) or ``update(..., conditions=...)``, a
  lightweight transaction ``IF col op value AND ...`` with ops ``=``, ``>`` and ``>=``,
  which never applies to a row that does not exist (a condition on a missing row is false,
  as in Cassandra);
- ``delete`` a row (optionally ``IF col op value``), ``delete_partition``;
- ``add`` to a counter column (not idempotent; a missing counter reads as 0).

Values are Python ``str``, ``int``, ``bool``, ``None`` and, for ``map`` columns, ``dict[str,
str]``; timestamps are ints (milliseconds since the epoch, on the caller's clock). A store
returns rows as dicts of every column of the table (a missing value is None).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, Protocol, Sequence

Row = dict[str, Any]


class Consistency(Enum):
    ONE = "ONE"
    LOCAL_QUORUM = "LOCAL_QUORUM"
    QUORUM = "QUORUM"
    LOCAL_SERIAL = "LOCAL_SERIAL"
    SERIAL = "SERIAL"


#: the original's levels (spec §7): every plain read and write LOCAL_QUORUM, every LWT LOCAL_SERIAL
DEFAULT_READ = Consistency.LOCAL_QUORUM


@dataclass(frozen=True)
class Condition:
    """``IF column op value`` of a lightweight transaction."""

    column: str
    op: str  # "=", ">" or ">="
    value: Any

    def holds(self, row: Mapping[str, Any] | None) -> bool:
        if row is None:
            return False
        current = row.get(self.column)
        if self.op == "=":
            return current == self.value
        if current is None:
            return False
        if self.op == ">":
            return current > self.value
        if self.op == ">=":
            return current >= self.value
        raise ValueError(f"unknown condition operator {self.op!r}")


@dataclass(frozen=True)
class Table:
    name: str
    partition: tuple[str, ...]
    clustering: tuple[str, ...]
    columns: Mapping[str, str]  # every column -> "text", "bigint", "int", "boolean", "timestamp", "map", "counter"

    @property
    def key(self) -> tuple[str, ...]:
        return self.partition + self.clustering

    def check_key(self, key: Mapping[str, Any], *, partition_only: bool = False) -> None:
        wanted = self.partition if partition_only else self.key
        if set(key) != set(wanted):
            raise ValueError(f"{self.name}: a key needs exactly {', '.join(wanted)}; got {', '.join(key)}")


def _table(name: str, partition: Sequence[str], clustering: Sequence[str], **columns: str) -> Table:
    return Table(name, tuple(partition), tuple(clustering), columns)


#: The data model of spec §3 (``db/scripts/01_cassandra_queue.cql``).
SCHEMA: dict[str, Table] = {t.name: t for t in (
    _table("account", ["account_name"], [], account_name="text", keys="map"),
    # CQL's PRIMARY KEY (a, b) is partition a, clustering b: an account's queues are one partition
    _table("queue", ["account_name"], ["queuename"], account_name="text", queuename="text",
           queue_stats_id="text", bucket_size="int", max_delivery_count="int", status="int",
           repair_worker_poll_freq_seconds="int", repair_worker_tombstone_bucket_timeout_seconds="int",
           delete_buckets_after_finalization="boolean", dlq_queue_name="text", version="int",
           strict_fifo="boolean"),
    _table("queue_stats", ["queue_stats_id"], [], queue_stats_id="text", size="counter"),
    _table("monoton", ["queueid"], [], queueid="text", value="bigint"),
    _table("pointer", ["queueid"], ["pointer_type"], queueid="text", pointer_type="text", value="bigint"),
    _table("message", ["queueid", "bucket_num"], ["monoton"], queueid="text", bucket_num="bigint",
           monoton="bigint", message="text", version="int", acked="boolean", next_visible_on="timestamp",
           delivery_count="int", tag="text", created_date="timestamp", updated_date="timestamp"),
    _table("deletion_job", ["account_name"], ["queuename", "version"], account_name="text", queuename="text",
           version="int", bucket_size="int", queue_stats_id="text"),
)}


class StoreError(Exception):
    """The store could not run a statement (unreachable, timed out): whether a write applied
    is unknown, as a Cassandra WriteTimeout."""


class CassStore(Protocol):
    """What CassieQ's core needs of its store (see the module docstring)."""

    async def read(self, table: str, key: Mapping[str, Any], *,
                   consistency: Consistency = DEFAULT_READ) -> Row | None: ...

    async def read_partition(self, table: str, partition: Mapping[str, Any], *,
                             consistency: Consistency = DEFAULT_READ) -> list[Row]: ...

    async def read_all(self, table: str, *, consistency: Consistency = DEFAULT_READ) -> list[Row]: ...

    async def insert(self, table: str, row: Mapping[str, Any], *, if_not_exists: bool = False) -> bool: ...

    async def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
                     conditions: Sequence[Condition] = ()) -> bool: ...

    async def delete(self, table: str, key: Mapping[str, Any], *, conditions: Sequence[Condition] = ()) -> bool: ...

    async def delete_partition(self, table: str, partition: Mapping[str, Any]) -> None: ...

    async def add(self, table: str, key: Mapping[str, Any], column: str, delta: int) -> None: ...

    def close(self) -> None: ...
