"""Kestrel's journal, byte-compatible with the original 2.4: one append-only file per
queue (plus rotated files), records replayed at start-up, rotation and crash-safe rewrites
(the records themselves and their bytes: ``core.journal_records``).

Files: the current one is ``<queue>``; rotated ones ``<queue>.<ms>`` (replayed first, by
timestamp); temporary ones contain ``~~``; a finished rewrite is ``<queue>.<ms>.pack``
until its clean-up. All I/O goes through a Store, so the sim world's disk works too.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

from lab.backends.kestrel.core.journal_records import (XID, Add, BrokenRecord, Continue, Item, Record, Truncated,
                                                       addx, decode, iter_records)
from lab.design.runtime import Handle, Store

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ the fsync policy
@dataclass(frozen=True)
class SyncPolicy:
    """syncJournal: never (the default), every write (reply after the fsync), or every P s."""

    kind: str = "never"
    period: float = 0.0

    @classmethod
    def parse(cls, value: "None | str | float | SyncPolicy") -> "SyncPolicy":
        if isinstance(value, SyncPolicy):
            return value
        if value is None or value == "never":
            return cls("never")
        if value == "always":
            return cls("always")
        if isinstance(value, str):
            from lab.backends.kestrel.config import parse_duration

            seconds = parse_duration(value, "syncJournal")
            return cls.parse(seconds)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"syncJournal {value!r}: use never, always, or a period like \"100ms\"")
        return cls("always") if value == 0 else cls("periodic", float(value))


# ------------------------------------------------------------------ file names
def _rotated_ms(name: str, queue: str) -> int | None:
    m = re.fullmatch(re.escape(queue) + r"\.(\d+)", name)
    return int(m.group(1)) if m else None


def queue_of_file(file: str) -> str:
    """The queue a journal file belongs to: ``q``, ``q.<ms>``, ``q.<ms>.pack``, ``q~~<ms>``."""
    return file.split(".", 1)[0].split("~~", 1)[0]


def queue_names(store: Store) -> list[str]:
    """Queues with (finished) journal files in ``store``."""
    return sorted({queue_of_file(n) for n in store.names() if "~~" not in n and queue_of_file(n)})


class JournalCursor:
    """Reads add records forward from a position, following rotations (read-behind)."""

    def __init__(self, journal: "Journal", file: str, offset: int):
        self.journal = journal
        self.file = file
        self.offset = offset
        self._buf = b""
        self._buf_at = offset

    def next_item(self, until: tuple[str, int] | None = None) -> Item | None:
        """The next added item, or None at the writer's position (or at ``until``, a
        (file, offset) it must not pass: the replay's position at start-up)."""
        j = self.journal
        while True:
            if until is not None and self.file == until[0] and self.offset >= until[1]:
                return None
            at_current = self.file == j.name
            end = j.size if at_current else j.store.size(self.file)
            if self.offset >= end:
                if at_current:
                    return None
                self.file, self.offset = j._file_after(self.file), 0
                self._buf, self._buf_at = b"", 0
                continue
            record, size = self._decode_at(end)
            self.offset += size
            if isinstance(record, (Add, Continue)):
                return record.item

    def _decode_at(self, end: int) -> tuple[Record, int]:
        """The record at the cursor and its size, reading ahead in 1 MiB chunks."""
        rel = self.offset - self._buf_at
        if not 0 <= rel < len(self._buf):
            self._load(end, 1 << 20)
            rel = 0
        try:
            record, nxt = decode(self._buf, rel, self.journal.clock_ms())
        except Truncated:  # the record runs past the chunk: read it whole
            self._load(end, end - self.offset)
            rel = 0
            record, nxt = decode(self._buf, 0, self.journal.clock_ms())
        return record, nxt - rel

    def _load(self, end: int, size: int) -> None:
        j = self.journal
        shared = j._handle if self.file == j.name else None  # the journal's own open file
        handle = shared if shared is not None else j.store.open_read(self.file)
        try:
            self._buf = handle.read(self.offset, min(end - self.offset, max(size, 1)))
        finally:
            if shared is None:
                handle.close()
        self._buf_at = self.offset


