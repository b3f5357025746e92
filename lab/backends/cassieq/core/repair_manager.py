"""Which node runs which queue's repair worker (spec §4.7, the original's
``SimpleRepairWorkerManager``): every ``refresh`` seconds a node lists the Active queues of
every account, takes its slice of them, starts a worker for each new one and stops the
workers of queues that are gone.

Placement is the original's MANUAL allocation: the queues sorted by id, cut into ``count``
contiguous slices, node ``index`` taking slice ``index`` (the last slice takes the rest:
10 queues over 3 nodes are {0,1,2}, {3,4,5}, {6..9}). Every node sees the same sorted list,
so no queue has two workers while the nodes agree on the list; the original's default
(Hazelcast) and its docker default (every node runs every worker, with duplicate
republishes) need a membership service the lab does not model.
"""

from __future__ import annotations

import logging
from typing import Sequence, TypeVar

from lab.backends.cassieq.core.model import QueueDefinition, QueueStatus
from lab.backends.cassieq.core.repair import RepairWorker
from lab.backends.cassieq.core.store import CassStore, StoreError
from lab.design.runtime import Runtime, Task

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_REFRESH_SECONDS = 60.0


def my_slice(items: Sequence[T], index: int, count: int) -> list[T]:
    """Slice ``index`` of ``count`` contiguous slices of ``items`` (the last takes the rest)."""
    if not 0 <= index < count:
        raise ValueError(f"node {index} of {count}: use 0 to {count - 1}")
    size = len(items) // count
    start = index * size
    return list(items[start:] if index == count - 1 else items[start:start + size])


class RepairManager:
    """The repair workers of one API node."""

    def __init__(self, store: CassStore, rt: Runtime, index: int = 0, count: int = 1,
                 refresh: float = DEFAULT_REFRESH_SECONDS):
        my_slice([], index, count)  # check the placement now, not in the loop
        self.store, self.rt = store, rt
        self.index, self.count, self.refresh = index, count, refresh
        self.workers: dict[str, tuple[RepairWorker, Task]] = {}

    async def assigned(self) -> list[QueueDefinition]:
        rows = await self.store.read_all("queue")
        active = sorted((d for d in map(QueueDefinition.from_row, rows) if d.status is QueueStatus.Active),
                        key=lambda d: d.id)
        return my_slice(active, self.index, self.count)

    async def refresh_once(self) -> None:
        wanted = {d.id: d for d in await self.assigned()}
        for queue_id in [q for q in self.workers if q not in wanted]:
            worker, task = self.workers.pop(queue_id)
            worker.stop()
            task.cancel()
        for queue_id, definition in wanted.items():
            if queue_id not in self.workers:
                worker = RepairWorker(self.store, self.rt, definition)
                self.workers[queue_id] = (worker, self.rt.spawn(worker.run(), name=f"repair {queue_id}"))

    async def run(self) -> None:
        while True:
            try:
                await self.refresh_once()
            except StoreError as e:  # the store is away: keep the workers we have, look again later
                log.warning("repair manager: %s", e)
            await self.rt.sleep(self.refresh)

    def stop(self) -> None:
        for worker, task in self.workers.values():
            worker.stop()
            task.cancel()
        self.workers.clear()
