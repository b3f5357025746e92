"""The client side of the sans-IO HTTP/1.1 wire: a request's bytes and the reading of its
response.

Client: ``encode_request(...)`` gives a request's bytes, and a ``ResponseReader`` (one per
request) takes the reply's bytes as they arrive and returns an ``HttpReply`` once the whole
response is in: the pair a design's client passes to ``Connection.exchange``.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import httptools

from lab.design.http import (MAX_HEADER_BYTES, PHASE_CHUNKED, PHASE_HEAD, PHASE_LENGTH, PHASE_TO_CLOSE, ParsedMessage,
                             head_end)

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def encode_request(method: str, target: str, host: str, body: bytes = b"",
                   headers: Iterable[tuple[str, str]] = ()) -> bytes:
    """A request's bytes: ``target`` is the path and query, already percent-encoded; a body
    (or a POST, PUT or PATCH) gets a Content-Length. ValueError if a piece holds CR or LF."""
    parts = [method, " ", target, " HTTP/1.1\r\nhost: ", host, "\r\n"]
    lines = 3  # the request line, host, the blank line
    for name, value in headers:
        parts += (name, ": ", value, "\r\n")
        lines += 1
    if body or method in _BODY_METHODS:
        parts += ("content-length: ", str(len(body)), "\r\n")
        lines += 1
    parts.append("\r\n")
    head = "".join(parts)
    if head.count("\n") != lines or head.count("\r") != lines:
        raise ValueError(f"a request's method, target, host and headers must not hold CR or LF: {head!r}")
    return head.encode("latin-1") + body if body else head.encode("latin-1")


class HttpReply(NamedTuple):
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header's values joined by ", "
    body: bytes


class ResponseReader:
    """Reads one response with llhttp: ``reader(chunk)`` returns None until the whole
    response is in, then its ``HttpReply``. ``method`` is the request's (a HEAD's response
    has no body). ``reader(b"")`` says the connection closed (a response with neither
    Content-Length nor chunks ends there). ValueError if the bytes are no HTTP/1.x response,
    its header section is over ``MAX_HEADER_BYTES``, or it ends too soon; a 1xx response
    before the real one is skipped."""

    __slots__ = ("_method", "_msg", "_parser", "_phase", "_remaining", "_head_size", "_tail", "_status",
                 "_rest", "_closed")

    def __init__(self, method: str = "GET"):
        self._method = method
        self._msg = ParsedMessage()
        self._parser = httptools.HttpResponseParser(self._msg)
        self._phase = PHASE_HEAD
        self._remaining = 0  # Content-Length bytes still to come
        self._head_size = 0
        self._tail = b""  # the header section's last 2 bytes so far
        self._status = 0
        self._rest = b""
        self._closed = False

    @property
    def trailing(self) -> bytes:
        """Bytes received after the response (a pipelined next response's), unread."""
        return self._rest

    def __call__(self, chunk: bytes) -> HttpReply | None:
        if not chunk:
            return self._closed_now()
        if self._closed:
            raise ValueError("bytes after the connection closed")
        msg, parser = self._msg, self._parser
        pos, end = 0, len(chunk)
        try:
            while pos < end:
                phase = self._phase
                if phase == PHASE_HEAD:
                    stop = head_end(self._tail, chunk, pos)
                    if stop < 0:
                        stop = end
                    piece = chunk if pos == 0 and stop == end else chunk[pos:stop]
                    self._head_size += stop - pos
                    pos = stop
                    parser.feed_data(piece)
                    if not msg.head_done:
                        self._tail = (self._tail + piece)[-2:]
                        if self._head_size > MAX_HEADER_BYTES:
                            raise ValueError(f"malformed HTTP response: a header section over {MAX_HEADER_BYTES} bytes")
                        continue
                    status = parser.get_status_code()
                    if status < 200:  # 100 Continue: the response follows
                        msg.reset()
                        self._head_size, self._tail = 0, b""
                        continue
                    self._status = status
                    if msg.complete or self._method == "HEAD":
                        break
                    headers = msg.headers
                    coding = headers.get("transfer-encoding")
                    length = headers.get("content-length")
                    if coding is not None and coding.rpartition(",")[2].strip().lower() == "chunked":
                        self._phase = PHASE_CHUNKED
                    elif length is not None:
                        self._phase, self._remaining = PHASE_LENGTH, int(length)
                    else:
                        self._phase = PHASE_TO_CLOSE
                elif phase == PHASE_LENGTH:
                    stop = pos + self._remaining
                    if stop > end:
                        stop = end
                    piece = chunk if pos == 0 and stop == end else chunk[pos:stop]
                    self._remaining -= stop - pos
                    pos = stop
                    parser.feed_data(piece)
                elif phase == PHASE_CHUNKED:  # line by line, so as not to parse past its end
                    lf = chunk.find(b"\n", pos)
                    stop = end if lf < 0 else lf + 1
                    parser.feed_data(chunk if pos == 0 and stop == end else chunk[pos:stop])
                    pos = stop
                else:  # PHASE_TO_CLOSE
                    parser.feed_data(chunk if pos == 0 else chunk[pos:])
                    pos = end
                if msg.complete:
                    break
            else:
                return None
        except httptools.HttpParserError as e:
            raise ValueError(f"malformed HTTP response: {e}") from None
        except httptools.HttpParserUpgrade:  # a 101 to a request that asked for no upgrade
            raise ValueError("malformed HTTP response: an upgrade nobody asked for") from None
        if pos < end:
            self._rest = chunk[pos:]
        return HttpReply(self._status, msg.headers, msg.take_body() if msg.body else b"")

    def _closed_now(self) -> HttpReply | None:
        self._closed = True
        if self._phase == PHASE_TO_CLOSE:
            msg = self._msg
            return HttpReply(self._status, msg.headers, msg.take_body() if msg.body else b"")
        raise ValueError("the connection closed before a whole response")
