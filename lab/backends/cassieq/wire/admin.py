"""CassieQ's admin API (spec §2.1), sans-IO: accounts, keys, signed query claims and the
debug views, under ``/admin/api/v1``. Like the original's admin port it has no
authentication: bind it to loopback (``lab serve cassieq --admin-port``).

A deletion of an account also deletes its queues, as the original does (there in a
background pool whose errors were swallowed; here before the reply, each failure logged).

A name in the path that breaks the names rule is a 400, as the original's parameter
validation answers (spec §1), before any lookup; a bad name in a JSON body is a 422. No
client input is a 500: the permissions' times must be ISO text inside the calendar, and a
debug bucket number a 64-bit one.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from lab.backends.cassieq.core.accounts import AccountNotFound, Accounts
from lab.backends.cassieq.core.auth import AuthorizationLevel, format_iso, levels_of, parse_iso, sign_query
from lab.backends.cassieq.core.errors import CassieQError, Conflict, InvalidName, NotFound
from lab.backends.cassieq.core.model import valid_name
from lab.backends.cassieq.core.queue_data import QueueData
from lab.backends.cassieq.core.queues import Queues
from lab.backends.cassieq.core.store import CassStore, StoreError
from lab.backends.cassieq.wire.api import LONG_RANGE, WHOLE, entity, json_body, parse_json, refusal
from lab.design.runtime import Runtime
from lab.design.http import Request, Response
from lab.design.http_router import Router

log = logging.getLogger(__name__)

ADMIN = "/admin/api/v1"
DEBUG = ADMIN + "/debug/accounts/{accountName}/queues"
#: the path parameters that are names, and what the names rule calls them
PATH_NAMES = {"accountName": "account name", "keyName": "key name", "queueName": "queue name"}


class BadEntity(Exception):
    """A request body the original's entity validation refuses (422)."""


def _json(request: Request) -> Any:
    try:
        return parse_json(request.body)
    except ValueError:
        raise BadEntity("the body must be JSON") from None


