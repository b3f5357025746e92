"""`lab bench cassieq`: the queue API's put, get and ack over loopback, beside the ceiling
of the same HTTP stack.

For each store (a SQLite file; PostgreSQL from pgserver, as the store tests use) one
``lab serve cassieq`` process, and for each client count (``--clients 1,8``) that many
keep-alive connections from this process (``lab.worlds.live.streams``' client, ``lab.design.http``
requests), each a closed loop:

- put: ``--ops`` puts in all, split over the connections;
- get: ``--ops`` gets of what was put (a long lease, so nothing comes back), then
- ack: ``--ops`` acks of their receipts;
- cycle: put, get, ack of one message at a time (a reliable consumer's round).

Beside them, the ceiling: a ``Router`` with one route answering 204, served by
``lab.worlds.live.streams`` over TCP in a process of its own, asked by the same client — no
Python HTTP service here can answer faster. The figure the issue asks about is the cycle's
request rate (three requests a cycle) as a share of that ceiling (goal: 30 % on SQLite).
Rates are medians over ``--repeats`` round-robin runs; latencies are the median run's
p50/p99. On two cores the server and this client each take one; PostgreSQL's own
processes share them.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import shutil
import tempfile
import time
import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import quote, urlsplit, urlunsplit

HELP = "the queue API's put/get/ack and reliable cycle over loopback, beside the HTTP stack's ceiling"

ACCOUNT = "bench"
QUEUE = "bench"
LEASE_SECONDS = 3600  # a get's lease: nothing comes back during a run
GOAL = 0.30  # the cycle's request rate as a share of the trivial endpoint's, on SQLite
PHASES = ("put", "get", "ack", "cycle")
TIMEOUT = 30.0
BODY = b"x" * 100


# -- the trivial endpoint: one route, 204, in a process of its own ---------------------------------

def _serve_trivial(ready: Any) -> None:
    from lab.design.worlds import serve_connections
    from lab.design import HttpServerConnection, Request, Response, Router

    async def nothing(_: Request) -> Response:
        return Response(204)

    router = Router()
    router.get("/ping", nothing)

    async def main() -> None:
        listener = await serve_connections(
            lambda: HttpServerConnection(router, max_body=1 << 20, header_timeout=10.0), "127.0.0.1", 0)
        ready.send(listener.port)
        await asyncio.Event().wait()  # until terminated

    asyncio.run(main())


class TrivialServer:
    """The ceiling's server, started in a forked process; ``port`` once it listens."""

    def __init__(self) -> None:
        receive, send = multiprocessing.Pipe(duplex=False)
        self.process = multiprocessing.get_context("fork").Process(target=_serve_trivial, args=(send,), daemon=True)
        self.process.start()
        if not receive.poll(30):
            self.process.kill()
            raise RuntimeError("the trivial endpoint's server did not start")
        self.port: int = receive.recv()

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(5)


# -- the client: keep-alive connections, closed loops ----------------------------------------------

class Api:
    """Requests of the queue API (or the trivial endpoint) over one keep-alive connection."""

    def __init__(self, port: int, key: str = ""):
        from lab.design.worlds import LiveConnection

        self.connection = LiveConnection(lambda: ("127.0.0.1", port), f"127.0.0.1:{port}")
        self.headers = (("authorization", f"Key {key}"),)
        self.base = f"/api/v1/accounts/{ACCOUNT}/queues/{QUEUE}"

    async def send(self, method: str, target: str, body: bytes = b"") -> Any:
        from lab.design import ResponseReader, encode_request

        return await self.connection.exchange(encode_request(method, target, "bench", body, self.headers),
                                              ResponseReader(method), TIMEOUT)

    async def ping(self) -> None:
        _expect(await self.send("GET", "/ping"), 204)

    async def put(self) -> None:
        _expect(await self.send("POST", f"{self.base}/messages", BODY), 201)

    async def get(self) -> str | None:
        reply = await self.send("GET", f"{self.base}/messages/next?invisibilityTimeSeconds={LEASE_SECONDS}")
        if reply.status == 204:
            return None
        return json.loads(_expect(reply, 200).body)["popReceipt"]

    async def ack(self, receipt: str) -> None:
        _expect(await self.send("DELETE", f"{self.base}/messages?popReceipt={quote(receipt, safe='')}"), 204)

    async def close(self) -> None:
        await self.connection.close()


