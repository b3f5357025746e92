"""The simulated Cassandra: CassieQ's store as a node of the sim world.

API nodes reach it over the simulated network (``SimCassandraStore``, the store port over
``rt.net.call``), so net-splits between API nodes and the store are ordinary sim-world
partitions, and a pause or crash of the store node is one too. Inside, the node keeps
``replicas`` copies of the tables (``MemoryStore`` each, the reference semantics) and
models what CassieQ's correctness and speed depend on:

- **Latency.** A plain read or write costs its network round trip; a lightweight
  transaction (IF NOT EXISTS, IF col = value) is a Paxos round: ``lwt_round_trips`` round
  trips between replicas in all, the extra ones drawn from the network's latency model.
- **Replica lag.** A write is acknowledged once a quorum has it (replica 0, the
  coordinator's, and replica 1); the others get the row's new state ``replica_lag_ms``
  later (exponential). A read at ONE may be served by any replica and see the old state;
  QUORUM and SERIAL reads see every acknowledged write.
- **Delayed writes** (the spec's late and ghost messages, §4.1 and §4.7): an insert of a
  message row is, with probability ``late_write_p``, applied and answered only
  ``late_write_s`` later (an API node stalled between claiming its monoton and writing);
  with probability ``ghost_write_p`` it is never applied and never answered (the API node
  died in between: the monoton is a ghost).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from lab.backends.cassieq.core.memory_store import MemoryStore
from lab.backends.cassieq.core.store import SCHEMA, Condition, Consistency, Row, StoreError
from lab.runtime import CallTimeout, RemoteError, Runtime, Unreachable

if TYPE_CHECKING:
    from models.world import SimRuntime

STRONG = (Consistency.QUORUM, Consistency.LOCAL_QUORUM, Consistency.SERIAL, Consistency.LOCAL_SERIAL)


@dataclass(frozen=True)
class CassandraModel:
    """The store node's parameters (``lab run --option`` names them ``cassandra_*``)."""

    replicas: int = 3
    lwt_round_trips: int = 4
    replica_lag_ms: float = 0.0
    late_write_p: float = 0.0
    late_write_s: float = 20.0
    ghost_write_p: float = 0.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas={self.replicas}: use a whole number >= 1")
        if self.lwt_round_trips < 1:
            raise ValueError(f"lwt_round_trips={self.lwt_round_trips}: use a whole number >= 1")
        for name in ("replica_lag_ms", "late_write_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}={getattr(self, name)}: use a number >= 0")
        for name in ("late_write_p", "ghost_write_p"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}={getattr(self, name)}: use a probability from 0 to 1")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


_WRITES = {"insert", "update", "delete", "delete_partition", "add"}


