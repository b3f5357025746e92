"""The router of the sans-IO HTTP/1.1 server: routes ``(method, pattern)`` to ``async
handler(request) -> Response`` and answers what no handler does.

The router answers every error as ``{"error": reason}``: 404 ``nothing at PATH``, 405
naming the allowed methods (with an ``Allow`` header), 500 ``internal error: Type: message``
for an exception a handler raised (logged; the connection stays usable). A route's pattern
is literal segments and ``{name}`` segments (a whole, non-empty segment each); matching
splits the path on "/", and the ``{name}`` values are percent-decoded. A GET route also
answers HEAD (its headers, no body), as aiohttp does.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote

from lab.design.http import INTERNAL_ERROR, Handler, Request, Response, error

log = logging.getLogger("lab.design.http")  # the wire's one logger, whichever room logs


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
            return error(500, f"{INTERNAL_ERROR} {type(e).__name__}: {e}")
