"""Primer's append-only file, read whole: every record in order, and a crash told from damage.

``scan`` walks a file a chunk at a time (a big file is never in memory whole). A crash
mid-append leaves an incomplete last record (or a last record whose crc fails, or zero
bytes where the file system extended the file but never wrote it): ``scan`` ends with a
``TornTail`` for the owner to cut. Anything wrong before the end is damage: ``Corrupt``
naming the byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from lab.backends.primer.core.aof_records import HEADER, PREFIX, Corrupt, Record, Torn, decode, whole_record_within

_READ_CHUNK = 1 << 20  # recovery reads the file this much at a time


@dataclass(frozen=True)
class TornTail:
    """What a crash left at the end of a file: ``size`` bytes from ``offset`` to be cut."""

    offset: int
    size: int


def scan(read: Callable[[int, int], bytes], size: int) -> Iterator[tuple[int, Record | TornTail]]:
    """Every record of a file of ``size`` bytes (``read(offset, n)`` reads it) with its
    offset, in order, then a ``TornTail`` if the file ends in one. ``Corrupt`` (offset in
    the file) for a missing header or a bad record before the end. Reads a chunk at a time,
    so a big file is never in memory whole."""
    head = read(0, len(HEADER)) if size else b""
    if head != HEADER:
        if len(head) < len(HEADER) and HEADER.startswith(head):
            if size:  # a crash while the file was being created
                yield 0, TornTail(0, size)
            return
        raise Corrupt(0, f"no {HEADER.decode()} header (found {head[:len(HEADER)]!r})")
    buffer, buffer_at = b"", len(HEADER)  # buffer holds the file from byte buffer_at on
    pos = len(HEADER)
    while pos < size:
        try:
            record, end = decode(buffer, pos - buffer_at)
        except Torn as e:
            loaded = buffer_at + len(buffer)
            if loaded < size:  # not torn: the rest of the record is not read yet
                want = max(_READ_CHUNK, (e.needed or 0) - (loaded - pos))
                more = read(loaded, min(want, size - loaded))
                if more:
                    buffer, buffer_at = buffer[pos - buffer_at:] + more, pos
                    continue
                size = loaded  # the file is shorter than it said: it ends here
            if whole_record_within(read(pos, size - pos)):
                # A crash leaves a prefix of one record; a whole record inside the "tail"
                # means the length field is damaged, and cutting would lose good records.
                raise Corrupt(pos, f"record length {e.needed and e.needed - PREFIX.size} runs past the end "
                                   f"of the file, over later whole records") from None
            yield pos, TornTail(pos, size - pos)
            return
        except Corrupt as e:
            last = e.end is not None and buffer_at + e.end == size  # a crash tore the last record
            if last or _zeros_to_end(read, pos, size):
                yield pos, TornTail(pos, size - pos)
                return
            raise Corrupt(pos, e.why) from None
        yield pos, record
        pos = buffer_at + end
        if end > _READ_CHUNK:  # let go of what was read
            buffer, buffer_at = buffer[end:], pos


def _zeros_to_end(read: Callable[[int, int], bytes], pos: int, size: int) -> bool:
    """Whether the file holds only zero bytes from ``pos`` on (a file system extended it and
    crashed before writing its data)."""
    while pos < size:
        chunk = read(pos, min(_READ_CHUNK, size - pos))
        if not chunk or chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True
