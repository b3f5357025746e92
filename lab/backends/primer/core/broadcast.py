"""Plumtree: epidemic broadcast trees over the full mesh (helium/plumtree, as Primer uses it).

Per broadcast root, a node pushes whole broadcasts to its *eager* peers and only
announces them ("i-have", batched every ``lazy_tick``) to its *lazy* peers. A duplicate
push prunes its sender to lazy; an i-have for a broadcast not yet seen grafts its sender
to eager and pulls the broadcast. Initial fan-out as plumtree's: two nodes are each
other's eager peer; under five, one eager and one lazy; more, two eager and one lazy —
picked by rotating the sorted members from this node, so the first trees are rings.

Delivery is at least once to every reachable node, in no promised order. What a push
cannot reach (a down node, a cut link) is repaired by periodic anti-entropy: every
``exchange_tick`` the node sends one random up peer each handler's digest and summary,
and the two swap what either lacks (``Handler.reconcile``/``absorb``).

A handler (the metadata store, the message index) says what a payload means:
``merge`` (apply; False if stale), ``digest``/``summary``/``reconcile``/``absorb`` for
anti-entropy. This module knows nothing of queues. Sets are walked sorted: the sim world
must send the same messages in the same order for the same seed.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import Any, Protocol

from lab.backends.primer.core.membership import Membership
from lab.backends.primer.core.messages import Deliver, Exchange, Gossip, Graft, IHave, Prune
from lab.design.runtime import CallTimeout, Cancelled, RemoteError, Runtime, Unreachable

#: broadcasts kept for peers that graft them (and to answer duplicates cheaply)
RECENT = 20_000


class Handler(Protocol):
    name: str

    def merge(self, msg_id: str, payload: Any) -> bool:
        """Apply a broadcast; False if it was stale (seen, or superseded)."""

    def digest(self) -> int:
        """A hash of the handler's state: equal digests skip an exchange."""

    def summary(self) -> Any:
        """What a peer needs to tell what this node lacks and has extra."""

    def reconcile(self, summary: Any) -> tuple[list[Any], Any]:
        """On the peer: (payloads the caller lacks, what this node wants from the caller)."""

    def absorb(self, payloads: list[Any], want: Any) -> list[Any]:
        """On the caller: merge the peer's payloads; what to push back (what it wants, and
        anything its payloads showed it is behind on)."""


