"""CassieQ's queue API (spec §1), sans-IO: routes on ``lab.design.http``'s router over the
core, behind the original's authentication (spec §2.3).

Base path ``/api/v1/accounts/{accountName}/queues``. Authentication runs first (401 with
an empty body), then the endpoint's level (403, empty), then validation and the queue
lookup, as the original's filter does. Refusals carry the original's error entity
``{"reason", "operation", "message"[, "queueName"]}``.

Deliberate fixes over the original (docs/designs/cassieq.md lists them): the list is scoped to the
account; ``dlqName`` given at create reaches the definition; a malformed pop receipt is a
400 and one that names no message a 409 (the original: 500); a second delete racing the
first is a 409 (500); no client input gives a 500. The store being unreachable is a 503:
whether the request applied is unknown. Numbers are bounded where the original's types
were: create options are Java ints (a bigger one is a 422); a lease or a delay is at most
``MAX_SECONDS``, so its deadline fits the store's 64-bit milliseconds (the original
overflowed into a 500); a receipt's numbers fit a Java long (else it is malformed: 400).
"""

from __future__ import annotations

import json
import re
from typing import Any, Awaitable, Callable, Mapping

from lab.backends.cassieq.core.accounts import Accounts
from lab.backends.cassieq.core.auth import (DEFAULT_SKEW_MS, AuthFailure, AuthorizationLevel, authenticate,
                                            authorize)
from lab.backends.cassieq.core.errors import (BadPopReceipt, CassieQError, Conflict, ExistingMonoton,
                                              InvalidName, InvalidOptions, NotFound, QueueAlreadyDeleting)
from lab.backends.cassieq.core.messages import MessageQueue
from lab.backends.cassieq.core.model import PopReceipt, QueueCreateOptions, json_whole, valid_name
from lab.backends.cassieq.core.queues import Queues
from lab.backends.cassieq.core.store import CassStore, StoreError
from lab.design.runtime import Runtime
from lab.design.http import JSON, Request, Response
from lab.design.http_router import Router

BASE = "/api/v1/accounts/{accountName}/queues"
DEFAULT_INVISIBILITY_SECONDS = 30
#: the longest lease or delay, in seconds (about 31,700 years): now + this, in milliseconds,
#: stays far inside the store's signed 64-bit column
MAX_SECONDS = 10**12
#: the create options the original binds to Java ints
INT_OPTIONS = ("bucketSize", "maxDeliveryCount", "repairWorkerPollSeconds", "repairWorkerBucketFinalizeTimeSeconds")
MAX_INT = 2**31 - 1
#: a pop receipt's monoton and version are Java longs
LONG_RANGE = range(-2**63, 2**63)
#: a whole number as the original's query parameters parse it: ASCII digits, an optional sign
#: (Python's int() would also take "5_000", " 5" and other scripts' digits)
WHOLE = re.compile(r"[-+]?[0-9]{1,20}")

L = AuthorizationLevel


def entity(status: int, reason: str, operation: str, message: str, queue: str | None = None) -> Response:
    body: dict[str, Any] = {"reason": reason, "operation": operation, "message": message}
    if queue is not None:
        body["queueName"] = queue
    return Response(status, json.dumps(body).encode(), {"Content-Type": JSON})


def refusal(error: CassieQError, status: int) -> Response:
    return Response(status, json.dumps(error.to_json()).encode(), {"Content-Type": JSON})


def json_body(data: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(data, indent=2).encode(), {"Content-Type": JSON})


def parse_json(body: bytes, empty: str = "null") -> Any:
    """A request body's JSON (``empty`` when there is none). Every way it can fail is a
    ValueError: bad syntax, bad UTF-8, a number past Python's digit limit, and nesting
    deeper than the parser's recursion (a RecursionError otherwise)."""
    try:
        return json.loads(body or empty)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None


class ClientError(Exception):
    """Input the original refuses with a 400 (or a 422 for a bad JSON entity)."""

    def __init__(self, operation: str, message: str, status: int = 400):
        super().__init__(message)
        self.operation, self.message, self.status = operation, message, status


def _whole_query(request: Request, key: str, default: int, operation: str, minimum: int | None = None,
                 maximum: int | None = None) -> int:
    raw = request.query.get(key)
    if raw is None:
        return default
    if not WHOLE.fullmatch(raw):
        raise ClientError(operation, f"{key}={raw[:40]!r} is not a whole number (ASCII digits, at most 20)")
    value = int(raw)
    if minimum is not None and value < minimum:
        raise ClientError(operation, f"{key}={value}: must be {minimum} or more")
    if maximum is not None and value > maximum:
        raise ClientError(operation, f"{key}={value}: must be {maximum} or less")
    return value


