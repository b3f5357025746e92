"""Primer in the sim world: replication to W nodes, reads from any node, chain order,
net-splits healed with the checker's verdicts, consumer-group checkpoints across a
restart, routing rules, and no acknowledged loss under one node's crash with files."""

from __future__ import annotations

import pytest

from lab.backends.primer.core.config import SUSPECT_AFTER_S, NodeConfig
from lab.backends.primer.core.errors import Unavailable
from lab.backends.primer.core.primer_node import PrimerNode
from lab.backends.primer.core.routing import Routes
from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import parse_workload
from models.world import SimWorld

NAMES = ("n1", "n2", "n3")


def cluster(world: SimWorld, nodes: dict, routes=None, **settings):
    """Boot three nodes on ``world``; ``nodes`` gets each PrimerNode (a restart replaces it)."""

    async def start(control):
        for name in NAMES:
            await world.start(name, booter(name))

    def booter(name):
        async def boot(rt):
            config = NodeConfig(name, tuple(n for n in NAMES if n != name), **settings)
            nodes[name] = PrimerNode(rt, config, routes)
            await nodes[name].start()
        return boot

    return start, booter


def held_on(nodes: dict, queue: str, message_id: str) -> list[str]:
    return [name for name, node in sorted(nodes.items()) if message_id in node.queues.replica.held.get(queue, {})]


@pytest.mark.parametrize("replication", ["sync", "chain"])
@pytest.mark.parametrize("w", [1, 2, 3])
def test_a_put_is_held_by_exactly_w_replicas_and_can_be_got_from_any_node(replication, w):
    world, nodes = SimWorld(seed=7), {}
    start, _ = cluster(world, nodes, replicas=w, replication=replication)

    async def main(rt):
        await start(rt)
        ids = [await nodes["n1"].put("q", b"m%d" % i) for i in range(6)]
        await rt.sleep(0.2)
        for message_id in ids:
            holders = held_on(nodes, "q", message_id)
            assert len(holders) == w and "n1" in holders
        assert [nodes[n].backlog("q") for n in NAMES] == [6, 6, 6]  # every node's index knows them
        got = await nodes["n3"].get("q")  # a node that may hold no copy reads it all the same
        assert got is not None and got.payload == b"m0"
        await nodes["n2"].ack("q", got.id, got.receipt)  # an ack on a third node
        await rt.sleep(0.2)
        assert held_on(nodes, "q", got.id) == [] and [nodes[n].backlog("q") for n in NAMES] == [5, 5, 5]

    world.run(main, until=30)


def test_put_needs_w_members_up():
    world, nodes = SimWorld(seed=1), {}
    start, _ = cluster(world, nodes, replicas=3)

    async def main(rt):
        await start(rt)
        world.crash("n3")
        await rt.sleep(SUSPECT_AFTER_S + 0.5)  # beyond suspect_after: n3 is down in n1's view
        with pytest.raises(Unavailable, match="replicas=3, but only 2 members are up"):
            await nodes["n1"].put("q", b"x")

    world.run(main, until=30)


def test_chain_replicas_store_the_messages_of_one_chain_in_put_order():
    """Each message's chain is its W replicas, shuffled: every member of a chain stores that
    chain's messages in the order its head took them."""
    world, nodes = SimWorld(seed=3), {}
    start, _ = cluster(world, nodes, replicas=3, replication="chain")

    async def main(rt):
        await start(rt)
        tasks = [rt.spawn(nodes["n2"].put("q", b"%03d" % i)) for i in range(40)]  # concurrent puts
        ids = sorted([await t for t in tasks], key=lambda i: int(i.rsplit(".", 1)[1]))  # the head's put order
        chains = {i: nodes["n2"].queues.replica.held["q"][i].copy.replicas for i in ids}
        assert len(set(chains.values())) == 2  # n2 first, then n1 and n3 in either order
        for chain in set(chains.values()):
            mine = [i for i in ids if chains[i] == chain]
            for name in chain:
                assert [i for i in nodes[name].queues.replica.held["q"] if chains[i] == chain] == mine, (chain, name)

    world.run(main, until=30)


