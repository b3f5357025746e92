"""`lab bench kestrel`: the Kestrel server over loopback, beside memcached with the same
client; and ``--crash N``: kill -9 cycles under load that check no acknowledged item is lost.

Load: each connection is a pymemcache client on a thread; threads are spread over two
processes so one GIL does not cap the clients. A connection repeats set + get on a queue
of its own (memcached: a key of its own), or set + get/open + get/close; with ``--queues N``
the connections share N queues, which is where a journal's group commit has writes to batch
(the original's, like ours, batches the writes of one journal file, not across files). Cases run
round-robin; medians of the repeats are quoted, and the ratio to memcached is taken
within each round (the same neighbours, the same minute).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from lab.backends.kestrel.client import KestrelMemcacheClient
from lab.backends.kestrel.process import KestrelProcess

HELP = "Kestrel over loopback beside memcached; --crash: kill -9 cycles"
PAYLOAD = b"x" * 100
PROCESSES = 2


# ------------------------------------------------------------------ load (runs in worker processes)
def _connection(port: int, key: str, ops: int, mode: str, out: list, barrier: threading.Barrier) -> None:
    try:
        _load(port, key, ops, mode, out, barrier)
    except BaseException:
        barrier.abort()  # the others (and the worker) stop waiting: the bench fails, servers stop
        raise


def _load(port: int, key: str, ops: int, mode: str, out: list, barrier: threading.Barrier) -> None:
    client = KestrelMemcacheClient(("127.0.0.1", port), timeout=10)
    sets, gets = [], []
    clock = time.perf_counter_ns
    client.put(key, PAYLOAD)  # connect and create the queue before timing
    client.get(key)
    barrier.wait()
    for _ in range(ops):
        t0 = clock()
        client.put(key, PAYLOAD)
        t1 = clock()
        if mode == "plain":
            value = client.get(key)
        else:
            value = client.take(key, open=True)
            client.confirm(key)
        t2 = clock()
        if value != PAYLOAD:
            raise RuntimeError(f"{key}: got {value!r}")
        sets.append(t1 - t0)
        gets.append(t2 - t1)
    client.close()
    out.append((sets, gets))


def _worker(port: int, keys: list[str], ops: int, mode: str) -> tuple[list[int], list[int], int, int]:
    out: list = []
    barrier = threading.Barrier(len(keys) + 1)
    threads = [threading.Thread(target=_connection, args=(port, k, ops, mode, out, barrier)) for k in keys]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter_ns()
    for t in threads:
        t.join()
    end = time.perf_counter_ns()
    if len(out) != len(keys):
        raise RuntimeError("a connection failed")
    return [x for s, _ in out for x in s], [x for _, g in out for x in g], start, end


def run_load(pool: ProcessPoolExecutor, port: int, connections: int, ops: int, mode: str,
             queues: int | None = None) -> dict:
    """``connections`` clients doing ``ops`` iterations each, on ``queues`` queues (default: one
    each); pairs/s and latency percentiles. A shared queue is never empty at a get: each
    connection gets only after its own set, and the server handles requests in order."""
    keys = [f"bench{i % (queues or connections)}" for i in range(connections)]
    parts = [keys[i::PROCESSES] for i in range(PROCESSES) if keys[i::PROCESSES]]
    results = list(pool.map(_worker, [port] * len(parts), parts, [ops] * len(parts), [mode] * len(parts)))
    sets = np.array([x for r in results for x in r[0]])
    gets = np.array([x for r in results for x in r[1]])
    # workers are separate processes: their clocks differ, so take each one's own span
    seconds = max((r[3] - r[2]) for r in results) / 1e9
    return {"pairs_per_s": connections * ops / seconds,
            "set_us": {p: float(np.percentile(sets, q)) / 1000 for p, q in (("p50", 50), ("p99", 99))},
            "get_us": {p: float(np.percentile(gets, q)) / 1000 for p, q in (("p50", 50), ("p99", 99))}}


# ------------------------------------------------------------------ servers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_memcached() -> str | None:
    """The memcached binary, installed with apt-get if missing; None if that is impossible."""
    found = shutil.which("memcached")
    if found:
        return found
    print("memcached is missing: installing it with apt-get ...")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "memcached"]):
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            print("  could not install memcached (run `sudo apt-get install memcached`); no ceiling this run")
            return None
    return shutil.which("memcached")


class Memcached:
    def __init__(self, binary: str):
        self.port = _free_port()
        # memcached refuses to run as root unless told which user to be
        user = ["-u", "root"] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen([binary, "-p", str(self.port), "-U", "0", "-l", "127.0.0.1", "-m", "256", *user],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.proc.kill()
                    assert self.proc.stderr is not None  # stderr=PIPE
                    raise RuntimeError(f"memcached did not start: {self.proc.stderr.read().strip()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def bench_kestrel(ops: int, connections: list[int], repeats: int, queues: int | None = None) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="bench-kestrel-"))
    servers: dict[str, object] = {
        "kestrel sync never": KestrelProcess(scratch / "never", '[default]\nsyncJournal = "never"\n').start(),
        "kestrel sync always": KestrelProcess(scratch / "always", '[default]\nsyncJournal = "always"\n').start(),
    }
    binary = ensure_memcached()
    if binary:
        servers["memcached"] = Memcached(binary)
    cases = [(name, conns, mode) for conns in connections for name in servers
             for mode in (("plain", "open/close") if name != "memcached" else ("plain",))]
    runs: dict[tuple, list[dict]] = {case: [] for case in cases}
    try:
        with ProcessPoolExecutor(PROCESSES) as pool:
            for r in range(repeats):
                for case in cases:
                    name, conns, mode = case
                    per_conn = max(50, ops // conns)
                    runs[case].append(run_load(pool, servers[name].port, conns, per_conn, mode,  # type: ignore[attr-defined]
                                              queues))
                print(f"  round {r + 1}/{repeats} done")
    finally:
        for server in servers.values():
            server.stop()  # type: ignore[attr-defined]
        shutil.rmtree(scratch, ignore_errors=True)
    return _report(runs, connections, repeats, ops, queues)


def _report(runs: dict[tuple, list[dict]], connections: list[int], repeats: int, ops: int,
            queues: int | None = None) -> dict:
    results: dict = {"ops": ops, "repeats": repeats, "payload_bytes": len(PAYLOAD),
                     "queues": queues or "one per connection", "cases": []}
    print(f"{'server':<22}{'conns':>6}{'mode':>12}{'pairs/s':>10}{'vs memcached':>14}"
          f"{'set p50':>9}{'set p99':>9}{'get p50':>9}{'get p99':>9}  (µs; a pair = set + get)")
    for (name, conns, mode), samples in runs.items():
        ceiling = runs.get(("memcached", conns, "plain"))
        ratios = [s["pairs_per_s"] / c["pairs_per_s"] for s, c in zip(samples, ceiling)] if ceiling else []
        row = {"server": name, "connections": conns, "mode": mode,
               "pairs_per_s": statistics.median(s["pairs_per_s"] for s in samples),
               "ratio_to_memcached": statistics.median(ratios) if ratios else None,
               **{f"{op}_{p}_us": statistics.median(s[f"{op}_us"][p] for s in samples)
                  for op in ("set", "get") for p in ("p50", "p99")}, "runs": samples}
        results["cases"].append(row)
        ratio = f"{row['ratio_to_memcached']:.2f}x" if ratios else "-"
        print(f"{name:<22}{conns:>6}{mode:>12}{row['pairs_per_s']:>10,.0f}{ratio:>14}"
              f"{row['set_p50_us']:>9.0f}{row['set_p99_us']:>9.0f}{row['get_p50_us']:>9.0f}{row['get_p99_us']:>9.0f}")
    return results


# ------------------------------------------------------------------ crash cycles
def crash_cycles(cycles: int, seed: int = 1, min_stored: int = 200) -> dict:
    """kill -9 the server under put/get load with syncJournal = every write, restart, drain.

    Every item answered STORED must come back unless its /close was answered; every item
    opened but not confirmed must come back. Duplicates are allowed (at-least-once).
    A cycle's kill lands at a random time, but not before ``min_stored`` puts of that cycle
    were answered: with an fsync per write, a slow disk would otherwise test next to nothing.
    """
    rng = random.Random(seed)
    scratch = Path(tempfile.mkdtemp(prefix="crash-kestrel-"))
    config = 'maxOpenTransactions = 1\n[default]\nsyncJournal = "always"\n'
    stored: set[bytes] = set()  # STORED answered
    confirmed: set[bytes] = set()  # /close answered after it was opened
    totals: dict = {"cycles": cycles}
    pending_open: set[bytes] = set()
    in_doubt: set[bytes] = set()  # /close sent, the server died before answering: either outcome is right
    seq = 0
    try:
        for cycle in range(cycles):
            server = KestrelProcess(scratch / "q", config).start()
            stop = threading.Event()
            opened_now: set[bytes] = set()
            stored_before = len(stored)

            def producer() -> None:
                nonlocal seq
                client = KestrelMemcacheClient(("127.0.0.1", server.port), timeout=2)  # noqa: B023 (joined in this cycle)
                try:
                    while not stop.is_set():  # noqa: B023 (joined in this cycle)
                        seq += 1
                        item = b"item-%d" % seq
                        if client.put("crash", item):
                            stored.add(item)
                except Exception:
                    pass  # the server died mid-request: that put's outcome is unknown

            def consumer() -> None:
                client = KestrelMemcacheClient(("127.0.0.1", server.port), timeout=2)  # noqa: B023 (joined in this cycle)
                try:
                    while not stop.is_set():  # noqa: B023 (joined in this cycle)
                        item = client.take("crash", timeout_ms=50, open=True)
                        if item is None:
                            continue
                        opened_now.add(item)  # noqa: B023 (joined in this cycle)
                        time.sleep(0.002)  # "processing": a kill often lands while a read is open
                        in_doubt.add(item)
                        client.confirm("crash")
                        confirmed.add(item)
                        in_doubt.discard(item)
                        opened_now.discard(item)  # noqa: B023 (joined in this cycle)
                except Exception:
                    pass

            threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.3, 1.0))
            deadline = time.monotonic() + 60
            while len(stored) - stored_before < min_stored and time.monotonic() < deadline and threads[0].is_alive():
                time.sleep(0.01)
            server.kill()
            stop.set()
            for t in threads:
                t.join()
            if len(stored) - stored_before < min_stored:
                raise RuntimeError(f"cycle {cycle}: only {len(stored) - stored_before} puts were stored "
                                   f"before the kill (wanted {min_stored} within 60 s)")
            pending_open |= opened_now
        # the last restart: drain everything and check
        server = KestrelProcess(scratch / "q", config).start()
        client = KestrelMemcacheClient(("127.0.0.1", server.port), timeout=5)
        drained: list[bytes] = []
        while (item := client.get("crash")) is not None:
            drained.append(item)
        client.close()
        server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    came_back = set(drained)
    lost = stored - confirmed - came_back - in_doubt
    totals.update(stored=len(stored), confirmed_before_crash=len(confirmed), lost=len(lost),
                  drained=len(drained), open_at_kill=len(pending_open),
                  open_not_recovered=len(pending_open - came_back - confirmed - in_doubt),
                  close_in_doubt=len(in_doubt),
                  duplicates=len(confirmed & came_back) + len(drained) - len(came_back),
                  lost_examples=sorted(x.decode() for x in lost)[:10])
    print(f"{cycles} kill -9 cycles (syncJournal always): {totals['stored']:,} STORED, "
          f"{totals['confirmed_before_crash']:,} confirmed between kills, {totals['drained']:,} drained after, "
          f"{totals['lost']} lost; {totals['open_at_kill']} reads open at a kill, "
          f"{totals['open_not_recovered']} of them never returned; {totals['duplicates']} duplicates")
    return totals


def add_arguments(b) -> None:
    """``lab bench kestrel``'s flags."""
    from pathlib import Path

    b.add_argument("--ops", type=int, default=20_000, help="set+get pairs per case (default 20,000)")
    b.add_argument("--connections", default="1,50", help="comma-separated connection counts (default 1,50)")
    b.add_argument("--repeats", type=int, default=3, help="rounds; medians are quoted (default 3)")
    b.add_argument("--queues", type=int, help="queues the connections share (default: one per connection)")
    b.add_argument("--crash", type=int, metavar="CYCLES", help="instead: kill -9 cycles under load, then check")
    b.add_argument("--out", type=Path, help="JSON file (default: results/bench/kestrel-<time>.json)")


def run(args) -> dict:
    """``lab bench kestrel``: prints as it goes and returns the figures; ValueError for bad flags."""
    if args.crash is not None:
        if args.crash < 1:
            raise ValueError("--crash takes a number of cycles >= 1")
        return crash_cycles(args.crash)
    try:
        connections = [int(c) for c in args.connections.split(",") if c.strip()]
    except ValueError:
        raise ValueError(f"--connections takes numbers like 1,50, not {args.connections!r}") from None
    if not connections or min(connections) < 1 or args.ops < 100:
        raise ValueError("--connections must be >= 1 and --ops >= 100")
    if args.queues is not None and args.queues < 1:
        raise ValueError("--queues must be >= 1")
    shared = f", {args.queues} shared queue(s)" if args.queues else ", a queue per connection"
    print(f"kestrel vs memcached over loopback ({args.ops:,} set+get pairs per case, {args.repeats} rounds{shared}):")
    return bench_kestrel(args.ops, connections, args.repeats, args.queues)
