"""Kestrel's journal records, byte-compatible with the original 2.4: what each record is,
and its bytes both ways (``Journal`` in ``core.journal`` keeps the files that hold them).

All integers little-endian; "size" counts the bytes after the size field:

    0 ADD (legacy)          i32 size, i32 expiry (unix s), data          read only
    1 REMOVE                -
    2 ADDX                  i32 size (16+len), i64 add time ms, i64 expiry ms, data
    3 REMOVE_TENTATIVE      - (legacy: the queue assigns the next xid)   read only
    4 SAVE_XID              i32 xid                                      read only
    5 UNREMOVE              i32 xid
    6 CONFIRM_REMOVE        i32 xid
    7 ADD_XID               i32 xid, ADDX block (a plain add)            read only
    8 CONTINUE              i32 xid, ADDX block
    9 REMOVE_TENTATIVE_XID  i32 xid
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, Union

_I32 = struct.Struct("<i")
_ADDX = struct.Struct("<iqq")  # size, add time, expiry
_ADD_LEGACY = struct.Struct("<ii")  # size, expiry seconds
XID = struct.Struct("<bi")  # an opcode and its xid: the journal's writer packs them too
MAX_RECORD = 1 << 31


@dataclass(frozen=True, slots=True)
class Item:
    data: bytes
    add_time: int  # ms since the epoch
    expiry: int = 0  # ms since the epoch; 0 = never
    xid: int = 0


@dataclass(frozen=True, slots=True)
class Add:
    item: Item


@dataclass(frozen=True, slots=True)
class Remove:
    pass


@dataclass(frozen=True, slots=True)
class RemoveTentative:
    xid: int | None  # None: the legacy record without an xid


@dataclass(frozen=True, slots=True)
class SaveXid:
    xid: int


@dataclass(frozen=True, slots=True)
class Unremove:
    xid: int


@dataclass(frozen=True, slots=True)
class ConfirmRemove:
    xid: int


@dataclass(frozen=True, slots=True)
class Continue:
    xid: int
    item: Item


Record = Union[Add, Remove, RemoveTentative, SaveXid, Unremove, ConfirmRemove, Continue]


class Truncated(Exception):
    """The buffer ends inside a record."""

    def __init__(self, offset: int):
        super().__init__(f"record cut short at byte {offset}")
        self.offset = offset


class BrokenRecord(Exception):
    """Bytes that are no record (unknown opcode, impossible size)."""

    def __init__(self, offset: int, reason: str):
        super().__init__(f"broken record at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


# ------------------------------------------------------------------ records <-> bytes
def addx(item: Item) -> bytes:
    return _ADDX.pack(16 + len(item.data), item.add_time, item.expiry) + item.data


def encode(record: Record) -> bytes:
    if isinstance(record, Add):
        return b"\x02" + addx(record.item)
    if isinstance(record, Remove):
        return b"\x01"
    if isinstance(record, RemoveTentative):
        return b"\x03" if record.xid is None else XID.pack(9, record.xid)
    if isinstance(record, SaveXid):
        return XID.pack(4, record.xid)
    if isinstance(record, Unremove):
        return XID.pack(5, record.xid)
    if isinstance(record, ConfirmRemove):
        return XID.pack(6, record.xid)
    if isinstance(record, Continue):
        return XID.pack(8, record.xid) + addx(record.item)
    raise TypeError(f"not a journal record: {record!r}")


def _need(buf: bytes | memoryview, start: int, pos: int, n: int) -> None:
    if pos + n > len(buf):
        raise Truncated(start)


def _readaddx(buf: bytes | memoryview, start: int, pos: int) -> tuple[Item, int]:
    _need(buf, start, pos, 20)
    size, add_time, expiry = _ADDX.unpack_from(buf, pos)
    if size < 16 or size > MAX_RECORD:
        raise BrokenRecord(start, f"ADDX block of {size} bytes (at least 16)")
    _need(buf, start, pos + 4, size)
    data = bytes(buf[pos + 20: pos + 4 + size])
    return Item(data, add_time, expiry), pos + 4 + size


def decode(buf: bytes | memoryview, pos: int, now_ms: int) -> tuple[Record, int]:
    """The record at ``pos`` and where the next one starts."""
    start = pos
    _need(buf, start, pos, 1)
    op = buf[pos]
    pos += 1
    if op == 1:
        return Remove(), pos
    if op == 2:
        item, pos = _readaddx(buf, start, pos)
        return Add(item), pos
    if op == 3:
        return RemoveTentative(None), pos
    if op in (4, 5, 6, 9):
        _need(buf, start, pos, 4)
        xid = _I32.unpack_from(buf, pos)[0]
        kinds: dict[int, type[SaveXid | Unremove | ConfirmRemove | RemoveTentative]] = {
            4: SaveXid, 5: Unremove, 6: ConfirmRemove, 9: RemoveTentative}
        cls = kinds[op]
        return cls(xid), pos + 4
    if op in (7, 8):
        _need(buf, start, pos, 4)
        xid = _I32.unpack_from(buf, pos)[0]
        item, pos = _readaddx(buf, start, pos + 4)
        return (Add(item) if op == 7 else Continue(xid, item)), pos
    if op == 0:
        _need(buf, start, pos, 8)
        size, expiry_s = _ADD_LEGACY.unpack_from(buf, pos)
        if size < 4 or size > MAX_RECORD:
            raise BrokenRecord(start, f"ADD block of {size} bytes (at least 4)")
        _need(buf, start, pos + 4, size)
        data = bytes(buf[pos + 8: pos + 4 + size])
        return Add(Item(data, now_ms, expiry_s * 1000)), pos + 4 + size
    raise BrokenRecord(start, f"unknown opcode {op}")


def iter_records(buf: bytes | memoryview, now_ms: int) -> Iterator[tuple[int, Record]]:
    """(offset, record) for each record of ``buf``; raises at the first bad one."""
    pos = 0
    while pos < len(buf):
        record, end = decode(buf, pos, now_ms)
        yield pos, record
        pos = end