class SimCassandraNode:
    """The store node's request handler (``rt.net.serve(node.handle)``)."""

    def __init__(self, rt: "SimRuntime", model: CassandraModel | None = None):
        self.rt = rt
        self.model = model or CassandraModel()
        self.replicas = [MemoryStore() for _ in range(self.model.replicas)]
        self.late = self.ghosts = 0  # delayed writes so far, for tests and reports

    async def handle(self, source: str, request: tuple) -> Any:
        op, table, args, kw = request
        rt, model = self.rt, self.model
        lwt = bool(kw.get("if_not_exists") or kw.get("conditions"))
        if op == "insert" and table == "message" and lwt:
            draw = rt.random.random()
            if draw < model.ghost_write_p:
                self.ghosts += 1
                await rt.event().wait()  # never applied, never answered
            elif draw < model.ghost_write_p + model.late_write_p:
                self.late += 1
                await rt.sleep(model.late_write_s)
        if lwt and model.lwt_round_trips > 1:
            await rt.sleep(self._round_trips(model.lwt_round_trips - 1))
        if op in _WRITES:
            result = await getattr(self.replicas[0], op)(table, *args, **kw)
            await self._replicate(op, table, args)
            return result
        consistency = kw.get("consistency", Consistency.LOCAL_QUORUM)
        replica = self.replicas[0] if consistency in STRONG or len(self.replicas) == 1 else \
            self.replicas[rt.random.randrange(len(self.replicas))]
        return await getattr(replica, op)(table, *args, **kw)

    def _round_trips(self, n: int) -> float:
        net = self.rt.world.net
        return sum(net.latency.sample_ns(net.rng) * 2 for _ in range(n)) / 1e9

    async def _replicate(self, op: str, table: str, args: tuple) -> None:
        """Replica 1 gets the new state now (the quorum that acknowledges), the others after a lag."""
        for i, replica in enumerate(self.replicas[1:], start=1):
            if i == 1 or self.model.replica_lag_ms <= 0:
                await self._copy(replica, op, table, args)
            else:
                lag = self.rt.random.expovariate(1.0 / self.model.replica_lag_ms) / 1000
                self.rt.spawn(self._later(lag, replica, op, table, args), name="replica lag")

    async def _later(self, lag: float, replica: MemoryStore, op: str, table: str, args: tuple) -> None:
        await self.rt.sleep(lag)
        await self._copy(replica, op, table, args)

    async def _copy(self, replica: MemoryStore, op: str, table: str, args: tuple) -> None:
        """The state replica 0 has now, for the rows ``op`` touched."""
        source = self.replicas[0]
        if op == "delete_partition":
            await replica.delete_partition(table, args[0])
            return
        spec = SCHEMA[table]
        key = {k: args[0][k] for k in spec.key}  # the row (insert) or the key (the others)
        row = await source.read(table, key)
        if row is None:
            await replica.delete(table, key)
        elif op == "add":
            column = args[1]
            current = (await replica.read(table, key) or {}).get(column) or 0
            await replica.add(table, key, column, (row.get(column) or 0) - current)
        else:
            await replica.insert(table, row)


class SimCassandraStore:
    """The store port on an API node: every statement a call to the store node; no answer
    in ``timeout`` seconds (a partition, a pause, a ghost write) is a ``StoreError``, whose
    write may or may not have applied (a Cassandra WriteTimeout)."""

    def __init__(self, rt: Runtime, node: str, timeout: float = 2.0):
        self.rt, self.node, self.timeout = rt, node, timeout

    async def _call(self, op: str, table: str, *args: Any, **kw: Any) -> Any:
        try:
            return await self.rt.net.call(self.node, (op, table, args, kw), self.timeout)
        except (CallTimeout, Unreachable) as e:
            raise StoreError(f"{op} {table}: {e}") from None
        except RemoteError as e:
            raise e.error from None  # a bad statement: the caller's bug, raised as it was

    async def read(self, table: str, key: Mapping[str, Any], *,
                   consistency: Consistency = Consistency.LOCAL_QUORUM) -> Row | None:
        return await self._call("read", table, dict(key), consistency=consistency)

    async def read_partition(self, table: str, partition: Mapping[str, Any], *,
                             consistency: Consistency = Consistency.LOCAL_QUORUM) -> list[Row]:
        return await self._call("read_partition", table, dict(partition), consistency=consistency)

    async def read_all(self, table: str, *, consistency: Consistency = Consistency.LOCAL_QUORUM) -> list[Row]:
        return await self._call("read_all", table, consistency=consistency)

    async def insert(self, table: str, row: Mapping[str, Any], *, if_not_exists: bool = False) -> bool:
        return await self._call("insert", table, dict(row), if_not_exists=if_not_exists)

    async def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
                     conditions: Sequence[Condition] = ()) -> bool:
        return await self._call("update", table, dict(key), dict(values), conditions=tuple(conditions))

    async def delete(self, table: str, key: Mapping[str, Any], *, conditions: Sequence[Condition] = ()) -> bool:
        return await self._call("delete", table, dict(key), conditions=tuple(conditions))

    async def delete_partition(self, table: str, partition: Mapping[str, Any]) -> None:
        await self._call("delete_partition", table, dict(partition))

    async def add(self, table: str, key: Mapping[str, Any], column: str, delta: int) -> None:
        await self._call("add", table, dict(key), column, delta)

    def close(self) -> None:
        pass


__all__ = ["CassandraModel", "SimCassandraNode", "SimCassandraStore"]
