"""The sim world's byte streams: a design's sans-IO ``ServerConnection`` behind a node's
named port, and a client's ``Connection`` to it, over the simulated network.

A client's exchange is one simulated message each way: the bytes it sends, and every byte
the server's connection wrote while it handled them (with whether it then closed). So a
stream here is as FIFO and as faulty as the network's links: a partition or a pause
delays or drops the exchange, and the client's timeout decides, as over TCP. A client that
gives up on an exchange closes its connection, as a real client does, and the server's
side then cancels the request that waits and tells the protocol (``lost``); the close is
retransmitted until it arrives, as TCP's FIN is, so a split delays it and does not lose it. The sim does
not enforce a connection's idle timeout: a simulated client is never idle by accident.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from lab.runtime import Accept, CallTimeout, ProtocolDrop, RemoteError, ServerConnection, Unreachable
from lab.service import request_kind

if TYPE_CHECKING:
    from models.network import SimNetPort
    from models.world import SimRuntime, SimTask

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class StreamData:
    """Bytes from a client's connection ``conn`` to the node's port ``port``."""

    port: str
    conn: str
    data: bytes


@dataclass(frozen=True)
class StreamClose:
    """The client closed connection ``conn``."""

    port: str
    conn: str


class _Accepted:
    __slots__ = ("conn", "running", "closed")

    def __init__(self, conn: ServerConnection):
        self.conn = conn
        self.running: "SimTask | None" = None
        self.closed = False


class SimListeners:
    """The ports one node incarnation listens on, and their open connections."""

    def __init__(self, runtime: "SimRuntime") -> None:
        self.rt = runtime
        self.ports: dict[str, Accept] = {}
        self.open: dict[tuple[str, str], _Accepted] = {}

    def accepts(self, message: Any) -> bool:
        return isinstance(message, (StreamData, StreamClose))

    def started(self, message: StreamData | StreamClose, task: "SimTask | None") -> None:
        """``message`` arrived, and ``task`` handles it (None: not yet known): the connection
        opens at its first bytes, and a close cancels the task if the client leaves first."""
        if not isinstance(message, StreamData):
            return
        key = (message.port, message.conn)
        accepted = self.open.get(key)
        if accepted is None and message.port in self.ports:
            accepted = self.open[key] = _Accepted(self.ports[message.port]())
        if accepted is not None:
            accepted.running = task

    def waiting(self, message: StreamData | StreamClose, task: "SimTask") -> None:
        """The handling of ``message`` waits, driven by ``task``: a close cancels it."""
        if isinstance(message, StreamData):
            accepted = self.open.get((message.port, message.conn))
            if accepted is not None and not accepted.closed:
                accepted.running = task

    async def handle(self, source: str, message: StreamData | StreamClose) -> tuple[bytes, bool]:
        """What the connection wrote while it handled ``message``'s bytes, and whether it is closed."""
        key = (message.port, message.conn)
        if isinstance(message, StreamClose):
            self._close(key, cancel=True)
            return b"", True
        accepted = self.open.get(key)  # opened by ``started``
        if accepted is None:
            if message.port not in self.ports:  # connection refused: the client learns it before sending anything
                raise Unreachable(f"nothing listens on port {message.port!r}")
            return b"", True  # closed while this message was on its way
        out: list[bytes] = []

        async def send(chunk: bytes) -> None:
            if not accepted.closed:
                out.append(chunk)

        conn = accepted.conn
        conn.feed(message.data)
        cpu = self.rt.cpu
        nbytes = len(message.data)  # charged to the first request the bytes complete
        transport = round(cpu.model.transport_ns) if cpu is not None else 0  # ... with the chunk's transport
        try:
            while not accepted.closed and (request := conn.next_request()) is not None:
                if cpu is not None:
                    await cpu.serve(request_kind(conn, request), nbytes, transport)
                    nbytes = transport = 0
                if not await conn.handle(request, send):
                    self._close(key)
        except ProtocolDrop as e:
            log.info("dropping a connection: %s", e)
            self._close(key)
        except Exception:
            log.error("a request failed; closing its connection", exc_info=True)
            self._close(key)
        finally:
            accepted.running = None
        return b"".join(out), accepted.closed

    def _close(self, key: tuple[str, str], cancel: bool = False) -> None:
        accepted = self.open.pop(key, None)
        if accepted is None or accepted.closed:
            return
        accepted.closed = True
        if cancel and accepted.running is not None and not accepted.running.done():
            accepted.running.cancel()  # the client left: a blocking read gives up its place
        accepted.conn.lost()


class SimConnection:
    """A client's connection to ``node``'s port ``port``: a fresh connection id after every
    failure, as a real client reconnects."""

    def __init__(self, net: "SimNetPort", node: str, port: str):
        self.net, self.node, self.port = net, node, port
        self.conn: str | None = None

    async def exchange(self, data: bytes, receive: Callable[[bytes], T | None], timeout: float) -> T:
        if self.conn is None:
            self.conn = self.net.new_connection_id()
        try:
            out, closed = await self.net.call(self.node, StreamData(self.port, self.conn, data), timeout)
        except CallTimeout:
            self._drop()
            raise
        except RemoteError as e:
            self.conn = None
            if isinstance(e.error, Unreachable):
                raise Unreachable(f"{self.node}:{self.port}: {e.error}") from None
            raise
        if closed:
            self.conn = None
        reply = receive(out) if out else None
        if reply is None:
            raise ConnectionResetError(f"{self.node}:{self.port} closed the connection before the reply")
        return reply

    def _drop(self) -> None:
        if self.conn is not None:
            self.net.send(self.node, StreamClose(self.port, self.conn), reliable=True)  # a FIN: retransmitted
            self.conn = None

    async def close(self) -> None:
        self._drop()
