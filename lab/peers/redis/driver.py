"""Redis as a peer: ``redis-server`` (Debian's ``redis-server`` package) with the append-only
file on, one stream per queue and one consumer group (``lab``) over it; the client is
redis-py's asyncio client.

put is ``XADD q * b BODY``. A reliable get is ``XREADGROUP GROUP lab ME COUNT 1 BLOCK ms
STREAMS q >`` — the entry waits in the group's pending list until ``XACK`` — and an entry
pending longer than ``claim_ms`` is taken back by the next consumer that looks
(``XAUTOCLAIM``): that is the lease, since Redis redelivers nothing by itself. A release
makes the entry claimable at once (``XCLAIM ... IDLE``), so it comes back before newer ones.
A plain get reads with ``NOACK``: at most once.

What it promises is the documentation's (``redis.conf``, "APPEND ONLY MODE"): the reply to
a write goes out after the AOF ``write()``, and with ``appendfsync always`` after its
``fsync``; ``everysec`` fsyncs once a second, ``no`` leaves it to the kernel. A kill -9
therefore loses nothing (the page cache keeps the AOF), a power loss loses what was not
fsynced. One undocumented-in-the-reply case the docs do state: under ``everysec`` a write
is postponed up to two seconds while a background fsync is slow, and replies still go out.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Mapping, Sequence

from lab.design import (TIMEOUT, About, Delivery, Option, Parts, QueueClient, Rejected, Runtime, Unreachable, choice,
                        whole)
from lab.design.peer import Launch, Peer, Place
from lab.peers.redis.promises import PROMISED

GROUP = "lab"
FSYNCS = ("always", "everysec", "no")


def ping(port: int) -> bool:
    """Is the server on ``port`` answering (not still loading its AOF)?"""
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64).startswith(b"+PONG")


class RedisClient(QueueClient):
    """One connection, redis-py's asyncio client."""

    def __init__(self, peer: "RedisPeer", rt: Runtime, reliable: bool):
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        host, port = peer.address(rt)
        self.rt, self.reliable, self.me = rt, reliable, rt.node
        self.timeout = peer.options["timeout"]
        self.claim_ms = peer.options["claim_ms"]
        # no retries: a command retried after a cut reply may run twice (a second XADD of the
        # same body), and the run must record what the client saw, not hide it
        self.redis = aioredis.Redis(host=host, port=port, socket_connect_timeout=self.timeout,
                                    single_connection_client=True, retry=Retry(NoBackoff(), 0))
        self.claimed_at = -1e9  # when this client last looked for expired leases
        self.released = False  # it released one: look at once

    async def _call(self, *args: Any, wait: float = 0.0) -> Any:
        import redis.exceptions as errors

        try:
            # a blocking read holds the reply for ``wait``: the timeout covers it
            return await asyncio.wait_for(self.redis.execute_command(*args), self.timeout + wait)
        except asyncio.TimeoutError:
            if self.redis.connection is not None:  # a reply may still come: never read it as the next one's
                await self.redis.connection.disconnect()
            raise
        except errors.BusyLoadingError as e:  # still replaying its AOF: it did nothing
            raise Rejected(f"redis is loading: {e}") from e
        except errors.ResponseError as e:
            raise Rejected(str(e)) from e
        except errors.ConnectionError as e:
            if "connecting to" in str(e):  # never connected: the command was not sent
                raise Unreachable(str(e)) from e
            raise

    async def put(self, queue: str, body: bytes) -> None:
        await self._call("XADD", queue, "*", "b", body)

    async def get(self, queue: str, wait: float) -> Delivery | None:
        if self.reliable and (self.released or self.rt.now() - self.claimed_at >= self.claim_ms / 4000):
            claimed = await self._claim(queue)
            if claimed is not None:
                return claimed
        noack = () if self.reliable else ("NOACK",)
        reply = await self._call("XREADGROUP", "GROUP", GROUP, self.me, "COUNT", 1, "BLOCK", max(1, round(wait * 1000)),
                                 *noack, "STREAMS", queue, ">", wait=wait)
        entry = _first(reply)
        if entry is None and self.reliable:
            return await self._claim(queue)  # an empty queue may still hold expired leases
        return None if entry is None else Delivery(queue, entry[1], entry[0] if self.reliable else None)

    async def _claim(self, queue: str) -> Delivery | None:
        self.claimed_at, self.released = self.rt.now(), False
        reply = await self._call("XAUTOCLAIM", queue, GROUP, self.me, self.claim_ms, "0-0", "COUNT", 1)
        entries = reply[1] if reply else []
        for entry_id, fields in entries:
            if fields:  # a pending entry deleted from the stream comes back as None
                return Delivery(queue, _field(fields), entry_id)
        return None

    async def ack(self, delivery: Delivery) -> None:
        if not await self._call("XACK", delivery.queue, GROUP, delivery.token):
            raise Rejected(f"XACK {delivery.token!r}: not pending (its lease ran out and another consumer claimed "
                           f"and acknowledged it)")

    async def release(self, delivery: Delivery) -> None:
        # idle far past any lease: the next XAUTOCLAIM takes it, oldest pending first
        claimed = await self._call("XCLAIM", delivery.queue, GROUP, self.me, 0, delivery.token, "IDLE", 10 ** 12)
        if not claimed:
            raise Rejected(f"release of {delivery.token!r}: not pending")
        self.released = True

    async def backlog(self, queue: str) -> int | None:
        for info in await self._call("XINFO", "GROUPS", queue):  # redis-py reads each group as a dict
            if info.get("name") in (GROUP, GROUP.encode()):
                lag = info.get("lag")  # None when Redis cannot tell (entries deleted)
                return None if lag is None else int(lag) + int(info["pending"])
        return None

    async def close(self) -> None:
        try:
            await self.redis.aclose()
        except Exception:  # a connection a fault cut: nothing to close cleanly
            pass


