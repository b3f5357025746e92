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
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import shutil
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from lab.backends import backend_class, outcome_of
from lab.checker import check
from lab.live import LiveWorld
from lab.live.processes import die_with_parent
from lab.message import decode
from lab.nemesis import Nemesis
from lab.faults import Cast
from lab.paths import make_run_dir, runs_dir
from lab.phases import with_phases
from lab.record import Recorder, write_samples
from lab.runner import RunResult, write_manifest
from lab.summary import summarize
from lab.verdict import RunFacts
from lab.workload import Workload, WorkloadError, parse_workload

LOCUSTFILE = Path(__file__).resolve().parents[1] / "loadgen" / "locustfile.py"
STARTED = "started"  # the file the locustfile writes in its run folder when the users start
CLIENT = "locust"  # the client node Locust's processes are, for the proxies and the faults
STOP_TIMEOUT = 5  # seconds Locust's users get to finish the operation in hand when the time is up
LOCUST_GRACE = 60.0  # seconds past its duration and stop timeout a Locust run may take to end (start-up, CSVs)
DRAIN_STALL = 10.0  # seconds of the drain without a delivery before it gives up
DRAIN_WAIT = 0.1  # a drain get's wait


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
             size: int = 100, rate: float = 0.0, release_p: float = 0.0, faults: list[Any] | None = None,
             options: dict[str, Any] | None = None, seed: int = 0, out: Path | None = None,
             web_port: int | None = None, echo: Any = print) -> RunResult:
    """Run Locust against ``backend``'s live servers; write and return the run like ``lab run``.

    ``web_port``: serve Locust's web UI on that port instead of running headless — the users
    start the load from the page (``users`` is only the mix's size), and Ctrl-C ends it;
    the faults count from the start the page gives."""
    cls = backend_class(backend)
    options = cls.check_options(options, "live")
    if processes < 1:
        raise WorkloadError("--processes must be at least 1")
    if not spawn_rate > 0 or not duration > 0:
        raise WorkloadError("--spawn-rate and --duration must be > 0")
    n_producers, n_consumers = split_users(users, producers, consumers)
    warmup = min(duration / 4, users / spawn_rate)
    workload = load_workload_for(backend, users, duration, n_producers, n_consumers, ack, queues, size,
                                 rate * n_producers, list(faults or []), seed, warmup)
    for fault in workload.faults:
        refusal = LiveWorld.refusal(fault)
        if refusal is not None:
            raise WorkloadError(f"<lab load>: {refusal}")
    from loadgen.client import client_factory

    client_factory(backend)  # ValueError now, not in Locust's processes, if the design has no load generator

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-load-{backend}-live-s{seed}-{secrets.token_hex(2)}"
    run_dir = Path(out) if out is not None else runs_dir() / run_id
    created = make_run_dir(run_dir)
    try:
        world = LiveWorld(seed=seed)
        recorder = Recorder(run_id, "live", backend, workload.name, classify=outcome_of)
        bounds: list[int] = []
        warnings: list[str] = []
        wall = time.perf_counter()
        world.run(lambda control: _main(control, world, cls(world, options), workload, recorder, run_dir, run_id,
                                        users, spawn_rate, processes, release_p, bounds, warnings, echo, web_port))
        wall = time.perf_counter() - wall
        if web_port is not None:  # the load lasted as long as the page ran it
            workload = dataclasses.replace(workload, duration=round(max(0.0, (bounds[1] - bounds[0]) / 1e9), 3))
        table = pa.concat_tables([_worker_samples(run_dir), recorder.table()])
        table = with_phases(table, *bounds)
        write_samples(table, run_dir / "samples.parquet")
        verdict = check(table, RunFacts.of(backend, options, workload, table))
        result = RunResult(run_id, run_dir, workload, backend, "live", seed, verdict, summarize(table),
                           table.num_rows, wall, wall, warnings)
        write_manifest(result, world)
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return result


def _worker_samples(run_dir: Path) -> pa.Table:
    from loadgen.recording import read_worker_samples

    return read_worker_samples(run_dir / "locust")


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
                run_id: str, users: int, spawn_rate: float, processes: int, release_p: float,
                bounds: list[int], warnings: list[str], echo: Any, web_port: int | None = None) -> None:
    await backend.start()
    try:
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
                "--lab-size", str(workload.message_size), "--lab-ack", workload.ack,
                "--lab-rate", repr(workload.rate / workload.producers if workload.producers else 0.0),
                "--lab-release-p", repr(release_p), "--lab-producers", str(workload.producers),
                "--lab-consumers", str(workload.consumers)]
        if processes > 1:
            argv += ["--processes", str(processes)]
        if web_port is None:
            echo(f"locust: {users} users ({workload.producers} producers, {workload.consumers} consumers) against "
                 f"{backend.name} for {workload.duration:g} s" + (f" in {processes} processes" if processes > 1 else ""))
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
                code = await _wait(proc, None if web_port is not None else workload.duration + STOP_TIMEOUT + LOCUST_GRACE)
            finally:
                if web_port is not None:
                    asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
        if code != 0:
            raise RuntimeError(f"locust exited with status {code}: see {locust_dir / 'locust.log'}")
        if nemesis is not None:
            nemesis.heal_all(control)
        bounds.append(control.now_ns())
        await _drain(control, backend, workload, recorder, warnings)
    finally:
        await backend.stop()


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


async def _drain(control, backend, workload: Workload, recorder: Recorder, warnings: list[str]) -> None:
    """Take what is left in the queues, as the runner's drain does: until every queue is
    empty (and the design's backlog, where it can tell, says so), or nothing came for
    ``DRAIN_STALL`` seconds."""
    client = backend.client(control, workload.reliable)
    try:
        for queue in [f"q{i}" for i in range(workload.queues)]:
            last = control.now()
            while control.now() - last < DRAIN_STALL:
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
