"""Queue semantics on the log: consumer groups with durable committed offsets, and retention.

A group's committed offset is the address it resumes from; a group exists from its first
commit (reading creates nothing: a group that never committed starts at the beginning and
holds nothing back). Commits are kept beside the segments in ``<group>.group`` — an
append-only file of records in the log's own framing
(an 8-byte LE address each; the last valid one wins, a torn tail is ignored and cut),
compacted by write-and-rename when it grows. A broker's commit may say more (its readers
acknowledge records out of order): the address, then how far records were handed out and
the ranges below that still unacknowledged (8 bytes each), so a restart hands out again
what was not acknowledged and nothing that was. The original's glob of ``*.slab`` never
sees these files, so a topic stays readable by it.

A crash that loses the log's unsynced tail can leave a group committed past the log's
end. Addresses are byte positions, so the log writes its next records at those addresses
again: on recovery such a commit is cut back to the end (``clamp_commits``, before
anything is appended; a ``Consumer`` does the same when it opens), else the records
written there after the restart would be skipped. So is a commit's handed-out mark past
the end (its address may be below it, held back by a reader that never acknowledged):
records handed out there are gone, and the new ones at those addresses were not.

Delivery modes: **at-least-once** — ``poll`` hands records out, the caller commits after
processing, and a crash before the commit redelivers them; **at-most-once** — ``poll``
commits before it returns, so a crash while processing loses them instead.

On the Store port; ``lab.backends.queuefka.embedded.Consumer`` takes a folder of plain files.
"""

from __future__ import annotations

import logging
import re
import struct
from typing import Any, Sequence

from lab.backends.queuefka.core.batch import parse
from lab.backends.queuefka.core.framing import frame, segment_base, segment_name
from lab.backends.queuefka.core.reader import Reader
from lab.design.runtime import Handle, Store

GROUP_SUFFIX = ".group"
MODES = ("at-least-once", "at-most-once")
log = logging.getLogger("lab.backends.queuefka")
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ADDRESS = struct.Struct("<Q")
_COMPACT_AT = 64 << 10  # bytes of commit history before it is rewritten as one record
_RETRY_AFTER = 16 << 10  # bytes of further history before a compaction that went stale is tried again
_MAX_STATE = 4096  # unacknowledged ranges a commit records at most; past that, its address alone


