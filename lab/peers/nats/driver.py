"""NATS JetStream as a peer: ``nats-server -js`` (Debian's ``nats-server`` package) with file
storage, one work-queue stream per queue and one durable pull consumer (``lab``) over it that
every consumer of the run shares; the client is nats-py (asyncio).

One stream per queue rather than one stream with a subject per queue: a work-queue stream
takes one unfiltered consumer, each stream keeps its own sequence (the order it hands
messages out in), and a stream the broker loses on a power cut takes one queue with it, as the
broker's own unit of loss.

put is ``js.publish`` and waits for the PubAck; nothing is retried (no ``Nats-Msg-Id``
dedup: a retried publish would be a second message), so a publish whose ack times out has
an unknown outcome. A reliable get is ``fetch(1)`` on the consumer: the message is the
delivery's token, leased for ``AckWait`` (``ack_wait_ms``), after which the server hands it
out again, ahead of newer ones. ``ack`` is ``ack_sync`` (the server confirms it); a release
is ``nak`` (redelivered at once, first) followed by a flush, since a nak is fire-and-forget
and the next fetch could otherwise overtake it. A plain get fetches and acks at once.

What it promises is the documentation's and the source's (brokers.md §3): the PubAck goes
out after the message is written to the stream's block file, which is fsynced every
``sync_interval`` — fixed at 2 minutes on 2.9.10, which has no such setting (it rejects the
field). A kill -9 keeps acknowledged publishes (the page cache has them) but may undo
consumer acks, even confirmed ones, so acked messages come again; a power loss may take up
to the last 2 minutes of publishes, or the whole stream. ``ack=none`` (an AckNone consumer)
needs a limits stream, since a work-queue stream takes explicit acks only, and a server that
allows a pull consumer without acks (2.10 on; 2.9.10 refuses one).
"""

from __future__ import annotations

import asyncio
import functools
import re
import subprocess
import urllib.request
from typing import Any, Mapping, Sequence

from lab.design import (TIMEOUT, About, BadOption, Delivery, Option, Parts, QueueClient, Rejected, Runtime,
                        Unreachable, choice, whole)
from lab.design.peer import Launch, MissingBinary, Peer, Place
from lab.design.options import Checked
from lab.peers.nats.promises import DEFAULT_SYNC, DURATION, PROMISED, sync_seconds

DURABLE = "lab"
#: the first release with ``jetstream { sync_interval }`` and with pull consumers that take AckNone
KNOBS_FROM = (2, 10)
def _sync_interval(value: Any) -> str:
    if not isinstance(value, str) or not (value == "always" or DURATION.match(value)):
        raise ValueError("not always or a duration")
    seconds = sync_seconds(value)  # None: always
    if seconds is not None and seconds <= 0:
        raise ValueError("not a positive duration")
    return value


@functools.cache
def server_version(executable: str) -> tuple[int, ...]:
    """``nats-server --version`` (``nats-server: v2.9.10``) as numbers, asked once per binary."""
    out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"v(\d+)\.(\d+)\.(\d+)", out)
    if found is None:
        raise RuntimeError(f"{executable} --version said {out.strip()!r}: no version in it")
    return tuple(int(part) for part in found.groups())


def healthy(monitor_port: int) -> bool:
    """Is JetStream up (the monitoring port's ``/healthz?js-enabled-only=true`` says 200)?"""
    url = f"http://127.0.0.1:{monitor_port}/healthz?js-enabled-only=true"
    with urllib.request.urlopen(url, timeout=0.5) as reply:
        return reply.status == 200


def stream_of(queue: str) -> str:
    """The stream holding ``queue`` (a stream name takes no ``.``, ``*``, ``>`` or spaces)."""
    return "lab_" + re.sub(r"[^A-Za-z0-9_-]", "_", queue)


def subject_of(queue: str) -> str:
    return "lab." + re.sub(r"[^A-Za-z0-9_-]", "_", queue)


async def _quiet(*_args: Any) -> None:
    """nats-py's callbacks log every disconnect as an error; the run records what it saw."""


#: seconds between the client's PINGs, and how many may go unanswered before it gives the
#: connection up: nats-py's own 120 s x 2 would leave a client on a dead link for minutes
#: (a partition that holds the bytes, a paused broker), far past a run's length
PING_S, PINGS_OUT = 1, 2


