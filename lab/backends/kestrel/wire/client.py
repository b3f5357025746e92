"""The client side of Kestrel's memcache protocol, sans-IO: the bytes of the requests a
queue client sends, and a reader of one reply (``Connection.exchange``'s ``receive``).

Only what a queue client needs: ``set`` (one status line back) and ``get`` with Kestrel's
options (an item in a ``VALUE`` block then ``END``, ``END`` alone, or an error line).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply: its status line (``STORED``, ``END``, ``CLIENT_ERROR``...; ``VALUE`` for an
    item) and the item's bytes."""

    line: str
    value: bytes | None = None


def encode_set(queue: str, body: bytes) -> bytes:
    return b"set %s 0 0 %d\r\n%s\r\n" % (queue.encode(), len(body), body)


def encode_get(key: str) -> bytes:
    return b"get %s\r\n" % key.encode()


def get_key(queue: str, wait: float = 0.0, open: bool = False, close: bool = False, abort: bool = False) -> str:
    """``queue[/t=ms][/close][/open][/abort]``: the key of a Kestrel get."""
    timeout_ms = int(wait * 1000)
    return (queue + (f"/t={timeout_ms}" if timeout_ms else "") + ("/close" if close else "")
            + ("/open" if open else "") + ("/abort" if abort else ""))


class ReplyReader:
    """Fed the bytes that arrive; returns the ``Reply`` once it is whole, else None.
    ValueError for bytes that are no memcache reply."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer = b""

    def __call__(self, chunk: bytes) -> Reply | None:
        buffer = self.buffer + chunk if self.buffer else chunk
        end = buffer.find(b"\r\n")
        if end < 0:
            self.buffer = buffer
            return None
        if not buffer.startswith(b"VALUE "):
            return Reply(buffer[:end].decode("latin-1"))
        header = buffer[:end].split(b" ")
        try:
            size = int(header[3])
        except (IndexError, ValueError):
            raise ValueError(f"a VALUE line without a byte count: {buffer[:end]!r}") from None
        start = end + 2
        whole = start + size + 7  # the value, then \r\nEND\r\n
        if len(buffer) < whole:
            self.buffer = buffer
            return None
        if buffer[start + size:whole] != b"\r\nEND\r\n":
            raise ValueError(f"a VALUE block not followed by END: {buffer[start + size:whole]!r}")
        return Reply("VALUE", buffer[start:start + size])
