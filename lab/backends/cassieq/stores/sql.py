"""The store port over SQL, shared by the SQLite and PostgreSQL stores.

Each Cassandra statement the algorithms use becomes ONE SQL statement, so the database's
own row locking gives a lightweight transaction's atomicity without a client-side
transaction:

- ``INSERT ... IF NOT EXISTS`` -> ``INSERT ... ON CONFLICT DO NOTHING`` (applied = a row changed);
- ``UPDATE ... IF col op v AND ...`` -> ``UPDATE ... WHERE key AND col op v AND ...`` (applied =
  a row changed; a missing row matches nothing, as Cassandra's condition on a missing row);
- a plain ``INSERT``/``UPDATE`` (an upsert) -> ``INSERT ... ON CONFLICT (key) DO UPDATE SET``;
- ``counter + d`` -> ``INSERT ... ON CONFLICT (key) DO UPDATE SET c = c + d``.

A condition ``col = v`` is null-safe (``IS`` in SQLite, ``IS NOT DISTINCT FROM`` in
PostgreSQL): Cassandra's ``IF col = null`` holds on a row whose column is null.

A concrete store gives the ``Dialect`` (placeholders, column types, value conversions) and
``_run``; the SQL text of each (statement, table, shape) is built once and cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from lab.backends.cassieq.core.memory_store import (
    check_conditions,
    check_values,
    key_of,
    split_row,
    table_of,
)
from lab.backends.cassieq.core.store import (
    DEFAULT_READ,
    SCHEMA,
    Condition,
    Consistency,
    Row,
    Table,
)


@dataclass(frozen=True)
class Dialect:
    placeholder: str  # "?" or "%s"
    same: str  # null-safe equality operator
    types: Mapping[str, str]  # schema kind ("text", "map", ...) -> SQL column type
    table_suffix: str  # after CREATE TABLE's closing parenthesis
    to_db: Callable[[str, Any], Any]  # (kind, Python value) -> parameter
    from_db: Callable[[str, Any], Any]  # (kind, column value) -> Python value
    #: the kinds whose column values ``from_db`` changes (the others come back as stored)
    converted: frozenset[str] = frozenset({"map", "boolean"})


def quote(name: str) -> str:
    return f'"{name}"'


Shape = tuple[Any, ...]


class SqlText:
    """The SQL text of each statement shape, built once per (statement, table, shape)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._cache: dict[Shape, str] = {}

    def _cached(self, shape: Shape, build: Callable[[], str]) -> str:
        text = self._cache.get(shape)
        if text is None:
            text = self._cache[shape] = build()
        return text

    def _where(self, columns: Sequence[str], conditions: Sequence[tuple[str, str]] = ()) -> str:
        ph = self.dialect.placeholder
        terms = [f"{quote(column)} = {ph}" for column in columns]
        terms += [f"{quote(column)} {self.dialect.same if op == '=' else op} {ph}" for column, op in conditions]
        return " AND ".join(terms)

    def create(self, table: Table) -> str:
        columns = [f"{quote(column)} {self.dialect.types[kind]}" for column, kind in table.columns.items()]
        key = ", ".join(map(quote, table.key))
        return (f"CREATE TABLE IF NOT EXISTS {quote(table.name)} ({', '.join(columns)}, PRIMARY KEY ({key}))"
                f"{self.dialect.table_suffix}")

    def select(self, table: Table, scope: str) -> str:
        """``scope``: "row" (by full key), "partition" (by partition key) or "all"."""
        def build() -> str:
            text = f"SELECT {', '.join(map(quote, table.columns))} FROM {quote(table.name)}"
            if scope == "row":
                return f"{text} WHERE {self._where(table.key)}"
            order = ", ".join(map(quote, table.clustering if scope == "partition" else table.key))
            where = f" WHERE {self._where(table.partition)}" if scope == "partition" else ""
            return f"{text}{where}" + (f" ORDER BY {order}" if order else "")
        return self._cached(("select", table.name, scope), build)

    def insert(self, table: Table, columns: tuple[str, ...], *, if_not_exists: bool) -> str:
        """``columns`` start with the key columns; an upsert sets the others on conflict."""
        def build() -> str:
            names = ", ".join(map(quote, columns))
            marks = ", ".join([self.dialect.placeholder] * len(columns))
            key = ", ".join(map(quote, table.key))
            others = [column for column in columns if column not in table.key]
            if if_not_exists or not others:
                action = "DO NOTHING"
            else:
                action = "DO UPDATE SET " + ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in others)
            return f"INSERT INTO {quote(table.name)} ({names}) VALUES ({marks}) ON CONFLICT ({key}) {action}"
        return self._cached(("insert", table.name, columns, if_not_exists), build)

    def update(self, table: Table, columns: tuple[str, ...], conditions: tuple[tuple[str, str], ...]) -> str:
        def build() -> str:
            sets = ", ".join(f"{quote(column)} = {self.dialect.placeholder}" for column in columns)
            return f"UPDATE {quote(table.name)} SET {sets} WHERE {self._where(table.key, conditions)}"
        return self._cached(("update", table.name, columns, conditions), build)

    def delete(self, table: Table, scope: str, conditions: tuple[tuple[str, str], ...] = ()) -> str:
        """``scope``: "row" or "partition"."""
        def build() -> str:
            columns = table.key if scope == "row" else table.partition
            return f"DELETE FROM {quote(table.name)} WHERE {self._where(columns, conditions)}"
        return self._cached(("delete", table.name, scope, conditions), build)

    def add(self, table: Table, column: str) -> str:
        def build() -> str:
            names = ", ".join(map(quote, table.key + (column,)))
            marks = ", ".join([self.dialect.placeholder] * (len(table.key) + 1))
            key = ", ".join(map(quote, table.key))
            target = f"{quote(table.name)}.{quote(column)}"
            return (f"INSERT INTO {quote(table.name)} ({names}) VALUES ({marks}) "
                    f"ON CONFLICT ({key}) DO UPDATE SET {quote(column)} = {target} + excluded.{quote(column)}")
        return self._cached(("add", table.name, column), build)


