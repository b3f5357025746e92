"""Queuefka's HTTP front, hardened: refused requests write nothing, unknown topics are 404s,
groups are created and deleted explicitly, every error is JSON, slow headers are cut off.

Each test serves a real core on the live world behind its HTTP front (``wire.http``, the
node's ``http`` port on loopback) and talks to it with httpx (or a raw socket)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx

from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.driver import SERVER, QueuefkaClient
from lab.backends.queuefka.node import boot_queuefka
from lab.worlds.live import LiveWorld
from models.world import SimWorld

Exercise = Callable[[httpx.AsyncClient, QueuefkaCore, int], Awaitable[Any]]


def serve(tmp_path: Path, exercise: Exercise, config: Config | None = None, **http: Any) -> Any:
    """Run ``exercise(client, core, port)`` against a fresh server over ``tmp_path/data``."""
    world = LiveWorld(root=tmp_path, disk_roots={"q": tmp_path / "data"})

    async def main(_control):
        cores: list[QueuefkaCore] = []

        async def boot(rt):
            cores.append(await boot_queuefka(rt, config or Config(), **http))

        rt = await world.start("q", boot)
        port = world.listening[("q", "http")]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                return await exercise(client, cores[0], port)
        finally:
            await rt.net.close()
            cores[0].close()

    return world.run(main)


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# -- 1. a refused commit writes nothing ----------------------------------------------------------

def test_a_refused_commit_writes_nothing(tmp_path: Path):
    data = tmp_path / "data"

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> None:
        assert (await http.post("/topics/t/messages", content=b"one")).status_code == 201
        before = files(data)
        for address in (999, 5, -1):  # past the end, inside a record, negative
            r = await http.post("/topics/t/groups/billing/commit", json={"address": address})
            assert r.status_code == 400, r.text
        r = await http.post("/topics/nosuch/groups/billing/commit", json={"address": 0})
        assert r.status_code == 404 and "no topic" in r.json()["error"]
        assert files(data) == before  # no billing.group, no nosuch/ folder
        assert "billing" not in core.topics["t"].groups  # nor a group in memory
        assert (await http.get("/topics/t")).json()["groups"] == {}

    serve(tmp_path, exercise)


# -- 2. unknown topics, and what creates a group ------------------------------------------------

def test_reading_a_topic_that_does_not_exist_is_a_404_and_creates_nothing(tmp_path: Path):
    data = tmp_path / "data"

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> None:
        for params in ({"group": "g1"}, {"group": "g1", "format": "raw"}, {"group": "g1", "mode": "at-most-once"}):
            r = await http.get("/topics/nosuch/messages", params=params)
            assert r.status_code == 404 and "no topic 'nosuch'" in r.json()["error"], r.text
        assert files(data) == [] and core.topics == {}
        assert (await http.get("/topics")).json() == {"topics": []}

    serve(tmp_path, exercise)


def test_a_read_creates_no_group_and_holds_back_no_segment(tmp_path: Path):
    topic = tmp_path / "data" / "t"
    config = Config(segment_size_hint=0, retention_age=0.0)  # one record per segment

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> None:
        addresses = [(await http.post("/topics/t/messages", content=b"m%d" % i)).json()["address"] for i in range(5)]
        r = await http.get("/topics/t/messages", params={"group": "g", "max": 2})
        assert [x["address"] for x in r.json()["records"]] == addresses[:2]  # from the beginning, as before
        r = await http.get("/topics/t/messages", params={"group": "g", "max": 1})
        assert [x["address"] for x in r.json()["records"]] == addresses[2:3]  # readers of g share a position
        assert not (topic / "g.group").exists()
        assert (await http.get("/topics/t")).json()["groups"] == {}  # the stats agree with retention:
        deleted = await core.retain()  # no group holds anything back
        assert deleted == [f"t/{a:020d}.slab" for a in addresses] and list(topic.glob("*.slab"))
        r = await http.get("/topics/t/messages", params={"group": "g", "max": 5})
        assert r.json() == {"records": [], "next": addresses[-1] + 10}  # moved past the deleted segments
        r = await http.post("/topics/t/groups/g/commit", json={"address": addresses[-1] + 10})
        assert r.json() == {"committed": addresses[-1] + 10}
        assert (topic / "g.group").exists()  # the first commit creates the group
        assert (await http.get("/topics/t")).json()["groups"]["g"]["committed"] == addresses[-1] + 10

    serve(tmp_path, exercise, config)


def test_put_creates_a_group_where_asked_and_refusals_write_nothing(tmp_path: Path):
    data = tmp_path / "data"

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> None:
        addresses = [(await http.post("/topics/t/messages", content=b"m%d" % i)).json()["address"] for i in range(3)]
        end = addresses[-1] + 10
        r = await http.put("/topics/t/groups/billing")  # no body: from the beginning
        assert (r.status_code, r.json()) == (201, {"committed": 0})
        r = await http.put("/topics/t/groups/audit", json={"start": "end"})
        assert (r.status_code, r.json()) == (201, {"committed": end})
        r = await http.put("/topics/t/groups/late", json={"start": addresses[1]})
        assert (r.status_code, r.json()) == (201, {"committed": addresses[1]})
        r = await http.get("/topics/t/messages", params={"group": "late"})
        assert [x["address"] for x in r.json()["records"]] == addresses[1:2]
        groups = (await http.get("/topics/t")).json()["groups"]
        assert {g: s["committed"] for g, s in groups.items()} == {"billing": 0, "audit": end, "late": addresses[1]}
        before = files(data)
        refused = [
            (await http.put("/topics/t/groups/billing", json={"start": "end"}), 409, "already exists"),
            (await http.put("/topics/t/groups/x", json={"start": 3}), 400, "not a record address"),
            (await http.put("/topics/t/groups/x", json={"start": end + 1}), 400, "not in topic"),
            (await http.put("/topics/t/groups/x", json={"start": "middle"}), 400, "start"),
            (await http.put("/topics/t/groups/x", json={"from": 0}), 400, "start"),
            (await http.put("/topics/t/groups/x", content=b"{oops"), 400, "JSON"),
            (await http.put("/topics/t/groups/bad%20name"), 400, "group name"),
            (await http.put("/topics/nosuch/groups/x"), 404, "no topic"),
        ]
        for response, status, words in refused:
            assert response.status_code == status, response.text
            assert words in response.json()["error"]
        assert files(data) == before and "x" not in core.topics["t"].groups

    serve(tmp_path, exercise)


# -- 2. the lab's clients: a topic that does not exist yet is an empty get -----------------------

def test_the_sim_client_waits_for_a_topic_that_does_not_exist_yet():
    world = SimWorld(seed=1)

    async def boot(rt):
        await boot_queuefka(rt, Config())

    def client(node: str) -> QueuefkaClient:
        rt = world.node(node)
        return QueuefkaClient(rt, rt.net.connect(SERVER, "http"), reliable=True, timeout=1.0, prefetch=10)

    async def main(control):
        await world.start(SERVER, boot)
        consumer, producer = client("consumer"), client("producer")
        start = control.now()
        assert await consumer.get("t", 0.1) is None  # an empty get that waited, not an error
        waited = control.now() - start

        async def put_later():
            await control.sleep(0.05)
            await producer.put("t", b"first")

        control.spawn(put_later())
        delivery = await consumer.get("t", 1.0)
        await consumer.ack(delivery)
        return waited, delivery.body, control.now() - start - waited

    waited, body, took = world.run(main)
    assert 0.1 <= waited < 0.15 and body == b"first" and took < 0.1


def test_the_live_client_waits_for_a_topic_that_does_not_exist_yet(tmp_path: Path):
    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> tuple[float, bytes, float]:
        rt = core.rt.world.node("consumer")
        consumer = QueuefkaClient(rt, rt.net.connect("q", "http"), True, 1.0, 10)
        loop = asyncio.get_running_loop()
        try:
            start = loop.time()
            assert await consumer.get("t", 0.1) is None
            waited = loop.time() - start

            async def put_later():
                await asyncio.sleep(0.05)
                await http.post("/topics/t/messages", content=b"first")

            put = asyncio.ensure_future(put_later())
            delivery = await consumer.get("t", 2.0)
            await put
            await consumer.ack(delivery)
            return waited, delivery.body, loop.time() - start - waited
        finally:
            await consumer.close()

    waited, body, took = serve(tmp_path, exercise)
    assert 0.1 <= waited < 1.0 and body == b"first" and took < 1.0


# -- 3. DELETE a group ---------------------------------------------------------------------------

def test_delete_removes_a_group_so_it_holds_back_retention_no_more(tmp_path: Path):
    topic = tmp_path / "data" / "t"
    config = Config(segment_size_hint=0, retention_age=0.0)  # one record per segment

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> None:
        addresses = [(await http.post("/topics/t/messages", content=b"m%d" % i)).json()["address"] for i in range(4)]
        assert (await http.put("/topics/t/groups/billing")).status_code == 201
        assert await core.retain() == []  # billing, at the beginning, holds every segment
        r = await http.delete("/topics/t/groups/billing")
        assert (r.status_code, r.json()) == (200, {"deleted": "billing"})
        assert not list(topic.glob("billing.group*")) and "billing" not in core.topics["t"].groups
        assert (await http.get("/topics/t")).json()["groups"] == {}
        assert await core.retain() == [f"t/{a:020d}.slab" for a in addresses]
        refused = [
            (await http.delete("/topics/t/groups/billing"), 404, "no group 'billing'"),
            (await http.delete("/topics/nosuch/groups/billing"), 404, "no topic"),
            (await http.delete("/topics/t/groups/bad%20name"), 400, "group name"),
        ]
        for response, status, words in refused:
            assert response.status_code == status, response.text
            assert words in response.json()["error"]
        assert not (tmp_path / "data" / "nosuch").exists()

    serve(tmp_path, exercise, config)


def test_a_fetch_waiting_while_its_group_is_deleted_does_not_bring_it_back(tmp_path: Path):
    topic = tmp_path / "data" / "t"

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> dict:
        await http.post("/topics/t/messages", content=b"old")
        assert (await http.put("/topics/t/groups/g", json={"start": "end"})).status_code == 201
        waiting = asyncio.ensure_future(http.get("/topics/t/messages",
                                                 params={"group": "g", "wait": "5", "mode": "at-most-once"}))
        await asyncio.sleep(0.1)
        assert (await http.delete("/topics/t/groups/g")).status_code == 200
        await http.post("/topics/t/messages", content=b"new")  # wakes the fetch
        return (await asyncio.wait_for(waiting, 2)).json()

    assert serve(tmp_path, exercise)["records"] == []
    assert not list(topic.glob("g.group*"))  # an at-most-once fetch would have committed


# -- 4. every error is JSON ----------------------------------------------------------------------

def raw_exchange(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    """Send ``request`` bytes as they are; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        return answer


