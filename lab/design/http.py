"""HTTP/1.1, sans-IO, on httptools (llhttp, Node's parser): the messages and the parsing both
sides share. No sockets, no clock: a world moves the bytes.

This room holds a request and a response as handlers see them (``Request``, ``Response``,
``json_response``, ``error``: every error the wire answers is ``{"error": reason}``) and the
llhttp feeding the server and the client both use. The other rooms of the wire:
``lab.design.http_router`` (routes to handlers), ``lab.design.http_server`` (the server
connection and the response encoder), ``lab.design.http_client`` (the request encoder and the
response reader).

llhttp parses a whole buffer at once, messages after messages, and tells no offsets; so
both sides feed it a message's bytes only: its header section up to its first empty line,
a Content-Length body by its length, a chunked body line by line. Thus the bytes after a
message (the next request's, the next response's) stay unparsed, and the header section's
size is known to the byte.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, Mapping

JSON = "application/json; charset=utf-8"
#: The methods a request may name (RFC 9110, PATCH, WebDAV's): any other is a 400, as
#: aiohttp's parser answers, not a 404 for a method nobody routes.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
                     "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT",
                     "SEARCH", "PURGE"})
MAX_HEADER_BYTES = 16384


# -- requests, responses ---------------------------------------------------------------------

class Request:
    """A whole request: ``path`` percent-decoded (``raw_path`` as sent), ``query`` the first
    value of each key, ``headers`` with lower-case names, ``params`` the route's ``{name}``
    segments (set by the router)."""

    __slots__ = ("method", "path", "query", "headers", "body", "params", "raw_path")

    def __init__(self, method: str, path: str, query: dict[str, str] | None = None,
                 headers: dict[str, str] | None = None, body: bytes = b"",
                 params: dict[str, str] | None = None, raw_path: str | None = None):
        self.method = method
        self.path = path
        self.query = {} if query is None else query
        self.headers = {} if headers is None else headers
        self.body = body
        self.params = {} if params is None else params
        self.raw_path = path if raw_path is None else raw_path

    def __repr__(self) -> str:
        return f"Request({self.method} {self.path} {self.query} {len(self.body)} bytes)"


class Response:
    """A response: ``headers`` must not set Content-Length or Transfer-Encoding (the
    connection frames the body itself; such headers are dropped)."""

    __slots__ = ("status", "body", "headers")

    def __init__(self, status: int = 200, body: bytes = b"", headers: Mapping[str, str] | None = None):
        self.status = status
        self.body = body
        self.headers = {} if headers is None else headers

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.body[:80]!r})"


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """``data`` as JSON (``json.dumps``' default spacing, as aiohttp's ``json_response``)."""
    all_headers = {"Content-Type": JSON}
    if headers:
        all_headers.update(headers)
    return Response(status, json.dumps(data).encode(), all_headers)


#: how the router's 500 reason begins: a handler raised (``lab.design.backend.InternalError``)
INTERNAL_ERROR = "internal error:"


def error(status: int, reason: str, headers: Mapping[str, str] | None = None) -> Response:
    """``{"error": reason}`` with ``status``: every error the wire answers has that shape."""
    return json_response({"error": reason}, status, headers)


Handler = Callable[[Request], Awaitable[Response]]


# -- parsing, shared by both sides -----------------------------------------------------------

# what the bytes being fed are: a header section, a Content-Length body, a chunked body, a
# body that runs to the connection's close (a response's only)
PHASE_HEAD, PHASE_LENGTH, PHASE_CHUNKED, PHASE_TO_CLOSE = 0, 1, 2, 3


def head_end(tail: bytes, data: bytes, pos: int) -> int:
    """The index in ``data`` just past the empty line that ends a header section (LF CR LF,
    or LF LF as h11 took it: llhttp 9 refuses a bare LF, older ones take it), searching from
    ``pos``; ``tail`` is the section's last bytes already fed (at most 2), so an end split
    between two feeds is found. -1 if the section goes on past ``data``."""
    if tail:
        probe = tail + data[pos:pos + 2]
        i = probe.find(b"\n\r\n")
        j = probe.find(b"\n\n", len(tail) - 1)  # not one inside the tail: it was fed already
        if i >= 0 or j >= 0:
            return pos - len(tail) + (j + 2 if i < 0 or 0 <= j < i else i + 3)
    i = data.find(b"\n\r\n", pos)
    j = data.find(b"\n\n", pos, i + 1) if i >= 0 else data.find(b"\n\n", pos)
    return j + 2 if j >= 0 else i + 3 if i >= 0 else -1


class ParsedMessage:
    """httptools' protocol: the callbacks collect a message here (one object per parser,
    reset in place: the parser holds its bound methods). Header names lower-case, values
    latin-1 without surrounding whitespace, a repeated header's values joined by ", "."""

    __slots__ = ("url", "headers", "body", "size", "head_done", "complete", "repeated_host")

    def __init__(self) -> None:
        self.url = b""
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.size = 0  # body bytes
        self.head_done = False
        self.complete = False
        self.repeated_host = False

    def on_url(self, piece: bytes) -> None:
        self.url += piece

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:
            return  # a chunked body's trailer fields: dropped, as h11 did
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").rstrip(" \t")  # llhttp keeps trailing whitespace
        headers = self.headers
        if key in headers:
            headers[key] = f"{headers[key]}, {text}"
            if key == "host":
                self.repeated_host = True
        else:
            headers[key] = text

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, data: bytes) -> None:
        self.body.append(data)
        self.size += len(data)

    def on_message_complete(self) -> None:
        self.complete = True

    def take_body(self) -> bytes:
        body = self.body
        return body[0] if len(body) == 1 else b"".join(body)

    def reset(self) -> None:
        self.url = b""
        self.headers = {}
        self.body = []
        self.size = 0
        self.head_done = self.complete = self.repeated_host = False
