"""The sim world's byte streams (``models.streams``): a send is on the wire when it is sent.

A server connection's reply reaches the client one link latency after its ``send``, while
the handler may still wait (a sleep, an fsync), and a crash of the server after the send
does not recall it; the chunks arrive in order or not at all; bytes past a reply wait for
the next exchange. And the blind spot this closes, end to end: a Kestrel that replies to
a set before its fsync loses acknowledged puts to a crash that falls between the two, and
the lab says so, while the real Kestrel over the same runs stays valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.experiments.planting import plant
from lab.history.record import read_samples
from lab.experiments.runner import run as run_workload
from lab.design.runtime import CallTimeout, Unreachable
from lab.workloads.spec import load_workload
from models.awaitables import NS
from models.config import SimConfig
from models.disk import DiskModel
from models.latency import LatencyModel
from models.world import SimWorld
from tests.line_protocol import LineConnection

LATENCY_MS = 1.0  # one way, constant: a round trip is 2 ms
LONG_S = 0.5  # what a handler waits for after its reply: a sleep, or an fsync this slow


class _ReplyThenWait(LineConnection):
    """A line protocol: ``put X`` appends X to the node's file ``log``, answers ``ok``, then
    waits — ``sleep``: LONG_S seconds, ``fsync``: for the file's fsync; ``echo X`` answers X;
    ``pair`` answers ``a`` and ``b`` in one write; ``two`` answers ``x`` then, after a
    sleep, ``y``; ``half`` writes half a line and closes; ``chunks N`` answers 0..N-1, a
    line per write. ``events`` records (what, simulated ns)."""

    def __init__(self, rt, wait: str, events: list):
        self.rt, self.wait, self.events = rt, wait, events
        self.file = rt.disk.open("log")

    async def handle(self, request: str, send) -> bool:
        command, _, arg = request.partition(" ")
        self.events.append((f"start {request}", self.rt.now_ns()))
        if command == "put":
            self.file.append(arg.encode() + b"\n")
            await send(b"ok\n")
            self.events.append(("replied", self.rt.now_ns()))
            if self.wait == "sleep":
                await self.rt.sleep(LONG_S)
            else:
                await self.file.fsync()
            self.events.append(("durable", self.rt.now_ns()))
        elif command == "pair":
            await send(b"a\nb\n")
        elif command == "two":
            await send(b"x\n")
            await self.rt.sleep(0.01)
            await send(b"y\n")
        elif command == "half":
            await send(b"no newl")
            return False
        elif command == "chunks":
            for i in range(int(arg)):
                await send(b"%d\n" % i)
        else:
            await send(arg.encode() + b"\n")
        return True

    def lost(self) -> None:
        self.events.append(("lost", self.rt.now_ns()))


class _Line:
    """A reader of one line that leaves what follows it unread (``trailing``), as the HTTP
    response reader does."""

    def __init__(self) -> None:
        self.buffer, self.trailing = b"", b""

    def __call__(self, chunk: bytes) -> str | None:
        self.buffer += chunk
        line, sep, rest = self.buffer.partition(b"\n")
        if not sep:
            return None
        self.trailing = rest
        return line.decode()


def _lines(n: int):
    """A reader of ``n`` lines, as they come."""
    got = b""

    def receive(chunk: bytes):
        nonlocal got
        got += chunk
        return got.decode().splitlines() if got.count(b"\n") >= n else None

    return receive


def _world(seed: int = 3, fifo: bool = True, latency: LatencyModel | None = None) -> SimWorld:
    config = SimConfig(latency=latency or LatencyModel(dist="constant", ms=LATENCY_MS), fifo_links=fifo,
                       disk=DiskModel(fsync=LatencyModel(dist="constant", ms=LONG_S * 1000)), cpu=False)
    return SimWorld(seed=seed, config=config)


def _serve(world: SimWorld, wait: str = "sleep"):
    """``body(control, client)`` with a server node listening on port ``lines``."""
    events: list = []

    def run(body):
        async def main(control):
            async def boot(node):
                await node.net.listen("lines", lambda: _ReplyThenWait(node, wait, events))

            await world.start("server", boot)
            return await body(control, world.node("client"))

        return world.run(main)

    return run, events


@pytest.mark.parametrize("wait", ["sleep", "fsync"])
def test_a_reply_sent_before_a_long_wait_reaches_the_client_after_a_round_trip(wait):
    world = _world()
    run, events = _serve(world, wait)

    async def body(control, client):
        t0 = client.now_ns()
        reply = await client.net.connect("server", "lines").exchange(b"put m1\n", _lines(1), timeout=5.0)
        returned = client.now_ns() - t0
        await client.sleep(2 * LONG_S)  # the handler's wait ends meanwhile
        return reply, returned, t0

    reply, returned, t0 = run(body)
    assert reply == ["ok"]
    assert returned == 2 * LATENCY_MS * 1_000_000  # the round trip, not the handler's wait
    times = dict(events)
    assert times["durable"] - t0 >= LONG_S * NS  # the handler finished well after the client had its reply
    assert times["replied"] - t0 == LATENCY_MS * 1_000_000


def test_a_crash_after_the_send_leaves_the_client_its_reply_and_the_write_undone():
    """The reply was on the wire when the server crashed, before its fsync: the client is
    told ``ok`` of a write the crash took back — what a crash test must be able to see."""
    world = _world()
    run, events = _serve(world, "fsync")

    async def body(control, client):
        async def crash_soon():
            await control.sleep(1.5 * LATENCY_MS / 1000)  # after the server's send, before its reply lands
            world.crash("server")

        control.spawn(crash_soon())
        return await client.net.connect("server", "lines").exchange(b"put m1\n", _lines(1), timeout=5.0)

    assert run(body) == ["ok"]
    assert [what for what, _ in events] == ["start put m1", "replied"]  # never durable
    assert bytes(world.nodes["server"].disk.files["log"].data) == b""  # the crash took the write back


def test_requests_of_one_connection_run_one_at_a_time_even_after_an_early_reply():
    """The client has its reply while the handler still waits; its next request on the
    connection waits for that handler, in order, as a live server's would."""
    world = _world()
    run, events = _serve(world, "sleep")

    async def body(control, client):
        conn = client.net.connect("server", "lines")
        t0 = client.now_ns()
        first = await conn.exchange(b"put m1\n", _lines(1), timeout=5.0)
        second = await conn.exchange(b"echo two\n", _lines(1), timeout=5.0)
        return first, second, client.now_ns() - t0

    first, second, took = run(body)
    assert (first, second) == (["ok"], ["two"])
    assert [what for what, _ in events] == ["start put m1", "replied", "durable", "start echo two"]
    # the second request came at 3 ms and waited for the first one's handler (1 ms + its wait)
    assert took == LONG_S * NS + 2 * LATENCY_MS * 1_000_000


