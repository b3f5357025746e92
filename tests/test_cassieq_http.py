"""CassieQ over real HTTP: ``lab serve cassieq`` as a process on SQLite (``tests.cassieq_server``),
driven with the sync ``CassieqClient``/``AdminClient`` and with raw httpx where a request
must be one the client would never send.

What is checked: the original's ★ tests of spec §6 that live at the HTTP level or
translate to it; the spec's "worth adding" list; the authentication matrix per scheme
(exactly 401 or 403, with an empty body); the admin API; a table of malformed requests,
each a 4xx with the error entity and never a 500; the list of queues scoped to its
account; two server processes sharing one SQLite file.

One server process serves the module; each test makes its own account, so tests do not
see each other's queues. Leases that must expire use 1 s and a real 1.2 s sleep.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from lab.backends.cassieq.client import AdminClient, CassieqClient, CassieqError
from lab.backends.cassieq.core.auth import sign_query, sign_request
from tests.cassieq_server import CassieqServer, cassieq_server

API = "/api/v1/accounts"
ADMIN = "/admin/api/v1"
FOREIGN_KEY = base64.urlsafe_b64encode(b"\x07" * 64).rstrip(b"=").decode()  # a well-formed key of nobody
HOUR_MS = 3_600_000
LEASE_EXPIRY = 1.2  # seconds to wait for a 1 s lease to lapse


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CassieqServer]:
    with cassieq_server(tmp_path_factory.mktemp("cassieq") / "node") as running:
        yield running


@pytest.fixture(scope="module")
def admin(server: CassieqServer) -> Iterator[AdminClient]:
    with server.admin() as client:
        yield client


@dataclass
class Account:
    """A fresh account on the module's server and ways to call its queue API."""

    server: CassieqServer
    name: str
    keys: dict[str, str]

    @property
    def key(self) -> str:
        return self.keys["primary"]

    def client(self, credential: str | None = None, **options: Any) -> CassieqClient:
        return self.server.client(self.name, credential or self.key, **options)

    def queues_path(self, *parts: str) -> str:
        return "/".join([f"{API}/{self.name}/queues", *parts])

    def key_header(self) -> dict[str, str]:
        return {"Authorization": f"Key {self.key}"}


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def account(server: CassieqServer, admin: AdminClient, request: pytest.FixtureRequest) -> Account:
    # a name after the test (its parameters included), in the names rule
    name = re.sub(r"[^a-zA-Z0-9_.-]+", "-", request.node.name).strip("-")
    created = admin.create_account(name)
    return Account(server, name, created["keys"])


@pytest.fixture
def client(account: Account) -> Iterator[CassieqClient]:
    with account.client() as queue_client:
        yield queue_client


@pytest.fixture(scope="module")
def http(server: CassieqServer) -> Iterator[httpx.Client]:
    with server.http() as raw:
        yield raw


def refusal(call: Callable[[], Any]) -> CassieqError:
    """The error a client call raised (it must raise one)."""
    with pytest.raises(CassieqError) as caught:
        call()
    return caught.value


def assert_entity(error: CassieqError | httpx.Response, status: int, reason: str, operation: str) -> dict:
    """The original's error entity: ``{"reason", "operation", "message"[, ...]}``."""
    if isinstance(error, httpx.Response):
        got_status, body = error.status_code, error.json()
    else:
        got_status, body = error.status, error.body
    assert got_status == status, (got_status, body)
    assert body["reason"] == reason and body["operation"] == operation, body
    assert isinstance(body["message"], str) and body["message"]
    return body


def assert_bare(error: CassieqError | httpx.Response, status: int) -> None:
    """401 and 403 carry nothing at all."""
    if isinstance(error, httpx.Response):
        assert (error.status_code, error.content) == (status, b"")
    else:
        assert (error.status, error.text) == (status, "")


# ---- the original's ★ tests, over HTTP (spec §6) ---------------------------------------------

def test_put_into_deleted_queue_fails(client: CassieqClient):
    assert client.create_queue("q") is True
    client.delete_queue("q")
    body = assert_entity(refusal(lambda: client.put("q", "x")), 404, "NotFound", "putMessage")
    assert body["message"] == "The requested queue 'q' was not found." and body["queueName"] == "q"


def test_initial_invis_respected(client: CassieqClient):
    client.create_queue("q")
    for body, delay in (("0", 0), ("4", 400_000), ("3", 300_000), ("2", 200_000), ("1", 0)):
        client.put("q", body, initial_invisibility=delay)
    got = [client.get("q", invisibility=10_000) for _ in range(5)]
    assert [m.message if m else None for m in got] == ["0", "1", None, None, None]


def test_client_can_create_put_and_ack(account: Account):
    # the original's API tests use signed requests
    with account.client(scheme="signed") as signed:
        assert signed.create_queue("q") is True
        signed.put("q", "hi")
        message = signed.get("q")
        assert message is not None and message.pop_receipt and message.message == "hi"
        assert message.delivery_count == 0 and len(message.message_tag) == 6
        signed.ack("q", message.pop_receipt)
        assert signed.get("q") is None


def test_delete_on_non_existent_queue_fails(client: CassieqClient):
    body = assert_entity(refusal(lambda: client.delete_queue("nope")), 404, "NotFound", "Delete")
    assert body["message"] == "The requested queue 'nope' was not found."


def test_delete_queue_then_the_queue_is_gone_and_the_name_reusable(client: CassieqClient):
    client.create_queue("q")
    client.put("q", "old life")
    old = client.get_queue("q")
    client.delete_queue("q")  # synchronous: the row is gone when it returns
    assert_entity(refusal(lambda: client.get_queue("q")), 404, "NotFound", "getQueueDefinition")
    assert client.create_queue("q") is True
    new = client.get_queue("q")
    assert new["version"] == 0 and new["queueStatsId"] != old["queueStatsId"]  # spec §4.9
    assert client.statistics("q") == {"size": 0} and client.get("q") is None


