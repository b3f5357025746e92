"""Queuefka in the runner: one server node, and a client of its HTTP front that is the same
code in both worlds.

The node boots ``lab.backends.queuefka.node`` (the broker and its HTTP front): in the sim
world on a simulated node, whose disk loses the unsynced tail on a crash; in the live
world as its own process (``lab serve queuefka``, the options as its flags). A client
speaks HTTP/1.1 (``lab.design.http``) over the world's connection to the node's ``http``
port. Each workload queue is a topic; every consumer is in one group, ``lab``: reliable
acks mean at-least-once (commit after the get), auto acks at-most-once (commit before).
The options are declared on the backend (``options_declared``; ``lab backends`` lists them).
"""

from __future__ import annotations

import base64
import json
from collections import deque
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from lab.design import (TIMEOUT, About, Backend, Boot, Connection, Delivery, Option, Parts, QueueClient, http_body,
                        ResponseReader, Runtime, encode_request, number, whole)
from lab.backends.queuefka.core.broker_api import Config, Fetched
from lab.backends.queuefka.core.writer import FsyncPolicy
from lab.backends.queuefka.wire.http import EPOCH_HEADER
from lab.backends.queuefka.promises import PROMISED

SERVER = "queuefka-0"
GROUP = "lab"
NO_TOPIC_POLL = 0.01  # seconds between looks for a topic that does not exist yet
LEASE_LOST = 409  # the front's status for a lost lease: a commit of records fetched before a restart


def _fsync_text(value: object) -> str:
    """The policy as given, once it parses (Config keeps the text)."""
    FsyncPolicy.parse(str(value))
    return str(value)


def _mode(reliable: bool) -> str:
    return "at-least-once" if reliable else "at-most-once"


class QueuefkaClient(QueueClient):
    """A client of the node's HTTP front (``wire.http``'s requests over the world's
    connection): a 4xx is a definite refusal, a timeout or a 5xx an unknown outcome.

    It fetches up to ``prefetch`` records at a time and hands them out one by one, as a
    Kafka consumer does; each delivery's token is the address after its record and the
    broker's epoch when it was fetched, so an ack commits exactly up to it — or is refused
    if the broker restarted since. The records it holds are leased to its connection: when
    that breaks (a request of its own fails, or the connection is found ``broken`` before a
    held record is handed out), or a commit is refused, it drops them (the broker hands them
    out again)."""

    def __init__(self, rt: Runtime, conn: Connection, reliable: bool, timeout: float, prefetch: int):
        self.rt, self.conn, self.timeout = rt, conn, timeout
        self.mode = _mode(reliable)
        self.prefetch = prefetch
        self._buffered: dict[str, deque[tuple[bytes, tuple[int, int | None]]]] = {}

    async def _fetch(self, queue: str, wait: float) -> Fetched:
        """A topic that does not exist yet is an empty get, not an error: consumers often
        poll before the first put. Look again every ``NO_TOPIC_POLL`` until ``wait`` is over."""
        while True:
            fetched = await self._fetch_once(queue, wait)
            if fetched is not None:
                return fetched
            if wait <= 0:
                return Fetched([], 0)
            pause = min(wait, NO_TOPIC_POLL)
            await self.rt.sleep(pause)
            wait -= pause

    async def get(self, queue: str, wait: float) -> Delivery | None:
        if self._buffered and self.conn.broken:
            # The connection they were leased to broke while this client held them (a consumer
            # pausing across the broker's restart): the broker hands them out again, maybe to
            # another consumer already. Handing them out here as well would deliver them twice.
            self._buffered.clear()
        buffered = self._buffered.get(queue)
        if not buffered:
            fetched = await self._fetch(queue, wait)
            if not fetched.records:
                return None
            tokens = [(address, fetched.epoch) for address, _ in fetched.records[1:]] + [(fetched.next, fetched.epoch)]
            buffered = self._buffered[queue] = deque(zip((p for _, p in fetched.records), tokens))
        payload, token = buffered.popleft()
        return Delivery(queue, payload, token)

    async def _send(self, method: str, target: str, timeout: float, body: bytes = b"",
                    headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, bytes, dict[str, str]]:
        try:
            reply = await self.conn.exchange(encode_request(method, target, SERVER, body, headers),
                                             ResponseReader(method), timeout)
        except Exception:
            # The connection is closed now (its state unknown) and the next request opens
            # another: the broker ends this one's session and hands out again what it
            # leased. Handing those records out here too would deliver them twice: drop them.
            self._buffered.clear()
            raise
        return reply.status, reply.body, reply.headers

    async def put(self, queue: str, body: bytes) -> None:
        _reply(*(await self._send("POST", f"/topics/{quote(queue, safe='')}/messages", self.timeout, body))[:2],
               f"put {queue}")

    async def _fetch_once(self, queue: str, wait: float) -> Fetched | None:
        """One fetch; None if the topic does not exist (yet)."""
        target = (f"/topics/{quote(queue, safe='')}/messages?group={GROUP}&max={self.prefetch}"
                  f"&wait={wait!r}&mode={self.mode}")
        status, body, headers = await self._send("GET", target, wait + self.timeout)
        if status == 404:  # the front's answer for a topic that does not exist
            return None
        reply = _reply(status, body, f"fetch {queue}")
        epoch = headers.get(EPOCH_HEADER.lower())
        return Fetched([(r["address"], base64.b64decode(r["payload"])) for r in reply["records"]], reply["next"],
                       None if epoch is None else int(epoch))

    async def ack(self, delivery: Delivery) -> None:
        """Commit up to the delivery's token, with the epoch of the fetch it came in. A 409
        is a lost lease (the node restarted since that fetch): a definite refusal; the record
        comes back, and so does everything fetched with it, which is dropped here."""
        address, epoch = delivery.token
        status, body, _ = await self._send("POST", f"/topics/{quote(delivery.queue, safe='')}/groups/{GROUP}/commit",
                                           self.timeout, b'{"address": %d}' % address,
                                           () if epoch is None else ((EPOCH_HEADER, str(epoch)),))
        if status == LEASE_LOST:
            self._buffered.clear()
        _reply(status, body, f"commit {delivery.queue}")

    async def backlog(self, queue: str) -> int | None:
        """Whether the group ``lab`` has records of ``queue`` it has not acknowledged — leased
        to a consumer (whose fetch's reply may have been cut: they come back when its
        session ends) or not yet fetched: 1 if so (the count is unknown), else 0."""
        status, body, _ = await self._send("GET", f"/topics/{quote(queue, safe='')}", self.timeout)
        if status == 404:
            return 0
        stats = _reply(status, body, f"stats {queue}")
        group = stats["groups"].get(GROUP)
        committed = stats["first_address"] if group is None else group["committed"]
        return int(committed < stats["end_address"])

    async def close(self) -> None:
        await self.conn.close()


