"""The sim world's byte streams: a design's sans-IO ``ServerConnection`` behind a node's
named port, and a client's ``Connection`` to it, over the simulated network.

A send is on the wire when it is sent: the bytes a client's exchange writes travel as one
frame to the server, and every chunk the server's connection writes (``send``) leaves at
that moment as a frame of its own back to the client, so a handler that replies and then
waits (an fsync, a peer) has replied already — and a crash after the send does not recall
it, as in the live world. The client feeds the chunks to the exchange's reader as they
arrive and returns at the reply, while the server's handler may still run. The frames
travel the network's links (latency, loss, partitions, FIFO per link); each carries its
place in the connection's stream, so the client reads them in order, and a chunk a
partition or loss dropped leaves a gap that nothing fills: the exchange times out, as a
stalled TCP stream would make it. Bytes that arrive while no exchange reads (past a
reply) wait for the next exchange on that connection, as in a socket's buffer.

The client's timeout decides, as over TCP. A client that gives up on an exchange closes
its connection, as a real client does, and the server's side then cancels the request
that waits and tells the protocol (``lost``). A close either way (the client's, or a
server that ends a connection) is retransmitted until it arrives, as TCP's FIN is, so a
split delays it and does not lose it. A server runs one request of a connection at a
time, in order: bytes that arrive while one runs wait in the protocol's parser. The sim
does not enforce a connection's idle timeout: a simulated client is never idle by accident.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, NamedTuple, TypeVar

from lab.design.runtime import Accept, CallTimeout, ConnectionLost, ProtocolDrop, ServerConnection, Unreachable
from lab.design.service import request_kind
from models.awaitables import Await, to_ns
from models.host import NetPort, NodeRuntime
from models.tasks import SimTask

log = logging.getLogger(__name__)
T = TypeVar("T")


class StreamData(NamedTuple):
    """Bytes from a client's connection ``conn`` to the node's port ``port``. (Named tuples,
    as ``StreamReply``: one is built per exchange, and a frozen dataclass's constructor costs
    a call per field.)"""

    port: str
    conn: str
    data: bytes


class StreamClose(NamedTuple):
    """The client closed connection ``conn``."""

    port: str
    conn: str


class StreamReply(NamedTuple):
    """A frame from the server's side of connection ``conn`` to the client: the ``seq``-th
    of what it wrote, ``data`` (None: it closed the connection there, a FIN). ``seq`` -1:
    a reset, read at once — the connection was gone when bytes came for it, or (``refused``)
    nothing listens on the port."""

    conn: str
    seq: int
    data: bytes | None
    refused: bool = False


class _Sent:
    """What a server connection's ``send`` returns: an awaitable that is done already (the
    frame left when ``send`` was called), so awaiting it costs no coroutine."""

    __slots__ = ()

    def __await__(self):
        return iter(())


_SENT = _Sent()


class _Accepted:
    __slots__ = ("conn", "running", "closed", "client", "seq", "owner", "nbytes", "transport", "send")
    send: Callable[[bytes], _Sent]  # the connection's one send, set by ``SimListeners._accept``

    def __init__(self, conn: ServerConnection):
        self.conn = conn
        self.running: SimTask | None = None  # the task of the request that waits, if any
        self.closed = False
        self.client = ""  # the client's node, where the connection's frames go
        self.seq = 0  # frames sent so far
        self.owner: StreamData | None = None  # the arrival whose handling runs the requests now
        self.nbytes = 0  # bytes arrived and not yet charged to a request's CPU
        self.transport = 0  # ... and their frames' transport, in ns


class SimListeners:
    """The ports one node incarnation listens on, and their open connections."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.rt = runtime
        self.ports: dict[str, Accept] = {}
        self.open: dict[tuple[str, str], _Accepted] = {}

    def accepts(self, message: Any) -> bool:
        return isinstance(message, (StreamData, StreamClose))

    def arrived(self, message: StreamData | StreamClose) -> None:
        """``message`` arrived: a connection opens at its first bytes, before any request runs."""
        if isinstance(message, StreamData):
            key = (message.port, message.conn)
            if key not in self.open and message.port in self.ports:
                self.open[key] = self._accept(key)

    def waiting(self, message: StreamData | StreamClose, task: SimTask) -> None:
        """The handling of ``message`` waits, driven by ``task``: a close cancels it if it
        is the one running the connection's requests."""
        if isinstance(message, StreamData):
            accepted = self.open.get((message.port, message.conn))
            if accepted is not None and accepted.owner is message and not accepted.closed:
                accepted.running = task

    def reset_all(self) -> None:
        """The process died and its machine did not: the kernel resets every connection it
        had accepted, as a killed server's sockets are closed (the live world's clients read
        the same ``ConnectionLost``). A reset is one frame, never retransmitted: a partition
        drops it, and the client then waits for its timeout."""
        network = self.rt.net.network
        for (_, conn), accepted in self.open.items():
            if accepted.client and not accepted.closed:
                accepted.closed = True
                network.transmit(self.rt, accepted.client, "stream", 0, StreamReply(conn, -1, None))
        self.open.clear()

    def _accept(self, key: tuple[str, str]) -> _Accepted:
        accepted = _Accepted(self.ports[key[0]]())
        net, conn = self.rt.net, key[1]

        def send(chunk: bytes) -> _Sent:  # one for the connection's life, as the live world's
            # on the wire at the call, which the caller awaits at once: no coroutine to run
            if chunk and not accepted.closed and self.rt.alive:
                net.stream(accepted.client, StreamReply(conn, accepted.seq, chunk))  # on the wire now
                accepted.seq += 1
            return _SENT

        accepted.send = send
        return accepted

    async def handle(self, source: str, message: StreamData | StreamClose) -> None:
        """Feed ``message``'s bytes to its connection and run the requests they complete, in
        order; while an earlier arrival's handling runs them, just feed (it takes them next)."""
        key = (message.port, message.conn)
        if isinstance(message, StreamClose):
            self._close(key, cancel=True)
            return
        accepted = self.open.get(key)  # opened by ``arrived``
        if accepted is None:  # refused, or closed while this message was on its way: a reset
            self.rt.net.stream(source, StreamReply(message.conn, -1, None, message.port not in self.ports))
            return
        accepted.client = source
        conn = accepted.conn
        data = message.data
        conn.feed(data)
        rt = self.rt
        cpu = rt.cpu
        if cpu is not None:  # the bytes, and the frame's transport, are charged to the next request
            accepted.nbytes += len(data)
            accepted.transport += round(cpu.model.transport_ns)
        if accepted.owner is not None:
            return
        accepted.owner = message
        process = rt.env._active_proc  # None when run at the arrival (``SimRuntime.start``)
        if process is not None:  # a handling that began in its own task (the node was paused)
            accepted.running = SimTask(process)
        # looked up once per arrival, not per request (a frame mostly carries one request)
        next_request, handle, send = conn.next_request, conn.handle, accepted.send
        kind_of = getattr(conn, "request_kind", None)  # as ``request_kind`` names a request
        try:
            while not accepted.closed and (request := next_request()) is not None:
                if cpu is not None:
                    nbytes, transport = accepted.nbytes, accepted.transport
                    accepted.nbytes = accepted.transport = 0
                    await cpu.serve(kind_of(request) if kind_of is not None else request_kind(conn, request),
                                    nbytes, transport)
                if not await handle(request, send):
                    self._close(key, fin=True)
        except ProtocolDrop as e:
            log.info("dropping a connection: %s", e)
            self._close(key, fin=True)
        except Exception:
            log.error("a request failed; closing its connection", exc_info=True)
            self._close(key, fin=True)
        finally:
            accepted.running = accepted.owner = None

    def _close(self, key: tuple[str, str], cancel: bool = False, fin: bool = False) -> None:
        """Close a connection: ``cancel`` the request that waits (the client left), or send
        the client a ``fin`` (the server ends it)."""
        accepted = self.open.pop(key, None)
        if accepted is None or accepted.closed:
            return
        accepted.closed = True
        if cancel and accepted.running is not None and not accepted.running.done():
            accepted.running.cancel()  # the client left: a blocking read gives up its place
        if fin and self.rt.alive and accepted.client:
            self.rt.net.stream(accepted.client, StreamReply(key[1], accepted.seq, None), reliable=True)
        accepted.conn.lost()


