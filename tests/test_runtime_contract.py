"""The Runtime contract: the same checks against the live (asyncio) and sim (SimPy) worlds."""

from __future__ import annotations

import pytest

from lab.worlds.live import LiveWorld
from lab.design.runtime import Cancelled, CallTimeout, ProtocolDrop, RemoteError, Unreachable
from lab.worlds.shared import node_random
from models.world import SimWorld
from tests.line_protocol import LineConnection


@pytest.fixture(params=["sim", "live"])
def world(request, tmp_path):
    if request.param == "sim":
        return SimWorld(seed=7)
    return LiveWorld(seed=7, root=tmp_path)


def run(world, body):
    return world.run(lambda control: body(control, world))


def test_sleep_advances_the_clock(world):
    async def body(rt, _):
        t0, n0 = rt.now(), rt.now_ns()
        await rt.sleep(0.05)
        return rt.now() - t0, rt.now_ns() - n0

    seconds, ns = run(world, body)
    assert seconds >= 0.049 and ns >= 49_000_000
    if world.kind == "sim":
        assert ns == 50_000_000  # simulated time is exact


def test_spawn_returns_the_result_and_cancel_raises_cancelled_inside(world):
    async def body(rt, _):
        async def add(a, b):
            await rt.sleep(0.001)
            return a + b

        seen = []

        async def forever():
            try:
                await rt.sleep(3600)
            except Cancelled:
                seen.append("cancelled")
                raise

        result = await rt.spawn(add(2, 3))
        task = rt.spawn(forever())
        await rt.sleep(0.01)
        assert not task.done()
        task.cancel()
        with pytest.raises(Cancelled):
            await task
        return result, seen, task.done()

    assert run(world, body) == (5, ["cancelled"], True)


def test_events_carry_a_value_and_wait_times_out(world):
    async def body(rt, _):
        ev = rt.event()
        assert not ev.is_set()

        async def later():
            await rt.sleep(0.01)
            ev.set("hello")

        rt.spawn(later())
        value = await ev.wait()
        never = rt.event()
        t0 = rt.now()
        timed_out = await rt.wait(never, 0.02)
        waited = rt.now() - t0
        return value, ev.is_set(), timed_out, await rt.wait(ev, 1.0), waited

    value, is_set, timed_out, already, waited = run(world, body)
    assert (value, is_set, timed_out, already) == ("hello", True, False, True)
    assert waited >= 0.019


def test_random_is_seeded_per_node_the_same_in_both_worlds(world):
    async def body(rt, w):
        return [w.node("n1").random.random() for _ in range(3)]

    expected = node_random(7, "n1")
    assert run(world, body) == [expected.random() for _ in range(3)]


def test_disk_append_read_truncate_fsync_rename_list_remove(world):
    async def body(rt, w):
        disk = w.node("store").disk
        f = disk.open("journal/0001.log")
        assert f.append(b"hello ") == 0
        assert f.append(b"world") == 6
        await f.fsync()
        assert f.size() == 11 and f.read(6, 5) == b"world"
        f.truncate(5)
        assert f.read(0, 100) == b"hello"
        with pytest.raises(ValueError):
            f.truncate(99)
        f.close()
        disk.rename("journal/0001.log", "journal/0002.log")
        listing = disk.list("journal")
        assert disk.exists("journal/0002.log") and not disk.exists("journal/0001.log")
        reopened = disk.open("journal/0002.log")
        content = reopened.read(0, 100)
        reopened.close()
        disk.remove("journal/0002.log")
        for bad in ("/etc/passwd", "../outside", "a/../../b"):
            with pytest.raises(ValueError):
                disk.open(bad)
        return listing, content, disk.list("journal")

    assert run(world, body) == (["0002.log"], b"hello", [])


