"""`lab load`: Locust against a design's live servers, recorded and checked like a `lab run`.

The design's server nodes start as `lab serve` processes on loopback (the embedded
default), each reached through the live world's proxies as from one client node,
``locust``; Locust runs headless in processes of its own (``loadgen/locustfile.py``,
``--processes K``), each writing its samples to Parquet (``loadgen.recording``) beside
Locust's CSVs. While it runs, the fault schedule goes through the live world's faults
(SIGSTOP pauses, kill -9 and restart, proxy partitions), recorded as the history's fault
rows. When Locust ends, the faults are healed and this process drains the queues with the
design's own client (rows of client ``drain``), as the runner's drain does; then the rows
are merged, given their phases, checked, summarised and written as a run folder
(``samples.parquet``, ``manifest.json``, ``locust/`` with the CSVs and each worker's rows).

Or the servers are somebody else's (``--host``: nothing is started, Locust reaches them
directly, the queues get names of this run's own); or Locust is distributed
(``--master``: a master here, its workers ``lab load --worker`` on any machine, each
sending its rows to the master, ``loadgen.distributed``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from lab.design.backend import outcome_of
from lab.judge.checker import check
from lab.worlds.live import LiveWorld
from lab.worlds.live.processes import die_with_parent
from lab.design.message import decode
from lab.workloads.nemesis import Nemesis
from lab.workloads.fault_base import Cast
from lab.history.paths import make_run_dir, runs_dir
from lab.history.phases import fault_kinds, with_phases
from lab.history.record import Recorder, write_samples
from lab.experiments.runner_manifest import RunResult, write_manifest
from lab.judge.summary import summarize
from lab.experiments.run_spec import RunSpec
from lab.workloads.spec import Workload, parse_workload
from lab.workloads.errors import WorkloadError

LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadgen" / "locustfile.py"
STARTED = "started"  # the file the locustfile writes in its run folder when the users start
CLIENT = "locust"  # the client node Locust's processes are, for the proxies and the faults
STOP_TIMEOUT = 5  # seconds Locust's users get to finish the operation in hand when the time is up
LOCUST_GRACE = 60.0  # seconds past its duration and stop timeout a Locust run may take to end (start-up, CSVs)
DRAIN_STALL = 10.0  # seconds of the drain without a delivery before it gives up
DRAIN_WAIT = 0.1  # a drain get's wait
MASTER_PORT = 5557  # Locust's own default
REACH_TIMEOUT = 5.0  # seconds a --host server has to take a connection before the load


@dataclasses.dataclass(frozen=True)
class Master:
    """Locust as a master here, running no users itself: it waits for ``workers`` worker
    processes (``lab load --worker --master-host THIS``, on this machine or others) and
    collects their rows. ``advertise``: the name workers on other machines reach this one
    by — the servers' proxies then listen on every interface and the workers are given that
    name (without it they are given loopback addresses: workers on this machine only)."""

    workers: int
    bind_host: str = "*"
    bind_port: int = MASTER_PORT
    advertise: str | None = None


def parse_hosts(values: list[str], backend: str, nodes: list[str]) -> dict[str, dict[str, tuple[str, int]]]:
    """``--host`` values as each server node's ports: ``HOST:PORT`` (the next node's main
    port, in the design's order of nodes), ``NODE=HOST:PORT`` (that node's main port) or
    ``NODE.PORT=HOST:PORT`` (a named port). Every node needs every port the design's load
    client uses; WorkloadError names what is missing or malformed."""
    from loadgen.client import client_ports

    ports = client_ports(backend)
    given: dict[str, dict[str, tuple[str, int]]] = {node: {} for node in nodes}
    need = " ".join(f"--host {n}{'' if p == ports[0] else '.' + p}=HOST:PORT" for n in nodes for p in ports)
    for value in values:
        where, _, address = value.rpartition("=")
        node, _, port = where.partition(".")
        port = port or ports[0]
        if not where:
            node = next((n for n in nodes if ports[0] not in given[n]), "")
            if not node:
                raise WorkloadError(f"--host {value}: {backend} has {len(nodes)} server node(s), all given already")
        if node not in given:
            raise WorkloadError(f"--host {value}: {backend}'s server nodes are {', '.join(nodes)} (with these options)")
        if port not in ports:
            raise WorkloadError(f"--host {value}: {backend}'s load client uses the ports {', '.join(ports)}")
        host, _, number = address.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]:22133
        if not host or not number.isdigit() or not 0 < int(number) < 65536:
            raise WorkloadError(f"--host {value}: use HOST:PORT, NODE=HOST:PORT or NODE.PORT=HOST:PORT")
        if port in given[node]:
            raise WorkloadError(f"--host {value}: {node}'s {port} port is given twice")
        given[node][port] = (host, int(number))
    missing = [f"{n}.{p}" for n in nodes for p in ports if p not in given[n]]
    if missing:
        raise WorkloadError(f"--host: {backend}'s load needs {', '.join(missing)} too (give {need})")
    return given


def load_workload_for(backend: str, users: int, duration: float, producers: int, consumers: int, ack: str,
                      queues: int, size: int, rate: float, faults: list[Any], seed: int, warmup: float) -> Workload:
    """The run's description as a workload (what the manifest and the checker read). A load
    may have no producers or no consumers (then only the final drain takes the messages),
    which a runner workload may not: the fields are checked with one of each, then set."""
    workload = parse_workload({"name": "load", "description": f"Locust: {users} users against {backend}",
                               "queues": queues, "producers": max(1, producers), "consumers": max(1, consumers),
                               "message_size": size, "rate": rate, "duration": duration, "warmup": warmup,
                               "ack": ack, "seed": seed, "faults": faults}, "<lab load>")
    return dataclasses.replace(workload, producers=producers, consumers=consumers)


def split_users(users: int, producers: int, consumers: int) -> tuple[int, int]:
    """``users`` shared between producers and consumers in the ratio given: at least one of each
    kind asked for when there are two users or more; a single user is a producer."""
    if users < 1:
        raise WorkloadError("--users must be at least 1")
    if producers < 0 or consumers < 0 or producers + consumers == 0:
        raise WorkloadError("--producers and --consumers are weights >= 0, not both 0")
    if producers == 0:
        return 0, users
    if consumers == 0:
        return users, 0
    p = min(users - 1, max(1, round(users * producers / (producers + consumers)))) if users > 1 else 1
    return p, users - p


def run_load(backend: str, *, users: int = 10, spawn_rate: float = 10.0, duration: float = 10.0,
             processes: int = 1, producers: int = 1, consumers: int = 1, ack: str = "reliable", queues: int = 1,
             size: int = 100, rate: float = 0.0, release_p: float = 0.0, batch: int = 1,
             faults: list[Any] | None = None, options: dict[str, Any] | None = None, seed: int = 0,
             out: Path | None = None, hosts: list[str] | None = None, master: Master | None = None,
             web_port: int | None = None, echo: Any = print) -> RunResult:
    """Run Locust against ``backend``'s live servers; write and return the run like ``lab run``.

    ``hosts``: the servers are already running there (``parse_hosts``); none is started,
    no fault is applied, and the queues are named after the run (``<hex>-q0``), so what
    the servers held before is not this run's. ``master``: Locust's users run in workers
    that connect to it (``run_worker``). ``web_port``: serve Locust's web UI on that port
    instead of running headless — the users start the load from the page (``users`` is
    only the mix's size), and Ctrl-C ends it; the faults count from the start the page
    gives."""
    n_producers, n_consumers = split_users(users, producers, consumers)
    warmup = min(duration / 4, users / spawn_rate) if spawn_rate > 0 else 0.0
    workload = load_workload_for(backend, users, duration, n_producers, n_consumers, ack, queues, size,
                                 rate * n_producers, list(faults or []), seed, warmup)
    spec = RunSpec.resolve(workload, backend, "live", options=options)  # the design and its options, once
    workload, options = spec.workload, spec.options
    if processes < 1:
        raise WorkloadError("--processes must be at least 1")
    if master is not None and master.workers < 1:
        raise WorkloadError("--workers must be at least 1")
    if master is not None and processes > 1:
        raise WorkloadError("--master runs no users itself: its workers do (--workers K), not --processes")
    if not spawn_rate > 0 or not duration > 0:
        raise WorkloadError("--spawn-rate and --duration must be > 0")
    if batch < 1:
        raise WorkloadError(f"--batch {batch}: use 1 or more")
    from loadgen.client import check_load, client_factory, reads_in_batches, releases

    client_factory(backend)  # ValueError now, not in Locust's processes, if the design has no load generator
    if batch > 1 and not reads_in_batches(backend):
        raise WorkloadError(f"--batch {batch}: {backend}'s consumers read one message per request")
    try:
        check_load(backend, options, ack == "reliable", batch)
    except ValueError as e:
        raise WorkloadError(f"--batch {batch}, --ack {ack}: {e}") from None
    if release_p > 0 and not releases(backend):
        raise WorkloadError(f"--release-p {release_p:g}: {backend}'s consumers cannot hand a message back "
                            "(a log has no release; an uncommitted record returns when its session ends)")
    if hosts and faults:
        raise WorkloadError("--faults act on the servers lab load starts: with --host the servers are yours")
    if hosts and master is not None and master.advertise:
        raise WorkloadError("--advertise names this machine for the servers lab load starts: with --host the "
                            "workers reach your servers at the addresses given")
    for fault in workload.faults:
        refusal = LiveWorld.refusal(fault)
        if refusal is not None:
            raise WorkloadError(f"<lab load>: {refusal}")
    token = secrets.token_hex(2)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-load-{backend}-live-s{seed}-{token}"
    world = LiveWorld(seed=seed)
    design = spec.design(world, options)
    remote = parse_hosts(hosts, backend, design.server_nodes) if hosts else None
    queue_prefix = f"{token}-" if remote else ""
    run_dir = Path(out) if out is not None else runs_dir() / run_id
    created = make_run_dir(run_dir)
    try:
        recorder = Recorder(run_id, "live", backend, workload.name, classify=outcome_of)
        bounds: list[int] = []
        warnings: list[str] = []
        locust = _Locust(users, spawn_rate, processes, release_p, batch, queue_prefix, master, web_port)
        wall = time.perf_counter()
        world.run(lambda control: _main(control, world, design, workload, recorder, run_dir, run_id, locust, remote,
                                        bounds, warnings, echo))
        wall = time.perf_counter() - wall
        if web_port is not None:  # the load lasted as long as the page ran it
            workload = dataclasses.replace(workload, duration=round(max(0.0, (bounds[1] - bounds[0]) / 1e9), 3))
        table = pa.concat_tables([_worker_samples(run_dir), recorder.table()])
        table = with_phases(table, *bounds)
        write_samples(table, run_dir / "samples.parquet")
        if web_port is not None:
            spec = dataclasses.replace(spec, workload=workload)
        verdict = check(table, spec.facts(fault_kinds(table)))
        result = RunResult(run_id, run_dir, spec, verdict, summarize(table), table.num_rows, wall, wall, warnings)
        write_manifest(result, world)
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return result


def _worker_samples(run_dir: Path) -> pa.Table:
    from loadgen.recording import read_worker_samples

    return read_worker_samples(run_dir / "locust")


@dataclasses.dataclass(frozen=True)
class _Locust:
    """How Locust runs: the users' mix and reads, where they run, and how it is driven."""

    users: int
    spawn_rate: float
    processes: int
    release_p: float
    batch: int
    queue_prefix: str
    master: Master | None
    web_port: int | None


def _targets(world: LiveWorld, nodes: list[str]) -> dict[str, dict[str, str]]:
    """Every server node's client ports, as Locust's processes reach them: through the
    proxies of the links from ``locust`` (so partitions and link faults apply)."""
    targets: dict[str, dict[str, str]] = {}
    for node in nodes:
        proc = world.processes.get(node)
        ports = proc.ports if proc is not None else {}
        targets[node] = {port: "%s:%d" % world.address(node, port, CLIENT) for port in ports if port != "peer"}
    return targets


async def _main(control, world: LiveWorld, backend, workload: Workload, recorder: Recorder, run_dir: Path,
                run_id: str, locust: _Locust, remote: dict[str, dict[str, tuple[str, int]]] | None,
                bounds: list[int], warnings: list[str], echo: Any) -> None:
    users, spawn_rate, web_port, master = locust.users, locust.spawn_rate, locust.web_port, locust.master
    if remote is not None:  # somebody else's servers: Locust goes to them directly, the drain through a proxy
        for node, ports in remote.items():
            await _reachable(node, ports)
            world.add_remote(node, ports)
        targets = {node: {port: f"{host}:{number}" for port, (host, number) in ports.items()}
                   for node, ports in remote.items()}
    else:
        if master is not None and master.advertise:
            world.links.public[CLIENT] = master.advertise
        await backend.start()
        await backend.prepare([f"{locust.queue_prefix}q{i}" for i in range(workload.queues)])
    try:
        if remote is None:
            targets = _targets(world, backend.server_nodes)
        nemesis = None
        if workload.faults:
            nemesis = Nemesis(world, Cast(tuple(backend.server_nodes), (CLIENT,)), workload.faults, workload.seed,
                              recorder, workload.source)
        locust_dir = run_dir / "locust"
        locust_dir.mkdir(parents=True, exist_ok=True)
        run = (["--headless", "--only-summary", "-u", str(users), "-r", repr(spawn_rate), "-t", f"{workload.duration:g}s"]
               if web_port is None else ["--web-host", "127.0.0.1", "--web-port", str(web_port), "-u", str(users),
                                         "-r", repr(spawn_rate)])
        argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *run, "--stop-timeout", str(STOP_TIMEOUT), "--exit-code-on-error", "0", "--csv", str(locust_dir / "locust"),
                "--lab-backend", backend.name, "--lab-targets", json.dumps(targets),
                "--lab-options", json.dumps(backend.options), "--lab-run-dir", str(locust_dir),
                "--lab-run-id", run_id, "--lab-scenario", workload.name, "--lab-queues", str(workload.queues),
                "--lab-queue-prefix", locust.queue_prefix,
                "--lab-size", str(workload.message_size), "--lab-ack", workload.ack, "--lab-batch", str(locust.batch),
                "--lab-rate", repr(workload.rate / workload.producers if workload.producers else 0.0),
                "--lab-release-p", repr(locust.release_p), "--lab-producers", str(workload.producers),
                "--lab-consumers", str(workload.consumers)]
        if locust.processes > 1:
            argv += ["--processes", str(locust.processes)]
        if master is not None:
            argv += ["--master", "--expect-workers", str(master.workers), "--master-bind-host", master.bind_host,
                     "--master-bind-port", str(master.bind_port)]
            echo(f"locust master: waiting for {master.workers} worker(s) on port {master.bind_port}: run "
                 f"`lab load --worker --master-host {master.advertise or 'THIS_HOST'}"
                 f"{'' if master.bind_port == MASTER_PORT else f' --master-port {master.bind_port}'}` where they run")
        if web_port is None:
            echo(f"locust: {users} users ({workload.producers} producers, {workload.consumers} consumers) against "
                 f"{backend.name} for {workload.duration:g} s"
                 + (f" in {locust.processes} processes" if locust.processes > 1 else ""))
        else:
            echo(f"locust's web UI: http://127.0.0.1:{web_port}/ — start the load there; Ctrl-C here ends the run "
                 f"(the mix: {workload.producers} producers to {workload.consumers} consumers)")
        with open(locust_dir / "locust.log", "wb") as log:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=log,
                                                        env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                                        preexec_fn=die_with_parent())  # never outlives this run
            if web_port is not None:  # Ctrl-C ends Locust, and then this run goes on to its drain
                asyncio.get_running_loop().add_signal_handler(signal.SIGINT, _interrupt, proc)
            try:
                # the run starts when Locust's users do (its start-up takes a second or two, and
                # the web UI waits for its user), so the warm-up and the faults count from there
                while not (locust_dir / STARTED).exists() and proc.returncode is None:
                    await asyncio.sleep(0.02)
                bounds.append(control.now_ns() + round(workload.warmup * 1e9))
                if nemesis is not None:
                    nemesis.start(control)
                duration = workload.duration
                assert duration is not None  # lab load's workload has one (load_workload_for)
                code = await _wait(proc, None if web_port is not None else duration + STOP_TIMEOUT + LOCUST_GRACE)
            finally:
                if web_port is not None:
                    asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
        if code != 0:
            raise RuntimeError(f"locust exited with status {code}: see {locust_dir / 'locust.log'}")
        if nemesis is not None:
            nemesis.heal_all(control)
            await world.settle()  # servers still restarting are ready before the drain
        bounds.append(control.now_ns())
        await _drain(control, backend, workload, [f"{locust.queue_prefix}q{i}" for i in range(workload.queues)],
                     recorder, warnings)
    finally:
        if remote is None:
            await backend.stop()


