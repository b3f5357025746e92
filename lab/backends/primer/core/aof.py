"""Primer's append-only persistence file (slide S18): ``AofFile``, one file on a node's Store.

One file per queue (``queue.<name>.aof``) and per log (``log.<name>.aof``) on a node's
Store, when persistence is on. The records and their bytes are ``aof_records``; reading a
whole file back is ``aof_scan``. What a record means is the owner's business; this room
only writes, reads back, cuts torn tails and rewrites the file as its live records
(compaction).

Recovery tells a crash from damage: a crash mid-append leaves an incomplete last record
(or a last record whose crc fails, or zero bytes where the file system extended the file
but never wrote it): that tail is cut and recovery goes on. Anything wrong before the
end is damage: ``CorruptFile`` naming the byte, and nothing on disk changes.
"""

from __future__ import annotations

from typing import Any, Awaitable

from lab.backends.primer.core.aof_records import HEADER, Corrupt, Record, encode
from lab.backends.primer.core.aof_scan import TornTail, scan
from lab.design.runtime import Handle, Store


class CorruptFile(ValueError):
    """A file recovery will not touch: ``<location>/<name>: byte <offset>: <why>``."""


async def _await_all(waits: list[Awaitable[Any]]) -> None:
    for wait in waits:
        await wait


class AofFile:
    """One append-only file of a node's Store.

    Open it, ``recover()`` its records (a file that existed must be recovered before it is
    appended to), ``append`` and ``sync`` (awaiting what sync returns before acknowledging),
    and ``compact`` when most of it is dead.
    """

    def __init__(self, store: Store, name: str):
        """Open ``name`` on ``store``, creating it with its header if it is new."""
        self.store = store
        self.name = name
        self.torn_bytes = 0  # what recover cut off
        self.records_written = 0  # records appended by this object (not compaction's rewrites)
        self._handle: Handle = store.open(name)
        self._compacting: Handle | None = None  # the "<name>.compact" file while its fsync runs
        self._recovered = self._handle.size() == 0
        if self._recovered:  # new: nothing to recover
            self._handle.append(HEADER)
            store.sync_names()

    @property
    def compact_name(self) -> str:
        return f"{self.name}.compact"

    @property
    def size(self) -> int:
        """Bytes in the file (the compacted one once its compaction finished)."""
        return self._handle.size()

    def recover(self) -> list[Record]:
        """Every record in order. A torn tail is cut off (``torn_bytes``); a bad record before
        the end (or no header) raises ``CorruptFile`` and leaves the file as it is. A
        compaction a crash interrupted is thrown away: the old file was intact until its
        rename."""
        size = self._handle.size()
        records: list[Record] = []
        try:
            for _offset, item in scan(self._handle.read, size):
                if isinstance(item, TornTail):
                    self._handle.truncate(item.offset)
                    self.torn_bytes += item.size
                    if item.offset == 0:  # the header itself was torn: write it again
                        self._handle.append(HEADER)
                else:
                    records.append(item)
        except Corrupt as e:
            raise CorruptFile(f"{self.store.location}/{self.name}: byte {e.offset}: {e.why}") from None
        if self._compacting is None and self.store.exists(self.compact_name):
            self.store.remove(self.compact_name)
        self._recovered = True
        return records

    def append(self, record: Record) -> None:
        """Append into the page cache; ``sync`` makes it durable."""
        if not self._recovered:
            raise RuntimeError(f"{self.store.location}/{self.name}: recover() the file before appending to it")
        data = encode(record)
        self._handle.append(data)
        if self._compacting is not None:  # the compacted file replaces this one soon: it needs the record too
            self._compacting.append(data)
        self.records_written += 1

    def sync(self) -> Awaitable[Any] | None:
        """Make every append so far durable: what to await before acknowledging (None when
        the Store's fsync already blocked until done). During a compaction both files are
        synced, so the record is durable whichever one a crash leaves."""
        handles = [self._handle] if self._compacting is None else [self._handle, self._compacting]
        waits = [w for w in (self.store.fsync(h) for h in handles) if w is not None]
        if not waits:
            return None
        return waits[0] if len(waits) == 1 else _await_all(waits)

    def compact(self, live: list[Record]) -> Awaitable[None] | None:
        """Rewrite the file as exactly ``live``: a new file ``<name>.compact``, fsynced, then
        renamed over the old one. On a Store whose fsync blocks, done on return (None);
        otherwise the caller awaits what it returns, and until then appends go to both
        files (the old one stays intact until the rename, so a crash loses nothing)."""
        if not self._recovered:
            raise RuntimeError(f"{self.store.location}/{self.name}: recover() the file before compacting it")
        if self._compacting is not None:
            raise RuntimeError(f"{self.store.location}/{self.name}: a compaction is already running")
        if self.store.exists(self.compact_name):  # left by a compaction that never finished
            self.store.remove(self.compact_name)
        new = self.store.open(self.compact_name)
        new.append(HEADER + b"".join(encode(r) for r in live))
        wait = self.store.fsync(new)
        if wait is None:
            self._finish(new)
            return None
        self._compacting = new
        return self._finish_after(wait, new)

    async def _finish_after(self, wait: Awaitable[Any], new: Handle) -> None:
        try:
            await wait
        except BaseException:
            self._compacting = None  # the old file goes on alone; the next compaction starts over
            raise
        self._finish(new)

    def _finish(self, new: Handle) -> None:
        old = self._handle
        self.store.rename(self.compact_name, self.name)
        self.store.sync_names()
        self._handle, self._compacting = new, None
        if old is not new:
            old.close()

    def close(self) -> None:
        self._handle.close()
        if self._compacting is not None:
            self._compacting.close()
