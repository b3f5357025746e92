"""The live world's links: a TCP proxy per link into a server process (from a client node,
or from another server node: Primer's nodes call each other), which the live world's
faults cut, delay or make lossy.

A ``LinkProxy`` listens on a loopback port and forwards every connection to its target,
given as an address or as a callable that finds it when a connection comes (a server
node's peer may not have started yet, or may have restarted); a target that cannot be
found or reached closes the incoming connection, as a refused connection would.
Each direction of the link (``UP``: connecting side to target, ``DOWN``: back) is a
queue of chunks with a due time, written in order. The faults act on the due times and
on a gate per direction, the way a network's faults look to a TCP endpoint:

- **block** (a partition): the gate closes; bytes are read and held, not dropped, and
  flow again when it opens — TCP retransmits what a cut link lost, so after a heal the
  connection goes on, and an application sees a stall (and its own timeouts), not a reset;
- **delay** (``ms`` plus uniform ``jitter``): added to each chunk's due time, order kept;
- **loss** (``p``): a chunk is held back a retransmission timeout (``RETRANSMIT``) with
  probability ``p``, which is what a lost segment costs an endpoint.

Random draws come from a seeded ``random.Random``, so a schedule's faults are repeatable
as far as the live world's timing allows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Union

log = logging.getLogger(__name__)

UP, DOWN = "up", "down"  # connecting side -> target, target -> connecting side
RETRANSMIT = 0.2  # seconds: Linux's minimum retransmission timeout
CHUNK = 64 * 1024

#: where a proxy forwards to: an address, or a callable finding it at each connection
Target = Union[tuple[str, int], Callable[[], tuple[str, int]]]


@dataclass
class Direction:
    """One direction's faults: the gate, the added delay and the loss probability."""

    gate: asyncio.Event
    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0


class LinkProxy:
    """A TCP proxy for one link: ``await start()`` gives the port clients connect to.
    ``target`` is an address or a callable returning one, called at each connection."""

    def __init__(self, target: Target, name: str = "", rng: random.Random | None = None):
        self.target = target
        self.name = name or (f"proxy to {target[0]}:{target[1]}" if isinstance(target, tuple) else "proxy")
        self.rng = rng or random.Random(0)
        self.directions = {UP: Direction(asyncio.Event()), DOWN: Direction(asyncio.Event())}
        for direction in self.directions.values():
            direction.gate.set()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._accept, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def listen(self, host: str = "127.0.0.1") -> int:
        """The port, at once, from code that cannot await (a backend's ``client()``): the
        socket listens now, and connections wait in its backlog until the server task runs."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]

        async def serve() -> None:
            self._server = await asyncio.start_server(self._accept, sock=sock)

        self._spawn(serve())
        return self.port

    # ------------------------------------------------------------------ faults
    def block(self, direction: str) -> None:
        self.directions[direction].gate.clear()

    def unblock(self, direction: str) -> None:
        self.directions[direction].gate.set()

    def set_delay(self, direction: str, seconds: float, jitter: float = 0.0) -> None:
        d = self.directions[direction]
        d.delay, d.jitter = max(0.0, seconds), max(0.0, jitter)

    def set_loss(self, direction: str, p: float) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"loss probability must be within [0, 1], got {p}")
        self.directions[direction].loss = p

    # ------------------------------------------------------------------ forwarding
    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            target = self.target() if callable(self.target) else self.target
            server_reader, server_writer = await asyncio.open_connection(*target)
        except Exception as e:  # not started, or down: so is the connection through the link
            log.debug("%s: cannot reach the target: %s", self.name, e)
            client_writer.close()
            return
        self._writers |= {client_writer, server_writer}
        # Each direction ends at its reader's end of stream, passed on as a half-close, so a
        # reply still in flight when the client stops sending gets through. A direction that
        # fails (a reset: its process was killed) ends both at once, as the reset would end the
        # one connection the two sides would have without the proxy: else the other side
        # would hold a connection to a dead server, waiting for a reply that never comes.
        pumps = {self._spawn(self._pump(client_reader, server_writer, self.directions[UP])),
                 self._spawn(self._pump(server_reader, client_writer, self.directions[DOWN]))}
        done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
        if pending and any(not task.cancelled() and task.exception() is not None for task in done):
            for writer in (client_writer, server_writer):
                writer.transport.abort()  # a reset, passed on
            for task in pending:
                task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for writer in (client_writer, server_writer):
            self._writers.discard(writer)
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, d: Direction) -> None:
        """Read chunks as they come; a writer task sends each at its due time, in order."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = self._spawn(self._send(queue, writer, d))
        last_due = 0.0
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                due = time.monotonic() + d.delay + (self.rng.uniform(0.0, d.jitter) if d.jitter else 0.0)
                if d.loss and self.rng.random() < d.loss:
                    due += RETRANSMIT
                last_due = max(last_due, due)  # TCP delivers in order: no chunk overtakes another
                queue.put_nowait((last_due, data))
            queue.put_nowait((last_due, b""))  # end of stream, after what came before it
            await sender
        finally:
            sender.cancel()

    async def _send(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, d: Direction) -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await d.gate.wait()
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


