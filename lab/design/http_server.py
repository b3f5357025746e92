"""The server side of the sans-IO HTTP/1.1 wire: one connection's requests parsed and its
responses encoded.

Server: ``HttpServerConnection(router, max_body=..., header_timeout=...)`` implements
``lab.design.runtime.ServerConnection``. The world feeds it bytes and runs the requests it returns
in order; llhttp parses them one at a time (a pipelined request's bytes wait, unparsed,
until the one before it is answered), and each gets one response, encoded here in one
piece, always with a Content-Length (none on 1xx, 204 and 304).
Keep-alive and pipelining (requests back to back in one feed) work; ``Connection: close``
(or an HTTP/1.0 client) closes the connection after its response. A request that breaks
HTTP (llhttp's ``HttpParserError``; a method no standard names; an HTTP/1.1 request without
its one Host; a Transfer-Encoding other than chunked, 501; a header section over
``max_header_bytes``, 431, counted exactly, however the bytes arrive) or whose body is over
``max_body`` (Content-Length checked before the body is read, a chunked body as soon as it
passes the limit) gets a JSON error and then the connection closes: ``handle`` returns
False. ``Expect: 100-continue`` is answered with a 100 when the body is awaited. An upgrade
(``Upgrade`` with ``Connection: upgrade``, or CONNECT) is declined: the router answers it as
any request, and the connection goes on in HTTP/1.1. The idle timer (``timeout``) is a
header timeout: it is not reset by bytes arriving (``idle_resets_on_data = False``), so the
world starts it at accept and after each response, and a request being handled is never
idle.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote

import httptools

from lab.design.http import (MAX_HEADER_BYTES, METHODS, PHASE_CHUNKED, PHASE_HEAD, PHASE_LENGTH, ParsedMessage, Request,
                             Response, error, head_end)
from lab.design.http_router import Router

if TYPE_CHECKING:
    from lab.design.runtime import Send

log = logging.getLogger("lab.design.http")  # the wire's one logger, whichever room logs

_NO_BODY_STATUS = frozenset({204, 304})  # and every 1xx
_FRAMING = frozenset({"content-length", "transfer-encoding"})  # the connection's, never a handler's
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class _Refusal:
    """What ``next_request`` returns for a request it will not run: its JSON error, then close."""

    __slots__ = ("status", "reason")

    def __init__(self, status: int, reason: str):
        self.status = status
        self.reason = reason

    def __repr__(self) -> str:
        return f"_Refusal({self.status}, {self.reason!r})"


class _Continue:
    """What ``next_request`` returns while a client waits for ``100 Continue`` to send its body."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "_Continue()"


_CONTINUE = _Continue()
_CONTINUE_BYTES = b"HTTP/1.1 100 Continue\r\n\r\n"


def _split_target(target: str) -> tuple[str, str]:
    """A request target's raw path and raw query (origin-form, or absolute-form's path)."""
    if target[:1] != "/":
        _, sep, rest = target.partition("://")
        if not sep:
            return target, ""  # "*" (OPTIONS) or nonsense: no route has it
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    path, _, query = target.partition("?")
    return path, query


def _query(raw: str) -> dict[str, str]:
    query: dict[str, str] = {}
    for key, value in parse_qsl(raw, keep_blank_values=True):
        query.setdefault(key, value)
    return query


def _has_token(value: str | None, token: str) -> bool:
    """Whether a comma-separated header (Connection, Expect) names ``token``, in any case."""
    return value is not None and token in (t.strip() for t in value.lower().split(","))


_STATUS_LINES = {code: f"HTTP/1.1 {code} {phrase}\r\n" for code, phrase in
                 ((s.value, s.phrase) for s in HTTPStatus)}


