"""CassieQ's authentication (spec §2.2, §2.3), accounts (§2.1) and its HTTP clients'
requests.

The auth matrix is checked at the function level: each scheme accepted, and refused for
a wrong key, a tampered request, a revoked key, a time outside its window; 401 for every
failure to authenticate, 403 (``authorize`` False) for a valid credential without the
level. Accounts run on a MemoryStore in the sim world, keys drawn from the node's
``rt.random``. The clients are checked on the exact requests they send (httpx's
MockTransport records them; the server does not exist yet), and each signed request is
handed to the server's own check.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
from pathlib import Path
from urllib.parse import parse_qsl

import httpx
import pytest

from lab.backends.cassieq.client import (
    AdminClient,
    AsyncCassieqClient,
    CassieqClient,
    CassieqError,
    Message,
    Updated,
)
from lab.backends.cassieq.core import accounts as accounts_module
from lab.backends.cassieq.core import auth as auth_module
from lab.backends.cassieq.core.accounts import (
    AccountExists,
    AccountNotFound,
    Accounts,
    InvalidName,
    KeyExists,
)
from lab.backends.cassieq.core.auth import (
    ALL_LEVELS,
    AuthFailure,
    Principal,
    authenticate,
    authorize,
    canonical_levels,
    format_iso,
    parse_iso,
    parse_levels,
    sign_query,
    sign_request,
)
from lab.backends.cassieq.core.auth import (
    AuthorizationLevel as L,
)
from lab.backends.cassieq.core.memory_store import MemoryStore
from models.world import SimWorld
from tests.test_core_purity import forbidden_chains

ACCOUNT = "acme"
PRIMARY = base64.urlsafe_b64encode(bytes(range(64))).rstrip(b"=").decode()
SECONDARY = base64.urlsafe_b64encode(bytes(range(64, 128))).rstrip(b"=").decode()
KEYS = {"primary": PRIMARY, "secondary": SECONDARY}
OTHER_KEY = base64.urlsafe_b64encode(b"\x07" * 64).rstrip(b"=").decode()
NOW = parse_iso("2016-04-25T16:46:52Z")
HOUR = 3_600_000
QUEUE_PATH = f"/api/v1/accounts/{ACCOUNT}/queues/q1/messages/next"


def check(headers=None, query=None, keys=KEYS, method="GET", path=QUEUE_PATH, queue="q1", now=NOW, **kw):
    return authenticate(ACCOUNT, keys, method, path, headers or {}, query or {}, queue, now, **kw)


def claims(text: str) -> dict[str, str]:
    return dict(parse_qsl(text, keep_blank_values=True))


def hand_signature(key: str, lines: list[str]) -> str:
    """The spec's recipe, written out with hmac and hashlib."""
    raw_key = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    digest = hmac.new(raw_key, "\n".join(lines).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def refused(result) -> bool:
    return isinstance(result, AuthFailure) and result.status == 401


# ---- permission levels ----------------------------------------------------------------------

def test_levels_short_forms_in_enum_order():
    assert "".join(level.short_form for level in L) == "nrpuagcd"
    assert [level.level_name for level in L][:3] == ["None", "ReadMessage", "PutMessage"]
    assert ALL_LEVELS == frozenset(L) - {L.NONE}


def test_level_parsing_rules():
    assert parse_levels("gr") == {L.GET_QUEUE_INFORMATION, L.READ_MESSAGE}
    assert canonical_levels(parse_levels("dcgaupr")) == "rpuagcd"
    assert parse_levels("rx") == frozenset()  # an unknown character is None, and None empties the set
    assert parse_levels("rn") == frozenset()
    assert parse_levels("") == parse_levels(None) == frozenset()
    assert auth_module.levels_of(["CreateQueue", "r"]) == {L.CREATE_QUEUE, L.READ_MESSAGE}


def test_iso_times():
    assert format_iso(NOW + 999) == "2016-04-25T16:46:52Z"  # millis are dropped
    assert parse_iso("2016-04-25T18:46:52+02:00") == NOW
    assert parse_iso("2016-04-25T14:46:52-0200") == NOW
    assert parse_iso("1970-01-01T00:00:00Z") == 0
    for bad in ("2016-04-25T16:46:52.123Z", "2016-04-25T16:46:52", "2016-04-25 16:46:52Z", "yesterday"):
        with pytest.raises(ValueError):
            parse_iso(bad)


# ---- Key scheme ------------------------------------------------------------------------------

def test_key_scheme_every_key_grants_everything():
    for key in (PRIMARY, SECONDARY):
        principal = check({"Authorization": f"Key {key}"})
        assert principal == Principal(ACCOUNT, ALL_LEVELS, "key")
        assert authorize(principal, L.DELETE_QUEUE) and not authorize(principal, L.NONE)


def test_key_scheme_name_is_case_insensitive():
    for scheme in ("key", "KEY", "kEy"):
        assert isinstance(check({"authorization": f"{scheme} {PRIMARY}"}), Principal)


def test_key_scheme_refusals():
    assert refused(check({"Authorization": f"Key {OTHER_KEY}"}))
    assert refused(check({"Authorization": f"Key {PRIMARY}"}, keys={"secondary": SECONDARY}))  # revoked
    assert refused(check({"Authorization": f"Key {PRIMARY}"}, keys=None))  # no such account
    assert refused(check({}))  # no credential at all


def test_colon_form_of_the_readme_does_not_parse():
    assert check({"Authorization": f"Key: {PRIMARY}"}) == AuthFailure("no credentials")
    # the header did not parse, so the query claims are what is checked
    query = claims(sign_query(ACCOUNT, PRIMARY, "r"))
    principal = check({"Authorization": f"Key: {PRIMARY}"}, query)
    assert isinstance(principal, Principal) and principal.scheme == "query"


def test_a_header_that_parses_wins_over_the_query():
    good_query = claims(sign_query(ACCOUNT, PRIMARY, "r"))
    assert refused(check({"Authorization": f"Key {OTHER_KEY}"}, good_query))
    bad_query = {"auth": "r", "sig": "forged"}
    assert check({"Authorization": f"Key {PRIMARY}"}, bad_query).scheme == "key"


# ---- Signed scheme ---------------------------------------------------------------------------

def test_signed_request_known_answer():
    headers = sign_request(ACCOUNT, PRIMARY, "get", QUEUE_PATH + "?invisibilityTimeSeconds=30", NOW)
    expected = hand_signature(PRIMARY, [ACCOUNT, "GET", QUEUE_PATH, "2016-04-25T16:46:52Z"])
    assert headers == {"Authorization": f"Signed {expected}", "x-cassieq-request-time": "2016-04-25T16:46:52Z"}
    assert len(expected) == 43 and "=" not in expected
    assert check(headers) == Principal(ACCOUNT, ALL_LEVELS, "signed")


def test_signed_request_path_is_trimmed_decoded_and_without_query():
    headers = sign_request(ACCOUNT, SECONDARY, "GET", "api/v1/accounts/acme/queues/q1/messages/next/", NOW)
    assert isinstance(check(headers, path="/api/v1/accounts/acme/queues/q%31/messages/next?x=1"), Principal)


def test_signed_request_refusals():
    headers = sign_request(ACCOUNT, PRIMARY, "GET", QUEUE_PATH, NOW)
    assert refused(check(sign_request(ACCOUNT, OTHER_KEY, "GET", QUEUE_PATH, NOW)))
    assert refused(check(headers, method="DELETE"))  # tampered: another method
    assert refused(check(headers, path=QUEUE_PATH.replace("q1", "q2")))  # tampered: another path
    moved = {**headers, "x-cassieq-request-time": format_iso(NOW + 1000)}
    assert refused(check(moved, now=NOW + 1000))  # tampered: another time
    assert refused(check(headers, keys={"secondary": SECONDARY}))  # revoked
    assert refused(check({"Authorization": "Signed "}))  # an empty signature


def test_signed_request_clock_skew():
    behind = sign_request(ACCOUNT, PRIMARY, "GET", QUEUE_PATH, NOW - HOUR)  # the client's clock 1 h behind
    assert refused(check(behind))
    signed = sign_request(ACCOUNT, PRIMARY, "GET", QUEUE_PATH, NOW)
    assert isinstance(check(signed, now=NOW + 4_999), Principal)
    assert refused(check(signed, now=NOW + 5_000))  # the window is open at both ends
    assert refused(check(signed, now=NOW - 5_000))
    assert refused(check(signed, now=NOW + 30_000))
    assert isinstance(check(signed, now=NOW + 30_000, skew_ms=60_000), Principal)


def test_signed_request_time_header():
    signed_at_epoch = sign_request(ACCOUNT, PRIMARY, "GET", QUEUE_PATH, 0)
    no_time = {"Authorization": signed_at_epoch["Authorization"]}
    # a missing time is the epoch: the signature holds and the time fails
    assert refused(check(no_time)) and isinstance(check(no_time, now=1000), Principal)
    signed = sign_request(ACCOUNT, PRIMARY, "GET", QUEUE_PATH, NOW)
    other_zone = {**signed, "x-cassieq-request-time": "2016-04-25T18:46:52+02:00"}
    assert isinstance(check(other_zone), Principal)  # the server re-formats the time in UTC
    assert refused(check({**signed, "x-cassieq-request-time": "2016-04-25T16:46:52.000Z"}))


# ---- query claims ----------------------------------------------------------------------------

def test_query_claims_text_and_known_answer():
    start, end = NOW - HOUR, NOW + HOUR
    text = sign_query(ACCOUNT, PRIMARY, [L.PUT_MESSAGE, L.READ_MESSAGE], queue="q1", start=start, end=end)
    expected = hand_signature(PRIMARY, [ACCOUNT, "rp", "startTime:2016-04-25T15:46:52Z",
                                        "endTime:2016-04-25T17:46:52Z", "q:q1"])
    assert text == f"auth=rp&q=q1&st=2016-04-25T15:46:52Z&et=2016-04-25T17:46:52Z&sig={expected}"
    assert sign_query(ACCOUNT, PRIMARY, "c") == f"auth=c&sig={hand_signature(PRIMARY, [ACCOUNT, 'c'])}"


def test_query_claims_grant_exactly_their_levels():
    principal = check(query=claims(sign_query(ACCOUNT, SECONDARY, "rp", queue="q1")))
    assert principal == Principal(ACCOUNT, frozenset({L.READ_MESSAGE, L.PUT_MESSAGE}), "query")
    assert authorize(principal, L.READ_MESSAGE)
    assert not authorize(principal, L.CREATE_QUEUE)  # authenticated, not authorized: 403


def test_query_claims_any_order_of_auth_verifies():
    query = claims(sign_query(ACCOUNT, PRIMARY, "rpa"))
    for order in ("par", "apr", "rpa"):
        assert isinstance(check(query={**query, "auth": order}), Principal)


def test_query_claims_refusals():
    query = claims(sign_query(ACCOUNT, PRIMARY, "r", queue="q1", end=NOW + HOUR))
    assert refused(check(query=claims(sign_query(ACCOUNT, OTHER_KEY, "r"))))  # wrong key
    assert refused(check(query={**query, "sig": query["sig"] + "fail"}))  # tampered signature
    assert refused(check(query={**query, "auth": "rc"}))  # tampered: more levels
    assert refused(check(query={**query, "et": format_iso(NOW + 2 * HOUR)}))  # tampered: later end
    assert refused(check(query={**query, "q": "q2"}, queue="q2"))  # tampered: another queue
    assert refused(check(query=query, keys={"secondary": SECONDARY}))  # revoked
    assert refused(check(query={**query, "et": "tomorrow"}))  # malformed
    assert refused(check(query={**query, "sig": ""}))  # no signature: no claims


def test_query_claims_time_window():
    expired = claims(sign_query(ACCOUNT, PRIMARY, "c", end=NOW - 3_000))
    assert refused(check(query=expired))
    not_yet = claims(sign_query(ACCOUNT, PRIMARY, "c", start=NOW + HOUR))
    assert refused(check(query=not_yet))
    assert refused(check(query=not_yet, now=NOW + HOUR))  # the start is excluded
    assert isinstance(check(query=not_yet, now=NOW + HOUR + 1), Principal)
    window = claims(sign_query(ACCOUNT, PRIMARY, "c", start=NOW - HOUR, end=NOW + HOUR))
    assert isinstance(check(query=window), Principal)
    assert refused(check(query=window, now=NOW + HOUR))  # the end is excluded


def test_query_claims_restricted_to_a_queue():
    query = claims(sign_query(ACCOUNT, PRIMARY, "pc", queue="q1"))
    assert isinstance(check(query=query, queue="q1"), Principal)
    assert refused(check(query=query, queue="q1bad"))
    # create-queue and list-queues have no queue in their path: a queue-restricted claim cannot call them
    assert refused(check(query=query, queue=None, method="POST", path=f"/api/v1/accounts/{ACCOUNT}/queues"))
    unrestricted = claims(sign_query(ACCOUNT, PRIMARY, "p"))
    assert isinstance(check(query=unrestricted, queue="anything"), Principal)


def test_claims_naming_none_grant_nothing_but_still_verify():
    query = claims(sign_query(ACCOUNT, PRIMARY, "rn"))
    assert query["auth"] == ""
    principal = check(query={**query, "auth": "rn"})  # re-canonicalized to the empty set too
    assert principal.levels == frozenset() and not authorize(principal, L.READ_MESSAGE)


# ---- accounts over the store ---------------------------------------------------------------------

def run_accounts(body):
    world = SimWorld(seed=5)

    async def main(control):
        rt = world.node("cassieq-0")
        return await body(Accounts(MemoryStore(), rt.random))
    return world.run(main)


def test_create_account_gives_two_random_base64url_keys():
    async def body(accounts):
        created = await accounts.create(" acme ")
        again = await accounts.get("acme")
        return created, again
    created, again = run_accounts(body)
    assert created.account_name == "acme" and set(created.keys) == {"primary", "secondary"}
    for key in created.keys.values():
        assert re.fullmatch(r"[A-Za-z0-9_-]{86}", key)
        assert len(auth_module.key_bytes(key)) == 64
    assert created.keys["primary"] != created.keys["secondary"]
    assert again == created
    assert created.to_json() == {"accountName": "acme", "keys": created.keys}
    # the keys come from the node's seeded source: the same seed, the same keys
    assert run_accounts(lambda accounts: accounts.create("acme")) == created


def test_create_account_twice_conflicts_and_keeps_the_keys():
    async def body(accounts):
        first = await accounts.create("acme")
        with pytest.raises(AccountExists, match="An account named 'acme' already exists"):
            await accounts.create("acme")
        return first, await accounts.get("acme")
    first, stored = run_accounts(body)
    assert stored == first


def test_account_get_list_delete():
    async def body(accounts):
        assert await accounts.get("nobody") is None
        assert await accounts.keys("nobody") is None
        await accounts.create("b.team")
        await accounts.create("a-team")
        names = [a.account_name for a in await accounts.list()]
        await accounts.delete("a-team")
        with pytest.raises(AccountNotFound):
            await accounts.delete("a-team")
        return names, await accounts.get("a-team"), [a.account_name for a in await accounts.list()]
    assert run_accounts(body) == (["a-team", "b.team"], None, ["b.team"])


def test_account_refusals_carry_the_original_error_entities():
    async def body(accounts):
        await accounts.create("acme")
        refusals = []
        for attempt in (accounts.create("acme"), accounts.add_key("acme", "primary"), accounts.delete("nobody"),
                        accounts.signing_key("nobody", "primary"), accounts.signing_key("acme", "nope")):
            with pytest.raises(Exception) as raised:
                await attempt
            refusals.append(raised.value.to_json())
        return refusals, await accounts.signing_key("acme", " secondary "), await accounts.get("acme")
    refusals, key, account = run_accounts(body)
    assert refusals == [
        {"reason": "Conflict", "operation": "CreateAccount", "message": "An account named 'acme' already exists"},
        {"reason": "Conflict", "operation": "AddNewAccountKey", "message": "A key named 'primary' already exists."},
        {"reason": "NotFound", "operation": "DeleteAccount", "message": "The requested account 'nobody' was not found.",
         "account": "nobody"},
        {"reason": "NotFound", "operation": "CreateSignedAuthQuery",
         "message": "The requested account 'nobody' was not found.", "account": "nobody"},
        {"reason": "NotFound", "operation": "GenerateQueryAuth",
         "message": "The requested account key of 'nope' was not found.", "key": "nope"},
    ]
    assert key == account.keys["secondary"]


def test_bad_names_are_refused():
    async def body(accounts):
        for bad in ("", "a b", "a/b", "ü"):
            with pytest.raises(InvalidName):
                await accounts.create(bad)
        await accounts.create("acme")
        with pytest.raises(InvalidName):
            await accounts.add_key("acme", "ui team")
        return [a.account_name for a in await accounts.list()]
    assert run_accounts(body) == ["acme"]


def test_keys_add_and_delete():
    async def body(accounts):
        await accounts.create("acme")
        key = await accounts.add_key("acme", "ui-team")
        with pytest.raises(KeyExists, match="A key named 'ui-team' already exists."):
            await accounts.add_key("acme", "ui-team")
        with pytest.raises(AccountNotFound):
            await accounts.add_key("nobody", "k")
        with pytest.raises(AccountNotFound):
            await accounts.delete_key("nobody", "k")
        after_add = await accounts.keys("acme")
        await accounts.delete_key("acme", "ui-team")
        await accounts.delete_key("acme", "never-there")  # no error
        return key, after_add, await accounts.keys("acme")
    key, after_add, after_delete = run_accounts(body)
    assert after_add["ui-team"] == key and len(key) == 86
    assert set(after_delete) == {"primary", "secondary"}


def test_deleting_a_key_revokes_its_signatures():
    async def body(accounts):
        account = await accounts.create("acme")
        query = claims(sign_query("acme", account.keys["primary"], "c"))

        async def attempt():
            return authenticate("acme", await accounts.keys("acme"), "POST", "/api/v1/accounts/acme/queues",
                                {}, query, None, NOW)
        before = await attempt()
        await accounts.delete_key("acme", "primary")
        return before, await attempt()
    before, after = run_accounts(body)
    assert isinstance(before, Principal) and authorize(before, L.CREATE_QUEUE)
    assert refused(after)


def test_auth_and_accounts_are_pure():
    core = Path(accounts_module.__file__).parent
    assert forbidden_chains(core / "auth.py") == []
    assert forbidden_chains(core / "accounts.py") == []


# ---- the clients' requests ---------------------------------------------------------------------

BASE = "http://cq:8080"
SENT: list[httpx.Request] = []


def recorder(status: int = 200, body: object = None):
    def handle(request: httpx.Request) -> httpx.Response:
        request.read()
        SENT.append(request)
        if body is None:
            return httpx.Response(status)
        return httpx.Response(status, json=body)
    return httpx.MockTransport(handle)


@pytest.fixture(autouse=True)
def _forget_requests():
    SENT.clear()


def server_check(request: httpx.Request, keys=KEYS, now=NOW, queue="q1"):
    """What the server's filter would decide for this exact request."""
    raw = request.url.raw_path.decode()
    return authenticate(ACCOUNT, keys, request.method, raw, dict(request.headers),
                        dict(parse_qsl(request.url.query.decode(), keep_blank_values=True)), queue, now)


def test_key_client_put_sends_the_raw_body():
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(201)) as client:
        client.put("q.1", "hi \"there\"")
        client.put("q.1", b"\x00bytes", initial_invisibility=5)
    first, second = SENT
    assert first.method == "POST"
    assert str(first.url) == f"{BASE}/api/v1/accounts/acme/queues/q.1/messages"
    assert first.headers["authorization"] == f"Key {PRIMARY}"
    assert first.content == b'hi "there"'
    assert second.url.query == b"initialInvisibilitySeconds=5" and second.content == b"\x00bytes"


