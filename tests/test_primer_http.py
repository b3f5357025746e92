"""Primer's client API over HTTP, in the sim world: three nodes booted as ``lab serve
primer`` boots them (``boot_primer``), and a client node speaking HTTP/1.1 to their
``http`` ports over simulated links. Every route's happy path, the node's refusals as
their statuses, and every bad input refused with a 400 ``{"error": ...}`` naming what is
wrong — with nothing written: no file on any node's disk changes, no queue or log appears."""

from __future__ import annotations

import base64
import json
from typing import Any, Awaitable, Callable
from urllib.parse import quote

import pytest

from lab.backends.primer.core.config import NodeConfig
from lab.backends.primer.core.primer_node import PrimerNode
from lab.backends.primer.node import boot_primer
from lab.design.runtime import Runtime
from lab.design.http_client import HttpReply, ResponseReader, encode_request
from models.world import SimWorld

NODES = ("n1", "n2", "n3")


class Client:
    """HTTP/1.1 to the nodes' ``http`` ports, from the sim node ``client``."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.connections = {name: rt.net.connect(name, "http") for name in NODES}

    async def __call__(self, method: str, target: str, body: Any = b"", node: str = "n1",
                       timeout: float = 5.0) -> HttpReply:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        request = encode_request(method, target, node, body)
        return await self.connections[node].exchange(request, ResponseReader(method), timeout)


def body(reply: HttpReply) -> Any:
    return json.loads(reply.body)


Exercise = Callable[[Client, dict[str, PrimerNode], SimWorld], Awaitable[Any]]


def run(exercise: Exercise, seed: int = 7, **settings: Any) -> Any:
    """``exercise(client, nodes, world)`` against three fresh nodes (append-only files on,
    W=2 unless ``settings`` say otherwise)."""
    world = SimWorld(seed=seed)
    nodes: dict[str, PrimerNode] = {}
    options = {"replicas": 2, "persistence": "aof", **settings}

    async def main(control: Runtime) -> Any:
        for name in NODES:
            config = NodeConfig(name, peers=tuple(n for n in NODES if n != name), **options)

            async def boot(rt: Runtime, config: NodeConfig = config) -> None:
                nodes[rt.node] = await boot_primer(rt, config)

            await world.start(name, boot)
        await control.sleep(0.5)  # the members see each other's heartbeats
        return await exercise(Client(world.node("client")), nodes, world)

    return world.run(main, until=600)


def disks(world: SimWorld) -> dict[str, dict[str, bytes]]:
    """Every node's files and their bytes."""
    return {name: {path: bytes(f.data) for path, f in world.nodes[name].disk.files.items()} for name in NODES}


def state(nodes: dict[str, PrimerNode]) -> dict[str, Any]:
    """What each node's ``GET /cluster`` says of its queues and logs."""
    return {name: {key: node.cluster()[key] for key in ("queues", "logs")} for name, node in nodes.items()}


# -- queues: the happy paths --------------------------------------------------------------------

def test_a_put_on_one_node_is_got_on_another_and_acked_once():
    async def exercise(http: Client, nodes, world) -> None:
        r = await http("POST", "/queues/jobs/messages", b"\x00hello\xff", node="n1")
        assert r.status == 201, r.body
        message_id = body(r)["id"]
        assert isinstance(message_id, str) and message_id
        await http.rt.sleep(0.5)  # the add is broadcast through the cluster metadata
        r = await http("GET", "/queues/jobs", node="n3")
        assert (r.status, body(r)) == (200, {"queue": "jobs", "backlog": 1})
        r = await http("GET", "/queues/jobs/messages", node="n3")
        assert r.status == 200, r.body
        got = body(r)
        assert got["id"] == message_id and base64.b64decode(got["payload"]) == b"\x00hello\xff"
        assert isinstance(got["receipt"], str) and got["receipt"]
        r = await http("POST", f"/queues/jobs/messages/{quote(message_id, safe='')}/ack",
                       {"receipt": got["receipt"]}, node="n3")
        assert r.status == 204 and r.body == b""
        await http.rt.sleep(0.5)  # the ACK is broadcast
        for name in NODES:
            r = await http("GET", "/queues/jobs", node=name)
            assert body(r)["backlog"] == 0, name
            assert (await http("GET", "/queues/jobs/messages", node=name)).status == 204

    run(exercise)


