"""Replicated queues (slides S12-S14): a put stores the message on W replicas, sync or
chained; a get is served from any node, from the oldest message it knows of; a lease, an
ack or a release is settled on the message's replicas and the ACK broadcast.

- **Put** on node N: the replicas are N and W-1 of its up peers, shuffled (N first: the
  slide's "local queue updates" step). ``sync``: N calls them all at once (a replica that
  fails is replaced by a spare up peer, once); ``chain``: N -> r2 -> … -> tail, each
  passing the copy on, and the tail's answer travels back. With persistence, every
  replica fsyncs its copy before it answers. Then N broadcasts ``Added`` and answers.
  Copies stay invisible until ``Added`` reaches them (what the high watermark marks); a
  copy still uncommitted after a grace is published by its replica (``tidy``).
- **Get** on node N: the oldest message of the queue N knows of, preferring messages N
  holds a copy of ("reads are local"). The claim goes to the message's first replica that
  is up — the same one for every claimer while nothing fails, so a message is leased
  once — and falls back to the next replicas when it is not: in a net-split both sides
  serve, and a message may be delivered on each (a duplicate, which at-least-once permits).
- **Ack**: told to the replica that granted the lease, then broadcast, so every node and
  replica drops it; the broadcast alone settles it when that replica is out of reach.
- A replica's side of all this — its copies, leases and files — is ``replica``.
- A message none of whose replicas still has it (all crashed without persistence) is
  dropped from the index once every replica answers that it does not know it.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Any

from lab.backends.primer.core.broadcast import Broadcast
from lab.backends.primer.core.config import CHAIN, NodeConfig, check_name
from lab.backends.primer.core.errors import BadRequest, Conflict, Unavailable
from lab.backends.primer.core.index import Acked, Added, MessageIndex
from lab.backends.primer.core.membership import Membership
from lab.backends.primer.core.messages import AckMessage, Claim, Copy, DropCopy, StoreCopy
from lab.backends.primer.core.metadata import Metadata
from lab.backends.primer.core.replica import Granted, Replica
from lab.design.runtime import CallTimeout, RemoteError, Runtime, Unreachable

GROUP_SEP = "@"  # a fan-out group's lane: queue@group
MAX_CLAIMS = 8  # claims one get tries before it says "nothing"
RETRY_UNREACHABLE = 0.2  # seconds a message with no reachable replica is set aside


class Queues:
    def __init__(self, rt: Runtime, config: NodeConfig, membership: Membership, broadcast: Broadcast,
                 meta: Metadata, index: MessageIndex, store: Any = None, routes: Any = None):
        self.rt, self.config = rt, config
        self.name = config.name
        self.membership, self.broadcast, self.meta, self.index = membership, broadcast, meta, index
        self.routes = routes
        self.replica = Replica(rt, config, broadcast, index, store, self._requeue)
        self.local: dict[str, list] = {}  # queue -> heap of (order, id): messages this node is a replica of
        self.remote: dict[str, list] = {}  # queue -> heap of (order, id): the others
        self.deferred: dict[str, list] = {}  # queue -> heap of (until, order, id): leased or out of reach
        self.waiters: dict[str, Any] = {}  # queue -> event set when something may be got
        self.nonce = f"{rt.random.getrandbits(32):08x}"  # ids stay unique across restarts without files
        self.seq = 0
        self.dropped = 0  # puts the routes dropped
        index.on_added = self._on_added
        index.on_acked = self._on_acked

    # ------------------------------------------------------------------ fan-out groups
    def lane(self, queue: str, group: str | None = None) -> str:
        """Where a queue's messages for ``group`` live: ``queue@group`` (``@`` is not allowed
        in names, so a group's lane never meets a queue of its own), or the queue itself."""
        check_name("queue", queue)
        return queue if group is None else f"{queue}{GROUP_SEP}{check_name('group', group)}"

    def lane_of(self, queue: str, message_id: str) -> str:
        """The lane a message id belongs to (a group's copy carries ``@group``)."""
        base, sep, group = message_id.rpartition(GROUP_SEP) if isinstance(message_id, str) else ("", "", "")
        return self.lane(queue, group if sep and base else None)

    def groups(self, queue: str) -> list[str]:
        prefix = f"group/{queue}/"
        return [key[len(prefix):] for key in self.meta.keys(prefix)]

    def add_group(self, queue: str, group: str) -> bool:
        """Fan ``queue`` out to ``group`` (slide S12: "groups" to fan out): from now on every
        put into the queue stores one copy per group, each consumed on its own. True if new."""
        self.lane(queue, group)
        key = f"group/{queue}/{group}"
        if self.meta.get(key) is not None:
            return False
        self.broadcast.broadcast(self.meta.name, self.meta.entry(key, {"created_ns": self.rt.now_ns()}))
        return True

    # ------------------------------------------------------------------ put
    async def put(self, queue: str, payload: bytes) -> str:
        """The message's id; with fan-out groups, each group's copy has the id ``<id>@<group>``."""
        check_name("queue", queue)
        self.seq += 1
        message_id = f"{self.name}.{self.nonce}.{self.seq}"
        target = queue if self.routes is None else self.routes.route(queue, payload)
        if target is None:
            self.dropped += 1
            return message_id
        self._create(target)
        groups = self.groups(target)
        if not groups:
            await self._put(target, message_id, self.seq, payload)
        for group in groups:  # one replicated put per group; a failure leaves the earlier groups' copies
            await self._put(self.lane(target, group), f"{message_id}{GROUP_SEP}{group}", self.seq, payload)
        return message_id

    async def _put(self, queue: str, message_id: str, seq: int, payload: bytes) -> None:
        w = self.config.replicas
        peers = self.membership.up_peers()
        self.rt.random.shuffle(peers)
        if len(peers) < w - 1:
            raise Unavailable(f"replicas={w}, but only {len(peers) + 1} members are up here")
        copy = Copy(queue, message_id, self.name, seq, self.rt.now_ns(), (self.name, *peers[:w - 1]), payload)
        self.replica.store(copy)
        try:
            if self.config.replication == CHAIN:
                replicas = await self._chain(copy)
            else:
                replicas = await self._sync(copy, peers[w - 1:])
        except Unavailable:
            self.replica.drop(queue, message_id)
            raise
        self.replica.commit(queue, self.name, seq, message_id)
        await self.replica.settle(queue)  # the copy and its commit are durable before the put is acknowledged
        self.broadcast.broadcast(self.index.name, Added(queue, message_id, replicas, copy.put_ns, self.name, seq))

    async def _sync(self, copy: Copy, spares: list[str]) -> tuple[str, ...]:
        replicas = list(copy.replicas)
        failed = [peer for peer, ok in zip(replicas[1:], await self._all(
            [self._call(peer, StoreCopy(copy)) for peer in replicas[1:]])) if not ok]
        for peer in failed:  # one replacement each, from the spare up peers
            replicas.remove(peer)
            while spares:
                spare = spares.pop()
                if await self._call(spare, StoreCopy(replace(copy, replicas=tuple(replicas + [spare])))):
                    replicas.append(spare)
                    break
            else:
                self._forget(copy, replicas)
                raise Unavailable(f"{peer} did not store the message, and no spare member did")
        return tuple(replicas)

    async def _chain(self, copy: Copy) -> tuple[str, ...]:
        chain = copy.replicas
        if len(chain) > 1 and not await self._call(chain[1], StoreCopy(copy, chain[2:]), len(chain) - 1):
            self._forget(copy, chain)
            raise Unavailable(f"the chain {' -> '.join(chain)} did not store the message")
        return chain

    async def _all(self, coros: list) -> list[bool]:
        tasks = [self.rt.spawn(c) for c in coros]
        return [await t for t in tasks]

    async def _call(self, peer: str, message: Any, hops: int = 1) -> bool:
        try:
            await self.rt.net.call(peer, message, self.config.timeout * hops)
            return True
        except (CallTimeout, Unreachable, RemoteError):
            return False

    def _forget(self, copy: Copy, replicas: Any) -> None:
        for peer in replicas:
            if peer != self.name:
                self.rt.net.send(peer, DropCopy(copy.queue, copy.id))

    def _create(self, queue: str) -> None:
        """Queues are created on first use: the first put makes the cluster's entry."""
        key = f"queue/{queue}"
        if self.meta.get(key) is None:
            self.broadcast.broadcast(self.meta.name, self.meta.entry(key, {"created_ns": self.rt.now_ns()}))

    # ------------------------------------------------------------------ a replica's copies
    def _on_added(self, added: Added) -> None:
        self.replica.on_added(added)
        heap = self.local if self.name in added.replicas else self.remote
        heapq.heappush(heap.setdefault(added.queue, []), (added.order, added.id))
        self._wake(added.queue)

    def _on_acked(self, acked: Acked) -> None:
        self.replica.drop(acked.queue, acked.id)

    # ------------------------------------------------------------------ get
    async def get(self, queue: str, wait: float = 0.0, at_most_once: bool = False,
                  group: str | None = None) -> tuple[str, str | None, Granted] | None:
        queue = self.lane(queue, group)
        deadline = self.rt.now() + wait
        while True:
            got = await self._try_get(queue, at_most_once)
            if got is not None:
                return got
            left = deadline - self.rt.now()
            if left <= 0:
                return None
            event = self.waiters.get(queue)
            if event is None or event.is_set():
                event = self.waiters[queue] = self.rt.event()
            deferred = self.deferred.get(queue)
            until = deferred[0][0] - self.rt.now() if deferred else left
            await self.rt.wait(event, max(0.0, min(left, until)))

    def _wake(self, queue: str) -> None:
        event = self.waiters.pop(queue, None)
        if event is not None:
            event.set()

    def _next(self, queue: str) -> tuple[Any, str] | None:
        now = self.rt.now()
        deferred = self.deferred.get(queue)
        while deferred and deferred[0][0] <= now:
            _, order, message_id = heapq.heappop(deferred)
            added = self.index.known(message_id, queue)
            if added is not None:
                into = self.local if self.name in added.replicas else self.remote
                heapq.heappush(into.setdefault(queue, []), (order, message_id))
        live = self.index.live(queue)
        for heaps in (self.local, self.remote):
            heap = heaps.get(queue)
            while heap:
                order, message_id = heapq.heappop(heap)
                if message_id in live:
                    return order, message_id
        return None

    def _defer(self, queue: str, order: Any, message_id: str, until: float) -> None:
        heapq.heappush(self.deferred.setdefault(queue, []), (until, order, message_id))

    async def _try_get(self, queue: str, at_most_once: bool) -> tuple[str, str | None, Granted] | None:
        for _ in range(MAX_CLAIMS):
            picked = self._next(queue)
            if picked is None:
                return None
            order, message_id = picked
            added = self.index.known(message_id, queue)
            assert added is not None  # _next picks a live message, which the index knows
            answers: list[str] = []
            for replica in added.replicas:
                if not self.membership.up(replica):
                    answers.append("down")
                    continue
                answer = await self._claim_at(replica, Claim(queue, message_id, self.config.lease, at_most_once))
                if isinstance(answer, Granted):
                    return message_id, f"{replica}~{answer.token}" if answer.token else None, answer
                answers.append(answer[0])
                if answer[0] == "leased":
                    self._defer(queue, order, message_id, answer[1])
                    break
                if answer[0] == "acked":
                    self.index.merge("", Acked(queue, message_id))
                    break
            else:
                if answers and all(a == "unknown" for a in answers):
                    # every replica is up and none has it: it is gone (crashes without files)
                    self.broadcast.broadcast(self.index.name, Acked(queue, message_id))
                else:
                    self._defer(queue, order, message_id, self.rt.now() + RETRY_UNREACHABLE)
        return None

    async def _claim_at(self, replica: str, claim: Claim) -> Any:
        if replica == self.name:
            return self.replica.on_claim(claim)
        try:
            return await self.rt.net.call(replica, claim, self.config.timeout)
        except (CallTimeout, Unreachable, RemoteError):
            return ("unreachable",)

    # ------------------------------------------------------------------ ack and release
    @staticmethod
    def parse_receipt(receipt: str) -> tuple[str, str]:
        granter, sep, token = receipt.partition("~") if isinstance(receipt, str) else ("", "", "")
        if not sep or not granter or not token or len(receipt) > 300:
            raise BadRequest(f"malformed receipt {receipt!r}")
        return granter, token

    async def ack(self, queue: str, message_id: str, receipt: str) -> None:
        queue = self.lane_of(queue, message_id)
        granter, token = self.parse_receipt(receipt)
        request = AckMessage(queue, message_id, token)
        if granter == self.name:
            self.replica.on_ack(request)
        else:
            await self._call(granter, request)  # out of reach: the broadcast settles it
        self.broadcast.broadcast(self.index.name, Acked(queue, message_id))

    async def release(self, queue: str, message_id: str, receipt: str) -> None:
        queue = self.lane_of(queue, message_id)
        granter, token = self.parse_receipt(receipt)
        request = AckMessage(queue, message_id, token, release=True)
        if granter == self.name:
            released = self.replica.on_ack(request)
        else:
            try:
                released = await self.rt.net.call(granter, request, self.config.timeout)
            except (CallTimeout, Unreachable, RemoteError):
                raise Unavailable(f"{granter}, which leased the message, is out of reach") from None
        if not released:
            raise Conflict(f"message {message_id}: the lease {receipt} is over (expired, acked or released)")
        self._requeue(queue, message_id)  # this node may have set it aside as leased

    def _requeue(self, queue: str, message_id: str) -> None:
        added = self.index.known(message_id, queue)
        if added is not None:
            self._defer(queue, added.order, message_id, self.rt.now())
        self._wake(queue)

    # ------------------------------------------------------------------ housekeeping
    def backlog(self, queue: str, group: str | None = None) -> int:
        return len(self.index.live(self.lane(queue, group)))

    def queue_names(self) -> list[str]:
        """Queues and fan-out lanes (``queue@group``) this node knows of."""
        return sorted({key[len("queue/"):] for key in self.meta.keys("queue/")} | set(self.index.entries))

    def tidy(self) -> None:
        """Publish the replica's orphaned copies (``Replica.orphans``) and compact its files."""
        for copy in self.replica.orphans():
            self.broadcast.broadcast(self.index.name, Added(copy.queue, copy.id, copy.replicas, copy.put_ns,
                                                            copy.origin, copy.seq))
        self.replica.compact()