class SqlStore:
    """The ``CassStore`` port on one SQL statement per call. A subclass sets ``dialect`` and
    implements ``_run(sql, params) -> (rows, rowcount)``."""

    dialect: Dialect

    def __init__(self) -> None:
        self._sql = SqlText(self.dialect)
        self._layout: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {}

    async def _run(self, sql: str, params: Sequence[Any]) -> tuple[Sequence[Sequence[Any]], int]:
        raise NotImplementedError

    def create_statements(self) -> list[str]:
        return [self._sql.create(table) for table in SCHEMA.values()]

    # -- conversions -----------------------------------------------------------------------------

    def _params(self, table: Table, values: Mapping[str, Any], columns: Sequence[str]) -> list[Any]:
        return [self.dialect.to_db(table.columns[column], values[column]) for column in columns]

    def _condition_params(self, table: Table, conditions: Sequence[Condition]) -> list[Any]:
        return [self.dialect.to_db(table.columns[c.column], c.value) for c in conditions]

    def _row(self, table: Table, raw: Sequence[Any]) -> Row:
        names, converted = self._layout.get(table.name) or self._lay_out(table)
        row = dict(zip(names, raw))
        from_db = self.dialect.from_db
        for column, kind in converted:  # only the columns whose values need it: this runs per row read
            row[column] = from_db(kind, row[column])
        return row

    def _lay_out(self, table: Table) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        layout = (tuple(table.columns), tuple((c, k) for c, k in table.columns.items() if k in self.dialect.converted))
        self._layout[table.name] = layout
        return layout

    @staticmethod
    def _shape(conditions: Sequence[Condition]) -> tuple[tuple[str, str], ...]:
        return tuple((condition.column, condition.op) for condition in conditions)

    # -- the port --------------------------------------------------------------------------------

    async def read(self, table: str, key: Mapping[str, Any], *,
                   consistency: Consistency = DEFAULT_READ) -> Row | None:
        spec = table_of(table)
        key_of(spec, key)
        rows, _ = await self._run(self._sql.select(spec, "row"), self._params(spec, key, spec.key))
        return self._row(spec, rows[0]) if rows else None

    async def read_partition(self, table: str, partition: Mapping[str, Any], *,
                             consistency: Consistency = DEFAULT_READ) -> list[Row]:
        spec = table_of(table)
        key_of(spec, partition, partition_only=True)
        rows, _ = await self._run(self._sql.select(spec, "partition"),
                                  self._params(spec, partition, spec.partition))
        return [self._row(spec, raw) for raw in rows]

    async def read_all(self, table: str, *, consistency: Consistency = DEFAULT_READ) -> list[Row]:
        """Every row, ordered by key (callers must not rely on an order: Cassandra's is by token)."""
        spec = table_of(table)
        rows, _ = await self._run(self._sql.select(spec, "all"), [])
        return [self._row(spec, raw) for raw in rows]

    async def insert(self, table: str, row: Mapping[str, Any], *, if_not_exists: bool = False) -> bool:
        spec = table_of(table)
        key, values = split_row(spec, row)
        key_of(spec, key)
        check_values(spec, values)
        columns = spec.key + tuple(values)
        _, changed = await self._run(self._sql.insert(spec, columns, if_not_exists=if_not_exists),
                                     self._params(spec, {**key, **values}, columns))
        return changed == 1 if if_not_exists else True

    async def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
                     conditions: Sequence[Condition] = ()) -> bool:
        spec = table_of(table)
        key_of(spec, key)
        check_values(spec, values, update=True)
        check_conditions(spec, conditions)
        if not conditions:
            return await self.insert(table, {**key, **values})
        columns = tuple(values)
        params = self._params(spec, values, columns) + self._params(spec, key, spec.key)
        _, changed = await self._run(self._sql.update(spec, columns, self._shape(conditions)),
                                     params + self._condition_params(spec, conditions))
        return changed == 1

    async def delete(self, table: str, key: Mapping[str, Any], *, conditions: Sequence[Condition] = ()) -> bool:
        spec = table_of(table)
        key_of(spec, key)
        check_conditions(spec, conditions)
        params = self._params(spec, key, spec.key) + self._condition_params(spec, conditions)
        _, changed = await self._run(self._sql.delete(spec, "row", self._shape(conditions)), params)
        return changed == 1 if conditions else True

    async def delete_partition(self, table: str, partition: Mapping[str, Any]) -> None:
        spec = table_of(table)
        key_of(spec, partition, partition_only=True)
        await self._run(self._sql.delete(spec, "partition"), self._params(spec, partition, spec.partition))

    async def add(self, table: str, key: Mapping[str, Any], column: str, delta: int) -> None:
        spec = table_of(table)
        if spec.columns.get(column) != "counter":
            raise ValueError(f"{table}.{column} is not a counter")
        key_of(spec, key)
        await self._run(self._sql.add(spec, column), self._params(spec, key, spec.key) + [delta])
