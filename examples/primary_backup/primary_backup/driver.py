"""`primary_backup` in the lab's runner: two server nodes, ``a`` and ``b`` (``node.py``), and a
client that finds the primary, fails over and follows redirects — the same code in both worlds.

The client talks HTTP over ``rt.net.connect``, a simulated link or real TCP through a proxy
that the lab's faults can cut. It sends each request to the node it last found primary; on
the Runtime's ``CallTimeout``, ``ConnectionLost`` or ``Unreachable`` (raised alike in both
worlds) it turns to the other node, and on a 421 to the node the answer names. A put carries
an id of its own, so that it may be sent again after an unknown outcome (the primary drops a
put it has seen), and so may an ack or release (a settled receipt answers as settled); a get
is not resent after an unknown outcome — its message may be open, and the runner must hear
of the cut. Each operation ends within ``ATTEMPT_TIMEOUTS`` timeouts; when it could not tell
what happened it raises the last ``CallTimeout``/``ConnectionLost`` (or ``OutcomeUnknown``).
"""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from lab.design import (TIMEOUT, About, Backend, Boot, CallTimeout, Connection, ConnectionLost, Delivery, HttpReply,
                        Option, Parts, QueueClient, Rejected, ResponseReader, Runtime, Unreachable, encode_request,
                        whole)
from primary_backup.core.queue import PROMOTE_AFTER_S
from primary_backup.node import NODES, peer_of
from primary_backup.promises import PROMISED

MAX_LENGTH = Option("max_length", "messages a queue holds at most; a put beyond is refused",
                    "a whole number >= 0 (0: no limit)", whole(0), 0)
ATTEMPT_TIMEOUTS = 2.5  # an operation gives up after this many timeouts (plus a get's wait)
BACKOFF_S = 0.05  # between attempts after an answer that says "not now"


class OutcomeUnknown(Exception):
    """The put may have been stored: the node that took it stepped down meanwhile, and the
    client could not reach the new primary to find out. The runner counts it as unknown."""


class PrimaryBackupClient(QueueClient):
    """One producer's or consumer's connections to both nodes; requests go to the primary."""

    def __init__(self, rt: Runtime, conns: dict[str, Connection], reliable: bool, timeout: float):
        self.rt, self.conns, self.reliable, self.timeout = rt, conns, reliable, timeout
        self.current = NODES[0]
        self._prefix = f"{rt.random.getrandbits(48):012x}"  # this client's put ids
        self._numbers = itertools.count(1)

    async def _send(self, method: str, target: str, body: bytes = b"", wait: float = 0.0,
                    resend: bool = True) -> HttpReply:
        """The primary's answer; ``resend``: the request may be sent again after an unknown outcome."""
        deadline = self.rt.now() + wait + ATTEMPT_TIMEOUTS * self.timeout
        unknown: BaseException | None = None  # an attempt that may have been applied
        last: BaseException | None = None
        while (left := deadline - self.rt.now()) > 0:
            node = self.current
            try:
                reply = await self.conns[node].exchange(encode_request(method, target, node, body),
                                                        ResponseReader(method), min(wait + self.timeout, left))
            except (CallTimeout, ConnectionLost) as e:
                self.current = peer_of(node)  # the next request tries the other node
                if not resend:
                    raise
                unknown = last = e
                continue
            except Unreachable as e:  # nothing was sent
                self.current, last = peer_of(node), e
                await self.rt.sleep(min(BACKOFF_S, max(0.0, deadline - self.rt.now())))
                continue
            if reply.status in (421, 503):
                said = _json(reply)
                primary = said.get("primary")
                self.current = primary if primary in self.conns and primary != node else peer_of(node)
                if said.get("maybe"):
                    unknown = OutcomeUnknown(f"{node}: {said.get('error')}")
                last = Rejected(f"{node}: {reply.status} {said.get('error')}")
                await self.rt.sleep(min(BACKOFF_S, max(0.0, deadline - self.rt.now())))
                continue
            return reply
        if unknown is not None:
            raise unknown
        raise last if last is not None else CallTimeout(f"no answer within {ATTEMPT_TIMEOUTS:g} timeouts")

    async def put(self, queue: str, body: bytes) -> None:
        mid = f"{self._prefix}-{next(self._numbers)}"
        _ok(await self._send("POST", f"/queues/{quote(queue, safe='')}/messages?id={mid}", body), "put")

    async def get(self, queue: str, wait: float) -> Delivery | None:
        target = f"/queues/{quote(queue, safe='')}/next?wait={wait!r}&reliable={int(self.reliable)}"
        reply = _ok(await self._send("GET", target, wait=wait, resend=False), "get")
        if reply.status == 204:
            return None
        got = json.loads(reply.body)
        return Delivery(queue, base64.b64decode(got["body"]), got["receipt"])

    async def ack(self, delivery: Delivery) -> None:
        _ok(await self._send("DELETE", f"/receipts/{quote(delivery.token, safe='')}"), "ack")

    async def release(self, delivery: Delivery) -> None:
        _ok(await self._send("POST", f"/receipts/{quote(delivery.token, safe='')}/release"), "release")

    async def close(self) -> None:
        for conn in self.conns.values():
            await conn.close()


