"""Primer's client API over HTTP, sans-IO: routes on ``lab.design.http``'s router over a
``PrimerNode``.

Every request is checked here before the node is called: a name the node could not store,
bad JSON, a missing or unknown field, a field or query parameter of the wrong type or out
of range is a 400 ``{"error": ...}`` naming it, and nothing is written. The node's own
refusals (``PrimerError``) become their ``status`` with ``{"error": str(e)}``. Payloads
go in as the raw request body and come back base64-encoded in JSON.
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any, Awaitable, Callable, Collection

from lab.backends.primer.core.config import check_name
from lab.backends.primer.core.errors import PrimerError
from lab.backends.primer.core.logs import MAX_READ
from lab.backends.primer.core.primer_node import PrimerNode
from lab.design.http import Request, Response, error, json_response
from lab.design.http_router import Router

MAX_WAIT_S = 60.0  # the longest a get may hold its request open
DEFAULT_MAX_RECORDS = 100
AT_MOST_ONCE, AT_LEAST_ONCE = "at-most-once", "at-least-once"
#: a whole number in a query string: ASCII digits only (int() would take "1_000", " 5", other scripts' digits)
DIGITS = re.compile(r"[0-9]{1,12}")
#: a number of seconds in a query string: plain decimal notation (float() would take "nan", "inf", "1e9")
DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")


class BadInput(Exception):
    """A request the wire refuses before the node sees it: a 400."""


Handler = Callable[[Request], Awaitable[Response]]


# -- reading a request ------------------------------------------------------------------------

def _query(request: Request, allowed: Collection[str]) -> dict[str, str]:
    unknown = sorted(set(request.query) - set(allowed))
    if unknown:
        use = f"use {', '.join(sorted(allowed))}" if allowed else "it takes none"
        raise BadInput(f"unknown query parameter {unknown[0]!r}: {use}")
    return request.query


def _json_object(request: Request, fields: Collection[str]) -> dict[str, Any]:
    """The body as a JSON object holding exactly ``fields``."""
    if not request.body:
        raise BadInput(f"the body must be a JSON object with {', '.join(fields)}")
    try:
        body = json.loads(request.body)
    except RecursionError:
        raise BadInput("the body's JSON is nested too deeply") from None
    except ValueError as e:  # bad syntax, bad UTF-8, a number past the digit limit
        raise BadInput(f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise BadInput(f"the body must be a JSON object, not {_json_type(body)}")
    for name in sorted(body):
        if name not in fields:
            raise BadInput(f"unknown field {name!r}: use {', '.join(fields)}")
    for name in fields:
        if name not in body:
            raise BadInput(f"{name} is missing")
    return body


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _whole(name: str, value: Any, minimum: int) -> int:
    """A JSON whole number >= ``minimum`` (5.0 counts, as JSON Schema's integer; true does not)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"{name} must be a whole number, not {_json_type(value)}")
    if value < minimum:
        raise BadInput(f"{name} {value}: must be {minimum} or more")
    return value


def _seconds(name: str, value: Any) -> float:
    """A JSON number of seconds > 0."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadInput(f"{name} must be a number of seconds, not {_json_type(value)}")
    if not (math.isfinite(value) and value > 0):
        raise BadInput(f"{name} {value}: must be a number of seconds > 0")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BadInput(f"{name} must be a non-empty string, not {_json_type(value)}")
    return value


def _whole_query(query: dict[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = query.get(key)
    if raw is None:
        return default
    if not DIGITS.fullmatch(raw):
        raise BadInput(f"{key}={raw[:40]!r}: use a whole number from {low} to {high}")
    value = int(raw)
    if not low <= value <= high:
        raise BadInput(f"{key}={value}: use a whole number from {low} to {high}")
    return value


def _wait_query(query: dict[str, str]) -> float:
    raw = query.get("wait")
    if raw is None:
        return 0.0
    if not DECIMAL.fullmatch(raw) or float(raw) > MAX_WAIT_S:
        raise BadInput(f"wait={raw[:40]!r}: use a number of seconds from 0 to {MAX_WAIT_S:g}")
    return float(raw)


def _b64(payload: bytes) -> str:
    return base64.b64encode(payload).decode("ascii")


def _group_query(query: dict[str, str]) -> str | None:
    """The ``group`` query parameter, checked as a name, or None."""
    return None if "group" not in query else check_name("group", query["group"])


# -- the API ----------------------------------------------------------------------------------

class PrimerApi:
    """The client API of one node."""

    def __init__(self, node: PrimerNode):
        self.node = node

    def add_routes(self, router: Router) -> None:
        for method, pattern, handler in self.routes():
            router.add(method, pattern, _guarded(handler))

    def routes(self) -> list[tuple[str, str, Handler]]:
        return [
            ("POST", "/queues/{queue}/messages", self.put),
            ("GET", "/queues/{queue}/messages", self.get),
            ("POST", "/queues/{queue}/messages/{id}/ack", self.ack),
            ("POST", "/queues/{queue}/messages/{id}/release", self.release),
            ("GET", "/queues/{queue}", self.queue),
            ("PUT", "/queues/{queue}/groups/{group}", self.add_group),
            ("PUT", "/logs/{log}", self.create_log),
            ("POST", "/logs/{log}/records", self.append),
            ("GET", "/logs/{log}/records", self.read),
            ("POST", "/logs/{log}/groups/{group}/checkpoint", self.checkpoint),
            ("GET", "/cluster", self.cluster),
        ]

    # -- queues

    async def put(self, request: Request) -> Response:
        queue = check_name("queue", request.params["queue"])
        _query(request, ())
        message_id = await self.node.put(queue, request.body)
        return json_response({"id": message_id}, 201)

    async def get(self, request: Request) -> Response:
        queue = check_name("queue", request.params["queue"])
        query = _query(request, ("wait", "mode", "group"))
        wait = _wait_query(query)
        mode = query.get("mode", AT_LEAST_ONCE)
        if mode not in (AT_MOST_ONCE, AT_LEAST_ONCE):
            raise BadInput(f"mode={mode[:40]!r}: use {AT_MOST_ONCE} or {AT_LEAST_ONCE}")
        group = _group_query(query)
        got = await self.node.get(queue, wait, at_most_once=mode == AT_MOST_ONCE, group=group)
        if got is None:
            return Response(204)
        return json_response({"id": got.id, "payload": _b64(got.payload), "receipt": got.receipt})

    async def ack(self, request: Request) -> Response:
        queue, message_id, receipt = self._lease_request(request)
        await self.node.ack(queue, message_id, receipt)
        return Response(204)

    async def release(self, request: Request) -> Response:
        queue, message_id, receipt = self._lease_request(request)
        await self.node.release(queue, message_id, receipt)
        return Response(204)

    def _lease_request(self, request: Request) -> tuple[str, str, str]:
        queue = check_name("queue", request.params["queue"])
        _query(request, ())
        body = _json_object(request, ("receipt",))
        return queue, request.params["id"], _text("receipt", body["receipt"])

    async def queue(self, request: Request) -> Response:
        queue = check_name("queue", request.params["queue"])
        group = _group_query(_query(request, ("group",)))
        body: dict[str, Any] = {"queue": queue, "backlog": self.node.backlog(queue, group)}
        if group is not None:
            body["group"] = group
        return json_response(body)

    async def add_group(self, request: Request) -> Response:
        queue = check_name("queue", request.params["queue"])
        group = check_name("group", request.params["group"])
        _query(request, ())
        if request.body:
            raise BadInput("the request takes no body")
        created = self.node.add_group(queue, group)
        return json_response({"queue": queue, "group": group}, 201 if created else 200)

    # -- logs

    async def create_log(self, request: Request) -> Response:
        log = check_name("log", request.params["log"])
        _query(request, ())
        retention = _seconds("retention_s", _json_object(request, ("retention_s",))["retention_s"])
        created = await self.node.create_log(log, retention)
        return json_response({"log": log, "retention_s": retention}, 201 if created else 200)

    async def append(self, request: Request) -> Response:
        log = check_name("log", request.params["log"])
        _query(request, ())
        return json_response({"offset": await self.node.append(log, request.body)}, 201)

    async def read(self, request: Request) -> Response:
        log = check_name("log", request.params["log"])
        query = _query(request, ("group", "max"))
        if "group" not in query:
            raise BadInput("group is missing: GET /logs/{log}/records?group=G[&max=N]")
        group = check_name("group", query["group"])
        max_records = _whole_query(query, "max", DEFAULT_MAX_RECORDS, 1, MAX_READ)
        records = await self.node.read(log, group, max_records)
        return json_response({"records": [{"offset": r.offset, "payload": _b64(r.payload)} for r in records],
                              "high_watermark": self.node.high_watermark(log)})

    async def checkpoint(self, request: Request) -> Response:
        log = check_name("log", request.params["log"])
        group = check_name("group", request.params["group"])
        _query(request, ())
        offset = _whole("offset", _json_object(request, ("offset",))["offset"], 0)
        await self.node.checkpoint(log, group, offset)
        return Response(204)

    # -- the cluster

    async def cluster(self, request: Request) -> Response:
        _query(request, ())
        return json_response(self.node.cluster())


def _guarded(handler: Handler) -> Handler:
    """``handler`` with the wire's and the node's refusals answered as JSON errors."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except BadInput as e:
            return error(400, str(e))
        except PrimerError as e:
            return error(e.status, str(e))

    return guarded


def api_router(node: PrimerNode) -> Router:
    """A router serving the client API of ``node``."""
    router = Router()
    PrimerApi(node).add_routes(router)
    return router