def test_a_released_message_can_be_got_again_at_once():
    async def exercise(http: Client, nodes, world) -> None:
        message_id = body(await http("POST", "/queues/jobs/messages", b"again"))["id"]
        first = body(await http("GET", "/queues/jobs/messages?mode=at-least-once"))
        assert first["id"] == message_id
        assert (await http("GET", "/queues/jobs/messages")).status == 204  # leased: not got twice
        r = await http("POST", f"/queues/jobs/messages/{message_id}/release", {"receipt": first["receipt"]})
        assert r.status == 204, r.body
        second = body(await http("GET", "/queues/jobs/messages"))
        assert second["id"] == message_id and base64.b64decode(second["payload"]) == b"again"

    run(exercise)


def test_a_queue_fanned_out_to_groups_gives_each_group_every_message():
    async def exercise(http: Client, nodes, world) -> None:
        r = await http("PUT", "/queues/news/groups/mail")
        assert (r.status, body(r)) == (201, {"queue": "news", "group": "mail"})
        assert (await http("PUT", "/queues/news/groups/push", node="n2")).status == 201
        await http.rt.sleep(0.5)
        assert (await http("PUT", "/queues/news/groups/mail", node="n3")).status == 200  # it exists
        message_id = body(await http("POST", "/queues/news/messages", b"story", node="n2"))["id"]
        await http.rt.sleep(0.5)
        for group in ("mail", "push"):
            r = await http("GET", f"/queues/news?group={group}", node="n3")
            assert body(r) == {"queue": "news", "group": group, "backlog": 1}
            got = body(await http("GET", f"/queues/news/messages?group={group}", node="n3"))
            assert got["id"] == f"{message_id}@{group}" and base64.b64decode(got["payload"]) == b"story"
            r = await http("POST", f"/queues/news/messages/{quote(got['id'], safe='')}/ack", {"receipt": got["receipt"]})
            assert r.status == 204
        assert (await http("GET", "/queues/news/messages")).status == 204  # the queue itself kept no copy

    run(exercise)


def test_an_at_most_once_get_has_no_receipt_and_deletes_the_message():
    async def exercise(http: Client, nodes, world) -> None:
        await http("POST", "/queues/jobs/messages", b"once")
        r = await http("GET", "/queues/jobs/messages?mode=at-most-once")
        assert r.status == 200 and body(r)["receipt"] is None
        assert base64.b64decode(body(r)["payload"]) == b"once"
        assert body(await http("GET", "/queues/jobs"))["backlog"] == 0
        assert (await http("GET", "/queues/jobs/messages?wait=0.2")).status == 204

    run(exercise)


def test_a_get_that_waits_returns_a_message_put_meanwhile_and_an_empty_one_waits_its_time():
    async def exercise(http: Client, nodes, world) -> tuple[float, float]:
        start = http.rt.now()
        assert (await http("GET", "/queues/jobs/messages?wait=0.3")).status == 204
        waited = http.rt.now() - start

        async def put_later() -> None:
            await http.rt.sleep(0.1)
            await http("POST", "/queues/jobs/messages", b"late", node="n2")

        http.rt.spawn(put_later())
        start = http.rt.now()
        r = await http("GET", "/queues/jobs/messages?wait=5", node="n1")
        assert r.status == 200 and base64.b64decode(body(r)["payload"]) == b"late"
        return waited, http.rt.now() - start

    waited, took = run(exercise)
    assert 0.3 <= waited < 0.5 and took < 2.0


# -- the node's refusals keep their statuses ----------------------------------------------------

def test_the_nodes_refusals_are_their_statuses_with_a_json_error():
    async def exercise(http: Client, nodes, world) -> None:
        message_id = body(await http("POST", "/queues/jobs/messages", b"x"))["id"]
        got = body(await http("GET", "/queues/jobs/messages"))
        r = await http("POST", f"/queues/jobs/messages/{message_id}/ack", {"receipt": "no-granter-in-it"})
        assert r.status == 400 and "receipt" in body(r)["error"]  # the node's BadRequest
        r = await http("POST", f"/queues/jobs/messages/{message_id}/ack", {"receipt": got["receipt"]})
        assert r.status == 204
        r = await http("POST", f"/queues/jobs/messages/{message_id}/release", {"receipt": got["receipt"]})
        assert r.status == 409 and isinstance(body(r)["error"], str)  # the lease is over: Conflict
        r = await http("POST", "/logs/nolog/records", b"x")
        assert r.status == 404 and "nolog" in body(r)["error"]
        r = await http("GET", "/logs/nolog/records?group=g")
        assert r.status == 404 and "nolog" in body(r)["error"]
        assert (await http("PUT", "/logs/events", {"retention_s": 60})).status == 201
        r = await http("POST", "/logs/events/groups/g/checkpoint", {"offset": 5})
        assert r.status == 400 and "watermark" in body(r)["error"]  # nothing appended yet

    run(exercise)