def _reply(status: int, body: bytes, what: str) -> Any:
    """The JSON body of a 2xx (``http_body`` says what any other status raises)."""
    return json.loads(http_body(status, body, what))


class QueuefkaBackend(Backend):
    name = "queuefka"
    parts = Parts(serve="lab.backends.queuefka.serve",
                  load="lab.backends.queuefka.load",
                  mutants="lab.backends.queuefka.mutants",
                  bench="lab.backends.queuefka.bench")
    about = About("embedded append-only segment log (one log per topic) with consumer groups; HTTP front when live",
                  colour="#d62728")
    promised = PROMISED

    options_declared = (
        TIMEOUT,
        Option("fsync", "when the log is fsynced", "never, always, <N>ms or <N>records", _fsync_text,
               default_text="never, as the original"),
        Option("segment_size_hint", "bytes per segment before rotation", "a whole number >= 0", whole(0),
               default_text="10 MiB"),
        Option("retention_age", "seconds after which consumed segments are deleted", "a number of seconds > 0",
               number(0.0), default_text="keep every segment"),
        Option("retention_interval", "seconds between retention sweeps", "a number of seconds > 0", number(0.0),
               default_text="1"),
        Option("session_timeout", "seconds before uncommitted fetched records are handed out again",
               "a number of seconds > 0", number(0.0), default_text="10"),
        Option("prefetch", "records a client fetches per request", "a whole number >= 1", whole(1), 100,
               per_consumer=(1, 3, 10, 100)),
    )

    def __init__(self, world, options=None):
        super().__init__(world, options)
        keys = {"segment_size_hint", "fsync", "retention_age", "retention_interval", "session_timeout"}
        self.config = Config(**{k: v for k, v in self.options.items() if k in keys})
        # Records leased to a reader whose connection's close was lost come back once its
        # session has been idle this long (a close seen hands them back at once).
        self.recovery_s = self.config.session_timeout + 1.0
        self.timeout = self.options["timeout"]

    @property
    def server_nodes(self) -> list[str]:
        return [SERVER]

    def boot(self, node: str) -> Boot:
        from lab.backends.queuefka.node import boot_queuefka

        async def boot(rt: Runtime) -> None:
            await boot_queuefka(rt, self.config)

        return boot

    def serve_args(self, node: str, data_dir: Path, reach: Callable[[str, str], str]) -> list[str]:
        """The options as flags of ``lab serve queuefka``."""
        c = self.config
        flags = ["--fsync", c.fsync, "--segment-size", str(c.segment_size_hint),
                 "--retention-interval", repr(c.retention_interval), "--session-timeout", repr(c.session_timeout)]
        return flags + (["--retention", repr(c.retention_age)] if c.retention_age is not None else [])

    def client(self, rt: Runtime, reliable: bool) -> QueueClient:
        return QueuefkaClient(rt, rt.net.connect(SERVER, "http"), reliable, self.timeout, self.options["prefetch"])
