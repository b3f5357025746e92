"""Kestrel in the runner: the backend adapter for both worlds.

- sim: clients send raw memcache-protocol bytes over the simulated network, tagged with
  a connection id; the server node feeds them to the same parser, sessions and handlers
  that serve real sockets (a closed connection aborts its open reads there too).
- live: the server is its own process (``lab serve kestrel`` with the options as its
  config file); pymemcache clients, each on its own thread (pymemcache blocks; the
  runner's event loop must not).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

from lab.backends import Backend, Delivery, QueueClient, Rejected
from lab.backends.kestrel.config import QUEUE_OPTIONS, ServerConfig, config_from_mapping
from lab.backends.kestrel.core.collection import QueueCollection
from lab.backends.kestrel.wire.memcache import MemcacheHandler
from lab.backends.kestrel.core.session import Session
from lab.backends.kestrel.wire.protocol import MemcacheParser, ProtocolDrop
from lab.runtime import Runtime
from lab.backends.options import TIMEOUT, Option, whole
from lab.storage import RuntimeStore
from lab.verdict import ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, FIFO, Allowance, Promises

SERVER = "kestrel"
QUEUE_PATH = "queues"


class SimMemcacheFront:
    """The server side of simulated connections: ``(conn, bytes)`` in, response bytes out."""

    def __init__(self, collection: QueueCollection, max_open: int):
        self.collection = collection
        self.max_open = max_open
        self.connections: dict[str, tuple[MemcacheParser, MemcacheHandler]] = {}

    async def handle(self, source: str, message: Any) -> Any:
        kind, conn, data = message
        if kind == "close":
            self._close(conn)
            return b""
        state = self.connections.get(conn)
        if state is None:
            session = Session(self.collection, self.max_open)
            state = self.connections[conn] = (MemcacheParser(), MemcacheHandler(session))
        parser, handler = state
        parser.feed(data)
        out: list[bytes] = []

        async def send(chunk: bytes) -> None:
            out.append(chunk)

        try:
            while (request := parser.next_request()) is not None:
                if not await handler.handle(request, send):
                    self._close(conn)
                    break
        except ProtocolDrop:
            self._close(conn)
        return b"".join(out)

    def _close(self, conn: str) -> None:
        state = self.connections.pop(conn, None)
        if state is not None:
            state[1].session.close()


def parse_reply(reply: bytes) -> bytes | None | str:
    """A client's reading of one reply: an item, None (END), or the status line."""
    if reply.startswith(b"VALUE "):
        header, _, rest = reply.partition(b"\r\n")
        size = int(header.split(b" ")[3])
        return rest[:size]
    line = reply.split(b"\r\n", 1)[0].decode("latin-1")
    return None if line == "END" else line


class SimKestrelClient(QueueClient):
    _ids = itertools.count()

    def __init__(self, rt: Runtime, reliable: bool, timeout: float):
        self.rt, self.reliable, self.timeout = rt, reliable, timeout
        self.conn = f"{rt.node}#{next(self._ids)}"

    async def _call(self, request: bytes, wait: float = 0.0) -> bytes | None | str:
        reply = await self.rt.net.call(SERVER, ("data", self.conn, request), wait + self.timeout)
        return parse_reply(reply)

    async def put(self, queue: str, body: bytes) -> None:
        reply = await self._call(b"set %s 0 0 %d\r\n%s\r\n" % (queue.encode(), len(body), body))
        if reply != "STORED":
            raise Rejected(f"set {queue}: {reply}")

    async def get(self, queue: str, wait: float) -> Delivery | None:
        key = f"{queue}/t={int(wait * 1000)}" + ("/open" if self.reliable else "")
        reply = await self._call(f"get {key}\r\n".encode(), wait)
        if isinstance(reply, str):
            raise Rejected(f"get {key}: {reply}")
        return None if reply is None else Delivery(queue, reply, queue if self.reliable else None)

    async def ack(self, delivery: Delivery) -> None:
        await self._call(f"get {delivery.queue}/close\r\n".encode())

    async def release(self, delivery: Delivery) -> None:
        await self._call(f"get {delivery.queue}/abort\r\n".encode())

    async def close(self) -> None:
        try:
            await self.rt.net.call(SERVER, ("close", self.conn, b""), self.timeout)
        except Exception:
            pass  # the server may be down; its sessions die with it


class LiveKestrelClient(QueueClient):
    """pymemcache on a thread of its own (calls stay in order, the loop stays free)."""

    def __init__(self, address: tuple[str, int], reliable: bool, timeout: float):
        from lab.backends.kestrel.client import KestrelMemcacheClient

        self.reliable = reliable
        self.client = KestrelMemcacheClient(address, timeout=timeout + 1.0)
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kestrel-client")

    async def _run(self, fn, *args, **kw):
        return await asyncio.get_running_loop().run_in_executor(self.thread, lambda: fn(*args, **kw))

    async def put(self, queue: str, body: bytes) -> None:
        if not await self._run(self.client.put, queue, body):
            raise Rejected(f"set {queue}: NOT_STORED")

    async def get(self, queue: str, wait: float) -> Delivery | None:
        data = await self._run(self.client.take, queue, int(wait * 1000), open=self.reliable)
        return None if data is None else Delivery(queue, data, queue if self.reliable else None)

    async def ack(self, delivery: Delivery) -> None:
        await self._run(self.client.confirm, delivery.queue)

    async def release(self, delivery: Delivery) -> None:
        await self._run(self.client.abort, delivery.queue)

    async def close(self) -> None:
        await self._run(self.client.close)
        self.thread.shutdown(wait=False)


