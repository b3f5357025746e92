"""CassieQ in the runner: API nodes over one store, and a client of the queue API that is
the same code in both worlds.

Nodes: ``api_nodes`` API nodes (default 2, as the original is deployed behind a load
balancer), each booting ``lab.backends.cassieq.node``; and, when the store is the
simulated Cassandra (the sim world's default), the store node ``cassandra`` they reach
over the simulated network, so a net-split between an API node and the store is an
ordinary partition. Live, each API node is a ``lab serve cassieq`` process, all over one
SQLite file beside their data dirs (or a PostgreSQL server, ``store=postgresql://…``).

A client speaks HTTP/1.1 (``lab.design.http``) over the world's connections, picking an API
node at random for every request, with the account's key (``Authorization: Key``). It
sets itself up as a user would: the admin API gives the account's keys (creating the
account ``lab`` if there is none), and a queue is created on first use; a key the API no
longer knows (401: a store that lost its disk) sends it through that set-up again. A get leases a
message for ``invisibility`` seconds and an ack deletes it with the pop receipt
(reliable acks: at-least-once); with auto acks the client acks at once after the get.
At the end of a run the drain asks the queue's size (``backlog``), as a user draining a
CassieQ queue would: a get that finds nothing (204) does not mean the queue is empty.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import quote

from lab.design import (TIMEOUT, About, Backend, Boot, Connection, Cpu, Delivery, HttpReply, Option, Parts,
                        QueueClient, ResponseReader, Runtime, World, encode_request, http_body, number, whole)
from lab.backends.cassieq.core.model import DEFAULT_FINALIZE_SECONDS, DEFAULT_REPAIR_POLL_SECONDS
from lab.backends.cassieq.core.repair import START_JITTER_SECONDS
from lab.backends.cassieq.promises import PROMISED

ACCOUNT = "lab"
RECOVERY_MARGIN_S = 1.0  # a store round trip or two past the last timer
STORE_NODE = "cassandra"
COMMIT_LOG = "cassandra/commitlog"  # on the store node's disk: its tables are there (sim)

log = logging.getLogger(__name__)


def _store(value: Any) -> str:
    text = str(value)
    if text in ("cassandra", "sqlite") or text.startswith(("postgresql://", "postgres://")):
        return text
    raise ValueError(text)


def _store_world(value: str) -> str | None:
    return "sim" if value == "cassandra" else "live"


def _sim(_: Any) -> str:
    return "sim"  # a parameter of the simulated Cassandra


def _probability(value: Any) -> float:
    p = number(0.0, inclusive=True)(value)
    if p > 1:
        raise ValueError("above 1")
    return p


CREATE_POLL = 0.005  # seconds between looks at a queue another client is still creating


class CassieqClient(QueueClient):
    """A user of the queue API: one connection per API node, a node picked at random per request."""

    def __init__(self, rt: Runtime, api: list[Connection], admin: Connection, reliable: bool, timeout: float,
                 invisibility: int, bucket_size: int):
        self.rt, self.api, self.admin = rt, api, admin
        self.reliable, self.timeout = reliable, timeout
        self.invisibility, self.bucket_size = invisibility, bucket_size
        self.key: str | None = None
        self.queues: set[str] = set()

    async def _send(self, conn: Connection, method: str, target: str, body: bytes = b"",
                    headers: tuple[tuple[str, str], ...] = (), timeout: float | None = None) -> HttpReply:
        request = encode_request(method, target, "cassieq", body, headers)
        return await conn.exchange(request, ResponseReader(method), timeout or self.timeout)

    async def _account_key(self) -> str:
        if self.key is None:
            reply = await self._send(self.admin, "GET", f"/admin/api/v1/accounts/{ACCOUNT}")
            if reply.status == 404:
                reply = await self._send(self.admin, "POST", "/admin/api/v1/accounts", json.dumps(ACCOUNT).encode(),
                                         (("content-type", "application/json"),))
                if reply.status == 409:  # another client made it first
                    reply = await self._send(self.admin, "GET", f"/admin/api/v1/accounts/{ACCOUNT}")
            _ok(reply, "the admin API")
            self.key = json.loads(reply.body)["keys"]["primary"]
        return self.key

    async def _api(self, method: str, path: str, body: bytes = b"", timeout: float | None = None,
                   content_type: str = "text/plain") -> HttpReply:
        key = await self._account_key()
        conn = self.api[self.rt.random.randrange(len(self.api))]
        headers = (("authorization", f"Key {key}"), ("content-type", content_type))
        reply = await self._send(conn, method, f"/api/v1/accounts/{ACCOUNT}/queues{path}", body, headers, timeout)
        if reply.status == 401:  # the account is gone (a store that lost its disk): set up again, as a user would
            self.key = None
            self.queues.clear()
        return reply

    async def _queue(self, queue: str) -> str:
        """The queue's path, created on first use."""
        path = "/" + quote(queue, safe="")
        if queue not in self.queues:
            options = {"queueName": queue, "bucketSize": self.bucket_size}
            made = _ok(await self._api("POST", "", json.dumps(options).encode(), content_type="application/json"),
                       f"create {queue}")
            if made.status == 200:  # another client made it, and may still be provisioning it: wait till it serves
                deadline = self.rt.now_ns() + round(self.timeout * 1e9)
                while (await self._api("GET", path)).status == 404 and self.rt.now_ns() < deadline:
                    await self.rt.sleep(CREATE_POLL)
            self.queues.add(queue)
        return path

    async def put(self, queue: str, body: bytes) -> None:
        path = await self._queue(queue)
        _ok(await self._api("POST", f"{path}/messages", body), f"put {queue}")

    async def get(self, queue: str, wait: float) -> Delivery | None:
        """CassieQ has no long polling: one GET, and None when nothing is available (204)."""
        path = await self._queue(queue)
        reply = await self._api("GET", f"{path}/messages/next?invisibilityTimeSeconds={self.invisibility}")
        if reply.status == 204:
            if wait > 0:
                await self.rt.sleep(min(wait, 0.01))  # a client's poll interval, not a busy loop
            return None
        got = json.loads(_ok(reply, f"get {queue}").body)
        delivery = Delivery(queue, got["message"].encode(), got["popReceipt"])
        if not self.reliable:
            await self.ack(delivery)
            return Delivery(queue, delivery.body, None)
        return delivery

    async def backlog(self, queue: str) -> int | None:
        """The queue's size statistic. A 204 alone does not mean empty: a leased message comes
        back when its lease runs out, and a row written after the reader sealed its bucket (an
        id claimed before the one written next) waits for the invisibility pointer — which
        needs the repair worker to finalize every bucket with a ghost hole before it passes
        it — or for the repair worker's republish. The size is the design's counter, which
        is approximate: a drain over a counter that never comes back to 0 ends by giving up.
        One below 0 (the counter drifts: an update cut after it applied) says no more than 0
        does — empty, as far as it knows; the drain then waits out ``recovery_s`` before it
        believes it, since the counter can be short of a message too."""
        reply = await self._api("GET", "/" + quote(queue, safe="") + "/statistics")
        return max(0, json.loads(reply.body)["size"]) if reply.status == 200 else None

    async def ack(self, delivery: Delivery) -> None:
        path = "/" + quote(delivery.queue, safe="")
        _ok(await self._api("DELETE", f"{path}/messages?popReceipt={quote(delivery.token, safe='')}"),
            f"ack {delivery.queue}")

    async def release(self, delivery: Delivery) -> None:
        """A nack: update to 0 s, visible again at once."""
        path = "/" + quote(delivery.queue, safe="")
        body = json.dumps({"newInvisibilitySeconds": 0}).encode()
        _ok(await self._api("PUT", f"{path}/messages?popReceipt={quote(delivery.token, safe='')}", body,
                            content_type="application/json"), f"release {delivery.queue}")

    async def close(self) -> None:
        for conn in self.api + [self.admin]:
            await conn.close()