_TIMEOUT = object()  # an exchange's outcomes besides its reply: no reply in time,
_RESET = object()  # ... the server closed the connection first,
_REFUSED = object()  # ... nothing listens on the port


class _Failed:
    """An exchange's outcome: the reader raised ``error`` on the bytes that came."""

    __slots__ = ("error",)

    def __init__(self, error: Exception):
        self.error = error


class SimConnection:
    """A client's connection to ``node``'s port ``port``: a fresh connection id after every
    failure, as a real client reconnects. The network hands it the server's frames
    (``arrived``), registered under its id in its node's ``SimNetPort.connections``."""

    def __init__(self, net: NetPort, node: str, port: str):
        self.net, self.node, self.port = net, node, port
        self.conn: str | None = None
        self.expected = 0  # the next frame's place in the stream
        self.held: dict[int, StreamReply] = {}  # frames that came before an earlier one
        self.unread: list[bytes] = []  # bytes no exchange has read (a socket's receive buffer)
        self.receive: Callable[[bytes], Any] | None = None
        self.waiter: Any = None  # the exchange's SimPy event, while one waits
        self.broken = False  # the server or the network closed it since it was last opened

    async def exchange(self, data: bytes, receive: Callable[[bytes], T | None], timeout: float) -> T:
        net = self.net
        world = net.network.world
        if self.node not in world.nodes:
            raise Unreachable(f"{net.rt.node}: no node called {self.node!r}")
        conn = self.conn if self.conn is not None else self._open()
        waiter = self.waiter = net.rt.env.event()
        self.receive = receive
        net.send(self.node, StreamData(self.port, conn, data))
        if self.unread:  # what came past the last reply is read first, as from a socket
            unread, self.unread = self.unread, []
            for chunk in unread:
                self._feed(chunk)
        if not waiter.triggered:
            world.deadlines.add(to_ns(timeout), waiter, _TIMEOUT)  # the reply, or _TIMEOUT
        try:
            outcome = await Await(waiter)
        finally:
            self.receive = self.waiter = None
        if outcome is _TIMEOUT:
            self._drop()
            raise CallTimeout(f"no reply from {self.node!r} within {timeout:g} s")
        work = net.reply_work()  # the client's CPU for what came back, as for a call's reply
        if work is not None:
            await work
        if outcome is _RESET:
            raise ConnectionLost(f"{self.node}:{self.port} closed the connection before the reply")
        if outcome is _REFUSED:
            raise Unreachable(f"{self.node}:{self.port}: nothing listens on port {self.port!r}")
        if isinstance(outcome, _Failed):  # bytes that are no reply: the connection's state is unknown
            self._drop()
            raise outcome.error
        return outcome

    def arrived(self, frame: StreamReply) -> None:
        """A frame of the server's came: read it, and any held frames it lets through, in order."""
        if frame.seq < 0:  # a reset: at once
            self.broken |= self.conn is not None
            self._forget()
            self._answer(_REFUSED if frame.refused else _RESET)
            return
        if frame.seq != self.expected:
            if frame.seq > self.expected:
                self.held[frame.seq] = frame  # a frame ahead of one still on its way (random latencies)
            return
        while True:
            self.expected += 1
            if frame.data is None:  # the server closed the connection
                self.broken = True
                self._forget()
                self._answer(_RESET)
                return
            self._feed(frame.data)
            if not self.held:
                return
            next_frame = self.held.pop(self.expected, None)
            if next_frame is None:
                return
            frame = next_frame

    def _feed(self, chunk: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.triggered:
            self.unread.append(chunk)
            return
        try:
            reply = self.receive(chunk)  # type: ignore[misc]
        except Exception as e:  # a reply the protocol cannot read
            waiter.succeed(_Failed(e))
            return
        if reply is not None:
            rest = getattr(self.receive, "trailing", None)  # a reader that stops at its reply's end
            if rest:
                self.unread.append(rest)
            waiter.succeed(reply)

    def _answer(self, outcome: object) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.triggered:
            waiter.succeed(outcome)

    def _open(self) -> str:
        self.conn = self.net.new_connection_id()
        self.net.connections[self.conn] = self
        self.expected = 0
        self.broken = False
        return self.conn

    def _forget(self) -> None:
        """The connection is gone: its frames still on the wire are dropped."""
        if self.conn is not None:
            self.net.connections.pop(self.conn, None)
            self.conn = None
        self.held.clear()
        self.unread.clear()

    def _drop(self) -> None:
        if self.conn is not None:
            self.net.send(self.node, StreamClose(self.port, self.conn), reliable=True)  # a FIN: retransmitted
            self._forget()

    async def close(self) -> None:
        self._drop()