def test_update_message(client: CassieqClient):
    client.create_queue("q")
    client.put("q", "foo")
    leased = client.get("q")
    updated = client.update("q", leased.pop_receipt, "foo2", 10)
    assert updated.pop_receipt != leased.pop_receipt and updated.message_tag == leased.message_tag
    client.ack("q", updated.pop_receipt)
    assert client.get("q") is None


def test_nack_via_update_redelivers_the_new_body_and_kills_the_old_receipt(client: CassieqClient):
    client.create_queue("q")
    client.put("q", "foo")
    leased = client.get("q")
    client.update("q", leased.pop_receipt, "foo2", 0)
    again = client.get("q")
    assert (again.message, again.delivery_count, again.message_tag) == ("foo2", 1, leased.message_tag)
    assert_entity(refusal(lambda: client.ack("q", leased.pop_receipt)), 409, "Conflict", "AckMessage")
    client.ack("q", again.pop_receipt)


def test_queue_size_grows_and_shrinks(client: CassieqClient):
    client.create_queue("q")
    assert client.statistics("q") == {"size": 0}
    for n in range(1, 4):
        client.put("q", f"m{n}")
        assert client.statistics("q") == {"size": n}
    for n in (2, 1, 0):
        client.ack("q", client.get("q").pop_receipt)
        assert client.statistics("q") == {"size": n}


def test_ack_message_after_version_changed_should_fail(client: CassieqClient):
    client.create_queue("q")
    client.put("q", "m")
    leased = client.get("q")
    renewed = client.update("q", leased.pop_receipt, None, 30)  # the version moves on
    body = assert_entity(refusal(lambda: client.ack("q", leased.pop_receipt)), 409, "Conflict", "AckMessage")
    assert body["message"] == "The message is already being reprocessed."
    assert client.statistics("q") == {"size": 1}  # the row stayed unacked
    stale = assert_entity(refusal(lambda: client.update("q", leased.pop_receipt, "x", 0)), 409, "Conflict",
                          "UpdateMessage")
    assert stale["message"] == "Pop receipt is stale."
    client.ack("q", renewed.pop_receipt)
    assert client.statistics("q") == {"size": 0}


def test_dead_letter_messages_should_be_republished_to_dlq(client: CassieqClient):
    # a deliberate fix: the original's HTTP create never copied dlqName into the definition
    client.create_queue("dlq")
    client.create_queue("q", max_delivery_count=2, dlq_name="dlq")
    assert client.get_queue("q")["dlqName"] == "dlq"
    client.put("q", "poison")
    counts = [client.get("q", invisibility=0).delivery_count for _ in range(2)]
    assert counts == [0, 1]
    assert client.get("q", invisibility=0) is None  # the third delivery goes to the DLQ instead
    assert client.statistics("q") == {"size": 0} and client.statistics("dlq") == {"size": 1}
    copy = client.get("dlq")
    assert (copy.message, copy.delivery_count) == ("poison", 0)
    assert client.get("q", invisibility=0) is None  # never again on the queue


def test_delivery_count_increases_after_message_expires_and_is_redelivered(client: CassieqClient):
    client.create_queue("q")
    client.put("q", "m")
    first = client.get("q", invisibility=1)
    assert first.delivery_count == 0
    assert client.get("q") is None  # leased
    time.sleep(LEASE_EXPIRY)
    again = client.get("q", invisibility=30)
    assert (again.message, again.delivery_count, again.message_tag) == ("m", 1, first.message_tag)
    # worth adding: after a re-lease, the expired holder's receipt is stale
    assert_entity(refusal(lambda: client.ack("q", first.pop_receipt)), 409, "Conflict", "AckMessage")
    client.ack("q", again.pop_receipt)


# ---- worth adding (spec §6's list) ----------------------------------------------------------------

def test_expired_lease_still_acks_when_nobody_re_leased(client: CassieqClient):
    client.create_queue("q")
    client.put("q", "m")
    leased = client.get("q", invisibility=1)
    time.sleep(LEASE_EXPIRY)
    client.ack("q", leased.pop_receipt)  # 204: an expired lease is not an error
    assert client.get("q") is None and client.statistics("q") == {"size": 0}


def test_an_unencoded_plus_in_a_receipt_is_a_400_never_a_500(account: Account, http: httpx.Client):
    with account.client() as client:
        client.create_queue("q")
        client.put("q", "m")
        leased = client.get("q")
    # Real receipts are Base64 of ASCII "<monoton>:<version>:<tag>", and ASCII of the Base64
    # alphabet never encodes to '+' or '/'. A '~' closing a group of three bytes encodes to
    # '+': a well-formed receipt for the leased row, with a tag that is not the row's.
    index, version, _tag = base64.b64decode(leased.pop_receipt + "==").decode().split(":")
    text = f"{index}:{version}:a"
    text += "a" * ((2 - len(text)) % 3) + "~"
    receipt = base64.b64encode(text.encode()).decode().rstrip("=")
    assert "+" in receipt
    path = account.queues_path("q", "messages")
    raw = http.delete(f"{path}?popReceipt={receipt}", headers=account.key_header())  # '+' arrives as ' '
    body = assert_entity(raw, 400, "Error", "ackMessage")
    assert "URL-encode" in body["message"]
    encoded = http.delete(f"{path}?popReceipt={quote(receipt, safe='')}", headers=account.key_header())
    assert_entity(encoded, 409, "Conflict", "AckMessage")  # decoded fine; the tag is not the row's
    raw_update = http.put(f"{path}?popReceipt={receipt}", headers=account.key_header(),
                          json={"message": None, "newInvisibilitySeconds": 0})
    assert_entity(raw_update, 400, "Error", "updateMessage")


