"""The simulated Cassandra (models/cassandra.py): CassieQ's store as a sim-world node —
every statement through the network, LWTs as Paxos rounds, replica lag a read at ONE can
see, late and ghost message writes, and a partition from the store as a StoreError."""

from __future__ import annotations

import pytest

from lab.backends.cassieq.core.memory_store import MemoryStore
from lab.backends.cassieq.core.store import SCHEMA, Condition, Consistency, StoreError
from models.cassandra import CassandraModel, SimCassandraNode, SimCassandraStore
from models.world import SimWorld

KEY = {"queueid": "a:q_v0"}
BUCKET = {"queueid": "a:q_v0", "bucket_num": 0}


def message(monoton: int, **values):
    return {**BUCKET, "monoton": monoton, "message": f"m{monoton}", "version": 1, "acked": False,
            "next_visible_on": 0, "delivery_count": 0, "tag": "t", **values}


KEYS = {t.name: t.key for t in SCHEMA.values()}


def in_sim(body, model: CassandraModel | None = None, seed: int = 3):
    world = SimWorld(seed=seed)
    model = model or CassandraModel()
    nodes: list[SimCassandraNode] = []

    async def boot(rt):
        nodes.append(SimCassandraNode(rt, model, [MemoryStore() for _ in range(model.replicas)], KEYS))
        await rt.net.serve(nodes[0].handle)

    async def main(control):
        await world.start("cassandra", boot)
        api = world.node("api-0")
        return await body(api, SimCassandraStore(api, "cassandra", StoreError, timeout=1.0), world, nodes[0])

    return world.run(main)


def test_every_statement_goes_through_the_store_node():
    async def body(rt, store, world, node):
        await store.insert("monoton", {**KEY, "value": 0}, if_not_exists=True)
        assert not await store.insert("monoton", {**KEY, "value": 9}, if_not_exists=True)
        assert await store.update("monoton", KEY, {"value": 1}, conditions=[Condition("value", "=", 0)])
        assert not await store.update("monoton", KEY, {"value": 5}, conditions=[Condition("value", "=", 0)])
        for m in (2, -2, 0):
            await store.insert("message", message(m))
        order = [r["monoton"] for r in await store.read_partition("message", BUCKET)]
        await store.add("queue_stats", {"queue_stats_id": "s"}, "size", 3)
        await store.add("queue_stats", {"queue_stats_id": "s"}, "size", -1)
        size = (await store.read("queue_stats", {"queue_stats_id": "s"}))["size"]
        assert await store.delete("message", {**BUCKET, "monoton": 2}, conditions=[Condition("version", "=", 1)])
        await store.delete_partition("message", BUCKET)
        return (await store.read("monoton", KEY))["value"], order, size, await store.read_partition("message", BUCKET), \
            len(await store.read_all("monoton"))

    assert in_sim(body) == (1, [-2, 0, 2], 2, [], 1)


def test_a_lwt_costs_a_paxos_round_and_a_plain_write_one_round_trip():
    async def body(rt, store, world, node):
        t0 = rt.now()
        await store.insert("monoton", {**KEY, "value": 0})
        plain = rt.now() - t0
        t0 = rt.now()
        await store.update("monoton", KEY, {"value": 1}, conditions=[Condition("value", "=", 0)])
        return plain, rt.now() - t0

    plain, lwt = in_sim(body, CassandraModel(lwt_round_trips=4))
    assert lwt > 2.5 * plain, (plain, lwt)
    plain1, lwt1 = in_sim(body, CassandraModel(lwt_round_trips=1))
    assert lwt1 < 2 * plain1, (plain1, lwt1)


def test_a_read_at_one_may_see_a_lagging_replica_and_quorum_never_does():
    async def body(rt, store, world, node):
        stale_one = stale_quorum = 0
        for i in range(60):
            key = {"queueid": f"q{i}"}
            await store.insert("monoton", {**key, "value": 1})
            await store.update("monoton", key, {"value": 2})
            one = await store.read("monoton", key, consistency=Consistency.ONE)
            quorum = await store.read("monoton", key, consistency=Consistency.QUORUM)
            stale_one += one is None or one["value"] != 2
            stale_quorum += quorum is None or quorum["value"] != 2
        await rt.sleep(5.0)  # the lag is over: every replica has caught up
        caught_up = [(await store.read("monoton", {"queueid": f"q{i}"}, consistency=Consistency.ONE))["value"]
                     for i in range(60)]
        return stale_one, stale_quorum, set(caught_up)

    stale_one, stale_quorum, caught_up = in_sim(body, CassandraModel(replicas=3, replica_lag_ms=200))
    assert stale_quorum == 0 and 5 <= stale_one <= 40 and caught_up == {2}, (stale_one, stale_quorum)


@pytest.mark.parametrize("model, kept", [(CassandraModel(late_write_p=1.0, late_write_s=20.0), [0]),
                                          (CassandraModel(ghost_write_p=1.0), [])])
def test_a_late_message_write_applies_after_its_caller_gave_up_and_a_ghost_never(model, kept):
    async def body(rt, store, world, node):
        with pytest.raises(StoreError):  # no answer within the caller's 1 s
            await store.insert("message", message(0), if_not_exists=True)
        seen_early = await store.read_partition("message", BUCKET)
        await rt.sleep(60)
        rows = [r["monoton"] for r in await store.read_partition("message", BUCKET)]
        on_time = await store.insert("monoton", {**KEY, "value": 0}, if_not_exists=True)  # not a message row
        return seen_early, rows, on_time, node.late, node.ghosts

    seen_early, rows, on_time, late, ghosts = in_sim(body, model)
    assert seen_early == [] and rows == kept and on_time
    assert (late, ghosts) == ((1, 0) if kept else (0, 1))


def test_a_partition_from_the_store_is_a_store_error_and_heals():
    async def body(rt, store, world, node):
        world.block("api-0", "cassandra")
        with pytest.raises(StoreError):
            await store.read("monoton", KEY)
        world.unblock("api-0", "cassandra")
        return await store.insert("monoton", {**KEY, "value": 0}, if_not_exists=True)

    assert in_sim(body) is True


def test_bad_model_parameters_are_named():
    for bad, name in (({"replicas": 0}, "replicas"), ({"late_write_p": 2}, "late_write_p"),
                      ({"replica_lag_ms": -1}, "replica_lag_ms")):
        with pytest.raises(ValueError, match=name):
            CassandraModel(**bad)