def test_a_timeout_closes_the_connection_and_cancels_the_handler_that_waits():
    """The reader wants two lines and ``put`` sends one, then waits: the client gives up,
    closes, and the server cancels the handler's wait and is told (``lost``)."""
    world = _world()
    run, events = _serve(world, "sleep")

    async def body(control, client):
        conn = client.net.connect("server", "lines")
        with pytest.raises(CallTimeout):
            await conn.exchange(b"put m1\n", _lines(2), timeout=0.1)
        await client.sleep(0.1)
        return await conn.exchange(b"echo again\n", _lines(1), timeout=1.0)

    assert run(body) == ["again"]
    assert [what for what, _ in events] == ["start put m1", "replied", "lost", "start echo again"]


def test_a_server_that_closes_before_a_whole_reply_resets_and_nothing_listening_is_unreachable():
    world = _world()
    run, _ = _serve(world)

    async def body(control, client):
        conn = client.net.connect("server", "lines")
        with pytest.raises(ConnectionResetError):
            await conn.exchange(b"half\n", _lines(1), timeout=1.0)
        after = await conn.exchange(b"echo fresh\n", _lines(1), timeout=1.0)  # a new connection
        with pytest.raises(Unreachable):
            await client.net.connect("server", "nothing").exchange(b"echo x\n", _lines(1), timeout=1.0)
        return after

    assert run(body) == ["fresh"]


def test_a_chunk_the_network_drops_stalls_the_reply_instead_of_leaving_a_gap():
    """``two`` answers ``x``, then ``y`` 10 ms later; a cut drops ``x``, and ``y`` comes
    after the heal: the client's reader never sees ``y`` alone, the exchange times out."""
    world = _world()
    run, _ = _serve(world)

    async def body(control, client):
        async def cut_the_first_chunk():
            await control.sleep(1.5 * LATENCY_MS / 1000)  # ``x`` is on the wire
            world.block("server", "client")
            await control.sleep(0.005)
            world.unblock("server", "client")

        control.spawn(cut_the_first_chunk())
        conn = client.net.connect("server", "lines")
        with pytest.raises(CallTimeout):
            await conn.exchange(b"two\n", _lines(1), timeout=0.5)
        return await conn.exchange(b"echo next\n", _lines(1), timeout=1.0), world.net.dropped["partition"]

    reply, dropped = run(body)
    assert reply == ["next"] and dropped == 1


