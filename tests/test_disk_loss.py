"""The disk-loss fault (``lab.workloads.fault_kinds.DiskLoss``): a node crashes and its disk is destroyed.

In both worlds the node's files are gone, fsynced ones too, and it boots again on the empty
disk and serves; the history names the node and the kind. Under it a single server loses
every message it held (what its promises allow), while Primer with its default W=2 keeps
every acknowledged message when one node's disk is lost — and a put that keeps one copy
too few (the mutant ``primer-one-copy-short``) loses them, under the same fault and seeds.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from lab.backends.primer.driver import PrimerBackend
from lab.workloads.fault_base import Cast
from lab.workloads.faults import parse_fault
from lab.worlds.live import LiveWorld
from lab.worlds.live.disk import destroy, durable_ledger_path, fsync_delay_path
from lab.experiments.planting import plant
from lab.history.phases import fault_events
from lab.history.record import read_samples
from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import parse_workload
from models.config import SimConfig
from models.latency import LatencyModel
from models.world import SimWorld

MS = 1_000_000


def disk_loss(target: str, at: float = 0.0, duration: float = 0.1):
    return parse_fault({"fault": "disk-loss", "at": at, "duration": duration, "target": target})


# ----------------------------------------------------------------------------- the kind


def test_disk_loss_is_a_kind_with_crash_targets_and_no_fields_of_its_own():
    fault = parse_fault({"fault": "disk-loss", "at": 1, "duration": 0.5, "target": "server"})
    assert fault.kind == fault.fault == "disk-loss" and fault.target == ("server",)
    assert parse_fault({"fault": "disk-loss", "at": 1, "duration": 0.5}).target == ("servers",)  # the default
    with pytest.raises(ValueError, match="tear: unknown field for a disk-loss fault"):
        parse_fault({"fault": "disk-loss", "at": 1, "duration": 0.5, "tear": True})
    cast = Cast(("n1", "n2", "n3"), ("p0", "c0"))
    picks = {fault.place(cast, random.Random(f"{seed}:fault:0")).nodes for seed in range(20)}
    assert picks == {("n1",), ("n2",), ("n3",)}  # one server, drawn from the seed
    assert fault.place(cast, random.Random("7:fault:0")) == fault.place(cast, random.Random("7:fault:0"))


# ----------------------------------------------------------------------------- the sim world


def test_the_sim_world_destroys_every_file_and_the_node_boots_again_on_an_empty_disk():
    """A crash keeps what was fsynced; a disk loss keeps nothing, and the next incarnation
    boots on the empty disk and answers again."""
    world = SimWorld(seed=3, config=SimConfig(latency=LatencyModel(dist="constant", ms=0.5)))
    seen: list[tuple[int, list[str], int]] = []  # (incarnation, files at boot, size of 'log')

    async def boot(node):
        log = node.disk.open("log")
        seen.append((node.incarnation, node.disk.list(), log.size()))
        log.append(b"x" * 10)
        await log.fsync()  # durable: a crash keeps it
        node.disk.open("dir/tail").append(b"unsynced")
        await node.net.serve(lambda source, message: _answer(node, message))

    async def main(rt):
        await world.start("s0", boot)
        cast, client = Cast(("s0",), ("c0",)), world.node("c0")
        for fault in (parse_fault({"fault": "crash", "at": 0, "duration": 0.1, "target": "s0"}), disk_loss("s0")):
            await rt.sleep(0.05)
            heal = fault.start(world, fault.place(cast, random.Random(0)), rt)
            assert not world.is_up("s0")
            if fault.kind == "disk-loss":
                assert world.nodes["s0"].disk.files == {}  # gone at once, while the node is down
            heal()
            await rt.sleep(0.05)
        return await client.net.call("s0", "hello", timeout=0.1)

    assert world.run(main) == (2, "hello")  # the third incarnation serves
    assert seen == [(0, ["log"], 0), (1, ["dir", "log"], 10), (2, ["log"], 0)]  # 'log': opened at boot


async def _answer(node, message):
    return (node.incarnation, message)


def test_a_disk_loss_composes_with_a_crash_and_the_node_restarts_when_both_have_healed():
    world = SimWorld(seed=4)
    boots: list[int] = []

    async def boot(node):
        boots.append(node.incarnation)
        node.disk.open("data").append(b"abc")

    async def main(rt):
        await world.start("s0", boot)
        cast = Cast(("s0",))
        crash = parse_fault({"fault": "crash", "at": 0, "duration": 1, "target": "s0"})
        heal_crash = crash.start(world, crash.place(cast, random.Random(0)), rt)
        heal_loss = disk_loss("s0").start(world, disk_loss("s0").place(cast, random.Random(0)), rt)
        assert world.nodes["s0"].disk.files == {}  # a node already down loses its disk all the same
        heal_loss()
        assert not world.is_up("s0")  # the crash still holds it down
        heal_crash()
        await rt.sleep(0.01)
        return world.is_up("s0")

    assert world.run(main) and boots == [0, 1]


def _workload(**fields):
    """A backlog is queued at the loss: the consumers start after the restart."""
    base = {"name": "disk-loss-test", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100,
            "rate": 200, "duration": 2.0, "warmup": 0.2, "ack": "reliable", "consumer_delay": 1.5, "seed": 5,
            "faults": [{"fault": "disk-loss", "at": 1.0, "duration": 0.3, "target": "server"}]}
    return parse_workload({**base, **fields})


def test_a_single_server_loses_everything_it_held_and_serves_again_after_the_restart(tmp_path):
    result = run(_workload(), "kestrel", "sim", out=tmp_path / "r", progress=False, options={"syncJournal": "always"})
    v, samples = result.check, read_samples(result.run_dir).to_pandas()
    [start, heal] = fault_events(read_samples(result.run_dir))
    assert (start.kind, start.nodes, heal.kind, heal.nodes) == ("disk-loss", ("kestrel",), "disk-loss", ("kestrel",))
    puts = samples[(samples.op == "put") & (samples.outcome == "ok")]
    before = puts[puts.t_start_ns + puts.latency_ns < start.t_ns]
    got = samples[(samples.op == "get") & (samples.outcome == "ok")]
    # every put acknowledged before the loss is gone (fsynced: syncJournal=always), every later one delivered
    assert v.counts.lost == len(before) > 100 and not set(before.msg_id) & set(got.msg_id)
    assert set(got.msg_id) == set(puts.msg_id) - set(before.msg_id) and len(got) > 50
    assert v.judgement.verdict == Verdict.ALLOWED and "destroyed disk" in v.judgement.reason, v.line()


# ----------------------------------------------------------------------------- Primer's replication factor

SEEDS = (1, 5)  # the disk destroyed: n2's, n1's (the target drawn from the seed)


@pytest.fixture
def primers(monkeypatch):
    """Every PrimerBackend the runner makes, to ask it ``holders`` after the run."""
    made: list[PrimerBackend] = []
    init = PrimerBackend.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(PrimerBackend, "__init__", spy)
    return made


@pytest.mark.parametrize("seed", SEEDS)
def test_primer_with_files_and_two_copies_loses_nothing_when_one_disk_is_destroyed(tmp_path, primers, seed):
    result = run(_workload(), "primer", "sim", seed=seed, out=tmp_path / "r", progress=False,
                 options={"persistence": "aof"})
    v = result.check
    assert v.counts.lost == 0 and v.counts.unexpected == 0 and v.judgement.verdict in (Verdict.VALID, Verdict.ALLOWED), v.line()
    [start, _] = fault_events(read_samples(result.run_dir))
    [lost_disk] = start.nodes
    holders = primers[-1].holders("q0")
    # the loss hit copies (a third of the backlog had one on that node) and each had another
    assert sum(lost_disk in nodes for nodes in holders.values()) > 50
    assert all(len(set(nodes)) == 2 for nodes in holders.values())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_put_acknowledged_one_copy_short_loses_messages_to_the_same_disk_loss(tmp_path, primers, seed):
    with plant("primer-one-copy-short"):
        result = run(_workload(), "primer", "sim", seed=seed, out=tmp_path / "r", progress=False,
                     options={"persistence": "aof"})
    v = result.check
    [start, _] = fault_events(read_samples(result.run_dir))
    [lost_disk] = start.nodes
    assert v.counts.lost > 50, v.line()
    # the verdict holds it to W=2: one lost disk cannot explain a loss (INVALID since the
    # per-message verdict; a verdict that excused any loss under the kind said ALLOWED)
    assert v.judgement.verdict == Verdict.INVALID and "no fault explains" in v.judgement.reason, v.line()
    # each lost message had one holder, the node whose disk was destroyed
    holders = primers[-1].holders("q0")
    samples = read_samples(result.run_dir).to_pandas()
    delivered = set(samples[(samples.op == "get") & (samples.outcome == "ok")].msg_id)
    acked = set(samples[(samples.op == "put") & (samples.outcome == "ok")].msg_id)
    lost = acked - delivered
    assert len(lost) == v.counts.lost and {holders[m] for m in lost} == {(lost_disk,)}


# ----------------------------------------------------------------------------- the live world


def test_destroying_a_live_disk_removes_every_file_and_its_ledger_and_keeps_the_folder(tmp_path: Path):
    root = tmp_path / "node"
    (root / "topic").mkdir(parents=True)
    (root / "topic" / "00000.log").write_bytes(b"r" * 100)
    (root / "journal").write_bytes(b"j" * 20)
    durable_ledger_path(root).write_text('["S", "journal", 20]\n')
    fsync_delay_path(root).write_text("5000000")
    assert destroy(root) == 120
    assert root.is_dir() and list(root.iterdir()) == [] and not durable_ledger_path(root).exists()
    assert fsync_delay_path(root).read_text() == "5000000"  # the fault hook beside the disk stays
    assert destroy(tmp_path / "never-written") == 0 and (tmp_path / "never-written").is_dir()


def test_the_live_world_kills_a_kestrel_server_empties_its_data_dir_and_restarts_it_serving(tmp_path: Path):
    from lab.backends.kestrel.client import KestrelMemcacheClient

    world = LiveWorld(seed=3, root=tmp_path / "w")

    async def main(rt):
        loop = asyncio.get_running_loop()
        proc = await world.start_process("kestrel", "kestrel", ["--config", "/dev/null"])
        client = KestrelMemcacheClient(("127.0.0.1", proc.port), timeout=2)
        assert await loop.run_in_executor(None, lambda: all(client.put("jobs", b"before %d" % i) for i in range(3)))
        files = sorted(p.name for p in proc.data_dir.rglob("*") if p.is_file())
        pid = proc.pid
        fault = disk_loss("kestrel")
        heal = fault.start(world, fault.place(Cast(("kestrel",)), random.Random(0)), rt)
        destroyed = (not world.is_up("kestrel"), proc.running, list(proc.data_dir.iterdir()))
        heal()
        deadline = time.monotonic() + 20
        while True:  # the restart returns at once; the server is ready when a put goes in
            try:
                fresh = KestrelMemcacheClient(("127.0.0.1", proc.port), timeout=1)
                if await loop.run_in_executor(None, lambda: fresh.put("jobs", b"after")):  # noqa: B023 (awaited here)
                    break
            except Exception:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.1)
        taken = await loop.run_in_executor(None, lambda: [fresh.take("jobs"), fresh.take("jobs")])
        return files, pid, proc.pid, destroyed, taken

    files, pid, new_pid, destroyed, taken = world.run(main)
    assert files, "the server wrote its journal before the loss"
    assert destroyed == (True, False, [])  # killed, every file gone
    assert new_pid != pid and taken == [b"after", None]  # a new process on the empty disk: the old items are gone


@pytest.mark.slow  # three live processes with files, a restart that rejoins empty, the drain: tens of seconds
def test_a_live_primer_cluster_with_files_and_two_copies_loses_nothing_when_one_disk_is_destroyed(tmp_path):
    workload = _workload(rate=150, duration=3.0, consumer_delay=2.0,
                         faults=[{"fault": "disk-loss", "at": 1.0, "duration": 0.5, "target": "n2"}])
    result = run(workload, "primer", "live", out=tmp_path / "r", progress=False, options={"persistence": "aof"})
    v = result.check
    kinds = [(e.event, e.kind, e.nodes) for e in fault_events(read_samples(result.run_dir))]
    assert kinds == [("start", "disk-loss", ("n2",)), ("heal", "disk-loss", ("n2",))]
    assert v.counts.ok > 100 and v.counts.lost == 0 and v.judgement.verdict in (Verdict.VALID, Verdict.ALLOWED), v.line()
