"""Kestrel's live servers on asyncio: the memcache port, the text port and the admin HTTP
port (``/stats.json``, ``/stats.txt``), over one QueueCollection.

Each connection is an ``asyncio.Protocol`` feeding a sans-IO parser; its requests run
strictly in order (as the original's serial dispatcher), eagerly when they need not wait.
A disconnect cancels the request that waits — a blocking read gives up its place, and the
item it was woken for goes to the next waiter — and aborts the connection's open reads.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from aiohttp import web

from lab.backends.kestrel.core.collection import QueueCollection
from lab.backends.kestrel.wire.memcache import MemcacheHandler
from lab.backends.kestrel.core.session import Session
from lab.backends.kestrel.wire.text import TextHandler
from lab.backends.kestrel.wire.protocol import MemcacheParser, ProtocolDrop, TextParser

log = logging.getLogger(__name__)


PUMP_BATCH = 64  # pipelined requests run per event-loop turn before others get theirs


class Connection(asyncio.Protocol):
    """One client connection: its parser, session and handler, requests strictly in order.

    A request runs eagerly inside ``data_received``: most (a set, a get that finds an
    item) complete without waiting, and then cost no task switch and no extra loop turn.
    One that must wait (a blocking get, an fsync, a monitor stream) is handed, already
    started, to a task; later requests wait in the parser until it is done.
    """

    def __init__(self, server: "KestrelServer", parser: Any, make_handler: Callable[[Session], Any]):
        self.server = server
        self.parser = parser
        self.make_handler = make_handler
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self.handler: Any = None
        self.task: asyncio.Task | None = None  # the request that is waiting, if any
        self.idle_timer: asyncio.TimerHandle | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        collection = self.server.collection
        self.session = Session(collection, self.server.max_open_transactions)
        self.handler = self.make_handler(self.session)
        collection.stats.curr_connections += 1
        collection.stats.total_connections += 1
        self.server.connections.add(self)
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        self.server.collection.stats.bytes_read += len(data)
        self.parser.feed(data)
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
        assert self.session is not None
        self.session.close()
        self.server.collection.stats.curr_connections -= 1
        self.server.connections.discard(self)

    async def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self.server.collection.stats.bytes_written += len(data)

    def _pump(self) -> None:
        """Run the parsed requests in order until one must wait or none is left."""
        for _ in range(PUMP_BATCH):
            if self.closed or self.task is not None:
                return
            try:
                request = self.parser.next_request()
            except ProtocolDrop as e:
                log.info("dropping a connection: %s", e)
                return self._close()
            if request is None:
                return
            coro = self.handler.handle(request, self.send)
            try:
                waiting_on = coro.send(None)
            except StopIteration as done:
                if done.value is False:
                    return self._close()
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
        self._pump()

    def _failed(self, exc: BaseException | None = None) -> None:
        log.error("kestrel: a request failed; closing its connection", exc_info=exc or True)
        self._close()

    def _close(self) -> None:
        self.closed = True  # no request after this one runs: its reply could not be sent
        if self.transport is not None:
            self.transport.close()

    def _arm_idle_timer(self) -> None:
        timeout = self.server.client_timeout
        if timeout is None:
            return
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = asyncio.get_running_loop().call_later(timeout, self._idle)

    def _idle(self) -> None:
        if self.task is None:  # clientTimeout: idle too long (a blocked read is not idle)
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


class KestrelServer:
    """The listeners of one collection; ``start()`` binds, ``stop()`` closes."""

    def __init__(self, collection: QueueCollection, max_open_transactions: int = 1,
                 client_timeout: float | None = None, on_shutdown: Callable[[], None] | None = None,
                 on_reload: Callable[[], None] | None = None):
        self.collection = collection
        self.max_open_transactions = max_open_transactions
        self.client_timeout = client_timeout
        self.on_shutdown = on_shutdown
        self.on_reload = on_reload
        self.connections: set[Connection] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.admin: web.AppRunner | None = None
        self.ports: dict[str, int] = {}

    async def start(self, host: str = "127.0.0.1", memcache_port: int | None = 22133,
                    text_port: int | None = None, admin_port: int | None = None) -> dict[str, int]:
        """Bind the ports given (0 = any free one); the bound ports by protocol."""
        loop = asyncio.get_running_loop()
        if memcache_port is not None:
            server = await loop.create_server(
                lambda: Connection(self, MemcacheParser(),
                                   lambda s: MemcacheHandler(s, self.on_shutdown, self.on_reload)),
                host, memcache_port, reuse_address=True)
            self.servers.append(server)
            self.ports["memcache"] = server.sockets[0].getsockname()[1]
        if text_port is not None:
            server = await loop.create_server(
                lambda: Connection(self, TextParser(), lambda s: TextHandler(s, self.on_shutdown)),
                host, text_port, reuse_address=True)
            self.servers.append(server)
            self.ports["text"] = server.sockets[0].getsockname()[1]
        if admin_port is not None:
            self.admin = web.AppRunner(self._admin_app(), access_log=None)
            await self.admin.setup()
            site = web.TCPSite(self.admin, host, admin_port)
            await site.start()
            self.ports["admin"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return dict(self.ports)

    def _admin_app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.get("/stats.json", self._stats_json), web.get("/stats.txt", self._stats_txt)])
        return app

    def stats(self) -> dict[str, Any]:
        """Global and per-queue stats, named as the original's ostrich admin port."""
        c = self.collection
        out: dict[str, Any] = {k: _number(v) for k, v in c.global_stats()}
        out["cmd_monitor"] = c.stats.cmd_monitor
        out["cmd_monitor_get"] = c.stats.cmd_monitor_get
        out["status"] = c.status
        for name in c.names():
            for key, value in c.queue_stats(name):
                out[f"q/{name}/{key}"] = _number(value)
        for alias in sorted(c.config.aliases):
            for key, value in c.queue_stats(alias):
                out[f"q/{alias}/{key}"] = _number(value)
        return out

    async def _stats_json(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _stats_txt(self, request: web.Request) -> web.Response:
        lines = [f"{k}: {v}" for k, v in self.stats().items()]
        return web.Response(text="\n".join(lines) + "\n")

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        for server in self.servers:
            await server.wait_closed()
        if self.admin is not None:
            await self.admin.cleanup()


def _number(value: str) -> Any:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


__all__ = ["KestrelServer", "Connection"]