async def _reachable(node: str, ports: dict[str, tuple[str, int]]) -> None:
    """A WorkloadError now, before any load, for a ``--host`` that takes no connection."""
    for port, (host, number) in ports.items():
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, number), REACH_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as e:
            raise WorkloadError(f"--host: {node}.{port} at {host}:{number} takes no connection "
                                f"({e or 'timed out'})") from None
        writer.close()


async def _wait(proc: asyncio.subprocess.Process, limit: float | None) -> int:
    """Locust's exit status; a Locust that outlives its run by ``LOCUST_GRACE`` is stopped
    (SIGTERM, then kill) and the run fails: a hang must not hang the lab."""
    try:
        return await asyncio.wait_for(proc.wait(), limit)
    except asyncio.TimeoutError:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        raise RuntimeError(f"locust did not stop within {limit:g} s of its start; stopped it") from None


def _interrupt(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)  # Locust's clean shutdown (its users stop, its files are written)


async def _drain(control, backend, workload: Workload, queues: list[str], recorder: Recorder,
                 warnings: list[str]) -> None:
    """Take what is left in the queues, as the runner's drain does: until every queue is
    empty (and the design's backlog, where it can tell, says so), or nothing came for
    ``DRAIN_STALL`` seconds."""
    client = backend.client(control, workload.reliable)
    try:
        for queue in queues:
            last = control.now()
            while control.now() - last < DRAIN_STALL:
                delivery = None
                with recorder.measure(control.now_ns, "control", "drain", "get", queue) as m:
                    delivery = await client.get(queue, DRAIN_WAIT)
                    if delivery is None:
                        m.fail("empty")
                    else:
                        m.msg_id, m.bytes = decode(delivery.body)[0], len(delivery.body)
                if delivery is not None:
                    last = control.now()
                    if delivery.token is not None:
                        with recorder.measure(control.now_ns, "control", "drain", "ack", queue, m.msg_id):
                            await client.ack(delivery)
                    continue
                if not m.ok and m.error != "empty":
                    continue
                backlog = await client.backlog(queue)
                if not backlog:
                    break
            else:
                warnings.append(f"the drain of {queue} gave up ({DRAIN_STALL:g} s without a delivery): what was "
                                "not delivered counts as lost")
    finally:
        await client.close()


def run_worker(master_host: str, master_port: int = MASTER_PORT, processes: int = 1, echo: Any = print) -> int:
    """A Locust worker (``processes`` of them) of a ``lab load --master`` run, on this machine
    or another: it gets the run's settings from the master when the load starts, and sends
    its rows to it. Returns Locust's exit status once the master has ended the run."""
    if processes < 1:
        raise WorkloadError("--processes must be at least 1")
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker", "--master-host", master_host,
            "--master-port", str(master_port)] + (["--processes", str(processes)] if processes > 1 else [])
    echo(f"locust worker{'s' if processes > 1 else ''}: connecting to the master at {master_host}:{master_port}")
    return subprocess.call(argv, preexec_fn=die_with_parent())