def test_pop_receipts_are_url_encoded():
    receipt = base64.b64encode(b"12:3:\xfb\xff\xbf").decode().rstrip("=")
    assert "+" in receipt or "/" in receipt
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(204)) as client:
        client.ack("q1", "ab+c/d")
        client.ack("q1", receipt)
    assert SENT[0].method == "DELETE"
    assert SENT[0].url.raw_path == b"/api/v1/accounts/acme/queues/q1/messages?popReceipt=ab%2Bc%2Fd"
    assert dict(parse_qsl(SENT[1].url.query.decode()))["popReceipt"] == receipt


def test_update_and_get():
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(200, {"popReceipt": "new", "messageTag": "t"})) as c:
        assert c.update("q1", "a+b", None, 0) == Updated("new", "t")
    assert SENT[0].method == "PUT" and SENT[0].url.query == b"popReceipt=a%2Bb"
    assert json.loads(SENT[0].content) == {"message": None, "newInvisibilitySeconds": 0}
    leased = {"popReceipt": "r", "message": "m", "deliveryCount": 0, "messageTag": "tag"}
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(200, leased)) as client:
        assert client.get("q1") == Message("r", "m", 0, "tag")
    assert SENT[1].url.raw_path == b"/api/v1/accounts/acme/queues/q1/messages/next?invisibilityTimeSeconds=30"
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(204)) as client:
        assert client.get("q1", invisibility=5) is None


