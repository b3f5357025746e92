"""One Kestrel queue: a FIFO of items with add time and expiry, reliable reads, limits,
read-behind and its journal — the original's PersistentQueue, in the Runtime's time.

Everything here is synchronous except waiting (blocking reads) and fsync, which the
caller awaits through ``settle()``. Times are milliseconds since the epoch given by the
collection's clock, so the sim world's expiry is as deterministic as its seeds.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from lab.backends.kestrel.config import QueueConfig
from lab.backends.kestrel.core.journal import Journal, JournalCursor, SyncPolicy
from lab.backends.kestrel.core.journal_records import (Add, ConfirmRemove, Continue, Item, Remove, RemoveTentative,
                                                  SaveXid, Unremove)
from lab.design.runtime import Runtime

log = logging.getLogger(__name__)
XID_LIMIT = 2**31 - 1


@dataclass
class QueueStats:
    """The original's per-queue counters (gauges are computed from the queue)."""

    total_items: int = 0
    put_items: int = 0
    put_bytes: int = 0
    get_items_hit: int = 0
    get_items_miss: int = 0
    expired_items: int = 0
    discarded: int = 0
    transactions: int = 0
    canceled_transactions: int = 0
    total_flushes: int = 0
    journal_rewrites: int = 0
    journal_rotations: int = 0


@dataclass
class _Waiter:
    event: Any
    peek: bool
    woken: bool = False
    done: bool = False


