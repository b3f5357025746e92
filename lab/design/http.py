"""HTTP/1.1, sans-IO, on httptools (llhttp, Node's parser): a server connection with a small
router, and a client's request encoder and response reader. No sockets, no clock: a world
moves the bytes.

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

The router answers every error as ``{"error": reason}``: 404 ``nothing at PATH``, 405
naming the allowed methods (with an ``Allow`` header), 500 ``internal error: Type: message``
for an exception a handler raised (logged; the connection stays usable). A route's pattern
is literal segments and ``{name}`` segments (a whole, non-empty segment each); matching
splits the path on "/", and the ``{name}`` values are percent-decoded. A GET route also
answers HEAD (its headers, no body), as aiohttp does.

Client: ``encode_request(...)`` gives a request's bytes, and a ``ResponseReader`` (one per
request) takes the reply's bytes as they arrive and returns an ``HttpReply`` once the whole
response is in: the pair a design's client passes to ``Connection.exchange``.

llhttp parses a whole buffer at once, messages after messages, and tells no offsets; so
both sides feed it a message's bytes only: its header section up to its first empty line,
a Content-Length body by its length, a chunked body line by line. Thus the bytes after a
message (the next request's, the next response's) stay unparsed, and the header section's
size is known to the byte.
"""

from __future__ import annotations

import json
import logging
import re
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, NamedTuple
from urllib.parse import parse_qsl, unquote

import httptools

if TYPE_CHECKING:
    from lab.design.runtime import Send

log = logging.getLogger("lab.design.http")

JSON = "application/json; charset=utf-8"
#: The methods a request may name (RFC 9110, PATCH, WebDAV's): any other is a 400, as
#: aiohttp's parser answers, not a 404 for a method nobody routes.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
                     "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT",
                     "SEARCH", "PURGE"})
MAX_HEADER_BYTES = 16384
_NO_BODY_STATUS = frozenset({204, 304})  # and every 1xx
_FRAMING = frozenset({"content-length", "transfer-encoding"})  # the connection's, never a handler's
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


# -- requests, responses, the router --------------------------------------------------------

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


def error(status: int, reason: str, headers: Mapping[str, str] | None = None) -> Response:
    """``{"error": reason}`` with ``status``: every error this module answers has that shape."""
    return json_response({"error": reason}, status, headers)


Handler = Callable[[Request], Awaitable[Response]]


class _Route:
    __slots__ = ("pattern", "literals", "names", "methods")

    def __init__(self, pattern: str):
        if not pattern.startswith("/"):
            raise ValueError(f"route {pattern!r}: a pattern starts with '/'")
        segments = pattern[1:].split("/")
        literals, names = [], []
        for i, segment in enumerate(segments):
            if segment.startswith("{") and segment.endswith("}") and len(segment) > 2:
                names.append((i, segment[1:-1]))
            elif "{" in segment or "}" in segment:
                raise ValueError(f"route {pattern!r}: a {{name}} must be a whole segment")
            else:
                literals.append((i, segment))
        self.pattern = pattern
        self.literals = tuple(literals)
        self.names = tuple(names)
        self.methods: dict[str, Handler] = {}

    def match(self, segments: list[str]) -> dict[str, str] | None:
        for i, literal in self.literals:
            if segments[i] != literal:
                return None
        params = {}
        for i, name in self.names:
            value = segments[i]
            if not value:
                return None
            params[name] = unquote(value) if "%" in value else value
        return params


