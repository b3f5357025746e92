"""Kestrel's mutants: its memcache handler, its queue and its journal with one mistake each.

Kestrel with ``syncJournal=always`` promises that a crash loses no acknowledged put (a
set's reply waits for the journal's fsync, and so does a read's), at-least-once delivery
with reliable reads (``get q/open`` then ``get q/close``: an item comes again only when its
reader aborts it or its connection closes, or after a fault), and FIFO per queue. Each
mutant breaks one of those in the real code path: the set's handler, the journal's record
of a reliable read's close, the bookkeeping of open reads, the switch to read-behind (the
items past ``maxMemorySize`` read back from the journal).
"""

from __future__ import annotations

from lab.backends.kestrel.core.journal_records import Item
from lab.backends.kestrel.core.queue import KestrelQueue
from lab.backends.kestrel.wire.memcache import MemcacheHandler, Send
from lab.backends.kestrel.wire.protocol import MemcacheRequest, java_int, memcache_line
from lab.design import Mutant, Patch

DURABLE = {"syncJournal": "always"}  # the promise of no loss under a crash: the options every mutant runs with
#: and a queue that keeps 2 KiB in memory: a backlog of some twenty small puts reads behind, from the journal
SMALL_MEMORY = {**DURABLE, "maxMemorySize": 2048}


async def _set_replying_before_the_fsync(self: MemcacheHandler, request: MemcacheRequest, send: Send) -> bool:
    """``set``, with its two last steps in the wrong order: the ``STORED`` reply is written,
    and only then does the handler await the journal's fsync."""
    args = request.args
    try:
        java_int(args[1])
    except ValueError:
        await send(memcache_line("CLIENT_ERROR"))
        return True
    expiry = self._exptime_ms(args[2])
    self.session.check_write("set")
    assert request.data is not None
    ok = self.collection.add(args[0], request.data, expiry)
    await send(memcache_line("STORED" if ok else "NOT_STORED"))  # the bug: acknowledged first ...
    await self.collection.settle(args[0])  # ... and made durable after
    return True


def _confirm_journalled_as_a_remove(self: KestrelQueue, xid: int) -> bool:
    """The close of a reliable read, journalled with the plain get's record (``REMOVE``, as
    ``remove`` writes for a get without /open) instead of ``CONFIRM_REMOVE xid``. In memory
    all is well; a replay reads it as the removal of the head, an item nobody was handed,
    while the read it should have closed stays open and is rolled back."""
    item = self.open.pop(xid, None)
    self.open_deadline.pop(xid, None)
    if item is None or self.closed:
        return False
    if self.journal is not None:
        self.journal.remove()  # the bug: journal.confirm_remove(xid)
        self._check_journal()
    return True


def _remove_with_a_deadline_always(self: KestrelQueue, transaction: bool = False):  # noqa: ANN202
    """``remove``, recording every open read's deadline as now + openTransactionTimeout with
    a missing timeout read as zero: each open read is overdue a millisecond later, and the
    next get that finds an item hands it back to the head (and out again) while its first
    reader still holds it."""
    if self.closed or self.length == 0:
        return None
    self._timeout_oldest_open()
    self._sweep()
    if not self.memory:
        return None
    if transaction:
        self.stats.transactions += 1
    item = self._pop_head()
    assert item is not None
    self.last_removed_add_ms = item.add_time
    xid = 0
    if transaction:
        xid = self._next_xid()
        self.open[xid] = item
        # the bug: `if self.config.open_transaction_timeout is not None:` was dropped for `or 0`
        self.open_deadline[xid] = self.clock_ms() + int((self.config.open_transaction_timeout or 0) * 1000)
        if self.journal is not None:
            self.journal.remove_tentative(xid)
    elif self.journal is not None:
        self.journal.remove()
    self._check_journal()
    return xid, item


def _append_entering_read_behind_one_late(self: KestrelQueue, item: Item, replaying: bool = False) -> None:
    """``_append``, with the switch to read-behind made after the item that fills memory is
    kept there, not before: the journal cursor starts at the end of the journal, before that
    item's own record (``add`` journals it after ``_append``), so read-behind reads it again."""
    self.length += 1
    self.bytes += len(item.data)
    if self.read_behind is None:
        self.memory.append(item)
        self.mem_bytes += len(item.data)
        if self.mem_bytes >= self.config.max_memory_size and self.journal is not None and not replaying:
            self.read_behind = self.journal.cursor_at_end()  # the bug: one record too early


MUTANTS = [
    Mutant("kestrel-reply-then-sync", "kestrel", "no loss of an acknowledged put under a crash",
           "set writes its STORED reply, then awaits the journal's fsync (two steps of one handler, swapped)",
           (Patch(MemcacheHandler, "cmd_set", _set_replying_before_the_fsync),), options=DURABLE,
           scenarios=("crash-slow-disk", "crash", "ack-before-durable-crash")),
    Mutant("kestrel-confirm-journals-a-remove", "kestrel",
           "no redelivery of a closed read, nor loss of a queued put, across a crash",
           "the close of a reliable read is journalled as REMOVE (the head's removal), not CONFIRM_REMOVE xid",
           (Patch(KestrelQueue, "confirm_remove", _confirm_journalled_as_a_remove),), options=DURABLE,
           scenarios=("crash-all", "crash", "crash-one")),
    Mutant("kestrel-open-reads-time-out-at-once", "kestrel",
           "at-least-once: a read comes again only after an abort, its connection's close or a fault",
           "an open read's deadline is recorded with a missing openTransactionTimeout read as zero",
           (Patch(KestrelQueue, "remove", _remove_with_a_deadline_always),), options=DURABLE,
           scenarios=("burst-reliable",)),
    Mutant("kestrel-read-behind-rereads", "kestrel", "no duplicate and no loss with no fault to explain them",
           "the switch to read-behind (a backlog past maxMemorySize) puts the journal cursor before the item "
           "that filled memory: that item is delivered twice, and the queue's last one is stranded",
           (Patch(KestrelQueue, "_append", _append_entering_read_behind_one_late),), options=SMALL_MEMORY,
           scenarios=("burst-reliable", "crash", "crash-all")),
]