def _seconds_query(request: Request, key: str, default: int, operation: str) -> int:
    return _whole_query(request, key, default, operation, minimum=0, maximum=MAX_SECONDS)


def _receipt(request: Request, operation: str) -> str:
    receipt = request.query.get("popReceipt")
    if not receipt:
        raise ClientError(operation, "popReceipt is required")
    return receipt


def _parsed_receipt(receipt: str) -> PopReceipt:
    """The receipt's parts; ``BadPopReceipt`` (a 400) if it does not decode, or names a
    monoton or version no store row can have (the original's Long.parseLong fails there)."""
    parsed = PopReceipt.decode(receipt)
    if parsed.index not in LONG_RANGE or parsed.version not in LONG_RANGE:
        raise BadPopReceipt(f"pop receipt {receipt!r}: its monoton and version must be 64-bit numbers")
    return parsed


def _create_options(body: Any) -> QueueCreateOptions:
    if isinstance(body, Mapping):
        for option in INT_OPTIONS:
            value = body.get(option)
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_INT:
                raise InvalidOptions(f"{option} must be at most {MAX_INT}, got {value}")
    return QueueCreateOptions.from_json(body)


class QueueApi:
    """The queue API of one node: its store, clock and auth settings."""

    def __init__(self, rt: Runtime, store: CassStore, accounts: Accounts, *, skew_ms: int = DEFAULT_SKEW_MS):
        self.rt = rt
        self.store = store
        self.accounts = accounts
        self.skew_ms = skew_ms

    def queues(self, account: str) -> Queues:
        return Queues(self.store, self.rt, account)

    # -- the gate every route passes ---------------------------------------------------------------

    def route(self, level: AuthorizationLevel, operation: str,
              handler: Callable[[Request, str, Queues], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def gated(request: Request) -> Response:
            account = request.params["accountName"]
            try:
                keys = await self.accounts.keys(account) if _plausible(account) else None
            except StoreError as e:
                return entity(503, "Error", operation, f"the store is unavailable: {e}")
            try:
                principal = authenticate(account, keys, request.method, request.raw_path, request.headers,
                                         request.query, request.params.get("queueName"),
                                         int(self.rt.now() * 1000), self.skew_ms)
            except OverflowError:
                # a request time or claim time whose instant, once its offset is applied, lies
                # outside the calendar (year 1 at +23:59): it parses but cannot be signed
                principal = AuthFailure("a time outside the calendar")
            if isinstance(principal, AuthFailure):
                return Response(401)
            if not authorize(principal, level):
                return Response(403)
            try:
                if "queueName" in request.params:
                    valid_name(request.params["queueName"], "queue name")
                return await handler(request, request.params.get("queueName", ""), self.queues(account))
            except ClientError as e:
                return entity(e.status, "Error", e.operation, e.message)
            except (InvalidName, BadPopReceipt) as e:
                return entity(400, "Error", operation, str(e))
            except NotFound as e:
                return refusal(e, 404)
            except (Conflict, QueueAlreadyDeleting) as e:
                return refusal(e, 409)
            except ExistingMonoton as e:
                return refusal(e, 500)  # the store lost a write it acknowledged: not the client's doing
            except StoreError as e:
                return entity(503, "Error", operation, f"the store is unavailable: {e}")

        return gated

    # -- queues ------------------------------------------------------------------------------------

    async def list_queues(self, request: Request, _: str, queues: Queues) -> Response:
        return json_body([d.to_json() for d in await queues.list()])

    async def create_queue(self, request: Request, _: str, queues: Queues) -> Response:
        error_if_exists = request.query.get("errorIfExists", "false").lower()
        if error_if_exists not in ("true", "false"):
            raise ClientError("createQueue", f"errorIfExists={error_if_exists!r}: use true or false")
        try:
            body = parse_json(request.body)
        except ValueError:
            raise ClientError("createQueue", "the body must be JSON queue create options", 422) from None
        try:
            options = _create_options(body)
        except (InvalidName, InvalidOptions, ValueError, TypeError) as e:
            raise ClientError("createQueue", str(e), 422) from None
        outcome = await queues.create(options)
        if outcome.created:
            return Response(201)
        if error_if_exists == "true":
            raise Conflict.queue_exists(options.queue_name)
        return Response(200)

    async def get_queue(self, request: Request, name: str, queues: Queues) -> Response:
        return json_body((await queues.require_active(name, "getQueueDefinition")).to_json())

    async def statistics(self, request: Request, name: str, queues: Queues) -> Response:
        definition = await queues.require_active(name, "getQueueStatistics")
        return json_body({"size": await queues.size(definition)})

    async def delete_queue(self, request: Request, name: str, queues: Queues) -> Response:
        await queues.delete(name)
        return Response(200)

    # -- messages ----------------------------------------------------------------------------------

    async def put(self, request: Request, name: str, queues: Queues) -> Response:
        definition = await queues.require_active(name, "putMessage")
        if "initialInvisiblityTime" in request.query:
            # the original's deprecated alias collides with the default of the new parameter
            raise ClientError("putMessage", "initialInvisiblityTime is deprecated: use initialInvisibilitySeconds")
        delay = _seconds_query(request, "initialInvisibilitySeconds", 0, "putMessage")
        try:
            body = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise ClientError("putMessage", "the message must be UTF-8 text") from None
        await MessageQueue(self.store, self.rt, definition, queues).put(body, delay)
        return Response(201)

    async def get_next(self, request: Request, name: str, queues: Queues) -> Response:
        definition = await queues.require_active(name, "getMessage")
        invisibility = _seconds_query(request, "invisibilityTimeSeconds", DEFAULT_INVISIBILITY_SECONDS, "getMessage")
        delivery = await MessageQueue(self.store, self.rt, definition, queues).get(invisibility)
        return Response(204) if delivery is None else json_body(delivery.to_json())

    async def update(self, request: Request, name: str, queues: Queues) -> Response:
        receipt = _receipt(request, "updateMessage")
        definition = await queues.require_active(name, "updateMessage")
        try:
            body = parse_json(request.body, "{}")
        except ValueError:
            raise ClientError("updateMessage", "the body must be JSON: {\"message\", \"newInvisibilitySeconds\"}",
                              422) from None
        if not isinstance(body, Mapping):
            raise ClientError("updateMessage", "the body must be a JSON object", 422)
        message, seconds = body.get("message"), json_whole(body.get("newInvisibilitySeconds", 0))
        if message is not None and not isinstance(message, str):
            raise ClientError("updateMessage", "message must be a string or null", 422)
        if seconds is None:
            seconds = 0
        if not isinstance(seconds, int) or isinstance(seconds, bool) or not 0 <= seconds <= MAX_SECONDS:
            raise ClientError("updateMessage", f"newInvisibilitySeconds must be a whole number from 0 to {MAX_SECONDS}",
                              422)
        updated = await MessageQueue(self.store, self.rt, definition, queues).update(_parsed_receipt(receipt),
                                                                                     message, seconds)
        return json_body(updated.to_json())

    async def ack(self, request: Request, name: str, queues: Queues) -> Response:
        receipt = _receipt(request, "ackMessage")
        definition = await queues.require_active(name, "ackMessage")
        await MessageQueue(self.store, self.rt, definition, queues).ack(_parsed_receipt(receipt))
        return Response(204)

    # -- the table ---------------------------------------------------------------------------------

    def add_routes(self, router: Router) -> None:
        for method, path, level, operation, handler in self.routes():
            router.add(method, path, self.route(level, operation, handler))

    def routes(self) -> list[tuple[str, str, AuthorizationLevel, str, Any]]:
        q = BASE + "/{queueName}"
        return [
            ("GET", BASE, L.GET_QUEUE_INFORMATION, "getQueues", self.list_queues),
            ("POST", BASE, L.CREATE_QUEUE, "createQueue", self.create_queue),
            ("GET", q, L.GET_QUEUE_INFORMATION, "getQueueDefinition", self.get_queue),
            ("GET", q + "/statistics", L.GET_QUEUE_INFORMATION, "getQueueStatistics", self.statistics),
            ("DELETE", q, L.DELETE_QUEUE, "Delete", self.delete_queue),
            ("POST", q + "/messages", L.PUT_MESSAGE, "putMessage", self.put),
            ("GET", q + "/messages/next", L.READ_MESSAGE, "getMessage", self.get_next),
            ("PUT", q + "/messages", L.UPDATE_MESSAGE, "updateMessage", self.update),
            ("DELETE", q + "/messages", L.ACK_MESSAGE, "ackMessage", self.ack),
        ]


def _plausible(account: str) -> bool:
    """A name the store could hold: anything else has no keys (a 401, as an unknown account)."""
    try:
        valid_name(account, "account name")
        return True
    except InvalidName:
        return False