# -- logs ---------------------------------------------------------------------------------------

def test_a_log_is_created_once_appended_read_by_a_group_and_checkpointed():
    async def exercise(http: Client, nodes, world) -> None:
        r = await http("PUT", "/logs/events", {"retention_s": 3600})
        assert r.status == 201, r.body
        assert (await http("PUT", "/logs/events", {"retention_s": 3600}, node="n2")).status == 200
        r = await http("PUT", "/logs/events", {"retention_s": 60}, node="n3")
        assert r.status == 409 and isinstance(body(r)["error"], str)
        offsets = []
        for payload in (b"a", b"b", b"c"):
            r = await http("POST", "/logs/events/records", payload)
            assert r.status == 201, r.body
            offsets.append(body(r)["offset"])
        assert offsets == sorted(offsets) and len(set(offsets)) == 3
        r = await http("GET", "/logs/events/records?group=billing&max=2")
        assert r.status == 200, r.body
        page = body(r)
        assert [base64.b64decode(rec["payload"]) for rec in page["records"]] == [b"a", b"b"]
        assert [rec["offset"] for rec in page["records"]] == offsets[:2]
        assert page["high_watermark"] >= offsets[-1]
        r = await http("POST", "/logs/events/groups/billing/checkpoint", {"offset": offsets[1]})
        assert r.status == 204, r.body
        rest = body(await http("GET", "/logs/events/records?group=billing"))
        assert [base64.b64decode(rec["payload"]) for rec in rest["records"]] == [b"c"]
        other = body(await http("GET", "/logs/events/records?group=audit"))  # another group: from the start
        assert len(other["records"]) == 3

    run(exercise)


def test_the_cluster_view_lists_every_member_up():
    async def exercise(http: Client, nodes, world) -> None:
        r = await http("GET", "/cluster", node="n2")
        assert r.status == 200
        view = body(r)
        assert view["node"] == "n2"
        states = {m["name"]: m["state"] for m in view["members"]}
        assert states == {"n1": "up", "n2": "self", "n3": "up"}

    run(exercise)


# -- bad input: a 400 naming what is wrong, nothing written -------------------------------------