def test_create_queue_and_errors():
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(201)) as client:
        assert client.create_queue("q1", bucket_size=10, dlqName="dead") is True
        with pytest.raises(TypeError):
            client.create_queue("q1", bucket=3)
    request = SENT[0]
    assert request.method == "POST" and request.url.raw_path == b"/api/v1/accounts/acme/queues"
    assert json.loads(request.content) == {"queueName": "q1", "bucketSize": 10, "dlqName": "dead"}
    assert request.headers["content-type"] == "application/json"
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(200)) as client:
        assert client.create_queue("q1") is False
    conflict = {"reason": "Conflict", "operation": "CreateQueue", "message": "A queue named 'q1' already exists."}
    with CassieqClient(BASE, ACCOUNT, PRIMARY, transport=recorder(409, conflict)) as client, \
            pytest.raises(CassieqError) as raised:
        client.create_queue("q1", error_if_exists=True)
    assert SENT[-1].url.query == b"errorIfExists=true"
    assert raised.value.status == 409 and raised.value.body == conflict
    with CassieqClient(BASE, ACCOUNT, OTHER_KEY, transport=recorder(401)) as client, \
            pytest.raises(CassieqError) as raised:
        client.delete_queue("q1")
    assert raised.value.status == 401 and raised.value.body is None


