"""An account's queues: create, look up, list, delete, status and size (spec §4.9).

The ``queue`` row holds the current life of a name; its ``version`` names the physical
queue (``<account>:<queue>_v<version>``) whose monoton, pointers and buckets hold the
messages. Creation, the status ladder and deletion are compare-and-sets (CAS-10 to
CAS-15); the delete runs its job synchronously, so after it returns the name is free.

Deliberate fixes over the original, each noted where it is made:
- the list is scoped to the account (the original listed every account's queues);
- a deletion job retires only its own life of the name (its Inactive step and CAS-15 also
  match the version);
- re-creating a name that is still ``Deleting`` bumps the version the row holds (not the
  requested definition's), initializes the rows of the *new* queue id before it becomes
  Active, and takes every option of the request (the original kept the old repair settings
  and left the new id without a monoton, so its puts would spin); a create that loses that
  compare-and-set looks at the row again instead of answering "exists" for a row that a
  finishing delete may just have removed.
"""

from __future__ import annotations

import builtins
import logging
from dataclasses import dataclass, replace
from typing import Awaitable, Callable

from lab.backends.cassieq.core.errors import NotFound, QueueAlreadyDeleting
from lab.backends.cassieq.core.model import (DeletionJob, QueueCreateOptions, QueueDefinition, QueueStatus,
                                             bucket_of, new_stats_id, queue_id, valid_name)
from lab.backends.cassieq.core.queue_data import QueueData
from lab.backends.cassieq.core.retry import retrying
from lab.backends.cassieq.core.store import CassStore, Condition
from lab.design.runtime import Runtime

log = logging.getLogger(__name__)

#: told after a queue is created or deleted (the original notified its repair manager)
Listener = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class CreateOutcome:
    """``created``: this call made the queue (HTTP 201); otherwise it already existed (200, or
    409 with ``errorIfExists``). ``definition``: the Active definition after the call."""

    created: bool
    definition: QueueDefinition | None


