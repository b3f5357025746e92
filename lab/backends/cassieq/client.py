"""CassieQ's HTTP clients (httpx): the queue API of spec §1, signed with any of the three
schemes of §2.3, and the admin API of §2.1; a sync and an async flavour of each.

Requests are built once, by the shared ``_*Requests`` classes, and only sent differently,
so the two flavours cannot drift apart. Signing uses ``core.auth``, the code the server
checks with. A non-2xx answer raises ``CassieqError`` with the status and the JSON error
body (``{"reason", "operation", "message"}``; None when there is none, as on 401/403).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Self
from urllib.parse import quote

import httpx

from lab.backends.cassieq.core.auth import AuthorizationLevel, format_iso, sign_request

Scheme = Literal["key", "signed", "query"]
API = "/api/v1"
ADMIN = "/admin/api/v1"

#: QueueCreateOptions' JSON names by their Python names
CREATE_OPTIONS = {
    "bucket_size": "bucketSize",
    "max_delivery_count": "maxDeliveryCount",
    "repair_worker_poll_seconds": "repairWorkerPollSeconds",
    "repair_worker_bucket_finalize_time_seconds": "repairWorkerBucketFinalizeTimeSeconds",
    "delete_buckets_after_finalize": "deleteBucketsAfterFinalize",
    "dlq_name": "dlqName",
}


class CassieqError(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, body: Any, text: str):
        super().__init__(f"{status}: {text or '(no body)'}")
        self.status = status
        self.body = body  # the JSON error entity, or None
        self.text = text


@dataclass(frozen=True)
class Message:
    """A leased message (a get's 200)."""

    pop_receipt: str
    message: str
    delivery_count: int
    message_tag: str


@dataclass(frozen=True)
class Updated:
    """An update's answer: the receipt that now holds the lease."""

    pop_receipt: str
    message_tag: str


@dataclass(frozen=True)
class _Call:
    request: httpx.Request
    decode: Callable[[httpx.Response], Any]


def _segment(name: str) -> str:
    return quote(name, safe="")


def _json(response: httpx.Response) -> Any:
    return response.json()


def _nothing(response: httpx.Response) -> None:
    return None


def _check(response: httpx.Response) -> httpx.Response:
    if response.is_success:
        return response
    text = response.text
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    raise CassieqError(response.status_code, body, text)


class _Closing:
    """``close`` and ``with`` for a client over ``self.http`` (an ``httpx.Client``)."""

    http: httpx.Client

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncClosing:
    """``aclose`` and ``async with`` for a client over ``self.http`` (an ``httpx.AsyncClient``)."""

    http: httpx.AsyncClient

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _QueueRequests:
    """Builds the queue API's requests for one account and credential."""

    def __init__(self, base_url: str, account: str, credential: str, scheme: Scheme | None,
                 clock: Callable[[], float]):
        self.base_url = base_url.rstrip("/")
        self.account = account
        self.credential = credential.lstrip("?&")
        # a query-claims string always carries a signature; a key never has '='
        self.scheme: Scheme = scheme or ("query" if "sig=" in credential else "key")
        if self.scheme not in ("key", "signed", "query"):
            raise ValueError(f"unknown scheme {self.scheme!r}: key, signed or query")
        self.clock = clock

    def _queues(self, *parts: str) -> str:
        return "/".join([f"{API}/accounts/{_segment(self.account)}/queues", *parts])

    def _build(self, http: httpx.Client | httpx.AsyncClient, method: str, path: str, *,
               params: dict[str, Any] | None = None, **body: Any) -> httpx.Request:
        url = httpx.URL(self.base_url + path, params=params or None)
        if self.scheme == "query":
            # the claims go on verbatim, after the call's own parameters
            query = url.query + b"&" if url.query else b""
            url = url.copy_with(query=query + self.credential.encode("ascii"))
        request = http.build_request(method, url, **body)
        if self.scheme == "key":
            request.headers["Authorization"] = f"Key {self.credential}"
        elif self.scheme == "signed":
            now_ms = int(self.clock() * 1000)
            raw_path = request.url.raw_path.decode("ascii")
            request.headers.update(sign_request(self.account, self.credential, method, raw_path, now_ms))
        return request

    def _create_queue(self, http: Any, name: str, error_if_exists: bool, options: dict[str, Any]) -> _Call:
        entity: dict[str, Any] = {"queueName": name}
        for option, value in options.items():
            if option in CREATE_OPTIONS:
                entity[CREATE_OPTIONS[option]] = value
            elif option in CREATE_OPTIONS.values():
                entity[option] = value
            else:
                raise TypeError(f"unknown queue option {option!r}; known: {', '.join(CREATE_OPTIONS)}")
        params = {"errorIfExists": "true"} if error_if_exists else None
        request = self._build(http, "POST", self._queues(), params=params, json=entity)
        # 201 created, 200 it existed already
        return _Call(request, lambda response: response.status_code == 201)

    def _get_queue(self, http: Any, name: str) -> _Call:
        return _Call(self._build(http, "GET", self._queues(_segment(name))), _json)

    def _list_queues(self, http: Any) -> _Call:
        return _Call(self._build(http, "GET", self._queues()), _json)

    def _statistics(self, http: Any, name: str) -> _Call:
        return _Call(self._build(http, "GET", self._queues(_segment(name), "statistics")), _json)

    def _delete_queue(self, http: Any, name: str) -> _Call:
        return _Call(self._build(http, "DELETE", self._queues(_segment(name))), _nothing)

    def _put(self, http: Any, queue: str, body: str | bytes, initial_invisibility: int) -> _Call:
        params = {"initialInvisibilitySeconds": initial_invisibility} if initial_invisibility else None
        content = body.encode("utf-8") if isinstance(body, str) else body
        request = self._build(http, "POST", self._queues(_segment(queue), "messages"), params=params,
                              content=content, headers={"Content-Type": "text/plain; charset=utf-8"})
        return _Call(request, _nothing)

    def _get(self, http: Any, queue: str, invisibility: int) -> _Call:
        request = self._build(http, "GET", self._queues(_segment(queue), "messages", "next"),
                              params={"invisibilityTimeSeconds": invisibility})

        def leased(response: httpx.Response) -> Message | None:
            if response.status_code == 204:
                return None  # nothing visible
            entity = response.json()
            return Message(entity["popReceipt"], entity["message"], entity["deliveryCount"], entity["messageTag"])
        return _Call(request, leased)

    def _ack(self, http: Any, queue: str, pop_receipt: str) -> _Call:
        # a receipt is standard Base64: its '+' and '/' must be escaped (httpx does)
        request = self._build(http, "DELETE", self._queues(_segment(queue), "messages"),
                              params={"popReceipt": pop_receipt})
        return _Call(request, _nothing)

    def _update(self, http: Any, queue: str, pop_receipt: str, message: str | None, new_invisibility: int) -> _Call:
        request = self._build(http, "PUT", self._queues(_segment(queue), "messages"),
                              params={"popReceipt": pop_receipt},
                              json={"message": message, "newInvisibilitySeconds": new_invisibility})

        def updated(response: httpx.Response) -> Updated:
            entity = response.json()
            return Updated(entity["popReceipt"], entity["messageTag"])
        return _Call(request, updated)


class CassieqClient(_QueueRequests, _Closing):
    """The queue API over a blocking httpx client.

    ``credential`` is an account key (``scheme`` "key", the default, or "signed") or a
    query-claims string from the admin's permissions endpoint (scheme "query", chosen by
    itself when the credential carries ``sig=``). ``clock`` (seconds since the epoch) dates
    signed requests. Other keyword arguments go to ``httpx.Client`` (``transport``, ``timeout``...).
    """

    def __init__(self, base_url: str, account: str, credential: str, *, scheme: Scheme | None = None,
                 clock: Callable[[], float] = time.time, **httpx_options: Any):
        super().__init__(base_url, account, credential, scheme, clock)
        self.http = httpx.Client(**httpx_options)

    def _call(self, call: _Call) -> Any:
        return call.decode(_check(self.http.send(call.request)))

    def create_queue(self, name: str, *, error_if_exists: bool = False, **options: Any) -> bool:
        """True if created (201), False if it already existed (200); 409 raised if
        ``error_if_exists``. Options by Python or JSON name (``bucket_size``/``bucketSize``)."""
        return self._call(self._create_queue(self.http, name, error_if_exists, options))

    def get_queue(self, name: str) -> dict[str, Any]:
        return self._call(self._get_queue(self.http, name))

    def list_queues(self) -> list[dict[str, Any]]:
        return self._call(self._list_queues(self.http))

    def statistics(self, name: str) -> dict[str, Any]:
        return self._call(self._statistics(self.http, name))

    def delete_queue(self, name: str) -> None:
        self._call(self._delete_queue(self.http, name))

    def put(self, queue: str, body: str | bytes, initial_invisibility: int = 0) -> None:
        self._call(self._put(self.http, queue, body, initial_invisibility))

    def get(self, queue: str, invisibility: int = 30) -> Message | None:
        """Lease the next message for ``invisibility`` seconds; None when nothing is visible."""
        return self._call(self._get(self.http, queue, invisibility))

    def ack(self, queue: str, pop_receipt: str) -> None:
        self._call(self._ack(self.http, queue, pop_receipt))

    def update(self, queue: str, pop_receipt: str, message: str | None = None,
               new_invisibility: int = 0) -> Updated:
        """Change the text (None keeps it) and the lease (0 gives the message back now)."""
        return self._call(self._update(self.http, queue, pop_receipt, message, new_invisibility))


class AsyncCassieqClient(_QueueRequests, _AsyncClosing):
    """The queue API over ``httpx.AsyncClient``; the same arguments and methods as ``CassieqClient``."""

    def __init__(self, base_url: str, account: str, credential: str, *, scheme: Scheme | None = None,
                 clock: Callable[[], float] = time.time, **httpx_options: Any):
        super().__init__(base_url, account, credential, scheme, clock)
        self.http = httpx.AsyncClient(**httpx_options)

    async def _call(self, call: _Call) -> Any:
        return call.decode(_check(await self.http.send(call.request)))

    async def create_queue(self, name: str, *, error_if_exists: bool = False, **options: Any) -> bool:
        return await self._call(self._create_queue(self.http, name, error_if_exists, options))

    async def get_queue(self, name: str) -> dict[str, Any]:
        return await self._call(self._get_queue(self.http, name))

    async def list_queues(self) -> list[dict[str, Any]]:
        return await self._call(self._list_queues(self.http))

    async def statistics(self, name: str) -> dict[str, Any]:
        return await self._call(self._statistics(self.http, name))

    async def delete_queue(self, name: str) -> None:
        await self._call(self._delete_queue(self.http, name))

    async def put(self, queue: str, body: str | bytes, initial_invisibility: int = 0) -> None:
        await self._call(self._put(self.http, queue, body, initial_invisibility))

    async def get(self, queue: str, invisibility: int = 30) -> Message | None:
        return await self._call(self._get(self.http, queue, invisibility))

    async def ack(self, queue: str, pop_receipt: str) -> None:
        await self._call(self._ack(self.http, queue, pop_receipt))

    async def update(self, queue: str, pop_receipt: str, message: str | None = None,
                     new_invisibility: int = 0) -> Updated:
        return await self._call(self._update(self.http, queue, pop_receipt, message, new_invisibility))


# ---- the admin API (no authentication) ---------------------------------------------------------

def _time_text(moment: int | str | None) -> str | None:
    """An epoch-ms time as the ISO text the admin parses; text is passed on as given."""
    return format_iso(moment) if isinstance(moment, int) else moment


class _AdminRequests:
    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")

    def _build(self, http: Any, method: str, path: str, **body: Any) -> httpx.Request:
        return http.build_request(method, self.base_url + ADMIN + path, **body)

    def _create_account(self, http: Any, name: str) -> _Call:
        # the body is a bare JSON string
        return _Call(self._build(http, "POST", "/accounts", json=name), _json)

    def _get_account(self, http: Any, name: str) -> _Call:
        return _Call(self._build(http, "GET", f"/accounts/{_segment(name)}"), _json)

    def _list_accounts(self, http: Any) -> _Call:
        return _Call(self._build(http, "GET", "/accounts"), _json)

    def _delete_account(self, http: Any, name: str) -> _Call:
        return _Call(self._build(http, "DELETE", f"/accounts/{_segment(name)}"), _nothing)

    def _add_key(self, http: Any, account: str, key_name: str) -> _Call:
        return _Call(self._build(http, "POST", f"/accounts/{_segment(account)}/keys", json={"keyName": key_name}), _json)

    def _delete_key(self, http: Any, account: str, key_name: str) -> _Call:
        path = f"/accounts/{_segment(account)}/keys/{_segment(key_name)}"
        return _Call(self._build(http, "DELETE", path), _nothing)

    def _supported_levels(self, http: Any) -> _Call:
        return _Call(self._build(http, "GET", "/permissions/supportedAuthorizationLevels"), _json)

    def _create_permissions(self, http: Any, account: str, key_name: str,
                            levels: Iterable[AuthorizationLevel | str] | str, queue: str | None,
                            start: int | str | None, end: int | str | None) -> _Call:
        entity: dict[str, Any] = {
            "accountName": account, "keyName": key_name,
            # as given: the server applies the level rules (names or short forms)
            "levels": [level.short_form if isinstance(level, AuthorizationLevel) else level for level in levels],
        }
        for name, value in (("startTime", _time_text(start)), ("endTime", _time_text(end)), ("queueName", queue)):
            if value is not None:
                entity[name] = value
        request = self._build(http, "POST", "/permissions", json=entity)
        return _Call(request, lambda response: response.json()["queryParam"])


class AdminClient(_AdminRequests, _Closing):
    """The admin API (port 8081, unauthenticated) over a blocking httpx client."""

    def __init__(self, base_url: str, **httpx_options: Any):
        super().__init__(base_url)
        self.http = httpx.Client(**httpx_options)

    def _call(self, call: _Call) -> Any:
        return call.decode(_check(self.http.send(call.request)))

    def create_account(self, name: str) -> dict[str, Any]:
        """``{"accountName", "keys": {"primary", "secondary"}}``; 409 if it exists."""
        return self._call(self._create_account(self.http, name))

    def get_account(self, name: str) -> dict[str, Any]:
        return self._call(self._get_account(self.http, name))

    def list_accounts(self) -> list[dict[str, Any]]:
        return self._call(self._list_accounts(self.http))

    def delete_account(self, name: str) -> None:
        self._call(self._delete_account(self.http, name))

    def add_key(self, account: str, key_name: str) -> str:
        """The new key."""
        return self._call(self._add_key(self.http, account, key_name))

    def delete_key(self, account: str, key_name: str) -> None:
        self._call(self._delete_key(self.http, account, key_name))

    def supported_levels(self) -> list[dict[str, str]]:
        return self._call(self._supported_levels(self.http))

    def create_permissions(self, account: str, key_name: str, levels: Iterable[AuthorizationLevel | str] | str,
                           queue: str | None = None, start: int | str | None = None,
                           end: int | str | None = None) -> str:
        """Query claims granting ``levels`` (start/end as epoch ms or ISO text)."""
        return self._call(self._create_permissions(self.http, account, key_name, levels, queue, start, end))


class AsyncAdminClient(_AdminRequests, _AsyncClosing):
    """The admin API over ``httpx.AsyncClient``; the same methods as ``AdminClient``."""

    def __init__(self, base_url: str, **httpx_options: Any):
        super().__init__(base_url)
        self.http = httpx.AsyncClient(**httpx_options)

    async def _call(self, call: _Call) -> Any:
        return call.decode(_check(await self.http.send(call.request)))

    async def create_account(self, name: str) -> dict[str, Any]:
        return await self._call(self._create_account(self.http, name))

    async def get_account(self, name: str) -> dict[str, Any]:
        return await self._call(self._get_account(self.http, name))

    async def list_accounts(self) -> list[dict[str, Any]]:
        return await self._call(self._list_accounts(self.http))

    async def delete_account(self, name: str) -> None:
        await self._call(self._delete_account(self.http, name))

    async def add_key(self, account: str, key_name: str) -> str:
        return await self._call(self._add_key(self.http, account, key_name))

    async def delete_key(self, account: str, key_name: str) -> None:
        await self._call(self._delete_key(self.http, account, key_name))

    async def supported_levels(self) -> list[dict[str, str]]:
        return await self._call(self._supported_levels(self.http))

    async def create_permissions(self, account: str, key_name: str,
                                 levels: Iterable[AuthorizationLevel | str] | str, queue: str | None = None,
                                 start: int | str | None = None, end: int | str | None = None) -> str:
        return await self._call(self._create_permissions(self.http, account, key_name, levels, queue, start, end))