def _first(reply: Any) -> tuple[bytes, bytes] | None:
    """The one entry of an XREADGROUP reply, as (id, body); None for none."""
    if not reply:
        return None
    _stream, entries = reply[0]
    if not entries:
        return None
    entry_id, fields = entries[0]
    return entry_id, _field(fields)


def _field(fields: Any) -> bytes:
    return fields[1] if isinstance(fields, list) else fields[b"b"]


class RedisPeer(Peer):
    name = "redis"
    parts = Parts(load="lab.peers.redis.load", bench="lab.peers.redis.bench")
    about = About("Redis Streams with a consumer group (XREADGROUP, XACK; XAUTOCLAIM as the lease), append-only file",
                  colour="#8b0000")  # dark red: queuefka has red
    promised = PROMISED
    binary, package = "redis-server", "redis-server"
    ports = ("redis",)
    node = "redis"
    options_declared = (
        TIMEOUT,
        Option("appendfsync", "when the append-only file is fsynced (redis.conf)", "always, everysec or no",
               choice(*FSYNCS), "everysec"),
        Option("claim_ms", "how long an entry stays pending before another consumer claims it (XAUTOCLAIM)",
               "a whole number of milliseconds >= 100", whole(100), 2000),
    )

    def __init__(self, world: Any, options: Mapping[str, Any] | None = None):
        super().__init__(world, options)
        self.recovery_s = self.options["claim_ms"] / 1000 + 1.0

    def launch(self, place: Place) -> Launch:
        port = place.ports["redis"]
        return Launch(
            [self.executable(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(place.data),
             "--appendonly", "yes", "--appendfsync", self.options["appendfsync"], "--save", "",
             "--daemonize", "no", "--protected-mode", "no", "--logfile", ""],
            ready=lambda: ping(port))

    async def declare(self, queues: Sequence[str]) -> None:
        import redis.asyncio as aioredis
        import redis.exceptions as errors

        host, port = self.address(None)
        async with aioredis.Redis(host=host, port=port) as r:
            for queue in queues:
                try:
                    await r.xgroup_create(queue, GROUP, id="0", mkstream=True)
                except errors.ResponseError as e:
                    if "BUSYGROUP" not in str(e):
                        raise

    def client(self, rt: Runtime, reliable: bool) -> RedisClient:
        return RedisClient(self, rt, reliable)