#: (method, target, body, a word the error must hold)
BAD_REQUESTS = [
    # names the node could not store
    ("POST", "/queues/a%20b/messages", b"x", "queue"),
    ("POST", "/queues/" + "q" * 201 + "/messages", b"x", "queue"),
    ("GET", "/queues/..", b"", "queue"),
    ("GET", "/queues/a%2Fb/messages", b"", "queue"),
    ("PUT", "/logs/a%20b", {"retention_s": 10}, "log"),
    ("POST", "/logs/a%20b/records", b"x", "log"),
    ("GET", "/logs/events/records?group=a%20b", b"", "group"),
    ("POST", "/logs/events/groups/a%20b/checkpoint", {"offset": 0}, "group"),
    # a get's wait and mode
    ("GET", "/queues/jobs/messages?wait=abc", b"", "wait"),
    ("GET", "/queues/jobs/messages?wait=-1", b"", "wait"),
    ("GET", "/queues/jobs/messages?wait=61", b"", "wait"),
    ("GET", "/queues/jobs/messages?wait=nan", b"", "wait"),
    ("GET", "/queues/jobs/messages?wait=inf", b"", "wait"),
    ("GET", "/queues/jobs/messages?wait=1e3", b"", "wait"),
    ("GET", "/queues/jobs/messages?wait=", b"", "wait"),
    ("GET", "/queues/jobs/messages?mode=sometimes", b"", "mode"),
    ("GET", "/queues/jobs/messages?wiat=1", b"", "wiat"),
    ("POST", "/queues/jobs/messages?delay=5", b"x", "delay"),
    # an ack's and a release's receipt
    ("POST", "/queues/jobs/messages/m1/ack", b"", "receipt"),
    ("POST", "/queues/jobs/messages/m1/ack", b"{not json", "JSON"),
    ("POST", "/queues/jobs/messages/m1/ack", [], "object"),
    ("POST", "/queues/jobs/messages/m1/ack", {}, "receipt"),
    ("POST", "/queues/jobs/messages/m1/ack", {"receipt": 5}, "receipt"),
    ("POST", "/queues/jobs/messages/m1/ack", {"receipt": ""}, "receipt"),
    ("POST", "/queues/jobs/messages/m1/ack", {"receipt": None}, "receipt"),
    ("POST", "/queues/jobs/messages/m1/ack", {"receipt": "r", "extra": 1}, "extra"),
    ("POST", "/queues/jobs/messages/m1/release", {"receipt": True}, "receipt"),
    ("POST", "/queues/jobs/messages/m1/release", b"\xff\xfe", "JSON"),
    ("POST", "/queues/jobs/messages/m1/release", b"[" * 100000, "JSON"),
    # a log's retention
    ("PUT", "/logs/events", b"", "retention_s"),
    ("PUT", "/logs/events", {}, "retention_s"),
    ("PUT", "/logs/events", {"retention_s": "10"}, "retention_s"),
    ("PUT", "/logs/events", {"retention_s": True}, "retention_s"),
    ("PUT", "/logs/events", {"retention_s": 0}, "retention_s"),
    ("PUT", "/logs/events", {"retention_s": -5}, "retention_s"),
    ("PUT", "/logs/events", {"retention_s": None}, "retention_s"),
    ("PUT", "/logs/events", b'{"retention_s": 1e999}', "retention_s"),
    ("PUT", "/logs/events", {"retention": 10}, "retention"),
    # a read's group and max
    ("GET", "/logs/events/records", b"", "group"),
    ("GET", "/logs/events/records?group=g&max=0", b"", "max"),
    ("GET", "/logs/events/records?group=g&max=1001", b"", "max"),
    ("GET", "/logs/events/records?group=g&max=abc", b"", "max"),
    ("GET", "/logs/events/records?group=g&max=-1", b"", "max"),
    ("GET", "/logs/events/records?group=g&max=true", b"", "max"),
    ("GET", "/logs/events/records?group=g&max=1.5", b"", "max"),
    # a checkpoint's offset
    ("POST", "/logs/events/groups/g/checkpoint", {"offset": -1}, "offset"),
    ("POST", "/logs/events/groups/g/checkpoint", {"offset": "3"}, "offset"),
    ("POST", "/logs/events/groups/g/checkpoint", {"offset": True}, "offset"),
    ("POST", "/logs/events/groups/g/checkpoint", {"offset": 1.5}, "offset"),
    ("POST", "/logs/events/groups/g/checkpoint", {"offset": None}, "offset"),
    ("POST", "/logs/events/groups/g/checkpoint", {}, "offset"),
    ("POST", "/logs/events/groups/g/checkpoint", b"7", "object"),
    ("GET", "/cluster?verbose=1", b"", "verbose"),
    # fan-out groups
    ("PUT", "/queues/jobs/groups/a%20b", b"", "group"),
    ("PUT", "/queues/jobs/groups/mail", b"x", "body"),
    ("GET", "/queues/jobs/messages?group=a%40b", b"", "group"),
    ("GET", "/queues/jobs?group=", b"", "group"),
]


def test_every_bad_input_is_a_400_naming_it_and_writes_nothing():
    async def exercise(http: Client, nodes, world) -> list[str]:
        # a queue with a message and a log with a record, so a refused request has something to spoil
        assert (await http("POST", "/queues/jobs/messages", b"kept")).status == 201
        assert (await http("PUT", "/logs/events", {"retention_s": 3600})).status == 201
        assert (await http("POST", "/logs/events/records", b"kept")).status == 201
        await http.rt.sleep(0.5)
        files, views = disks(world), state(nodes)
        wrong = []
        for method, target, payload, word in BAD_REQUESTS:
            r = await http(method, target, payload)
            error = body(r).get("error") if r.body else None
            if r.status != 400 or not isinstance(error, str) or word.lower() not in error.lower():
                wrong.append(f"{method} {target[:60]} {payload!r:.40}: {r.status} {r.body[:120]!r}")
        await http.rt.sleep(0.5)
        assert disks(world) == files
        assert state(nodes) == views
        return wrong

    assert run(exercise) == []


def test_routes_that_do_not_exist_are_json_404s_and_405s():
    async def exercise(http: Client, nodes, world) -> None:
        r = await http("GET", "/nothing/here")
        assert r.status == 404 and "error" in body(r)
        r = await http("DELETE", "/queues/jobs")
        assert r.status == 405 and "GET" in body(r)["error"]

    run(exercise)


@pytest.mark.parametrize("mode", ["at-least-once", "at-most-once"])
def test_a_get_from_an_empty_queue_is_a_204_with_no_body(mode: str):
    async def exercise(http: Client, nodes, world) -> HttpReply:
        return await http("GET", f"/queues/empty/messages?mode={mode}&wait=0")

    r = run(exercise)
    assert r.status == 204 and r.body == b""
