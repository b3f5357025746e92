"""Kestrel's wire formats, sans-IO: bytes in, requests out; responses to bytes.

Two line protocols share the port-less core: the memcache protocol (port 22133) and the
text protocol (port 2222). Nothing here knows sockets or queues — the sessions interpret
requests and the servers move bytes (the h11 split).

Memcache framing follows the original's codec: a line ends at ``\\n`` (a preceding ``\\r``
is dropped), is read as ISO-8859-1 and split on single spaces like Java's ``split(" ")``
(two spaces make an empty token; trailing empty tokens vanish); only the first token is
lower-cased. A storage command's line carries the byte count in token 4; the value is
the next N bytes, and the two bytes after it are consumed and marked on the request
(``terminator_ok``): the handler refuses a block not followed by ``\r\n`` unless the
server keeps the original's framing (it skipped them unchecked). A request starting with
the binary protocol's magic byte becomes one ``BINARY_REQUEST`` carrying its header.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

# Input that cannot be framed drops the connection without a reply (as the original).
from lab.design.runtime import ProtocolDrop  # noqa: F401 (re-exported)

STORAGE_COMMANDS = frozenset({"set", "add", "replace", "append", "prepend", "cas"})
#: A line longer than this without a newline is an attack or a bug, not a request.
MAX_LINE = 64 * 1024
#: The largest value a storage command may announce (the queue's maxItemSize applies later).
MAX_VALUE = 256 * 1024 * 1024
_INT = re.compile(r"[+-]?[0-9]+")
#: A memcache binary-protocol request starts with this byte (no text command does).
BINARY_MAGIC = 0x80
BINARY_HEADER = struct.Struct(">BBHBBHIIQ")  # magic opcode key-len extras-len type status body opaque cas
#: The request a binary-protocol client's first header becomes (no text command has a space).
BINARY_REQUEST = "binary protocol"




def java_split(line: str) -> list[str]:
    """``line.split(" ")`` as Java does it: trailing empty tokens removed."""
    tokens = line.split(" ")
    while len(tokens) > 1 and tokens[-1] == "":
        tokens.pop()
    return tokens


def java_int(text: str) -> int:
    """Integer.parseInt: optional sign, decimal digits, 32-bit; ValueError otherwise."""
    if not (text.isdigit() and text.isascii()) and not _INT.fullmatch(text):
        raise ValueError(f"not a number: {text!r}")
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"out of range: {text!r}")
    return value


@dataclass(slots=True)
class MemcacheRequest:
    command: str  # lower-cased
    args: list[str]  # the tokens after the command, case kept
    data: bytes | None = None  # a storage command's value
    size: int = 0  # bytes this request took on the wire
    terminator_ok: bool = True  # a data block was followed by "\r\n" (the original never checked)


class MemcacheParser:
    """Feed bytes, take complete requests. Raises ProtocolDrop on a framing error."""

    def __init__(self, max_value: int = MAX_VALUE):
        self.buffer = bytearray()
        self.max_value = max_value
        self._pending: tuple[list[str], int, int] | None = None  # tokens, value size, line bytes

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def next_request(self) -> MemcacheRequest | None:
        """The next complete request, or None until more bytes arrive."""
        buffer = self.buffer
        if not buffer:  # the common case after a request: its arrival is used up
            return None
        if self._pending is None:
            if buffer[0] == BINARY_MAGIC:  # a binary-protocol client: answer it
                if len(buffer) < BINARY_HEADER.size:
                    return None
                header = bytes(buffer[:BINARY_HEADER.size])
                buffer.clear()  # the connection closes after the answer
                return MemcacheRequest(BINARY_REQUEST, [], header, len(header))
            end = buffer.find(b"\n")
            if (len(buffer) if end < 0 else end) > MAX_LINE:
                raise ProtocolDrop(f"request line longer than {MAX_LINE} bytes")
            if end < 0:
                return None
            cut = end - 1 if end and buffer[end - 1] == 13 else end  # a "\r" before the "\n"
            line = buffer[:cut].decode("latin-1")
            del buffer[: end + 1]
            tokens = line.split(" ")
            if tokens[-1] == "":
                tokens = java_split(line)
            command = tokens[0].lower()
            if command not in STORAGE_COMMANDS:
                return MemcacheRequest(command, tokens[1:], None, end + 1)
            if len(tokens) < 5:
                raise ProtocolDrop(f"{command}: expected 5 tokens, got {len(tokens)}")
            try:
                size = java_int(tokens[4])
            except ValueError:
                raise ProtocolDrop(f"{command}: bad byte count {tokens[4]!r}") from None
            if size < 0 or size > self.max_value:
                raise ProtocolDrop(f"{command}: byte count {size} out of range (0 to {self.max_value})")
            self._pending = (tokens, size, end + 1)
        tokens, size, line_bytes = self._pending
        if len(buffer) < size + 2:
            return None
        data = bytes(buffer[:size])
        terminator_ok = buffer[size: size + 2] == b"\r\n"
        del buffer[: size + 2]
        self._pending = None
        return MemcacheRequest(tokens[0].lower(), tokens[1:], data, line_bytes + size + 2, terminator_ok)


def memcache_line(text: str) -> bytes:
    return text.encode("latin-1") + b"\r\n"


def binary_unknown_command(header: bytes) -> bytes:
    """The binary protocol's "unknown command" (status 0x0081) answer to a request header,
    with its opcode and opaque, so a binary client fails at once instead of hanging."""
    _, opcode, *_, opaque, _ = BINARY_HEADER.unpack(header)
    body = b"Unknown command"
    return BINARY_HEADER.pack(0x81, opcode, 0, 0, 0, 0x0081, len(body), opaque, 0) + body


def memcache_value(queue: str, data: bytes) -> bytes:
    """One item: ``VALUE <queue> 0 <len>``, the data, ``END``."""
    return b"".join((b"VALUE ", queue.encode("latin-1"), b" 0 ", str(len(data)).encode(), b"\r\n",
                     data, b"\r\nEND\r\n"))


END = b"END\r\n"


# ---------------------------------------------------------------------------------------
# the text protocol


@dataclass
class TextRequest:
    command: str
    args: list[str]
    items: list[bytes] | None = None  # a put's item lines
    size: int = 0


@dataclass
class TextParser:
    """Line protocol: ``put <q>:`` then item lines until an empty line; other commands one line.

    Items are the lines' raw bytes (the original re-encoded them ISO-8859-1 -> UTF-8,
    mangling every byte >= 0x80; we keep them as sent), without the line end.
    """

    max_put_bytes: int = MAX_VALUE
    buffer: bytearray = field(default_factory=bytearray)
    _put: TextRequest | None = None

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def next_request(self) -> TextRequest | None:
        while True:
            end = self.buffer.find(b"\n")
            # A command line is capped as on the memcache port; a put's item lines are
            # values, capped (as a memcache value) by the put's total size.
            if self._put is None:
                limit, too_long = MAX_LINE, f"line longer than {MAX_LINE} bytes"
            else:
                limit, too_long = self.max_put_bytes - self._put.size, f"put larger than {self.max_put_bytes} bytes"
            if (len(self.buffer) if end < 0 else end) > limit:
                raise ProtocolDrop(too_long)
            if end < 0:
                return None
            raw = bytes(self.buffer[:end])
            del self.buffer[: end + 1]
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if self._put is not None:
                put = self._put
                put.size += end + 1
                if not line:
                    self._put = None
                    return put
                assert put.items is not None
                put.items.append(line)
                if put.size > self.max_put_bytes:
                    raise ProtocolDrop(f"put larger than {self.max_put_bytes} bytes")
                continue
            text = line.decode("latin-1")
            if text.endswith(":"):
                tokens = java_split(text[:-1])
                self._put = TextRequest(tokens[0].lower(), tokens[1:], [], end + 1)
                continue
            tokens = java_split(text)
            return TextRequest(tokens[0].lower(), tokens[1:], None, end + 1)


def text_count(n: int) -> bytes:
    return b"+%d\n" % n


def text_error(message: str) -> bytes:
    return b"-" + message.encode("latin-1", "replace") + b"\n"


def text_item(data: bytes) -> bytes:
    return b":" + data + b"\n"


TEXT_NONE = b"*\n"
