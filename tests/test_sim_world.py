"""The simulated world's physics: pauses, partitions, loss, latency, disks, crashes, restarts."""

from __future__ import annotations

import time

import pytest

from lab.design.runtime import CallTimeout
from models.config import SimConfig
from models.disk import DiskModel
from models.latency import LatencyModel
from models.world import SIM_EPOCH_NS, SimWorld

MS = 1_000_000


def constant(ms: float) -> SimConfig:
    return SimConfig(latency=LatencyModel(dist="constant", ms=ms))


async def echo_server(world: SimWorld, name: str = "server", log: list | None = None):
    async def boot(node):
        async def handler(source, message):
            if log is not None:
                log.append((node.now_ns(), source, message))
            return message

        await node.net.serve(handler)

    return await world.start(name, boot)


def test_a_paused_node_runs_nothing_until_resumed_while_messages_queue():
    world = SimWorld(seed=1, config=constant(1.0))
    handled: list = []
    ticks: list[int] = []

    async def main(rt):
        server = await echo_server(world, log=handled)

        async def ticker():
            while True:
                await server.sleep(0.010)
                ticks.append(server.now_ns())

        server.spawn(ticker())
        client = world.node("client")
        await rt.sleep(0.0205)
        world.pause("server")
        call = client.spawn(client.net.call("server", "during pause", timeout=5.0))
        await rt.sleep(0.5)
        assert not handled and not call.done()  # the request arrived but waits at the gate
        ticks_during_pause = [t - SIM_EPOCH_NS for t in ticks if 21 * MS < t - SIM_EPOCH_NS < 520 * MS]
        world.resume("server")
        reply = await call
        return reply, ticks_during_pause, handled[0][0] - SIM_EPOCH_NS, rt.now_ns() - SIM_EPOCH_NS

    reply, during, handled_at, now = world.run(main)
    assert reply == "during pause"
    assert during == []  # the ticker made no progress while paused
    assert handled_at == pytest.approx(520.5 * MS, abs=1)  # handled the moment the pause ended
    assert now == pytest.approx(521.5 * MS, abs=1)  # plus 1 ms for the reply


def test_symmetric_and_one_way_partitions_drop_and_heal():
    world = SimWorld(seed=1, config=constant(1.0))

    async def main(rt):
        await echo_server(world)
        client = world.node("client")
        world.net.partition(["server"], ["client"])
        with pytest.raises(CallTimeout):
            await client.net.call("server", "x", timeout=0.1)
        world.net.heal()
        world.net.block("server", "client")  # requests get through, replies do not
        with pytest.raises(CallTimeout):
            await client.net.call("server", "y", timeout=0.1)
        world.net.unblock("server", "client")
        return await client.net.call("server", "z", timeout=0.1)

    assert world.run(main) == "z"
    assert world.net.dropped["partition"] == 2


def test_a_partition_drops_messages_already_in_flight():
    world = SimWorld(seed=1, config=constant(10.0))
    handled: list = []

    async def main(rt):
        await echo_server(world, log=handled)
        client = world.node("client")
        client.net.send("server", "in flight")
        await rt.sleep(0.005)
        world.net.partition(["server"], ["client"])
        await rt.sleep(0.05)

    world.run(main)
    assert handled == [] and world.net.dropped["partition"] == 1


def test_loss_drops_about_the_given_fraction_deterministically():
    def dropped(seed: int) -> int:
        world = SimWorld(seed=seed, config=SimConfig(latency=LatencyModel(dist="constant", ms=0.1), loss=0.3))

        async def main(rt):
            await echo_server(world)
            client = world.node("client")
            for i in range(2000):
                client.net.send("server", i)
            await rt.sleep(0.1)

        world.run(main)
        return world.net.dropped["loss"]

    assert 500 < dropped(5) < 700
    assert dropped(5) == dropped(5)


