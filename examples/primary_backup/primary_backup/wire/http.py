"""`primary_backup`'s HTTP front, sans-IO: routes of the lab's HTTP wire (``lab.design.http*``)
that turn requests into calls of the node (``core/queue.py``) and its answers into status codes.

    POST   /queues/{queue}/messages?id=ID    body = the message        -> 201
                                             (429 if the queue is full; ID makes a retried put a no-op)
    GET    /queues/{queue}/next?wait=S&reliable=1                      -> 200 {"body": base64, "receipt": r}
                                             (receipt null for a plain get); 204 if none came in S seconds
    DELETE /receipts/{receipt}               (ack)                     -> 204; 404 if unknown
    POST   /receipts/{receipt}/release                                 -> 204; 404 if unknown
    GET    /queues/{queue}                                             -> 200 {"length": n}
    GET    /role                                                       -> 200 {"role", "epoch", "primary", ...}

A node that is not primary answers a client request with 421 {"primary": name or null} (it
did nothing: ask that one); one that stepped down after storing the put answers 503
{"maybe": true} (the outcome is unknown: the put went over to the new primary with the
old one's state). A 4xx means "certainly not done".
"""

from __future__ import annotations

import base64
import itertools

from lab.design.http import Request, Response, error, json_response
from lab.design.http_router import Router
from lab.design.http_server import HttpServerConnection
from lab.design.runtime import Accept
from primary_backup.core.queue import Full, Node, NotPrimary

HEADER_TIMEOUT = 10.0  # seconds a connection has to send a request's headers (and to stay idle)
MAX_BODY = 1 << 20  # bytes in one message
MAX_WAIT = 30.0  # the longest a get may wait (a long poll)


def _not_primary(e: NotPrimary) -> Response:
    if e.maybe_applied:
        return json_response({"error": str(e), "maybe": True, "primary": e.primary}, 503)
    return json_response({"error": str(e), "primary": e.primary}, 421)


def routes(node: Node) -> Router:
    """The front's routes over ``node``."""
    router = Router()
    anonymous = itertools.count(1)  # ids for puts that bring none (a plain HTTP client)

    async def put(request: Request) -> Response:
        mid = request.query.get("id") or f"{node.name}-{node.rt.random.getrandbits(32):08x}-{next(anonymous)}"
        try:
            await node.put(request.params["queue"], mid, request.body)
        except Full as e:
            return error(429, str(e))
        except NotPrimary as e:
            return _not_primary(e)
        return Response(201)

    async def get(request: Request) -> Response:
        try:
            wait = min(float(request.query.get("wait", "0")), MAX_WAIT)
        except ValueError:
            return error(400, f"wait={request.query['wait']!r} is not a number of seconds")
        reliable = request.query.get("reliable", "0") == "1"
        try:
            item = await node.get(request.params["queue"], max(wait, 0.0), reliable)
        except NotPrimary as e:
            return _not_primary(e)
        if item is None:
            return Response(204)
        return json_response({"body": base64.b64encode(item.body).decode(), "receipt": item.receipt})

    def settle(verb: str):
        async def handler(request: Request) -> Response:
            try:
                found = await node.settle(request.params["receipt"], verb)
            except NotPrimary as e:
                return _not_primary(e)
            return Response(204) if found else error(404, f"no open message {request.params['receipt']}")
        return handler

    async def stats(request: Request) -> Response:
        return json_response({"length": node.length(request.params["queue"])})

    async def role(request: Request) -> Response:
        return json_response(node.status())

    router.post("/queues/{queue}/messages", put)
    # allow_head=False: a HEAD must not take a message off the queue
    router.add("GET", "/queues/{queue}/next", get, allow_head=False)
    router.delete("/receipts/{receipt}", settle("ack"))
    router.post("/receipts/{receipt}/release", settle("release"))
    router.get("/queues/{queue}", stats)
    router.get("/role", role)
    return router


def accept_http(node: Node, header_timeout: float = HEADER_TIMEOUT) -> Accept:
    """One HTTP connection over the routes per accepted connection."""
    router = routes(node)
    return lambda: HttpServerConnection(router, max_body=MAX_BODY, header_timeout=header_timeout)