def test_every_error_status_is_json(tmp_path: Path):
    topic = tmp_path / "data" / "t"

    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> list:
        await http.post("/topics/t/messages", content=b"kept")
        await http.put("/topics/t/groups/g")
        seen = [
            (await http.get("/topics/t/messages"), 400),  # the front's own refusal
            (await http.get("/topics/t/messages", params={"group": "g", "max": "ten"}), 400),
            (await http.get("/nowhere"), 404),  # no route: aiohttp's page before
            (await http.get("/topics/nosuch"), 404),
            (await http.delete("/topics/t/groups/nobody"), 404),
            (await http.delete("/topics/t/messages"), 405),  # aiohttp's page before
            (await http.put("/topics/t/groups/g"), 409),
            (await http.post("/topics/t/messages", content=b"x" * 65), 413),  # aiohttp's page before
        ]
        with open(topic / f"{0:020d}.slab", "r+b") as f:  # corrupt the record on disk
            f.seek(8)
            f.write(b"K")
        seen.append((await http.get("/topics/t/messages", params={"group": "g"}), 500))
        raw = await asyncio.get_running_loop().run_in_executor(
            None, raw_exchange, port, b"GARBAGE / HTTP/1.1\r\nHost: x\r\n\r\n")  # not HTTP at all
        return seen, raw

    seen, raw = serve(tmp_path, exercise, max_payload=64)
    for response, status in seen:
        assert response.status_code == status, response.text
        assert response.headers["Content-Type"] == "application/json; charset=utf-8", (status, response.text)
        assert isinstance(response.json()["error"], str) and response.json()["error"], response.text
    by_status = {status: response for response, status in seen}
    assert by_status[405].headers["Allow"] == "GET,HEAD,POST"
    assert "use GET, HEAD, POST" in by_status[405].json()["error"]
    assert seen[2][0].json()["error"] == "nothing at /nowhere"
    assert "64" in by_status[413].json()["error"]
    assert "checksum" in by_status[500].json()["error"]
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b" 400 " in head.split(b"\r\n")[0] and b"application/json" in head
    assert json.loads(body)["error"].startswith("bad HTTP request")


