"""Queuefka's HTTP front, sans-IO (the original's to-do: a "curl put/get reverse-proxy-able
microservice"): its routes on ``lab.design.http``'s router, over ``QueuefkaCore``.

It only turns requests into core calls and errors into status codes:

    POST /topics/{t}/messages                 body = payload         -> 201 {"address": a}
    GET  /topics/{t}/messages?group=G&max=N[&wait=S][&mode=at-most-once]
                                                                      -> 200 {"records": [{"address", "payload"}], "next": n}
         (payloads base64; with &format=raw and max=1: the payload as the body,
          addresses in Queuefka-Address / Queuefka-Next headers, 204 if none;
          either way the broker's incarnation in a Queuefka-Epoch header)
    POST /topics/{t}/groups/{g}/commit        {"address": n}          -> 200 {"committed": n}
         (with the fetch's Queuefka-Epoch header: 409 if the node restarted since; 409 too
          for an address past every record handed out — a lost lease: nothing acknowledged)
    PUT  /topics/{t}/groups/{g}               [{"start": "beginning" | "end" | n}]
                                                                      -> 201 {"committed": n}; 409 if it exists
    DELETE /topics/{t}/groups/{g}                                     -> 200 {"deleted": g}; 404 if none
    GET  /topics/{t}                                                  -> 200 stats
    GET  /topics                                                      -> 200 {"topics": [...]}

A topic is created by its first message; reading, committing to or creating a group in a
topic that does not exist is a 404. A group is created by its first commit (an at-most-once
read commits) or by PUT; a read alone creates nothing. Every error, whatever its status,
is {"error": reason}: the front's own refusals, and the wire's 404 (no route), 405 (wrong
method, with Allow), 413 (a body over ``max_payload``), 400 (a request that is not HTTP;
the connection closes) and 500 (an unexpected exception). Nothing is written for a refused
request.

A connection must deliver a request's line and headers within ``header_timeout`` seconds
of opening, or of the previous response, or it is closed (slowloris): the connection's
``timeout``, which the world enforces while no request runs (so a long-polling GET is not
cut) and which bytes trickling in do not reset.

Each connection is one reader session of the core (``core.leases.Session``): the records
a GET hands out at least once are leased to it until a commit acknowledges them, and
handed out again if the connection closes first, or stays idle for the session timeout.
A commit that sends back the GET's ``Queuefka-Epoch`` is refused with a 409 if the node
restarted in between (its leases are gone, and the addresses may hold other records now):
nothing is acknowledged, and the records come back. Send it.

``accept_http(core)`` is what a world's ``net.listen(port, ...)`` takes.
"""

from __future__ import annotations

import base64
import json
from functools import partial
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import (
    MAX_FETCH, BadRequest, GroupExists, LeaseLost, UnknownGroup, UnknownTopic,
)
from lab.backends.queuefka.core.leases import Session
from lab.backends.queuefka.core.framing import DEFAULT_MAX_RECORD
from lab.design.http import Request, Response, error, json_response
from lab.design.http_router import Router
from lab.design.http_server import HttpServerConnection

if TYPE_CHECKING:
    from lab.design.runtime import Accept

MAX_WAIT = 60.0
HEADER_TIMEOUT = 10.0  # seconds; also how long an idle keep-alive connection is kept
_RAW = "application/octet-stream"
EPOCH_HEADER = "Queuefka-Epoch"  # on every fetch's reply; a commit sends it back


def _query_number(request: Request, key: str, kind: type, default: Any, low: Any, high: Any) -> Any:
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


