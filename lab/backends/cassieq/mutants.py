"""CassieQ's mutants: its queue core (``lab.backends.cassieq.core``) with one mistake each.

CassieQ promises at-least-once with reliable acks: a delivery comes again only after its
lease expires, a release or a fault, and no acknowledged put is lost but with the store's
disk. Every step of a get is a compare-and-set on the store, and the invisibility pointer
is what brings back a lease that ran out; these mutants get one of those steps wrong, as a
port of the original's Java could. The sim world's CassieQ runs are the slowest of the
designs', so each mutant's first scenario is a short one that shows it at seed 1.
"""

from __future__ import annotations

from lab.backends.cassieq.core.messages import MessageQueue
from lab.backends.cassieq.core.model import Message, bucket_of, millis
from lab.backends.cassieq.core.queue_data import QueueData
from lab.backends.cassieq.core.store import Condition
from lab.design import Mutant, Patch


async def _consume_ignoring_the_cas(self: QueueData, message: Message, invisibility: float) -> Message | None:
    """[CAS-6] sent, its applied flag never read: a reader that lost the race to another
    reader for the same row still hands the message out (the LWT treated as a write)."""
    values = {"next_visible_on": self.now_ms() + millis(invisibility), "version": message.version + 1,
              "delivery_count": message.delivery_count + 1}
    conditions = [Condition("version", "=", message.version), Condition("acked", "=", False)]
    await self.store.update("message", self._message_key(message.index), values, conditions=conditions)
    return message.with_version(message.version + 1)  # the bug: as if it had applied


async def _newly_visible_reviving_leases(self: MessageQueue, reader: int, pointer: int) -> Message | None:
    """The invisibility strategy with the lease test on the pointer's own row left out: the
    pointer rests on the first leased row of its bucket (that is how it waits for a lease to
    run out), and the next get takes that row back as if its lease were over — the message
    handed out again while its consumer still holds it."""
    data, size = self.data, self.definition.bucket_size
    while True:
        message = await data.message(pointer)
        if message is not None and not message.acked:
            return message  # the bug: "came back to life" without asking whether its lease is over
        bucket = bucket_of(pointer, size)
        messages = await data.bucket(bucket)
        now = data.now_ms()
        if not messages:
            if bucket >= reader or not await data.finalized(bucket):
                return None
        else:
            if reader > bucket:
                revived = next((m for m in messages if m.visible(now) and not m.acked), None)
                if revived is not None:
                    return revived
            leased = next((m for m in messages if not m.acked and not m.visible(now)), None)
            if leased is not None:
                await data.move_invis_pointer(pointer, leased.index)
                return None
            undelivered = next((m for m in messages if m.delivery_count == 0), None)
            if undelivered is not None:
                await data.move_invis_pointer(pointer, undelivered.index)
                return None
            all_acked = all(m.acked for m in messages)
            if not (all_acked and (len(messages) == size or await data.finalized(bucket))):
                return None
        if bucket == reader:
            return None
        pointer = await data.move_invis_pointer(pointer, (bucket + 1) * size)


async def _newly_visible_stepping_over_leases(self: MessageQueue, reader: int, pointer: int) -> Message | None:
    """The invisibility strategy with the reader's test for "done with this row" — acked *or
    invisible* — so the pointer steps over a leased row instead of resting on it. The reader
    may pass a leased row because the pointer stays behind to bring it back; with the pointer
    past it too, a lease that runs out unacknowledged (a cut reply, a consumer gone) is never
    revived, and the repair worker republishes only rows never delivered: the message is lost."""
    data, size = self.data, self.definition.bucket_size
    while True:
        message = await data.message(pointer)
        now = data.now_ms()
        if message is not None and not message.acked and message.visible(now):
            return message  # came back to life
        bucket = bucket_of(pointer, size)
        messages = await data.bucket(bucket)
        now = data.now_ms()
        if not messages:
            if bucket >= reader or not await data.finalized(bucket):
                return None
        else:
            if reader > bucket:
                revived = next((m for m in messages if m.visible(now) and not m.acked), None)
                if revived is not None:
                    return revived
            undelivered = next((m for m in messages if m.delivery_count == 0), None)
            if undelivered is not None:
                await data.move_invis_pointer(pointer, undelivered.index)
                return None
            # the bug: a leased row counts as done, as it does for the reader
            done = all(m.acked or not m.visible(now) for m in messages)
            if not (done and (len(messages) == size or await data.finalized(bucket))):
                return None
        if bucket == reader:
            return None
        pointer = await data.move_invis_pointer(pointer, (bucket + 1) * size)


MUTANTS = [
    Mutant("cassieq-lease-cas-ignored", "cassieq", "no duplicate outside a lease expiry, release or fault",
           "a get's lease compare-and-set (CAS-6) is sent but its applied flag is not read: two readers of one "
           "row both hand it out",
           (Patch(QueueData, "consume", _consume_ignoring_the_cas),), scenarios=("split-clients", "burst-reliable")),
    Mutant("cassieq-pointer-passes-leases", "cassieq", "no loss of an acknowledged put but under disk loss",
           "the invisibility pointer steps over a leased row as the reader does, so a lease that runs out "
           "unacknowledged is never brought back",
           (Patch(MessageQueue, "_newly_visible", _newly_visible_stepping_over_leases),),
           scenarios=("split-clients",)),
    Mutant("cassieq-pointer-revives-leases", "cassieq", "no duplicate outside a lease expiry, release or fault",
           "the invisibility pointer hands out the row it rests on without asking whether its lease is over: "
           "a leased message is visible again at once",
           (Patch(MessageQueue, "_newly_visible", _newly_visible_reviving_leases),),
           scenarios=("burst-reliable", "split-clients")),
]
