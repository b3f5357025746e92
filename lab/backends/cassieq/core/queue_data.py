"""One physical queue's rows: its monoton, its three pointers, its message buckets and its
size counter, and every compare-and-set on them (spec §4.11: CAS-1 to CAS-9, CAS-11).

This is the original's data access (``MonotonicRepoImpl``, ``PointerRepositoryImpl``,
``MessageRepositoryImpl``) for one queue id; the algorithms that decide which of these
statements to run are in ``messages`` (put, get, ack, update) and ``repair``.
"""

from __future__ import annotations

from typing import Any

from lab.backends.cassieq.core.errors import ExistingMonoton, NotFound
from lab.backends.cassieq.core.model import (FINALIZER, INVISIBILITY_POINTER, READER_POINTER, REPAIR_POINTER,
                                             TOMBSTONE, DeletionJob, Message, QueueDefinition, bucket_of, millis,
                                             new_tag)
from lab.backends.cassieq.core.retry import retrying
from lab.backends.cassieq.core.store import CassStore, Condition
from lab.design.runtime import Runtime

#: a new queue's pointers (spec §3): the invisibility pointer starts before the first id
INITIAL_POINTERS = {READER_POINTER: 0, INVISIBILITY_POINTER: -1, REPAIR_POINTER: 0}