def test_error_if_exists(client: CassieqClient, account: Account, http: httpx.Client):
    assert client.create_queue("q") is True
    assert client.create_queue("q") is False  # 200: it is there already
    body = assert_entity(refusal(lambda: client.create_queue("q", error_if_exists=True)), 409, "Conflict",
                         "CreateQueue")
    assert body["message"] == "A queue named 'q' already exists."
    first = http.post(account.queues_path(), headers=account.key_header(), json={"queueName": "r"},
                      params={"errorIfExists": "true"})
    assert (first.status_code, first.content) == (201, b"")


def test_statistics_and_queue_definition(client: CassieqClient):
    client.create_queue("q", bucket_size=3, max_delivery_count=7)
    definition = client.get_queue("q")
    assert definition["status"] == "Active" and definition["bucketSize"] == 3
    assert definition["maxDeliveryCount"] == 7 and definition["dlqName"] is None
    assert definition["id"] == f"{definition['accountName']}:q_v0"
    assert client.statistics("q") == {"size": 0}
    assert_entity(refusal(lambda: client.statistics("nope")), 404, "NotFound", "getQueueStatistics")


def test_key_header_scheme(account: Account, http: httpx.Client):
    with account.client() as client:
        client.create_queue("q")
    path = account.queues_path("q")
    for scheme in ("Key", "key", "KEY"):
        assert http.get(path, headers={"Authorization": f"{scheme} {account.key}"}).status_code == 200
    assert http.get(path, headers={"Authorization": f"Key {account.keys['secondary']}"}).status_code == 200
    assert_bare(http.get(path, headers={"Authorization": f"Key: {account.key}"}), 401)  # the README's form
    assert_bare(http.get(path), 401)  # no credentials at all
    # a header that parses wins over junk query claims
    assert http.get(path + "?sig=junk&auth=r", headers=account.key_header()).status_code == 200


def test_signed_request_time_missing_or_stale(account: Account, http: httpx.Client):
    with account.client() as client:
        client.create_queue("q")
    path = account.queues_path("q")
    assert http.get(path, headers=sign_request(account.name, account.key, "GET", path, now_ms())).status_code == 200
    # signed for the epoch, sent without a time: the signature matches, the time (the epoch) does not
    headers = sign_request(account.name, account.key, "GET", path, 0)
    del headers["x-cassieq-request-time"]
    assert_bare(http.get(path, headers=headers), 401)
    for off in (-HOUR_MS, HOUR_MS, -10_000):
        assert_bare(http.get(path, headers=sign_request(account.name, account.key, "GET", path, now_ms() + off)), 401)
    garbled = {**sign_request(account.name, account.key, "GET", path, now_ms()), "x-cassieq-request-time": "now"}
    assert_bare(http.get(path, headers=garbled), 401)


def test_when_making_requests_outside_the_allowed_skew_they_should_be_unauthed(account: Account):
    with account.client(scheme="signed", clock=lambda: time.time() - 3600) as behind:
        assert_bare(refusal(lambda: behind.create_queue("q")), 401)
    with account.client(scheme="signed") as correct:
        assert correct.create_queue("q") is True


def test_a_queue_restricted_url_cannot_create_or_list_queues(account: Account, admin: AdminClient):
    restricted = admin.create_permissions(account.name, "primary", ["c", "g"], queue="q")
    with account.client(restricted) as client:
        assert_bare(refusal(lambda: client.create_queue("q")), 401)  # no {queueName} to match
        assert_bare(refusal(lambda: client.list_queues()), 401)
    with account.client(admin.create_permissions(account.name, "primary", ["c"])) as unrestricted:
        assert unrestricted.create_queue("q") is True


def test_the_deprecated_parameter_is_a_400(account: Account, http: httpx.Client):
    with account.client() as client:
        client.create_queue("q")
        path = account.queues_path("q", "messages")
        for query in ("initialInvisiblityTime=5", "initialInvisiblityTime=5&initialInvisibilitySeconds=5"):
            assert_entity(http.post(f"{path}?{query}", content=b"m", headers=account.key_header()), 400, "Error",
                          "putMessage")
        assert client.statistics("q") == {"size": 0}  # nothing was put
        client.put("q", "m", initial_invisibility=1)  # the new name works
        assert client.statistics("q") == {"size": 1}


# ---- the authentication matrix, per scheme ------------------------------------------------------

def _key_case(account: Account, admin: AdminClient, situation: str) -> CassieqClient:
    if situation == "wrong key":
        return account.client(FOREIGN_KEY, scheme="key")
    if situation == "tampered":
        flipped = account.key[:-1] + ("A" if account.key[-1] != "A" else "B")
        return account.client(flipped, scheme="key")
    return account.client(scheme="key")


def _signed_case(account: Account, admin: AdminClient, situation: str) -> CassieqClient:
    if situation == "wrong key":
        return account.client(FOREIGN_KEY, scheme="signed")
    if situation == "expired":
        return account.client(scheme="signed", clock=lambda: time.time() - 3600)
    return account.client(scheme="signed")


def _query_case(account: Account, admin: AdminClient, situation: str) -> CassieqClient:
    levels, queue, start, end = ["g"], None, None, None
    if situation == "wrong queue":
        queue = "other"
    elif situation == "missing level":
        levels = ["r", "p", "u", "a", "c", "d"]  # everything but GetQueueInformation
    elif situation == "expired":
        end = now_ms() - HOUR_MS
    elif situation == "not yet valid":
        start = now_ms() + HOUR_MS
    elif situation == "ok":
        queue, end = "q", now_ms() + 5 * 24 * HOUR_MS  # test_query_auth_authenticates_with_end_time
    if situation == "wrong key":
        claims = sign_query(account.name, FOREIGN_KEY, levels)
    else:
        claims = admin.create_permissions(account.name, "primary", levels, queue=queue, start=start, end=end)
    if situation == "tampered":
        claims = claims.replace("auth=g", "auth=gc")  # a level added after signing
        assert "auth=gc" in claims
    return account.client(claims)


