"""Primer's append-only persistence file (slide S18): the record format and ``AofFile``.

One file per queue (``queue.<name>.aof``) and per log (``log.<name>.aof``) on a node's
Store, when persistence is on. The file is the header ``PRIMAOF1`` and then records, each
``u32 length | u32 crc32 | u8 kind | u32 meta_len | meta JSON | payload`` (big endian;
``length`` counts what follows the crc, the crc covers the same bytes). What a record
means is the owner's business; this room only writes, reads back, cuts torn tails and
rewrites the file as its live records (compaction).

Recovery tells a crash from damage: a crash mid-append leaves an incomplete last record
(or a last record whose crc fails, or zero bytes where the file system extended the file
but never wrote it): that tail is cut and recovery goes on. Anything wrong before the
end is damage: ``CorruptFile`` naming the byte, and nothing on disk changes.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterator, Union

from lab.design.runtime import Handle, Store

HEADER = b"PRIMAOF1"
MAX_META = 1 << 20  # bytes of a record's JSON
MAX_PAYLOAD = 64 << 20  # bytes of a message's or a log record's payload
_PREFIX = struct.Struct(">II")  # length, crc
_META_LEN = struct.Struct(">I")
_MIN_LENGTH = 1 + _META_LEN.size  # kind and meta_len
MAX_LENGTH = _MIN_LENGTH + MAX_META + MAX_PAYLOAD
_READ_CHUNK = 1 << 20  # recovery reads the file this much at a time


# -- the records -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Put:
    """A copy of a queue message this node holds."""

    id: str
    origin: str
    seq: int
    put_ns: int
    replicas: tuple[str, ...]
    payload: bytes


@dataclass(frozen=True)
class Ack:
    """The message is acknowledged: drop it."""

    id: str


@dataclass(frozen=True)
class Commit:
    """The queue's high watermark for the messages ``origin`` took: every one of them with
    seq <= ``seq`` is held by its W replicas (so visible to consumers)."""

    origin: str
    seq: int


@dataclass(frozen=True)
class LogCreated:
    retention_s: float


@dataclass(frozen=True)
class Range:
    """A log range starting at offset ``start``, and its chain of replicas."""

    start: int
    replicas: tuple[str, ...]


@dataclass(frozen=True)
class Append:
    """A log record."""

    offset: int
    put_ns: int
    payload: bytes


@dataclass(frozen=True)
class HighWatermark:
    """Every record with offset <= ``offset`` is on every replica of its chain: consumers
    may read up to it."""

    offset: int


@dataclass(frozen=True)
class Checkpoint:
    group: str
    offset: int


@dataclass(frozen=True)
class Trim:
    """Retention dropped every record below ``first``."""

    first: int


Record = Union[Put, Ack, Commit, LogCreated, Range, Append, HighWatermark, Checkpoint, Trim]

# What each meta field must hold: str, a whole number >= 0, a finite number >= 0, or a list
# of str (a tuple in Python).
_STR, _COUNT, _SECONDS, _NAMES = "str", "count", "seconds", "names"


@dataclass(frozen=True)
class _Kind:
    code: int
    cls: type
    fields: dict[str, str]  # the JSON fields, payload excluded
    has_payload: bool


_KINDS = [
    _Kind(1, Put, {"id": _STR, "origin": _STR, "seq": _COUNT, "put_ns": _COUNT, "replicas": _NAMES}, True),
    _Kind(2, Ack, {"id": _STR}, False),
    _Kind(3, Commit, {"origin": _STR, "seq": _COUNT}, False),
    _Kind(4, LogCreated, {"retention_s": _SECONDS}, False),
    _Kind(5, Range, {"start": _COUNT, "replicas": _NAMES}, False),
    _Kind(6, Append, {"offset": _COUNT, "put_ns": _COUNT}, True),
    _Kind(7, HighWatermark, {"offset": _COUNT}, False),
    _Kind(8, Checkpoint, {"group": _STR, "offset": _COUNT}, False),
    _Kind(9, Trim, {"first": _COUNT}, False),
]
_BY_CODE = {k.code: k for k in _KINDS}
_BY_CLASS = {k.cls: k for k in _KINDS}


class Torn(Exception):
    """The data ends inside a record; ``needed``: the bytes from the record's start that
    would make it whole, when its length is known (None otherwise)."""

    def __init__(self, offset: int, needed: int | None = None):
        super().__init__(f"byte {offset}: incomplete record")
        self.offset = offset
        self.needed = needed


class Corrupt(Exception):
    """A record that is whole but wrong. ``end``: where it ends by its length field (None
    when even that is unusable), so a reader can tell a torn last record from damage."""

    def __init__(self, offset: int, why: str, end: int | None = None):
        super().__init__(f"byte {offset}: {why}")
        self.offset = offset
        self.why = why
        self.end = end


class CorruptFile(ValueError):
    """A file recovery will not touch: ``<location>/<name>: byte <offset>: <why>``."""


def _field_ok(kind: str, value: Any) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _COUNT:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind == _SECONDS:
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and value >= 0)
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def encode(record: Record) -> bytes:
    """The record's bytes; ValueError for a record the format cannot hold (a field of the
    wrong type, meta or payload over their limits): nothing undecodable is ever written."""
    kind = _BY_CLASS.get(type(record))
    if kind is None:
        raise ValueError(f"not a Primer AOF record: {record!r}")
    meta: dict[str, Any] = {}
    for name, field_kind in kind.fields.items():
        value = getattr(record, name)
        if not _field_ok(field_kind, value):
            raise ValueError(f"{type(record).__name__}.{name} = {value!r}: not a valid {field_kind}")
        meta[name] = list(value) if field_kind == _NAMES else value
    meta_bytes = json.dumps(meta, separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                            allow_nan=False).encode()
    payload = bytes(record.payload) if kind.has_payload else b""
    if len(meta_bytes) > MAX_META:
        raise ValueError(f"{type(record).__name__}: {len(meta_bytes)} bytes of meta, over the {MAX_META} limit")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"{type(record).__name__}: {len(payload)} bytes of payload, over the {MAX_PAYLOAD} limit")
    body = bytes([kind.code]) + _META_LEN.pack(len(meta_bytes)) + meta_bytes + payload
    return _PREFIX.pack(len(body), zlib.crc32(body)) + body


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def decode(data: bytes, offset: int) -> tuple[Record, int]:
    """The record at ``offset`` of ``data`` and the offset after it. ``Torn`` when ``data``
    ends inside it; ``Corrupt`` for a bad crc, an unknown kind, bad JSON or fields, or a
    length over the limits."""
    if len(data) - offset < _PREFIX.size:
        raise Torn(offset)
    length, crc = _PREFIX.unpack_from(data, offset)
    if length > MAX_LENGTH:
        raise Corrupt(offset, f"record length {length} is over the {MAX_LENGTH} limit")
    if length < _MIN_LENGTH:
        raise Corrupt(offset, f"record length {length} is under the {_MIN_LENGTH} a record needs")
    start, end = offset + _PREFIX.size, offset + _PREFIX.size + length
    if end > len(data):
        raise Torn(offset, end - offset)
    body = data[start:end]
    if zlib.crc32(body) != crc:
        raise Corrupt(offset, f"crc mismatch (stored {crc:08x}, computed {zlib.crc32(body):08x})", end)
    kind = _BY_CODE.get(body[0])
    if kind is None:
        raise Corrupt(offset, f"unknown record kind {body[0]}", end)
    (meta_len,) = _META_LEN.unpack_from(body, 1)
    if meta_len > MAX_META:
        raise Corrupt(offset, f"meta length {meta_len} is over the {MAX_META} limit", end)
    if _MIN_LENGTH + meta_len > length:
        raise Corrupt(offset, f"meta length {meta_len} runs past the record's {length} bytes", end)
    payload = body[_MIN_LENGTH + meta_len:]
    if len(payload) > MAX_PAYLOAD:
        raise Corrupt(offset, f"payload of {len(payload)} bytes is over the {MAX_PAYLOAD} limit", end)
    if payload and not kind.has_payload:
        raise Corrupt(offset, f"{kind.cls.__name__} carries {len(payload)} bytes of payload it cannot have", end)
    try:
        meta = json.loads(body[_MIN_LENGTH:_MIN_LENGTH + meta_len].decode(), parse_constant=_reject_constant)
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Corrupt(offset, f"bad meta JSON: {e}", end) from None
    if not isinstance(meta, dict) or set(meta) != set(kind.fields):
        got = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
        raise Corrupt(offset, f"{kind.cls.__name__} meta has {got}, wants {sorted(kind.fields)}", end)
    values: dict[str, Any] = {}
    for name, field_kind in kind.fields.items():
        value = meta[name]
        if not _field_ok(field_kind, value):
            raise Corrupt(offset, f"{kind.cls.__name__}.{name} = {value!r}: not a valid {field_kind}", end)
        values[name] = tuple(value) if field_kind == _NAMES else float(value) if field_kind == _SECONDS else value
    if kind.has_payload:
        values["payload"] = bytes(payload)
    return kind.cls(**values), end


# -- reading a whole file --------------------------------------------------------------------

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
            if _whole_record_within(read(pos, size - pos)):
                # A crash leaves a prefix of one record; a whole record inside the "tail"
                # means the length field is damaged, and cutting would lose good records.
                raise Corrupt(pos, f"record length {e.needed and e.needed - _PREFIX.size} runs past the end "
                                   f"of the file, over later whole records")
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


def _whole_record_within(tail: bytes) -> bool:
    """Whether a whole, valid record starts anywhere in ``tail`` after its first byte."""
    # Every record's meta is a non-empty JSON object, so ``{"`` sits 13 bytes into it: jump
    # from one such pair to the next (a search in C) instead of trying every byte.
    meta_at = _PREFIX.size + _MIN_LENGTH
    found = tail.find(b'{"', 1 + meta_at)
    while found >= 0:
        start = found - meta_at
        (length,) = _META_LEN.unpack_from(tail, start)
        if tail[start + _PREFIX.size] in _BY_CODE and start + _PREFIX.size + length <= len(tail):
            try:
                decode(tail, start)
                return True
            except (Torn, Corrupt):
                pass
        found = tail.find(b'{"', found + 1)
    return False


def _zeros_to_end(read: Callable[[int, int], bytes], pos: int, size: int) -> bool:
    """Whether the file holds only zero bytes from ``pos`` on (a file system extended it and
    crashed before writing its data)."""
    while pos < size:
        chunk = read(pos, min(_READ_CHUNK, size - pos))
        if not chunk or chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True


# -- the file on a Store ---------------------------------------------------------------------

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
            for offset, item in scan(self._handle.read, size):
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
