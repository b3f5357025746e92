"""Primary-backup queues: two nodes, one primary at a time, each message on both before its put
is acknowledged.

Every change of the queues is an *op* — ``put``, ``open`` (a reliable get), ``take`` (a plain
get), ``ack``, ``release`` — that the primary applies, numbers (``seq``) and sends to the
backup, answering its client only once the backup confirmed. The backup applies ops in their
order, so its copy is the primary's up to some ``seq``; one that missed ops (it was down or
cut off) gets the whole state again (a *sync*) before it takes ops again.

Roles and epochs: a node boots *joining* (in memory: a restarted node has nothing) and asks
its peer how things stand; two joining nodes make the lower-named one primary of a new
epoch. The primary beats every ``HEARTBEAT_S``; a backup that hears nothing from it for
``PROMOTE_AFTER_S`` promotes itself (epoch + 1), and at once if its primary comes back
joining (it lost its state). A node that hears a higher epoch (or the same epoch from a
lower-named primary) steps down; a message carrying an older epoch is refused ("stale").
A primary stepping down hands the state it held over (a *merge*: its messages the new
primary lacks, its acks and its open receipts), so what it acknowledged alone survives.

Degraded: a primary whose backup does not answer (down, cut off, behind) acknowledges alone
until a sync succeeds. A crash of that lone primary loses what it acknowledged meanwhile —
the one loss ``promises.py`` admits outside a crash of both nodes.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from lab.design.runtime import CallTimeout, Cancelled, ConnectionLost, Event, RemoteError, Runtime, Unreachable

PRIMARY, BACKUP, JOINING = "primary", "backup", "joining"
HEARTBEAT_S = 0.1  # the primary's beat (and every node's tick)
PROMOTE_AFTER_S = 0.6  # a backup's patience with a silent primary
PEER_TIMEOUT_S = 0.25  # one call to the peer (an op, a beat, a hello)
SYNC_TIMEOUT_S = 1.0  # a sync carries the whole state
GAP_WAIT_S = 0.2  # how long a backup holds an op that came before its predecessor
PROBE_S = 0.02  # a degraded primary's beat: it acknowledges alone until its backup is back in step
PROBE_TIMEOUT_S = 0.05


class Full(Exception):
    """The queue holds ``max_length`` messages already: the put is refused (nothing stored)."""


class NotPrimary(Exception):
    """This node does not take client requests now; ``primary`` is the one it knows (or None)."""

    def __init__(self, primary: str | None, maybe_applied: bool = False):
        super().__init__(f"not primary (primary: {primary or 'unknown'})")
        self.primary, self.maybe_applied = primary, maybe_applied


@dataclass(frozen=True)
class Item:
    body: bytes
    receipt: str | None  # what ack/release name; None for a plain get (the message is gone)


@dataclass
class State:
    """The replicated data: the same ops give the same state on either node."""

    queues: dict[str, OrderedDict[str, None]] = field(default_factory=dict)  # queue -> message ids, head first
    bodies: dict[str, bytes] = field(default_factory=dict)  # message id -> body, while queued or open
    open: dict[str, tuple[str, str]] = field(default_factory=dict)  # receipt -> (queue, message id)
    seen: set[str] = field(default_factory=set)  # every message id ever stored (a retried put is a no-op)
    acked: set[str] = field(default_factory=set)  # message ids gone for good
    done: dict[str, str] = field(default_factory=dict)  # settled receipt -> "ack" | "release"

    def apply(self, op: tuple) -> bool:
        kind = op[0]
        if kind == "put":
            _, queue, mid, body = op
            if mid in self.seen:
                return False
            self.seen.add(mid)
            self.bodies[mid] = body
            self.queues.setdefault(queue, OrderedDict())[mid] = None
            return True
        if kind == "open":
            _, queue, mid, receipt = op
            self.queues.get(queue, OrderedDict()).pop(mid, None)
            self.open[receipt] = (queue, mid)
            return True
        if kind == "take":
            _, queue, mid = op
            self.queues.get(queue, OrderedDict()).pop(mid, None)
            self._gone(mid)
            return True
        if kind == "untake":  # a plain get undone (its reply never went out)
            _, queue, mid, body = op
            self.acked.discard(mid)
            self._requeue(queue, mid, body)
            return True
        if kind == "ack":
            receipt = op[1]
            opened = self.open.pop(receipt, None)
            if opened is None:
                return self.done.get(receipt) == "ack"
            self.done[receipt] = "ack"
            self._gone(opened[1])
            return True
        if kind == "release":
            receipt = op[1]
            opened = self.open.pop(receipt, None)
            if opened is None:
                return self.done.get(receipt) == "release"
            self.done[receipt] = "release"
            queue, mid = opened
            if mid not in self.acked:
                self._requeue(queue, mid, self.bodies[mid])
            return True
        raise ValueError(f"no op {kind!r}")

    def _gone(self, mid: str) -> None:
        self.acked.add(mid)
        self.bodies.pop(mid, None)

    def _requeue(self, queue: str, mid: str, body: bytes) -> None:
        self.bodies[mid] = body
        items = self.queues.setdefault(queue, OrderedDict())
        items[mid] = None
        items.move_to_end(mid, last=False)  # back at the head

    def head(self, queue: str) -> str | None:
        items = self.queues.get(queue)
        return next(iter(items)) if items else None

    def snapshot(self) -> dict[str, Any]:
        """Plain data (it crosses the network): lists, dicts, sets, bytes."""
        return {"queues": {q: list(items) for q, items in self.queues.items()}, "bodies": dict(self.bodies),
                "open": dict(self.open), "seen": set(self.seen), "acked": set(self.acked), "done": dict(self.done)}

    @classmethod
    def from_snapshot(cls, s: dict[str, Any]) -> "State":
        return cls({q: OrderedDict.fromkeys(mids) for q, mids in s["queues"].items()}, dict(s["bodies"]),
                   dict(s["open"]), set(s["seen"]), set(s["acked"]), dict(s["done"]))

    def within(self, s: dict[str, Any]) -> bool:
        """Whether snapshot ``s`` holds all this state knows: its messages, acks and receipts."""
        return (self.seen <= s["seen"] and self.acked <= s["acked"] and self.done.keys() <= s["done"].keys()
                and all(r in s["open"] or r in s["done"] for r in self.open))

    def merge(self, s: dict[str, Any]) -> None:
        """Take in what an old primary held (``snapshot``): its acks, its settled receipts, the
        messages this state never saw (at the tail) and its open receipts."""
        for mid in s["acked"]:
            if mid not in self.acked:
                for items in self.queues.values():
                    items.pop(mid, None)
                self.seen.add(mid)
                self._gone(mid)
        for receipt, verb in s["done"].items():
            if receipt in self.open:
                self.apply((verb, receipt))
            self.done.setdefault(receipt, verb)
        for queue, mids in s["queues"].items():
            for mid in mids:
                if mid not in self.seen:
                    self.apply(("put", queue, mid, s["bodies"][mid]))
        for receipt, (queue, mid) in s["open"].items():
            if receipt in self.open or receipt in self.done:
                continue
            if mid in self.acked:  # acknowledged here under another receipt: this one's ack is a no-op
                self.done[receipt] = "ack"
                continue
            self.seen.add(mid)
            self.bodies.setdefault(mid, s["bodies"][mid])
            self.queues.get(queue, OrderedDict()).pop(mid, None)
            self.open[receipt] = (queue, mid)


class Node:
    """One of the two nodes: its role, its epoch, its copy of the queues, and the peer protocol."""

    def __init__(self, rt: Runtime, name: str, peer: str, max_length: int = 0):
        self.rt, self.name, self.peer, self.max_length = rt, name, peer, max_length
        self.role, self.epoch, self.primary = JOINING, 0, None
        self.state = State()
        self.seq = 0  # ops applied (the primary numbers them; a backup follows)
        self.synced_epoch = -1  # backup: the epoch whose primary it last took a sync from
        self.synced = False  # primary: the backup holds every op up to seq: replicate to it
        self.syncing = False
        self.misses = 0  # primary: ops the backup did not confirm
        self.must_merge = False  # an old primary's state the new one has not taken in yet
        self.last_heard = self.joined = rt.now()
        self.progress: Event = rt.event()  # set (and replaced) whenever seq moves
        self.waiters: dict[str, list[Event]] = {}  # readers waiting for a message
        self._life = f"{rt.random.getrandbits(32):08x}"  # receipts differ from one life to the next
        self._numbers = itertools.count(1)

    async def start(self) -> None:
        await self.rt.net.serve(self.handle)
        self.rt.spawn(self._ticks(), name=f"{self.name} ticks")

    def status(self) -> dict[str, Any]:
        return {"node": self.name, "role": self.role, "epoch": self.epoch, "primary": self.primary,
                "synced": self.synced, "seq": self.seq}

    # ------------------------------------------------------------------ client requests (primary)

    def _must_lead(self) -> None:
        if self.role != PRIMARY:
            raise NotPrimary(self.primary)

    async def put(self, queue: str, mid: str, body: bytes) -> None:
        self._must_lead()
        if mid in self.state.seen:
            return  # a retried put: stored already
        if self.max_length and len(self.state.queues.get(queue, ())) >= self.max_length:
            raise Full(f"{queue} holds {self.max_length} messages (max_length {self.max_length})")
        op = ("put", queue, mid, body)
        try:
            await self._replicate(op)
        except NotPrimary as e:
            raise NotPrimary(e.primary, maybe_applied=True) from None  # it goes over with the merge
        self._wake(queue)

    async def get(self, queue: str, wait: float, reliable: bool) -> Item | None:
        """The head of ``queue``, waiting up to ``wait`` seconds for one; None if none came."""
        deadline = self.rt.now() + wait
        while True:
            self._must_lead()
            mid = self.state.head(queue)
            if mid is not None:
                body = self.state.bodies[mid]
                receipt = f"{self.name}.{self._life}.{next(self._numbers)}" if reliable else None
                op = ("open", queue, mid, receipt) if reliable else ("take", queue, mid)
                try:
                    await self._replicate(op)
                except NotPrimary:
                    # its reply will not go out: undo it here, before the state goes over
                    self.state.apply(("release", receipt) if reliable else ("untake", queue, mid, body))
                    raise
                return Item(body, receipt)
            left = deadline - self.rt.now()
            if left <= 0:
                return None
            ready = self.rt.event()
            waiting = self.waiters.setdefault(queue, [])
            waiting.append(ready)
            await self.rt.wait(ready, left)
            if ready in waiting:
                waiting.remove(ready)

    async def settle(self, receipt: str, verb: str) -> bool:
        """Ack or release ``receipt``; False if no open message has it."""
        self._must_lead()
        if self.state.done.get(receipt) == verb:
            return True  # a retried ack or release
        opened = self.state.open.get(receipt)
        if opened is None:
            return False
        await self._replicate((verb, receipt))
        if verb == "release":
            self._wake(opened[0])
        return True

    def length(self, queue: str) -> int:
        return len(self.state.queues.get(queue, ()))

    def _wake(self, queue: str) -> None:
        for ready in self.waiters.pop(queue, []):
            ready.set()

    # ------------------------------------------------------------------ replication

    def _apply(self, op: tuple) -> int:
        self.state.apply(op)
        self.seq += 1
        return self.seq

    async def _replicate(self, op: tuple) -> None:
        """Apply ``op`` here and, unless degraded, on the backup before returning.
        NotPrimary if the backup answered with a newer epoch (this node stepped down)."""
        seq = self._apply(op)
        if not (self.synced or self.syncing):
            return  # degraded: this node's copy is the only one
        reply = await self._call(("op", self.epoch, seq, op), PEER_TIMEOUT_S)
        if self._peer_says(reply) == "stale":
            raise NotPrimary(self.primary)

    async def _call(self, message: tuple, timeout: float) -> Any:
        try:
            return await self.rt.net.call(self.peer, message, timeout)
        except (CallTimeout, ConnectionLost, Unreachable, RemoteError):
            return None

    def _peer_says(self, reply: Any) -> str:
        """Act on the backup's answer to a beat, an op or a sync: ok, down, need, merge, stale."""
        if reply is None or reply[0] == "need":
            self._degrade()
            if reply is not None:
                self._start_sync()
            return "down" if reply is None else "need"
        if reply[0] == "stale":
            _, epoch, role = reply
            if role == PRIMARY:
                self._step_down(epoch, self.peer)
                return "stale"
            self.epoch = epoch + 1  # a backup of a newer epoch than ours: lead a newer one still
            self._degrade()
            self._start_sync()
            return "need"
        if reply[0] == "merge":
            self.state.merge(reply[1])
            self.seq += 1
            self._degrade()
            self._start_sync()
            return "merge"
        return "ok"

    def _degrade(self) -> None:
        self.synced = False
        self.misses += 1

    def _start_sync(self) -> None:
        if not self.syncing and self.role == PRIMARY:
            self.rt.spawn(self._sync(), name=f"{self.name} sync")

    async def _sync(self) -> None:
        """Send the whole state until the backup holds it with nothing missed meanwhile."""
        if self.syncing:
            return
        self.syncing = True
        try:
            for _ in range(5):
                epoch, misses = self.epoch, self.misses
                reply = await self._call(("sync", epoch, self.seq, self.state.snapshot()), SYNC_TIMEOUT_S)
                if self.role != PRIMARY or self.epoch != epoch:
                    return
                said = self._peer_says(reply)
                if said == "ok" and self.misses == misses:
                    self.synced = True
                    return
                if said in ("down", "stale"):
                    return
        finally:
            self.syncing = False

    def _promote(self, epoch: int) -> None:
        self.role, self.epoch, self.primary = PRIMARY, epoch, self.name
        self.synced = False
        self.must_merge = False  # its own state is the one that counts now
        self._start_sync()

    def _step_down(self, epoch: int, primary: str) -> None:
        if self.role == PRIMARY:
            self.must_merge = True
        self.role, self.epoch, self.primary = BACKUP, epoch, primary
        self.synced = False
        self.last_heard = self.rt.now()
        for queue in list(self.waiters):
            self._wake(queue)  # its readers learn it is no longer primary

    # ------------------------------------------------------------------ the peer protocol

    async def handle(self, source: str, message: tuple) -> Any:
        kind, epoch = message[0], message[1]
        if kind == "hello":
            return self._on_hello(source, epoch, message[2])
        # beat, op, sync: from a node that believes it is primary of ``epoch``
        if epoch < self.epoch or (epoch == self.epoch and self.role == PRIMARY and self.name < source):
            return ("stale", self.epoch, self.role)
        if self.role == PRIMARY or epoch > self.epoch or self.primary != source:
            self._step_down(epoch, source)
        self.last_heard = self.rt.now()
        if kind == "sync":
            _, epoch, seq, snapshot = message
            if self.must_merge and not self.state.within(snapshot):
                # taken before the new primary merged ours, it would drop what this node acknowledged alone
                return ("merge", self.state.snapshot())
            self.state = State.from_snapshot(snapshot)
            self.role, self.seq, self.synced_epoch, self.must_merge = BACKUP, seq, epoch, False
            self._moved()
            return ("ok",)
        if kind == "beat":
            return ("ok",) if self.synced_epoch == epoch and message[2] == self.seq else ("need",)
        _, epoch, seq, op = message  # an op: held until its predecessors (or the sync) are in
        until = self.rt.now() + GAP_WAIT_S
        while (self.synced_epoch != epoch or seq > self.seq + 1) and self.rt.now() < until:
            await self.rt.wait(self.progress, until - self.rt.now())
        if self.must_merge:
            return ("merge", self.state.snapshot())
        if self.synced_epoch != epoch or seq > self.seq + 1:
            return ("need",)
        if seq == self.seq + 1:
            self.state.apply(op)
            self.seq = seq
            self._moved()
        return ("ok",)

    def _moved(self) -> None:
        progress, self.progress = self.progress, self.rt.event()
        progress.set()

    def _on_hello(self, source: str, epoch: int, role: str) -> tuple:
        if role == JOINING:
            if self.role == BACKUP:
                self._promote(self.epoch + 1)  # our primary came back with nothing: the copy is ours
            elif self.role == JOINING and self.name < source:
                self._promote(max(self.epoch, epoch) + 1)
            elif self.role == PRIMARY:
                self._degrade()
                self._start_sync()
        return ("status", self.epoch, self.role)

    async def _hello(self) -> None:
        reply = await self._call(("hello", self.epoch, JOINING), PEER_TIMEOUT_S)
        if self.role != JOINING:
            return  # a sync came meanwhile
        if reply is None:
            if self.rt.now() - self.joined > 2 * PROMOTE_AFTER_S:
                self._promote(self.epoch + 1)  # nobody there: lead alone
            return
        _, epoch, role = reply
        self.joined = self.rt.now()  # somebody is there: wait for its sync, or lead
        if role == JOINING and self.name < self.peer:
            self._promote(max(self.epoch, epoch) + 1)

    async def _ticks(self) -> None:
        while True:
            degraded = self.role == PRIMARY and not self.synced
            await self.rt.sleep(PROBE_S if degraded else HEARTBEAT_S)
            try:
                if self.role == PRIMARY:
                    epoch = self.epoch
                    reply = await self._call(("beat", epoch, self.seq), PROBE_TIMEOUT_S if degraded else PEER_TIMEOUT_S)
                    if self.role == PRIMARY and self.epoch == epoch:
                        if self._peer_says(reply) == "ok" and not self.syncing:
                            self.synced = True  # it holds everything: replicate to it again
                elif self.role == BACKUP:
                    if self.rt.now() - self.last_heard > PROMOTE_AFTER_S:
                        self._promote(self.epoch + 1)
                else:
                    await self._hello()
            except Cancelled:
                raise
            except Exception:  # noqa: BLE001 (a tick that failed must not end the ticks)
                pass