def _queue_option(key: str):
    """A parser that checks a queue option as the config file would, and keeps the value as given."""
    parse = QUEUE_OPTIONS[key][1]

    def check(value: Any) -> Any:
        parse(value, key)  # ConfigError is a ValueError: reported as a bad option
        return value

    return check


class KestrelBackend(Backend):
    name = "kestrel"
    summary = "memcache-protocol queue server with a journal; reliable reads (/open, /close) per connection"

    @classmethod
    def promises(cls, options: Mapping[str, Any], reliable: bool) -> Promises:
        """At-least-once with reliable reads (/open then /close), at-most-once with plain gets;
        FIFO per queue; a crash loses what the journal had not fsynced (spec 4.6)."""
        given = options.get("syncJournal", "never")
        sync = QUEUE_OPTIONS["syncJournal"][1](given, "syncJournal")  # None never, 0 always, P a period
        allowances = []
        if reliable:
            allowances.append(Allowance("reordered", (ANY_FAULT,), "an aborted or rolled-back read returns to the head"))
        if sync is None:
            allowances.append(Allowance("lost", ("crash",), f"syncJournal={given} loses the unsynced tail"))
        elif sync > 0:
            allowances.append(Allowance("lost", ("crash",), f"syncJournal={given} may lose the puts of the last {given}"))
        if sync != 0 and not reliable:  # a crash may forget unsynced removals: their items come again
            allowances += [Allowance(anomaly, ("crash",), f"syncJournal={given} loses unsynced removals")
                           for anomaly in ("duplicated", "reordered")]
        if not reliable:
            allowances.append(Allowance("lost", (ANY_FAULT,), "at-most-once: a get whose reply is cut loses its item"))
        return Promises(f"kestrel with syncJournal={given}, {'reliable reads' if reliable else 'plain gets'}",
                        AT_LEAST_ONCE if reliable else AT_MOST_ONCE, FIFO, tuple(allowances))

    options_declared = (
        TIMEOUT,
        Option("syncJournal", "when a queue's journal is fsynced", "never, always, or a period such as 100ms",
               _queue_option("syncJournal"), default_text="never"),
        Option("maxOpenTransactions", "open reads per connection per queue", "a whole number >= 1", whole(1), 1),
        Option("maxMemorySize", "bytes a queue keeps in memory before read-behind",
               "a size such as 1048576 or \"16MB\"", _queue_option("maxMemorySize"), default_text="128MB"),
        Option("maxItems", "items per queue before NOT_STORED", "a whole number >= 1", whole(1),
               default_text="unlimited"),
    )

    def __init__(self, world, options=None):
        super().__init__(world, options)
        queue_options = {k: v for k, v in self.options.items() if k not in ("timeout", "maxOpenTransactions")}
        self.config: ServerConfig = config_from_mapping(
            {"maxOpenTransactions": self.options["maxOpenTransactions"], "default": queue_options}, "options")
        self.timeout = self.options["timeout"]
        self._process = None  # live: the server's process

    def config_toml(self) -> str:
        """The options as a config file of the live server (the original's option names)."""
        lines = [f"maxOpenTransactions = {self.options['maxOpenTransactions']}", "[default]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in self.options.items()  # JSON strings are TOML's
                  if key not in ("timeout", "maxOpenTransactions") and value is not None]
        return "\n".join(lines) + "\n"

    @property
    def server_nodes(self) -> list[str]:
        return [SERVER]

    async def start(self) -> None:
        if self.world.kind == "live":
            config = self.world.root / f"{SERVER}.toml"
            config.write_text(self.config_toml())
            self._process = await self.world.start_process(SERVER, "kestrel", ["--config", str(config)])
            return

        async def boot(rt: Runtime) -> None:
            collection = QueueCollection(rt, self.config, RuntimeStore(rt, QUEUE_PATH))
            await rt.net.serve(SimMemcacheFront(collection, self.config.max_open_transactions).handle)
            rt.spawn(collection.run_timers(), name="kestrel timers")

        await self.world.start(SERVER, boot)

    def client(self, rt: Runtime, reliable: bool) -> QueueClient:
        if self.world.kind == "live":
            return LiveKestrelClient(self.world.address(SERVER, "memcache", rt.node), reliable, self.timeout)
        return SimKestrelClient(rt, reliable, self.timeout)

    async def stop(self) -> None:
        if self._process is not None:
            self._process.stop()  # SIGTERM: every journal is fsynced and closed