CASES = {"key": _key_case, "signed": _signed_case, "query": _query_case}
#: the original's ★ auth tests among the rows: query/missing level (test_query_auth_authenticates),
#: signed/expired (..._outside_the_allowed_skew_...), query/wrong queue (test_query_auth_restricts_queue),
#: query/expired (test_query_auth_expires_with_end_time), */revoked (test_revoked_key_prevents_authentiation),
#: query/tampered (test_query_auth_prevents_invalid_authentiation)
MATRIX = [
    ("key", "ok", 200), ("key", "wrong key", 401), ("key", "tampered", 401), ("key", "revoked", 401),
    ("signed", "ok", 200), ("signed", "wrong key", 401), ("signed", "tampered", 401), ("signed", "expired", 401),
    ("signed", "revoked", 401),
    ("query", "ok", 200), ("query", "wrong key", 401), ("query", "tampered", 401), ("query", "expired", 401),
    ("query", "not yet valid", 401), ("query", "revoked", 401), ("query", "wrong queue", 401),
    ("query", "missing level", 403),
]


@pytest.mark.parametrize("scheme,situation,status", MATRIX)
def test_auth_matrix(scheme: str, situation: str, status: int, account: Account, admin: AdminClient,
                     http: httpx.Client):
    """Each scheme reads the definition of queue ``q`` (level GetQueueInformation). A key
    grants everything and has no time or queue, so the key and signed rows have no
    wrong-queue or missing-level case; a key has no time either."""
    with account.client() as owner:
        owner.create_queue("q")
    if situation == "tampered" and scheme == "signed":
        # signed for one path, sent to another
        path = account.queues_path("q")
        headers = sign_request(account.name, account.key, "GET", account.queues_path("other"), now_ms())
        assert_bare(http.get(path, headers=headers), status)
        return
    with CASES[scheme](account, admin, situation) as client:
        if situation == "revoked":
            assert client.get_queue("q")["queueName"] == "q"  # works until the key is deleted
            admin.delete_key(account.name, "primary")
        if status == 200:
            assert client.get_queue("q")["queueName"] == "q"
        else:
            assert_bare(refusal(lambda: client.get_queue("q")), status)


def test_query_auth_authorizes_exactly_its_levels(account: Account, admin: AdminClient):
    with account.client(admin.create_permissions(account.name, "primary", ["CreateQueue", "p"])) as client:
        assert client.create_queue("q") is True  # test_query_auth_authorizes
        client.put("q", "m")
        assert_bare(refusal(lambda: client.get("q")), 403)
        assert_bare(refusal(lambda: client.delete_queue("q")), 403)
    with account.client(admin.create_permissions(account.name, "primary", ["r"])) as reader:
        assert_bare(refusal(lambda: reader.create_queue("r")), 403)  # test_query_auth_authenticates
        assert reader.get("q").message == "m"


def test_query_auth_restricts_queue(account: Account, admin: AdminClient):
    with account.client() as owner:
        owner.create_queue("q")
        owner.create_queue("other")
    with account.client(admin.create_permissions(account.name, "primary", ["p"], queue="q")) as client:
        client.put("q", "m")
        assert_bare(refusal(lambda: client.put("other", "m")), 401)
    with account.client(admin.create_permissions(account.name, "primary", ["p"])) as anywhere:
        anywhere.put("other", "m")  # test_query_auth_with_no_queue_info_does_not_restricts
    with account.client() as owner:
        assert owner.statistics("q") == {"size": 1} and owner.statistics("other") == {"size": 1}


def test_auth_runs_before_validation_and_the_queue_lookup(account: Account, http: httpx.Client):
    assert_bare(http.get(account.queues_path("nope")), 401)
    assert_bare(http.get(account.queues_path("bad!")), 401)
    assert_bare(http.get(f"{API}/no-such-account/queues/q", headers=account.key_header()), 401)
    assert_bare(http.get(f"{API}/bad!/queues/q", headers=account.key_header()), 401)


# ---- the admin API (spec §2.1) ----------------------------------------------------------------------

def test_admin_create_account(admin: AdminClient, server: CassieqServer):
    with server.admin_http() as raw:
        created = raw.post(f"{ADMIN}/accounts", json="adm.create")
    assert created.status_code == 201
    body = created.json()
    assert body["accountName"] == "adm.create" and set(body["keys"]) == {"primary", "secondary"}
    for key in body["keys"].values():
        assert re.fullmatch(r"[A-Za-z0-9_-]{86}", key)
    assert body["keys"]["primary"] != body["keys"]["secondary"]
    again = refusal(lambda: admin.create_account("adm.create"))
    assert_entity(again, 409, "Conflict", "CreateAccount")
    assert admin.get_account("adm.create") == body  # the keys kept
    assert_entity(refusal(lambda: admin.create_account("bad name!")), 422, "Error", "CreateAccount")
    assert body in admin.list_accounts()  # the list shows keys too


def test_admin_get_and_delete_account(admin: AdminClient, server: CassieqServer):
    missing = assert_entity(refusal(lambda: admin.get_account("adm-missing")), 404, "NotFound", "DeleteAccount")
    assert missing["account"] == "adm-missing"
    keys = admin.create_account("adm-delete")["keys"]
    with server.client("adm-delete", keys["primary"]) as client:
        client.create_queue("q")
        admin.delete_account("adm-delete")  # 204
        assert_entity(refusal(lambda: admin.get_account("adm-delete")), 404, "NotFound", "DeleteAccount")
        assert_entity(refusal(lambda: admin.delete_account("adm-delete")), 404, "NotFound", "DeleteAccount")
        assert_bare(refusal(lambda: client.get_queue("q")), 401)  # no account, no keys
    keys = admin.create_account("adm-delete")["keys"]  # the name is free again, with its queues gone
    with server.client("adm-delete", keys["primary"]) as client:
        assert client.list_queues() == []