class Broadcast:
    def __init__(self, rt: Runtime, membership: Membership, lazy_tick: float, exchange_tick: float, timeout: float):
        self.rt, self.membership = rt, membership
        self.name = membership.name
        self.lazy_tick, self.exchange_tick, self.timeout = lazy_tick, exchange_tick, timeout
        self.handlers: dict[str, Handler] = {}
        self.eager: dict[str, set[str]] = {}
        self.lazy: dict[str, set[str]] = {}
        self.recent: OrderedDict[str, tuple[str, str, Any, int]] = OrderedDict()  # msg_id -> (root, handler, payload, round)
        self.outstanding: defaultdict[str, list[tuple[str, str, str, int]]] = defaultdict(list)
        self.counts: defaultdict[str, int] = defaultdict(int)  # eager, lazy, graft, prune, exchange, repaired

    def register(self, handler: Handler) -> None:
        self.handlers[handler.name] = handler

    # ------------------------------------------------------------------ peers per root
    def _init_peers(self, root: str) -> None:
        members = sorted(self.membership.members)
        me = members.index(self.name)
        ring = [m for m in members[me + 1:] + members[:me]]
        if len(members) == 2:
            eager, lazy = ring, []
        elif len(members) < 5:
            eager, lazy = ring[:1], ring[1:2]
        else:
            eager, lazy = ring[:2], ring[2:3]
        self.eager[root], self.lazy[root] = set(eager), set(lazy)

    def _peers(self, root: str) -> tuple[set[str], set[str]]:
        if root not in self.eager:
            self._init_peers(root)
        return self.eager[root], self.lazy[root]

    def _to_eager(self, root: str, peer: str) -> None:
        eager, lazy = self._peers(root)
        eager.add(peer)
        lazy.discard(peer)

    def _to_lazy(self, root: str, peer: str) -> None:
        eager, lazy = self._peers(root)
        lazy.add(peer)
        eager.discard(peer)

    # ------------------------------------------------------------------ broadcasting
    def broadcast(self, handler: str, payload: Any) -> None:
        """Apply ``payload`` here and push it to the cluster (its id is ``payload.msg_id``)."""
        msg_id = payload.msg_id
        if self.handlers[handler].merge(msg_id, payload):
            self._forward(self.name, msg_id, handler, payload, 0, None)

    def _forward(self, root: str, msg_id: str, handler: str, payload: Any, round_: int, sender: str | None) -> None:
        self.recent[msg_id] = (root, handler, payload, round_)
        if len(self.recent) > RECENT:
            self.recent.popitem(last=False)
        eager, lazy = self._peers(root)
        for peer in sorted(eager):
            if peer != sender:
                self.rt.net.send(peer, Gossip(root, msg_id, handler, payload, round_ + 1))
                self.counts["eager"] += 1
        for peer in sorted(lazy):
            if peer != sender:
                self.outstanding[peer].append((root, msg_id, handler, round_ + 1))

    def on_gossip(self, sender: str, message: Gossip) -> None:
        if self.handlers[message.handler].merge(message.msg_id, message.payload):
            self._to_eager(message.root, sender)
            self._forward(message.root, message.msg_id, message.handler, message.payload, message.round, sender)
        else:  # a duplicate: this link is not needed in root's tree
            self._to_lazy(message.root, sender)
            self.rt.net.send(sender, Prune(message.root))
            self.counts["prune"] += 1

    def on_ihave(self, sender: str, message: IHave) -> None:
        for root, msg_id, handler, round_ in message.items:
            if msg_id not in self.recent and not self._seen(handler, msg_id):
                self._to_eager(root, sender)
                self.rt.net.send(sender, Graft(root, msg_id, handler, round_))
                self.counts["graft"] += 1

    def _seen(self, handler: str, msg_id: str) -> bool:
        seen = getattr(self.handlers[handler], "seen", None)
        return bool(seen and seen(msg_id))

    def on_graft(self, sender: str, message: Graft) -> None:
        self._to_eager(message.root, sender)
        kept = self.recent.get(message.msg_id)
        if kept is not None:
            root, handler, payload, round_ = kept
            self.rt.net.send(sender, Gossip(root, message.msg_id, handler, payload, round_))

    def on_prune(self, sender: str, message: Prune) -> None:
        self._to_lazy(message.root, sender)

    async def lazy_loop(self) -> None:
        """Flush the i-haves every lazy tick."""
        while True:
            await self.rt.sleep(self.lazy_tick)
            if self.outstanding:
                batches, self.outstanding = self.outstanding, defaultdict(list)
                for peer, items in batches.items():
                    self.rt.net.send(peer, IHave(tuple(items)))
                    self.counts["lazy"] += len(items)

    # ------------------------------------------------------------------ anti-entropy
    async def exchange_loop(self) -> None:
        while True:
            await self.rt.sleep(self.exchange_tick)
            peers = self.membership.up_peers()
            if peers:
                await self.exchange(self.rt.random.choice(peers))

    async def exchange(self, peer: str) -> int:
        """Swap with ``peer`` what either lacks, handler by handler; how many payloads moved."""
        moved = 0
        for name, handler in self.handlers.items():
            try:
                reply = await self.rt.net.call(peer, Exchange(name, handler.digest(), handler.summary()), self.timeout)
            except (CallTimeout, Unreachable, RemoteError):
                return moved
            except Cancelled:
                raise
            self.counts["exchange"] += 1
            if reply is None:
                continue
            payloads, want = reply
            moved += len(payloads)
            give = handler.absorb(list(payloads), want)
            if give:
                self.rt.net.send(peer, Deliver(name, tuple(give)))
                moved += len(give)
        self.counts["repaired"] += moved
        return moved

    def on_exchange(self, sender: str, message: Exchange) -> Any:
        handler = self.handlers[message.handler]
        if message.digest == handler.digest():
            return None
        return handler.reconcile(message.summary)

    def on_deliver(self, sender: str, message: Deliver) -> None:
        handler = self.handlers[message.handler]
        for payload in message.payloads:
            self.counts["repaired"] += handler.merge(_id_of(payload), payload)


def _id_of(payload: Any) -> str:
    """Payloads exchanged by anti-entropy carry their broadcast id as ``.msg_id``."""
    return payload.msg_id
