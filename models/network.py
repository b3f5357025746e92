"""The simulated network: links with latency distributions, loss and partitions.

A message is a frame ``(sender's runtime, destination, kind, request_id, payload, tries
left)`` handed to a SimPy timeout whose callback delivers it; no process per message. Partitions are a set
of blocked (source, destination) pairs, checked when a message is sent and again when
it would arrive, so a split also drops what was in flight (Jepsen's and Maelstrom's
model). Faults add loss and delay per link (``add_loss``, ``add_delay``), and each heal
removes only what its fault added. Links are FIFO by default, like a TCP connection; with ``fifo_links=False``
random latencies reorder messages. Every drop is counted by cause, as TigerBeetle's
packet simulator does.

Payloads travel by reference: cores must treat messages as immutable values.

Messages are datagrams — a request or a reply a partition drops is gone, and the caller's
timeout decides — except a connection's close (``send(..., reliable=True)``), which TCP
retransmits until it arrives: a server whose client gave up during a split learns of it
after the heal, as a real one would (its FIN retransmitted), and not never.

Frame kinds: ``call`` (a request that wants a reply), ``ok``/``err`` (its reply), ``send``
(one way: a message, or a client's bytes or close on a stream), and ``stream`` (what a
server's side of a stream wrote, to the client's connection, ``models.streams``).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any, Coroutine, Iterable

from simpy.core import SimTime

from lab.design.runtime import Accept, CallTimeout, Handler, RemoteError, Unreachable
from lab.design.service import message_bytes, message_kind
from models.awaitables import Await, Due, to_ns
from models.host import NetConfig, NodeRuntime, SimHost
from models.latency import LatencyModel
from models.streams import SimConnection, SimListeners, StreamData, StreamReply

RETRANSMIT = 0.2  # seconds between a reliable frame's tries (Linux's minimum TCP retransmission timeout)
RETRANSMISSIONS = 300  # tries of a reliable frame: a minute of a split, longer than any run's


class SimNetwork:
    """All links of one simulated world."""

    def __init__(self, world: SimHost, rng: random.Random, config: NetConfig):
        self.world = world
        self.env = world.env
        self.rng = rng
        self.latency = config.latency
        self.loss = config.loss
        self.fifo = config.fifo_links
        self.link_latency: dict[tuple[str, str], LatencyModel] = {}
        self.blocked: Counter[tuple[str, str]] = Counter()  # a link cut by two faults needs two heals
        # What faults add to a link, one entry per fault, so each heal removes its own:
        self.link_loss: dict[tuple[str, str], list[float]] = {}  # drop probabilities
        self.link_delay: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (extra ns, jitter ns)
        self.dropped: Counter[str] = Counter()
        self.delivered = 0
        self._last_arrival: dict[tuple[str, str], SimTime] = {}
        self._ids = itertools.count(1)

    # ---------------------------------------------------------------- faults

    def partition(self, *groups: Iterable[str]) -> None:
        """Split the named nodes into groups that cannot reach each other (both ways)."""
        sets = [list(g) for g in groups]
        for i, a in enumerate(sets):
            for b in sets[i + 1 :]:
                for x in a:
                    for y in b:
                        self.block(x, y)
                        self.block(y, x)

    def block(self, source: str, destination: str) -> None:
        """A one-way partition: messages from ``source`` to ``destination`` are dropped."""
        self.blocked[(source, destination)] += 1

    def unblock(self, source: str, destination: str) -> None:
        link = (source, destination)
        if self.blocked.get(link, 0) <= 1:
            self.blocked.pop(link, None)
        else:
            self.blocked[link] -= 1

    def heal(self) -> None:
        self.blocked.clear()

    def add_loss(self, source: str, destination: str, p: float) -> None:
        """Drop each message on the link with probability ``p`` too (independent drops compose)."""
        self.link_loss.setdefault((source, destination), []).append(p)

    def remove_loss(self, source: str, destination: str, p: float) -> None:
        _remove_one(self.link_loss, (source, destination), p)

    def add_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        """Delay each message on the link ``extra_ns`` more, plus up to ``jitter_ns`` (uniform)."""
        self.link_delay.setdefault((source, destination), []).append((extra_ns, jitter_ns))

    def remove_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        _remove_one(self.link_delay, (source, destination), (extra_ns, jitter_ns))

    def set_latency(self, source: str, destination: str, model: LatencyModel | None) -> None:
        """Give one directed link its own delay distribution (None: back to the default)."""
        if model is None:
            self.link_latency.pop((source, destination), None)
        else:
            self.link_latency[(source, destination)] = model

    # ---------------------------------------------------------------- transport

    def transmit(self, source: NodeRuntime, destination: str, kind: str, request_id: int, payload: Any,
                 reliable: int = 0) -> None:
        """Send one frame. ``reliable``: a one-way frame TCP would retransmit until it arrives
        (a connection's close, its FIN): dropped by a partition or by loss, it is sent again
        ``RETRANSMIT`` seconds later while its sender lives, at most ``RETRANSMISSIONS`` times
        (the number counts the tries left)."""
        link = (source.node, destination)
        if link in self.blocked:
            self.dropped["partition"] += 1
            self._again(source, destination, kind, request_id, payload, reliable)
            return
        loss = self.loss
        if self.link_loss and link in self.link_loss:
            kept = 1.0 - loss
            for p in self.link_loss[link]:
                kept *= 1.0 - p
            loss = 1.0 - kept
        if loss and self.rng.random() < loss:
            self.dropped["loss"] += 1
            self._again(source, destination, kind, request_id, payload, reliable)
            return
        now = self.env.now
        arrival = now + self.link_latency.get(link, self.latency).sample_ns(self.rng)
        if self.link_delay and link in self.link_delay:
            for extra, jitter in self.link_delay[link]:
                arrival += extra + (self.rng.randrange(jitter + 1) if jitter else 0)
        if self.fifo:
            arrival = max(arrival, self._last_arrival.get(link, 0))
            self._last_arrival[link] = arrival
        Due(self.env, arrival - now, (source, destination, kind, request_id, payload, reliable), self._arrive)

    def _again(self, source: NodeRuntime, destination: str, kind: str, request_id: int, payload: Any,
               reliable: int) -> None:
        if reliable > 1 and source.alive:
            retry = (source, destination, kind, request_id, payload, reliable - 1)
            Due(self.env, to_ns(RETRANSMIT), retry, self._retransmit)

    def _retransmit(self, event) -> None:
        source, destination, kind, request_id, payload, reliable = event._value
        if source.alive:  # a crash of the sender ends its connections, and their FINs with them
            self.transmit(source, destination, kind, request_id, payload, reliable)

    def _arrive(self, event) -> None:
        runtime, destination, kind, request_id, payload, reliable = event._value
        source = runtime.node
        if (source, destination) in self.blocked:
            self.dropped["partition"] += 1
            self._again(runtime, destination, kind, request_id, payload, reliable)
            return
        node = self.world.nodes.get(destination)
        if node is None or not node.up:
            self.dropped["node down"] += 1
            if node is not None and isinstance(payload, StreamData):
                # the machine is up and nothing listens: its kernel resets the connection, as a
                # crashed server's does live (where the link's proxy accepted it first)
                self.transmit(node.runtime, source, "stream", 0, StreamReply(payload.conn, -1, None))
            return
        rt = node.runtime
        if kind == "stream":  # a server's bytes (or close) to a client's connection
            connection = rt.net.connections.get(payload.conn)
            if connection is None:  # closed, or of an incarnation that crashed
                self.dropped["closed connection"] += 1
                return
            connection.arrived(payload)
        elif kind in ("ok", "err"):
            waiting = rt.net.pending.get(request_id)
            if waiting is None or waiting.triggered:  # given up on (its timeout has fired)
                self.dropped["late reply"] += 1
                return
            waiting.succeed((kind, payload))
        else:
            net = rt.net
            streams = net.streams.accepts(payload)
            handler = net.streams.handle if streams else net.handler
            if handler is None:
                self.dropped["not serving"] += 1
                return
            if streams:
                net.streams.arrived(payload)  # the connection opens before its first request runs
            task = rt.start(net.answer(handler, source, kind, request_id, payload), name="handler")
            if streams and task is not None:
                net.streams.waiting(payload, task)
        self.delivered += 1

    def next_id(self) -> int:
        return next(self._ids)


def _remove_one(added: dict, link: tuple[str, str], value: Any) -> None:
    values = added.get(link, [])
    if value in values:
        values.remove(value)
    if not values:
        added.pop(link, None)


class SimNetPort:
    """The Network port of one node incarnation."""

    def __init__(self, network: SimNetwork, runtime: NodeRuntime):
        self.network = network
        self.rt = runtime
        self.handler: Handler | None = None
        self.pending: dict[int, Any] = {}
        self.streams = SimListeners(runtime)
        self.connections: dict[str, SimConnection] = {}  # this node's open client connections, by id
        self._connections = itertools.count()

    async def serve(self, handler: Handler) -> None:
        self.handler = handler

    async def listen(self, port: str, accept: Accept) -> None:
        self.streams.ports[port] = accept

    def connect(self, node: str, port: str) -> SimConnection:
        return SimConnection(self, node, port)

    def new_connection_id(self) -> str:
        return f"{self.rt.node}.{self.rt.incarnation}#{next(self._connections)}"

    async def answer(self, handler: Handler, source: str, kind: str, request_id: int, payload: Any) -> None:
        cpu = self.rt.cpu
        try:
            if cpu is not None and not self.streams.accepts(payload):  # a stream charges per request
                await cpu.serve(message_kind(payload), message_bytes(payload), round(cpu.model.transport_ns))
            reply, status = await handler(source, payload), "ok"
        except Exception as e:  # the caller gets the error; the node goes on
            reply, status = e, "err"
        if kind == "call" and self.rt.alive:
            self.network.transmit(self.rt, source, status, request_id, reply)

    async def call(self, peer: str, message: Any, timeout: float) -> Any:
        if peer not in self.network.world.nodes:
            raise Unreachable(f"{self.rt.node}: no node called {peer!r}")
        network = self.network
        request_id = next(network._ids)
        reply = self.rt.env.event()
        self.pending[request_id] = reply
        network.transmit(self.rt, peer, "call", request_id, message)
        network.world.deadlines.add(to_ns(timeout), reply, None)  # the reply, or None at the timeout
        try:
            answer = await Await(reply)
        finally:
            del self.pending[request_id]
        if answer is None:
            raise CallTimeout(f"no reply from {peer!r} within {timeout:g} s")
        work = self.reply_work()
        if work is not None:
            await work
        status, payload = answer
        if status == "err":
            raise RemoteError(payload)
        return payload

    def reply_work(self) -> Coroutine[Any, Any, None] | None:
        """The CPU this node spends on a reply it receives (a call's, or a stream exchange's),
        or None when it costs nothing here."""
        cpu = self.rt.cpu
        if cpu is not None:  # a server node's call to a peer: the reply is a frame it receives
            return cpu.serve("reply", 0, round(cpu.model.transport_ns)) if cpu.model.transport_ns else None
        world = self.network.world
        if world.client_cpu is not None and self.rt.node not in world.server_names and self.rt.node != "control":
            # the load generator's process: a round trip's client work, charged when the reply
            # comes (its parsing and the caller's wake-up), where replies that arrive together queue
            return world.client_cpu.serve("client")
        return None

    def send(self, peer: str, message: Any, reliable: bool = False) -> None:
        """A one-way message; ``reliable``: retransmitted until it arrives, as TCP would (a close)."""
        if self.rt.alive:
            self.network.transmit(self.rt, peer, "send", 0, message, RETRANSMISSIONS if reliable else 0)

    def stream(self, peer: str, frame: Any, reliable: bool = False) -> None:
        """A server's stream frame to a client's connection on ``peer`` (``models.streams``);
        ``reliable``: a close, retransmitted until it arrives."""
        if self.rt.alive:
            self.network.transmit(self.rt, peer, "stream", 0, frame, RETRANSMISSIONS if reliable else 0)
