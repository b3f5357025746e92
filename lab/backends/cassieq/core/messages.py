"""One queue's message operations: put, get (lease), ack and update (spec §4.1 to §4.6, §4.10).

A get first asks the invisibility pointer for a message that came back to life behind the
reader (an expired lease, or a delayed put whose delay is over), then walks the reader's
bucket, sealing buckets it finishes. Every step is a compare-and-set; a lost one re-reads
and tries again. Consuming a message that was already handed out ``maxDeliveryCount``
times dead-letters it instead (a copy to the DLQ if there is one, then an ack).

What the lab does differently from the original: an ack or update whose receipt names no
row is a ``Conflict`` (the original's ack threw a NullPointerException, a 500); a receipt
that does not decode is ``BadPopReceipt``.
"""

from __future__ import annotations

import logging
from enum import Enum

from lab.backends.cassieq.core.errors import Conflict, ExistingMonoton, NotFound
from lab.backends.cassieq.core.model import Delivery, Message, PopReceipt, QueueDefinition, Updated, bucket_of
from lab.backends.cassieq.core.queue_data import QueueData
from lab.backends.cassieq.core.queues import Queues
from lab.backends.cassieq.core.store import CassStore
from lab.design.runtime import Runtime

log = logging.getLogger(__name__)


class Source(Enum):
    """Who found the message a get consumes: the invisibility pointer moves onto what it
    revived; the reader's finds need no pointer move."""

    READER = "reader"
    INVISIBILITY = "invisibility"


