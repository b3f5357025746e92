"""Reading a Primer node's append-only files for people: ``lab primer dump PATH``.

Plain file reading, no Runtime: it runs on a stopped node's files. One line per record,
``<byte offset> <kind> <field>=<value> ...``; a torn tail is the last line, and a corrupt
record ends the dump with a line naming its byte and the reason.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from lab.backends.primer.core.aof_records import HEADER, Corrupt, Record
from lab.backends.primer.core.aof_scan import TornTail, scan

PAYLOAD_SHOWN = 40  # bytes of a payload a line shows
_PLAIN = re.compile(r"[A-Za-z0-9._:@/+-]+")  # strings shown without quotes


class NotAnAof(ValueError):
    """A file that is not a Primer append-only file (no ``PRIMAOF1`` header), or none at all."""


def _value(value: Any) -> str:
    if isinstance(value, bytes):
        shown = repr(value[:PAYLOAD_SHOWN]) + ("..." if len(value) > PAYLOAD_SHOWN else "")
        return f"{len(value)} bytes {shown}"
    if isinstance(value, tuple):
        return ",".join(_value(v) for v in value)
    if isinstance(value, str):
        return value if _PLAIN.fullmatch(value) else repr(value)
    return str(value)


def render(offset: int, record: Record) -> str:
    """``8 Put id=m1 origin=n1 seq=1 put_ns=5 replicas=n1,n2 payload=5 bytes b'hello'``."""
    parts = [f"{f.name}={_value(getattr(record, f.name))}" for f in fields(record)]
    return " ".join([str(offset), type(record).__name__, *parts])


class Dump:
    """The lines of one file's dump (an iterator); ``corrupt`` is the one-line reason once a
    corrupt record ended it (None otherwise)."""

    def __init__(self, path: Path, file: BinaryIO, size: int):
        self.path = path
        self.corrupt: str | None = None
        self._lines = self._generate(file, size)

    def __iter__(self) -> "Dump":
        return self

    def __next__(self) -> str:
        return next(self._lines)

    def _generate(self, file: BinaryIO, size: int) -> Iterator[str]:
        def read(offset: int, n: int) -> bytes:
            file.seek(offset)
            return file.read(n)

        try:
            for offset, item in scan(read, size):
                if isinstance(item, TornTail):
                    yield f"{offset} torn tail: {item.size} bytes"
                else:
                    yield render(offset, item)
        except Corrupt as e:
            self.corrupt = f"{self.path}: byte {e.offset}: {e.why}"
            yield f"{e.offset} corrupt: {e.why}"
        finally:
            file.close()


def dump(path: str | Path) -> Dump:
    """The dump of the file at ``path``, line by line. ``NotAnAof`` (at once, before any
    line) for a missing file or one without the header; an empty file, or one holding a
    torn prefix of the header, is an AOF a crash cut short."""
    path = Path(path)
    try:
        file = path.open("rb")
    except OSError as e:
        raise NotAnAof(f"{path}: cannot read it ({e.strerror})") from None
    head = file.read(len(HEADER))
    if head != HEADER and not (len(head) < len(HEADER) and HEADER.startswith(head)):
        file.close()
        raise NotAnAof(f"{path}: not a Primer append-only file (no {HEADER.decode()} header)")
    file.seek(0, 2)
    return Dump(path, file, file.tell())
