"""All of a Kestrel server's queues: creation and names, fanout, aliases, blocking reads,
expiry, and the server-wide stats — the original's QueueCollection, on the Runtime.

The protocol sessions call this; it knows nothing of connections except that a waiting
read may be cancelled (its client went away).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

from lab.backends.kestrel.config import ServerConfig
from lab.backends.kestrel.core.journal import queue_names
from lab.backends.kestrel.core.journal_records import Item
from lab.backends.kestrel.core.queue import KestrelQueue
from lab.design.runtime import Runtime

log = logging.getLogger(__name__)
VERSION = "2.4.8"  # digits and dots, as the original: clients parse it (npm memcached does)


#: Memcache keys stop at 250 characters; a journal file name (at most 255 bytes) must
#: also hold the longest suffix the journal adds, ``.<13-digit ms>.pack``.
MAX_NAME_LENGTH = 255 - len(".1700000000000.pack")
_LEGAL_NAME = re.compile(r"[!-~]{1,%d}" % MAX_NAME_LENGTH)  # printable ASCII, as memcache keys


class BadQueueName(ValueError):
    """A queue name the journal cannot hold: ``.``, ``/`` or ``~`` (the original's rule), or
    not 1 to MAX_NAME_LENGTH printable ASCII characters (a memcache key's rule)."""


def check_name(name: str) -> str:
    if not _LEGAL_NAME.fullmatch(name) or any(c in name for c in "./~"):
        shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name)} characters)"
        raise BadQueueName(f"illegal queue name {shown}")
    return name


@dataclass
class ServerStats:
    total_items: int = 0
    curr_connections: int = 0
    total_connections: int = 0
    cmd_get: int = 0
    cmd_set: int = 0
    cmd_peek: int = 0
    get_hits: int = 0
    get_misses: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    queue_creates: int = 0
    queue_deletes: int = 0
    queue_expires: int = 0
    cmd_monitor: int = 0
    cmd_monitor_get: int = 0
    get_unknown_option: int = 0  # gets with an option the server ignores (``q/opne``)


