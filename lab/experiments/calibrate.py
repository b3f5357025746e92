"""`lab calibrate BACKEND`: measure a design's request path and write its service-time model.

Two measurements, one file (``lab.design.service``'s calibration format):

- **Service times**, in process (``lab.worlds.inprocess``): the design's server nodes booted as the
  sim world boots them, on real files, with the network a function call; the design's own
  client does sequential cycles — a put, a reliable get and its ack (every fifth one
  released and taken again, where the design can release), a put and a plain get, now and
  then a new client's put, get and backlog query (a client's set-up requests, as each of a
  run's clients makes them) — at two message sizes taking turns, after a warm-up (whose
  requests count only for a kind seen nowhere else: a set-up made once). Each request a
  cpu node handles is timed in thread CPU time and named as the sim world names it. Per
  kind: a cost per request byte from the difference of the two sizes' medians (only where
  the kind's bytes differ between the sizes and the difference is clearly above the noise
  of the medians), and the rest as a lognormal (its median, and sigma from the
  interquartile range of the logs), a constant where there are few samples.
- **Network**, live: the design's real servers (``lab serve`` processes, as ``lab run
  --world live`` starts them) and its client over loopback TCP; the round trip of a probe
  request less the probe's in-process service time, halved, is the one-way latency of the
  protocol's loopback (a lognormal), which ``sim: {latency: calibrated}`` uses. The probe
  is the client's plain get of an empty queue, or, where that request calls a peer or a
  store (whose work live is neither network nor this node's service), an HTTP request for
  a path no route serves.

This room measures; ``lab.experiments.calibrate_fit`` fits the samples and writes the file.

What it may touch: temporary folders and loopback ports; the file it is told to write.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from lab.design.backend import Backend, QueueClient, Rejected
from lab.design.registry import backend_class
from lab.experiments.calibrate_fit import FLOOR_NS, SIZES, Calibration, fit, fit_network, sigma_of
from lab.worlds.inprocess import InProcessWorld, Meter, Sample
from lab.design.service import ServiceTime

DEFAULT_REQUESTS = 1000  # operation cycles per message size (each about six requests), and round trips
MIN_REQUESTS = 10
WARMUP = 40  # cycles discarded before the measured ones
RELEASE_EVERY = 5  # every fifth reliable get is released and taken again
BACKLOG_EVERY = 10  # a backlog query every tenth cycle (the runner's drain asks it)
TAKE_TRIES = 500  # gets until a message put a moment ago is delivered
QUEUE = "calibrate"
PROBE_PATH = "/lab-calibrate/probe"  # served by no route of any design
PROBE_TIMEOUT = 5.0
CONCURRENCY = 8  # probes at once for the CPU a round trip costs under load
FSYNCS = 200  # fsyncs timed for the machine's disk


# ---------------------------------------------------------------------------- the drive

async def _take(client: QueueClient, queue: str):
    """The message just put (a node that holds no copy, or a message not yet visible, answers
    empty: ask again)."""
    for _ in range(TAKE_TRIES):
        delivery = await client.get(queue, 0)
        if delivery is not None:
            return delivery
    raise RuntimeError(f"a message put on {queue!r} was not delivered after {TAKE_TRIES} gets")


class Cycles:
    """The operations of the calibration, with the design's own clients (on any world's
    runtime ``rt``: the sim world runs them too, to compare the kinds it charges)."""

    def __init__(self, design: Backend, rt: Any, reliable: QueueClient, plain: QueueClient):
        self.design, self.rt = design, rt
        self.reliable, self.plain = reliable, plain
        self.releases = True  # until the design refuses one (a log has no release)

    async def cycle(self, i: int, body: bytes) -> None:
        reliable = self.reliable
        await reliable.put(QUEUE, body)
        delivery = await _take(reliable, QUEUE)
        if self.releases and i % RELEASE_EVERY == RELEASE_EVERY - 1:
            try:
                await reliable.release(delivery)
                delivery = await _take(reliable, QUEUE)
            except Rejected:
                self.releases = False
        await reliable.ack(delivery)
        # Now and then a new client (as each of a run's clients, and its drain, is): the
        # requests a client makes to set itself up are measured too, and a backlog query.
        fresh = i % BACKLOG_EVERY == 0
        plain = self.design.client(self.rt, False) if fresh else self.plain
        try:
            await plain.put(QUEUE, body)
            await _take(plain, QUEUE)
            if fresh:
                await plain.backlog(QUEUE)
        finally:
            if fresh:
                await plain.close()


def _http_probe(rt: Any, node: str) -> Callable[[], Any]:
    from lab.design.http_client import ResponseReader, encode_request

    conn = rt.net.connect(node, "http")
    request = encode_request("GET", PROBE_PATH, node, b"")

    async def probe() -> None:
        await conn.exchange(request, ResponseReader("GET"), PROBE_TIMEOUT)

    probe.close = conn.close  # type: ignore[attr-defined]
    return probe


def _get_probe(client: QueueClient) -> Callable[[], Any]:
    async def probe() -> None:
        await client.get(QUEUE, 0)

    probe.close = client.close  # type: ignore[attr-defined]
    return probe


@dataclass
class _InProcessResult:
    samples: list[Sample]
    probe: str  # "get" or "http"
    probe_kind: str
    probe_service_ns: float


async def _in_process(cls: type[Backend], options: Mapping[str, Any] | None, requests: int, tick: Callable[[], None],
                      seed: int) -> tuple[_InProcessResult, Backend]:
    meter = Meter(())
    world = InProcessWorld(meter, seed)
    design = cls(world, options)  # type: ignore[arg-type]  # the sim world's defaults
    cpu_nodes = design.cpu.nodes(design.server_nodes)
    meter.cpu_nodes = frozenset(cpu_nodes)
    clients: list[Any] = []
    try:
        # As a run starts them: through the design's start() (its server nodes in order, a
        # store first, and whatever else the design does there, e.g. electing a primary).
        await design.start()
        rt = world.node("calibrate")
        reliable, plain = design.client(rt, True), design.client(rt, False)
        clients += [reliable, plain]
        cycles = Cycles(design, rt, reliable, plain)
        bodies = [(b"calibrate-" * (size // 10 + 1))[:size] for size in SIZES]
        meter.phase, meter.recording = "warmup", True  # kept only for kinds seen nowhere else (fit)
        for i in range(WARMUP):
            await cycles.cycle(i, bodies[0])
            tick()
        # The sizes take turns, cycle by cycle: a drift of the machine's speed (other work, a
        # growing state) then moves both sizes' medians alike, not their difference.
        for i in range(requests * len(SIZES)):
            size = i % len(SIZES)
            meter.phase = f"size {SIZES[size]}"
            await cycles.cycle(i // len(SIZES), bodies[size])
            tick()
        # the probe: a plain get of the now empty queue, unless that calls a peer or a store
        first = len(meter.samples)
        meter.phase, meter.recording = "probe", True
        probe_name, probe = "get", _get_probe(plain)
        world.nested_calls = 0
        for _ in range(requests):
            await probe()
            tick()
        if world.nested_calls and "http" in world.nets[cpu_nodes[0]].ports:
            probe_name, probe = "http", _http_probe(rt, cpu_nodes[0])
            clients.append(probe)
            first = len(meter.samples)
            for _ in range(requests):
                await probe()
        probe_samples = meter.samples[first:]
        kinds = statistics.multimode(s.kind for s in probe_samples)
        probe_kind = kinds[0] if kinds else ""
        service = statistics.median([s.ns for s in probe_samples if s.kind == probe_kind] or [0])
        meter.recording = False
        return _InProcessResult(meter.samples, probe_name, probe_kind, service), design
    finally:
        for client in clients:
            try:
                await client.close()
            except Exception:  # a client of a world that is going away
                pass
        await world.close()


@dataclass
class _Loopback:
    round_trips: list[int]  # ns, each probe's, one at a time
    client_cpu: list[int]  # ns of this process's CPU in each of them (client code and link proxies)
    client_loaded: float  # ns of this process's CPU per round trip with CONCURRENCY probes at once
    server_loaded: float | None  # ns of the probed server process's CPU per round trip, likewise (None: in this process)


def process_cpu_ns(pid: int) -> int | None:
    """CPU time a process's threads have run, in ns (Linux's schedstat), or None where the OS
    does not say."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def _loopback(cls: type[Backend], options: Mapping[str, Any] | None, probe_name: str, requests: int,
              tick: Callable[[], None], seed: int) -> _Loopback:
    """The probe request against the design's live servers over loopback TCP: ``requests``
    round trips one at a time (each one's time and this process's CPU in it), then as many
    from ``CONCURRENCY`` probes at once (this process's and the server's CPU per round trip).

    Why both: one request at a time, every round trip pays for waking each event loop up;
    under load a wake-up serves several requests, so the CPU a request costs — what bounds
    throughput — is the loaded figure, and the rest of an idle round trip is latency."""
    from lab.worlds.live.world import LiveWorld

    world = LiveWorld(seed)
    design = cls(world, options)
    cpu_nodes = design.cpu.nodes(design.server_nodes)

    async def main(control: Any) -> _Loopback:
        await design.start()
        probes: list[Any] = []

        async def new_probe():
            if probe_name == "get":
                client = design.client(control, False)
                await client.put(QUEUE, b"probe")  # the queue exists (and the client has its account)
                await _take(client, QUEUE)
                probes.append(_get_probe(client))
            else:
                probes.append(_http_probe(control, cpu_nodes[0]))
            return probes[-1]

        try:
            probe = await new_probe()
            server = world.processes.get(cpu_nodes[0])
            pid = server.pid if server is not None else None
            round_trips, client_cpu = [], []
            for i in range(WARMUP + requests):
                t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                await probe()
                if i >= WARMUP:
                    client_cpu.append(time.thread_time_ns() - c0)
                    round_trips.append(time.perf_counter_ns() - t0)
                tick()
            loaded = [probe] + [await new_probe() for _ in range(CONCURRENCY - 1)]
            each = max(1, requests // CONCURRENCY)

            async def drive(one) -> None:
                for _ in range(each):
                    await one()
                    tick()

            server_before = process_cpu_ns(pid) if pid is not None else None
            c0 = time.thread_time_ns()
            await asyncio.gather(*(drive(one) for one in loaded))
            client_loaded = (time.thread_time_ns() - c0) / (each * CONCURRENCY)
            server_after = process_cpu_ns(pid) if pid is not None else None
            server_loaded = ((server_after - server_before) / (each * CONCURRENCY)
                             if server_after is not None and server_before is not None else None)
            return _Loopback(round_trips, client_cpu, client_loaded, server_loaded)
        finally:
            for one in probes:
                await one.close()
            await design.stop()

    return world.run(main)


def measure_fsync(count: int = FSYNCS) -> dict[str, Any]:
    """The machine's fsync latency where the live world keeps its servers' files (the
    temporary folder): ``count`` appends of a 4 KiB page, each fsynced, as a lognormal (ms)
    fitted to the median and the 99th percentile."""
    import tempfile

    times = []
    with tempfile.TemporaryDirectory(prefix="queue-lab-fsync-") as folder:
        with open(Path(folder) / "probe", "ab") as file:
            page = b"\0" * 4096
            for _ in range(count):
                file.write(page)
                file.flush()
                t0 = time.perf_counter_ns()
                os.fsync(file.fileno())
                times.append(time.perf_counter_ns() - t0)
    times.sort()
    median, p99 = statistics.median(times), times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
    return {"dist": "lognormal", "ms": round(median / 1e6, 5), "sigma": round(math.log(p99 / median) / 2.3263, 4)}


def _load_average() -> float | None:
    """The machine's one-minute load average, where the OS tells it."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _patient(cls: type[Backend], options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` with the clients' reply timeout at ``PROBE_TIMEOUT`` where the design takes
    one and the caller set none: the loopback probes measure round trips, and one stalled on
    a loaded machine past the design's default (1 s) would end the calibration, not time it."""
    given = dict(options or {})
    if "timeout" not in given and any(o.name == "timeout" for o in cls.options_declared):
        given["timeout"] = PROBE_TIMEOUT
    return given


def calibrate(backend: str, requests: int = DEFAULT_REQUESTS, *, options: Mapping[str, Any] | None = None,
              loopback: bool = True, progress: bool = True, seed: int = 0) -> Calibration:
    """Measure ``backend``'s service times in process (``requests`` cycles per message size)
    and, with ``loopback``, its protocol's loopback latency (``requests`` round trips)."""
    from lab.worlds.live.world import run_event_loop  # the live world's loop (uvloop): the servers' own
    from lab.history.provenance import machine, versions
    from tqdm import tqdm

    if requests < MIN_REQUESTS:
        raise ValueError(f"requests must be at least {MIN_REQUESTS}, got {requests}")
    cls = backend_class(backend)
    load_before = _load_average()
    live = loopback and "live" in cls.worlds
    total = WARMUP + len(SIZES) * requests + requests + ((WARMUP + 2 * requests) if live else 0)
    started = time.monotonic()
    with tqdm(total=total, unit="op", desc=f"calibrate {backend}", disable=not progress, dynamic_ncols=True,
              leave=False) as bar:
        tick = lambda: bar.update(1)  # noqa: E731
        result, design = run_event_loop(_in_process(cls, options, requests, tick, seed))
        phases = (f"size {SIZES[0]}", f"size {SIZES[1]}")
        fits = fit(result.samples, phases)
        network, round_trips, transport_ns, client = None, [], 0.0, None
        if live:
            loop = _loopback(cls, _patient(cls, options), result.probe, requests, tick, seed)
            round_trips = loop.round_trips
            service = result.probe_service_ns
            if loop.server_loaded is None:  # the server ran in this process: its CPU is in the client's
                client_ns, server_ns = max(FLOOR_NS, loop.client_loaded - service), service
            else:
                client_ns, server_ns = max(FLOOR_NS, loop.client_loaded), max(loop.server_loaded, service)
                transport_ns = server_ns - service
            # the loaded CPU per round trip, with the spread of the one-at-a-time ones
            client = ServiceTime("lognormal", client_ns,
                                 sigma_of([math.log(max(FLOOR_NS, c)) for c in loop.client_cpu]))
            network = fit_network(round_trips, server_ns + client_ns)
    found = versions()
    measured: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "python": found["python"],
        "lab": found.get("queue-lab", "unknown"),
        "sizes": list(SIZES),
        "cycles_per_size": requests,
        "warmup_cycles": WARMUP,
        "requests_per_kind": {kind: f.n for kind, f in sorted(fits.items())},
        "options": {k: v for k, v in design.options.items()},
        "seconds": round(time.monotonic() - started, 1),
        # other work on the machine inflates both measurements (caches, wake-ups): say how busy it was
        "load_average": {"before": load_before, "after": _load_average()},
    }
    if live:
        measured["network_probe"] = {
            "probe": ("plain get of an empty queue" if result.probe == "get" else f"HTTP GET {PROBE_PATH} (no route)"),
            "kind": result.probe_kind, "round_trips": len(round_trips),
            "round_trip_us_median": round(statistics.median(round_trips) / 1e3, 2),
            "service_us_subtracted": round(result.probe_service_ns / 1e3, 2),
            "concurrency": CONCURRENCY,
            "client_cpu_us_per_round_trip": {"one_at_a_time": round(statistics.median(loop.client_cpu) / 1e3, 2),
                                             "loaded": round(loop.client_loaded / 1e3, 2)},
            "server_process_cpu_us_per_round_trip": (round(loop.server_loaded / 1e3, 2)
                                                     if loop.server_loaded is not None else None)}
    fsync = measure_fsync() if live else None
    return Calibration(backend, fits, network, measured, transport_ns, client, fsync)