async def connect(host: str, port: int, timeout: float) -> Any:
    """One nats-py connection that never reconnects by itself (a reconnect would replay
    pending publishes behind the lab's back); Unreachable if none could be made."""
    import nats
    from nats.errors import NoServersError

    try:
        return await nats.connect(f"nats://{host}:{port}", connect_timeout=timeout, allow_reconnect=False,
                                  max_reconnect_attempts=0, ping_interval=PING_S,
                                  max_outstanding_pings=PINGS_OUT, error_cb=_quiet, disconnected_cb=_quiet,
                                  closed_cb=_quiet)
    except (NoServersError, OSError, asyncio.TimeoutError) as e:
        raise Unreachable(f"nats {host}:{port}: {e or type(e).__name__}") from e


class NatsClient(QueueClient):
    """One connection; a pull subscription bound to each queue's durable consumer."""

    def __init__(self, peer: "NatsPeer", rt: Runtime, reliable: bool):
        self.host, self.port = peer.address(rt)
        self.rt, self.reliable = rt, reliable
        self.timeout = peer.options["timeout"]
        self.acks = peer.options["ack"] == "explicit"
        self.nc: Any = None
        self.js: Any = None
        self.subs: dict[str, Any] = {}

    async def _js(self) -> Any:
        """The JetStream context of a live connection: a closed one (the server died or a
        proxy cut it) is replaced, and its subscriptions with it."""
        if self.nc is None or self.nc.is_closed:
            self.subs.clear()
            self.nc = await connect(self.host, self.port, self.timeout)
            self.js = self.nc.jetstream(timeout=self.timeout)
        return self.js

    async def _drop(self) -> None:
        """Give the connection up (a reply that comes later goes to an inbox no one reads)."""
        nc, self.nc = self.nc, None
        self.subs.clear()
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except Exception:  # a connection a fault cut: nothing to close cleanly
                pass

    async def _sub(self, queue: str) -> Any:
        js = await self._js()
        sub = self.subs.get(queue)
        if sub is None:
            sub = self.subs[queue] = await js.pull_subscribe_bind(DURABLE, stream=stream_of(queue))
        return sub

    async def put(self, queue: str, body: bytes) -> None:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import APIError, NoStreamResponseError

        js = await self._js()
        try:
            await js.publish(subject_of(queue), body, timeout=self.timeout)
        except NatsTimeout:
            await self._drop()  # the link may be dead: the next call connects afresh
            raise
        except NoStreamResponseError as e:  # no stream listens on the subject: nothing stored it
            raise Rejected(f"publish to {queue}: no stream (lost in a crash?): {e}") from e
        except APIError as e:  # the stream answered with an error: it did not store it
            raise Rejected(f"publish to {queue}: {e}") from e

    async def get(self, queue: str, wait: float) -> Delivery | None:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import NotFoundError

        try:
            sub = await self._sub(queue)
        except NotFoundError as e:  # the consumer or its stream is gone (a power cut took it)
            raise Rejected(f"fetch from {queue}: {e}") from e
        try:
            msgs = await sub.fetch(1, timeout=max(wait, 0.001))
        except NatsTimeout:
            if self.nc.is_closed:  # the connection died under the fetch: what it took is unknown
                raise ConnectionError(f"fetch from {queue}: the connection closed") from None
            return None
        msg = msgs[0]
        if self.acks and not self.reliable:
            await self._ack(msg)  # a plain get: done with it before handing it out
        return Delivery(queue, msg.data, msg if self.acks and self.reliable else None)

    async def _ack(self, msg: Any) -> None:
        from nats.errors import MsgAlreadyAckdError
        from nats.errors import TimeoutError as NatsTimeout

        if msg._client is not self.nc or self.nc.is_closed:
            # the connection it came on is gone: nothing sent; AckWait hands it out again
            raise Rejected("ack: the connection that fetched it is closed")
        try:
            await msg.ack_sync(timeout=self.timeout)
        except NatsTimeout:
            await self._drop()
            raise
        except MsgAlreadyAckdError as e:
            raise Rejected(str(e)) from e

    async def ack(self, delivery: Delivery) -> None:
        if delivery.token is None:
            return  # no acks (ack=none): the fetch took it for good
        await self._ack(delivery.token)

    async def release(self, delivery: Delivery) -> None:
        from nats.errors import MsgAlreadyAckdError

        msg = delivery.token
        if msg is None:
            raise Rejected("release: ack=none takes a message for good")
        if msg._client is not self.nc or self.nc.is_closed:
            raise Rejected("release: the connection that fetched it is closed")
        try:
            await msg.nak()
        except MsgAlreadyAckdError as e:
            raise Rejected(str(e)) from e
        await self.nc.flush(timeout=self.timeout)  # the nak reaches the server before our next fetch

    async def backlog(self, queue: str) -> int | None:
        # the consumer's view, not the stream's message count: after a kill -9 the work queue
        # keeps messages whose acks survived in the consumer but whose deletions did not, and
        # the consumer never hands those out again
        info = await (await self._js()).consumer_info(stream_of(queue), DURABLE)
        return int(info.num_pending) + int(info.num_ack_pending or 0)

    async def close(self) -> None:
        await self._drop()