def _ok(reply: HttpReply, what: str) -> HttpReply:
    """The reply if 2xx (``http_body`` says what any other status raises: a 503 — a replica
    or the store away — is an unknown outcome)."""
    http_body(reply.status, reply.body, what)
    return reply


class CassieqBackend(Backend):
    name = "cassieq"
    parts = Parts(serve="lab.backends.cassieq.serve",
                  load="lab.backends.cassieq.load",
                  mutants="lab.backends.cassieq.mutants",
                  bench="lab.backends.cassieq.bench")
    about = About("HTTP queue on a Cassandra-style store: monotons, buckets and pointers by compare-and-set, "
                  "leases with pop receipts, a repair worker; several API nodes", colour="#2ca02c")
    promised = PROMISED
    # the simulated Cassandra's latency model is its own (``models.cassandra``): only the API nodes cost CPU
    cpu = Cpu(free=(STORE_NODE,))

    options_declared = (
        TIMEOUT,
        Option("store", "the store the API nodes share",
               "cassandra (the simulated Cassandra: sim world), sqlite (a file: live world) or postgresql://…",
               _store, world_defaults={"sim": "cassandra", "live": "sqlite"}, only_in=_store_world),
        Option("api_nodes", "API nodes over the store (clients pick one at random per request)",
               "a whole number >= 1", whole(1), 2),
        Option("invisibility", "seconds a get leases a message for (the original's default is 30; the lab's "
               "runs last seconds)", "a whole number of seconds >= 1", whole(1), 5),
        Option("bucket_size", "messages per bucket", "a whole number >= 1", whole(1), 20),
        Option("repair_refresh", "seconds between a node's looks for queues to repair",
               "a number of seconds > 0", number(0.0), 5.0),
        Option("cassandra_replicas", "sim: replicas of the simulated Cassandra", "a whole number >= 1", whole(1), 3,
               only_in=_sim),
        Option("cassandra_replica_lag_ms", "sim: mean lag of the replicas outside the quorum",
               "a number of milliseconds >= 0", number(0.0, inclusive=True), 0.0, only_in=_sim),
        Option("cassandra_late_write_p", "sim: probability that a message write lands late",
               "a probability from 0 to 1", _probability, 0.0, only_in=_sim),
        Option("cassandra_late_write_s", "sim: how late a late message write lands",
               "a number of seconds >= 0", number(0.0, inclusive=True), 20.0, only_in=_sim),
        Option("cassandra_ghost_write_p", "sim: probability that a message write never lands (a ghost monoton)",
               "a probability from 0 to 1", _probability, 0.0, only_in=_sim),
    )

    def __init__(self, world: World, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(world, options)
        self.store = self.options["store"]
        self.api = [f"api-{i}" for i in range(self.options["api_nodes"])]
        self.recovery_s = self.recovery_seconds(self.options)
        self._tables: list = []  # the simulated Cassandra's replicas: they outlive its restarts
        # what this process booted (sim): their counters are the run's repair and store metrics
        self._booted: list = []  # CassieqNode, one per boot of an API node
        self._store_nodes: list = []  # SimCassandraNode, one per boot of the store node

    @staticmethod
    def recovery_seconds(options: Mapping[str, Any]) -> float:
        """How long an acknowledged message may stay out of sight — to a get and to the size
        statistic alike (the statistic is a counter: a put or ack cut after its row was
        written leaves it off for good) — before the design brings it back by itself: a
        message leased by a get whose reply was lost comes back when the lease runs out;
        one written after the reader sealed its bucket (a late write), or left behind a
        ghost hole, only when the repair worker republishes it or finalizes the bucket. That
        worker starts at the repair manager's next look for queues (``repair_refresh``),
        after a random start jitter, and acts on a sealed bucket the finalize timeout after
        its seal, at a pass every poll interval (the lab's queues keep the defaults)."""
        repair = options["repair_refresh"] + START_JITTER_SECONDS + DEFAULT_REPAIR_POLL_SECONDS + DEFAULT_FINALIZE_SECONDS
        return max(options["invisibility"], repair) + RECOVERY_MARGIN_S

    @property
    def server_nodes(self) -> list[str]:
        return ([STORE_NODE] if self.store == "cassandra" else []) + self.api

    def boot(self, node: str) -> Boot:
        options, store_url = self.options, self.store

        if node == STORE_NODE:
            async def boot_store(rt: Runtime) -> None:
                from lab.backends.cassieq.core.memory_store import MemoryStore
                from lab.backends.cassieq.core.store import SCHEMA
                from lab.design.worlds import CassandraModel, SimCassandraNode  # the sim world's store node

                model = CassandraModel(**{name: options[f"cassandra_{name}"] for name in
                                          ("replicas", "replica_lag_ms", "late_write_p", "late_write_s",
                                           "ghost_write_p")})
                # The tables outlive a restart (Cassandra's commit log keeps them) but not the
                # node's disk: a marker file on it tells a restart from a lost disk (disk-loss).
                if not self._tables or not rt.disk.exists(COMMIT_LOG):
                    self._tables = [MemoryStore() for _ in range(model.replicas)]
                    rt.disk.open(COMMIT_LOG).close()
                node = SimCassandraNode(rt, model, self._tables, {t.name: t.key for t in SCHEMA.values()})
                self._store_nodes.append(node)
                await rt.net.serve(node.handle)

            return boot_store

        index = self.api.index(node)

        async def boot_api(rt: Runtime) -> None:
            from lab.backends.cassieq.core.store import CassStore
            from lab.backends.cassieq.node import boot_cassieq

            store: CassStore
            if store_url == "cassandra":
                from lab.backends.cassieq.core.store import StoreError
                from lab.design.worlds import SimCassandraStore

                store = SimCassandraStore(rt, STORE_NODE, StoreError, timeout=options["timeout"])
            else:
                from lab.backends.cassieq.stores import open_store

                store = open_store(store_url)
            self._booted.append(await boot_cassieq(rt, store, index=index, count=len(self.api),
                                                   repair_refresh=options["repair_refresh"]))

        return boot_api

    def serve_args(self, node: str, data_dir: Path, reach: Callable[[str, str], str]) -> list[str]:
        store = f"sqlite:///{data_dir.parent / 'cassieq.db'}" if self.store == "sqlite" else self.store
        return ["--store", store, "--node-index", str(self.api.index(node)), "--nodes", str(len(self.api)),
                "--repair-refresh", repr(self.options["repair_refresh"])]

    def repair_counts(self) -> dict[str, int]:
        """What the repair workers booted in this process did (the original's
        ``repair.<q>.republish``, ``dangling-detected`` and finalized buckets), summed over
        nodes and restarts; empty when the API nodes are processes (live)."""
        counts: Counter[str] = Counter()
        for booted in self._booted:
            for worker, _ in booted.repair.workers.values():
                counts.update(republished=worker.republished, finalized=worker.finalized, dangling=worker.dangling)
        return dict(counts)

    def store_counts(self) -> dict[str, int]:
        """The simulated Cassandra's delayed message writes: late ones and ghosts (sim)."""
        return {"late": sum(n.late for n in self._store_nodes), "ghosts": sum(n.ghosts for n in self._store_nodes)}

    async def stop(self) -> None:
        if self._booted or self._store_nodes:  # the run's log says what the repair and the store did
            log.info("cassieq repair workers: %s; simulated Cassandra: %s", self.repair_counts(), self.store_counts())
        await super().stop()

    def client(self, rt: Runtime, reliable: bool) -> QueueClient:
        return CassieqClient(rt, [rt.net.connect(node, "http") for node in self.api], rt.net.connect(self.api[0], "admin"),
                             reliable, self.options["timeout"], self.options["invisibility"], self.options["bucket_size"])