def test_a_lease_then_release_makes_the_message_available_again_and_a_lease_holds_it_back():
    world, nodes = SimWorld(seed=4), {}
    start, _ = cluster(world, nodes, replicas=2, lease=1.0)

    async def main(rt):
        await start(rt)
        await nodes["n1"].put("q", b"only")
        await rt.sleep(0.1)
        first = await nodes["n2"].get("q")
        assert first is not None and await nodes["n3"].get("q") is None  # leased: nobody else gets it
        await nodes["n3"].release("q", first.id, first.receipt)
        again = await nodes["n3"].get("q", wait=0.5)
        assert again is not None and again.id == first.id
        await rt.sleep(1.5)  # the lease runs out: it comes back
        third = await nodes["n1"].get("q", wait=0.5)
        assert third is not None and third.id == first.id
        at_most_once = await nodes["n1"].put("q2", b"once")
        got = await nodes["n2"].get("q2", wait=0.5, at_most_once=True)
        assert got.id == at_most_once and got.receipt is None
        await rt.sleep(0.2)
        assert [nodes[n].backlog("q2") for n in NAMES] == [0, 0, 0]

    world.run(main, until=30)


def test_consumer_group_checkpoints_survive_a_restart_of_the_node():
    world, nodes = SimWorld(seed=5), {}
    start, booter = cluster(world, nodes, replicas=2, persistence="aof", range_size=4)

    async def main(rt):
        await start(rt)
        assert await nodes["n1"].create_log("events", 3600) is True
        await rt.sleep(0.1)
        offsets = [await nodes[NAMES[i % 3]].append("events", b"e%d" % i) for i in range(10)]
        assert offsets == list(range(10))
        await rt.sleep(0.2)
        assert len(nodes["n2"].logs.ranges("events")) == 3  # ranges made as the log grew
        first = await nodes["n2"].read("events", "billing", 4)
        assert [r.offset for r in first] == [0, 1, 2, 3] and first[0].payload == b"e0"
        await nodes["n2"].checkpoint("events", "billing", 3)
        await rt.sleep(0.2)
        world.crash("n2")
        await rt.sleep(0.5)
        world.restart("n2")  # its boot recovers its files, then catches up with its peers
        await rt.sleep(1.0)
        after = await nodes["n2"].read("events", "billing", 4)
        assert [r.offset for r in after] == [4, 5, 6, 7]
        other = await nodes["n3"].read("events", "audit", 100)  # another group starts at the beginning
        assert [r.offset for r in other] == list(range(10))

    world.run(main, until=60)


def test_routing_rules_reenqueue_into_another_queue():
    world, nodes = SimWorld(seed=6), {}
    routes = Routes.parse('route "orders.*" when size > 8 to "orders-big"\nroute "spam" to drop')
    start, _ = cluster(world, nodes, routes=routes)

    async def main(rt):
        await start(rt)
        await nodes["n1"].put("orders.eu", b"x" * 20)
        await nodes["n1"].put("orders.eu", b"small")
        await nodes["n1"].put("spam", b"buy")
        await rt.sleep(0.2)
        big = await nodes["n2"].get("orders-big")
        small = await nodes["n2"].get("orders.eu")
        assert big.payload == b"x" * 20 and small.payload == b"small"
        assert nodes["n3"].backlog("spam") == 0 and nodes["n1"].queues.dropped == 1

    world.run(main, until=30)


def _workload(**fields):
    base = {"name": "primer-split", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100,
            "rate": 600, "duration": 3, "warmup": 0.5, "ack": "reliable", "seed": 11}
    base.update(fields)
    return parse_workload(base)


SPLIT = [{"fault": "partition", "at": 1.0, "duration": 1.0, "target": "servers", "shape": "majority"}]


