"""The segment log's writer: appends records, rotates segments, recovers a torn tail.

Byte-compatible with the original Go queuefka: same framing, same segment names, same
rotation rule (after a record, if the bytes in the segment exceed the hint, the next
segment is created at once, even if it stays empty), and reopening appends to the
highest segment. What differs is what the original got wrong (docs/designs/queuefka.md):
empty payloads are fine, every write returns its address, an I/O
error leaves the writer usable and the file without a partial record, a torn tail is
cut off on reopen (and kept aside in a ``.torn`` file, and logged), and there is an
fsync policy — the original never fsynced at all.

On the Store port with its clock (and, for threads, its lock) passed in: the embeddable
library on plain files is ``lab.backends.queuefka.embedded.Writer``.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from lab.backends.queuefka.core.batch import frame_many, parse
from lab.backends.queuefka.core.framing import (
    DEFAULT_MAX_RECORD, HEADER, HEADER_SIZE, MAX_PAYLOAD, check_payload_size, checksum, segment_base,
    segment_name,
)
from lab.design.runtime import Store

log = logging.getLogger("lab.backends.queuefka")

DEFAULT_SEGMENT_SIZE = 10 << 20  # the original's tests use 10 MiB
_BUFFER_LIMIT = 64 << 10
_SCAN_CHUNK = 4 << 20


@dataclass(frozen=True)
class FsyncPolicy:
    """When the writer fsyncs: ``never`` (the original), ``always`` (after every write
    call) or at the first write after ``every_ms`` milliseconds or ``every_records``
    records since the last fsync (either bound; ``close()`` always syncs)."""

    mode: str = "never"
    every_ms: float | None = None
    every_records: int | None = None

    @classmethod
    def parse(cls, value: "FsyncPolicy | str") -> "FsyncPolicy":
        """``never``, ``always``, ``100ms``, ``1000records`` or a policy."""
        if isinstance(value, FsyncPolicy):
            return value
        text = str(value).strip().lower()
        if text in ("never", "always"):
            return cls(text)
        for suffix, field in (("ms", "every_ms"), ("records", "every_records")):
            if text.endswith(suffix):
                try:
                    amount = float(text[: -len(suffix)]) if field == "every_ms" else int(text[: -len(suffix)])
                except ValueError:
                    break
                if amount > 0:
                    return cls("interval", every_ms=amount) if field == "every_ms" else cls("interval", every_records=int(amount))
        raise ValueError(f"fsync policy {value!r}: use never, always, <N>ms or <N>records")


@runtime_checkable
class LockingStore(Protocol):
    """A store that locks its folder for one writer (``lab.worlds.live.disk.FileStore``)."""

    def lock(self) -> Any: ...
    def unlock(self, token: Any) -> None: ...


class WriteError(OSError):
    """A ``write_many`` failed part-way; ``addresses`` are the records that were written."""

    def __init__(self, cause: OSError, addresses: list[int]):
        super().__init__(cause.errno, f"{cause.strerror or cause} ({len(addresses)} records written before it)")
        self.addresses = addresses


class Writer:
    """Appends records to a topic's store; one Writer per topic (where the store can lock,
    an advisory lock enforces it).

    ``write``/``write_many`` return record addresses; bytes reach the store at ``flush()``
    (or when 64 KiB are buffered, or at rotation) and the disk at ``sync()`` or per the
    fsync policy. ``clock`` (seconds) times the fsync interval; ``lock`` (a context
    manager) guards writes when threads share the writer.
    """

    def __init__(
        self,
        store: Store,
        segment_size_hint: int = DEFAULT_SEGMENT_SIZE,
        *,
        fsync: FsyncPolicy | str = "never",
        max_payload: int = DEFAULT_MAX_RECORD,
        clock: Callable[[], float],
        lock: AbstractContextManager | None = None,
    ):
        if segment_size_hint < 0:
            raise ValueError(f"segment_size_hint must be >= 0, not {segment_size_hint}")
        self.store = store
        self.hint = int(segment_size_hint)
        self.policy = FsyncPolicy.parse(fsync)
        self._syncing = self.policy.mode != "never"
        self.max_payload = min(max_payload, MAX_PAYLOAD)
        self._clock = clock
        self._lock = nullcontext() if lock is None else lock
        self._buf = bytearray()
        self._unsynced: set[str] = set()  # segments written since the last fsync
        self._names_dirty = False
        self._since_sync = 0
        self._last_sync = clock()
        self._rotate_pending = False
        self._closed = False
        self._lock_token = self.store.lock() if isinstance(self.store, LockingStore) else None
        try:
            self._open_tail()
        except BaseException:
            self._release_lock()
            raise

    # -- opening ---------------------------------------------------------------------

    def _segments(self) -> list[int]:
        return sorted(b for b in map(segment_base, self.store.names()) if b is not None)

    def _open_tail(self) -> None:
        bases = self._segments()
        if not bases:
            self._start_segment(0)
            return
        dropped_empty = False
        if len(bases) > 1 and self._size_of(bases[-1]) == 0:
            previous = bases[-2]
            if previous + self._size_of(previous) != bases[-1]:
                # The eagerly created segment survived a crash that lost the end of the
                # one before it: drop the empty one and continue where the data ends.
                log.warning("%s: removing empty segment %s that does not follow %s", self.store.location,
                            segment_name(bases[-1]), segment_name(previous))
                self.store.remove(segment_name(bases[-1]))
                bases.pop()
                dropped_empty = True
        self.base = bases[-1]
        self._file = self.store.open(segment_name(self.base))
        self._cut_torn_tail()
        self.address = self.base + self._file.size()
        # The original rotates right after the record that crossed the hint; redo that.
        self._rotate_pending = dropped_empty and self.address - self.base > self.hint

    def _size_of(self, base: int) -> int:
        return self.store.size(segment_name(base))

    def _cut_torn_tail(self) -> None:
        size = self._file.size()
        offset = 0
        while offset < size:
            chunk = self._file.read(offset, max(_SCAN_CHUNK, HEADER_SIZE))
            parsed = parse(chunk, 0, 1 << 62, self.max_payload, keep=False)
            if parsed.end == 0 and parsed.corrupt is None and len(chunk) >= HEADER_SIZE:
                n = HEADER.unpack_from(chunk, 0)[0]
                if offset + HEADER_SIZE + n <= size:  # one record bigger than the chunk
                    chunk = self._file.read(offset, HEADER_SIZE + n)
                    parsed = parse(chunk, 0, 1, self.max_payload, keep=False)
            offset += parsed.end
            if parsed.corrupt is not None or parsed.end == 0:
                break
        if offset < size:
            name = segment_name(self.base)
            torn = self._file.read(offset, size - offset)
            keep = f"{name}.torn-{offset}"
            self.store.open(keep).append(torn)
            self._file.truncate(offset)
            log.warning("%s: cut a torn tail of %d bytes from %s at address %d (kept in %s)",
                        self.store.location, size - offset, name, self.base + offset, keep)

    # -- writing ---------------------------------------------------------------------

    def write(self, payload: bytes) -> int:
        """Append one record; returns its address."""
        n = len(payload)
        if n > self.max_payload:
            check_payload_size(n, self.max_payload)
        record = HEADER.pack(n, checksum(payload))
        with self._lock:
            if self._closed or self._rotate_pending:
                self._before_write()
            buf = self._buf
            mark = len(buf)
            address = self.address
            buf += record
            buf += payload
            self.address = end = address + HEADER_SIZE + n
            crossed = end - self.base > self.hint
            if crossed or len(buf) >= _BUFFER_LIMIT:
                try:
                    self._drain()
                except OSError:
                    del buf[mark:]  # never reached the file: this write did not happen
                    self.address = address
                    raise
                if crossed:
                    self._rotate_after_write()
            if self._syncing:
                self._since_sync += 1
                self._maybe_sync()
            return address

    def _before_write(self) -> None:
        self._check_open()
        if self._rotate_pending:
            self._rotate()

    def write_many(self, payloads: Sequence[bytes]) -> list[int]:
        """Append records for all ``payloads`` (framed and hashed in one batch); their addresses."""
        if not payloads:
            return []
        data, sizes = frame_many(payloads)
        if int(sizes.max()) - HEADER_SIZE > self.max_payload:
            check_payload_size(int(sizes.max()) - HEADER_SIZE, self.max_payload)
        ends = np.cumsum(sizes)
        with self._lock:
            self._before_write()
            start = self.address
            done = 0  # records written
            view = memoryview(data)
            try:
                while done < len(payloads):
                    consumed = int(ends[done - 1]) if done else 0
                    # the first record after which the segment exceeds the hint
                    last = max(done, int(np.searchsorted(ends, self.hint - (self.address - self.base) + consumed, side="right")))
                    stop = min(last + 1, len(payloads))
                    chunk_end = int(ends[stop - 1])
                    self._drain()
                    self._file.append(view[consumed:chunk_end])
                    self._mark_unsynced()
                    self.address = start + chunk_end
                    done = stop
                    if last < len(payloads):
                        self._rotate()
            except OSError as error:
                written = (start + np.concatenate(([0], ends[: done - 1]))).tolist() if done else []
                raise WriteError(error, written) from error
            if self._syncing:
                self._since_sync += len(payloads)
                self._maybe_sync()
        return (start + np.concatenate(([0], ends[:-1]))).tolist()

    def flush(self) -> None:
        """Hand buffered records to the OS (readers in other processes see them); no fsync."""
        with self._lock:
            if not self._closed:
                self._drain()

    def sync(self) -> None:
        """Flush, then fsync every segment written since the last sync (and the folder)."""
        with self._lock:
            self._check_open()
            self._sync()

    def close(self) -> None:
        """Flush (and fsync unless the policy is ``never``), then release the topic."""
        with self._lock:
            if self._closed:
                return
            try:
                if self.policy.mode == "never":
                    self._drain()
                else:
                    self._sync()
                self._file.close()
            finally:
                self._closed = True
                self._release_lock()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals (called with the lock held) ---------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.store.location}: the Writer is closed")

    def _drain(self) -> None:
        if self._buf:
            self._file.append(self._buf)  # on error the file is cut back and the buffer kept
            self._buf.clear()
            self._mark_unsynced()

    def _mark_unsynced(self) -> None:
        self._unsynced.add(segment_name(self.base))

    def _rotate_after_write(self) -> None:
        # The record is written; a failure to start the next segment must not make the
        # caller think otherwise. It stays pending, and the next write retries it first.
        try:
            self._rotate()
        except OSError as error:
            log.warning("%s: could not start segment %s yet: %s", self.store.location,
                        segment_name(self.address), error)

    def _rotate(self) -> None:
        self._rotate_pending = True
        self._drain()
        if self.policy.mode != "never":
            self._sync()  # a durable log never has a newer segment over a torn older one
        self._start_segment(self.address)
        self._rotate_pending = False

    def _start_segment(self, base: int) -> None:
        handle = self.store.open(segment_name(base))  # creates it, empty
        self._names_dirty = True
        old = getattr(self, "_file", None)
        if old is not None:
            old.close()
        self.base, self._file, self.address = base, handle, base + handle.size()

    def _maybe_sync(self) -> None:
        policy = self.policy
        if (policy.mode == "always"
                or (policy.every_records is not None and self._since_sync >= policy.every_records)
                or (policy.every_ms is not None and (self._clock() - self._last_sync) * 1000 >= policy.every_ms)):
            self._sync()

    def _sync(self) -> None:
        self._drain()
        for name in sorted(self._unsynced):
            if name == segment_name(self.base):
                self.store.fsync(self._file)
            elif self.store.exists(name):  # retention may have deleted it since
                handle = self.store.open(name)
                try:
                    self.store.fsync(handle)
                finally:
                    handle.close()
            self._unsynced.discard(name)
        if self._names_dirty:
            self.store.sync_names()
            self._names_dirty = False
        self._since_sync = 0
        self._last_sync = self._clock()

    def _release_lock(self) -> None:
        if self._lock_token is not None and isinstance(self.store, LockingStore):  # the store it locked
            self.store.unlock(self._lock_token)
            self._lock_token = None