class KestrelQueue:
    """A queue named ``name`` with configuration ``config`` (journal in ``store`` if kept)."""

    def __init__(self, rt: Runtime, name: str, config: QueueConfig, store: Any | None,
                 clock_ms: Callable[[], int], master: "KestrelQueue | None" = None):
        self.rt = rt
        self.name = name
        self.config = config
        self.clock_ms = clock_ms
        self.is_fanout = "+" in name  # a fanout child ``master+child``
        self.created_ms = clock_ms()
        self.memory: deque[Item] = deque()  # the head of the queue; the rest is read-behind
        self.open: dict[int, Item] = {}  # xid -> item, in open order
        self.open_deadline: dict[int, int] = {}  # xid -> ms, with openTransactionTimeout
        self.xid = 0
        self.length = 0  # items, read-behind included, open ones excluded
        self.bytes = 0
        self.mem_bytes = 0
        self.last_removed_add_ms = 0  # for `age`
        self.stats = QueueStats()
        self.waiters: deque[_Waiter] = deque()
        self.closed = False
        self.children: list[str] = []  # fanout children, for stats
        self.read_behind: JournalCursor | None = None  # while items live only in the journal
        self._replay_at: tuple[str, int] | None = None  # the record being replayed, at start-up
        self._rewrite_ok_ms = 0
        self.journal: Journal | None = None
        if config.keep_journal and store is not None and not self.passes_through:
            self.journal = Journal(store, name, SyncPolicy.parse(config.sync_journal), clock_ms=clock_ms)
            self._replay()
        elif store is not None and not config.keep_journal:
            Journal(store, name, clock_ms=clock_ms).erase()  # keepJournal=false: no files at all

    @property
    def passes_through(self) -> bool:
        """fanoutOnly: this queue stores nothing, its children get the items. A child
        inherits the option from its master but stores (the original: ``fanoutOnly &&
        !isFanout``), or a fanout-only master would pass items to no one."""
        return self.config.fanout_only and not self.is_fanout

    # ------------------------------------------------------------------ replay
    def _replay(self) -> None:
        assert self.journal is not None
        for file, offset, record in self.journal.replay_positions():
            self._replay_at = (file, offset)
            if isinstance(record, (Add, Continue)) and self.read_behind is None \
                    and self.bytes >= self.config.max_memory_size:
                # a big queue restarts in read-behind too: the rest stays in the journal
                self.read_behind = self.journal.cursor_at(file, offset)
            if isinstance(record, Add):
                self._append(record.item, replaying=True)
                self.stats.total_items += 1
            elif isinstance(record, Remove):
                self._pop_head()
            elif isinstance(record, RemoveTentative):
                item = self._pop_head()
                if record.xid is not None:
                    self.xid = record.xid  # the record sets the counter
                xid = record.xid if record.xid is not None else self._next_xid()
                if item is not None:
                    self.open[xid] = item
            elif isinstance(record, SaveXid):
                self.xid = record.xid
            elif isinstance(record, Unremove):
                item = self.open.pop(record.xid, None)
                if item is not None:
                    self._push_head(item)
            elif isinstance(record, ConfirmRemove):
                self.open.pop(record.xid, None)
            elif isinstance(record, Continue):
                self.open.pop(record.xid, None)
                self._append(record.item, replaying=True)
                self.stats.total_items += 1
        self._replay_at = None
        self.journal.open()
        self._fill_read_behind()
        # Open transactions of the last run are rolled back, newest xid first, each to
        # the head: they come back in ascending xid order (at-least-once).
        for xid in sorted(self.open, reverse=True):
            self.journal.unremove(xid)
            self._push_head(self.open.pop(xid))
        log.info("queue %s: replayed %d items (%d bytes)", self.name, self.length, self.bytes)

    # ------------------------------------------------------------------ the FIFO
    def _append(self, item: Item, replaying: bool = False) -> None:
        """Add at the tail: in memory, or journal-only once memory holds maxMemorySize."""
        if self.read_behind is None and self.mem_bytes >= self.config.max_memory_size and self.journal is not None \
                and not replaying:
            self.read_behind = self.journal.cursor_at_end()
        self.length += 1
        self.bytes += len(item.data)
        if self.read_behind is None:
            self.memory.append(item)
            self.mem_bytes += len(item.data)

    def _push_head(self, item: Item) -> None:
        self.memory.appendleft(item)
        self.length += 1
        self.bytes += len(item.data)
        self.mem_bytes += len(item.data)

    def _pop_head(self) -> Item | None:
        if not self.memory:
            return None
        item = self.memory.popleft()
        self.length -= 1
        self.bytes -= len(item.data)
        self.mem_bytes -= len(item.data)
        self._fill_read_behind()
        return item

    def _fill_read_behind(self) -> None:
        while self.read_behind is not None and self.mem_bytes < self.config.max_memory_size:
            item = self.read_behind.next_item(self._replay_at)
            if item is None:
                if self._replay_at is None:
                    self.read_behind = None  # caught up with the writer
                break  # (during replay: caught up with the records replayed so far)
            self.memory.append(item)
            self.mem_bytes += len(item.data)

    def _next_xid(self) -> int:
        while True:
            self.xid = self.xid + 1 if self.xid < XID_LIMIT else 1
            if self.xid not in self.open:
                return self.xid

    # ------------------------------------------------------------------ expiry
    def _expiry_of(self, item: Item) -> int:
        """The effective expiry: the client's, capped by the *current* maxAge."""
        expiry = item.expiry
        if self.config.max_age is not None:
            cap = item.add_time + int(self.config.max_age * 1000)
            expiry = cap if expiry == 0 else min(expiry, cap)
        return expiry

    def _sweep(self, limit: int | None = None) -> list[Item]:
        """Discard expired items from the head (never past a live one)."""
        if not self.memory:
            return []
        now = self.clock_ms()
        limit = self.config.max_expire_sweep if limit is None else limit
        expired: list[Item] = []
        while self.memory and len(expired) < limit:
            expiry = self._expiry_of(self.memory[0])
            if not (expiry and expiry < now):
                break
            expired.append(self._pop_head())  # type: ignore[arg-type]
            if self.journal is not None:
                self.journal.remove()
        if expired:
            self.stats.expired_items += len(expired)
            self.on_expired(self, expired)
        return expired

    #: the collection moves expired items to expireToQueue
    on_expired: Callable[["KestrelQueue", list[Item]], None] = staticmethod(lambda q, items: None)

    def discard_expired(self, limit: int | None = None) -> int:
        return len(self._sweep(limit))

    # ------------------------------------------------------------------ operations
    def add(self, data: bytes, expiry_ms: int = 0, add_time: int | None = None) -> bool:
        """Append an item; False if the queue is closed, full or the item too large."""
        if self.closed or len(data) > self.config.max_item_size:
            return False
        now = self.clock_ms() if add_time is None else add_time
        self._sweep()
        self._check_journal()
        if self.length >= self.config.max_items or self.bytes >= self.config.max_size:
            if not self.config.discard_old_when_full:
                return False
            while self.memory and (self.length >= self.config.max_items or self.bytes >= self.config.max_size):
                self._pop_head()
                self.stats.discarded += 1
                if self.journal is not None:
                    self.journal.remove()
        if self.config.max_age is not None:
            cap = now + int(self.config.max_age * 1000)
            expiry_ms = cap if expiry_ms == 0 else min(expiry_ms, cap)
        item = Item(data, now, expiry_ms)
        if self.passes_through:
            return True  # a fanout-only master stores nothing
        self._append(item)
        if self.journal is not None:
            self.journal.add(item)
        self.stats.total_items += 1
        self.stats.put_items += 1
        self.stats.put_bytes += len(data)
        self._wake()
        return True

    def peek(self) -> Item | None:
        if self.closed:
            return None
        self._sweep()
        return self.memory[0] if self.memory else None

    def remove(self, transaction: bool = False) -> tuple[int, Item] | None:
        """Take the head: (xid, item) — xid 0 unless ``transaction``."""
        if self.closed or self.length == 0:
            return None  # before any timeout, as the original: an overdue read on an empty queue stays open
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
            if self.config.open_transaction_timeout is not None:
                self.open_deadline[xid] = self.clock_ms() + int(self.config.open_transaction_timeout * 1000)
            if self.journal is not None:
                self.journal.remove_tentative(xid)
        elif self.journal is not None:
            self.journal.remove()
        self._check_journal()
        return xid, item

    def _timeout_oldest_open(self) -> None:
        """openTransactionTimeout, lazily (no timer): one overdue transaction per remove
        that finds an item goes back to the head, so that remove hands it out first."""
        if not self.open_deadline:
            return
        xid, deadline = next(iter(self.open_deadline.items()))
        if deadline < self.clock_ms():
            self.unremove(xid)

    def unremove(self, xid: int) -> bool:
        """Abort an open read: the item goes back to the head."""
        item = self.open.pop(xid, None)
        self.open_deadline.pop(xid, None)
        if item is None or self.closed:
            return False
        self._push_head(item)
        if self.journal is not None:
            self.journal.unremove(xid)
        self.stats.canceled_transactions += 1
        self._wake()
        return True

    def confirm_remove(self, xid: int) -> bool:
        item = self.open.pop(xid, None)
        self.open_deadline.pop(xid, None)
        if item is None or self.closed:
            return False
        if self.journal is not None:
            self.journal.confirm_remove(xid)
            self._check_journal()
        return True

    def flush(self) -> None:
        while self.memory:
            self._pop_head()
            if self.journal is not None:
                self.journal.remove()
        self.stats.total_flushes += 1
        self._check_journal()

    # ------------------------------------------------------------------ blocking reads
    def _wake(self) -> None:
        """Wake the oldest waiter; a woken peeker passes the wake on (it takes nothing)."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if waiter.done:
                continue
            waiter.woken = True
            waiter.event.set()
            if not waiter.peek:
                return

    def _wake_all(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            waiter.woken = True
            waiter.event.set()

    async def wait_for_item(self, timeout_ms: float, peek: bool) -> bool:
        """Block until woken (True) or ``timeout_ms`` passes (False); FIFO among waiters.

        A waiter cancelled (its client gone) after being woken hands the wake to the
        next one, so an item never waits behind a dead client.
        """
        waiter = _Waiter(self.rt.event(), peek)
        self.waiters.append(waiter)
        try:
            return await self.rt.wait(waiter.event, timeout_ms / 1000)
        finally:
            waiter.done = True
            if not waiter.woken:
                try:
                    self.waiters.remove(waiter)
                except ValueError:
                    pass

    def pass_on_wake(self) -> None:
        """A woken getter that did not take an item (gone, or lost a race) wakes the next."""
        if self.memory:
            self._wake()

    # ------------------------------------------------------------------ journal upkeep
    def _check_journal(self) -> None:
        """The original's compaction rules, checked around every add and remove."""
        journal = self.journal
        if journal is None or self.read_behind is not None:
            return
        config, size = self.config, journal.size
        if size < config.default_journal_size and size <= config.max_memory_size and \
                size + journal.archived_size <= config.max_journal_size:
            return  # nothing to do: the common case, without reading the clock
        now = self.clock_ms()
        delay = self.config.min_journal_compact_delay
        if journal.size >= self.config.default_journal_size and self.length == 0 and \
                (not self.config.disable_aggressive_rewrites or now >= self._rewrite_ok_ms):
            self._rewrite()
            if self.config.disable_aggressive_rewrites and journal.size >= self.config.default_journal_size // 2 \
                    and delay is not None:
                self._rewrite_ok_ms = now + int(delay * 1000)
        elif now >= self._rewrite_ok_ms and journal.total_size > self.config.max_journal_size and \
                self.bytes < self.config.max_memory_size:
            self._rewrite()
            if delay is not None:
                self._rewrite_ok_ms = now + int(delay * 1000)
        elif journal.size > self.config.max_memory_size:
            journal.rotate()
            self.stats.journal_rotations += 1

    def _rewrite(self) -> None:
        assert self.journal is not None
        self.journal.rewrite(dict(self.open), list(self.memory))
        self.stats.journal_rewrites += 1

    async def settle(self) -> None:
        if self.journal is not None:
            await self.journal.settle()

    def sync_if_dirty(self) -> None:
        if self.journal is not None:
            self.journal.sync_if_dirty()

    # ------------------------------------------------------------------ life
    def close(self) -> None:
        self.closed = True
        self._wake_all()
        if self.journal is not None:
            self.journal.close()

    def destroy(self) -> None:
        """Delete: close and erase every journal file."""
        self.close()
        if self.journal is not None:
            self.journal.erase()

    def age_ms(self) -> int:
        return 0 if self.bytes == 0 else max(0, self.clock_ms() - self.last_removed_add_ms)

    def gauges(self) -> dict[str, int]:
        """The per-queue stats, in the original's order."""
        s = self.stats
        out = {
            "items": self.length, "bytes": self.bytes, "total_items": s.total_items,
            "logsize": self.journal.size if self.journal is not None else 0,
            "expired_items": s.expired_items, "mem_items": len(self.memory), "mem_bytes": self.mem_bytes,
            "age": self.age_ms(), "discarded": s.discarded, "waiters": sum(1 for w in self.waiters if not w.done),
            "open_transactions": len(self.open), "transactions": s.transactions,
            "canceled_transactions": s.canceled_transactions, "total_flushes": s.total_flushes,
            "journal_rewrites": s.journal_rewrites, "journal_rotations": s.journal_rotations,
        }
        if self.children:
            out["children"] = ",".join(self.children)  # type: ignore[assignment]
        return out
