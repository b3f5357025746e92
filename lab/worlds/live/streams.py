"""The live world's byte streams: a design's sans-IO ``ServerConnection`` driven over
asyncio TCP (``serve_connections``), and a client's ``Connection`` to a node's named port
(``LiveConnection``).

A server connection runs its requests strictly in order, eagerly inside
``data_received`` when they need not wait: most (a memcache set, a get that finds an
item, an HTTP POST) complete without waiting, and then cost no task switch and no extra
loop turn. One that must wait (a blocking get, an fsync, a long poll) is handed, already
started, to a task; later requests wait in the protocol's parser until it is done. A
disconnect cancels the request that waits (a blocking read gives up its place) and tells
the protocol (``lost``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, TypeVar

from lab.design.runtime import Accept, CallTimeout, ConnectionLost, ProtocolDrop, ServerConnection, Unreachable

log = logging.getLogger(__name__)
T = TypeVar("T")

PUMP_BATCH = 64  # pipelined requests run per event-loop turn before other connections get theirs


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``await awaitable``, TimeoutError after ``timeout`` seconds. Inside a task through
    ``asyncio.timeout``: Python 3.11's ``wait_for`` swallows a cancel that lands as the
    awaitable finishes (a refused connection finishes at once), and an interrupted run's
    clients went on against stopped servers. Outside a task (a request a server runs eagerly,
    ``lab.worlds.live.streams``) ``asyncio.timeout`` cannot work, and no cancel can come: ``wait_for``."""
    if asyncio.current_task() is None:
        return await asyncio.wait_for(awaitable, timeout)
    async with asyncio.timeout(timeout):
        return await awaitable


class _Accepted(asyncio.Protocol):
    """One accepted TCP connection driving one ServerConnection."""

    __slots__ = ("conn", "open", "transport", "task", "idle_timer", "closed")

    def __init__(self, conn: ServerConnection, open_connections: set):
        self.conn = conn
        self.open = open_connections
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task | None = None  # the request that is waiting, if any
        self.idle_timer: asyncio.TimerHandle | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.open.add(self)
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        self.conn.feed(data)
        if self.conn.idle_resets_on_data:
            self._arm_idle_timer()
        if self.task is None:
            self._pump()

    def eof_received(self) -> bool:
        return False  # close our side too: a half-closed client is gone

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.task is not None and not self.task.done():
            self.task.cancel()  # a blocking read gives up its place
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.open.discard(self)
        self.conn.lost()

    async def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _pump(self) -> None:
        """Run the parsed requests in order until one must wait or none is left."""
        for _ in range(PUMP_BATCH):
            if self.closed or self.task is not None:
                return
            try:
                request = self.conn.next_request()
            except ProtocolDrop as e:
                log.info("dropping a connection: %s", e)
                return self._close()
            if request is None:
                return
            coro = self.conn.handle(request, self.send)
            try:
                waiting_on = coro.send(None)
            except StopIteration as done:
                if done.value is False:
                    return self._close()
                self._arm_idle_timer()
                continue
            except Exception:
                return self._failed()
            if waiting_on is not None:
                # Until our task takes the wait over, the future is not being awaited by
                # anyone: clear the flag that says so, or another connection awaiting the
                # same future (a shared fsync) is refused ("await wasn't used with future").
                waiting_on._asyncio_future_blocking = False
            self.task = asyncio.get_running_loop().create_task(_finish(coro, waiting_on))
            self.task.add_done_callback(self._waited)
            return
        asyncio.get_running_loop().call_soon(self._pump)  # more pipelined: after the others

    def _waited(self, task: asyncio.Task) -> None:
        self.task = None
        if task.cancelled():
            return
        if task.exception() is not None:
            return self._failed(task.exception())
        if task.result() is False:
            return self._close()
        self._arm_idle_timer()
        self._pump()

    def _failed(self, exc: BaseException | None = None) -> None:
        log.error("a request failed; closing its connection", exc_info=exc or True)
        self._close()

    def _close(self) -> None:
        self.closed = True  # no request after this one runs: its reply could not be sent
        if self.transport is not None:
            self.transport.close()

    def _arm_idle_timer(self) -> None:
        timeout = self.conn.timeout
        if timeout is None:
            return
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = asyncio.get_running_loop().call_later(timeout, self._idle)

    def _idle(self) -> None:
        if self.task is None:  # idle too long (a request that waits is not idle)
            self._close()
        else:
            self._arm_idle_timer()


