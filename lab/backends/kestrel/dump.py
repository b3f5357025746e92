"""Reading journals for people: ``lab kestrel dump PATH`` (like the original's qdump) and
the compact form the original's test suite compares against."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from lab.backends.kestrel.core.journal_records import (Add, BrokenRecord, ConfirmRemove, Continue, Record, Remove,
                                                  RemoveTentative, SaveXid, Truncated, Unremove, decode)


class NotAJournal(ValueError):
    """A file that is not a Kestrel journal: its first record is no whole, known record."""


def render(records: Iterable[Record]) -> str:
    """``add(11:0:hello kitty), remove, remove-tentative(2), unremove(1), confirm-remove(2), xid(3)``."""
    out = []
    for r in records:
        if isinstance(r, Add):
            out.append(f"add({len(r.item.data)}:{r.item.xid}:{r.item.data.decode('latin-1')})")
        elif isinstance(r, Remove):
            out.append("remove")
        elif isinstance(r, RemoveTentative):
            out.append("remove-tentative" if r.xid is None else f"remove-tentative({r.xid})")
        elif isinstance(r, SaveXid):
            out.append(f"xid({r.xid})")
        elif isinstance(r, Unremove):
            out.append(f"unremove({r.xid})")
        elif isinstance(r, ConfirmRemove):
            out.append(f"confirm-remove({r.xid})")
        elif isinstance(r, Continue):
            out.append(f"continue({r.xid}, {len(r.item.data)}:{r.item.data.decode('latin-1')})")
    return ", ".join(out)


def qdump(path: str | Path, now_ms: int = 0) -> Iterator[str]:
    """One line per record — offset, then ADD/REM/RSV/XID/CAN/ACK/CON — and a summary.

    A corrupt tail is printed up to where it is cut; NotAJournal (at once, before any
    line) when not even the first record is whole and known. An empty file is a journal.
    """
    data = Path(path).read_bytes()
    try:
        if data:
            decode(data, 0, now_ms)
    except Truncated:
        raise NotAJournal(f"{path}: not a Kestrel journal (no whole record in its {len(data)} bytes)") from None
    except BrokenRecord as e:
        raise NotAJournal(f"{path}: not a Kestrel journal ({e.reason} at byte 0)") from None
    return _qdump_lines(path, data, now_ms)


def _qdump_lines(path: str | Path, data: bytes, now_ms: int) -> Iterator[str]:
    pos = 0
    queued = 0
    open_xids: set[int] = set()
    records = 0
    while pos < len(data):
        try:
            record, end = decode(data, pos, now_ms)
        except (Truncated, BrokenRecord) as e:
            yield f"{pos:08x}  ** {e} ({len(data) - pos} bytes not read)"
            break
        records += 1
        if isinstance(record, Add):
            queued += 1
            expiry = f" expires {record.item.expiry}" if record.item.expiry else ""
            yield f"{pos:08x}  ADD {len(record.item.data)}{expiry}"
        elif isinstance(record, Remove):
            queued -= 1
            yield f"{pos:08x}  REM"
        elif isinstance(record, RemoveTentative):
            queued -= 1
            if record.xid is not None:
                open_xids.add(record.xid)
            yield f"{pos:08x}  RSV {'' if record.xid is None else record.xid}".rstrip()
        elif isinstance(record, SaveXid):
            yield f"{pos:08x}  XID {record.xid}"
        elif isinstance(record, Unremove):
            queued += 1
            open_xids.discard(record.xid)
            yield f"{pos:08x}  CAN {record.xid}"
        elif isinstance(record, ConfirmRemove):
            open_xids.discard(record.xid)
            yield f"{pos:08x}  ACK {record.xid}"
        elif isinstance(record, Continue):
            open_xids.discard(record.xid)
            queued += 1
            yield f"{pos:08x}  CON {record.xid} ADD {len(record.item.data)}"
        pos = end
    yield (f"{path}: {records} records, {pos} bytes; {queued} items queued, "
           f"{len(open_xids)} open transactions at the end")
