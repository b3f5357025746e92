"""Primer's append-only file format: the records, and each one's bytes.

A file (``aof``) is the header ``PRIMAOF1`` and then records, each ``u32 length | u32 crc32 |
u8 kind | u32 meta_len | meta JSON | payload`` (big endian; ``length`` counts what follows
the crc, the crc covers the same bytes). This room is the record types (a queue's ``Put``,
``Ack``, ``Commit``; a log's ``LogCreated``, ``Range``, ``Append``, ``HighWatermark``,
``Checkpoint``, ``Trim``), ``encode`` (which refuses what it could not decode) and
``decode`` (``Torn`` when the bytes end inside a record, ``Corrupt`` when a whole one is wrong).
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Union

HEADER = b"PRIMAOF1"
MAX_META = 1 << 20  # bytes of a record's JSON
MAX_PAYLOAD = 64 << 20  # bytes of a message's or a log record's payload
PREFIX = struct.Struct(">II")  # length, crc
_META_LEN = struct.Struct(">I")
_MIN_LENGTH = 1 + _META_LEN.size  # kind and meta_len
MAX_LENGTH = _MIN_LENGTH + MAX_META + MAX_PAYLOAD


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
    payload = b""
    if kind.has_payload:
        assert isinstance(record, (Put, Append))  # the kinds that have one
        payload = bytes(record.payload)
    if len(meta_bytes) > MAX_META:
        raise ValueError(f"{type(record).__name__}: {len(meta_bytes)} bytes of meta, over the {MAX_META} limit")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"{type(record).__name__}: {len(payload)} bytes of payload, over the {MAX_PAYLOAD} limit")
    body = bytes([kind.code]) + _META_LEN.pack(len(meta_bytes)) + meta_bytes + payload
    return PREFIX.pack(len(body), zlib.crc32(body)) + body


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def decode(data: bytes, offset: int) -> tuple[Record, int]:
    """The record at ``offset`` of ``data`` and the offset after it. ``Torn`` when ``data``
    ends inside it; ``Corrupt`` for a bad crc, an unknown kind, bad JSON or fields, or a
    length over the limits."""
    if len(data) - offset < PREFIX.size:
        raise Torn(offset)
    length, crc = PREFIX.unpack_from(data, offset)
    if length > MAX_LENGTH:
        raise Corrupt(offset, f"record length {length} is over the {MAX_LENGTH} limit")
    if length < _MIN_LENGTH:
        raise Corrupt(offset, f"record length {length} is under the {_MIN_LENGTH} a record needs")
    start, end = offset + PREFIX.size, offset + PREFIX.size + length
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


def whole_record_within(tail: bytes) -> bool:
    """Whether a whole, valid record starts anywhere in ``tail`` after its first byte."""
    # Every record's meta is a non-empty JSON object, so ``{"`` sits 13 bytes into it: jump
    # from one such pair to the next (a search in C) instead of trying every byte.
    meta_at = PREFIX.size + _MIN_LENGTH
    found = tail.find(b'{"', 1 + meta_at)
    while found >= 0:
        start = found - meta_at
        (length,) = _META_LEN.unpack_from(tail, start)
        if tail[start + PREFIX.size] in _BY_CODE and start + PREFIX.size + length <= len(tail):
            try:
                decode(tail, start)
                return True
            except (Torn, Corrupt):
                pass
        found = tail.find(b'{"', found + 1)
    return False