class Queues:
    """The queue repository of one account (the original's ``QueueRepositoryImpl`` plus its
    ``QueueDeleter`` and deletion job)."""

    def __init__(self, store: CassStore, rt: Runtime, account: str, *, on_change: Listener | None = None):
        self.store = retrying(store, rt)
        self.rt = rt
        self.account = valid_name(account, "account name")
        self.on_change = on_change

    def _key(self, name: str) -> dict[str, str]:
        return {"account_name": self.account, "queuename": name}

    # -- reads ---------------------------------------------------------------------------------

    async def get_any(self, name: str) -> QueueDefinition | None:
        """The queue row whatever its status (the original's ``getQueueUnsafe``)."""
        row = await self.store.read("queue", self._key(name))
        return None if row is None else QueueDefinition.from_row(row)

    async def get_active(self, name: str) -> QueueDefinition | None:
        definition = await self.get_any(name)
        return definition if definition is not None and definition.status is QueueStatus.Active else None

    async def require_active(self, name: str, operation: str) -> QueueDefinition:
        """The Active definition, or ``NotFound`` naming the HTTP operation (``getMessage``, ...)."""
        definition = await self.get_active(name)
        if definition is None:
            raise NotFound.queue(operation, name)
        return definition

    async def list(self, status: QueueStatus = QueueStatus.Active) -> list[QueueDefinition]:
        """This account's queues in ``status``: the account's partition of the queue table. A
        deliberate fix: the original's ``SELECT * FROM queue`` had no account filter and leaked
        every account's queues."""
        rows = await self.store.read_partition("queue", {"account_name": self.account})
        return [d for d in map(QueueDefinition.from_row, rows) if d.status is status]

    async def names(self) -> builtins.list[str]:  # builtins: ``list`` here is the method above
        return [d.queue_name for d in await self.list()]

    async def size(self, definition: QueueDefinition) -> int:
        """The size counter of this life of the queue; a missing counter reads as 0."""
        return await QueueData.of(self.store, self.rt, definition).size()

    # -- status ----------------------------------------------------------------------------------

    async def advance_status(self, name: str, status: QueueStatus, *, version: int | None = None) -> bool:
        """[CAS-12] ``IF status = s-1``, else ``IF status = s``: one step forward, or stay.
        With ``version``, only that life of the name moves."""
        same_life = [] if version is None else [Condition("version", "=", version)]
        for previous in (status - 1, status):
            if await self.store.update("queue", self._key(name), {"status": int(status)},
                                       conditions=[Condition("status", "=", int(previous)), *same_life]):
                return True
        return False

    # -- create ----------------------------------------------------------------------------------

    async def create(self, options: QueueCreateOptions) -> CreateOutcome:
        """Create the queue, or re-create a name whose old life is Deleting or later."""
        name = options.queue_name
        while True:
            fresh = options.definition(self.account, version=0, status=QueueStatus.Provisioning,
                                       queue_stats_id=new_stats_id(self.rt.random, queue_id(self.account, name, 0)))
            # [CAS-10] the row, at version 0, Provisioning
            if await self.store.insert("queue", fresh.to_row(), if_not_exists=True):
                await QueueData.of(self.store, self.rt, fresh).ensure_rows()  # [CAS-11]
                created = await self.advance_status(name, QueueStatus.Active)  # [CAS-12]
                return await self._created(created, name)
            current = await self.get_any(name)
            if current is None:
                continue  # removed by a finishing delete since the insert: try again
            if current.status < QueueStatus.Deleting:
                return CreateOutcome(False, await self.get_active(name))
            if await self._reversion(options, current):
                return await self._created(True, name)
            # lost CAS-13: another create took the next life, or the old life's job removed
            # the row; look again (the original answered "exists" here, even for a removed row)

    async def _reversion(self, options: QueueCreateOptions, current: QueueDefinition) -> bool:
        """[CAS-13] the next life of a name that is Deleting or Inactive: ``version+1, Active,
        the options, a new stats id IF version=v AND status >= Deleting``."""
        following = options.definition(self.account, version=current.version + 1, status=QueueStatus.Active)
        following = replace(following, queue_stats_id=new_stats_id(self.rt.random, following.id))
        await QueueData.of(self.store, self.rt, following).ensure_rows()  # before anyone can see it Active
        row = following.to_row()
        del row["account_name"], row["queuename"]
        return await self.store.update("queue", self._key(current.queue_name), row, conditions=[
            Condition("version", "=", current.version), Condition("status", ">=", int(QueueStatus.Deleting))])

    async def _created(self, created: bool, name: str) -> CreateOutcome:
        if created and self.on_change is not None:
            await self.on_change()
        return CreateOutcome(created, await self.get_active(name))

    # -- delete ----------------------------------------------------------------------------------

    async def mark_for_deletion(self, definition: QueueDefinition) -> DeletionJob | None:
        """[CAS-12] PendingDelete, [CAS-14] the job ``IF NOT EXISTS``, [CAS-12] Deleting. The job
        if this call inserted it; None if another delete did (or the queue moved on)."""
        name = definition.queue_name
        if not await self.advance_status(name, QueueStatus.PendingDelete):
            return None
        job = DeletionJob.of(definition)
        inserted = await self.store.insert("deletion_job", job.to_row(), if_not_exists=True)
        if await self.advance_status(name, QueueStatus.Deleting) and inserted:
            return job  # from here on the name can be created again, as version + 1
        return None

    async def delete(self, name: str) -> None:
        """Delete an Active queue, synchronously (spec §4.9): ``NotFound`` (operation
        ``Delete``) if it is not Active, ``QueueAlreadyDeleting`` if another delete won."""
        definition = await self.get_active(name)
        if definition is None:
            raise NotFound.queue("Delete", name)
        job = await self.mark_for_deletion(definition)
        if job is None:
            raise QueueAlreadyDeleting(name)
        await self.run_deletion_job(job)
        if self.on_change is not None:
            await self.on_change()

    async def run_deletion_job(self, job: DeletionJob) -> None:
        """The deletion job: the message partitions from ``min(repair start, invisibility
        pointer)`` to the monoton's bucket, then the monoton, the pointers and the counter;
        then Inactive, the job row, and [CAS-15] the queue row ``IF status = Inactive`` (which
        spares a newer life that is Active)."""
        data = QueueData.of_job(self.store, self.rt, job)
        start = min(await data.repair_bucket() * job.bucket_size, await data.invis_pointer())
        end = await data.current_monoton()
        for bucket in range(bucket_of(start, job.bucket_size), bucket_of(end, job.bucket_size) + 1):
            await data.delete_bucket(bucket)
        await data.delete_monoton_and_pointers()
        await data.delete_size()
        # only this job's life retires (a deliberate guard: the original matched the name alone,
        # so a late job could retire a newer life that was itself being deleted)
        await self.advance_status(job.queue_name, QueueStatus.Inactive, version=job.version)
        await self.store.delete("deletion_job", {"account_name": job.account_name, "queuename": job.queue_name,
                                                 "version": job.version})
        if await self.store.delete("queue", self._key(job.queue_name), conditions=[
                Condition("status", "=", int(QueueStatus.Inactive)), Condition("version", "=", job.version)]):
            log.info("queue %s deleted", job.queue_id)