def _json_body(request: Request, shape: str) -> Any:
    """The request's JSON body (None if empty); ``BadRequest`` naming ``shape`` if it is not JSON."""
    try:
        return json.loads(request.body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest(f"the body must be JSON: {shape}") from None


Route = Callable[[QueuefkaCore, Request], Awaitable[Response]]


def _guarded(core: QueuefkaCore, route: Route) -> Callable[[Request], Awaitable[Response]]:
    """Map the core's refusals to 4xx; anything else is the server's fault (the router's 500)."""

    async def handler(request: Request) -> Response:
        try:
            return await route(core, request)
        except (UnknownTopic, UnknownGroup) as e:
            return error(404, str(e))
        except (GroupExists, LeaseLost) as e:
            return error(409, str(e))
        except BadRequest as e:
            return error(400, str(e))

    return handler


async def produce(core: QueuefkaCore, request: Request) -> Response:
    [address] = await core.produce(request.params["topic"], (request.body,))
    return json_response({"address": address}, status=201)


async def fetch(core: QueuefkaCore, request: Request, session: Session | None = None) -> Response:
    query = request.query
    group = query.get("group")
    if not group:
        return error(400, "group=NAME is required")
    max_count = _query_number(request, "max", int, 1, 1, MAX_FETCH)
    wait = _query_number(request, "wait", float, 0.0, 0.0, MAX_WAIT)
    raw = query.get("format", "json")
    if raw not in ("json", "raw"):
        return error(400, f"format={raw!r}: use json or raw")
    if raw == "raw" and max_count != 1:
        return error(400, "format=raw returns one record: use max=1")
    fetched = await core.fetch(request.params["topic"], group, max_count, wait, query.get("mode", "at-least-once"),
                               session=session)
    epoch = {EPOCH_HEADER: str(fetched.epoch)}
    if raw == "raw":
        if not fetched.records:
            return Response(204, b"", {"Queuefka-Next": str(fetched.next), **epoch})
        [(address, payload)] = fetched.records
        return Response(200, payload, {"Content-Type": _RAW, "Queuefka-Address": str(address),
                                       "Queuefka-Next": str(fetched.next), **epoch})
    records = [{"address": a, "payload": base64.b64encode(p).decode()} for a, p in fetched.records]
    return json_response({"records": records, "next": fetched.next}, headers=epoch)


async def commit(core: QueuefkaCore, request: Request, session: Session | None = None) -> Response:
    body = _json_body(request, '{"address": N}')
    address = body.get("address") if isinstance(body, dict) else None
    if not isinstance(address, int) or isinstance(address, bool):
        return error(400, 'the body must be JSON with an integer address: {"address": N}')
    epoch = request.headers.get(EPOCH_HEADER.lower())
    if epoch is not None and not (epoch.isascii() and epoch.isdigit() and len(epoch) <= 20):
        return error(400, f"{EPOCH_HEADER}: {epoch!r} is not an epoch (send back the fetch's)")
    committed = await core.commit(request.params["topic"], request.params["group"], address, session=session,
                                  epoch=None if epoch is None else int(epoch))
    return json_response({"committed": committed})


async def create_group(core: QueuefkaCore, request: Request) -> Response:
    shape = '{"start": "beginning" | "end" | N}, or no body'
    body = _json_body(request, shape)
    if body is None:
        body = {}
    if not isinstance(body, dict) or set(body) - {"start"}:
        raise BadRequest(f"the body must be {shape}")
    committed = await core.create_group(request.params["topic"], request.params["group"],
                                        body.get("start", "beginning"))
    return json_response({"committed": committed}, status=201)


async def delete_group(core: QueuefkaCore, request: Request) -> Response:
    await core.delete_group(request.params["topic"], request.params["group"])
    return json_response({"deleted": request.params["group"]})


async def topic_stats(core: QueuefkaCore, request: Request) -> Response:
    return json_response(core.stats(request.params["topic"]))


async def list_topics(core: QueuefkaCore, request: Request) -> Response:
    return json_response({"topics": core.topic_names()})


ROUTES: tuple[tuple[str, str, Route], ...] = (
    ("POST", "/topics/{topic}/messages", produce),
    ("GET", "/topics/{topic}/messages", fetch),
    ("POST", "/topics/{topic}/groups/{group}/commit", commit),
    ("PUT", "/topics/{topic}/groups/{group}", create_group),
    ("DELETE", "/topics/{topic}/groups/{group}", delete_group),
    ("GET", "/topics/{topic}", topic_stats),
    ("GET", "/topics", list_topics),
)


def make_router(core: QueuefkaCore, session: Session | None = None) -> Router:
    """Queuefka's routes over ``core``; reads and commits in ``session`` (None: the core's
    one session of callers that name none)."""
    router = Router()
    for method, pattern, route in ROUTES:
        if route in (fetch, commit):
            route = partial(route, session=session)
        router.add(method, pattern, _guarded(core, route))
    return router


class _SessionConnection(HttpServerConnection):
    """An HTTP connection that is one reader session: closing it ends the session."""

    def __init__(self, core: QueuefkaCore, **http: Any):
        self.core, self.session = core, core.session()
        super().__init__(make_router(core, self.session), **http)

    def lost(self) -> None:
        super().lost()
        self.core.end_session(self.session)  # what it fetched and did not commit is handed out again


def accept_http(core: QueuefkaCore, *, max_payload: int = DEFAULT_MAX_RECORD,
                header_timeout: float = HEADER_TIMEOUT) -> Accept:
    """A listener's factory: one HTTP connection over ``core`` per accepted connection; a body
    over ``max_payload`` bytes is a 413, headers slower than ``header_timeout`` seconds close it."""
    if not header_timeout > 0:
        raise ValueError(f"header timeout {header_timeout}: use a number of seconds > 0")
    if max_payload < 0:
        raise ValueError(f"max payload {max_payload}: use a number of bytes >= 0")

    def accept() -> HttpServerConnection:
        return _SessionConnection(core, max_body=max_payload, header_timeout=header_timeout)

    return accept
