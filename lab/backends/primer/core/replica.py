"""A replica's side of the replicated queues: the copies this node holds, their leases, and
their append-only files.

A put stores a copy here (``store``; in a chain, ``on_store`` also passes it on); the
put's ``Added`` broadcast commits it (``commit``: visible to consumers — the high
watermark); a claim leases it (``on_claim``: the first up replica of a message grants
every lease while nothing fails, and tells the other replicas); an ack or a release
settles the lease (``on_ack``); an ``Acked`` broadcast drops it. With persistence every
change is a record in the queue's file, and a copy counts only once it is fsynced
(``settle``). What a consumer asks for and which replica to ask is ``lab.backends.primer.core.queues``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from lab.backends.primer.core import aof, aof_records
from lab.backends.primer.core.broadcast import Broadcast
from lab.backends.primer.core.config import AOF, NodeConfig
from lab.backends.primer.core.errors import Unavailable
from lab.backends.primer.core.index import Acked, Added, MessageIndex
from lab.backends.primer.core.messages import AckMessage, Claim, Copy, DropCopy, LeaseNote, StoreCopy
from lab.design.runtime import CallTimeout, RemoteError, Runtime, Unreachable

#: timeouts after which a replica publishes a copy nobody committed (``Replica.orphans``)
ORPHAN_GRACE = 2


@dataclass
class Held:
    """This node's copy of a message, and the lease this replica knows of."""

    copy: Copy
    committed: bool = False
    lease_until: float = 0.0
    token: str = ""
    stored_at: float = 0.0


@dataclass(frozen=True)
class Granted:
    payload: bytes
    token: str | None
    until: float


class QueueFiles:
    """The append-only file of each queue on this node (persistence aof)."""

    def __init__(self, store: Any):
        self.store = store
        self.files: dict[str, aof.AofFile] = {}
        self.dead: dict[str, int] = {}

    def file(self, queue: str) -> aof.AofFile:
        f = self.files.get(queue)
        if f is None:
            f = self.files[queue] = aof.AofFile(self.store, f"queue.{queue}.aof")
            self.dead[queue] = 0
        return f

    def queues(self) -> list[str]:
        return sorted(name[len("queue."):-len(".aof")] for name in self.store.names()
                      if name.startswith("queue.") and name.endswith(".aof"))