def test_latency_distributions_and_fifo_links():
    world = SimWorld(seed=3, config=SimConfig(latency=LatencyModel(dist="exponential", mean_ms=1.0), fifo_links=True))
    arrivals: list = []

    async def main(rt):
        await echo_server(world, log=arrivals)
        client = world.node("client")
        for i in range(300):
            client.net.send("server", i)
        await rt.sleep(1.0)

    world.run(main)
    assert [m for _, _, m in arrivals] == list(range(300))  # FIFO despite random delays
    unordered = SimWorld(seed=3, config=SimConfig(latency=LatencyModel(dist="exponential", mean_ms=1.0),
                                                   fifo_links=False))
    arrivals.clear()
    world = unordered
    world.run(main)
    assert [m for _, _, m in arrivals] != list(range(300))  # random delays reorder
    assert sorted(m for _, _, m in arrivals) == list(range(300))


def test_latency_model_rejects_bad_specs():
    with pytest.raises(ValueError, match="dist"):
        LatencyModel(dist="gaussian")
    with pytest.raises(ValueError, match="ms"):
        LatencyModel(dist="constant", ms=-1)
    with pytest.raises(ValueError, match="unknown"):
        LatencyModel.from_spec({"dist": "constant", "millis": 3})


def test_fsync_takes_time_one_at_a_time_and_a_crash_loses_unsynced_bytes():
    world = SimWorld(seed=1, config=SimConfig(disk=DiskModel(fsync=LatencyModel(dist="constant", ms=2.0))))

    async def main(rt):
        node = world.node("db")
        f = node.disk.open("log")
        f.append(b"durable|")
        t0 = rt.now_ns()
        first = node.spawn(f.fsync())
        second = node.spawn(f.fsync())
        await first
        t1 = rt.now_ns()
        await second
        t2 = rt.now_ns()
        f.append(b"lost")
        world.crash("db")
        restarted = world.restart("db")
        return t1 - t0, t2 - t0, restarted.disk.open("log").read(0, 100)

    first, second, content = world.run(main)
    assert first == 2 * MS and second == 4 * MS  # one device queue
    assert content == b"durable|"


def test_a_torn_crash_keeps_a_prefix_of_the_unsynced_tail():
    contents = set()
    for seed in range(20):
        world = SimWorld(seed=seed)

        async def main(rt):
            f = world.node("db").disk.open("log")  # noqa: B023 (run within this iteration)
            f.append(b"synced")
            await f.fsync()
            f.append(b"0123456789")
            world.crash("db", tear=True)  # noqa: B023 (run within this iteration)
            return world.restart("db").disk.open("log").read(0, 100)  # noqa: B023 (run within this iteration)

        content = world.run(main)
        assert content.startswith(b"synced") and b"synced0123456789".startswith(content)
        contents.add(content)
    assert len(contents) > 3  # tears land at different places for different seeds


def test_crash_stops_processes_and_restart_runs_boot_again_with_a_new_random_stream():
    world = SimWorld(seed=9, config=constant(0.5))
    boots: list = []
    progress: list = []

    async def main(rt):
        async def boot(node):
            boots.append((node.incarnation, node.random.random()))

            async def work():
                while True:
                    await node.sleep(0.01)
                    progress.append(node.incarnation)

            node.spawn(work())
            await node.net.serve(lambda source, message: _answer(node, message))

        await world.start("srv", boot)
        client = world.node("client")
        await rt.sleep(0.05)
        world.crash("srv")
        before = len(progress)
        with pytest.raises(CallTimeout):
            await client.net.call("srv", "hello", timeout=0.1)
        assert len(progress) == before  # nothing of the crashed incarnation runs
        world.restart("srv")
        await rt.sleep(0.025)
        return await client.net.call("srv", "hello", timeout=0.1)

    assert world.run(main) == ("incarnation", 1, "hello")
    assert [i for i, _ in boots] == [0, 1] and boots[0][1] != boots[1][1]
    assert set(progress) == {0, 1}