def test_admin_keys(admin: AdminClient, account: Account, server: CassieqServer):
    key = admin.add_key(account.name, "ui-team")  # 201, the key as a JSON string
    assert re.fullmatch(r"[A-Za-z0-9_-]{86}", key)
    assert admin.get_account(account.name)["keys"]["ui-team"] == key
    with account.client(key) as client:
        assert client.create_queue("q") is True
        assert_entity(refusal(lambda: admin.add_key(account.name, "ui-team")), 409, "Conflict", "AddNewAccountKey")
        admin.delete_key(account.name, "ui-team")  # 204
        assert "ui-team" not in admin.get_account(account.name)["keys"]
        assert_bare(refusal(lambda: client.get_queue("q")), 401)
    admin.delete_key(account.name, "never-there")  # 204 as well
    assert_entity(refusal(lambda: admin.add_key("adm-nobody", "k")), 404, "NotFound", "DeleteAccount")
    assert_entity(refusal(lambda: admin.delete_key("adm-nobody", "k")), 404, "NotFound", "DeleteAccount")
    with server.admin_http() as raw:
        assert_entity(raw.post(f"{ADMIN}/accounts/{account.name}/keys", json={"keyName": "bad name"}), 422,
                      "Error", "AddNewAccountKey")


def test_admin_permissions(admin: AdminClient, account: Account, server: CassieqServer):
    with server.admin_http() as raw:
        made = raw.post(f"{ADMIN}/permissions", json={"accountName": account.name, "keyName": "secondary",
                                                      "levels": ["ReadMessage", "p"], "queueName": "q"})
    assert made.status_code == 201
    claims = made.json()["queryParam"]
    assert re.fullmatch(r"auth=rp&q=q&sig=[A-Za-z0-9_-]{43}", claims)
    with account.client() as owner:
        owner.create_queue("q")
    with account.client(claims) as client:
        client.put("q", "m")
        assert client.get("q").message == "m"
    timed = admin.create_permissions(account.name, "primary", "r", start="2016-04-25T16:46:52Z",
                                     end=now_ms() + HOUR_MS)
    assert re.fullmatch(r"auth=r&st=2016-04-25T16:46:52Z&et=\S+Z&sig=\S+", timed)
    unknown_account = refusal(lambda: admin.create_permissions("adm-nobody", "primary", ["r"]))
    assert assert_entity(unknown_account, 404, "NotFound", "CreateSignedAuthQuery")["account"] == "adm-nobody"
    unknown_key = refusal(lambda: admin.create_permissions(account.name, "no-key", ["r"]))
    assert assert_entity(unknown_key, 404, "NotFound", "GenerateQueryAuth")["key"] == "no-key"


def test_admin_supported_authorization_levels(admin: AdminClient):
    assert admin.supported_levels() == [
        {"level": "None", "shortForm": "n"}, {"level": "ReadMessage", "shortForm": "r"},
        {"level": "PutMessage", "shortForm": "p"}, {"level": "UpdateMessage", "shortForm": "u"},
        {"level": "AckMessage", "shortForm": "a"}, {"level": "GetQueueInformation", "shortForm": "g"},
        {"level": "CreateQueue", "shortForm": "c"}, {"level": "DeleteQueue", "shortForm": "d"},
    ]


def test_names_with_dots_work(admin: AdminClient, server: CassieqServer):
    keys = admin.create_account("adm.dotted.name")["keys"]  # create_account_with_dots_works
    with server.client("adm.dotted.name", keys["primary"], scheme="signed") as client:
        assert client.create_queue("a.dotted.queue") is True  # create_queue_with_dots_works
        client.put("a.dotted.queue", "m")
        assert client.get("a.dotted.queue").message == "m"


# ---- no 500 for client input ----------------------------------------------------------------------

N = "__account__"  # replaced by the table account's name
Q = f"{API}/{N}/queues"
M = f"{Q}/q/messages"
A = f"{ADMIN}/accounts"
A_RECEIPT = "MDoxOmFiYw"  # "0:1:abc": well-formed


def _b64(text: str) -> str:
    """Standard Base64 without padding, as a pop receipt is written."""
    return base64.b64encode(text.encode()).decode().rstrip("=")