# -- 5. headers that never finish ----------------------------------------------------------------

def seconds_until_closed(port: int, partial: bytes, limit: float = 5.0) -> float:
    """Send a request cut short, then wait: seconds until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as s:
        start = time.monotonic()
        s.sendall(partial)
        assert s.recv(65536) == b""  # closed without an answer (a timeout raises instead)
        return time.monotonic() - start


def test_a_request_whose_headers_never_finish_is_closed_after_the_header_timeout(tmp_path: Path):
    async def exercise(http: httpx.AsyncClient, core: QueuefkaCore, port: int) -> None:
        await http.post("/topics/t/messages", content=b"x")
        loop = asyncio.get_running_loop()
        for partial in (b"", b"GET /topics HT", b"GET /topics HTTP/1.1\r\nHost: x\r\nX-Slow: "):
            took = await loop.run_in_executor(None, seconds_until_closed, port, partial)
            assert 0.2 < took < 1.5, (partial, took)
        # a long poll takes longer than the header timeout: its headers were complete, it is not cut
        r = await http.get("/topics/t/messages", params={"group": "g", "max": 5, "wait": "0.8"})
        assert r.status_code == 200 and len(r.json()["records"]) == 1

    serve(tmp_path, exercise, header_timeout=0.3)


def test_the_header_timeout_is_a_server_setting(tmp_path: Path):
    bad = subprocess.run([sys.executable, "-m", "lab.cli", "serve", "queuefka", "--data-dir", str(tmp_path),
                          "--header-timeout", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--header-timeout 0" in bad.stderr and "Traceback" not in bad.stderr
    assert not any(tmp_path.iterdir())