@dataclass
class _LinkState:
    """The faults in force on one one-way link (they compose: each heal removes its own)."""

    blocks: int = 0
    losses: list[float] = field(default_factory=list)
    delays: list[tuple[float, float]] = field(default_factory=list)  # (seconds, jitter)

    def apply(self, proxy: LinkProxy, direction: str) -> None:
        (proxy.block if self.blocks else proxy.unblock)(direction)
        proxy.set_loss(direction, 1.0 - math.prod(1.0 - p for p in self.losses))
        proxy.set_delay(direction, sum(d for d, _ in self.delays), sum(j for _, j in self.delays))


class LiveLinks:
    """The links of a live world: one ``LinkProxy`` per (source node, server node, port),
    made when the source first asks for the address — a client node's connection, or a
    server node's ``reach`` of a peer server (``Backend.serve_args``) — and the fault verbs
    on one-way links (``source`` -> ``destination``) that the sim world's network has: a
    link's faults act on the proxy's ``UP`` direction from the source's side and on its
    ``DOWN`` direction from the other's. A link with no proxy (between two clients) carries
    nothing here: faults on it are kept and apply to any proxy made later."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.proxies: dict[tuple[str, str, str], LinkProxy] = {}
        self.links: dict[tuple[str, str], _LinkState] = {}
        #: source nodes on other machines (Locust workers): their proxies listen on every
        #: interface, and their address names this machine as they reach it
        self.public: dict[str, str] = {}

    def address(self, source: str, node: str, port: str, target: Target) -> tuple[str, int]:
        """Where ``source`` reaches ``node``'s ``port`` (which listens at ``target``, or where a
        callable ``target`` says at each connection): its proxy, which listens at once."""
        key = (source, node, port)
        proxy = self.proxies.get(key)
        if proxy is None:
            proxy = self.proxies[key] = LinkProxy(target, f"{source} -> {node}:{port}",
                                                  random.Random(f"{self.seed}:link:{source}:{node}:{port}"))
            proxy.listen("0.0.0.0" if source in self.public else "127.0.0.1")
            self._apply(source, node)
            self._apply(node, source)
        return self.public.get(source, "127.0.0.1"), proxy.port

    def _state(self, source: str, destination: str) -> _LinkState:
        return self.links.setdefault((source, destination), _LinkState())

    def _apply(self, source: str, destination: str) -> None:
        state = self.links.get((source, destination))
        if state is None:
            return
        for (near, far, _), proxy in self.proxies.items():  # near connects, far listens
            if (near, far) == (source, destination):
                state.apply(proxy, UP)
            elif (far, near) == (source, destination):
                state.apply(proxy, DOWN)

    def block(self, source: str, destination: str) -> None:
        self._state(source, destination).blocks += 1
        self._apply(source, destination)

    def unblock(self, source: str, destination: str) -> None:
        state = self._state(source, destination)
        state.blocks = max(0, state.blocks - 1)
        self._apply(source, destination)

    def add_loss(self, source: str, destination: str, p: float) -> None:
        self._state(source, destination).losses.append(p)
        self._apply(source, destination)

    def remove_loss(self, source: str, destination: str, p: float) -> None:
        self._state(source, destination).losses.remove(p)
        self._apply(source, destination)

    def add_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        self._state(source, destination).delays.append((extra_ns / 1e9, jitter_ns / 1e9))
        self._apply(source, destination)

    def remove_delay(self, source: str, destination: str, extra_ns: int, jitter_ns: int = 0) -> None:
        self._state(source, destination).delays.remove((extra_ns / 1e9, jitter_ns / 1e9))
        self._apply(source, destination)

    async def close(self) -> None:
        for proxy in self.proxies.values():
            await proxy.close()
