"""A Primer node: the façade the wire, the embedding program and the tests use.

It composes the node's rooms — membership and liveness (``membership``), the Plumtree
broadcast (``broadcast``), the replicated cluster metadata (``metadata``), the replicated
queues (``queues``) and the log queues (``logs``) — and answers the peers' messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.backends.primer.core import messages as m
from lab.backends.primer.core.broadcast import Broadcast
from lab.backends.primer.core.config import AOF, NodeConfig
from lab.backends.primer.core.errors import BadRequest
from lab.backends.primer.core.index import MessageIndex
from lab.backends.primer.core.logs import Logs
from lab.backends.primer.core.membership import Membership
from lab.backends.primer.core.metadata import Metadata
from lab.backends.primer.core.queues import Queues
from lab.design.runtime import Runtime, Task
from lab.design.storage import RuntimeStore

#: seconds an ack's tombstone is kept: longer than any split the lab makes, so a repaired
#: copy of an acknowledged message cannot come back
TOMBSTONE_TTL = 600.0


@dataclass(frozen=True)
class Got:
    """A message a get returned: ``receipt`` is what ack and release need (None: at-most-once,
    already deleted)."""

    id: str
    payload: bytes
    receipt: str | None


@dataclass(frozen=True)
class LogRecord:
    offset: int
    payload: bytes


class PrimerNode:
    """One member of a Primer cluster, on a Runtime."""

    def __init__(self, rt: Runtime, config: NodeConfig, routes: Any = None):
        """``routes``: a ``lab.backends.primer.core.routing.Routes`` applied to every put (None: none)."""
        self.rt, self.config, self.routes = rt, config, routes
        self.name = config.name
        self.store = RuntimeStore(rt, "primer") if config.persistence == AOF else None
        self.membership = Membership(rt, config)
        self.broadcast = Broadcast(rt, self.membership, config.lazy_tick, config.exchange_tick, config.timeout)
        self.meta = Metadata(rt)
        self.index = MessageIndex(rt, TOMBSTONE_TTL)
        self.broadcast.register(self.meta)
        self.broadcast.register(self.index)
        self.queues = Queues(rt, config, self.membership, self.broadcast, self.meta, self.index, self.store, routes)
        self.logs = Logs(rt, config, self.membership, self.broadcast, self.meta, self.store)
        self.tasks: list[Task] = []

    async def start(self) -> None:
        """Recover the node's files (persistence aof), answer peers, start the ticks, and
        catch up with every peer at once (after a restart the index is rebuilt from them)."""
        self.queues.replica.recover()
        self.logs.recover()
        await self.rt.net.serve(self.handle)
        for loop, name in ((self.membership.run(), "beats"), (self.broadcast.lazy_loop(), "i-have"),
                           (self.broadcast.exchange_loop(), "anti-entropy"), (self._tidy_loop(), "tidy")):
            self.tasks.append(self.rt.spawn(loop, name=f"{self.name} {name}"))
        for peer in self.membership.peers():
            self.tasks.append(self.rt.spawn(self.broadcast.exchange(peer), name=f"{self.name} catch up"))

    async def _tidy_loop(self) -> None:
        while True:
            await self.rt.sleep(self.config.exchange_tick)
            self.index.expire()
            self.queues.tidy()
            self.logs.tidy()

    async def handle(self, source: str, message: Any) -> Any:
        """A peer's message (``lab.backends.primer.core.messages``)."""
        self.membership.heard(source)
        kind = type(message)
        if kind is m.Beat:
            self.membership.on_beat(source, message)
        elif kind is m.Gossip:
            self.broadcast.on_gossip(source, message)
        elif kind is m.IHave:
            self.broadcast.on_ihave(source, message)
        elif kind is m.Graft:
            self.broadcast.on_graft(source, message)
        elif kind is m.Prune:
            self.broadcast.on_prune(source, message)
        elif kind is m.Exchange:
            return self.broadcast.on_exchange(source, message)
        elif kind is m.Deliver:
            self.broadcast.on_deliver(source, message)
        elif kind is m.StoreCopy:
            return await self.queues.replica.on_store(message)
        elif kind is m.DropCopy:
            self.queues.replica.on_drop(message)
        elif kind is m.Claim:
            return self.queues.replica.on_claim(message)
        elif kind is m.LeaseNote:
            self.queues.replica.on_lease(message)
        elif kind is m.AckMessage:
            return self.queues.replica.on_ack(message)
        elif kind is m.AppendRecord:
            return await self.logs.on_append(message)
        elif kind is m.LastOffset:
            return self.logs.on_last_offset(message)
        elif kind is m.ReadRecords:
            return self.logs.on_read(message)
        else:
            raise BadRequest(f"{self.name}: unknown peer message {kind.__name__}")
        return None

    # ------------------------------------------------------------------ queues
    async def put(self, queue: str, payload: bytes) -> str:
        """Store ``payload`` on W replicas (this node and W-1 live peers, shuffled); the new
        message's id once they all hold it. The routes may send it to another queue (or drop
        it: the id is returned all the same). BadRequest (a bad name), Unavailable (fewer than
        W members reachable, or a replica did not answer in time: the message may exist)."""
        if not isinstance(payload, (bytes, bytearray)):
            raise BadRequest("a message's payload is bytes")
        return await self.queues.put(queue, bytes(payload))

    async def get(self, queue: str, wait: float = 0.0, at_most_once: bool = False,
                  group: str | None = None) -> Got | None:
        """The oldest message this node knows of in ``queue`` (in ``group``'s copies, for a
        queue fanned out to groups), leased for ``config.lease`` seconds (``at_most_once``:
        deleted at once); None if none came within ``wait`` s."""
        got = await self.queues.get(queue, wait, at_most_once, group)
        if got is None:
            return None
        message_id, receipt, granted = got
        return Got(message_id, granted.payload, receipt)

    async def ack(self, queue: str, message_id: str, receipt: str) -> None:
        """Delete a leased message on its replicas and broadcast the ACK. Idempotent: an ack
        of a message already acknowledged, or of one this node never heard of, is
        broadcast all the same (the receipt names the replica that leased it; when it is out
        of reach the broadcast settles it after the heal). BadRequest (a malformed receipt)."""
        await self.queues.ack(queue, message_id, receipt)

    async def release(self, queue: str, message_id: str, receipt: str) -> None:
        """End a lease early: the message can be got again at once. BadRequest (a malformed
        receipt), Conflict (the lease is over), Unavailable (its replica is out of reach)."""
        await self.queues.release(queue, message_id, receipt)

    def backlog(self, queue: str, group: str | None = None) -> int:
        """Messages of ``queue`` (or of its ``group``'s copies) this node knows of and has not
        seen acknowledged."""
        return self.queues.backlog(queue, group)

    def add_group(self, queue: str, group: str) -> bool:
        """Fan ``queue`` out to ``group``: every later put stores one copy per group, and each
        group's consumers get every message (``get(..., group=…)``). True if it is new."""
        return self.queues.add_group(queue, group)

    # ------------------------------------------------------------------ logs
    async def create_log(self, name: str, retention_s: float) -> bool:
        """Create log ``name`` (True), or find it made with the same retention (False).
        Conflict if it exists with another retention; BadRequest for a bad name or retention."""
        return await self.logs.create(name, retention_s)

    async def append(self, name: str, payload: bytes) -> int:
        """Append to the log's current range along its chain; the record's offset once the
        chain's tail holds it. NotFound (no such log), Unavailable (the chain is cut)."""
        return await self.logs.append(name, bytes(payload))

    async def read(self, name: str, group: str, max_records: int) -> list[LogRecord]:
        """The group's next records on this node, up to the high watermark (what every replica
        of the chain holds), at most ``max_records``."""
        records, _ = await self.logs.read(name, group, max_records)
        return [LogRecord(offset, payload) for offset, payload in records]

    def high_watermark(self, name: str) -> int:
        """The log's high watermark as this node knows it (-1: nothing committed yet)."""
        self.logs.require(name)
        return self.logs.high_watermark(name)

    async def checkpoint(self, name: str, group: str, offset: int) -> None:
        """Record that ``group`` has processed the log up to ``offset`` (replicated metadata:
        the highest checkpoint wins). BadRequest for an offset beyond the high watermark."""
        await self.logs.checkpoint(name, group, offset)

    # ------------------------------------------------------------------ the node
    def cluster(self) -> dict[str, Any]:
        """The node's view, for ``GET /cluster``: ``{"node", "members": [{"name", "state",
        "last_seen_s", "longest_silence_s", "suspicions"}], "queues": {name: backlog}, "logs":
        {name: {...}}, "routes": [...]}``; a member's state is ``self``, ``up`` or ``down``
        (``suspect_after``: the failure detector's timeout)."""
        return {"node": self.name, "replicas": self.config.replicas, "replication": self.config.replication,
                "persistence": self.config.persistence, "suspect_after": self.config.suspect_after,
                "members": self.membership.view(),
                "queues": {q: self.queues.backlog(q) for q in self.queues.queue_names()},
                "logs": self.logs.view(),
                "routes": [getattr(rule, "text", str(rule)) for rule in getattr(self.routes, "rules", [])],
                "broadcast": dict(self.broadcast.counts)}

    async def stop(self) -> None:
        """Stop the ticks and flush the files (a clean stop)."""
        for task in self.tasks:
            task.cancel()
        self.tasks.clear()
        if self.store is not None:
            replica_files = self.queues.replica.files
            files = list(replica_files.files.values()) if replica_files else []
            for f in files + list(self.logs.files.values()):
                pending = f.sync()
                if pending is not None:
                    await pending
            await self.store.settle()