class Router:
    """Routes ``(method, pattern)`` to ``async handler(request) -> Response``."""

    def __init__(self) -> None:
        self._by_length: dict[int, list[_Route]] = {}

    def add(self, method: str, pattern: str, handler: Handler, *, allow_head: bool = True) -> None:
        """Route ``method`` on ``pattern`` ("/topics/{topic}"); a GET route also answers HEAD
        unless ``allow_head`` is False."""
        method = method.upper()
        length = pattern[1:].count("/") + 1
        routes = self._by_length.setdefault(length, [])
        route = next((r for r in routes if r.pattern == pattern), None)
        if route is None:
            route = _Route(pattern)
            routes.append(route)
        if method in route.methods:
            raise ValueError(f"{method} {pattern} is routed twice")
        route.methods[method] = handler
        if method == "GET" and allow_head:
            route.methods.setdefault("HEAD", handler)

    def get(self, pattern: str, handler: Handler) -> None:
        self.add("GET", pattern, handler)

    def post(self, pattern: str, handler: Handler) -> None:
        self.add("POST", pattern, handler)

    def put(self, pattern: str, handler: Handler) -> None:
        self.add("PUT", pattern, handler)

    def delete(self, pattern: str, handler: Handler) -> None:
        self.add("DELETE", pattern, handler)

    def resolve(self, method: str, raw_path: str) -> tuple[Handler | None, dict[str, str] | frozenset[str]]:
        """The handler and ``{name}`` values for ``raw_path`` (not yet percent-decoded); or
        (None, the methods allowed there), an empty set if nothing is routed there."""
        routes = self._by_length.get(raw_path.count("/"))
        allowed: set[str] = set()
        if routes and raw_path[:1] == "/":
            segments = raw_path[1:].split("/")
            for route in routes:
                params = route.match(segments)
                if params is None:
                    continue
                handler = route.methods.get(method)
                if handler is not None:
                    return handler, params
                allowed.update(route.methods)
        return None, frozenset(allowed)

    def pattern(self, method: str, raw_path: str) -> str | None:
        """The pattern of the route that answers ``method`` on ``raw_path``, or None."""
        routes = self._by_length.get(raw_path.count("/"))
        if routes and raw_path[:1] == "/":
            segments = raw_path[1:].split("/")
            for route in routes:
                if method in route.methods and route.match(segments) is not None:
                    return route.pattern
        return None

    async def dispatch(self, request: Request) -> Response:
        """``request``'s response: its handler's, or the router's JSON error (404, 405, 500)."""
        handler, found = self.resolve(request.method, request.raw_path)
        if handler is None:
            if not found:
                return error(404, f"nothing at {request.path}")
            methods = sorted(found)
            return error(405, f"{request.method} is not allowed on {request.path}: use {', '.join(methods)}",
                         {"Allow": ",".join(methods)})
        request.params = found  # type: ignore[assignment]
        try:
            return await handler(request)
        except Exception as e:
            log.exception("%s %s failed", request.method, request.path)
            return error(500, f"internal error: {type(e).__name__}: {e}")


# -- parsing, shared by both sides -----------------------------------------------------------

# what the bytes being fed are: a header section, a Content-Length body, a chunked body, a
# body that runs to the connection's close (a response's only)
_HEAD, _LENGTH, _CHUNKED, _TO_CLOSE = 0, 1, 2, 3
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _head_end(tail: bytes, data: bytes, pos: int) -> int:
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


class _Message:
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


# -- the server connection -------------------------------------------------------------------

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
        self._msg = _Message()
        self._parser = httptools.HttpRequestParser(self._msg)
        self._buf = b""  # bytes not given to the parser yet
        self._phase = _HEAD  # what the parser is reading
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
                if phase == _HEAD:
                    stop = _head_end(self._tail, data, pos)
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
                elif phase == _LENGTH:
                    stop = pos + self._remaining
                    if stop > end:
                        stop = end
                    piece = data if pos == 0 and stop == end else data[pos:stop]
                    self._remaining -= stop - pos
                    pos = stop
                    parser.feed_data(piece)
                else:  # _CHUNKED: line by line, so as not to parse past its end
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
                parser.feed_data(b"PUT / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n" if coding is not None
                                 else b"PUT / HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % int(length))
                msg.url, msg.headers, msg.complete = url, headers, False
        if not msg.complete:
            self._expect = version >= "1.1" and _has_token(headers.get("expect"), "100-continue")
            if length is not None:
                self._phase, self._remaining = _LENGTH, int(length)
            else:
                self._phase = _CHUNKED
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
        self._phase, self._head_size, self._tail, self._start = _HEAD, 0, b"", b""
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


# -- the client side -------------------------------------------------------------------------

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
        self._msg = _Message()
        self._parser = httptools.HttpResponseParser(self._msg)
        self._phase = _HEAD
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
                if phase == _HEAD:
                    stop = _head_end(self._tail, chunk, pos)
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
                        self._phase = _CHUNKED
                    elif length is not None:
                        self._phase, self._remaining = _LENGTH, int(length)
                    else:
                        self._phase = _TO_CLOSE
                elif phase == _LENGTH:
                    stop = pos + self._remaining
                    if stop > end:
                        stop = end
                    piece = chunk if pos == 0 and stop == end else chunk[pos:stop]
                    self._remaining -= stop - pos
                    pos = stop
                    parser.feed_data(piece)
                elif phase == _CHUNKED:  # line by line, so as not to parse past its end
                    lf = chunk.find(b"\n", pos)
                    stop = end if lf < 0 else lf + 1
                    parser.feed_data(chunk if pos == 0 and stop == end else chunk[pos:stop])
                    pos = stop
                else:  # _TO_CLOSE
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
        if self._phase == _TO_CLOSE:
            msg = self._msg
            return HttpReply(self._status, msg.headers, msg.take_body() if msg.body else b"")
        raise ValueError("the connection closed before a whole response")
