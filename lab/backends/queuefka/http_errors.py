"""JSON errors on every status for Queuefka's HTTP front.

The front's own refusals are ``{"error": reason}``; this room makes everything else say the
same: aiohttp's 404 (no route), 405 (wrong method) and 413 (body too large) pages, a 500
from an unexpected exception (middleware), and the 400 aiohttp answers by itself when a
request cannot even be parsed (its connection handler, below the application).
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("lab.backends.queuefka")


def error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _reason(request: web.Request, e: web.HTTPException) -> str:
    if isinstance(e, web.HTTPMethodNotAllowed):
        return f"{request.method} is not allowed on {request.path}: use {', '.join(sorted(e.allowed_methods))}"
    if isinstance(e, web.HTTPNotFound):
        return f"nothing at {request.path}"
    return (e.text or e.reason).removeprefix(f"{e.status}: ")


@web.middleware
async def json_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """aiohttp's error pages and unexpected exceptions as ``{"error": reason}``."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        response = error(e.status, _reason(request, e))
        for name, value in e.headers.items():  # e.g. Allow on a 405
            if name not in (hdrs.CONTENT_TYPE, hdrs.CONTENT_LENGTH):
                response.headers[name] = value
        return response
    except Exception as e:
        log.exception("%s %s failed", request.method, request.path)
        return error(500, f"internal error: {type(e).__name__}: {e}")


class _JsonErrorConnection(RequestHandler):
    """aiohttp's connection handler, answering a request it cannot parse in JSON."""

    __slots__ = ()

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        plain = super().handle_error(request, status, exc, message)  # logs; raises if a reply has begun
        response = error(status, f"bad HTTP request: {message}" if status == 400 and message else plain.reason)
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorConnection(self, loop=self._loop, **self._kwargs)


class JsonErrorRunner(web.AppRunner):
    """An ``AppRunner`` whose connections use ``_JsonErrorConnection``."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorServer  # aiohttp has no setting for the connection handler's class
        return server