class AdminApi:
    """The admin API of one node."""

    def __init__(self, rt: Runtime, store: CassStore, accounts: Accounts):
        self.rt, self.store, self.accounts = rt, store, accounts

    def guarded(self, operation: str, handler: Callable[[Request], Awaitable[Response]]):
        async def run(request: Request) -> Response:
            for param, what in PATH_NAMES.items():
                if param in request.params:
                    try:
                        valid_name(request.params[param], what)
                    except InvalidName as e:
                        return entity(400, "Error", operation, str(e))
            try:
                return await handler(request)
            except (BadEntity, InvalidName) as e:
                return entity(422, "Error", operation, str(e))
            except NotFound as e:
                return refusal(e, 404)
            except Conflict as e:
                return refusal(e, 409)
            except CassieQError as e:
                return refusal(e, 409)
            except StoreError as e:
                return entity(503, "Error", operation, f"the store is unavailable: {e}")

        return run

    # -- accounts and keys ------------------------------------------------------------------------

    async def create_account(self, request: Request) -> Response:
        name = _json(request)
        if not isinstance(name, str):
            raise BadEntity('the body must be the account name as a JSON string, e.g. "acme"')
        return json_body((await self.accounts.create(name)).to_json(), 201)

    async def list_accounts(self, request: Request) -> Response:
        return json_body([a.to_json() for a in await self.accounts.list()])

    async def get_account(self, request: Request) -> Response:
        name = request.params["accountName"]
        account = await self.accounts.get(name)
        if account is None:
            raise AccountNotFound(name.strip())  # the original's entity names operation DeleteAccount
        return json_body(account.to_json())

    async def delete_account(self, request: Request) -> Response:
        name = request.params["accountName"]
        await self.accounts.delete(name)
        queues = Queues(self.store, self.rt, valid_name(name, "account name"))
        for queue in await queues.names():
            try:
                await queues.delete(queue)
            except (CassieQError, StoreError) as e:
                log.warning("deleting account %s: queue %s: %s", name, queue, e)
        return Response(204)

    async def add_key(self, request: Request) -> Response:
        body = _json(request)
        if not isinstance(body, dict) or not isinstance(body.get("keyName"), str):
            raise BadEntity('the body must be {"keyName": "<name>"}')
        key = await self.accounts.add_key(request.params["accountName"], body["keyName"])
        return json_body(key, 201)

    async def delete_key(self, request: Request) -> Response:
        await self.accounts.delete_key(request.params["accountName"], request.params["keyName"])
        return Response(204)

    # -- permissions --------------------------------------------------------------------------------

    async def supported_levels(self, request: Request) -> Response:
        return json_body([{"level": level.level_name, "shortForm": level.short_form} for level in AuthorizationLevel])

    async def create_permissions(self, request: Request) -> Response:
        body = _json(request)
        if not isinstance(body, dict):
            raise BadEntity("the body must be a JSON object: accountName, keyName, levels[, startTime, endTime, queueName]")
        account, key_name, levels = body.get("accountName"), body.get("keyName"), body.get("levels")
        if not isinstance(account, str) or not isinstance(key_name, str):
            raise BadEntity("accountName and keyName are required strings")
        if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
            raise BadEntity('levels must be a list of level names or short forms, e.g. ["r", "PutMessage"]')
        granted = levels_of(levels)
        start, end = _time(body, "startTime"), _time(body, "endTime")
        queue = body.get("queueName")
        if queue is not None:
            queue = valid_name(queue, "queue name")
        key = await self.accounts.signing_key(account, key_name)
        return json_body({"queryParam": sign_query(account.strip(), key, granted, queue, start, end)}, 201)

    # -- debug ---------------------------------------------------------------------------------------

    async def _data(self, request: Request) -> QueueData:
        account, name = request.params["accountName"], request.params["queueName"]
        definition = await Queues(self.store, self.rt, valid_name(account, "account name")).get_any(name)
        if definition is None:
            raise NotFound.queue("debug", name)
        return QueueData.of(self.store, self.rt, definition)

    async def debug_queues(self, request: Request) -> Response:
        queues = Queues(self.store, self.rt, valid_name(request.params["accountName"], "account name"))
        return json_body([d.to_json() for d in await queues.list()])

    async def debug_pointers(self, request: Request) -> Response:
        data = await self._data(request)
        return json_body({"currentInvisibilityPointer": await data.invis_pointer(),
                          "currentReaderBucket": await data.reader_bucket(),
                          "currentRepairBucket": await data.repair_bucket()})

    async def debug_monoton(self, request: Request) -> Response:
        return json_body({"value": await (await self._data(request)).current_monoton()})

    async def debug_bucket(self, request: Request) -> Response:
        data = await self._data(request)
        raw = request.params["bucket"]
        bucket = await data.reader_bucket() if raw == "current" else _whole(raw)
        return json_body([_message_json(m) for m in await data.bucket(bucket)])

    def add_routes(self, router: Router) -> None:
        for method, path, operation, handler in (
            ("POST", ADMIN + "/accounts", "CreateAccount", self.create_account),
            ("GET", ADMIN + "/accounts", "GetAccounts", self.list_accounts),
            ("GET", ADMIN + "/accounts/{accountName}", "GetAccount", self.get_account),
            ("DELETE", ADMIN + "/accounts/{accountName}", "DeleteAccount", self.delete_account),
            ("POST", ADMIN + "/accounts/{accountName}/keys", "AddNewAccountKey", self.add_key),
            ("DELETE", ADMIN + "/accounts/{accountName}/keys/{keyName}", "DeleteAccountKey", self.delete_key),
            ("GET", ADMIN + "/permissions/supportedAuthorizationLevels", "GetLevels", self.supported_levels),
            ("POST", ADMIN + "/permissions", "GenerateQueryAuth", self.create_permissions),
            ("GET", DEBUG, "debug", self.debug_queues),
            ("GET", DEBUG + "/{queueName}/pointers", "debug", self.debug_pointers),
            ("GET", DEBUG + "/{queueName}/monotons/current", "debug", self.debug_monoton),
            ("GET", DEBUG + "/{queueName}/buckets/{bucket}/messages", "debug", self.debug_bucket),
        ):
            router.add(method, path, self.guarded(operation, handler))


def _whole(raw: str) -> int:
    if not WHOLE.fullmatch(raw) or int(raw) not in LONG_RANGE:
        raise BadEntity(f"bucket {raw[:40]!r}: use a 64-bit whole number or current")
    return int(raw)


def _time(body: dict[str, Any], field: str) -> int | None:
    """A permission's start or end time (epoch ms), None when absent; ``BadEntity`` unless it
    is ISO-8601 text whose instant the claim can be written with (``format_iso``)."""
    text = body.get(field)
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise BadEntity(f"{field} must be ISO-8601 text such as 2016-04-25T16:46:52Z, got {text!r}")
    try:
        moment = parse_iso(text)
        format_iso(moment)  # an offset can carry year 1 or 9999 outside the calendar
    except (ValueError, OverflowError) as e:
        raise BadEntity(f"{field} {text!r}: {e}") from None
    return moment


def _message_json(message: Any) -> dict[str, Any]:
    return {"index": message.index, "version": message.version, "acked": message.acked,
            "deliveryCount": message.delivery_count, "tag": message.tag, "message": message.body,
            "nextVisibleOn": message.next_visible_on}