class QueueCollection:
    """The queues under ``config.queue_path`` (a Store), created on first use."""

    def __init__(self, rt: Runtime, config: ServerConfig, store, memory_budget: int = 1 << 30):
        self.rt = rt
        self.memory_budget = memory_budget  # the JVM heap of the original's reserved_memory_ratio
        self.config = config
        self.store = store
        self.started_ms = self.now_ms()
        self.queues: dict[str, KestrelQueue] = {}
        self.fanouts: dict[str, list[str]] = {}  # master -> children
        self.alias_stats: dict[str, list[int]] = {}  # alias -> [put_items, put_bytes]
        self.stats = ServerStats()
        self.status = "UP"  # UP, WRITEAVOID, READONLY or QUIESCENT (see session.py)
        self.shutting_down = False
        self._matchers: dict[frozenset[str], Callable[[str], object]] = {}  # see _files_of
        for name in queue_names(store) if store is not None else []:
            try:
                self.queue(name)
            except BadQueueName:
                log.warning("ignoring journal file of illegal queue name %r", name)

    def now_ms(self) -> int:
        """Unix milliseconds, as items carry them (exptime may be absolute unix seconds):
        both worlds' clocks count from the epoch."""
        return self.rt.now_ns() // 1_000_000

    # ------------------------------------------------------------------ names
    def queue(self, name: str, create: bool = True) -> KestrelQueue | None:
        """The queue ``name``; created (and its journal replayed) on first use if ``create``."""
        q = self.queues.get(name)
        if q is not None or not create or self.shutting_down:
            return q
        check_name(name)
        master_name, plus, _ = name.partition("+")
        if plus:
            check_name(master_name)
        q = KestrelQueue(self.rt, name, self.config.resolve(name), self.store, self.now_ms)
        q.on_expired = self._expired
        self.queues[name] = q
        self.stats.queue_creates += 1
        if plus:
            children = self.fanouts.setdefault(master_name, [])
            if name not in children:
                children.append(name)
            master = self.queues.get(master_name)
            if master is not None:
                master.children = list(children)
        q.children = list(self.fanouts.get(name, []))
        return q

    def _expired(self, queue: KestrelQueue, items: list[Item]) -> None:
        target = queue.config.expire_to_queue
        if target is None or target == queue.name:
            return
        destination = self.queue(target)
        if destination is not None:
            for item in items:
                # no expiry, and not through the destination's fanouts
                destination.add(item.data, 0)

    # ------------------------------------------------------------------ writes
    def add(self, name: str, data: bytes, expiry_ms: int = 0) -> bool:
        """Put an item: through an alias to its destinations, and to fanout children first."""
        self.stats.cmd_set += 1
        destinations = self.config.aliases.get(name)
        if destinations is not None:
            stats = self.alias_stats.setdefault(name, [0, 0])
            stats[0] += 1
            stats[1] += len(data)
            ok = True
            for destination in destinations:
                ok = self._add(destination, data, expiry_ms) and ok
            return ok
        return self._add(name, data, expiry_ms)

    def _add(self, name: str, data: bytes, expiry_ms: int) -> bool:
        for child in list(self.fanouts.get(name, [])):
            child_queue = self.queue(child)
            if child_queue is not None and child_queue.add(data, expiry_ms):
                self.stats.total_items += 1
        q = self.queue(name)
        if q is None:
            return False
        ok = q.add(data, expiry_ms)
        if ok and not q.passes_through:
            self.stats.total_items += 1
        return ok

    # ------------------------------------------------------------------ reads
    async def remove(self, name: str, timeout_ms: int | None = None, transaction: bool = False,
                     peek: bool = False) -> tuple[int, Item] | None:
        """A get: (xid, item), or None after ``timeout_ms`` (None: don't wait).

        Peeks return xid 0 and leave the item in place.
        """
        if peek:
            self.stats.cmd_peek += 1
        else:
            self.stats.cmd_get += 1
        if name in self.config.aliases:
            return None  # an alias reads as an empty queue
        q = self.queue(name)
        if q is None:
            return None
        deadline_ns = None if not timeout_ms else self.rt.now_ns() + timeout_ms * 1_000_000
        while True:
            got = self._take(q, transaction, peek)
            if got is not None or deadline_ns is None or q.closed:
                break
            remaining_ms = (deadline_ns - self.rt.now_ns()) / 1e6
            if remaining_ms <= 0:
                break
            try:
                woken = await q.wait_for_item(remaining_ms, peek)
            except BaseException:
                q.pass_on_wake()  # cancelled after a wake: the item goes to the next waiter
                raise
            if not woken:
                got = self._take(q, transaction, peek)
                break
        if got is None:
            self.stats.get_misses += 1
        else:
            self.stats.get_hits += 1
        return got

    def _take(self, q: KestrelQueue, transaction: bool, peek: bool) -> tuple[int, Item] | None:
        if peek:
            item = q.peek()
            return None if item is None else (0, item)
        return q.remove(transaction)

    def unremove(self, name: str, xid: int) -> bool:
        q = self.queues.get(name)  # never creates: an abort must not resurrect a deleted queue
        return q.unremove(xid) if q is not None else False

    def confirm_remove(self, name: str, xid: int) -> bool:
        q = self.queues.get(name)
        return q.confirm_remove(xid) if q is not None else False

    # ------------------------------------------------------------------ admin
    def flush(self, name: str) -> None:
        q = self.queues.get(name)
        if q is not None and name not in self.config.aliases:
            q.flush()

    def flush_all(self) -> None:
        for q in list(self.queues.values()):
            q.flush()

    def delete(self, name: str) -> None:
        if name in self.config.aliases:
            return
        q = self.queues.pop(name, None)
        if q is None:
            return
        q.destroy()
        self.stats.queue_deletes += 1
        master, plus, _ = name.partition("+")
        if plus and name in self.fanouts.get(master, []):
            self.fanouts[master].remove(name)
            if master in self.queues:
                self.queues[master].children = list(self.fanouts[master])

    def flush_expired(self, name: str) -> int:
        q = self.queues.get(name)
        return q.discard_expired() if q is not None else 0

    def flush_all_expired(self) -> int:
        return sum(q.discard_expired() for q in list(self.queues.values()))

    def delete_expired_queues(self) -> int:
        """maxQueueAge: delete empty queues older than it."""
        now = self.now_ms()
        old = [n for n, q in self.queues.items() if q.config.max_queue_age is not None and q.length == 0
               and not q.open and now - q.created_ms > q.config.max_queue_age * 1000]
        for name in old:
            self.delete(name)
            self.stats.queue_expires += 1
        return len(old)

    def reload(self, config: ServerConfig) -> None:
        """Apply new queue/alias configuration to live queues."""
        self.config.default, self.config.queues, self.config.aliases = config.default, config.queues, config.aliases
        for name, q in self.queues.items():
            q.config = self.config.resolve(name)

    async def settle(self, name: str | None = None) -> None:
        """Wait for the fsyncs requested so far (syncJournal = every write): of every
        journal, or only of those a write to queue ``name`` reaches (a client of one queue
        need not wait for the fsyncs of fifty others).

        The Store shares one fsync among the writers of a file that arrive while another is
        in flight (group commit); this only says which files to wait for. It runs once per
        acknowledged request, so the test of a file name is one compiled pattern (no Python
        call per pending file: fifty busy queues made the lambda cost more than the fsync)."""
        if getattr(self.store, "settle", None) is None or not self.store.pending():
            return  # the common case (syncJournal never): no wait
        if name is None:
            queues = None
            await self.store.settle()
        else:
            queues = self._reached_by(name)
            await self.store.settle(self._files_of(queues))
        for q in (self.queues.values() if queues is None else map(self.queues.get, queues)):
            if q is not None and q.journal is not None and q.journal.pending_pack is not None:
                q.journal.finish_pack()  # its fsync is done: the rewrite can replace the old files

    def _files_of(self, queues: set[str]) -> Callable[[str], object]:
        """A test of file names: true for the journal files of ``queues`` (as ``queue_of_file``:
        ``q``, ``q.<ms>``, ``q.<ms>.pack``, ``q~~<ms>``; names hold no ``.`` or ``~``)."""
        key = frozenset(queues)
        match = self._matchers.get(key)
        if match is None:
            if len(self._matchers) > 4096:
                self._matchers.clear()  # reloads and fanouts make new sets: keep it bounded
            match = self._matchers[key] = re.compile(
                "(?:%s)(?:[.~]|\\Z)" % "|".join(re.escape(q) for q in sorted(key))).match
        return match

    def _reached_by(self, name: str) -> set[str]:
        """The queues a put to ``name`` may write: alias destinations, their fanout
        children, and where their expired items go."""
        reached = set(self.config.aliases.get(name, [name]))
        for queue in list(reached):
            reached.update(self.fanouts.get(queue, ()))
        for queue in list(reached):
            q = self.queues.get(queue)
            if q is not None and q.config.expire_to_queue:
                reached.add(q.config.expire_to_queue)
        return reached

    # ------------------------------------------------------------------ background
    async def run_timers(self) -> None:
        """Expiry sweeps every expirationTimerFrequency, periodic fsync per queue."""
        periods = [p for p in (self.config.expiration_timer_frequency,) if p]
        sync_periods = [q.config.sync_journal for q in self.queues.values() if q.config.sync_journal]
        tick = min(periods + sync_periods + [self.config.resolve("").sync_journal or 1.0, 1.0])
        next_expiry = self.rt.now() + (self.config.expiration_timer_frequency or 0)
        while not self.shutting_down:
            await self.rt.sleep(tick)
            for q in list(self.queues.values()):
                if q.config.sync_journal:
                    q.sync_if_dirty()
            if self.config.expiration_timer_frequency and self.rt.now() >= next_expiry:
                self.flush_all_expired()
                self.delete_expired_queues()
                next_expiry = self.rt.now() + self.config.expiration_timer_frequency

    def close(self) -> None:
        self.shutting_down = True
        for q in list(self.queues.values()):
            q.close()

    # ------------------------------------------------------------------ stats
    def global_stats(self, connections: tuple[int, int] | None = None) -> list[tuple[str, str]]:
        s = self.stats
        current, total = connections if connections is not None else (s.curr_connections, s.total_connections)
        items = sum(q.length for q in self.queues.values())
        size = sum(q.bytes for q in self.queues.values())
        return [
            ("uptime", str((self.now_ms() - self.started_ms) // 1000)), ("time", str(self.now_ms() // 1000)),
            ("version", VERSION), ("curr_items", str(items)), ("total_items", str(s.total_items)),
            ("bytes", str(size)), ("reserved_memory_ratio",
                                        f"{sum(q.config.max_memory_size for q in self.queues.values()) / self.memory_budget:.3f}"),
            ("curr_connections", str(current)), ("total_connections", str(total)),
            ("cmd_get", str(s.cmd_get)), ("cmd_set", str(s.cmd_set)), ("cmd_peek", str(s.cmd_peek)),
            ("get_hits", str(s.get_hits)), ("get_misses", str(s.get_misses)),
            ("bytes_read", str(s.bytes_read)), ("bytes_written", str(s.bytes_written)),
            ("queue_creates", str(s.queue_creates)), ("queue_deletes", str(s.queue_deletes)),
            ("queue_expires", str(s.queue_expires)), ("get_unknown_option", str(s.get_unknown_option)),
        ]

    def queue_stats(self, name: str) -> list[tuple[str, str]]:
        if name in self.config.aliases:
            put_items, put_bytes = self.alias_stats.get(name, [0, 0])
            return [("put_items", str(put_items)), ("put_bytes", str(put_bytes)),
                    ("children", ",".join(self.config.aliases[name]))]
        q = self.queues.get(name)
        return [] if q is None else [(k, str(v)) for k, v in q.gauges().items()]

    def names(self) -> list[str]:
        return sorted(self.queues)