def test_network_call_send_errors_and_timeouts(world):
    async def body(rt, w):
        received = []

        async def boot(node):
            async def handler(source, message):
                if message == "boom":
                    raise KeyError("no such thing")
                if message == "slow":
                    await node.sleep(10)
                if isinstance(message, tuple) and message[0] == "note":
                    received.append((source, message[1]))
                    return None
                return ("echo", source, message)

            await node.net.serve(handler)

        await w.start("server", boot)
        client = w.node("client")
        reply = await client.net.call("server", {"n": 1}, timeout=2.0)
        with pytest.raises(RemoteError) as remote:
            await client.net.call("server", "boom", timeout=2.0)
        with pytest.raises(CallTimeout):
            await client.net.call("server", "slow", timeout=0.05)
        with pytest.raises(Unreachable):
            await client.net.call("nobody", "hi", timeout=0.5)
        client.net.send("server", ("note", 42))
        for _ in range(200):
            if received:
                break
            await client.sleep(0.005)
        return reply, type(remote.value.error), received

    reply, error_type, received = run(world, body)
    assert reply == ("echo", "client", {"n": 1})
    assert error_type is KeyError
    assert received == [("client", 42)]


def test_concurrent_calls_are_answered_independently(world):
    async def body(rt, w):
        async def boot(node):
            async def handler(source, delay):
                await node.sleep(delay)
                return delay

            await node.net.serve(handler)

        await w.start("server", boot)
        client = w.node("client")
        slow = client.spawn(client.net.call("server", 0.2, timeout=2.0))
        fast = await client.net.call("server", 0.01, timeout=2.0)
        return fast, slow.done(), await slow

    assert run(world, body) == (0.01, False, 0.2)


def test_the_live_world_runs_from_inside_a_running_event_loop(tmp_path):
    """As in a Jupyter kernel, where a loop is already running in the main thread."""
    import asyncio

    async def inside_a_loop():
        async def body(rt, _):
            await rt.sleep(0.01)
            return "ran"

        return run(LiveWorld(seed=1, root=tmp_path), body)

    assert asyncio.run(inside_a_loop()) == "ran"


def test_store_fsyncs_of_one_file_are_group_committed(world):
    """While one fsync of a file runs, later requests share the next one, which covers
    their bytes: three requests, two fsyncs, every byte durable once settled."""
    from lab.design.storage import RuntimeStore

    async def body(rt, _):
        store = RuntimeStore(rt, "d")
        f = store.open("log")
        f.append(b"a")
        first = store.fsync(f)
        f.append(b"b")
        second = store.fsync(f)
        f.append(b"c")
        third = store.fsync(f)
        await store.settle()
        durable = rt.disk.store.files["d/log"].durable if world.kind == "sim" else None
        fsyncs = rt.disk.store.fsyncs if world.kind == "sim" else None
        return first is not second, second is third, first.done() and third.done(), durable, fsyncs

    distinct, shared, done, durable, fsyncs = run(world, body)
    assert distinct and shared and done
    if world.kind == "sim":
        assert durable == 3 and fsyncs == 2


# ---------------------------------------------------------------- the fault operations


def _kinds(world: str) -> list[tuple[str, str]]:
    from lab.workloads.faults import kinds_in

    return [(world, kind) for kind in kinds_in(world)]


FAULT_FIELDS = {"pause": {}, "crash": {}, "kill": {}, "partition": {"target": "clients"}, "link-delay": {"ms": 20},
                "loss": {"p": 0.3, "target": "servers"}, "disk-delay": {"ms": 20}, "gc": {}, "late-writes": {}, "disk-loss": {}}