def test_signed_client_signs_what_the_server_checks():
    def clock() -> float:
        return NOW / 1000 + 0.25

    with CassieqClient(BASE, ACCOUNT, SECONDARY, scheme="signed", clock=clock, transport=recorder(204)) as client:
        client.get("q1")
    request = SENT[0]
    assert request.headers["x-cassieq-request-time"] == "2016-04-25T16:46:52Z"
    expected = hand_signature(SECONDARY, [ACCOUNT, "GET", QUEUE_PATH, "2016-04-25T16:46:52Z"])
    assert request.headers["authorization"] == f"Signed {expected}"
    assert server_check(request) == Principal(ACCOUNT, ALL_LEVELS, "signed")
    assert refused(server_check(request, now=NOW + HOUR))


def test_query_client_appends_the_claims_verbatim():
    text = sign_query(ACCOUNT, PRIMARY, "ra", queue="q1", end=NOW + HOUR)
    with CassieqClient(BASE, ACCOUNT, text, transport=recorder(204)) as client:
        assert client.scheme == "query"
        client.get("q1", invisibility=7)
        client.ack("q1", "x+y")
    get, ack = SENT
    assert "authorization" not in get.headers
    assert get.url.query.decode() == "invisibilityTimeSeconds=7&" + text
    assert ack.url.query.decode() == "popReceipt=x%2By&" + text
    principal = server_check(get)
    assert principal.levels == {L.READ_MESSAGE, L.ACK_MESSAGE} and not authorize(principal, L.PUT_MESSAGE)
    assert refused(server_check(get, queue="q2"))


