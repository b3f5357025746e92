"""The calibration's world: a design's server nodes in one process, on the live world's
real clock, asyncio tasks and real files (fsync in a temporary folder), with a network
that is a function call, and a meter of the CPU time each request a server node handles.

This is the room ``lab calibrate`` measures in (``lab.experiments.calibrate`` drives it). Each node is
a ``lab.worlds.live.runtime.LiveRuntime`` whose network is ``InProcessNet``: ``serve`` and
``listen`` are captured per node; a client's ``connect(node, port).exchange`` feeds the
node's ``ServerConnection`` directly and runs its complete requests in order, as the sim
world's ``models.streams.SimListeners.handle`` does; ``call`` and ``send`` run the peer's
handler in a task of its own, as both worlds do. No bytes cross a socket and nothing is
pickled, as in the sim world, so what is measured is what the sim world charges a core for.

Metering (``Meter``): a request's service time is the CPU time (``time.thread_time_ns``)
of its handler's own steps — each slice of the coroutine between two waits — so waits on
an fsync, a sleep or a peer are not service time (the sim's disk and network have their
own models). A nested handler that runs inside a step (an in-process call awaited inline)
is charged to its own kind and subtracted from its caller's. Requests are classified with
the sim world's own functions and byte counts (``lab.design.service``): a stream request by
``request_kind(conn, request)``, the bytes of the chunk that completed it charged to the
first request it completed; a message by ``message_kind`` and ``message_bytes``. Only the
design's ``cpu.nodes`` are recorded; other server nodes (CassieQ's simulated Cassandra)
run, unrecorded.
"""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator, Iterable, TypeVar

from lab.worlds.live.runtime import LiveRuntime
from lab.design.runtime import (Accept, CallTimeout, ConnectionLost, Handler, ProtocolDrop, RemoteError, ServerConnection,
                         Unreachable)
from lab.design.service import message_bytes, message_kind, request_kind

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """One request a cpu node handled: its kind, the bytes charged to it, its CPU time, and
    the phase of the calibration it fell in (a message size, or a probe)."""

    node: str
    kind: str
    nbytes: int
    ns: int
    phase: str


def timer_overhead_ns(rounds: int = 2001) -> int:
    """The median CPU time between two back-to-back reads of the thread's CPU clock: what
    each metered step's reading adds to it."""
    clock = time.thread_time_ns
    gaps = []
    for _ in range(rounds):
        t0 = clock()
        gaps.append(clock() - t0)
    return int(statistics.median(gaps))


class _Metered:
    """Awaits a coroutine step by step, timing each step's thread CPU; ``own_ns`` is the total
    less what metered coroutines nested inside its steps took."""

    __slots__ = ("coro", "meter", "total_ns", "nested_ns")

    def __init__(self, coro: Any, meter: "Meter"):
        self.coro, self.meter = coro, meter
        self.total_ns = self.nested_ns = 0

    @property
    def own_ns(self) -> int:
        return max(0, self.total_ns - self.nested_ns)

    def _account(self, dt: int, parent: "_Metered | None") -> None:
        dt = max(0, dt - self.meter.overhead_ns)
        self.total_ns += dt
        if parent is not None:
            parent.nested_ns += dt

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, stack, clock = self.coro, self.meter.stack, time.thread_time_ns
        value: Any = None
        error: BaseException | None = None
        while True:
            parent = stack[-1] if stack else None
            stack.append(self)
            t0 = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                self._account(clock() - t0, parent)
                stack.pop()
                return done.value
            except BaseException:
                self._account(clock() - t0, parent)
                stack.pop()
                raise
            self._account(clock() - t0, parent)
            stack.pop()
            # Pass the wait up unchanged (a future keeps its "a task should wait for me" flag).
            try:
                value, error = (yield yielded), None
            except BaseException as e:  # a cancel, thrown into the coroutine where it waits
                value, error = None, e


