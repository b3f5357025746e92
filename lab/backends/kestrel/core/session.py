"""One client connection's state: its open reliable reads, per queue, oldest first.

Both line protocols keep their transactions here; closing the session (the connection
went away, however) puts every open read back at the head of its queue.
"""

from __future__ import annotations

from collections import deque

from lab.backends.kestrel.core.collection import QueueCollection

#: Server status names, least strict first; reads/writes each blocks (the original's rules).
STATUSES = ("UP", "WRITEAVOID", "READONLY", "QUIESCENT")
BLOCKS_WRITES = {"READONLY", "QUIESCENT"}
BLOCKS_READS = {"QUIESCENT"}


class Unavailable(Exception):
    """The server's status refuses this operation (SERVER_ERROR: clients retry elsewhere)."""


class Session:
    def __init__(self, collection: QueueCollection, max_open_transactions: int):
        self.collection = collection
        self.max_open = max_open_transactions
        self.open_reads: dict[str, deque[int]] = {}
        self.closed = False

    def count_open(self, queue: str) -> int:
        return len(self.open_reads.get(queue, ()))

    def record_open(self, queue: str, xid: int) -> None:
        if self.closed:  # the client left while its read was being served
            self.collection.unremove(queue, xid)
            return
        self.open_reads.setdefault(queue, deque()).append(xid)

    def confirm_oldest(self, queue: str, count: int = 1) -> int:
        """Confirm the ``count`` oldest open reads on ``queue``; how many there were."""
        xids = self.open_reads.get(queue)
        done = 0
        while xids and done < count:
            self.collection.confirm_remove(queue, xids.popleft())
            done += 1
        return done

    def abort_oldest(self, queue: str) -> bool:
        xids = self.open_reads.get(queue)
        if not xids:
            return False
        return self.collection.unremove(queue, xids.popleft())

    def check_write(self, op: str) -> None:
        if self.collection.status in BLOCKS_WRITES:
            raise Unavailable(op)

    def check_read(self, op: str) -> None:
        if self.collection.status in BLOCKS_READS:
            raise Unavailable(op)

    def close(self) -> None:
        """Abort every open read, oldest first, each to the head (so the newest ends first)."""
        if self.closed:
            return
        self.closed = True
        for queue, xids in self.open_reads.items():
            while xids:
                self.collection.unremove(queue, xids.popleft())
        self.open_reads.clear()
