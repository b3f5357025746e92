"""Primer in the runner: ``nodes`` master-master nodes (n1, n2, …), each booting
``lab.backends.primer.node``, and a client of the HTTP client API that is the same code
in both worlds.

Every node takes puts and serves gets, so the client picks a node at random for every
request (as a user spreading load over the cluster would). Reliable reads are the
design's at-least-once consumers (a lease, then an ack with the receipt); plain gets
are its at-most-once consumers (the message is deleted as it is read). Live, each node is
a ``lab serve primer`` process, and the nodes reach each other through the live world's
proxies, so a partition between nodes is an ordinary one; the sim world runs the same
boot on simulated nodes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import quote

from lab.design import (TIMEOUT, About, Backend, BadOption, Boot, Connection, Delivery, HttpReply, Option, Parts,
                        QueueClient, ResponseReader, Runtime, World, choice, encode_request, http_body, number,
                        whole)
from lab.design.options import Checked
from lab.backends.primer.core.config import HEARTBEAT_S, SUSPECT_AFTER_S, NodeConfig
from lab.backends.primer.core.membership import DOWN
from lab.backends.primer.core.replica import ORPHAN_GRACE
from lab.backends.primer.promises import PROMISED


def node_names(count: int) -> list[str]:
    return [f"n{i}" for i in range(1, count + 1)]


class PrimerClient(QueueClient):
    """A user of the client API: one connection per node, a node picked at random per request."""

    def __init__(self, rt: Runtime, nodes: list[Connection], reliable: bool, timeout: float):
        self.rt, self.nodes, self.reliable, self.timeout = rt, nodes, reliable, timeout
        self.mode = "at-least-once" if reliable else "at-most-once"

    async def _send(self, method: str, target: str, body: bytes = b"", timeout: float | None = None,
                    content_type: str = "application/octet-stream") -> HttpReply:
        conn = self.nodes[self.rt.random.randrange(len(self.nodes))]
        request = encode_request(method, target, "primer", body, (("content-type", content_type),))
        return await conn.exchange(request, ResponseReader(method), timeout or self.timeout)

    async def put(self, queue: str, body: bytes) -> None:
        _ok(await self._send("POST", f"/queues/{quote(queue, safe='')}/messages", body), f"put {queue}")

    async def get(self, queue: str, wait: float) -> Delivery | None:
        wait = max(0.0, min(wait, 60.0))
        reply = await self._send("GET", f"/queues/{quote(queue, safe='')}/messages?wait={wait:g}&mode={self.mode}",
                                 timeout=wait + self.timeout)
        if reply.status == 204:
            return None
        got = json.loads(_ok(reply, f"get {queue}").body)
        token = (got["id"], got["receipt"]) if got.get("receipt") else None
        return Delivery(queue, base64.b64decode(got["payload"]), token)

    async def _settle(self, delivery: Delivery, verb: str) -> None:
        message_id, receipt = delivery.token
        body = json.dumps({"receipt": receipt}).encode()
        _ok(await self._send("POST", f"/queues/{quote(delivery.queue, safe='')}/messages/{quote(message_id, safe='')}"
                                     f"/{verb}", body, content_type="application/json"), f"{verb} {delivery.queue}")

    async def ack(self, delivery: Delivery) -> None:
        await self._settle(delivery, "ack")

    async def release(self, delivery: Delivery) -> None:
        await self._settle(delivery, "release")

    async def backlog(self, queue: str) -> int | None:
        """The queue's backlog as the node asked knows it: messages put and not acknowledged
        (a leased one among them: an empty get does not mean an empty queue)."""
        reply = await self._send("GET", f"/queues/{quote(queue, safe='')}")
        return json.loads(reply.body)["backlog"] if reply.status == 200 else None

    async def close(self) -> None:
        for conn in self.nodes:
            await conn.close()


def _ok(reply: HttpReply, what: str) -> HttpReply:
    """The reply if 2xx (``http_body`` says what any other status raises: a 503 — a replica
    or the store away — is an unknown outcome)."""
    http_body(reply.status, reply.body, what)
    return reply


class PrimerBackend(Backend):
    name = "primer"
    parts = Parts(serve="lab.backends.primer.serve",
                  load="lab.backends.primer.load",
                  mutants="lab.backends.primer.mutants",
                  bench="lab.backends.primer.bench",
                  tools="lab.backends.primer.tools",
                  cluster="lab.backends.primer.cluster")
    about = About("master-master replicated queue: gossip membership (Plumtree), W-way sync or chain replication, "
                  "reads from any node, leases and acks broadcast; AP under net-splits", colour="#9467bd")
    promised = PROMISED

    options_declared = (
        TIMEOUT,
        Option("nodes", "master-master nodes (n1, n2, …)", "a whole number >= 1", whole(1), 3),
        Option("replicas", "W: copies of each message (the node that takes the put and W-1 others, shuffled)",
               "a whole number >= 1, at most nodes", whole(1), 2),
        Option("replication", "how a put reaches its W replicas", "sync (all at once) or chain (head -> … -> tail)",
               choice("sync", "chain"), "sync"),
        Option("persistence", "copies on disk", "off (memory only) or aof (an append-only file per queue, fsynced "
               "before a copy counts)", choice("off", "aof"), "off"),
        Option("lease", "seconds an at-least-once get leases a message for", "a number of seconds > 0",
               number(0.0), 5.0),
        Option("suspect_after", f"the failure detector: seconds without a beat from a peer (one every "
               f"{HEARTBEAT_S:g} s) before a node counts it as down and puts skip it",
               f"a number of seconds > {HEARTBEAT_S:g}", number(HEARTBEAT_S), SUSPECT_AFTER_S),
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any] | None, world: str | None = None) -> Checked:
        checked = super().check_options(options, world)
        if checked["replicas"] > checked["nodes"]:
            raise BadOption(f"backend 'primer': option replicas={checked['replicas']}: must be at most "
                            f"nodes={checked['nodes']}")
        return checked

    def __init__(self, world: World, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(world, options)
        self.nodes = node_names(self.options["nodes"])
        # A put acknowledged just before its node crashed reaches consumers only once a
        # replica publishes the orphaned copy (``Replica.orphans``): after the grace, at the
        # next tidy tick, and a broadcast later — invisible to gets and backlogs until then.
        timeout = self.options["timeout"]
        self.recovery_s = ORPHAN_GRACE * timeout + NodeConfig.exchange_tick + timeout
        self.booted: list = []  # PrimerNode, one per boot in this process (sim)

    @property
    def server_nodes(self) -> list[str]:
        return list(self.nodes)

    def _config(self, node: str) -> Any:
        o = self.options
        return NodeConfig(node, tuple(n for n in self.nodes if n != node), replicas=o["replicas"],
                          replication=o["replication"], persistence=o["persistence"], timeout=o["timeout"],
                          lease=o["lease"], suspect_after=o["suspect_after"])

    async def start(self) -> None:
        """Start the nodes, then, where they are processes (live: started one after another,
        seconds apart on a busy machine), wait until every node has heard from every other.
        A node trusts a silent member for ``suspect_after`` from its own boot only: without
        the wait, the first put to an early node could come before a late node's first beat
        and be refused with W = 3 although nothing is wrong. Nodes booted in this process
        (sim) start at one instant and need no wait."""
        await super().start()
        if not self.booted:
            await self._until_formed(self.world.node("control"))

    async def _until_formed(self, rt: Runtime, within: float = 30.0) -> None:
        """Poll every node's ``GET /cluster`` until each lists every node, all up; after
        ``within`` seconds go on (the run then shows what a cluster that did not form does)."""
        deadline = rt.now() + within
        conns = {node: rt.net.connect(node, "http") for node in self.nodes}
        try:
            while rt.now() < deadline:
                formed = True
                for conn in conns.values():
                    try:
                        reply = await conn.exchange(encode_request("GET", "/cluster", "primer"), ResponseReader("GET"),
                                                    self.options["timeout"])
                        members = json.loads(reply.body)["members"] if reply.status == 200 else []
                    except Exception:  # not answering yet (a timeout, a refused connection): ask again
                        members = []
                    if {m["name"] for m in members} != set(self.nodes) or any(m["state"] == DOWN for m in members):
                        formed = False
                        break
                if formed:
                    return
                await rt.sleep(0.05)
        finally:
            for conn in conns.values():
                await conn.close()

    def boot(self, node: str) -> Boot:
        config = self._config(node)

        async def boot_node(rt: Runtime) -> None:
            from lab.backends.primer.node import boot_primer

            self.booted.append(await boot_primer(rt, config))

        return boot_node

    def serve_args(self, node: str, data_dir: Path, reach: Callable[[str, str], str]) -> list[str]:
        o = self.options
        peers = ",".join(f"{peer}={reach(peer, 'peer')}" for peer in self.nodes if peer != node)
        return ["--node", node, *(["--peers", peers] if peers else []), "--replicas", str(o["replicas"]),
                "--replication", o["replication"], "--persistence", o["persistence"],
                "--timeout", repr(o["timeout"]), "--lease", repr(o["lease"]),
                "--suspect-after", repr(o["suspect_after"])]

    def client(self, rt: Runtime, reliable: bool) -> QueueClient:
        return PrimerClient(rt, [rt.net.connect(node, "http") for node in self.nodes], reliable, self.options["timeout"])

    def holders(self, queue: str) -> dict[str, tuple[str, ...]]:
        """Which nodes held each message put into ``queue``: the lab's message id (its body's
        header, ``lab.design.message``) -> the replicas its put stored it on, as the nodes this
        process booted knew them (sim world; empty when the nodes are processes, live).

        The rule is ``Queues._put`` (``core/queues.py``): the node that took the put and
        W-1 of its up peers, shuffled by that node's random, a peer that failed replaced by
        a spare up peer; the final list is in the put's ``Added`` (the cluster's index), a
        copy not yet committed names its own list. Every incarnation counts, crashed ones
        too (their memory stays as the crash left it), so a message a fault destroyed still
        has its holders here; one acknowledged and dropped everywhere has none."""
        from lab.design import decode

        found: dict[str, tuple[str, ...]] = {}
        for node in self.booted:
            index = node.index.live(queue)
            for message_id, held in node.queues.replica.held.get(queue, {}).items():
                msg_id, _ = decode(held.copy.payload)
                added = index.get(message_id)
                replicas = added.replicas if added is not None else held.copy.replicas
                if added is not None or msg_id not in found:  # the index's list is the final one
                    found[msg_id] = tuple(replicas)
        return found