def _json(reply: HttpReply) -> dict:
    try:
        said = json.loads(reply.body)
    except ValueError:
        return {}
    return said if isinstance(said, dict) else {}


def _ok(reply: HttpReply, what: str) -> HttpReply:
    """The reply if 2xx; a 4xx is a definite refusal, anything else an unknown outcome."""
    if 200 <= reply.status < 300:
        return reply
    text = reply.body[:200].decode(errors="replace")
    if 400 <= reply.status < 500:
        raise Rejected(f"{what}: {reply.status} {text}")
    raise OutcomeUnknown(f"{what}: HTTP {reply.status} {text}")


class PrimaryBackupBackend(Backend):
    name = "primary_backup"  # must be the entry point's name (pyproject.toml)
    # its parts beyond this class, each a module: `lab serve primary_backup`, the Locust client, planted bugs
    parts = Parts(serve="primary_backup.serve", load="primary_backup.load", mutants="primary_backup.mutants")
    about = About("primary-backup: two in-memory nodes, synchronous replication to the backup, heartbeats "
                  "and epochs, failover; the primary serves alone while its backup is away", colour=None)
    promised = PROMISED  # what it promises: promises.py
    options_declared = (TIMEOUT, MAX_LENGTH)  # `lab run --option max_length=100`
    # a stepped-down primary's messages reach the new one at its next beat (a merge, then a sync)
    recovery_s = 2 * PROMOTE_AFTER_S

    @property
    def server_nodes(self) -> list[str]:
        return list(NODES)

    def boot(self, node: str) -> Boot:
        """What the node runs when it (re)starts in this process (the sim world)."""
        from primary_backup.node import boot_node

        async def boot(rt: Runtime) -> None:
            await boot_node(rt, node, self.options["max_length"])

        return boot

    def serve_args(self, node: str, data_dir: Path, reach: Callable[[str, str], str]) -> list[str]:
        """The flags of ``lab serve primary_backup`` (the live world): which node, where its peer is."""
        return ["--node", node, "--peer", reach(peer_of(node), "peer"),
                "--max-length", str(self.options["max_length"])]

    async def start(self) -> None:
        """Start both nodes, then wait until one leads with the other in step (the load must not
        begin while the nodes are still finding each other: its puts would be acknowledged
        with one copy). After 30 s go on: the run then shows what a pair that did not form does."""
        await super().start()
        rt = self.world.node("control")
        conns = {node: rt.net.connect(node, "http") for node in NODES}
        deadline = rt.now() + 30.0
        try:
            while rt.now() < deadline:
                for conn in conns.values():
                    try:
                        reply = await conn.exchange(encode_request("GET", "/role", "primary_backup"),
                                                    ResponseReader("GET"), self.options["timeout"])
                    except (CallTimeout, ConnectionLost, Unreachable):
                        continue
                    said = _json(reply)
                    if said.get("role") == "primary" and said.get("synced"):
                        return
                await rt.sleep(0.05)
        finally:
            for conn in conns.values():
                await conn.close()

    def client(self, rt: Runtime, reliable: bool) -> QueueClient:
        return PrimaryBackupClient(rt, {node: rt.net.connect(node, "http") for node in NODES}, reliable,
                                   self.options["timeout"])