@pytest.mark.parametrize("replication", ["sync", "chain"])
@pytest.mark.parametrize("w", [1, 2])
@pytest.mark.parametrize("ack", ["reliable", "auto"])
def test_a_majority_split_healed_loses_nothing_and_the_verdict_holds(tmp_path, replication, w, ack):
    result = run(_workload(faults=SPLIT, ack=ack), "primer", "sim", out=tmp_path / "run", progress=False,
                 options={"replicas": w, "replication": replication})
    v = result.check
    assert v.counts.lost == 0 and v.counts.unexpected == 0, v.judgement.reason
    assert v.judgement.verdict in (Verdict.VALID, Verdict.ALLOWED), v.judgement.reason
    assert v.counts.enqueued > 1000


def test_one_nodes_crash_with_files_and_a_majority_of_replicas_loses_nothing_acknowledged(tmp_path):
    crash = [{"fault": "crash", "at": 1.2, "duration": 0.4, "target": "n2"}]
    result = run(_workload(faults=crash, consumer_delay=1.5), "primer", "sim", out=tmp_path / "run", progress=False,
                 options={"replicas": 2, "persistence": "aof"})
    v = result.check
    assert v.counts.lost == 0 and v.judgement.verdict == Verdict.VALID, v.judgement.reason


def test_a_crash_of_every_node_without_files_loses_and_the_promises_allow_it(tmp_path):
    crash = [{"fault": "crash", "at": 1.2, "duration": 0.3, "target": "servers"}]
    result = run(_workload(faults=crash, consumer_delay=1.5), "primer", "sim", out=tmp_path / "run", progress=False,
                 options={"replicas": 2})
    v = result.check
    assert v.counts.lost > 0 and v.judgement.verdict == Verdict.ALLOWED, v.judgement.reason


def test_same_seed_same_samples(tmp_path):
    runs = [run(_workload(faults=SPLIT), "primer", "sim", out=tmp_path / f"r{i}", progress=False) for i in range(2)]
    import pyarrow.parquet as pq

    tables = [pq.read_table(r.samples_path).drop_columns(["run_id"]) for r in runs]
    assert tables[0].equals(tables[1])
    assert runs[0].check.judgement.verdict != Verdict.INVALID


@pytest.mark.parametrize("tear", [False, True])
def test_a_crash_of_every_node_with_files_loses_nothing_acknowledged(tmp_path, tear):
    """The put's copy and its commit are fsynced before the put is acknowledged, so a
    recovery makes it visible again even when no node kept the cluster's index."""
    crash = [{"fault": "crash", "at": 1.2, "duration": 0.3, "target": "servers", "tear": tear}]
    result = run(_workload(faults=crash, consumer_delay=1.5), "primer", "sim", out=tmp_path / "run", progress=False,
                 options={"replicas": 2, "persistence": "aof"})
    v = result.check
    assert v.counts.lost == 0 and v.judgement.verdict == Verdict.VALID and v.counts.enqueued > 1000, v.judgement.reason