class MessageQueue:
    """The message operations on one life of a queue (one ``QueueDefinition``)."""

    def __init__(self, store: CassStore, rt: Runtime, definition: QueueDefinition, queues: Queues | None = None):
        self.rt = rt
        self.definition = definition
        self.data = QueueData.of(store, rt, definition)
        self.queues = queues or Queues(store, rt, definition.account_name)

    # -- put (§4.1) --------------------------------------------------------------------------------

    async def put(self, body: str, initial_invisibility: float = 0) -> int:
        """Store a message: claim an id (CAS-1 loop), insert it (CAS-2), size += 1. Hidden for
        ``initial_invisibility`` seconds. Returns its id. The caller has already checked that
        the queue is Active (``Queues.require_active``)."""
        index = await self.data.next_monotonic()
        await self.data.insert_message(index, body, initial_invisibility)
        return index

    # -- get (§4.2, §4.3) ----------------------------------------------------------------------------

    async def get(self, invisibility: float = 30) -> Delivery | None:
        """Lease the next message for ``invisibility`` seconds, or None when nothing is available."""
        if invisibility < 0:
            raise ValueError(f"the invisibility time cannot be negative: {invisibility}")
        active = await self.queues.get_active(self.definition.queue_name)
        if active is None or active.version != self.definition.version:
            return None  # this life was deleted since the caller looked it up
        # both pointers in one read: the strategy and the walk start from the same reader bucket
        reader, pointer = await self.data.pointers()
        revived = await self._newly_visible(reader, pointer)
        if revived is not None:
            consumed = await self.try_consume(revived, invisibility, Source.INVISIBILITY)
            if consumed is not None:
                return Delivery.of(consumed)
        consumed = await self._reader_walk(invisibility, reader)
        return None if consumed is None else Delivery.of(consumed)

    async def _reader_walk(self, invisibility: float, bucket: int) -> Message | None:
        """The reader (``getAndMark``) from ``bucket``, the reader pointer as this request read
        it: take the first visible, unacked row of the reader's bucket; seal and leave a bucket
        once every row in it is acked or invisible and it is full or ids beyond it were handed
        out. (If another reader moved the pointer since, this bucket is sealed: CAS-4 loses and
        re-reads the pointer.)"""
        data, size = self.data, self.definition.bucket_size
        while True:
            messages = await data.bucket(bucket)
            now = data.now_ms()
            if all(m.acked or not m.visible(now) for m in messages):
                if len(messages) == size or bucket_of(await data.current_monoton(), size) > bucket:
                    await data.tombstone(bucket)  # [CAS-3]
                    bucket = await data.advance_reader(bucket, bucket + 1)  # [CAS-4]
                    continue
                return None  # the bucket is still open: nothing to read yet
            available = [m for m in messages if not m.acked and m.visible(now)]
            if self.definition.strict_fifo:
                candidate = available[0]
            else:  # a random pick spreads competing readers over the bucket
                candidate = available[self.rt.random.randrange(len(available))]
            consumed = await self.try_consume(candidate, invisibility, Source.READER)
            if consumed is not None:
                return consumed
            # lost the CAS or dead-lettered it: read the bucket again

    async def _newly_visible(self, reader: int, pointer: int) -> Message | None:
        """The invisibility strategy (``PointerBasedInvisStrategy``) from the invisibility
        ``pointer`` and the ``reader`` bucket as this request read them (once per request): a
        message behind or at the pointer that is visible again, or None."""
        data, size = self.data, self.definition.bucket_size
        while True:
            # (a) the row the pointer is on
            message = await data.message(pointer)
            if message is not None and not message.acked:
                if not message.visible(data.now_ms()):
                    return None  # still leased: the pointer stays (the starvation of spec §5)
                return message  # came back to life
            # (b) scan the pointer's bucket
            bucket = bucket_of(pointer, size)
            messages = await data.bucket(bucket)
            now = data.now_ms()
            if not messages:
                if bucket >= reader or not await data.finalized(bucket):
                    return None  # a fresh bucket: stay
            else:
                if reader > bucket:
                    revived = next((m for m in messages if m.visible(now) and not m.acked), None)
                    if revived is not None:
                        return revived  # includes never-delivered rows whose delay is over
                leased = next((m for m in messages if not m.acked and not m.visible(now)), None)
                if leased is not None:
                    await data.move_invis_pointer(pointer, leased.index)  # [CAS-5]
                    return None
                # the original does not skip acked rows here: a never-delivered row that was
                # acked (republished by the repair worker) also holds the pointer
                undelivered = next((m for m in messages if m.delivery_count == 0), None)
                if undelivered is not None:
                    await data.move_invis_pointer(pointer, undelivered.index)  # the reader will take it
                    return None
                all_acked = all(m.acked for m in messages)
                if not (all_acked and (len(messages) == size or await data.finalized(bucket))):
                    return None
            # on to the next bucket, never past the reader's
            if bucket == reader:
                return None
            pointer = await data.move_invis_pointer(pointer, (bucket + 1) * size)  # [CAS-5]

    # -- consume (§4.4, §4.10) -------------------------------------------------------------------------

    async def try_consume(self, message: Message, invisibility: float, source: Source) -> Message | None:
        """Lease ``message`` (CAS-6), or dead-letter it if it was handed out
        ``maxDeliveryCount`` times already. The consumed row (new version, old delivery
        count), or None if the CAS lost or the message was dead-lettered."""
        if message.delivery_count >= self.definition.max_delivery_count:
            await self._dead_letter(message)
            return None
        consumed = await self.data.consume(message, invisibility)
        if consumed is not None and source is Source.INVISIBILITY:
            # the revived message is invisible again: the pointer rests on it
            await self.data.move_invis_pointer(await self.data.invis_pointer(), consumed.index)
        return consumed

    async def _dead_letter(self, message: Message) -> None:
        dlq_name = self.definition.dlq_name
        if dlq_name is not None:
            dlq = await self.queues.get_active(dlq_name)
            if dlq is not None:
                try:  # the whole put again, on the DLQ: a new id, a new tag, no delay
                    await MessageQueue(self.data.store, self.rt, dlq, self.queues).put(message.body or "")
                except (ExistingMonoton, NotFound) as error:  # taken id, or the DLQ deleted meanwhile
                    log.error("dead-letter copy to %s failed: %s", dlq.id, error)
        if await self.data.ack(message):  # [CAS-7]; with no (Active) DLQ the message is dropped
            log.info("dead-lettered %s #%d after %d deliveries", self.definition.id, message.index,
                     message.delivery_count)

    # -- ack (§4.5) and update (§4.6) ------------------------------------------------------------------

    async def ack(self, receipt: str | PopReceipt) -> None:
        """Ack the message a receipt names: ``Conflict`` ("The message is already being
        reprocessed.") if its version or tag moved on, or its row is gone. An expired lease
        still acks if nobody leased the message again."""
        parsed = receipt if isinstance(receipt, PopReceipt) else PopReceipt.decode(receipt)
        message = await self.data.message(parsed.index)
        if message is None or message.version != parsed.version or message.tag != parsed.tag:
            raise Conflict.ack_lost()
        if not await self.data.ack(message):  # [CAS-7]
            raise Conflict.ack_lost()

    async def update(self, receipt: str | PopReceipt, body: str | None = None,
                     invisibility: float = 0) -> Updated:
        """Change the body (None keeps it) and hide the message for ``invisibility`` seconds
        from now: 0 is a nack (visible at once), more is a heartbeat. [CAS-8]; the old receipt
        dies. ``Conflict`` ("Pop receipt is stale.") if it already was."""
        parsed = receipt if isinstance(receipt, PopReceipt) else PopReceipt.decode(receipt)
        updated = await self.data.update(parsed.index, parsed.version, parsed.tag, body, invisibility)
        if updated is None:
            raise Conflict.stale_update()
        return Updated(updated.receipt.encode(), updated.tag or parsed.tag)