def encode_response(response: Response, close: bool = False, head_only: bool = False) -> bytes:
    """``response`` as bytes: a Content-Length (none on 1xx, 204, 304), its headers (but any
    Content-Length or Transfer-Encoding of its own), ``Connection: close`` if ``close``, and
    its body unless ``head_only`` (the answer to a HEAD). ValueError if a header holds CR or LF."""
    status = response.status
    body = response.body
    parts = [_STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n"]
    lines = 2  # the status line, the blank line
    if status < 200 or status in _NO_BODY_STATUS:
        body = b""
    else:
        parts += ("content-length: ", str(len(body)), "\r\n")
        lines += 1
    for name, value in response.headers.items():
        if name.lower() in _FRAMING:
            continue
        parts += (name, ": ", value, "\r\n")
        lines += 1
    if close:
        parts.append("connection: close\r\n")
        lines += 1
    parts.append("\r\n")
    head = "".join(parts)
    if head.count("\n") != lines or head.count("\r") != lines:
        raise ValueError(f"a response header holds CR or LF: {head!r}")
    return head.encode("latin-1") + body if body and not head_only else head.encode("latin-1")


class HttpServerConnection:
    """One HTTP/1.1 connection (``lab.design.runtime.ServerConnection``) over ``router``.

    ``feed`` only keeps the bytes; ``next_request`` gives them to llhttp, a message's worth
    at a time, and leaves the bytes after a whole request for the next call. The responses
    are encoded here: a handler's whole response is one ``send``."""

    idle_resets_on_data = False

    def __init__(self, router: Router, *, max_body: int, header_timeout: float,
                 max_header_bytes: int = MAX_HEADER_BYTES):
        if not header_timeout > 0:
            raise ValueError(f"header timeout {header_timeout}: use a number of seconds > 0")
        self.router = router
        self.max_body = max_body
        self.max_header_bytes = max_header_bytes
        self.timeout: float | None = header_timeout
        self._msg = ParsedMessage()
        self._parser = httptools.HttpRequestParser(self._msg)
        self._buf = b""  # bytes not given to the parser yet
        self._phase = PHASE_HEAD  # what the parser is reading
        self._head_size = 0  # bytes of the request's header section so far
        self._tail = b""  # their last 2
        self._start = b""  # their first 64 (for an unknown method's name)
        self._remaining = 0  # Content-Length bytes still to come
        self._method = ""
        self._expect = False  # the client waits for a 100 Continue to send its body
        self._continued = False  # a 100 Continue was sent for this request
        self._close = False  # this request is the connection's last (Connection: close, HTTP/1.0)
        self._over = False  # refused, or lost: no more requests

    def request_kind(self, request: Request | _Refusal | _Continue) -> str:
        """What kind of request this is, as service-time models name it: its method and route."""
        if isinstance(request, Request):
            pattern = getattr(self.router, "pattern", None)
            return f"{request.method} {(pattern and pattern(request.method, request.raw_path)) or 'unrouted'}"
        return "refusal" if isinstance(request, _Refusal) else "continue"

    def feed(self, data: bytes) -> None:
        if data and not self._over:
            self._buf = self._buf + data if self._buf else data

    def next_request(self) -> Request | _Refusal | _Continue | None:
        if self._over:
            return None
        data = self._buf
        if not data:
            return self._continue()
        self._buf = b""
        msg, parser = self._msg, self._parser
        pos, end = 0, len(data)
        piece = b""
        try:
            while pos < end:
                phase = self._phase
                if phase == PHASE_HEAD:
                    stop = head_end(self._tail, data, pos)
                    if stop < 0:
                        stop = end
                    piece = data if pos == 0 and stop == end else data[pos:stop]
                    self._head_size += stop - pos
                    pos = stop
                    try:
                        parser.feed_data(piece)
                        upgrade = False
                    except httptools.HttpParserUpgrade:
                        upgrade = True  # llhttp stops after the head: the request is in
                    if msg.head_done:
                        refusal = self._head_in(upgrade)
                        if refusal is not None:
                            return refusal
                        parser = self._parser  # a new one after an upgrade
                    else:  # more of the head to come (or blank lines before a request: skipped)
                        self._tail = (self._tail + piece)[-2:]
                        if len(self._start) < 64:
                            self._start = (self._start + piece)[:64]
                        if self._head_size > self.max_header_bytes:
                            return self._too_big_head()
                        continue
                elif phase == PHASE_LENGTH:
                    stop = pos + self._remaining
                    if stop > end:
                        stop = end
                    piece = data if pos == 0 and stop == end else data[pos:stop]
                    self._remaining -= stop - pos
                    pos = stop
                    parser.feed_data(piece)
                else:  # PHASE_CHUNKED: line by line, so as not to parse past its end
                    lf = data.find(b"\n", pos)
                    stop = end if lf < 0 else lf + 1
                    piece = data if pos == 0 and stop == end else data[pos:stop]
                    pos = stop
                    parser.feed_data(piece)
                    if msg.size > self.max_body:
                        return self._refuse(413, f"Maximum request body size {self.max_body} exceeded.")
                if msg.complete:
                    if pos < end:
                        self._buf = data[pos:]
                    return self._request()
        except httptools.HttpParserError as e:
            return self._bad(e, piece)
        return self._continue()

    def _head_in(self, upgrade: bool) -> _Refusal | None:
        """Check a request's head, just parsed, and set up the reading of its body."""
        if self._head_size > self.max_header_bytes:
            return self._too_big_head()
        msg, parser = self._msg, self._parser
        method = parser.get_method().decode("ascii")
        if method not in METHODS:
            return self._refuse(400, f"bad HTTP request: unknown method {method!r}")
        version = parser.get_http_version()
        headers = msg.headers
        if msg.repeated_host:
            return self._refuse(400, "bad HTTP request: Found multiple Host: headers")
        if version == "1.1" and "host" not in headers:
            return self._refuse(400, "bad HTTP request: Missing mandatory Host: header")
        coding = headers.get("transfer-encoding")
        if coding is not None and coding.lower() != "chunked":  # llhttp takes "gzip, chunked"
            return self._refuse(501, "bad HTTP request: Only Transfer-Encoding: chunked is supported")
        length = headers.get("content-length")  # llhttp checked it: digits, one value
        if length is not None and int(length) > self.max_body:
            return self._refuse(413, f"Maximum request body size {self.max_body} exceeded (Content-Length {length}).")
        self._method = method
        self._close = version < "1.1" or _has_token(headers.get("connection"), "close")
        if upgrade:
            # declined: a fresh parser goes on (llhttp's would read the rest as another
            # protocol), told the body's framing if there is a body (llhttp skipped it)
            self._parser = parser = httptools.HttpRequestParser(msg)
            if coding is not None or (length is not None and int(length) > 0):
                url, msg.url, msg.headers = msg.url, b"", {}
                parser.feed_data(b"PUT / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"
                                 if coding is not None or length is None  # (length is set where coding is not)
                                 else b"PUT / HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % int(length))
                msg.url, msg.headers, msg.complete = url, headers, False
        if not msg.complete:
            self._expect = version >= "1.1" and _has_token(headers.get("expect"), "100-continue")
            if length is not None:
                self._phase, self._remaining = PHASE_LENGTH, int(length)
            else:
                self._phase = PHASE_CHUNKED
        return None

    def _continue(self) -> _Continue | None:
        """A 100 Continue if the client waits for one to send the body, once."""
        if self._expect and not self._continued and self._msg.size == 0:
            self._continued = True
            return _CONTINUE
        return None

    def _request(self) -> Request:
        msg = self._msg
        raw_path, raw_query = _split_target(msg.url.decode("latin-1"))  # llhttp 9 allows ASCII only
        request = Request(self._method, unquote(raw_path) if "%" in raw_path else raw_path,
                          _query(raw_query) if raw_query else {}, msg.headers,
                          msg.take_body() if msg.body else b"", None, raw_path)
        msg.reset()
        self._phase, self._head_size, self._tail, self._start = PHASE_HEAD, 0, b"", b""
        self._expect = self._continued = False
        return request

    def _bad(self, e: httptools.HttpParserError, piece: bytes) -> _Refusal:
        reason = str(e)
        if isinstance(e, httptools.HttpParserInvalidMethodError):
            method, space, _ = (self._start + piece).lstrip(b"\r\n").partition(b" ")
            if space and _TOKEN.fullmatch(method):
                return self._refuse(400, f"bad HTTP request: unknown method {method.decode('ascii')!r}")
        elif "`Transfer-Encoding`" in reason:  # a coding llhttp does not take, or two of them
            return self._refuse(501, f"bad HTTP request: {reason}")
        return self._refuse(400, f"bad HTTP request: {reason}")

    def _too_big_head(self) -> _Refusal:
        return self._refuse(431, f"bad HTTP request: a header section over {self.max_header_bytes} bytes")

    def _refuse(self, status: int, reason: str) -> _Refusal:
        self._over = True
        self._buf = b""
        log.info("refused a request: %s %s", status, reason)
        return _Refusal(status, reason)

    async def handle(self, request: Request | _Refusal | _Continue, send: Send) -> bool:
        if type(request) is Request:
            response = await self.router.dispatch(request)
            close = self._close
            await send(encode_response(response, close, request.method == "HEAD"))
            if close:
                self._over = True
                return False
            return True
        if request is _CONTINUE:
            await send(_CONTINUE_BYTES)
            return True
        assert isinstance(request, _Refusal)
        await send(encode_response(error(request.status, request.reason), close=True))
        return False

    def lost(self) -> None:
        self._over = True
        self._buf = b""
        self._msg.reset()