def test_when_a_logs_head_is_down_an_appender_takes_over_after_the_last_offset_the_chain_holds():
    world, nodes = SimWorld(seed=8), {}
    start, _ = cluster(world, nodes, replicas=2)

    async def main(rt):
        await start(rt)
        await nodes["n1"].create_log("audit", 3600)
        await rt.sleep(0.1)
        assert [await nodes["n1"].append("audit", b"a%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
        chain = nodes["n1"].logs.ranges("audit")[0]["chain"]
        assert chain[0] == "n1"
        world.crash("n1")
        await rt.sleep(1.0)  # n1 is down in the others' view
        other = next(n for n in ("n2", "n3") if n != chain[1])
        offset = await nodes[other].append("audit", b"after")
        assert offset == 5  # after what the surviving chain member holds: nothing acknowledged is overwritten
        await rt.sleep(0.2)
        ranges = nodes[chain[1]].logs.ranges("audit")
        assert [r["start"] for r in ranges] == [0, 5] and ranges[1]["chain"][0] == other
        records = await nodes[chain[1]].read("audit", "g", 10)
        assert [(r.offset, r.payload) for r in records] == [(i, b"a%d" % i) for i in range(5)] + [(5, b"after")]

    world.run(main, until=30)


def test_retention_drops_old_records_and_a_group_moves_past_them():
    world, nodes = SimWorld(seed=9), {}
    start, _ = cluster(world, nodes, replicas=3)

    async def main(rt):
        await start(rt)
        await nodes["n1"].create_log("short", 2.0)
        await rt.sleep(0.1)
        for i in range(3):
            await nodes["n1"].append("short", b"old%d" % i)
        await rt.sleep(3.0)  # older than the retention; the tidy tick has run
        await nodes["n1"].append("short", b"new")
        await rt.sleep(0.1)
        records = await nodes["n2"].read("short", "late", 10)
        assert [(r.offset, r.payload) for r in records] == [(3, b"new")]
        assert all(0 not in nodes[n].logs.records.get("short", {}) for n in NAMES)

    world.run(main, until=30)


def test_a_queue_fanned_out_to_groups_gives_every_group_every_message():
    world, nodes = SimWorld(seed=10), {}
    start, _ = cluster(world, nodes, replicas=2)

    async def main(rt):
        await start(rt)
        await nodes["n1"].put("news", b"before")  # before any group: a plain message
        assert nodes["n1"].add_group("news", "mail") is True
        assert nodes["n1"].add_group("news", "push") is True
        await rt.sleep(0.1)
        assert nodes["n2"].add_group("news", "mail") is False  # the metadata reached n2
        base = await nodes["n2"].put("news", b"story")
        await rt.sleep(0.1)
        assert nodes["n3"].backlog("news", "mail") == nodes["n3"].backlog("news", "push") == 1
        for group in ("mail", "push"):
            got = await nodes["n3"].get("news", group=group)
            assert got.payload == b"story" and got.id == f"{base}@{group}"
            await nodes["n1"].ack("news", got.id, got.receipt)  # the id says the lane
        await rt.sleep(0.1)
        assert [nodes[n].backlog("news", g) for n in NAMES for g in ("mail", "push")] == [0] * 6
        plain = await nodes["n1"].get("news")
        assert plain.payload == b"before"
        with pytest.raises(Exception, match="bad group name"):
            await nodes["n1"].get("news", group="no@pe")

    world.run(main, until=30)


# Found by a swarm of random fault mixes over seeds (each case is the seed's exact run): a
# single crash with W >= 2 lost a message whose put was acknowledged just before the node
# that took it crashed, so its Added broadcast never left; the replicas now publish such an
# orphaned copy themselves after a grace (Queues.tidy).
SWARM = {
    27: ({"replicas": 2}, 2, 1, [
        {"fault": "partition", "at": 1.93, "duration": 1.44, "target": "servers", "shape": "bridge"},
        {"fault": "partition", "at": 0.72, "duration": 1.25, "target": "servers", "shape": "one"},
        {"fault": "crash", "at": 1.31, "duration": 1.24, "target": "n1"}]),
    57: ({"replicas": 3}, 2, 2, [{"fault": "crash", "at": 1.72, "duration": 0.13, "target": "n3"}]),
    66: ({"replicas": 3}, 1, 3, [{"fault": "crash", "at": 1.43, "duration": 0.44, "target": "n2"}]),
}


@pytest.mark.parametrize("seed", sorted(SWARM))
def test_swarm_seed_one_nodes_crash_with_w_2_or_more_loses_nothing(tmp_path, seed):
    options, queues, consumers, faults = SWARM[seed]
    workload = parse_workload({"name": "swarm", "queues": queues, "producers": 2, "consumers": consumers,
                               "message_size": 50, "rate": 400, "duration": 3.5, "warmup": 0.3, "ack": "reliable",
                               "seed": seed, "faults": faults})
    v = run(workload, "primer", "sim", out=tmp_path / "run", progress=False, options=options).check
    assert v.counts.lost == 0 and v.judgement.verdict == Verdict.VALID, v.judgement.reason
