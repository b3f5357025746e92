"""HTTP/1.1, sans-IO, on h11: a server connection with a small router, and a client's
request encoder and response reader. No sockets, no clock: a world moves the bytes.

Server: ``HttpServerConnection(router, max_body=..., header_timeout=...)`` implements
``lab.runtime.ServerConnection``. The world feeds it bytes and runs the requests it returns
in order; h11 parses them, and each gets one response, encoded here in one piece, always
with a Content-Length (none on 1xx, 204 and 304).
Keep-alive and pipelining (requests back to back in one feed) work; ``Connection: close``
(or an HTTP/1.0 client) closes the connection after its response. A request that breaks
HTTP (h11's ``RemoteProtocolError``, a method no standard names, a header section over
``max_header_bytes``) or whose body is over ``max_body`` (Content-Length checked before the
body is read, a chunked body as soon as it passes the limit) gets a JSON error and then the
connection closes: ``handle`` returns False. ``Expect: 100-continue`` is answered with a
100 when the body is awaited. The idle timer (``timeout``) is a header timeout: it is not
reset by bytes arriving (``idle_resets_on_data = False``), so the world starts it at
accept and after each response, and a request being handled is never idle.

The router answers every error as ``{"error": reason}``: 404 ``nothing at PATH``, 405
naming the allowed methods (with an ``Allow`` header), 500 ``internal error: Type: message``
for an exception a handler raised (logged; the connection stays usable). A route's pattern
is literal segments and ``{name}`` segments (a whole, non-empty segment each); matching
splits the path on "/", and the ``{name}`` values are percent-decoded. A GET route also
answers HEAD (its headers, no body), as aiohttp does.

Client: ``encode_request(...)`` gives a request's bytes, and a ``ResponseReader`` (one per
request) takes the reply's bytes as they arrive and returns an ``HttpReply`` once the whole
response is in: the pair a design's client passes to ``Connection.exchange``.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, NamedTuple
from urllib.parse import parse_qsl, unquote

import h11

if TYPE_CHECKING:
    from lab.runtime import Send

log = logging.getLogger("lab.wire.http")

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


def _headers(fields: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """h11's header fields (lower-case names) as a dict; a repeated field's values joined by ", "."""
    headers: dict[str, str] = {}
    for name, value in fields:
        key = name.decode("ascii")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


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
    """One HTTP/1.1 connection (``lab.runtime.ServerConnection``) over ``router``.

    h11 parses the requests, one h11 connection per request cycle (a pipelined request's
    bytes move on to the next one), and the responses are encoded here: a handler's whole
    response is one ``send``."""

    idle_resets_on_data = False

    def __init__(self, router: Router, *, max_body: int, header_timeout: float,
                 max_header_bytes: int = MAX_HEADER_BYTES):
        if not header_timeout > 0:
            raise ValueError(f"header timeout {header_timeout}: use a number of seconds > 0")
        self.router = router
        self.max_body = max_body
        self.max_header_bytes = max_header_bytes
        self.timeout: float | None = header_timeout
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=max_header_bytes)
        self._head: h11.Request | None = None  # the request whose body is arriving
        self._fields: dict[str, str] = {}  # its headers
        self._body: list[bytes] = []
        self._size = 0
        self._continued = False  # a 100 Continue was sent for this request
        self._close = False  # this request is the connection's last (Connection: close, HTTP/1.0)
        self._over = False  # refused, or lost: no more requests

    def feed(self, data: bytes) -> None:
        if data and not self._over:  # b"" would be h11's end of input: the world calls lost()
            self._h11.receive_data(data)

    def next_request(self) -> Request | _Refusal | _Continue | None:
        if self._over:
            return None
        conn = self._h11
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                return self._refuse(e.error_status_hint, f"bad HTTP request: {e}")
            kind = type(event)
            if kind is h11.Data:
                self._size += len(event.data)
                if self._size > self.max_body:
                    return self._refuse(413, f"Maximum request body size {self.max_body} exceeded.")
                self._body.append(event.data)
            elif kind is h11.Request:
                refusal = self._start(event)
                if refusal is not None:
                    return refusal
            elif kind is h11.EndOfMessage:
                return self._request()
            elif event is h11.NEED_DATA:
                if self._head is not None and not self._continued and conn.they_are_waiting_for_100_continue:
                    self._continued = True
                    return _CONTINUE
                return None
            elif event is h11.PAUSED:
                return None  # the next pipelined request waits until this one is answered
            else:  # ConnectionClosed: only after an end of input, which feed never passes on
                self._over = True
                return None

    def _start(self, head: h11.Request) -> _Refusal | None:
        method = head.method.decode("ascii")
        if method not in METHODS:
            return self._refuse(400, f"bad HTTP request: unknown method {method!r}")
        headers = _headers(head.headers)
        length = headers.get("content-length")  # h11 checked it: digits, one value
        if length is not None and int(length) > self.max_body:
            return self._refuse(413, f"Maximum request body size {self.max_body} exceeded (Content-Length {length}).")
        self._head, self._fields = head, headers
        return None

    def _request(self) -> Request:
        head, headers, body = self._head, self._fields, self._body
        assert head is not None
        self._head, self._body, self._size, self._continued = None, [], 0, False
        raw_path, raw_query = _split_target(head.target.decode("ascii"))  # h11 allows visible ASCII only
        connection = headers.get("connection")
        self._close = head.http_version < b"1.1" or (
            connection is not None and "close" in (t.strip() for t in connection.lower().split(",")))
        return Request(head.method.decode("ascii"), unquote(raw_path) if "%" in raw_path else raw_path,
                       _query(raw_query) if raw_query else {}, headers,
                       bytes(body[0]) if len(body) == 1 else b"".join(body), None, raw_path)

    def _refuse(self, status: int, reason: str) -> _Refusal:
        self._over = True
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
            # the next cycle: a fresh h11 connection, with the bytes already here after this request
            trailing, _ = self._h11.trailing_data
            self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_header_bytes)
            if trailing:
                self._h11.receive_data(trailing)
            return True
        if request is _CONTINUE:
            await send(_CONTINUE_BYTES)
            return True
        assert isinstance(request, _Refusal)
        await send(encode_response(error(request.status, request.reason), close=True))
        return False

    def lost(self) -> None:
        self._over = True
        self._head, self._body = None, []


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
    """Reads one response with h11: ``reader(chunk)`` returns None until the whole response is
    in, then its ``HttpReply``. ``method`` is the request's (a HEAD's response has no body).
    ``reader(b"")`` says the connection closed (a response with neither Content-Length nor
    chunks ends there). ValueError if the bytes are no HTTP/1.x response or it ends too soon;
    a 1xx response before the real one is skipped."""

    __slots__ = ("_conn", "_method", "_start", "_status", "_headers", "_body")

    def __init__(self, method: str = "GET"):
        self._conn = h11.Connection(h11.CLIENT)
        self._method = method
        self._start = b""  # the first bytes, until the status code is in
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        if method == "HEAD":
            self._request_sent()

    def _request_sent(self) -> None:
        """Put h11's client in the state of a request sent (it reads a response from an idle
        client too, the cheap way, but it needs the request for HEAD and for a 1xx)."""
        self._conn.send(h11.Request(method=self._method, target="/", headers=[("host", "reader")]))
        self._conn.send(h11.EndOfMessage())

    @property
    def trailing(self) -> bytes:
        """Bytes received after the response (a pipelined next response's), unread."""
        return self._start or self._conn.trailing_data[0]

    def __call__(self, chunk: bytes) -> HttpReply | None:
        conn = self._conn
        if self._start is not None:
            start = self._start + chunk
            if len(start) < 12 and chunk:  # "HTTP/1.1 NNN"
                self._start = start
                return None
            self._start = None
            if not start.startswith(b"HTTP/1.") and len(start) >= 7:
                raise ValueError(f"malformed HTTP response: it starts {start[:40]!r}")
            if start[9:10] == b"1" and self._method != "HEAD":
                self._request_sent()
            if start:
                conn.receive_data(start)
            if not chunk:  # the connection closed
                conn.receive_data(b"")
        else:
            try:
                conn.receive_data(chunk)
            except RuntimeError:
                raise ValueError("bytes after the connection closed") from None
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                raise ValueError(f"malformed HTTP response: {e}") from None
            kind = type(event)
            if kind is h11.Data:
                self._body.append(event.data)
            elif kind is h11.Response:
                self._status = event.status_code
                self._headers = _headers(event.headers)
            elif kind is h11.EndOfMessage:
                body = self._body
                return HttpReply(self._status, self._headers, bytes(body[0]) if len(body) == 1 else b"".join(body))
            elif event is h11.NEED_DATA:
                return None
            elif kind is h11.InformationalResponse:
                continue  # 100 Continue: the response follows
            elif kind is h11.ConnectionClosed:
                raise ValueError("the connection closed before a whole response")
            else:  # PAUSED: cannot happen before EndOfMessage
                raise ValueError(f"unexpected HTTP event {event!r}")