def check_group_name(name: str) -> str:
    if not _GROUP_NAME.match(name or ""):
        raise ValueError(f"group name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


class CommittedOffset:
    """One group's committed offset, durable on ``commit`` (the caller settles Runtime fsyncs).

    The file is created by the first commit; until then the offset is 0 and ``exists`` False.
    ``handed`` and ``pending`` are what the last commit said beyond its address: how far
    records were handed out, and the ranges ``[start, end)`` below that not acknowledged
    (None and empty: everything from ``address`` on is unacknowledged).
    """

    def __init__(self, store: Store, group: str):
        self.store = store
        self.name = check_group_name(group) + GROUP_SUFFIX
        self.address = 0
        self.handed: int | None = None
        self.pending: list[tuple[int, int]] = []
        self._record = b""  # the last commit's payload
        self._compaction: tuple[str, Any, bytes] | None = None  # (file, its fsync, payload)
        self._compact_at = _COMPACT_AT  # the file size at which the next compaction starts
        self._file: Handle | None = None
        if store.exists(self.name):
            self._load()

    @property
    def exists(self) -> bool:
        """Whether the group has committed (has its file): only then does it hold retention."""
        return self._file is not None

    def _load(self) -> None:
        self._file = self.store.open(self.name)
        data = self._file.read(0, self._file.size())
        parsed = parse(data, 0, 1 << 62, _ADDRESS.size * (2 + 2 * _MAX_STATE))
        commits = [p for p in parsed.payloads if len(p) == _ADDRESS.size or len(p) % (2 * _ADDRESS.size) == 0]
        if commits:
            self._record = commits[-1]
            numbers = [n for (n,) in _ADDRESS.iter_unpack(commits[-1])]
            self.address = numbers[0]
            if len(numbers) > 1:
                self.handed = numbers[1]
                self.pending = list(zip(numbers[2::2], numbers[3::2]))
        if parsed.end < len(data):  # a torn commit: never acknowledged, so drop it
            self._file.truncate(parsed.end)

    def commit(self, address: int, handed: int | None = None, pending: Sequence[tuple[int, int]] = ()) -> None:
        """Record ``address`` durably (fsync requested before this returns), with — when
        ``handed`` is given — how far records were handed out and the ranges below it not
        acknowledged (too many of them: the address alone, which only redelivers more)."""
        self._finish_compaction()
        file = self._file
        created = file is None
        if file is None:
            file = self._file = self.store.open(self.name)
        ranges = list(pending)
        if handed is None or len(ranges) > _MAX_STATE:
            handed, ranges = None, []
        numbers = [address] if handed is None else [address, handed, *(n for r in ranges for n in r)]
        record = b"".join(map(_ADDRESS.pack, numbers))
        file.append(frame(record))
        self.store.fsync(file)
        if created:
            self.store.sync_names()  # the group's existence is durable too
        self.address, self.handed, self.pending, self._record = address, handed, ranges, record
        if self._compaction is None and file.size() >= self._compact_at:
            self._start_compaction(record)

    # Compaction in two steps, so it never has to wait for an fsync: write the latest
    # commit alone into a new file now; swap it in at a later commit, once that file's
    # fsync has completed (a rename over an unsynced file could lose every commit). No
    # commit waits for the copy's fsync: it holds nothing a commit's file does not. A
    # busy group commits again before the copy is durable, so most attempts go stale:
    # the next starts only after the file grew by a further ``_RETRY_AFTER`` — each is an
    # fsync on the device the commits wait for.
    def _start_compaction(self, record: bytes) -> None:
        temporary = self.name + ".tmp"
        if self.store.exists(temporary):
            self.store.remove(temporary)
        fresh = self.store.open(temporary)
        fresh.append(frame(record))
        self._compaction = (temporary, self.store.fsync(fresh), record)
        fresh.close()

    def _finish_compaction(self) -> None:
        if self._compaction is None:
            return
        temporary, fsync, record = self._compaction
        assert self._file is not None  # a compaction starts at a commit to the file
        if fsync is not None and not fsync.done():
            return
        if record != self._record:  # a commit came meanwhile: the copy is stale, try again later
            self._compaction = None
            self._compact_at = self._file.size() + _RETRY_AFTER
            return
        self._file.close()
        self.store.rename(temporary, self.name)
        self.store.sync_names()
        self._file = self.store.open(self.name)
        self._compaction = None
        self._compact_at = _COMPACT_AT

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def log_end(store: Store) -> int:
    """The address after the last byte of the log (0 if it has no segment)."""
    bases = sorted(b for b in map(segment_base, store.names()) if b is not None)
    return bases[-1] + store.size(segment_name(bases[-1])) if bases else 0


def clamp_commits(store: Store, end: int) -> dict[str, int]:
    """Cut back to ``end`` every group's commit that reaches past it (fsync requested): for
    a log recovered to ``end`` after a crash lost its tail, before anything is appended
    there. The address, and as well how far it says records were handed out and the
    unacknowledged ranges. The groups cut back, with the commit address each had."""
    clamped = {}
    for name in store.names():
        if name.endswith(GROUP_SUFFIX):
            group = name[: -len(GROUP_SUFFIX)]
            offset = CommittedOffset(store, group)
            if offset.address > end:
                clamped[group] = offset.address
                _warn_past_end(store, group, offset.address, end)
                offset.commit(end)
            elif offset.handed is not None and offset.handed > end:
                # Committed at or below the end, but handed out past it: a reader's
                # unacknowledged records held the offset back while the others read on
                # into the tail the crash lost (swarm seed 186, fsync=never). The records
                # written from ``end`` on after the restart reuse those addresses, and
                # none of them was handed out: left at its old mark, the restored group
                # took them for handed out and acknowledged (all but those falling in an
                # old unacknowledged range) and skipped them. Handed out up to ``end``
                # only, the ranges clipped there: the lost records' leases are gone with them.
                clamped[group] = offset.address
                log.warning("%s: group %s handed out records up to %d, past the end of the log (%d), which "
                            "lost a tail it had not fsynced (a crash): handed out up to the end only",
                            store.location, group, offset.handed, end)
                pending = [(s, min(e, end)) for s, e in offset.pending if s < min(e, end)]
                offset.commit(offset.address, end, pending)
            offset.close()
    return clamped


def _warn_past_end(store: Store, group: str, address: int, end: int) -> None:
    log.warning("%s: group %s committed %d, past the end of the log (%d), which lost a tail it "
                "had not fsynced (a crash): committing it at the end", store.location, group, address, end)


def committed_offsets(store: Store) -> dict[str, int]:
    """Every group's committed offset in a topic."""
    out = {}
    for name in store.names():
        if name.endswith(GROUP_SUFFIX):
            offset = CommittedOffset(store, name[: -len(GROUP_SUFFIX)])
            out[name[: -len(GROUP_SUFFIX)]] = offset.address
            offset.close()
    return out


class Consumer:
    """Reads a topic as a member of ``group``, from its committed offset.

    ``poll`` returns up to ``max_count`` records; ``commit`` records the position (by
    default: everything polled so far). In at-most-once mode ``poll`` commits first.
    """

    reader_class: type[Reader] = Reader

    def __init__(self, store: Store, group: str, mode: str = "at-least-once", **reader: Any):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: use {' or '.join(MODES)}")
        self.store = store
        self.group = group
        self.mode = mode
        self.offset = CommittedOffset(self.store, group)
        end = log_end(self.store)
        if self.offset.address > end:
            # The log lost a tail it never fsynced (a crash) after this group committed
            # past it: those records are gone, and new ones are written from ``end`` — at
            # addresses below the old commit, which must not hide them.
            _warn_past_end(self.store, group, self.offset.address, end)
            self.offset.commit(end)
        self.reader = self.reader_class(self.store, self._start(self.offset.address), **reader)

    def _start(self, address: int) -> int:
        """Where to read from for a committed ``address``, within the log as it is now."""
        bases = sorted(b for b in map(segment_base, self.store.names()) if b is not None)
        if not bases:
            return 0
        return max(min(address, log_end(self.store)), bases[0])

    @property
    def committed(self) -> int:
        return self.offset.address

    @property
    def position(self) -> int:
        """The address of the next record ``poll`` returns."""
        return self.reader.address

    def poll(self, max_count: int = 4096) -> list[tuple[int, bytes]]:
        records = self.reader.read_many(max_count)
        if records and self.mode == "at-most-once":
            self.offset.commit(self.reader.address)
        return records

    def commit(self, address: int | None = None) -> None:
        """Commit ``address`` (default: the position); commits never move backwards."""
        address = self.reader.address if address is None else address
        if address < self.committed:
            return
        if address > self.reader.address:  # committing ahead skips those records
            self.reader.seek(address)
        self.offset.commit(address)

    def rewind(self) -> None:
        """Go back to the committed offset: what was polled but not committed comes again."""
        self.reader.seek(self._start(self.committed))

    def close(self) -> None:
        self.reader.close()
        self.offset.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def apply_retention(store: Store, max_age: float) -> list[str]:
    """Delete whole segments, oldest first, that every group has committed past and that
    were last written more than ``max_age`` seconds ago; never the newest. Returns their names."""
    floor = min(committed_offsets(store).values(), default=None)
    bases = sorted(b for b in map(segment_base, store.names()) if b is not None)
    deleted = []
    for base in bases[:-1]:
        name = segment_name(base)
        if floor is not None and base + store.size(name) > floor:
            break
        if store.age(name) <= max_age:
            break
        store.remove(name)
        deleted.append(name)
    if deleted:
        store.sync_names()
    return deleted
