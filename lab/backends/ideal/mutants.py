"""The control's mutants: the ideal queue with one mistake each. The ideal promises no
loss, no duplicate and FIFO per queue with no exception, so each must be caught in a run
with no fault at all."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from lab.backends.ideal.core import IdealQueue, Item
from lab.design import Mutant, Patch

EVERY = 40  # one crowded get in this many goes wrong: rare enough to hide in a short look
#: each queue's crowded gets and acks so far: the mutants' own count, kept beside the core
_crowded_gets: WeakKeyDictionary[IdealQueue, int] = WeakKeyDictionary()
_acks: WeakKeyDictionary[IdealQueue, int] = WeakKeyDictionary()


async def _get_skipping_the_head(self: IdealQueue, queue: str, wait: float, reliable: bool) -> Item | None:
    """Now and then the head's successor goes first (an index off by one in a batch pop)."""
    items = self.queues.get(queue)
    if items is not None and len(items) >= 2:
        _crowded_gets[self] = _crowded_gets.get(self, 0) + 1
        if _crowded_gets[self] % EVERY == 0:  # the bug: a later message first
            body = items[1]
            del items[1]
            return self._deliver(queue, body, reliable)
    return await _GET(self, queue, wait, reliable)


def _ack_that_redelivers(self: IdealQueue, xid: int) -> bool:
    """Now and then an ack puts its item back instead of dropping it (ack and release
    sharing one code path, with the flag read the wrong way round)."""
    _acks[self] = _acks.get(self, 0) + 1
    if _acks[self] % EVERY == 0 and xid in self.open:
        return self.release(xid)  # the bug: acknowledged, and delivered again
    return _ACK(self, xid)


_GET = IdealQueue.get
_ACK = IdealQueue.ack

MUTANTS = [
    Mutant("ideal-skips-the-head", "ideal", "FIFO per queue",
           "one crowded get in 40 hands out the second message, not the head",
           (Patch(IdealQueue, "get", _get_skipping_the_head),), scenarios=("burst-reliable",)),
    Mutant("ideal-ack-redelivers", "ideal", "no duplicate",
           "one ack in 40 puts the acknowledged message back at the head of its queue",
           (Patch(IdealQueue, "ack", _ack_that_redelivers),)),  # the swarm's short reliable load shows it
]
