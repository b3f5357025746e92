"""The repair worker of one queue (spec §4.7): the repair pointer that follows the reader and
closes sealed buckets for good.

A put can land after the reader sealed its bucket (ids 19 and 20 handed out, 20 written
first): nobody would read it. So once a bucket is sealed, the worker waits the finalize
timeout after the seal, then republishes every row of it that is still unacked, visible
and never delivered (a late write, or a delay that is over) at the end of the queue, acks
the original, and finalizes the bucket (the -3 marker that lets the invisibility pointer
step over it once it is deleted). Full, fully acked buckets are finalized at once.

It runs on the Runtime: ``run()`` sleeps a random start jitter, then does ``one_pass()``
every ``repairWorkerPollSeconds`` (a fixed delay after each pass, as the original's
``scheduleWithFixedDelay``).
"""

from __future__ import annotations

import logging

from lab.backends.cassieq.core.model import Message, QueueDefinition, bucket_of
from lab.backends.cassieq.core.queue_data import QueueData
from lab.backends.cassieq.core.store import CassStore
from lab.design.runtime import Runtime

log = logging.getLogger(__name__)

#: a worker starts within this many seconds, so the workers of many queues spread out
START_JITTER_SECONDS = 20.0


class RepairWorker:
    """The repair pointer of one life of a queue."""

    def __init__(self, store: CassStore, rt: Runtime, definition: QueueDefinition):
        self.rt = rt
        self.definition = definition
        self.data = QueueData.of(store, rt, definition)
        self.stopped = False
        # what the original counted as metrics (repair.<q>.republish, dangling-detected, ...)
        self.republished = 0
        self.dangling = 0
        self.finalized = 0

    def stop(self) -> None:
        """End the loop after the current step (a watch that is sleeping does nothing more)."""
        self.stopped = True

    async def run(self) -> None:
        """The worker's loop: start jitter, then a pass every poll interval until stopped."""
        await self.rt.sleep(self.rt.random.uniform(0, START_JITTER_SECONDS))
        while not self.stopped:
            try:
                await self.one_pass()
            except Exception:  # a failed pass is retried at the next poll (Cancelled is not an Exception)
                log.exception("repair pass of %s failed", self.definition.id)
            if self.stopped:
                break
            await self.rt.sleep(self.definition.repair_worker_poll_seconds)

    async def one_pass(self) -> bool:
        """From the repair pointer: finalize and step over full, fully acked sealed buckets;
        watch the first other sealed bucket. True if it watched one; False if it stopped at a
        bucket the reader has not sealed yet."""
        data, size = self.data, self.definition.bucket_size
        bucket = await data.repair_bucket()
        while not self.stopped:
            sealed_at = await data.tombstone_time(bucket)
            if sealed_at is None:
                if not await self._half_retired(bucket):
                    return False  # the reader is still in it
                await data.finalize(bucket)  # [CAS-3] the finalizer a failed retire never wrote
                following = await self._advance(bucket)
                if following == bucket:
                    return False
                bucket = following
                continue
            messages = await data.bucket(bucket)
            if len(messages) == size and all(m.acked for m in messages):
                await self._retire(bucket)
                following = await self._advance(bucket)
                if following == bucket:
                    return False
                bucket = following
                continue
            await self._watch(bucket, sealed_at)
            return True
        return False

    async def _watch(self, bucket: int, sealed_at: int) -> None:
        """Wait until the seal time plus the finalize timeout, republish what was never
        delivered and is visible, advance, and finalize (deleting the bucket if every row
        is acked by then, else counting it as dangling)."""
        data = self.data
        wait = (sealed_at - data.now_ms()) / 1000 + self.definition.repair_worker_finalize_seconds
        if wait > 0:
            await self.rt.sleep(wait)
        if self.stopped:
            return
        now = data.now_ms()
        for message in await data.bucket(bucket):
            if not message.acked and message.visible(now) and message.delivery_count == 0:
                await self._republish(message)
        await self._advance(bucket)
        if all(m.acked for m in await data.bucket(bucket)):
            await self._retire(bucket)
        else:
            self.dangling += 1  # in-flight or poison rows: left to the invisibility pointer
            await data.finalize(bucket)

    async def _republish(self, message: Message) -> None:
        """A copy at the end of the queue (a new id via CAS-1, CAS-2: version 1, never
        delivered, a new tag, no delay), then [CAS-7] ack the original. FIFO breaks on purpose."""
        index = await self.data.next_monotonic()
        await self.data.insert_message(index, message.body or "", 0)
        self.republished += 1
        if await self.data.ack(message):
            log.info("republished %s #%d as #%d", self.definition.id, message.index, index)

    async def _half_retired(self, bucket: int) -> bool:
        """A bucket behind the reader with no row at all: its partition was deleted (with its
        tombstone) and the store failed the finalizer after it. The original stops there for
        good (the repair pointer waits for a seal that never comes, the invisibility pointer
        for a finalizer); the lab finishes the retire."""
        return bucket < await self.data.reader_bucket() and not await self.data.bucket_contents(bucket)

    async def _retire(self, bucket: int) -> None:
        """Delete the partition (if the queue says so), then [CAS-3] the finalizer."""
        if self.definition.delete_buckets_after_finalization:
            await self.data.delete_bucket(bucket)
        if await self.data.finalize(bucket):
            self.finalized += 1

    async def _advance(self, bucket: int) -> int:
        """[CAS-9] the repair pointer to ``bucket + 1``, never past the bucket of the current
        monoton (the reader may not be done with it)."""
        limit = bucket_of(await self.data.current_monoton(), self.definition.bucket_size)
        if bucket + 1 > limit:
            return limit
        return await self.data.advance_repair(bucket, bucket + 1)
