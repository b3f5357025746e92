"""The segment log's reader: records from any record address, across segments, as they come.

Fixes the original's reader (docs/designs/queuefka.md): it opens at any record
address, not only at segment starts; at the end of the log it returns None and later
continues with the next new record (the original re-delivered the segment's first one);
a record cut short at the end is "not complete yet" — no error, no lost position; and a
checksum mismatch, an impossible length, a record cut short inside a sealed segment or
a gap between segments raises ``CorruptRecord`` with the address, never returning the
bytes as data. The reader stays at the bad record; ``seek`` past it on purpose if you must.

On the Store port: the embeddable library on plain files (with ``follow``) is
``lab.backends.queuefka.embedded.Reader``.
"""

from __future__ import annotations

from typing import Iterator

from lab.backends.queuefka.core.batch import parse
from lab.backends.queuefka.core.framing import (
    DEFAULT_MAX_RECORD, HEADER, HEADER_SIZE, CorruptRecord, checksum, segment_base, segment_name,
)
from lab.design.runtime import Handle, Store

_CHUNK = 1 << 20


class AddressError(ValueError):
    """The address is outside the log (deleted by retention, or beyond its end)."""


class Reader:
    """Reads a topic's store sequentially from ``address`` (a record address; 0 = the beginning)."""

    def __init__(self, store: Store, address: int = 0, *, max_record: int = DEFAULT_MAX_RECORD,
                 chunk_size: int = _CHUNK):
        self.store = store
        self.max_record = max_record
        self.chunk_size = max(chunk_size, HEADER_SIZE)
        self._file: Handle | None = None
        self.seek(address)

    # -- positioning -----------------------------------------------------------------

    @property
    def address(self) -> int:
        """The address of the next record to read."""
        return self._base + self._buf_off + self._pos

    def segments(self) -> list[tuple[int, int]]:
        """(base address, size) of every segment, in address order."""
        bases = sorted(b for b in map(segment_base, self.store.names()) if b is not None)
        return [(base, self.store.size(segment_name(base))) for base in bases]

    def seek(self, address: int) -> None:
        """Position the reader at ``address``, which must be a record address in the log."""
        if address < 0:
            raise AddressError(f"address {address} is negative")
        segments = self.segments()
        base = 0
        if segments:
            if address < segments[0][0]:
                raise AddressError(f"address {address} is no longer in {self.store.location}: "
                                   f"the log starts at {segments[0][0]} (older segments were deleted)")
            base, size = [s for s in segments if s[0] <= address][-1]
            if address > base + size:
                raise AddressError(f"address {address} is beyond the end of {self.store.location} "
                                   f"({segment_name(base)} ends at {base + size})")
        elif address != 0:
            raise AddressError(f"address {address} is beyond the end of {self.store.location} (no segments yet)")
        self._open(base, address - base)

    def _open(self, base: int, offset: int) -> None:
        if self._file is not None:
            self._file.close()
        self._base = base
        self._file = self.store.open_read(segment_name(base)) if self.store.exists(segment_name(base)) else None
        self._buf = b""
        self._buf_off = offset
        self._pos = 0

    # -- reading ---------------------------------------------------------------------

    def read(self) -> tuple[int, bytes] | None:
        """The next record as (address, payload), or None if there is none yet."""
        while True:
            buf, pos = self._buf, self._pos
            if pos + HEADER_SIZE <= len(buf):
                n, crc = HEADER.unpack_from(buf, pos)
                end = pos + HEADER_SIZE + n
                if end <= len(buf) and n <= self.max_record:
                    payload = buf[pos + HEADER_SIZE : end]
                    if checksum(payload) == crc:
                        self._pos = end
                        return self._base + self._buf_off + pos, payload
                    raise CorruptRecord(self.address, "checksum mismatch", self.address + HEADER_SIZE + n)
                if n > self.max_record:
                    raise CorruptRecord(self.address, f"impossible length {n} (limit {self.max_record})")
            if not self._fill():
                return None

    def read_many(self, max_count: int = 4096) -> list[tuple[int, bytes]]:
        """Up to ``max_count`` next records (parsed and verified in batches); [] if none yet.

        Records before a corrupt one are returned; the next call raises ``CorruptRecord``.
        """
        out: list[tuple[int, bytes]] = []
        while len(out) < max_count:
            parsed = parse(self._buf, self._pos, max_count - len(out), self.max_record,
                           address=self._base + self._buf_off)
            if parsed.payloads:
                out += zip(parsed.addresses, parsed.payloads)
                self._pos = parsed.end
            if parsed.corrupt is not None:
                if out:
                    return out
                offset, reason, following = parsed.corrupt
                shift = self._base + self._buf_off
                raise CorruptRecord(offset + shift, reason, None if following is None else following + shift)
            if len(out) < max_count:
                try:
                    if not self._fill():
                        break
                except CorruptRecord:
                    if out:  # deliver what came before it; the next call raises again
                        break
                    raise
        return out

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        """Every record from here to the current end of the log."""
        while batch := self.read_many():
            yield from batch

    def _fill(self) -> bool:
        """Bring more bytes into the buffer, moving to the next segment at the end of one.

        False when the log has nothing more yet (possibly a record not complete yet).
        """
        if self._file is None:  # the topic had no segment at this base yet
            if not self.store.exists(segment_name(self._base)):
                return False
            self._open(self._base, self._buf_off + self._pos)
        file = self._file
        assert file is not None  # open: its segment exists
        offset = self._buf_off + self._pos
        partial = len(self._buf) - self._pos
        want = self.chunk_size
        if partial >= HEADER_SIZE:  # a record bigger than the buffer: read all of it
            want = max(want, HEADER_SIZE + HEADER.unpack_from(self._buf, self._pos)[0])
        data = file.read(offset, want)
        if len(data) > partial:
            self._buf, self._buf_off, self._pos = data, offset, 0
            return True
        return self._next_segment(offset, partial)

    def _next_segment(self, end: int, partial: int) -> bool:
        """At the end of this segment's bytes: step into the next segment, if there is one."""
        later = [(b, s) for b, s in self.segments() if b > self._base]
        if not later:
            return False  # the end of the log, or a record not complete yet
        # The writer finishes a segment before it creates the next, so once a later one
        # is listed this size is final: bytes appended since our read come first.
        assert self._file is not None  # the segment just read
        if self._file.size() > end + partial:
            return self._fill()
        here = self._base + end
        if partial:
            raise CorruptRecord(here, f"record cut short ({partial} bytes) at the end of sealed segment "
                                      f"{segment_name(self._base)}", later[0][0])
        if later[0][0] != here:
            raise CorruptRecord(here, f"segment {segment_name(self._base)} ends at {here} but the next one "
                                      f"starts at {later[0][0]} (bytes lost)", later[0][0])
        self._open(later[0][0], 0)
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
