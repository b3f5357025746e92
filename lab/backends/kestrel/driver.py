"""Kestrel in the runner: one server node, and a client of its memcache port that is the
same code in both worlds.

The node boots ``lab.backends.kestrel.node``: in the sim world on a simulated node, in the
live world as its own process (``lab serve kestrel``, with the options as its config
file). A client speaks the memcache protocol (``wire.client``) over the world's
connection to the node's ``memcache`` port: real TCP through the link's proxy when
live, simulated links in the sim. Reliable reads are ``get q/open`` then ``/close``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from lab.design import (TIMEOUT, About, Backend, Boot, Connection, Delivery, Option, Parts, QueueClient, Rejected,
                        Runtime, World, whole)
from lab.backends.kestrel.config import QUEUE_OPTIONS, ServerConfig, config_from_mapping
from lab.backends.kestrel.wire.client import ReplyReader, encode_get, encode_set, get_key
from lab.backends.kestrel.promises import PROMISED

SERVER = "kestrel"


class KestrelClient(QueueClient):
    """A queue client on one memcache connection (open reads belong to the connection)."""

    def __init__(self, conn: Connection, reliable: bool, timeout: float):
        self.conn, self.reliable, self.timeout = conn, reliable, timeout
        self._gets: dict[tuple[str, float], tuple[str, bytes]] = {}  # a get's key and bytes, per queue and wait

    async def put(self, queue: str, body: bytes) -> None:
        reply = await self.conn.exchange(encode_set(queue, body), ReplyReader(), self.timeout)
        if reply.line != "STORED":
            raise Rejected(f"set {queue}: {reply.line}")

    async def get(self, queue: str, wait: float) -> Delivery | None:
        request = self._gets.get((queue, wait))
        if request is None:  # a client asks the same few: built once each
            if len(self._gets) >= 64:  # a caller whose waits vary: keep the cache small
                self._gets.clear()
            key = get_key(queue, wait, open=self.reliable)
            request = self._gets[(queue, wait)] = (key, encode_get(key))
        key = request[0]
        reply = await self.conn.exchange(request[1], ReplyReader(), wait + self.timeout)
        if reply.line == "END":
            return None
        if reply.value is None:
            raise Rejected(f"get {key}: {reply.line}")
        return Delivery(queue, reply.value, queue if self.reliable else None)

    async def ack(self, delivery: Delivery) -> None:
        await self.conn.exchange(encode_get(get_key(delivery.queue, close=True)), ReplyReader(), self.timeout)

    async def release(self, delivery: Delivery) -> None:
        await self.conn.exchange(encode_get(get_key(delivery.queue, abort=True)), ReplyReader(), self.timeout)

    async def close(self) -> None:
        await self.conn.close()


def _queue_option(key: str):
    """A parser that checks a queue option as the config file would, and keeps the value as given."""
    parse = QUEUE_OPTIONS[key][1]

    def check(value: Any) -> Any:
        parse(value, key)  # ConfigError is a ValueError: reported as a bad option
        return value

    return check


class KestrelBackend(Backend):
    name = "kestrel"
    parts = Parts(serve="lab.backends.kestrel.serve",
                  load="lab.backends.kestrel.load",
                  mutants="lab.backends.kestrel.mutants",
                  bench="lab.backends.kestrel.bench",
                  tools="lab.backends.kestrel.tools")
    about = About("memcache-protocol queue server with a journal; reliable reads (/open, /close) per connection",
                  colour="#1f77b4")
    promised = PROMISED

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

    def __init__(self, world: World, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(world, options)
        queue_options = {k: v for k, v in self.options.items() if k not in ("timeout", "maxOpenTransactions")}
        self.config: ServerConfig = config_from_mapping(
            {"maxOpenTransactions": self.options["maxOpenTransactions"], "default": queue_options}, "options")
        self.timeout = self.options["timeout"]

    def config_toml(self) -> str:
        """The options as a config file of the live server (the original's option names)."""
        lines = [f"maxOpenTransactions = {self.options['maxOpenTransactions']}", "[default]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in self.options.items()  # JSON strings are TOML's
                  if key not in ("timeout", "maxOpenTransactions") and value is not None]
        return "\n".join(lines) + "\n"

    @property
    def server_nodes(self) -> list[str]:
        return [SERVER]

    def boot(self, node: str) -> Boot:
        from lab.backends.kestrel.node import boot_kestrel

        async def boot(rt: Runtime) -> None:
            await boot_kestrel(rt, self.config)

        return boot

    def serve_args(self, node: str, data_dir: Path, reach: Callable[[str, str], str]) -> list[str]:
        config = data_dir.parent / f"{node}.toml"
        config.write_text(self.config_toml())
        return ["--config", str(config)]

    def client(self, rt: Runtime, reliable: bool) -> QueueClient:
        return KestrelClient(rt.net.connect(SERVER, "memcache"), reliable, self.timeout)