def _expect(reply: Any, status: int) -> Any:
    if reply.status != status:
        raise RuntimeError(f"HTTP {reply.status} (expected {status}): {reply.body[:200]!r}")
    return reply


async def _closed_loops(apis: list[Api], ops: int, one: Callable[[Api, int], Awaitable[int]]) -> dict[str, Any]:
    """``ops`` operations split over the connections, each connection one at a time; the
    rate (operations and requests per second) and the latency of each operation."""
    shares = [ops // len(apis) + (1 if i < ops % len(apis) else 0) for i in range(len(apis))]
    latencies: list[float] = []
    requests = [0]

    async def loop(api: Api, share: int, first: int) -> None:
        for i in range(first, first + share):
            start = time.perf_counter()
            sent = await one(api, i)  # (not ``requests[0] += await ...``: that reads the total before the await)
            latencies.append(time.perf_counter() - start)
            requests[0] += sent

    starts = [sum(shares[:i]) for i in range(len(apis))]
    began = time.perf_counter()
    await asyncio.gather(*(loop(api, share, first) for api, share, first in zip(apis, shares, starts)))
    wall = time.perf_counter() - began
    latencies.sort()
    return {"ops": ops, "seconds": wall, "ops_per_s": ops / wall, "requests_per_s": requests[0] / wall,
            "p50_ms": _quantile(latencies, 0.50) * 1e3, "p99_ms": _quantile(latencies, 0.99) * 1e3}


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _queue_phases(port: int, key: str, clients: int, ops: int) -> dict[str, dict[str, Any]]:
    apis = [Api(port, key) for _ in range(clients)]
    receipts: list[str | None] = [None] * ops

    async def put(api: Api, _: int) -> int:
        await api.put()
        return 1

    async def get(api: Api, i: int) -> int:
        receipts[i] = await api.get()
        if receipts[i] is None:
            raise RuntimeError("a get found nothing: the put phase's messages are gone")
        return 1

    async def ack(api: Api, i: int) -> int:
        await api.ack(receipts[i])  # type: ignore[arg-type]
        return 1

    async def cycle(api: Api, _: int) -> int:
        await api.put()
        sent = 2
        while (receipt := await api.get()) is None:  # another connection leased the one there was
            sent += 1
        await api.ack(receipt)
        return sent + 1

    try:
        return {name: await _closed_loops(apis, ops, step)
                for name, step in (("put", put), ("get", get), ("ack", ack), ("cycle", cycle))}
    finally:
        for api in apis:
            await api.close()


async def _trivial_phase(port: int, clients: int, ops: int) -> dict[str, Any]:
    apis = [Api(port) for _ in range(clients)]

    async def ping(api: Api, _: int) -> int:
        await api.ping()
        return 1

    try:
        return await _closed_loops(apis, ops, ping)
    finally:
        for api in apis:
            await api.close()


# -- the stores and the servers --------------------------------------------------------------------

def _postgresql(stack: ExitStack, scratch: Path) -> str:
    """A fresh database on a pgserver PostgreSQL (deleted with ``stack``)."""
    import psycopg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs without XDG_RUNTIME_DIR
        import pgserver

        server = pgserver.get_server(scratch / "pg", cleanup_mode="delete")
    stack.callback(server.cleanup)
    uri = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as admin:
        admin.execute('CREATE DATABASE "cassieq_bench"')
    return urlunsplit(urlsplit(uri)._replace(path="/cassieq_bench"))


def _cassieq(stack: ExitStack, scratch: Path, store: str) -> tuple[int, str]:
    """A ``lab serve cassieq`` on ``store`` with the bench's account and queue: (port, key)."""
    from lab.backends.cassieq.client import AdminClient, CassieqClient
    from lab.design.worlds import ServerProcess

    scratch.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{scratch / 'cassieq.db'}" if store == "sqlite" else _postgresql(stack, scratch)
    node = ServerProcess("cassieq", scratch / f"api-{store}", ["--store", url])
    node.start()
    stack.callback(node.stop)
    with AdminClient(f"http://127.0.0.1:{node.ports['admin']}") as admin:
        key = admin.create_account(ACCOUNT)["keys"]["primary"]
    with CassieqClient(f"http://127.0.0.1:{node.ports['http']}", ACCOUNT, key) as client:
        client.create_queue(QUEUE)
    return node.ports["http"], key


def bench_cassieq(ops: int, clients: list[int], stores: list[str], repeats: int) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-cassieq-"))
    try:
        with ExitStack() as stack:
            trivial = TrivialServer()
            stack.callback(trivial.stop)
            servers = {store: _cassieq(stack, scratch / store, store) for store in stores}
            runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for _ in range(repeats):  # round-robin: a noisy neighbour hits every case alike
                for n in clients:
                    runs.setdefault(("trivial", n), []).append(asyncio.run(_trivial_phase(trivial.port, n, ops)))
                    for store, (port, key) in servers.items():
                        runs.setdefault((store, n), []).append(asyncio.run(_queue_phases(port, key, n, ops)))
            return _summary(runs, ops, clients, stores, repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _median_run(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose rate is the median (its latencies go with it), and every run's rate."""
    ordered = sorted(samples, key=lambda s: s["ops_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "runs_ops_per_s": [s["ops_per_s"] for s in samples]}


def _summary(runs: dict[tuple[str, int], list[Any]], ops: int, clients: list[int], stores: list[str],
             repeats: int) -> dict[str, Any]:
    results: dict[str, Any] = {"ops": ops, "clients": clients, "repeats": repeats, "goal": GOAL, "cases": {}}
    print(f"{'store':<12}{'clients':>8}{'op':>8}{'ops/s':>10}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'cycle req/s / trivial':>24}")
    for n in clients:
        ceiling = _median_run(runs[("trivial", n)])
        results["cases"][f"trivial/{n}"] = ceiling
        print(f"{'trivial':<12}{n:>8}{'204':>8}{ceiling['ops_per_s']:>10.0f}{ceiling['requests_per_s']:>10.0f}"
              f"{ceiling['p50_ms']:>9.2f}{ceiling['p99_ms']:>9.2f}")
        for store in stores:
            for phase in PHASES:
                row = _median_run([run[phase] for run in runs[(store, n)]])
                line = (f"{store:<12}{n:>8}{phase:>8}{row['ops_per_s']:>10.0f}{row['requests_per_s']:>10.0f}"
                        f"{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}")
                if phase == "cycle":
                    share = row["requests_per_s"] / ceiling["requests_per_s"]
                    row["share_of_trivial"] = share
                    line += f"{share:>17.1%}"
                    if store == "sqlite":
                        row["goal_met"] = share >= GOAL
                        line += f"  (goal {GOAL:.0%}: {'met' if share >= GOAL else 'NOT met'})"
                results["cases"][f"{store}/{n}/{phase}"] = row
                print(line)
    return results


def add_arguments(b) -> None:
    """``lab bench cassieq``'s flags."""
    b.add_argument("--ops", type=int, default=2000, help="operations per phase and client count (default 2000)")
    b.add_argument("--clients", default="1,8", help="client counts, comma-separated (default 1,8)")
    b.add_argument("--store", default="sqlite,postgresql",
                   help="stores, comma-separated: sqlite, postgresql (pgserver) (default both)")
    b.add_argument("--repeats", type=int, default=3, help="runs per case; the median is quoted (default 3)")
    b.add_argument("--out", type=Path, help="JSON file (default: results/bench/cassieq-<time>.json)")


def run(args) -> dict:
    """``lab bench cassieq``: prints as it goes and returns the figures; ValueError for bad flags."""
    try:
        clients = [int(n) for n in str(args.clients).split(",")]
    except ValueError:
        raise ValueError(f"--clients {args.clients!r}: whole numbers, comma-separated (1,8)") from None
    stores = [s.strip() for s in str(args.store).split(",")]
    if not clients or min(clients) < 1:
        raise ValueError("--clients: each count must be at least 1")
    if unknown := [s for s in stores if s not in ("sqlite", "postgresql")]:
        raise ValueError(f"--store {unknown[0]!r}: use sqlite or postgresql")
    if args.ops < max(clients):
        raise ValueError(f"--ops must be at least the largest client count ({max(clients)})")
    if args.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    print(f"cassieq over loopback: {args.ops:,} operations per phase, clients {clients}, stores {stores}, "
          f"median of {args.repeats}:")
    return bench_cassieq(args.ops, clients, stores, args.repeats)