async def _answer(node, message):
    return ("incarnation", node.incarnation, message)


def test_runs_with_the_same_seed_are_identical():
    def trace(seed: int) -> list:
        world = SimWorld(seed=seed, config=SimConfig(latency=LatencyModel(dist="lognormal", ms=1.0, sigma=1.0),
                                                     fifo_links=False, loss=0.1))
        log: list = []

        async def main(rt):
            await echo_server(world, log=log)
            clients = [world.node(f"c{i}") for i in range(3)]
            for i in range(100):
                clients[i % 3].net.send("server", i)
            await rt.sleep(1)

        world.run(main)
        return log

    assert trace(11) == trace(11)
    assert trace(11) != trace(12)


def test_both_worlds_count_time_from_the_unix_epoch():
    from lab.worlds.live import LiveWorld

    async def now(rt):
        return rt.now_ns()

    assert SimWorld(seed=1).run(now) == SIM_EPOCH_NS
    live = LiveWorld(seed=1).run(now)
    assert abs(live / 1e9 - time.time()) < 60  # the live clock is the wall clock's


def test_fault_verbs_compose_and_each_undo_removes_only_its_own():
    world = SimWorld(seed=3, config=constant(1.0))

    async def main(rt):
        await echo_server(world)
        client = world.node("client")

        def dropped_of(n: int) -> int:
            before = world.net.dropped["loss"]
            for _ in range(n):
                client.net.send("server", "x")
            return world.net.dropped["loss"] - before

        world.add_loss("client", "server", 0.5)
        world.add_loss("client", "server", 0.5)
        both = dropped_of(4000)  # independent drops: 1 - 0.5 * 0.5
        world.remove_loss("client", "server", 0.5)
        one = dropped_of(4000)
        world.remove_loss("client", "server", 0.5)
        none = dropped_of(1000)
        world.add_delay("client", "server", 5 * MS)
        world.add_delay("client", "server", 7 * MS)
        world.remove_delay("client", "server", 5 * MS)
        start = rt.now_ns()
        await client.net.call("server", "y", timeout=1.0)
        delayed = rt.now_ns() - start
        world.remove_delay("client", "server", 7 * MS)
        world.block("client", "server")
        world.block("client", "server")
        world.unblock("client", "server")
        still_cut = ("client", "server") in world.net.blocked
        world.unblock("client", "server")
        return both, one, none, delayed, still_cut

    both, one, none, delayed, still_cut = world.run(main)
    assert 2800 < both < 3200 and 1800 < one < 2200 and none == 0
    assert delayed == 9 * MS  # 1 + 7 ms there, 1 ms back: only the 5 ms delay was removed
    assert still_cut and not world.net.blocked and not world.net.link_loss and not world.net.link_delay


def test_swarm_seed_174_a_close_cut_by_a_split_reaches_the_server_after_the_heal(tmp_path):
    """lab swarm, kestrel seed 174 (shrunk): loss drops the reply of a reliable get, so the
    client times out and closes its connection while a split cuts it off. The close was
    one datagram and the split dropped it: the server never aborted the open read and
    p0:640 was lost. A close is TCP's FIN, retransmitted until it arrives."""
    from lab.experiments.runner import run
    from lab.workloads.spec import parse_workload

    workload = parse_workload({
        "name": "swarm-s174-shrunk", "producers": 1, "consumers": 1, "rate": 1000, "duration": 1.5,
        "ack": "reliable", "seed": 174,
        "faults": [{"fault": "loss", "at": 0.639, "duration": 0.091, "target": "servers", "p": 0.1},
                   {"fault": "partition", "at": 1.298, "duration": 0.518, "target": "all", "shape": "minority"}]})
    result = run(workload, "kestrel", "sim", out=tmp_path / "run", progress=False)
    assert result.check.counts.lost == 0 and result.verdict == "valid", result.check.reason