class NatsPeer(Peer):
    name = "nats"
    parts = Parts(load="lab.peers.nats.load")
    about = About("NATS JetStream: a work-queue stream per queue, file storage, an explicit-ack pull consumer "
                  "(AckWait lease)", colour="#1b9e77")
    promised = PROMISED
    binary, package = "nats-server", "nats-server"
    ports = ("client", "monitor")
    node = "nats"
    options_declared = (
        TIMEOUT,
        Option("ack", "the consumer's AckPolicy: explicit (leased until acked) or none (taken on delivery)",
               "explicit or none", choice("explicit", "none"), "explicit"),
        Option("sync_interval", "how often the file store fsyncs (jetstream { sync_interval }, nats-server 2.10 on)",
               "always or a duration such as 1s, 500ms, 2m", _sync_interval, DEFAULT_SYNC,
               default_text="2m, the server's own; 2.9.10 has no other"),
        Option("ack_wait_ms", "how long a fetched message stays leased before it is redelivered (AckWait)",
               "a whole number of milliseconds >= 100", whole(100), 2000),
    )

    def __init__(self, world: Any, options: Mapping[str, Any] | None = None):
        super().__init__(world, options)
        self.recovery_s = self.options["ack_wait_ms"] / 1000 + 1.0

    @classmethod
    def check_options(cls, options: Mapping[str, Any] | None, world: str | None = None) -> Checked:
        """The declared options, and those the installed binary cannot take refused in one line
        naming its version (asked once): ``sync_interval`` other than the default and
        ``ack=none`` need 2.10 on."""
        checked = super().check_options(options, world)
        wants = [f"sync_interval={checked['sync_interval']}"] * (checked["sync_interval"] != DEFAULT_SYNC)
        wants += ["ack=none"] * (checked["ack"] == "none")
        if wants:
            try:
                executable = cls.executable()
            except MissingBinary:
                return checked  # starting says which package to install
            version = server_version(executable)
            if version < KNOBS_FROM:
                reason = ("it refuses a pull consumer without acks ('consumer in pull mode requires ack policy')"
                          if wants[0] == "ack=none" else
                          "it has no jetstream sync_interval setting (its config rejects the field)")
                raise BadOption(f"backend 'nats': option {wants[0]}: the installed nats-server is "
                                f"v{'.'.join(map(str, version))}, and {reason}: it needs 2.10 or later")
        return checked

    def launch(self, place: Place) -> Launch:
        monitor = place.ports["monitor"]
        argv = [self.executable(), "-a", "127.0.0.1", "-p", str(place.ports["client"]), "-m", str(monitor),
                "-js", "-sd", str(place.data), "-n", place.node]
        files = {}
        if self.options["sync_interval"] != DEFAULT_SYNC:  # 2.10 on (check_options refused it before)
            files["nats.conf"] = (f"jetstream {{\n  store_dir: {str(place.data)!r}\n"
                                  f"  sync_interval: {self.options['sync_interval']}\n}}\n")
            argv += ["-c", str(place.home / "nats.conf")]
        return Launch(argv, ready=lambda: healthy(monitor), files=files)

    async def declare(self, queues: Sequence[str]) -> None:
        """A file-storage stream per queue (work queue with explicit acks; limits with AckNone)
        and its durable pull consumer, shared by every consumer of the run."""
        from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

        acks = self.options["ack"] == "explicit"
        host, port = self.address(None)
        nc = await connect(host, port, 5.0)
        try:
            js = nc.jetstream(timeout=5.0)
            for queue in queues:
                await js.add_stream(StreamConfig(
                    name=stream_of(queue), subjects=[subject_of(queue)], storage=StorageType.FILE,
                    retention=RetentionPolicy.WORK_QUEUE if acks else RetentionPolicy.LIMITS))
                await js.add_consumer(stream_of(queue), ConsumerConfig(
                    durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT if acks else AckPolicy.NONE,
                    ack_wait=self.options["ack_wait_ms"] / 1000 if acks else None,
                    max_deliver=-1, max_ack_pending=-1))  # no cap: a backlog of leases must not stall the run
        finally:
            await nc.close()

    def client(self, rt: Runtime, reliable: bool) -> NatsClient:
        return NatsClient(self, rt, reliable)

    def describe(self) -> Mapping[str, Any]:
        return {"version": ".".join(map(str, server_version(self.executable())))}