def test_async_client_builds_the_same_requests():
    def clock() -> float:
        return NOW / 1000

    async def main():
        async with AsyncCassieqClient(BASE, ACCOUNT, PRIMARY, scheme="signed", clock=clock,
                                      transport=recorder(204)) as client:
            await client.ack("q1", "ab+c/d")
            return await client.get("q1")
    assert asyncio.run(main()) is None
    with CassieqClient(BASE, ACCOUNT, PRIMARY, scheme="signed", clock=clock, transport=recorder(204)) as client:
        client.ack("q1", "ab+c/d")
    async_ack, _, sync_ack = SENT
    assert async_ack.url == sync_ack.url and async_ack.method == sync_ack.method == "DELETE"
    assert async_ack.headers["authorization"] == sync_ack.headers["authorization"]
    assert server_check(async_ack) == Principal(ACCOUNT, ALL_LEVELS, "signed")


def test_admin_client_requests():
    created = {"accountName": "acme", "keys": KEYS}
    with AdminClient("http://cq:8081/", transport=recorder(201, created)) as admin:
        assert admin.create_account("acme") == created
    assert SENT[0].method == "POST" and str(SENT[0].url) == "http://cq:8081/admin/api/v1/accounts"
    assert SENT[0].content == b'"acme"'
    with AdminClient("http://cq:8081", transport=recorder(201, "the-key")) as admin:
        assert admin.add_key("acme", "ui-team") == "the-key"
    assert SENT[1].url.raw_path == b"/admin/api/v1/accounts/acme/keys"
    assert json.loads(SENT[1].content) == {"keyName": "ui-team"}
    with AdminClient("http://cq:8081", transport=recorder(204)) as admin:
        admin.delete_key("acme", "ui-team")
        admin.delete_account("acme")
    assert (SENT[2].method, SENT[2].url.raw_path) == ("DELETE", b"/admin/api/v1/accounts/acme/keys/ui-team")
    assert (SENT[3].method, SENT[3].url.raw_path) == ("DELETE", b"/admin/api/v1/accounts/acme")
    with AdminClient("http://cq:8081", transport=recorder(201, {"queryParam": "auth=r&sig=x"})) as admin:
        assert admin.create_permissions("acme", "primary", [L.READ_MESSAGE, "CreateQueue"], queue="q1",
                                        end=NOW) == "auth=r&sig=x"
    assert json.loads(SENT[4].content) == {"accountName": "acme", "keyName": "primary", "levels": ["r", "CreateQueue"],
                                           "endTime": "2016-04-25T16:46:52Z", "queueName": "q1"}
    with AdminClient("http://cq:8081", transport=recorder(404, {"reason": "NotFound"})) as admin, \
            pytest.raises(CassieqError) as raised:
        admin.get_account("nobody")
    assert raised.value.status == 404 and raised.value.body == {"reason": "NotFound"}


def test_a_time_its_zone_pushes_out_of_the_calendar_is_malformed():
    from lab.backends.cassieq.core.auth import parse_iso

    for text in ("0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-10:00"):
        with pytest.raises(ValueError, match="outside the years"):
            parse_iso(text)