def test_chunks_are_read_in_order_over_links_that_reorder():
    world = _world(fifo=False, latency=LatencyModel(dist="uniform", low_ms=0.1, high_ms=5.0))
    run, _ = _serve(world)

    async def body(control, client):
        return await client.net.connect("server", "lines").exchange(b"chunks 200\n", _lines(200), timeout=1.0)

    assert run(body) == [str(i) for i in range(200)]


def test_bytes_past_a_reply_are_kept_in_order_for_the_next_exchange():
    """Nothing is lost or skipped: what follows a reply (in its chunk, or in a later one)
    is read by the next exchange on the connection, as from a socket's buffer."""
    world = _world()
    run, _ = _serve(world)

    async def body(control, client):
        conn = client.net.connect("server", "lines")
        out = [await conn.exchange(b"pair\n", _Line(), timeout=1.0),  # "a\nb\n" in one chunk
               await conn.exchange(b"two\n", _Line(), timeout=1.0)]  # "b", left in the reader
        await client.sleep(0.05)  # "x\n" was read by the exchange before, "y\n" comes now
        out += [await conn.exchange(b"echo c\n", _Line(), timeout=1.0) for _ in range(3)]
        return out

    assert run(body) == ["a", "b", "x", "y", "c"]


def test_the_same_seed_gives_the_same_exchanges_over_random_latencies():
    def once():
        world = _world(seed=11, fifo=False, latency=LatencyModel(dist="exponential", mean_ms=1.0))
        run, events = _serve(world, "fsync")

        async def body(control, client):
            conn = client.net.connect("server", "lines")
            return [(await conn.exchange(b"put m%d\n" % i, _lines(1), 5.0), client.now_ns()) for i in range(20)]

        return run(body), events

    assert once() == once()


# -- the blind spot, end to end ------------------------------------------------------------------

CRASH_AT = 0.6  # s, mid-load: with a put a millisecond and 3 ms fsyncs, a set is nearly always between reply and fsync
SEEDS = (1, 2)


def _crash_workload(tmp_path: Path, seed: int) -> Path:
    path = tmp_path / f"reply-then-sync-{seed}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "reply-then-sync-crash", "queues": 1, "producers": 2, "consumers": 0, "message_size": 100,
        "rate": 2000, "duration": 0.8, "warmup": 0.2, "ack": "reliable", "seed": seed,
        "faults": [{"fault": "crash", "at": CRASH_AT, "duration": 0.2, "target": "server"}],
        "sim": {"fsync": {"dist": "constant", "ms": 3}},
    }))
    return path


def _lost_acknowledged(run_dir: Path) -> dict[str, int]:
    """msg_id -> its put's t_end, of every acknowledged put never delivered."""
    samples = read_samples(run_dir).to_pandas()
    puts = samples[(samples.op == "put") & (samples.outcome == "ok")]
    delivered = set(samples[(samples.op == "get") & (samples.outcome == "ok")].msg_id)
    lost = puts[~puts.msg_id.isin(delivered)]
    return dict(zip(lost.msg_id, lost.t_start_ns + lost.latency_ns))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_reply_before_the_fsync_loses_acknowledged_puts_to_a_crash_and_the_verdict_says_so(
        tmp_path, seed):
    workload = load_workload(_crash_workload(tmp_path, seed))
    options = {"syncJournal": "always"}
    with plant("kestrel-reply-then-sync"):  # set writes STORED, then awaits the fsync
        result = run_workload(workload, "kestrel", "sim", out=tmp_path / "broken", progress=False, options=options)
    lost = _lost_acknowledged(result.run_dir)
    assert lost, "the crash fell outside every put's reply-to-fsync window"
    crash_ns = min(read_samples(result.run_dir).to_pandas().query("op == 'fault'").t_start_ns)
    # each was acknowledged just before the crash, inside its fsync's window: the fsync it
    # waits for may queue behind the one under way (two of 3 ms, and a margin)
    assert all(crash_ns - 10_000_000 < t_end <= crash_ns for t_end in lost.values()), (crash_ns, lost)
    verdict = result.check
    assert verdict.verdict == "invalid", verdict.line()
    assert f"lost {len(lost)} acknowledged message" in verdict.line(), verdict.line()
    assert "kestrel with syncJournal=always, reliable reads promises no loss" in verdict.line(), verdict.line()

    kestrel = run_workload(workload, "kestrel", "sim", out=tmp_path / "kestrel", progress=False, options=options)
    assert _lost_acknowledged(kestrel.run_dir) == {}
    assert kestrel.verdict == "valid", kestrel.check.line()  # no false alarm
