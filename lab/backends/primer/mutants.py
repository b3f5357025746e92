"""Primer's mutants: the replicated queues (``core/queues.py``) and a replica's side of them
(``core/replica.py``) with one mistake each.

Primer promises that a message survives until all W of its replicas lose their copies (a
crash without files, a destroyed disk with ``persistence=aof``), at-least-once delivery in
which a message comes again only after its lease expires, a release or a fault, and
at-most-once gets that never deliver a message twice. Each mutant breaks one of those in
the code every node runs (the sim world's nodes and the live world's ``lab serve primer``
processes alike): the put that picks a message's replicas, the settle that makes a
replica's copy durable before it answers, the claim that leases a message at one replica
so that no other consumer gets it meanwhile, and the at-most-once claim that deletes a
message from every copy as it is read.
"""

from __future__ import annotations

from typing import Any, Awaitable

from lab.backends.primer.core.config import CHAIN
from lab.backends.primer.core.errors import Unavailable
from lab.backends.primer.core.index import Acked, Added
from lab.backends.primer.core.messages import Claim, Copy
from lab.backends.primer.core.queues import MAX_CLAIMS, RETRY_UNREACHABLE, Queues
from lab.backends.primer.core.replica import Granted, Replica
from lab.design import Mutant, Patch

AOF = {"persistence": "aof"}  # with files, only a destroyed disk may lose a copy: a crash may not


async def _put_one_copy_short(self: Queues, queue: str, message_id: str, seq: int, payload: bytes) -> None:
    """``Queues._put`` with the peers sliced one short: ``peers[:w - 2]`` (as if W counted
    the peers, the node itself left out twice), so a put is stored, committed and
    acknowledged on W-1 replicas — and its ``Added`` says so, so nothing notices."""
    w = self.config.replicas
    peers = self.membership.up_peers()
    self.rt.random.shuffle(peers)
    if len(peers) < w - 1:
        raise Unavailable(f"replicas={w}, but only {len(peers) + 1} members are up here")
    copy = Copy(queue, message_id, self.name, seq, self.rt.now_ns(), (self.name, *peers[:max(0, w - 2)]), payload)
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
    await self.replica.settle(queue)
    self.broadcast.broadcast(self.index.name, Added(queue, message_id, replicas, copy.put_ns, self.name, seq))


async def _settle_in_background(self: Replica, queue: str) -> None:
    """``Replica.settle`` with the queue file's fsync spawned as a background task (to take
    it off the put's latency) instead of awaited: the replica answers its put, and the node
    that took it answers the client, while the copy is still only in the page cache."""
    if self.files is not None:
        pending = self.files.file(queue).sync()
        if pending is not None:
            self.rt.spawn(_finish(pending), name=f"{self.name} aof fsync {queue}")  # the bug: not awaited


async def _finish(pending: Awaitable[Any]) -> None:
    await pending


async def _try_get_claiming_locally(self: Queues, queue: str, at_most_once: bool) -> Any:
    """``Queues._try_get`` with "reads are local" carried one step too far: a node that is
    one of the message's replicas claims it at its own copy first, instead of at the
    message's first up replica. While nothing fails, two replicas' consumers may each
    lease the same message before the other's ``LeaseNote`` arrives: a duplicate."""
    for _ in range(MAX_CLAIMS):
        picked = self._next(queue)
        if picked is None:
            return None
        order, message_id = picked
        added = self.index.known(message_id, queue)
        assert added is not None  # _next picks a live message, which the index knows
        answers: list[str] = []
        mine_first = sorted(added.replicas, key=lambda r: r != self.name)  # the bug: not the replicas' order
        for replica in mine_first:
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
                self.broadcast.broadcast(self.index.name, Acked(queue, message_id))
            else:
                self._defer(queue, order, message_id, self.rt.now() + RETRY_UNREACHABLE)
    return None


def _claim_deleting_one_copy(self: Replica, claim: Claim) -> Any:
    """``Replica.on_claim`` whose at-most-once branch deletes the message where it is read
    (``self.drop``) instead of broadcasting its ``Acked``: the other replicas keep their
    copies and every node's index keeps the message, so it is served again from another
    copy."""
    if claim.at_most_once:
        held = self.held.get(claim.queue, {}).get(claim.id)
        if held is not None and held.lease_until <= self.rt.now():
            self.drop(claim.queue, claim.id)  # the bug: this copy only, and no Acked broadcast
            return Granted(held.copy.payload, None, 0.0)
    return _ON_CLAIM(self, claim)


_ON_CLAIM = Replica.on_claim

MUTANTS = [
    Mutant("primer-one-copy-short", "primer", "no loss of an acknowledged put while one of its W replicas "
                                               "keeps its disk",
           "a put picks peers[:W-2] as the other replicas, so it is stored and acknowledged on W-1 nodes",
           (Patch(Queues, "_put", _put_one_copy_short),), options=AOF,
           scenarios=("disk-loss-one",)),
    Mutant("primer-ack-before-fsync", "primer", "no loss of an acknowledged put under a crash (persistence=aof)",
           "a replica's settle spawns the queue file's fsync in a background task instead of awaiting it",
           (Patch(Replica, "settle", _settle_in_background),), options=AOF,
           scenarios=("crash-slow-disk", "ack-before-durable-crash", "crash-all")),
    Mutant("primer-claims-its-own-copy", "primer", "no duplicate delivery before a lease expires, a release "
                                                    "or a fault",
           "a get on a replica claims its own copy first, not the message's first up replica: two leases at once",
           (Patch(Queues, "_try_get", _try_get_claiming_locally),),
           scenarios=("crash-one", "burst-reliable")),
    Mutant("primer-get-keeps-a-copy", "primer", "at-most-once: no duplicate delivery",
           "an at-most-once get deletes the copy it read and tells neither the other replicas nor the index",
           (Patch(Replica, "on_claim", _claim_deleting_one_copy),),
           scenarios=("steady",)),  # the one at-most-once workload: every scenario reads reliably
]