class Replica:
    def __init__(self, rt: Runtime, config: NodeConfig, broadcast: Broadcast, index: MessageIndex,
                 store: Any, requeue: Callable[[str, str], None]):
        """``requeue(queue, id)``: a lease ended here; the node's consumers may get it again."""
        self.rt, self.config = rt, config
        self.name = config.name
        self.broadcast, self.index = broadcast, index
        self.requeue = requeue
        self.files = QueueFiles(store) if config.persistence == AOF else None
        self.held: dict[str, dict[str, Held]] = {}  # queue -> id -> this replica's copy
        self.commits: dict[tuple[str, str], int] = {}  # (queue, origin) -> highest committed seq known here

    # ------------------------------------------------------------------ recovery
    def recover(self) -> None:
        """Load every queue file: committed copies go back into the index (anti-entropy then
        tells the other nodes), uncommitted ones wait for an ``Added`` (or become orphans)."""
        if self.files is None:
            return
        for queue in self.files.queues():
            puts: dict[str, aof_records.Put] = {}
            for record in self.files.file(queue).recover():
                if isinstance(record, aof_records.Put):
                    puts[record.id] = record
                elif isinstance(record, aof_records.Ack):
                    puts.pop(record.id, None)
                    self.index.tombstones[record.id] = self.rt.now()
                elif isinstance(record, aof_records.Commit):
                    key = (queue, record.origin)
                    self.commits[key] = max(self.commits.get(key, -1), record.seq)
            held = self.held.setdefault(queue, {})
            for put in puts.values():
                copy = Copy(queue, put.id, put.origin, put.seq, put.put_ns, tuple(put.replicas), put.payload)
                held[put.id] = Held(copy, stored_at=self.rt.now())
                if put.seq <= self.commits.get((queue, put.origin), -1):
                    self.index.merge("", Added(queue, put.id, copy.replicas, put.put_ns, put.origin, put.seq))

    # ------------------------------------------------------------------ copies
    def store(self, copy: Copy) -> None:
        held = self.held.setdefault(copy.queue, {})
        if copy.id in held or self.index.acked(copy.id):
            return
        held[copy.id] = Held(copy, stored_at=self.rt.now())
        if self.files is not None:
            self.files.file(copy.queue).append(aof_records.Put(copy.id, copy.origin, copy.seq, copy.put_ns,
                                                               copy.replicas, copy.payload))

    async def settle(self, queue: str) -> None:
        """Wait until every record of ``queue``'s file so far is durable."""
        if self.files is not None:
            pending = self.files.file(queue).sync()
            if pending is not None:
                await pending

    def drop(self, queue: str, message_id: str) -> None:
        held = self.held.get(queue, {}).pop(message_id, None)
        if held is not None and self.files is not None:
            self.files.file(queue).append(aof_records.Ack(message_id))
            self.files.dead[queue] += 2

    def commit(self, queue: str, origin: str, seq: int, message_id: str) -> None:
        """This node's copy is visible: W replicas hold it. With files, the queue's high
        watermark for ``origin`` moves up to ``seq`` (a recovery makes copies at or below
        it visible again; those above wait for the cluster to say)."""
        held = self.held.get(queue, {}).get(message_id)
        if held is None or held.committed:
            return
        held.committed = True
        if self.files is not None:
            key = (queue, origin)
            if seq > self.commits.get(key, -1):
                self.commits[key] = seq
                self.files.file(queue).append(aof_records.Commit(origin, seq))

    def on_added(self, added: Added) -> None:
        held = self.held.get(added.queue, {}).get(added.id)
        if held is not None and held.copy.replicas != added.replicas:
            held.copy = replace(held.copy, replicas=added.replicas)
        self.commit(added.queue, added.origin, added.seq, added.id)

    # ------------------------------------------------------------------ the peers' requests
    async def on_store(self, message: StoreCopy) -> bool:
        """A replica's half of a put (and, in a chain, the rest of the chain's)."""
        copy = message.copy
        self.store(copy)
        if message.chain:
            try:
                await self.rt.net.call(message.chain[0], StoreCopy(copy, message.chain[1:]),
                                       self.config.timeout * len(message.chain))
            except (CallTimeout, Unreachable, RemoteError) as e:
                self.drop(copy.queue, copy.id)
                raise Unavailable(f"{self.name}: the chain broke after this node") from e
        await self.settle(copy.queue)
        return True

    def on_drop(self, message: DropCopy) -> None:
        held = self.held.get(message.queue, {}).get(message.id)
        if held is not None and not held.committed:
            self.drop(message.queue, message.id)

    def on_claim(self, claim: Claim) -> Any:
        """Lease (or give up, at most once) this replica's copy: ``Granted`` or a reason."""
        held = self.held.get(claim.queue, {}).get(claim.id)
        if held is None:
            return ("acked",) if self.index.acked(claim.id) else ("unknown",)
        now = self.rt.now()
        if held.lease_until > now:
            return ("leased", held.lease_until)
        held.committed = True  # a claim comes from a node that saw the message's Added
        if claim.at_most_once:
            self.broadcast.broadcast(self.index.name, Acked(claim.queue, claim.id))
            return Granted(held.copy.payload, None, 0.0)
        held.token = f"{self.rt.random.getrandbits(48):012x}"
        held.lease_until = now + claim.lease
        self._tell_replicas(held, LeaseNote(claim.queue, claim.id, held.token, held.lease_until))
        return Granted(held.copy.payload, held.token, held.lease_until)

    def on_lease(self, note: LeaseNote) -> None:
        held = self.held.get(note.queue, {}).get(note.id)
        if held is not None:
            held.lease_until, held.token = note.until, note.token
        if note.until == 0:
            self.requeue(note.queue, note.id)

    def on_ack(self, request: AckMessage) -> bool:
        """On the granting replica: an ack drops the copy (the broadcast tells the others);
        a release ends the lease if it is still this one."""
        if not request.release:
            self.index.merge("", Acked(request.queue, request.id))
            return True
        held = self.held.get(request.queue, {}).get(request.id)
        if held is None or held.token != request.token or held.lease_until <= self.rt.now():
            return False
        held.lease_until = 0.0
        self._tell_replicas(held, LeaseNote(request.queue, request.id, held.token, 0.0))
        self.requeue(request.queue, request.id)
        return True

    def _tell_replicas(self, held: Held, note: LeaseNote) -> None:
        for peer in held.copy.replicas:
            if peer != self.name:
                self.rt.net.send(peer, note)

    # ------------------------------------------------------------------ housekeeping
    def orphans(self) -> list[Copy]:
        """Copies nobody committed within ``ORPHAN_GRACE`` timeouts, that the cluster has not
        heard of: the node that took the put may have crashed (or been cut off) between its
        answer to the client and its ``Added`` broadcast, so the put may have been
        acknowledged. (A put that failed told its replicas to drop their copies; if that was
        lost too, the message appears all the same — its client was told the outcome is
        unknown, a 503.)"""
        horizon = self.rt.now() - ORPHAN_GRACE * self.config.timeout
        return [h.copy for queue, held in self.held.items() for i, h in held.items()
                if not h.committed and h.stored_at < horizon and self.index.known(i, queue) is None
                and not self.index.acked(i)]

    def compact(self) -> None:
        """Rewrite the files that are mostly dead (acknowledged copies) as their live records."""
        if self.files is None:
            return
        for queue, dead in self.files.dead.items():
            if dead > 10_000 and dead > 2 * len(self.held.get(queue, {})):
                pending = self.files.file(queue).compact(self._live_records(queue))
                if pending is not None:
                    self.rt.spawn(pending, name=f"compact {queue}")
                self.files.dead[queue] = 0

    def _live_records(self, queue: str) -> list[Any]:
        records: list[Any] = [aof_records.Put(h.copy.id, h.copy.origin, h.copy.seq, h.copy.put_ns,
                                              h.copy.replicas, h.copy.payload)
                              for h in self.held.get(queue, {}).values()]
        records += [aof_records.Commit(origin, seq)
                    for (q, origin), seq in sorted(self.commits.items()) if q == queue]
        return records
