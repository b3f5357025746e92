"""The simulated Cassandra: a replicated table store as a node of the sim world.

Clients (CassieQ's API nodes) reach it over the simulated network (``SimCassandraStore``:
each statement a ``rt.net.call``), so net-splits between them and the store are ordinary
sim-world partitions, and a pause or crash of the store node is one too. Inside, the node
keeps copies of the tables — the replicas the design hands it, each an in-memory store
with the design's statements (``read``, ``insert``, ``update``... as CassieQ's
``MemoryStore``) — and models what a Cassandra client's correctness and speed depend on:

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
  died in between: the monoton is a ghost). A ``late-writes`` fault (``lab.workloads.faults``) adds
  its own chances while it holds the node (``SimWorld.add_late_writes``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any, Mapping, Protocol, Sequence, cast

from lab.design.runtime import CallTimeout, RemoteError, Runtime, Unreachable

#: read levels that see every acknowledged write (by their names: any enum of levels will do)
STRONG = frozenset({"QUORUM", "LOCAL_QUORUM", "SERIAL", "LOCAL_SERIAL"})
Row = dict[str, Any]


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


class _Latency(Protocol):
    def sample_ns(self, rng: random.Random) -> int: ...


class _Network(Protocol):
    @property
    def latency(self) -> _Latency: ...
    @property
    def rng(self) -> random.Random: ...


class _World(Protocol):
    @property
    def net(self) -> _Network: ...


class _NodeState(Protocol):
    @property
    def late_writes(self) -> Sequence[tuple[float, float, float]]: ...


class StoreHost(Runtime, Protocol):
    """What a store node reads of the node it runs on beyond the Runtime port: the late-write
    faults in force on it, and its world's network latency (an LWT's extra round trips)."""

    @property
    def state(self) -> _NodeState: ...
    @property
    def world(self) -> _World: ...


class SimCassandraNode:
    """The store node's request handler (``rt.net.serve(node.handle)``)."""

    def __init__(self, rt: Runtime, model: CassandraModel, replicas: Sequence[Any],
                 keys: Mapping[str, Sequence[str]]):
        """``replicas``: ``model.replicas`` table stores, the same ones at every restart
        (Cassandra's commit log makes every acknowledged write durable); ``keys``: each
        table's key columns (partition, then clustering)."""
        if len(replicas) != model.replicas:
            raise ValueError(f"{len(replicas)} replicas given for a model of {model.replicas}")
        # a design's boot gets the Runtime port; the worlds that boot a simulated store (the
        # sim world, the calibration's in-process one) give its node a StoreHost
        self.rt = cast(StoreHost, rt)
        self.model = model
        self.replicas = list(replicas)
        self.keys = keys
        self.late = self.ghosts = 0  # delayed writes so far, for tests and reports

    async def handle(self, source: str, request: tuple) -> Any:
        op, table, args, kw = request
        rt, model = self.rt, self.model
        lwt = bool(kw.get("if_not_exists") or kw.get("conditions"))
        if op == "insert" and table == "message" and lwt:
            # the model's own chance, then one per late-writes fault in force on this node
            for late_p, late_s, ghost_p in [(model.late_write_p, model.late_write_s, model.ghost_write_p),
                                            *rt.state.late_writes]:
                draw = rt.random.random()
                if draw < ghost_p:
                    self.ghosts += 1
                    await rt.event().wait()  # never applied, never answered
                elif draw < ghost_p + late_p:
                    self.late += 1
                    await rt.sleep(late_s)
                    break
        if lwt and model.lwt_round_trips > 1:
            await rt.sleep(self._round_trips(model.lwt_round_trips - 1))
        if op in _WRITES:
            result = await getattr(self.replicas[0], op)(table, *args, **kw)
            await self._replicate(op, table, args)
            return result
        consistency = getattr(kw.get("consistency"), "name", "LOCAL_QUORUM")
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

    async def _later(self, lag: float, replica: Any, op: str, table: str, args: tuple) -> None:
        await self.rt.sleep(lag)
        await self._copy(replica, op, table, args)

    async def _copy(self, replica: Any, op: str, table: str, args: tuple) -> None:
        """The state replica 0 has now, for the rows ``op`` touched."""
        source = self.replicas[0]
        if op == "delete_partition":
            await replica.delete_partition(table, args[0])
            return
        key = {k: args[0][k] for k in self.keys[table]}  # from the row (insert) or the key (the others)
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
    """The store on a client node: every statement a call to the store node; no answer in
    ``timeout`` seconds (a partition, a pause, a ghost write) raises ``unavailable`` (the
    design's error for a store it cannot reach), whose write may or may not have applied (a
    Cassandra WriteTimeout)."""

    def __init__(self, rt: Runtime, node: str, unavailable: type[Exception], timeout: float = 2.0):
        self.rt, self.node, self.unavailable, self.timeout = rt, node, unavailable, timeout

    async def _call(self, op: str, table: str, *args: Any, **kw: Any) -> Any:
        try:
            return await self.rt.net.call(self.node, (op, table, args, kw), self.timeout)
        except (CallTimeout, Unreachable) as e:
            raise self.unavailable(f"{op} {table}: {e}") from None
        except RemoteError as e:
            raise e.error from None  # a bad statement: the caller's bug, raised as it was

    async def read(self, table: str, key: Mapping[str, Any], *, consistency: Any = None) -> Row | None:
        return await self._call("read", table, dict(key), **_level(consistency))

    async def read_partition(self, table: str, partition: Mapping[str, Any], *, consistency: Any = None) -> list[Row]:
        return await self._call("read_partition", table, dict(partition), **_level(consistency))

    async def read_all(self, table: str, *, consistency: Any = None) -> list[Row]:
        return await self._call("read_all", table, **_level(consistency))

    async def insert(self, table: str, row: Mapping[str, Any], *, if_not_exists: bool = False) -> bool:
        return await self._call("insert", table, dict(row), if_not_exists=if_not_exists)

    async def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any], *,
                     conditions: Sequence[Any] = ()) -> bool:
        return await self._call("update", table, dict(key), dict(values), conditions=tuple(conditions))

    async def delete(self, table: str, key: Mapping[str, Any], *, conditions: Sequence[Any] = ()) -> bool:
        return await self._call("delete", table, dict(key), conditions=tuple(conditions))

    async def delete_partition(self, table: str, partition: Mapping[str, Any]) -> None:
        await self._call("delete_partition", table, dict(partition))

    async def add(self, table: str, key: Mapping[str, Any], column: str, delta: int) -> None:
        await self._call("add", table, dict(key), column, delta)

    def close(self) -> None:
        pass


def _level(consistency: Any) -> dict[str, Any]:
    """The read level, passed on only when given (the replicas' stores have their default)."""
    return {} if consistency is None else {"consistency": consistency}