class Meter:
    """The CPU time of each request the cpu nodes handle, as ``Sample``s."""

    def __init__(self, cpu_nodes: Iterable[str]):
        self.cpu_nodes = frozenset(cpu_nodes)
        self.overhead_ns = timer_overhead_ns()
        self.stack: list[_Metered] = []  # the metered steps running now, innermost last
        self.samples: list[Sample] = []
        self.recording = False
        self.phase = ""
        self.on_sample: Callable[[Sample], None] | None = None

    def step_ns(self, work: Callable[[], T]) -> tuple[T, int]:
        """``work()``'s result and its CPU time (a synchronous part of a request: parsing)."""
        clock = time.thread_time_ns
        t0 = clock()
        result = work()
        dt = max(0, clock() - t0 - self.overhead_ns)
        if self.stack:
            self.stack[-1].nested_ns += dt
        return result, dt

    async def run(self, node: str, kind: str, nbytes: int, coro: Any, extra_ns: int = 0) -> Any:
        """Await ``coro`` (the handling of one request by ``node``), recording its CPU time
        plus ``extra_ns`` (its parsing) if ``node`` is a cpu node and the meter is on."""
        metered = _Metered(coro, self)
        try:
            return await metered
        finally:
            if self.recording and node in self.cpu_nodes:
                sample = Sample(node, kind, nbytes, metered.own_ns + extra_ns, self.phase)
                self.samples.append(sample)
                if self.on_sample is not None:
                    self.on_sample(sample)


class _NoLatency:
    """The latency model a simulated store node may ask its world's network for (extra
    round trips of a lightweight transaction): none — waits are not service time."""

    def sample_ns(self, rng: random.Random) -> int:
        return 0


class _NetworkFacts:
    def __init__(self, seed: int):
        self.latency = _NoLatency()
        self.rng = random.Random(f"{seed}:network")


class _NodeState:
    """What a simulated store node reads of its node: the late-write faults in force (none)."""

    def __init__(self) -> None:
        self.late_writes: list = []


class InProcessWorld:
    """Server and client nodes of one process: live runtimes on real files under a temporary
    folder, whose network is ``InProcessNet``.

    ``kind`` is "sim": a design is constructed as the sim world constructs it (its options'
    sim defaults: CassieQ over the simulated Cassandra), and this world stands in for it.
    """

    kind = "sim"

    def __init__(self, meter: Meter, seed: int = 0, root: str | Path | None = None):
        self.seed = seed
        self.meter = meter
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="queue-lab-calibrate-")
            root = self._tmp.name
        self.root = Path(root)
        self.disk_roots: dict[str, Path] = {}
        self.addresses: dict[str, tuple[str, int]] = {}  # LiveNet's book: unused here
        self.nodes: dict[str, LiveRuntime] = {}
        self.nets: dict[str, InProcessNet] = {}
        self.net = _NetworkFacts(seed)
        self.nested_calls = 0  # calls and sends a request's handler made (to a peer or a store)
        self.epoch_ns = time.time_ns()
        self.mono_ns = time.monotonic_ns()

    def node(self, name: str) -> LiveRuntime:
        """Node ``name`` (created on first use): a live runtime on the in-process network."""
        if name not in self.nodes:
            rt = LiveRuntime(self, name)  # type: ignore[arg-type]
            rt.net = self.nets[name] = InProcessNet(self, name)
            rt.state = _NodeState()  # type: ignore[attr-defined]
            self.nodes[name] = rt
        return self.nodes[name]

    async def start(self, name: str, boot: Callable[[Any], Any]) -> LiveRuntime:
        rt = self.node(name)
        await boot(rt)
        return rt

    async def start_server(self, server: Any) -> None:
        """A design's server node (a ``lab.design.world.ServerSpec``), booted here as the sim
        world boots it: what ``Backend.start`` calls, so a design's own start() runs too."""
        await self.start(server.node, server.boot)

    async def stop_server(self, node: str) -> None:
        rt = self.nodes.pop(node, None)
        if rt is not None:
            await rt.close()

    async def close(self) -> None:
        for rt in list(self.nodes.values()):
            await rt.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    async def answer(self, node: str, source: str, message: Any) -> tuple[str, Any]:
        """``node``'s handler's reply to ``message`` from ``source``, metered as the sim's
        network charges a message: by its type and body."""
        net = self.nets.get(node)
        if net is None or net.handler is None:
            return "err", Unreachable(f"no node called {node!r} is serving")
        try:
            reply = await self.meter.run(node, message_kind(message), message_bytes(message),
                                         net.handler(source, message))
            return "ok", reply
        except Exception as e:  # the caller gets the error; the node goes on
            return "err", e

    async def stream(self, node: str, accepted: "_Accepted", data: bytes) -> tuple[bytes, bool]:
        """What ``accepted``'s connection wrote while it handled ``data``, and whether it closed:
        every complete request run in order and metered, the chunk's bytes (and the time
        feeding it took) charged to the first request it completed."""
        meter, conn = self.meter, accepted.conn
        accepted.out = []
        accepted.running = asyncio.current_task()
        _, parse_ns = meter.step_ns(lambda: conn.feed(data))
        nbytes = len(data)
        try:
            while not accepted.closed:
                request, dt = meter.step_ns(conn.next_request)
                parse_ns += dt
                if request is None:
                    break
                keep = await meter.run(node, request_kind(conn, request), nbytes, conn.handle(request, accepted.send),
                                       parse_ns)
                nbytes = parse_ns = 0
                if not keep:
                    accepted.close()
        except ProtocolDrop as e:
            log.info("dropping a connection: %s", e)
            accepted.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.error("a request failed; closing its connection", exc_info=True)
            accepted.close()
        finally:
            accepted.running = None
        return b"".join(accepted.out), accepted.closed