class _Resume:
    """Awaits the rest of a coroutine that was started by hand and is waiting on
    ``waiting_on`` (the future it yielded): the protocol of ``yield from``, where the
    yielded future carries the flag ``_asyncio_future_blocking`` (asyncio's "a task
    should wait for me") at the moment the task sees it."""

    def __init__(self, coro: Any, waiting_on: Any):
        self.coro, self.waiting_on = coro, waiting_on

    def __await__(self):
        coro, waiting_on = self.coro, self.waiting_on
        if waiting_on is not None:
            waiting_on._asyncio_future_blocking = True  # as Future.__await__ does at its yield
        while True:
            try:
                sent = yield waiting_on
            except BaseException as e:  # a cancel, thrown into the coroutine where it waits
                try:
                    waiting_on = coro.throw(e)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waiting_on = coro.send(sent)
                except StopIteration as done:
                    return done.value


async def _finish(coro: Any, waiting_on: Any) -> Any:
    return await _Resume(coro, waiting_on)


class Listener:
    """A bound TCP port serving one protocol; ``close`` stops it and closes its connections."""

    def __init__(self, server: asyncio.base_events.Server, connections: set[_Accepted]):
        self.server = server
        self.connections = connections
        self.port: int = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        self.server.close()
        for accepted in list(self.connections):
            if accepted.transport is not None:
                accepted.transport.close()
        await self.server.wait_closed()


async def serve_connections(accept: Accept, host: str, port: int) -> Listener:
    """Listen on ``host:port`` (0: any free port), one ``accept()`` per connection."""
    connections: set[_Accepted] = set()
    server = await asyncio.get_running_loop().create_server(
        lambda: _Accepted(accept(), connections), host, port, reuse_address=True)
    return Listener(server, connections)


class _Reply(asyncio.Protocol):
    """The client end of a LiveConnection: feeds what arrives to the waiting exchange."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.receive: Callable[[bytes], Any] | None = None
        self.waiter: asyncio.Future | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.receive is None or self.waiter is None or self.waiter.done():
            return  # nothing asked for it (a late reply after a timeout closes the connection anyway)
        try:
            reply = self.receive(data)
        except Exception as e:  # a reply the protocol cannot read
            self.waiter.set_exception(e)
            return
        if reply is not None:
            self.waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            # The server closed (or the link broke) before the whole reply: it may have acted.
            self.waiter.set_exception(ConnectionLost("the connection closed before the reply"))


class LiveConnection:
    """A client's connection to a named port of a node, opened on first use and again after
    a failure; ``address()`` says where to connect (the link's proxy for a client node)."""

    def __init__(self, address: Callable[[], tuple[str, int]], name: str):
        self.address = address
        self.name = name
        self._protocol: _Reply | None = None

    @property
    def broken(self) -> bool:
        return self._protocol is not None and self._protocol.lost

    async def exchange(self, data: bytes, receive: Callable[[bytes], T | None], timeout: float) -> T:
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if protocol is None or protocol.lost:
            try:
                host, port = self.address()
            except ValueError as e:  # no such port in the address book
                raise Unreachable(f"cannot connect to {self.name}: {e}") from None
            try:
                _, opened = await within(loop.create_connection(_Reply, host, port), timeout)  # not wait_for
            except (OSError, asyncio.TimeoutError) as e:
                raise Unreachable(f"cannot connect to {self.name}: {e or 'no answer'}") from None
            self._protocol = protocol = opened
        waiter = protocol.waiter = loop.create_future()
        protocol.receive = receive
        protocol.transport.write(data)  # type: ignore[union-attr]
        expiry = loop.call_later(timeout, _expire, waiter, self.name, timeout)
        try:
            return await waiter
        except BaseException:
            self._drop()  # its state is unknown: the next exchange opens a new connection
            raise
        finally:
            expiry.cancel()
            protocol.receive = protocol.waiter = None

    def _drop(self) -> None:
        if self._protocol is not None:
            if self._protocol.transport is not None:
                self._protocol.transport.close()
            self._protocol = None

    async def close(self) -> None:
        self._drop()


def _expire(future: asyncio.Future, name: str, timeout: float) -> None:
    if not future.done():
        future.set_exception(CallTimeout(f"no reply from {name} within {timeout:g} s"))