@pytest.mark.parametrize("world_name, kind", _kinds("sim") + _kinds("live"))
def test_every_fault_a_world_names_it_applies_and_heals(tmp_path, world_name, kind):
    """Each kind that names a world (``Fault.worlds``) runs there: its start and heal are in the
    history, the run drains, and no promise of the design is broken."""
    from lab.history.phases import fault_events
    from lab.history.record import read_samples
    from lab.experiments.runner import fault_refusal
    from lab.experiments.runner import run as run_workload
    from lab.workloads.spec import parse_workload

    fault = {"fault": kind, "at": 0.4, "duration": 0.3, **FAULT_FIELDS[kind]}
    w = parse_workload({"name": f"contract-{kind}", "producers": 1, "consumers": 1, "rate": 200, "duration": 1.2,
                        "ack": "reliable", "seed": 9, "faults": [fault]})
    assert fault_refusal(w, world_name, "kestrel") is None
    result = run_workload(w, "kestrel", world_name, out=tmp_path / "r", progress=False,
                          options={"syncJournal": "always", "timeout": 0.5})
    events = fault_events(read_samples(result.run_dir))
    assert [(e.event, e.kind) for e in events] == [("start", kind), ("heal", kind)]
    assert result.verdict in ("valid", "allowed"), result.check.line()


class _LineProtocol(LineConnection):
    """A ServerConnection for the contract: ``echo X`` answers ``X``, ``count`` how many
    requests this connection has run, ``wait S`` sleeps S seconds then answers ``done``,
    ``close`` answers ``bye`` and closes, ``drop`` breaks the framing."""

    def __init__(self, rt, events: list):
        self.rt, self.events, self.count = rt, events, 0

    def next_request(self):
        request = super().next_request()
        if request == "drop":
            raise ProtocolDrop("drop")
        return request

    async def handle(self, request: str, send) -> bool:
        self.count += 1
        command, _, arg = request.partition(" ")
        if command == "wait":
            try:
                await self.rt.sleep(float(arg))
            except Cancelled:
                self.events.append("cancelled")
                raise
            await send(b"done\n")
        elif command == "count":
            await send(b"%d\n" % self.count)
        elif command == "close":
            await send(b"bye\n")
            return False
        else:
            await send(arg.encode() + b"\n")
        return True

    def lost(self) -> None:
        self.events.append("lost")


def _lines(n: int):
    """A reply reader for ``n`` lines."""
    got = b""

    def receive(chunk: bytes):
        nonlocal got
        got += chunk
        return got.decode().splitlines() if got.count(b"\n") >= n else None

    return receive


def test_byte_streams_keep_order_and_state_and_a_timeout_closes_the_connection(world):
    """listen/connect: one connection keeps its state and runs pipelined requests in order;
    a timed-out exchange closes it (the server cancels the waiting request and is told) and
    the next exchange opens a new one; nothing listening is Unreachable."""
    events: list[str] = []

    async def body(rt, w):
        async def boot(node):
            await node.net.listen("lines", lambda: _LineProtocol(node, events))

        await w.start("server", boot)
        client = w.node("client")
        conn = client.net.connect("server", "lines")
        out = [await conn.exchange(b"echo a\n", _lines(1), 2.0),
               await conn.exchange(b"echo b\ncount\n", _lines(2), 2.0)]
        with pytest.raises(CallTimeout):
            await conn.exchange(b"wait 10\n", _lines(1), 0.1)
        for _ in range(100):
            if "lost" in events:
                break
            await client.sleep(0.01)
        out.append(list(events))
        out.append(await conn.exchange(b"count\n", _lines(1), 2.0))  # a new connection: its first request
        out.append(await conn.exchange(b"close\n", _lines(1), 2.0))
        await client.sleep(0.05)  # the server's close reaches the client (else the next write races it)
        out.append(await conn.exchange(b"count\n", _lines(1), 2.0))  # and again after the server closed it
        with pytest.raises(ConnectionResetError):
            await conn.exchange(b"drop\n", _lines(1), 2.0)
        with pytest.raises(Unreachable):
            await client.net.connect("server", "nothing-here").exchange(b"echo x\n", _lines(1), 0.5)
        await conn.close()
        return out

    out = run(world, body)
    assert out[:2] == [["a"], ["b", "3"]]
    assert sorted(out[2]) == ["cancelled", "lost"]
    assert out[3:] == [["1"], ["bye"], ["1"]]
