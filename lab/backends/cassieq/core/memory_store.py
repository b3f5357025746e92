"""CassieQ's store in memory: the store port over dicts, and the checks every store shares.

Per table, partition key tuple -> its rows, kept sorted by clustering key -> the row. This
is the store the core's tests use, and the state a simulated Cassandra node keeps. It
awaits nothing, but its methods are ``async`` to match the port.

The write checks (``key_of``, ``check_values``) live here because this module is pure and
every store (SQLite, PostgreSQL) applies the same ones: a statement a store refuses is
refused by all of them.

A counter row that was never added to does not exist: ``read`` gives None, as Cassandra;
the core reads that as 0.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Mapping, Sequence

from lab.backends.cassieq.core.store import (
    DEFAULT_READ,
    SCHEMA,
    Condition,
    Consistency,
    Row,
    Table,
)

OPERATORS = ("=", ">", ">=")


def table_of(name: str) -> Table:
    try:
        return SCHEMA[name]
    except KeyError:
        raise ValueError(f"no table {name!r}; the tables are {', '.join(SCHEMA)}") from None


def key_of(table: Table, given: Mapping[str, Any], *, partition_only: bool = False) -> tuple[Any, ...]:
    """The key tuple (in the table's key order) of a key mapping, refusing a partial key or a
    None key value (Cassandra has no null key)."""
    table.check_key(given, partition_only=partition_only)
    columns = table.partition if partition_only else table.key
    values = tuple(given[column] for column in columns)
    if any(value is None for value in values):
        raise ValueError(f"{table.name}: a key value cannot be None: {dict(given)}")
    return values


def check_values(table: Table, values: Mapping[str, Any], *, update: bool = False) -> None:
    """Refuse unknown columns, key columns and counters among the values to set: a key is
    never updated, and a counter is only ``add``-ed (CQL refuses both); an update sets
    something (CQL's UPDATE needs a SET)."""
    if update and not values:
        raise ValueError(f"{table.name}: an update needs a column to set")
    for column in values:
        kind = table.columns.get(column)
        if kind is None:
            raise ValueError(f"{table.name} has no column {column!r}")
        if column in table.key:
            raise ValueError(f"{table.name}: key column {column!r} cannot be set")
        if kind == "counter":
            raise ValueError(f"{table.name}.{column} is a counter: use add()")
        if kind == "map" and values[column] is not None and not isinstance(values[column], Mapping):
            raise ValueError(f"{table.name}.{column} is a map: give a dict")


def check_conditions(table: Table, conditions: Sequence[Condition]) -> None:
    for condition in conditions:
        if condition.column not in table.columns:
            raise ValueError(f"{table.name} has no column {condition.column!r}")
        if condition.op not in OPERATORS:
            raise ValueError(f"unknown condition operator {condition.op!r}; the operators are {OPERATORS}")


def split_row(table: Table, row: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An inserted row as (its key, its other columns)."""
    missing = [column for column in table.key if column not in row]
    if missing:
        raise ValueError(f"{table.name}: a row needs its key columns; missing {', '.join(missing)}")
    key = {column: row[column] for column in table.key}
    values = {column: value for column, value in row.items() if column not in table.key}
    return key, values


_IMMUTABLE = (str, int, bool, float, type(None))


def copy_value(value: Any) -> Any:
    # maps are the only mutable values: copy them so no caller aliases stored state
    # (the type test first: isinstance against the Mapping ABC is slow, and this runs per cell)
    if type(value) in _IMMUTABLE:
        return value
    return dict(value) if isinstance(value, Mapping) else value


def copy_row(row: Mapping[str, Any]) -> Row:
    return {column: value if type(value) in _IMMUTABLE else copy_value(value) for column, value in row.items()}


class _Partition:
    """One partition's rows, sorted by clustering key."""

    __slots__ = ("clustering", "rows")

    def __init__(self) -> None:
        self.clustering: list[tuple[Any, ...]] = []
        self.rows: dict[tuple[Any, ...], Row] = {}

    def put(self, clustering: tuple[Any, ...], row: Row) -> None:
        if clustering not in self.rows:
            self.clustering.insert(bisect_left(self.clustering, clustering), clustering)
        self.rows[clustering] = row

    def remove(self, clustering: tuple[Any, ...]) -> None:
        del self.rows[clustering]
        self.clustering.pop(bisect_left(self.clustering, clustering))

    def ordered(self) -> list[Row]:
        return [self.rows[clustering] for clustering in self.clustering]


class MemoryStore:
    """The ``CassStore`` port over dicts (see the module docstring); every level of
    consistency reads the same, up-to-date state."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[tuple[Any, ...], _Partition]] = {name: {} for name in SCHEMA}

    # -- the rows ------------------------------------------------------------------------------

    def _locate(self, table: Table, key: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        full = key_of(table, key)
        cut = len(table.partition)
        return full[:cut], full[cut:]

    def _row(self, table: Table, key: Mapping[str, Any]) -> Row | None:
        partition_key, clustering = self._locate(table, key)
        partition = self._tables[table.name].get(partition_key)
        return None if partition is None else partition.rows.get(clustering)

    def _put(self, table: Table, key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        """Upsert: set the given columns, keep the others (CQL's INSERT and UPDATE)."""
        partition_key, clustering = self._locate(table, key)
        partition = self._tables[table.name].setdefault(partition_key, _Partition())
        row = partition.rows.get(clustering)
        if row is None:
            row = {column: None for column in table.columns}
            row.update(key)
            partition.put(clustering, row)
        row.update({column: copy_value(value) for column, value in values.items()})

    def _remove(self, table: Table, key: Mapping[str, Any]) -> None:
        partition_key, clustering = self._locate(table, key)
        partitions = self._tables[table.name]
        partition = partitions.get(partition_key)
        if partition is not None and clustering in partition.rows:
            partition.remove(clustering)
            if not partition.rows:
                del partitions[partition_key]

    # -- the port --------------------------------------------------------------------------------

    async def read(self, table: str, key: Mapping[str, Any], *,
                   consistency: Consistency = DEFAULT_READ) -> Row | None:
        row = self._row(table_of(table), key)
        return None if row is None else copy_row(row)

    async def read_partition(self, table: str, partition: Mapping[str, Any], *,
                             consistency: Consistency = DEFAULT_READ) -> list[Row]:
        spec = table_of(table)
        found = self._tables[table].get(key_of(spec, partition, partition_only=True))
        return [] if found is None else [copy_row(row) for row in found.ordered()]

    async def read_all(self, table: str, *, consistency: Consistency = DEFAULT_READ) -> list[Row]:
        """Every row, ordered by partition key then clustering key (deterministic, unlike
        Cassandra's token order; callers must not rely on an order)."""
        partitions = self._tables[table_of(table).name]
        return [copy_row(row) for partition_key in sorted(partitions) for row in partitions[partition_key].ordered()]

    async def insert(self, table: str, row: Mapping[str, Any], *, if_not_exists: bool = False) -> bool:
        spec = table_of(table)
        key, values = split_row(spec, row)
        check_values(spec, values)
        if if_not_exists and self._row(spec, key) is not None:
            return False
        self._put(spec, key, values)
        return True

    async def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
                     conditions: Sequence[Condition] = ()) -> bool:
        spec = table_of(table)
        check_values(spec, values, update=True)
        check_conditions(spec, conditions)
        if conditions:
            row = self._row(spec, key)
            if not all(condition.holds(row) for condition in conditions):
                return False
        self._put(spec, key, values)
        return True

    async def delete(self, table: str, key: Mapping[str, Any], *, conditions: Sequence[Condition] = ()) -> bool:
        spec = table_of(table)
        check_conditions(spec, conditions)
        if conditions:
            row = self._row(spec, key)
            if not all(condition.holds(row) for condition in conditions):
                return False
        self._remove(spec, key)
        return True

    async def delete_partition(self, table: str, partition: Mapping[str, Any]) -> None:
        spec = table_of(table)
        self._tables[table].pop(key_of(spec, partition, partition_only=True), None)

    async def add(self, table: str, key: Mapping[str, Any], column: str, delta: int) -> None:
        spec = table_of(table)
        if spec.columns.get(column) != "counter":
            raise ValueError(f"{table}.{column} is not a counter")
        row = self._row(spec, key)
        current = 0 if row is None or row[column] is None else row[column]
        self._put(spec, key, {column: current + delta})

    def close(self) -> None:
        """Nothing to release: the state is the object's."""