#: (id, port, method, path, request options, status); bodies JSON unless ``content`` is given
MALFORMED: list[tuple[str, str, str, str, dict[str, Any], int]] = [
    # create queue: the JSON entity (422) and its parameter (400)
    ("create: not JSON", "api", "POST", Q, {"content": b"{bad"}, 422),
    ("create: non-UTF-8 body", "api", "POST", Q, {"content": b"\xff\xfe{}"}, 422),
    ("create: non-UTF-8 in a string", "api", "POST", Q, {"content": b'{"queueName": "\xff"}'}, 422),
    ("create: an array", "api", "POST", Q, {"json": []}, 422),
    ("create: a bare string", "api", "POST", Q, {"json": "q"}, 422),
    ("create: no body", "api", "POST", Q, {}, 422),
    ("create: no queueName", "api", "POST", Q, {"json": {"bucketSize": 3}}, 422),
    ("create: name of the wrong type", "api", "POST", Q, {"json": {"queueName": 5}}, 422),
    ("create: bad name", "api", "POST", Q, {"json": {"queueName": "bad!"}}, 422),
    ("create: empty name", "api", "POST", Q, {"json": {"queueName": "  "}}, 422),
    ("create: bad dlqName", "api", "POST", Q, {"json": {"queueName": "ok", "dlqName": "bad/name"}}, 422),
    ("create: bucketSize a string", "api", "POST", Q, {"json": {"queueName": "ok", "bucketSize": "3"}}, 422),
    ("create: bucketSize a fraction", "api", "POST", Q, {"json": {"queueName": "ok", "bucketSize": 1.5}}, 422),
    ("create: bucketSize 0", "api", "POST", Q, {"json": {"queueName": "ok", "bucketSize": 0}}, 422),
    ("create: bucketSize huge", "api", "POST", Q, {"json": {"queueName": "ok", "bucketSize": 10**30}}, 422),
    ("create: maxDeliveryCount 2^63", "api", "POST", Q, {"json": {"queueName": "ok", "maxDeliveryCount": 2**63}},
     422),
    ("create: poll seconds past a Java int", "api", "POST", Q,
     {"json": {"queueName": "ok", "repairWorkerPollSeconds": 2**31}}, 422),
    ("create: finalize seconds negative", "api", "POST", Q,
     {"json": {"queueName": "ok", "repairWorkerBucketFinalizeTimeSeconds": -1}}, 422),
    ("create: a flag not boolean", "api", "POST", Q,
     {"json": {"queueName": "ok", "deleteBucketsAfterFinalize": "yes"}}, 422),
    ("create: 1e400", "api", "POST", Q, {"content": b'{"queueName": "ok", "bucketSize": 1e400}'}, 422),
    ("create: NaN", "api", "POST", Q, {"content": b'{"queueName": "ok", "bucketSize": NaN}'}, 422),
    ("create: 5000 digits", "api", "POST", Q, {"content": b'{"queueName": "ok", "bucketSize": ' + b"9" * 5000 + b"}"},
     422),
    ("create: nested 100000 deep", "api", "POST", Q, {"content": b"[" * 100_000}, 422),
    ("create: errorIfExists not boolean", "api", "POST", Q + "?errorIfExists=maybe", {"json": {"queueName": "ok"}},
     400),
    # names in the path: 400
    ("get queue: bad name", "api", "GET", f"{Q}/bad!", {}, 400),
    ("get queue: non-UTF-8 name", "api", "GET", f"{Q}/bad%ff", {}, 400),
    ("get queue: a space", "api", "GET", f"{Q}/%20", {}, 400),
    ("delete queue: bad name", "api", "DELETE", f"{Q}/bad!", {}, 400),
    ("statistics: bad name", "api", "GET", f"{Q}/a%2Fb/statistics", {}, 400),
    ("put: bad name", "api", "POST", f"{Q}/bad!/messages", {"content": b"m"}, 400),
    # put
    ("put: negative delay", "api", "POST", M + "?initialInvisibilitySeconds=-1", {"content": b"m"}, 400),
    ("put: delay not a number", "api", "POST", M + "?initialInvisibilitySeconds=soon", {"content": b"m"}, 400),
    ("put: delay in exponent form", "api", "POST", M + "?initialInvisibilitySeconds=1e3", {"content": b"m"}, 400),
    ("put: delay with an underscore", "api", "POST", M + "?initialInvisibilitySeconds=5_000", {"content": b"m"},
     400),
    ("put: delay of 30 digits", "api", "POST", M + "?initialInvisibilitySeconds=" + "9" * 30, {"content": b"m"},
     400),
    ("put: delay past the store's clock", "api", "POST", M + "?initialInvisibilitySeconds=" + "9" * 16,
     {"content": b"m"}, 400),
    ("put: delay of 5000 digits", "api", "POST", M + "?initialInvisibilitySeconds=" + "9" * 5000,
     {"content": b"m"}, 400),
    ("put: non-UTF-8 message", "api", "POST", M, {"content": b"\xff\xfe\x00"}, 400),
    # get
    ("get: negative lease", "api", "GET", f"{M}/next?invisibilityTimeSeconds=-1", {}, 400),
    ("get: lease not a number", "api", "GET", f"{M}/next?invisibilityTimeSeconds=x", {}, 400),
    ("get: lease past the store's clock", "api", "GET", f"{M}/next?invisibilityTimeSeconds=" + "9" * 16, {}, 400),
    ("get: lease of 30 digits", "api", "GET", f"{M}/next?invisibilityTimeSeconds=" + "9" * 30, {}, 400),
    # ack: receipts
    ("ack: no receipt", "api", "DELETE", M, {}, 400),
    ("ack: empty receipt", "api", "DELETE", M + "?popReceipt=", {}, 400),
    ("ack: not Base64", "api", "DELETE", M + "?popReceipt=!!!", {}, 400),
    ("ack: Base64 of bytes", "api", "DELETE", M + "?popReceipt=" + quote(base64.b64encode(b"\xff\xfe").decode()),
     {}, 400),
    ("ack: two parts", "api", "DELETE", M + "?popReceipt=" + _b64("1:2"), {}, 400),
    ("ack: no tag", "api", "DELETE", M + "?popReceipt=" + _b64("1:2:"), {}, 400),
    ("ack: monoton not a number", "api", "DELETE", M + "?popReceipt=" + _b64("x:2:abc"), {}, 400),
    ("ack: monoton past a long", "api", "DELETE", M + "?popReceipt=" + _b64("9" * 23 + ":1:abc"), {}, 400),
    ("ack: version past a long", "api", "DELETE", M + "?popReceipt=" + _b64("1:" + "9" * 23 + ":abc"), {}, 400),
    ("ack: non-UTF-8 receipt", "api", "DELETE", M + "?popReceipt=%ff%fe", {}, 400),
    ("ack: a receipt naming no message", "api", "DELETE", M + "?popReceipt=" + _b64("40:1:abc"), {}, 409),
    ("ack: a negative monoton", "api", "DELETE", M + "?popReceipt=" + _b64("-5:1:abc"), {}, 409),
    # update
    ("update: no receipt", "api", "PUT", M, {"json": {"message": "x"}}, 400),
    ("update: malformed receipt", "api", "PUT", M + "?popReceipt=bad!", {"json": {"message": "x"}}, 400),
    ("update: receipt past a long", "api", "PUT", M + "?popReceipt=" + _b64("9" * 23 + ":1:abc"),
     {"json": {"message": "x"}}, 400),
    ("update: not JSON", "api", "PUT", M + "?popReceipt=" + A_RECEIPT, {"content": b"{bad"}, 422),
    ("update: non-UTF-8 body", "api", "PUT", M + "?popReceipt=" + A_RECEIPT, {"content": b"\xff"}, 422),
    ("update: an array", "api", "PUT", M + "?popReceipt=" + A_RECEIPT, {"json": [1]}, 422),
    ("update: message a number", "api", "PUT", M + "?popReceipt=" + A_RECEIPT, {"json": {"message": 5}}, 422),
    ("update: negative lease", "api", "PUT", M + "?popReceipt=" + A_RECEIPT, {"json": {"newInvisibilitySeconds": -1}},
     422),
    ("update: lease a string", "api", "PUT", M + "?popReceipt=" + A_RECEIPT,
     {"json": {"newInvisibilitySeconds": "5"}}, 422),
    ("update: lease a fraction", "api", "PUT", M + "?popReceipt=" + A_RECEIPT,
     {"json": {"newInvisibilitySeconds": 1.5}}, 422),
    ("update: lease huge", "api", "PUT", M + "?popReceipt=" + A_RECEIPT,
     {"json": {"newInvisibilitySeconds": 10**30}}, 422),
    ("update: 5000 digits", "api", "PUT", M + "?popReceipt=" + A_RECEIPT,
     {"content": b'{"newInvisibilitySeconds": ' + b"9" * 5000 + b"}"}, 422),
    ("update: nested 100000 deep", "api", "PUT", M + "?popReceipt=" + A_RECEIPT, {"content": b"{\"a\":" * 100_000},
     422),
    ("update: stale receipt", "api", "PUT", M + "?popReceipt=" + A_RECEIPT, {"json": {"message": "x"}}, 409),
    # credentials that cannot even be read: 401, empty
    ("auth: non-ASCII key bytes", "api", "GET", f"{Q}/q", {"headers": [(b"Authorization", b"Key \xe9\xff")]}, 401),
    ("auth: a scheme without a credential", "api", "GET", f"{Q}/q", {"headers": {"Authorization": "Key"}}, 401),
    ("auth: non-ASCII request time", "api", "GET", f"{Q}/q",
     {"headers": [(b"Authorization", b"Signed x"), (b"x-cassieq-request-time", b"\xff\xfe")]}, 401),
    ("auth: a time before the calendar", "api", "GET", f"{Q}/q",
     {"headers": {"Authorization": "Signed x", "x-cassieq-request-time": "0001-01-01T00:00:00+23:59"}}, 401),
    ("auth: a time after the calendar", "api", "GET", f"{Q}/q",
     {"headers": {"Authorization": "Signed x", "x-cassieq-request-time": "9999-12-31T23:59:59-23:59"}}, 401),
    ("auth: claims with a bad start", "api", "GET", f"{Q}/q?auth=g&st=2016-13-45T00:00:00Z&sig=x", {"headers": {}}, 401),
    ("auth: claims with a start before the calendar", "api", "GET",
     f"{Q}/q?auth=g&st=0001-01-01T00:00:00%2B23:59&sig=x", {"headers": {}}, 401),
    ("auth: claims of non-UTF-8", "api", "GET", f"{Q}/q?auth=%ff&q=%fe&sig=%ff", {"headers": {}}, 401),
    # the admin API: body names 422, path names 400
    ("admin create: not JSON", "admin", "POST", A, {"content": b"{bad"}, 422),
    ("admin create: non-UTF-8", "admin", "POST", A, {"content": b"\xff"}, 422),
    ("admin create: a number", "admin", "POST", A, {"json": 5}, 422),
    ("admin create: bad name", "admin", "POST", A, {"json": "bad!"}, 422),
    ("admin create: nested 100000 deep", "admin", "POST", A, {"content": b"[" * 100_000}, 422),
    ("admin get: bad name", "admin", "GET", f"{A}/bad!", {}, 400),
    ("admin delete: bad name", "admin", "DELETE", f"{A}/bad!", {}, 400),
    ("admin add key: bad account name", "admin", "POST", f"{A}/bad!/keys", {"json": {"keyName": "k"}}, 400),
    ("admin add key: bad key name", "admin", "POST", f"{A}/{N}/keys", {"json": {"keyName": "bad!"}}, 422),
    ("admin add key: key name a number", "admin", "POST", f"{A}/{N}/keys", {"json": {"keyName": 5}}, 422),
    ("admin add key: not JSON", "admin", "POST", f"{A}/{N}/keys", {"content": b"keyName=k"}, 422),
    ("admin delete key: bad key name", "admin", "DELETE", f"{A}/{N}/keys/bad!", {}, 400),
    ("admin permissions: levels a string", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": N, "keyName": "primary", "levels": "r"}}, 422),
    ("admin permissions: no key name", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": N, "levels": ["r"]}}, 422),
    ("admin permissions: start not a time", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": N, "keyName": "primary", "levels": ["r"], "startTime": "yesterday"}}, 422),
    ("admin permissions: start a number", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": N, "keyName": "primary", "levels": ["r"], "startTime": 5}}, 422),
    ("admin permissions: end before the calendar", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": N, "keyName": "primary", "levels": ["r"], "endTime": "0001-01-01T00:00:00+23:59"}},
     422),
    ("admin permissions: month 13", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": N, "keyName": "primary", "levels": ["r"], "endTime": "2016-13-01T00:00:00Z"}}, 422),
    ("admin permissions: bad queue name", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": N, "keyName": "primary", "levels": ["r"], "queueName": "bad!"}}, 422),
    ("admin permissions: unknown account", "admin", "POST", f"{ADMIN}/permissions",
     {"json": {"accountName": "bad!", "keyName": "primary", "levels": ["r"]}}, 404),
    ("admin debug: bucket not a number", "admin", "GET", f"{ADMIN}/debug/accounts/{N}/queues/q/buckets/x/messages",
     {}, 422),
    ("admin debug: bucket past a long", "admin", "GET",
     f"{ADMIN}/debug/accounts/{N}/queues/q/buckets/{'9' * 23}/messages", {}, 422),
    ("admin debug: bad account name", "admin", "GET", f"{ADMIN}/debug/accounts/bad!/queues", {}, 400),
    ("admin debug: unknown queue", "admin", "GET", f"{ADMIN}/debug/accounts/{N}/queues/nope/pointers", {}, 404),
]


@pytest.fixture(scope="module")
def table_account(server: CassieqServer, admin: AdminClient) -> Account:
    """An account with queue ``q`` holding a message: malformed requests must not touch it."""
    created = admin.create_account("malformed-table")
    account = Account(server, "malformed-table", created["keys"])
    with account.client() as client:
        client.create_queue("q")
        client.put("q", "untouched")
    return account


@pytest.mark.parametrize("port,method,path,options,status",
                         [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED])
def test_malformed_requests_are_4xx_never_500(port: str, method: str, path: str, options: dict[str, Any],
                                              status: int, table_account: Account, server: CassieqServer):
    with table_account.client() as client:
        size_before = client.statistics("q")
    log_before = len(server.log())
    base = server.api_url if port == "api" else server.admin_url
    options = dict(options)
    headers = options.pop("headers", None)
    if headers is None and port == "api":
        headers = table_account.key_header()  # past authentication, to the validation
    url = base + path.replace(N, table_account.name)
    with httpx.Client(timeout=10.0) as raw:
        response = raw.request(method, url, headers=headers, **options)
    assert response.status_code == status, response.text[:300]
    if status in (401, 403):
        assert response.content == b""
    else:
        body = response.json()
        assert set(body) >= {"reason", "operation", "message"}, body
        assert body["reason"] in ("Error", "NotFound", "Conflict")
    assert "Traceback" not in server.log()[log_before:]
    with table_account.client() as client:
        assert client.statistics("q") == size_before  # nothing was put, acked or dead-lettered


# ---- deliberate fixes and the shared store ----------------------------------------------------------

def test_list_queues_is_scoped_to_the_account(admin: AdminClient, server: CassieqServer):
    # the original listed every account's Active queues
    a, b = (admin.create_account(name)["keys"]["primary"] for name in ("scoped-a", "scoped-b"))
    with server.client("scoped-a", a) as client_a, server.client("scoped-b", b) as client_b:
        for name in ("shared", "only-a"):
            client_a.create_queue(name)
        client_b.create_queue("shared")
        client_b.create_queue("only-b")
        client_a.create_queue("gone")
        client_a.delete_queue("gone")
        listed_a = client_a.list_queues()
        assert sorted(q["queueName"] for q in listed_a) == ["only-a", "shared"]
        assert {q["accountName"] for q in listed_a} == {"scoped-a"}
        assert sorted(q["queueName"] for q in client_b.list_queues()) == ["only-b", "shared"]


def test_two_server_processes_share_one_sqlite_file(tmp_path: Path):
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    with cassieq_server(tmp_path / "node0", ["--store", store, "--nodes", "2", "--node-index", "0"]) as one, \
            cassieq_server(tmp_path / "node1", ["--store", store, "--nodes", "2", "--node-index", "1"]) as two:
        with one.admin() as admin_one, two.admin() as admin_two:
            key = admin_one.create_account("shared")["keys"]["primary"]
            assert admin_two.get_account("shared")["keys"]["primary"] == key
        with one.client("shared", key) as via_one, two.client("shared", key, scheme="signed") as via_two:
            assert via_one.create_queue("q") is True
            assert via_two.create_queue("q") is False  # it exists: the other process made it
            assert via_two.get_queue("q")["status"] == "Active"
            via_two.put("q", "from two")
            via_one.put("q", "from one")
            first = via_one.get("q")
            second = via_two.get("q")
            assert (first.message, second.message) == ("from two", "from one")
            via_two.ack("q", first.pop_receipt)
            via_one.ack("q", second.pop_receipt)
            assert via_one.statistics("q") == via_two.statistics("q") == {"size": 0}
            via_two.delete_queue("q")
            assert_entity(refusal(lambda: via_one.put("q", "late")), 404, "NotFound", "putMessage")


def test_a_receipt_of_a_deleted_life_does_not_ack_its_re_creation_through_another_process(tmp_path: Path):
    # the tag is the only nonce across a re-creation (spec §1): the version restarts at 0
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    with cassieq_server(tmp_path / "node0", ["--store", store]) as one, \
            cassieq_server(tmp_path / "node1", ["--store", store]) as two:
        with one.admin() as admin_one:
            key = admin_one.create_account("nonce")["keys"]["primary"]
        with one.client("nonce", key) as via_one, two.client("nonce", key) as via_two:
            via_one.create_queue("q")
            via_one.put("q", "old life")
            old = via_one.get("q")
            via_one.delete_queue("q")
            via_two.create_queue("q")
            via_two.put("q", "new life")
            new = via_two.get("q")
            assert new.message_tag != old.message_tag
            assert_entity(refusal(lambda: via_one.ack("q", old.pop_receipt)), 409, "Conflict", "AckMessage")
