"""Queuefka's queue semantics: consumer groups, delivery modes, retention, the core in both
worlds (crashes in the sim world), the HTTP front through a real client, and the runner."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from lab.backends.queuefka import Reader, Writer
from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.embedded import Consumer, apply_retention, committed_offsets
from lab.backends.queuefka.node import boot_queuefka
from lab.worlds.live.disk import FileStore
from lab.worlds.live import LiveWorld
from lab.worlds.live.processes import parse_ready
from lab.design.runtime import File, Handle, Store
from lab.design.storage import RuntimeStore
from lab.experiments.runner import run
from lab.workloads.spec import parse_workload
from models.world import SimWorld


def fill(topic: Path, count: int, hint: int = 1 << 20) -> list[int]:
    with Writer(topic, hint) as w:
        return w.write_many([b"m%04d" % i for i in range(count)])


# -- consumer groups on plain files ---------------------------------------------------------

def test_committed_offsets_survive_a_restart(tmp_path: Path):
    topic = tmp_path / "t"
    addresses = fill(topic, 20)
    with Consumer(topic, "billing") as c:
        assert [p for _, p in c.poll(5)] == [b"m%04d" % i for i in range(5)]
        c.commit()
        c.poll(3)  # polled, never committed
    with Consumer(topic, "billing") as c:
        assert c.committed == addresses[5]
        assert c.poll(1) == [(addresses[5], b"m0005")]  # at-least-once: the 3 come again
    with Consumer(topic, "audit") as other:  # groups are independent
        assert other.poll(1)[0][1] == b"m0000"
    # a group exists from its first commit: audit only read, so it holds nothing back
    assert committed_offsets(FileStore(topic)) == {"billing": addresses[5]}
    assert not (topic / "audit.group").exists()


def test_at_most_once_commits_before_returning(tmp_path: Path):
    topic = tmp_path / "t"
    addresses = fill(topic, 10)
    with Consumer(topic, "g", mode="at-most-once") as c:
        c.poll(4)  # "crash" while processing: never committed by the caller
    with Consumer(topic, "g", mode="at-most-once") as c:
        assert c.poll(1) == [(addresses[4], b"m0004")]  # the 4 are not redelivered


def test_commit_log_compacts_and_keeps_the_latest(tmp_path: Path):
    topic = tmp_path / "t"
    addresses = fill(topic, 6000)
    with Consumer(topic, "g") as c:
        for _ in range(6000):
            c.poll(1)
            c.commit()
    group_file = topic / "g.group"
    assert group_file.stat().st_size < 6000 * 16  # compacted (a commit record is 16 bytes)
    with Consumer(topic, "g") as c:
        assert c.committed == addresses[-1] + 13 and c.poll(1) == []


def test_a_torn_commit_is_ignored(tmp_path: Path):
    topic = tmp_path / "t"
    addresses = fill(topic, 5)
    with Consumer(topic, "g") as c:
        c.poll(2)
        c.commit()
    with open(topic / "g.group", "ab") as f:
        f.write(b"\x08\x00\x00\x00\x01")  # a commit cut short by a crash
    with Consumer(topic, "g") as c:
        assert c.committed == addresses[2]
        c.poll(1)
        c.commit()
    with Consumer(topic, "g") as c:
        assert c.committed == addresses[3]


def test_bad_group_names_and_modes(tmp_path: Path):
    for name in ("", "a/b", "..", "x" * 65, "-lead"):
        with pytest.raises(ValueError, match="group name"):
            Consumer(tmp_path / "t", name)
    with pytest.raises(ValueError, match="mode"):
        Consumer(tmp_path / "t", "g", mode="exactly-once")


def test_retention_deletes_only_consumed_old_segments(tmp_path: Path):
    topic = tmp_path / "t"
    addresses = fill(topic, 10, hint=10)  # one 13-byte record per segment
    store = FileStore(topic)
    assert apply_retention(store, max_age=3600) == []  # too young
    with Consumer(topic, "slow") as slow, Consumer(topic, "fast") as fast:
        fast.poll(8)
        fast.commit()
        slow.poll(3)
        slow.commit()
    old = time.time() - 7200
    for p in topic.glob("*.slab"):
        os.utime(p, (old, old))
    deleted = apply_retention(store, max_age=3600)
    assert deleted == [f"{a:020d}.slab" for a in addresses[:3]]  # below the slowest group only
    with Consumer(topic, "slow") as slow:
        assert slow.poll(1) == [(addresses[3], b"m0003")]
    for group in ("slow", "fast"):
        (topic / f"{group}.group").unlink()
    deleted = apply_retention(store, max_age=3600)  # no groups: age alone
    assert len(deleted) == 7 and len(list(topic.glob("*.slab"))) == 1  # never the newest


# -- the core in the sim world: crashes --------------------------------------------------------

def _sim_crash_run(fsync: str) -> tuple[list[int], list[bytes], int]:
    """Produce 50 records, commit 20 for a group, crash the node, restart; what survives."""
    world = SimWorld(seed=3)
    config = Config(fsync=fsync, segment_size_hint=200)
    cores: list[QueuefkaCore] = []

    async def boot(rt):
        cores.append(QueuefkaCore(rt, config))

    async def main(control):
        await world.start("q", boot)
        acked = []
        for i in range(50):
            acked += await cores[-1].produce("t", [b"r%02d" % i])
        fetched = await cores[-1].fetch("t", "g", 20)
        await cores[-1].commit("t", "g", fetched.next)
        world.crash("q", tear=True)
        await control.sleep(0.01)
        world.restart("q")
        await control.sleep(0.01)
        after = await cores[-1].fetch("t", "g", 100)
        recovered = [p for _, p in after.records]
        return acked, recovered, cores[-1].stats("t")["end_address"]

    return world.run(main)


def test_sim_crash_with_fsync_always_keeps_every_acknowledged_record():
    acked, recovered, end = _sim_crash_run("always")
    assert recovered == [b"r%02d" % i for i in range(20, 50)]
    assert end == acked[-1] + 11


def test_sim_crash_with_fsync_never_loses_the_unsynced_tail_but_stays_consistent():
    acked, recovered, end = _sim_crash_run("never")
    assert end < acked[-1] + 11  # acknowledged records were lost, as with the original
    # what survived is intact, and the group resumes right where its commit points
    assert recovered == [b"r%02d" % i for i in range(20, 20 + len(recovered))]


def test_sim_runs_are_deterministic():
    assert _sim_crash_run("never") == _sim_crash_run("never")


# -- the HTTP front, through a real client -------------------------------------------------------

def test_http_front_round_trip_and_clear_errors(tmp_path: Path):
    world = LiveWorld(root=tmp_path, disk_roots={"q": tmp_path / "data"})

    async def main(control):
        cores = []

        async def boot(rt):
            cores.append(await boot_queuefka(rt, Config()))

        rt = await world.start("q", boot)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{world.listening[('q', 'http')]}") as http:
                return await _exercise(http)
        finally:
            await rt.net.close()
            cores[0].close()

    world.run(main)
    # the data directory is a plain topic folder: the library reads it directly
    assert [p for _, p in Reader(tmp_path / "data" / "orders")] == [b"first", b"", b"third"]


async def _exercise(http: httpx.AsyncClient) -> None:
    addresses = []
    for body in (b"first", b"", b"third"):
        r = await http.post("/topics/orders/messages", content=body)
        assert r.status_code == 201
        addresses.append(r.json()["address"])
    assert addresses == [0, 13, 21]
    r = await http.get("/topics/orders/messages", params={"group": "g", "max": 2})
    assert r.status_code == 200
    assert r.json() == {"records": [{"address": 0, "payload": "Zmlyc3Q="}, {"address": 13, "payload": ""}], "next": 21}
    r = await http.post("/topics/orders/groups/g/commit", json={"address": 21})
    assert r.json() == {"committed": 21}
    r = await http.get("/topics/orders/messages", params={"group": "g", "format": "raw"})
    assert (r.status_code, r.content, r.headers["Queuefka-Address"], r.headers["Queuefka-Next"]) == (200, b"third", "21", "34")
    r = await http.get("/topics/orders/messages", params={"group": "g", "format": "raw", "wait": "0.05"})
    assert r.status_code == 204
    stats = (await http.get("/topics/orders")).json()
    assert stats["end_address"] == 34 and stats["groups"]["g"] == {"committed": 21, "lag_bytes": 13, "position": 34}
    bad = [
        (await http.get("/topics/orders/messages"), 400, "group"),
        (await http.get("/topics/orders/messages", params={"group": "g", "max": "0"}), 400, "max"),
        (await http.get("/topics/orders/messages", params={"group": "g", "max": "ten"}), 400, "not a number"),
        (await http.get("/topics/orders/messages", params={"group": "g", "wait": "-1"}), 400, "wait"),
        (await http.get("/topics/orders/messages", params={"group": "g", "mode": "twice"}), 400, "mode"),
        (await http.get("/topics/orders/messages", params={"group": "bad name!"}), 400, "group name"),
        (await http.post("/topics/bad%20topic/messages", content=b"x"), 400, "topic name"),
        (await http.post("/topics/orders/groups/g/commit", content=b"{not json"), 400, "JSON"),
        (await http.post("/topics/orders/groups/g/commit", json={"address": "21"}), 400, "integer"),
        (await http.post("/topics/orders/groups/g/commit", json={"address": 5}), 400, "not a record address"),
        (await http.post("/topics/orders/groups/g/commit", json={"address": 999}), 400, "not in topic"),
        (await http.get("/topics/unknown"), 404, "no topic"),
    ]
    for response, status, words in bad:
        assert response.status_code == status, response.text
        assert words in response.json()["error"]
    assert (await http.get("/nowhere")).status_code == 404
    assert (await http.delete("/topics/orders/messages")).status_code == 405
    # refused requests changed nothing
    assert (await http.get("/topics/orders")).json()["groups"]["g"]["committed"] == 21


def test_lab_serve_queuefka_serves_until_terminated(tmp_path: Path):
    server = subprocess.Popen([sys.executable, "-m", "lab.cli", "serve", "queuefka", "--port", "0",
                               "--data-dir", str(tmp_path / "d")], stdout=subprocess.PIPE, text=True)
    try:
        design, ports = parse_ready(server.stdout.readline())
        assert design == "queuefka"
        url = f"http://127.0.0.1:{ports['http']}"
        assert httpx.post(f"{url}/topics/t/messages", content=b"via serve").status_code == 201
    finally:
        server.terminate()
        assert server.wait(10) == 130  # a clean stop (the data below is there), ended as interrupted
    assert list(Reader(tmp_path / "d" / "t")) == [(0, b"via serve")]
    bad = subprocess.run([sys.executable, "-m", "lab.cli", "serve", "queuefka", "--data-dir", str(tmp_path),
                          "--fsync", "often"], capture_output=True, text=True)
    assert bad.returncode == 2 and "fsync policy 'often'" in bad.stderr and "Traceback" not in bad.stderr


# -- the runner, both worlds --------------------------------------------------------------------

RELIABLE = {"name": "qf", "queues": 2, "producers": 2, "consumers": 3, "message_size": 100, "rate": 2000,
            "duration": 1.0, "warmup": 0.2, "ack": "reliable", "seed": 4}


@pytest.mark.parametrize("world", ["sim", "live"])
@pytest.mark.parametrize("ack", ["auto", "reliable"])
def test_runner_valid_in_both_worlds(tmp_path: Path, world: str, ack: str):
    result = run(parse_workload({**RELIABLE, "ack": ack}), "queuefka", world, out=tmp_path / world, progress=False)
    assert result.check.valid, result.check.line()
    assert result.check.counts.ok == result.check.counts.attempts > 1000
    assert result.check.counts.duplicated == 0  # no crash, no session timeout: nothing redelivered


CRASH = {**RELIABLE, "duration": 2.0, "faults": [{"fault": "crash", "at": 1.0, "duration": 0.2, "target": "servers"}]}


def test_a_crash_loses_acknowledged_puts_unless_the_log_fsyncs(tmp_path: Path):
    never = run(parse_workload(CRASH), "queuefka", "sim", out=tmp_path / "never", progress=False)
    always = run(parse_workload(CRASH), "queuefka", "sim", out=tmp_path / "always", progress=False,
                 options={"fsync": "always"})
    assert not never.check.valid and never.check.counts.lost > 0  # the original's durability
    assert always.check.valid and always.check.counts.lost == 0
    assert always.check.counts.duplicated > 0  # at-least-once: uncommitted deliveries come again


@pytest.mark.parametrize("kind", ["sim", "live"])
def test_the_broker_lists_its_topics_through_a_store_at_the_disk_root(kind: str, tmp_path: Path):
    """The core reaches files through the Store alone: a RuntimeStore at "" or "." is the
    disk's root in both worlds, and a folder without segments is no topic. Both Stores
    (on a Runtime disk, on plain files) and the worlds' files implement the one port."""
    world = SimWorld(seed=3) if kind == "sim" else LiveWorld(seed=3, root=tmp_path)

    async def body(rt):
        core = QueuefkaCore(rt)
        await core.produce("orders", [b"a"])
        await core.produce("audit", [b"b"])
        notes = RuntimeStore(rt, "notes")
        notes.open("readme").append(b"x")
        ports = [isinstance(notes, Store), isinstance(notes.open("readme"), Handle),
                 isinstance(rt.disk.open("notes/readme"), File)]
        try:
            return core.topic_names(), [RuntimeStore(rt, root).names() for root in ("", ".")], ports
        finally:
            core.close()

    topics, roots, ports = world.run(body)
    assert ports == [True, True, True]
    plain = FileStore(tmp_path / "plain", create=True)
    assert isinstance(plain, Store) and isinstance(plain.open("x"), Handle)
    assert topics == ["audit", "orders"]
    assert roots == [["audit", "notes", "orders"]] * 2
