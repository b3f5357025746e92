"""One Kestrel connection as a world drives it (``lab.design.runtime.ServerConnection``): the
protocol's parser, the connection's session and its command handler, with the
connection and byte counters the stats report. The same object serves a real socket
(the live world) and a simulated link (the sim world)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Awaitable, Callable

from lab.backends.kestrel.core.collection import QueueCollection
from lab.backends.kestrel.core.session import Session
from lab.backends.kestrel.wire.memcache import MemcacheHandler
from lab.backends.kestrel.wire.protocol import MemcacheParser, TextParser
from lab.backends.kestrel.wire.text import TextHandler
from lab.design.runtime import Accept, Send


_GET_FLAGS = ("open", "close", "abort", "peek")


@lru_cache(maxsize=1024)
def _get_kind(key: str) -> str:
    """A get key's kind (``get/close/open``); cached, as a client repeats a handful of keys
    and the sim world asks for every request."""
    return "/".join(["get", *(f for f in key.split("/")[1:] if f in _GET_FLAGS)])


class KestrelConnection:
    """A memcache or text connection over one collection."""

    idle_resets_on_data = True  # clientTimeout: idle means no bytes, and no read waiting

    def __init__(self, collection: QueueCollection, parser: Any, make_handler: Callable[[Session], Any],
                 max_open_transactions: int, client_timeout: float | None):
        self.collection = collection
        self.parser = parser
        self.session = Session(collection, max_open_transactions)
        self.handler = make_handler(self.session)
        self.timeout = client_timeout
        self._send: Send | None = None
        self._counted: Send | None = None
        collection.stats.curr_connections += 1
        collection.stats.total_connections += 1

    def feed(self, data: bytes) -> None:
        self.collection.stats.bytes_read += len(data)
        self.parser.feed(data)

    def next_request(self) -> Any | None:
        return self.parser.next_request()  # ProtocolDrop on a framing error

    def request_kind(self, request: Any) -> str:
        """What kind of request this is, as service-time models name it: the command, and for
        a get its transaction flags (``get/close/open``), which change what it does."""
        if request.command == "get" and request.args:
            return _get_kind(request.args[0])
        return request.command

    def handle(self, request: Any, send: Send):
        if send is not self._send:  # a world passes the same send every time: wrap it once
            stats = self.collection.stats

            def counted(data: bytes) -> Awaitable[None]:  # the world's send, counted: no coroutine of its own
                stats.bytes_written += len(data)
                return send(data)

            self._send, self._counted = send, counted
        return self.handler.handle(request, self._counted)

    def lost(self) -> None:
        self.session.close()  # open reads go back to their queues
        self.collection.stats.curr_connections -= 1


def accept_memcache(collection: QueueCollection, max_open_transactions: int = 1,
                    client_timeout: float | None = None, on_shutdown: Callable[[], None] | None = None,
                    on_reload: Callable[[], None] | None = None) -> Accept:
    """Connections of the memcache port."""
    return lambda: KestrelConnection(collection, MemcacheParser(),
                                     lambda s: MemcacheHandler(s, on_shutdown, on_reload),
                                     max_open_transactions, client_timeout)


def accept_text(collection: QueueCollection, max_open_transactions: int = 1,
                client_timeout: float | None = None, on_shutdown: Callable[[], None] | None = None) -> Accept:
    """Connections of the text port."""
    return lambda: KestrelConnection(collection, TextParser(), lambda s: TextHandler(s, on_shutdown),
                                     max_open_transactions, client_timeout)
