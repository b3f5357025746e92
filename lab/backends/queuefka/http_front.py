"""Queuefka's HTTP front (the original's to-do: a "curl put/get reverse-proxy-able microservice").

A thin aiohttp layer over ``QueuefkaCore`` on the live Runtime; it only turns requests
into core calls and errors into status codes:

    POST /topics/{t}/messages                 body = payload         -> 201 {"address": a}
    GET  /topics/{t}/messages?group=G&max=N[&wait=S][&mode=at-most-once]
                                                                      -> 200 {"records": [{"address", "payload"}], "next": n}
         (payloads base64; with &format=raw and max=1: the payload as the body,
          addresses in Queuefka-Address / Queuefka-Next headers, 204 if none)
    POST /topics/{t}/groups/{g}/commit        {"address": n}          -> 200 {"committed": n}
    PUT  /topics/{t}/groups/{g}               [{"start": "beginning" | "end" | n}]
                                                                      -> 201 {"committed": n}; 409 if it exists
    DELETE /topics/{t}/groups/{g}                                     -> 200 {"deleted": g}; 404 if none
    GET  /topics/{t}                                                  -> 200 stats
    GET  /topics                                                      -> 200 {"topics": [...]}

A topic is created by its first message; reading, committing to or creating a group in a
topic that does not exist is a 404. A group is created by its first commit (an at-most-once
read commits) or by PUT; a read alone creates nothing. Every error, whatever its status,
is {"error": reason} (``http_errors``); nothing is written for a refused request.

A connection must deliver a request's line and headers within ``header_timeout`` seconds
of opening, or of the previous response, or it is closed (slowloris): aiohttp's idle
keep-alive timer does this, since it runs until the next request's headers are complete
(and not while a handler runs, so a long-polling GET is not cut).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Awaitable, Callable

from aiohttp import web

from lab.backends.queuefka.core.broker import MAX_FETCH, BadRequest, GroupExists, QueuefkaCore, UnknownGroup, UnknownTopic
from lab.backends.queuefka.core.framing import DEFAULT_MAX_RECORD
from lab.backends.queuefka.http_errors import JsonErrorRunner, error as _error, json_errors

CORE = web.AppKey("core", QueuefkaCore)
MAX_WAIT = 60.0
HEADER_TIMEOUT = 10.0  # seconds; also how long an idle keep-alive connection is kept


def _query_number(request: web.Request, key: str, kind: type, default: Any, low: Any, high: Any) -> Any:
    raw = request.query.get(key)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise BadRequest(f"{key}={raw!r} is not a number") from None
    if not low <= value <= high:
        raise BadRequest(f"{key}={raw}: use {low} to {high}")
    return value


def _guarded(handler: Callable[[QueuefkaCore, web.Request], Awaitable[web.StreamResponse]]):
    """Map the core's refusals to 4xx; anything else is the server's fault (500)."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request.app[CORE], request)
        except (UnknownTopic, UnknownGroup) as e:
            return _error(404, str(e))
        except GroupExists as e:
            return _error(409, str(e))
        except BadRequest as e:
            return _error(400, str(e))

    return wrapped


@_guarded
async def produce(core: QueuefkaCore, request: web.Request) -> web.Response:
    payload = await request.read()
    [address] = await core.produce(request.match_info["topic"], (payload,))
    return web.json_response({"address": address}, status=201)


@_guarded
async def fetch(core: QueuefkaCore, request: web.Request) -> web.Response:
    group = request.query.get("group")
    if not group:
        return _error(400, "group=NAME is required")
    max_count = _query_number(request, "max", int, 1, 1, MAX_FETCH)
    wait = _query_number(request, "wait", float, 0.0, 0.0, MAX_WAIT)
    raw = request.query.get("format", "json")
    if raw not in ("json", "raw"):
        return _error(400, f"format={raw!r}: use json or raw")
    if raw == "raw" and max_count != 1:
        return _error(400, "format=raw returns one record: use max=1")
    fetched = await core.fetch(request.match_info["topic"], group, max_count, wait,
                               request.query.get("mode", "at-least-once"))
    if raw == "raw":
        if not fetched.records:
            return web.Response(status=204, headers={"Queuefka-Next": str(fetched.next)})
        [(address, payload)] = fetched.records
        return web.Response(body=payload, content_type="application/octet-stream",
                            headers={"Queuefka-Address": str(address), "Queuefka-Next": str(fetched.next)})
    records = [{"address": a, "payload": base64.b64encode(p).decode()} for a, p in fetched.records]
    return web.json_response({"records": records, "next": fetched.next})


async def _json_body(request: web.Request, shape: str) -> Any:
    """The request's JSON body (None if empty); ``BadRequest`` naming ``shape`` if it is not JSON."""
    try:
        return json.loads(await request.read() or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest(f"the body must be JSON: {shape}") from None


@_guarded
async def commit(core: QueuefkaCore, request: web.Request) -> web.Response:
    body = await _json_body(request, '{"address": N}')
    address = body.get("address") if isinstance(body, dict) else None
    if not isinstance(address, int) or isinstance(address, bool):
        return _error(400, 'the body must be JSON with an integer address: {"address": N}')
    committed = await core.commit(request.match_info["topic"], request.match_info["group"], address)
    return web.json_response({"committed": committed})


@_guarded
async def create_group(core: QueuefkaCore, request: web.Request) -> web.Response:
    shape = '{"start": "beginning" | "end" | N}, or no body'
    body = await _json_body(request, shape)
    if body is None:
        body = {}
    if not isinstance(body, dict) or set(body) - {"start"}:
        raise BadRequest(f"the body must be {shape}")
    committed = await core.create_group(request.match_info["topic"], request.match_info["group"],
                                        body.get("start", "beginning"))
    return web.json_response({"committed": committed}, status=201)


@_guarded
async def delete_group(core: QueuefkaCore, request: web.Request) -> web.Response:
    await core.delete_group(request.match_info["topic"], request.match_info["group"])
    return web.json_response({"deleted": request.match_info["group"]})


@_guarded
async def topic_stats(core: QueuefkaCore, request: web.Request) -> web.Response:
    return web.json_response(core.stats(request.match_info["topic"]))


@_guarded
async def list_topics(core: QueuefkaCore, request: web.Request) -> web.Response:
    return web.json_response({"topics": core.topic_names()})


def make_app(core: QueuefkaCore, max_payload: int = DEFAULT_MAX_RECORD) -> web.Application:
    app = web.Application(client_max_size=max_payload, middlewares=[json_errors])
    app[CORE] = core
    app.add_routes([
        web.post("/topics/{topic}/messages", produce),
        web.get("/topics/{topic}/messages", fetch),
        web.post("/topics/{topic}/groups/{group}/commit", commit),
        web.put("/topics/{topic}/groups/{group}", create_group),
        web.delete("/topics/{topic}/groups/{group}", delete_group),
        web.get("/topics/{topic}", topic_stats),
        web.get("/topics", list_topics),
    ])
    return app


async def start_http(core: QueuefkaCore, host: str = "127.0.0.1", port: int = 0, *,
                     max_payload: int = DEFAULT_MAX_RECORD,
                     header_timeout: float = HEADER_TIMEOUT) -> tuple[web.AppRunner, int]:
    """Serve ``core`` on ``host:port`` (0: any free port); the runner (for cleanup) and the port."""
    if not header_timeout > 0:
        raise ValueError(f"header timeout {header_timeout}: use a number of seconds > 0")
    runner = JsonErrorRunner(make_app(core, max_payload), access_log=None, keepalive_timeout=header_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]