class Journal:
    """The journal files of queue ``name`` in ``store``; ``clock_ms`` (ms since the epoch)
    names rotated files and dates legacy records — the Runtime's clock, or a tool's."""

    def __init__(self, store: Store, name: str, sync: SyncPolicy | None = None, *,
                 clock_ms: Callable[[], int]):
        self.store = store
        self.name = name
        self.sync = sync or SyncPolicy()
        self.clock_ms = clock_ms
        self._handle: Handle | None = None
        self._dirty = False
        self._cursors: list[JournalCursor] = []
        self.pending_pack: tuple[str, int] | None = None  # (temporary file, ms) awaiting its fsync
        self._archived: int | None = None  # bytes in rotated files; None: not counted yet

    # -------------------------------------------------------------- files
    def _pack_cleanup(self) -> None:
        """A finished rewrite ``name.T.pack`` replaces every rotated file up to T."""
        self._archived = None
        names = self.store.names()
        for n in names:
            if "~~" in n and n.split("~~", 1)[0] == self.name:
                self.store.remove(n)  # an unfinished rewrite: its sources are intact
        for n in names:
            m = re.fullmatch(re.escape(self.name) + r"\.(\d+)\.pack", n)
            if m:
                packed = int(m.group(1))
                for old in self.store.names():
                    t = _rotated_ms(old, self.name)
                    if t is not None and t <= packed:
                        self.store.remove(old)
                self.store.rename(n, f"{self.name}.{packed}")
                self.store.sync_names()

    def rotated(self) -> list[str]:
        found = [(t, n) for n in self.store.names() if (t := _rotated_ms(n, self.name)) is not None]
        return [n for _, n in sorted(found)]

    def files(self) -> list[str]:
        """Replay order: rotated files by timestamp, then the current file."""
        self._pack_cleanup()
        return self.rotated() + ([self.name] if self.store.exists(self.name) else [])

    def _file_after(self, name: str) -> str:
        order = self.rotated() + [self.name]
        return order[order.index(name) + 1] if name in order else self.name

    # -------------------------------------------------------------- replay
    def replay(self) -> Iterator[Record]:
        """Every record of every file, in order (see ``replay_positions``)."""
        return (record for _, _, record in self.replay_positions())

    def replay_positions(self) -> Iterator[tuple[str, int, Record]]:
        """(file, offset, record) for every record of every file, in order. A bad record
        (cut short, unknown opcode, impossible size) ends its file: the file is truncated
        there, with a warning."""
        now = self.clock_ms()
        for name in self.files():
            handle = self.store.open_read(name)
            try:
                buf = handle.read(0, handle.size())
            finally:
                handle.close()
            try:
                for pos, record in iter_records(buf, now):
                    yield name, pos, record
            except (Truncated, BrokenRecord) as e:
                bad = e.offset
                log.warning("journal %s/%s: %s. DATA MAY HAVE BEEN LOST! Truncated entry will be deleted "
                            "(%d bytes cut at byte %d).", self.store.location, name, e, len(buf) - bad, bad)
                handle = self.store.open(name)
                handle.truncate(bad)
                self.store.fsync(handle)
                if name != self.name:
                    handle.close()

    # -------------------------------------------------------------- writing
    def open(self) -> Handle:
        """The journal's file, open for appending (opened on first use)."""
        if self._handle is None:
            self._handle = self.store.open(self.name)
        return self._handle

    def _append(self, data: bytes) -> None:
        handle = self.open()
        handle.append(data)
        if self.sync.kind == "always":
            self.store.fsync(handle)
        else:
            self._dirty = True

    def add(self, item: Item) -> None:
        self._append(b"\x02" + addx(item))

    def remove(self) -> None:
        self._append(b"\x01")

    def remove_tentative(self, xid: int) -> None:
        self._append(XID.pack(9, xid))

    def unremove(self, xid: int) -> None:
        self._append(XID.pack(5, xid))

    def confirm_remove(self, xid: int) -> None:
        self._append(XID.pack(6, xid))

    def continue_(self, xid: int, item: Item) -> None:
        self._append(XID.pack(8, xid) + addx(item))

    def sync_if_dirty(self) -> None:
        if self._dirty and self._handle is not None:
            self._dirty = False
            self.store.fsync(self._handle)

    async def settle(self) -> None:
        settle = getattr(self.store, "settle", None)
        if settle is not None:
            await settle()
        self.finish_pack()

    # -------------------------------------------------------------- sizes
    @property
    def size(self) -> int:
        if self._handle is not None:
            return self._handle.size()
        return self.store.size(self.name) if self.store.exists(self.name) else 0

    @property
    def archived_size(self) -> int:
        # checked around every add and remove: listed once, then kept up to date
        if self._archived is None:
            self._archived = sum(self.store.size(n) for n in self.rotated())
        return self._archived

    @property
    def total_size(self) -> int:
        return self.size + self.archived_size

    # -------------------------------------------------------------- rotation and rewrite
    def _unique_ms(self, suffix: str = "") -> int:
        ms = self.clock_ms()
        names = set(self.store.names())
        while f"{self.name}.{ms}" in names or f"{self.name}.{ms}{suffix}" in names or f"{self.name}~~{ms}" in names:
            ms += 1
        return ms

    def _close_current(self) -> None:
        if self._handle is not None:
            self.store.fsync(self._handle)
            self._handle = None

    def rotate(self) -> str:
        """The current file becomes ``name.<ms>``; a new empty current file starts."""
        self.open()
        ms = self._unique_ms()
        rotated = f"{self.name}.{ms}"
        self._archived = None
        self._close_current()
        self.store.rename(self.name, rotated)
        for cursor in self._cursors:
            if cursor.file == self.name:
                cursor.file = rotated
        self.open()
        self.store.sync_names()
        return rotated

    def rewrite(self, open_items: Mapping[int, Item], items: Iterable[Item]) -> None:
        """Replace every file by one holding just the open transactions and the queue.

        Crash-safe without stopping the queue: the current file is rotated first, so
        appends from now on go to a fresh one; the pack, written to ``name~~<ms>``,
        replaces every file up to the rotated one only once it is on disk (at once
        with plain files; at the next ``settle()`` on a Runtime disk). A crash before
        that replays the old files, which are still whole.
        """
        rotated = self.rotate()
        ms = int(rotated.rsplit(".", 1)[1])
        tmp = f"{self.name}~~{ms}"
        out = [b"".join((b"\x02" + addx(item), XID.pack(9, xid)))
               for xid, item in sorted(open_items.items(), reverse=True)]
        out += [b"\x02" + addx(item) for item in items]
        handle = self.store.open(tmp)
        handle.append(b"".join(out))
        self.pending_pack = (tmp, ms)
        self._cursors.clear()
        if self.store.fsync(handle) is None:  # plain files: the fsync is done
            self.finish_pack()

    def finish_pack(self) -> None:
        """The pack is on disk: it replaces the files up to it (and the current file too,
        when nothing was appended since, as the original's rewrite leaves one file)."""
        if self.pending_pack is None:
            return
        tmp, ms = self.pending_pack
        self.pending_pack = None
        self.store.rename(tmp, f"{self.name}.{ms}.pack")
        self._pack_cleanup()  # every rotated file up to ms goes; the pack becomes name.<ms>
        if self.size == 0 and not self.rotated()[:-1]:
            self._handle = None
            self.store.remove(self.name)
            self.store.rename(f"{self.name}.{ms}", self.name)
            self.open()
        self.store.sync_names()

    def cursor_at_end(self) -> JournalCursor:
        self.open()
        return self.cursor_at(self.name, self.size)

    def cursor_at(self, file: str, offset: int) -> JournalCursor:
        cursor = JournalCursor(self, file, offset)
        self._cursors.append(cursor)
        return cursor

    def erase(self) -> None:
        self._handle = None
        self._archived = None
        for n in self.store.names():
            if n == self.name or n.startswith(self.name + ".") or n.startswith(self.name + "~~"):
                if _rotated_ms(n, self.name) is not None or n == self.name or "~~" in n or n.endswith(".pack"):
                    self.store.remove(n)
        self.store.sync_names()

    def close(self) -> None:
        if self._handle is not None:
            self.store.fsync(self._handle)
            self._handle.close()
            self._handle = None