class _Accepted:
    """A client connection's server side: its ServerConnection and the bytes it writes."""

    def __init__(self, conn: ServerConnection):
        self.conn = conn
        self.out: list[bytes] = []
        self.running: asyncio.Task | None = None
        self.closed = False

        async def send(data: bytes) -> None:  # one send for the connection's life, as the live world's
            if not self.closed:
                self.out.append(data)

        self.send = send

    def close(self, cancel: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if cancel and self.running is not None and not self.running.done():
            self.running.cancel()  # the client left: a blocking read gives up its place
        self.conn.lost()


class InProcessConnection:
    """A client's connection to ``node``'s port ``port``: each exchange feeds the server's
    connection directly; a timeout or a close ends it (the next exchange opens another)."""

    def __init__(self, world: InProcessWorld, node: str, port: str):
        self.world, self.node, self.port = world, node, port
        self.accepted: _Accepted | None = None
        self.broken = False  # the server closed it since it was last opened

    async def exchange(self, data: bytes, receive: Callable[[bytes], T | None], timeout: float) -> T:
        server = self.world.nets.get(self.node)
        if server is None or self.port not in server.ports:
            raise Unreachable(f"{self.node}:{self.port}: nothing listens there")
        if self.accepted is None or self.accepted.closed:
            self.accepted = _Accepted(server.ports[self.port]())
            self.broken = False
        accepted = self.accepted
        task = asyncio.get_running_loop().create_task(self.world.stream(self.node, accepted, data))
        try:
            async with asyncio.timeout(timeout):
                out, closed = await asyncio.shield(task)
        except TimeoutError:
            self._drop()
            raise CallTimeout(f"no reply from {self.node}:{self.port} within {timeout:g} s") from None
        except asyncio.CancelledError:
            self._drop()
            raise
        if closed:
            self.accepted = None
            self.broken = True
        reply = receive(out) if out else None
        if reply is None:
            raise ConnectionLost(f"{self.node}:{self.port} closed the connection before the reply")
        return reply

    def _drop(self) -> None:
        if self.accepted is not None:
            self.accepted.close(cancel=True)
            self.accepted = None

    async def close(self) -> None:
        self._drop()


class InProcessNet:
    """The Network port of one in-process node."""

    def __init__(self, world: InProcessWorld, node: str):
        self.world, self.node = world, node
        self.handler: Handler | None = None
        self.ports: dict[str, Accept] = {}
        self._background: set[asyncio.Task] = set()

    async def serve(self, handler: Handler) -> None:
        self.handler = handler

    async def listen(self, port: str, accept: Accept) -> None:
        self.ports[port] = accept

    def connect(self, node: str, port: str) -> InProcessConnection:
        return InProcessConnection(self.world, node, port)

    async def call(self, peer: str, message: Any, timeout: float) -> Any:
        target = self.world.nets.get(peer)
        if target is None or target.handler is None:
            raise Unreachable(f"{self.node}: no node called {peer!r} is serving")
        if self.world.meter.stack:
            self.world.nested_calls += 1
        # The peer answers in a task of its own, as in both worlds: a caller that gives up
        # does not cancel it.
        task = asyncio.get_running_loop().create_task(self.world.answer(peer, self.node, message))
        try:
            async with asyncio.timeout(timeout):
                status, reply = await asyncio.shield(task)
        except TimeoutError:
            raise CallTimeout(f"no reply from {peer!r} within {timeout:g} s") from None
        if status == "err":
            raise RemoteError(reply)
        return reply

    def send(self, peer: str, message: Any) -> None:
        """Fire and forget: no reply, no error if the peer is gone."""
        if self.world.meter.stack:
            self.world.nested_calls += 1
        task = asyncio.get_running_loop().create_task(self.world.answer(peer, self.node, message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