class QueueData:
    """The rows of one queue id (``<account>:<queue>_v<version>``)."""

    def __init__(self, store: CassStore, rt: Runtime, *, account: str, queue_name: str, version: int,
                 bucket_size: int, queue_stats_id: str):
        self.store = retrying(store, rt)
        self.rt = rt
        self.account = account
        self.queue_name = queue_name
        self.version = version
        self.bucket_size = bucket_size
        self.queue_stats_id = queue_stats_id
        self.queue_id = f"{account}:{queue_name}_v{version}"

    @classmethod
    def of(cls, store: CassStore, rt: Runtime, definition: QueueDefinition) -> "QueueData":
        return cls(store, rt, account=definition.account_name, queue_name=definition.queue_name,
                   version=definition.version, bucket_size=definition.bucket_size,
                   queue_stats_id=definition.queue_stats_id)

    @classmethod
    def of_job(cls, store: CassStore, rt: Runtime, job: DeletionJob) -> "QueueData":
        return cls(store, rt, account=job.account_name, queue_name=job.queue_name, version=job.version,
                   bucket_size=job.bucket_size, queue_stats_id=job.queue_stats_id)

    def now_ms(self) -> int:
        return millis(self.rt.now())

    def bucket_of(self, index: int) -> int:
        return bucket_of(index, self.bucket_size)

    # -- the monoton: the next id to hand out --------------------------------------------------

    async def current_monoton(self) -> int:
        """The next id to hand out; a missing row reads as 0."""
        row = await self.store.read("monoton", {"queueid": self.queue_id})
        return 0 if row is None or row["value"] is None else row["value"]

    async def next_monotonic(self) -> int:
        """Claim an id: read c, then [CAS-1] ``value=c+1 IF value=c``, until it applies.

        A missing row means a delete removed it (it exists from create to delete): the
        original's loop would spin forever on it (a CAS never applies to a missing row), so
        the lab answers that the queue is gone instead."""
        while True:
            row = await self.store.read("monoton", {"queueid": self.queue_id})
            if row is None or row["value"] is None:
                raise NotFound.queue("putMessage", self.queue_name)
            current = row["value"]
            if await self.store.update("monoton", {"queueid": self.queue_id}, {"value": current + 1},
                                       conditions=[Condition("value", "=", current)]):
                return current

    # -- the pointers --------------------------------------------------------------------------

    def _pointer_key(self, kind: str) -> dict[str, Any]:
        return {"queueid": self.queue_id, "pointer_type": kind}

    async def _pointer(self, kind: str) -> int:
        row = await self.store.read("pointer", self._pointer_key(kind))
        return 0 if row is None or row["value"] is None else row["value"]  # a missing pointer reads as 0

    async def _move(self, kind: str, destination: int, condition: Condition) -> bool:
        return await self.store.update("pointer", self._pointer_key(kind), {"value": destination},
                                       conditions=[condition])

    async def pointers(self) -> tuple[int, int]:
        """The reader's bucket and the invisibility pointer, in one read (the pointers of a
        queue are one partition); a missing pointer reads as 0."""
        rows = await self.store.read_partition("pointer", {"queueid": self.queue_id})
        values = {row["pointer_type"]: row["value"] or 0 for row in rows}
        return values.get(READER_POINTER, 0), values.get(INVISIBILITY_POINTER, 0)

    async def reader_bucket(self) -> int:
        return await self._pointer(READER_POINTER)

    async def invis_pointer(self) -> int:
        return await self._pointer(INVISIBILITY_POINTER)

    async def repair_bucket(self) -> int:
        return await self._pointer(REPAIR_POINTER)

    async def advance_reader(self, original: int, following: int) -> int:
        """[CAS-4] ``IF value=original``; else whatever another reader moved it to."""
        if await self._move(READER_POINTER, following, Condition("value", "=", original)):
            return following
        return await self.reader_bucket()

    async def move_invis_pointer(self, original: int, destination: int) -> int:
        """[CAS-5] backwards always (``IF value > destination``), forwards only if nobody moved
        it since ``original`` was read (``IF value = original``); else the stored value."""
        if await self._move(INVISIBILITY_POINTER, destination, Condition("value", ">", destination)):
            return destination
        if await self._move(INVISIBILITY_POINTER, destination, Condition("value", "=", original)):
            return destination
        return await self.invis_pointer()

    async def advance_repair(self, original: int, following: int) -> int:
        """[CAS-9] ``IF value=original``; else the stored value."""
        if await self._move(REPAIR_POINTER, following, Condition("value", "=", original)):
            return following
        return await self.repair_bucket()

    async def ensure_rows(self) -> None:
        """[CAS-11] the monoton (0) and the pointers, each ``IF NOT EXISTS``."""
        await self.store.insert("monoton", {"queueid": self.queue_id, "value": 0}, if_not_exists=True)
        for kind, value in INITIAL_POINTERS.items():
            await self.store.insert("pointer", {**self._pointer_key(kind), "value": value}, if_not_exists=True)

    async def delete_monoton_and_pointers(self) -> None:
        await self.store.delete("monoton", {"queueid": self.queue_id})
        for kind in INITIAL_POINTERS:
            await self.store.delete("pointer", self._pointer_key(kind))

    # -- message rows --------------------------------------------------------------------------

    def _message_key(self, index: int, bucket: int | None = None) -> dict[str, Any]:
        return {"queueid": self.queue_id, "bucket_num": self.bucket_of(index) if bucket is None else bucket,
                "monoton": index}

    async def message(self, index: int) -> Message | None:
        """The message row at ``index``; None if there is none (negative ids are never messages)."""
        if index < 0:
            return None
        row = await self.store.read("message", self._message_key(index))
        return None if row is None else Message.from_row(row)

    async def bucket_contents(self, bucket: int) -> list[Message]:
        """Every row of a bucket's partition, markers included, by id."""
        rows = await self.store.read_partition("message", {"queueid": self.queue_id, "bucket_num": bucket})
        return [Message.from_row(row) for row in rows]

    async def bucket(self, bucket: int) -> list[Message]:
        """The message rows of a bucket, by id (the markers left out)."""
        return [m for m in await self.bucket_contents(bucket) if not m.is_marker]

    async def insert_message(self, index: int, body: str, initial_invisibility: float = 0) -> Message:
        """[CAS-2] a new row ``IF NOT EXISTS`` (version 1, never delivered, a new tag), then
        size += 1. ``ExistingMonoton`` if the id is taken."""
        now = self.now_ms()
        row = {**self._message_key(index), "message": body, "version": 1, "delivery_count": 0, "acked": False,
               "next_visible_on": now + millis(initial_invisibility), "created_date": now,
               "tag": new_tag(self.rt.random)}
        if not await self.store.insert("message", row, if_not_exists=True):
            raise ExistingMonoton(self.queue_id, index)
        await self.add_size(1)
        return Message.from_row(row)

    async def consume(self, message: Message, invisibility: float) -> Message | None:
        """[CAS-6] lease: ``next_visible_on=now+invis, version+1, delivery_count+1 IF version=v
        AND acked=false``. The row as read with the new version, or None if the CAS lost."""
        values = {"next_visible_on": self.now_ms() + millis(invisibility), "version": message.version + 1,
                  "delivery_count": message.delivery_count + 1}
        conditions = [Condition("version", "=", message.version), Condition("acked", "=", False)]
        if await self.store.update("message", self._message_key(message.index), values, conditions=conditions):
            return message.with_version(message.version + 1)
        return None

    async def ack(self, message: Message) -> bool:
        """[CAS-7] ``acked=true, version+1 IF version=v``; size -= 1 when it applies."""
        applied = await self.store.update("message", self._message_key(message.index),
                                          {"acked": True, "version": message.version + 1},
                                          conditions=[Condition("version", "=", message.version)])
        if applied:
            await self.add_size(-1)
        return applied

    async def update(self, index: int, version: int, tag: str, body: str | None,
                     invisibility: float) -> Message | None:
        """[CAS-8] ``version+1, next_visible_on=now+invis[, message], updated_date IF version=v
        AND tag=t``; the row re-read if it applied, else None."""
        if index < 0:
            return None
        now = self.now_ms()
        values: dict[str, Any] = {"version": version + 1, "next_visible_on": now + millis(invisibility),
                                  "updated_date": now}
        if body is not None:
            values["message"] = body
        conditions = [Condition("version", "=", version), Condition("tag", "=", tag)]
        if not await self.store.update("message", self._message_key(index), values, conditions=conditions):
            return None
        updated = await self.message(index)
        if updated is None:  # deleted between the CAS and the read: the CAS's values are what it holds
            return Message(index, body, version + 1, 0, False, values["next_visible_on"], tag, None, now)
        return updated

    # -- markers and buckets ---------------------------------------------------------------------

    async def _mark(self, bucket: int, marker: int) -> bool:
        now = self.now_ms()
        return await self.store.insert("message", {**self._message_key(marker, bucket), "acked": True,
                                                   "next_visible_on": now, "created_date": now},
                                       if_not_exists=True)

    async def tombstone(self, bucket: int) -> bool:
        """[CAS-3] seal a bucket: the -2 marker ``IF NOT EXISTS`` (its created_date is the seal time)."""
        return await self._mark(bucket, TOMBSTONE)

    async def finalize(self, bucket: int) -> bool:
        """[CAS-3] the repair worker's -3 marker ``IF NOT EXISTS``: nothing more will land here."""
        return await self._mark(bucket, FINALIZER)

    async def tombstone_time(self, bucket: int) -> int | None:
        """When the bucket was sealed (ms), or None if it is not."""
        row = await self.store.read("message", self._message_key(TOMBSTONE, bucket))
        return None if row is None else row["created_date"]

    async def finalized(self, bucket: int) -> bool:
        return await self.store.read("message", self._message_key(FINALIZER, bucket)) is not None

    async def delete_bucket(self, bucket: int) -> None:
        await self.store.delete_partition("message", {"queueid": self.queue_id, "bucket_num": bucket})

    # -- the size counter ------------------------------------------------------------------------

    async def add_size(self, delta: int) -> None:
        await self.store.add("queue_stats", {"queue_stats_id": self.queue_stats_id}, "size", delta)

    async def size(self) -> int:
        """The size counter; a missing counter reads as 0."""
        row = await self.store.read("queue_stats", {"queue_stats_id": self.queue_stats_id})
        return 0 if row is None or row["size"] is None else row["size"]

    async def delete_size(self) -> None:
        await self.store.delete("queue_stats", {"queue_stats_id": self.queue_stats_id})
