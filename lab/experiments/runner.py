"""The runner: one workload against one backend in one world, every operation recorded.

It starts the design's nodes, one node per producer (``p0``, ``p1``...) and per consumer
(``c0``...), runs the load for the workload's duration or message count while the
nemesis (``lab.workloads.nemesis``) applies the fault schedule, heals everything, drains every queue,
and writes the run directory:

    results/runs/<run_id>/samples.parquet   one row per operation (lab.history.record schema)
    (samples.spill.arrow while it runs: the recorder's batches, so memory does not grow with
    the run; samples.parquet is written from them a batch at a time, with the phases)
    results/runs/<run_id>/manifest.json     workload, backend, world, seed, versions,
                                            machine, timings, checker verdict, summary
    results/runs/<run_id>/servers/<node>.log   live: each server process's log (its stderr)

Producers with constant arrivals follow OMB's rate limiter: one client, closed loop, with
intended send times at a fixed interval; a producer that falls behind sends at once until
it catches up, and records how late each send started (rate 0: as fast as it can). With
``arrivals: poisson`` a producer is open-loop, a population of independent clients: each
put starts at its scheduled time (exponential gaps) whether earlier puts have finished or
not, as its own task on the producer's node, on an idle client of the producer's pool or a
new one (a client is one connection, which takes one request at a time); its ``delay_ns``
is how late it started (0 on time: only a pause of the producer's node makes it late).

A workload with ``consumers: 0`` loads the server with puts alone; after the load the
runner starts one consumer, ``drain``, that reads every queue until it is empty, so every
acknowledged put is still checked for delivery: its gets are all in the drain phase.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import secrets
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, TextIO

from lab.design import message
from lab.design.backend import Backend, QueueClient, outcome_of
from lab.design.registry import backend_class, design_module
from lab.judge.checker import Verdict, check
from lab.history.paths import make_run_dir, runs_dir
from lab.history.provenance import machine, versions
from lab.workloads.faults import Cast, supports
from lab.workloads.nemesis import Nemesis
from lab.history.phases import fault_events, phases_at
from lab.history.record import SAMPLE_SCHEMA, Recorder, read_samples, write_sample_batches
from lab.design.runtime import Runtime, World
from lab.judge.summary import summarize
from lab.judge.verdict import RunFacts
from lab.workloads.spec import Workload, WorkloadError

POLL_WAIT = 0.1  # seconds a consumer's get waits for a message
RETRY_PAUSE = 0.01  # seconds a client backs off after a failed operation
DRAIN_STALL = 30.0  # seconds the final drain goes on without a delivery before it gives up
DRAIN_CAP = 600.0  # seconds the final drain may take at most, deliveries or not
PROGRESS_STEP = 0.25  # seconds (of the world's clock) between progress updates
DRAIN_CONSUMER = "drain"  # the node and client of the drain consumer of a workload with no consumers


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    workload: Workload
    backend: str
    world: str
    seed: int
    verdict: Verdict
    summary: dict[str, Any]
    samples: int
    wall_seconds: float
    world_seconds: float
    #: what the run could not do as asked (a fault that never started), for people
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def samples_path(self) -> Path:
        return self.run_dir / "samples.parquet"


class _State:
    """What producers, consumers and the progress bar share."""

    def __init__(self, t0: int, warmup_ns: int):
        self.t0 = t0
        self.warmup_end = t0 + warmup_ns
        self.draining = False
        self.puts = 0
        self.enqueued = 0  # puts that returned ok
        self.delivered = 0  # gets that returned a message
        self.last_delivery = t0  # when a consumer last got a message
        self.last_unknown_get: int | None = None  # when a get last ended with an unknown outcome (it may have leased one)
        self.faulted = False  # the run had a fault schedule: the design's recovery may still be under way
        self.recovery_ns = 0  # the design's ``recovery_s``: the drain's shortest quiet before it ends
        self.drain_gave_up = False


WORLDS = ("sim", "live")


def world_class(kind: str) -> type:
    if kind == "sim":
        from models.world import SimWorld

        return SimWorld
    if kind == "live":
        from lab.worlds.live import LiveWorld

        return LiveWorld
    raise ValueError(f"unknown world {kind!r} (sim or live)")


def make_world(kind: str, seed: int, workload: Workload | None = None) -> World:
    cls = world_class(kind)
    if kind == "sim":
        from models.world import SimConfig

        return cls(seed, SimConfig.from_spec(workload.sim) if workload is not None and workload.sim else None)
    return cls(seed)  # live: node disks in a temporary folder, removed after the run


def fault_refusal(workload: Workload, world: str, backend: str | None = None) -> str | None:
    """Why ``world`` cannot apply ``workload``'s fault schedule (one line), or None if it can;
    with ``backend``, also why not to that design's servers (live: they must be processes)."""
    cls = world_class(world)
    found = supports(getattr(cls, "fault_kinds", ()), workload.faults)
    if found is None:
        if world == "live" and backend is not None and workload.faults and design_module(backend, "serve") is None:
            return (f"the live world applies faults to server processes, and {backend} has none "
                    f"(it runs in the runner's process)")
        refuse = getattr(cls, "refusal", lambda fault: None)  # what else the world cannot do
        return next((f"the {world} world cannot apply faults[{number}] ({fault.kind}): {why}"
                     for number, fault in enumerate(workload.faults) if (why := refuse(fault))), None)
    number, fault = found
    able = [w for w in WORLDS if fault.kind in getattr(world_class(w), "fault_kinds", ())]
    return (f"the {world} world cannot apply faults[{number}] ({fault.kind}); "
            f"{fault.kind} faults run in the {' and '.join(able) or 'no'} world{'s' if len(able) > 1 else ''} only")


def run(
    workload: Workload,
    backend: str,
    world: str = "sim",
    seed: int | None = None,
    out: str | Path | None = None,
    progress: bool | TextIO = True,
    options: dict[str, Any] | None = None,
) -> RunResult:
    """Run ``workload`` against ``backend`` in ``world``; write and return the results.

    ``progress``: True for a bar on a terminal, False for none, or a stream to draw it on."""
    seed = workload.seed if seed is None else seed
    workload = workload.with_seed(seed)
    cls = backend_class(backend)
    options = cls.check_options(options, world)
    if world not in cls.worlds:
        raise WorkloadError(f"backend {backend!r} runs in the {' and '.join(cls.worlds)} world(s), not {world!r}")
    refusal = fault_refusal(workload, world, backend)
    if refusal is not None:
        raise WorkloadError(f"{workload.source}: {refusal}")

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{workload.name}-{backend}-{world}-s{seed}-{secrets.token_hex(2)}"
    run_dir = Path(out) if out is not None else runs_dir() / run_id
    created = make_run_dir(run_dir)
    recorder: Recorder | None = None
    try:
        the_world = make_world(world, seed, workload)
        if hasattr(the_world, "logs_to"):  # live: the server processes' logs go beside the samples
            the_world.logs_to = run_dir / "servers"
        recorder = Recorder(run_id, world, backend, workload.name, classify=outcome_of,
                            spill=run_dir / SPILL_FILE)
        warnings: list[str] = []
        phase_bounds: list[int | None] = []  # warm-up end and drain start, as _main finds them
        wall_start = time.perf_counter()
        world_seconds = the_world.run(
            lambda control: _main(control, the_world, cls(the_world, options), workload, recorder, progress,
                                  warnings, phase_bounds)
        )
        wall_seconds = time.perf_counter() - wall_start

        rows = write_samples_phased(recorder, run_dir / "samples.parquet", *phase_bounds)
        recorder.discard()
        table = read_samples(run_dir, CHECKED_COLUMNS, lean=True)  # what the checker and summary read
        verdict = check(table, RunFacts.of(backend, options, workload, recorder.fault_table()))
        summary = summarize(table)
        del table
        result = RunResult(run_id, run_dir, workload, backend, world, seed, verdict, summary,
                           rows, wall_seconds, world_seconds, warnings)
        write_manifest(result, the_world)
    except BaseException:
        if recorder is not None:
            recorder.discard()
        if created:  # a failed run leaves no half-written folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return result


async def _main(control: Runtime, world: World, backend: Backend, workload: Workload,
                recorder: Recorder, progress: bool | TextIO, warnings: list[str],
                phase_bounds: list[int | None]) -> float:
    await backend.start()
    t0 = control.now_ns()
    state = _State(t0, round(workload.warmup * 1e9))
    state.recovery_ns = round(backend.recovery_s * 1e9)
    state.faulted = bool(workload.faults)
    reliable = workload.reliable
    queues = [f"q{i}" for i in range(workload.queues)]

    producer_nodes = [f"p{i}" for i in range(workload.producers)]
    consumer_nodes = [f"c{i}" for i in range(workload.consumers)]
    nemesis = None
    if workload.faults:
        nemesis = Nemesis(world, Cast(tuple(backend.server_nodes), tuple(producer_nodes + consumer_nodes)),
                          workload.faults, workload.seed, recorder, workload.source)
        for name in producer_nodes + consumer_nodes:
            world.node(name)  # so that faults can hit them before they first send
        nemesis.start(control)

    rate_each = workload.rate / workload.producers if workload.rate else 0.0
    stop_at = t0 + round((workload.warmup + workload.duration) * 1e9) if workload.duration else None
    quotas = _split(workload.messages, workload.producers) if workload.messages else [None] * workload.producers

    producers = []
    open_loop = workload.arrivals == "poisson"
    for i, name in enumerate(producer_nodes):
        rt = world.node(name)
        gaps = _gaps(rt, rate_each, workload.arrivals)
        if open_loop:
            producer = _produce_open(rt, _ClientPool(backend, rt, reliable), name, queues[i % len(queues)],
                                     workload.message_size, gaps, stop_at, quotas[i], recorder, state)
        else:
            producer = _produce(rt, backend.client(rt, reliable), name, queues[i % len(queues)],
                                workload.message_size, gaps, stop_at, quotas[i], recorder, state)
        producers.append(rt.spawn(producer, name=name))
    consumers = []
    for i, name in enumerate(consumer_nodes):
        rt = world.node(name)
        client = backend.client(rt, reliable)
        # Consumer i reads queues i, i+C, ...; with more consumers than queues, they share.
        mine = queues[i::workload.consumers] or [queues[i % len(queues)]]
        consumers.append(rt.spawn(_consume(rt, client, name, mine, reliable, recorder, state,
                                           workload.consumer_delay), name=name))

    bar = _Progress(workload, world.kind, progress) if progress else None
    ticker = control.spawn(_tick(control, bar, state)) if bar is not None else None
    for task in producers:
        await task
    if nemesis is not None:
        nemesis.heal_all(control)
        end = (control.now_ns() - t0) / 1e9
        warnings += [f"fault {i} ({f.fault} at {f.at:g} s) never started: the load ended at {end:.2f} s"
                     for i, f in enumerate(workload.faults) if i not in nemesis.started]
    state.draining = True
    phase_bounds += [state.warmup_end, control.now_ns()]  # the phases are set from these and the fault rows
    if not consumers:  # a producer-only load: one consumer drains every queue, so every put is checked
        rt = world.node(DRAIN_CONSUMER)
        consumers.append(rt.spawn(_consume(rt, backend.client(rt, reliable), DRAIN_CONSUMER, queues, reliable,
                                           recorder, state), name=DRAIN_CONSUMER))
    for task in consumers:
        await task
    if state.drain_gave_up:
        stall = max(DRAIN_STALL, backend.recovery_s)
        warnings.append(f"the drain gave up ({stall:g} s without a delivery, or {DRAIN_CAP:g} s in all) "
                        "before every queue was empty: what was not delivered counts as lost")
    if ticker is not None:
        ticker.cancel()
        bar.close(state, control.now_ns())
    await backend.stop()
    return (control.now_ns() - t0) / 1e9


SPILL_FILE = "samples.spill.arrow"  # the recorder's batches while the run goes on; removed after
#: the sample columns the checker and the one-run summary read
CHECKED_COLUMNS = ("op", "client", "node", "queue", "msg_id", "t_start_ns", "latency_ns", "outcome", "error", "phase",
                   "delay_ns")


def write_samples_phased(recorder: Recorder, path: Path, warmup_end_ns: int, drain_start_ns: int | None) -> int:
    """The recorder's rows to ``path`` a batch at a time, each row's phase set from the run's
    fault rows and the two instants (``lab.history.phases``); the number of rows."""
    events = fault_events(recorder.fault_table())
    index = SAMPLE_SCHEMA.get_field_index("phase")

    def phased():
        for batch in recorder.batches():
            phases = phases_at(batch.column("t_start_ns").to_numpy(zero_copy_only=False), events,
                               warmup_end_ns, drain_start_ns)
            yield batch.set_column(index, SAMPLE_SCHEMA.field(index), phases)

    return write_sample_batches(phased(), path)


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _gaps(rt: Runtime, rate: float, arrivals: str) -> Iterator[int] | None:
    """Nanoseconds between a producer's scheduled sends: constant, or exponential (Poisson
    arrivals) drawn from the node's seeded random source; None for a closed loop."""
    if not rate:
        return None
    if arrivals == "poisson":
        return (round(rt.random.expovariate(rate) * 1e9) for _ in itertools.count())
    return itertools.repeat(round(1e9 / rate))


async def _produce(rt: Runtime, client: QueueClient, name: str, queue: str, size: int, gaps: Iterator[int] | None,
                   stop_at: int | None, quota: int | None, recorder: Recorder, state: _State) -> None:
    intended = rt.now_ns()
    node = rt.node
    seq = 0
    while quota is None or seq < quota:
        if gaps is not None:
            now = rt.now_ns()
            if intended > now:
                await rt.sleep((intended - now) / 1e9)
        start = rt.now_ns()
        if stop_at is not None and (intended if gaps is not None else start) >= stop_at:
            break
        delay = start - intended if gaps is not None else None
        intended += next(gaps) if gaps is not None else 0
        msg_id = f"{name}:{seq}"  # message.message_id
        body = message.encode(msg_id, start, size)
        try:  # what recorder.measure does, inline: this is the hot path
            await client.put(queue, body)
            outcome = error = None
        except Exception as e:
            outcome, error = recorder.failure(e)
        end = rt.now_ns()
        recorder.record(node, name, "put", queue, msg_id, start, end - start, outcome or "ok", error, len(body),
                        None, delay)
        state.puts += 1
        seq += 1
        if outcome is None:
            state.enqueued += 1
        elif end == start:
            await rt.sleep(RETRY_PAUSE)  # an instant failure must not spin the clock in place
    await client.close()


class _ClientPool:
    """An open-loop producer's clients: an idle one for each put, or a new one when every
    client is busy (a stream client takes one request at a time); most recently idle first."""

    def __init__(self, backend: Backend, rt: Runtime, reliable: bool):
        self.backend, self.rt, self.reliable = backend, rt, reliable
        self.idle: list[QueueClient] = []
        self.made = 0

    def take(self) -> QueueClient:
        if self.idle:
            return self.idle.pop()
        self.made += 1
        return self.backend.client(self.rt, self.reliable)

    def give_back(self, client: QueueClient) -> None:
        self.idle.append(client)

    async def close(self) -> None:
        while self.idle:
            await self.idle.pop().close()


async def _produce_open(rt: Runtime, pool: _ClientPool, name: str, queue: str, size: int, gaps: Iterator[int],
                        stop_at: int | None, quota: int | None, recorder: Recorder, state: _State) -> None:
    """Open loop: each put is a task of its own, started at its scheduled time on a client of
    ``pool``, whether the puts before it have finished or not."""
    in_flight = 0
    all_done = None  # an event while the producer waits for its last puts

    async def put_one(client: QueueClient, seq: int, delay: int) -> None:
        nonlocal in_flight
        try:
            msg_id = f"{name}:{seq}"  # message.message_id
            start = rt.now_ns()
            body = message.encode(msg_id, start, size)
            try:  # recorder.measure, inline
                await client.put(queue, body)
                outcome = error = None
            except Exception as e:
                outcome, error = recorder.failure(e)
            recorder.record(rt.node, name, "put", queue, msg_id, start, rt.now_ns() - start, outcome or "ok",
                            error, len(body), None, delay)
            state.puts += 1
            state.enqueued += outcome is None
        finally:
            pool.give_back(client)
            in_flight -= 1
            if in_flight == 0 and all_done is not None:
                all_done.set()

    intended = rt.now_ns()
    seq = 0
    while quota is None or seq < quota:
        now = rt.now_ns()
        if intended > now:
            await rt.sleep((intended - now) / 1e9)
        if stop_at is not None and intended >= stop_at:
            break
        delay = rt.now_ns() - intended
        intended += next(gaps)
        in_flight += 1
        rt.spawn(put_one(pool.take(), seq, delay), name=f"{name} put")
        seq += 1
    if in_flight:
        all_done = rt.event()
        await all_done.wait()
    await pool.close()


async def _consume(rt: Runtime, client: QueueClient, name: str, queues: list[str], reliable: bool,
                   recorder: Recorder, state: _State, delay: float = 0.0) -> None:
    """Get (and ack) until the drain finds every queue empty — an empty get, and no backlog
    where the design can tell one (``QueueClient.backlog``: leased or not yet visible
    messages), once the design's ``recovery_s`` has passed since the last delivery (or get
    that may have leased one) — or gives up: no delivery for ``DRAIN_STALL`` seconds (or
    ``recovery_s``, if longer), or ``DRAIN_CAP`` in all."""
    empty: set[str] = set()
    drain_start: int | None = None
    node = rt.node
    if delay > 0:
        await rt.sleep(delay)  # the workload's consumer_delay: a backlog builds first
    turn = 0
    while True:
        queue = queues[turn % len(queues)]
        turn += 1
        draining = state.draining
        if draining:
            now = rt.now_ns()
            drain_start = drain_start or now
            quiet = now - max(drain_start, state.last_delivery)
            if quiet >= max(DRAIN_STALL * 1e9, state.recovery_ns) or now - drain_start >= DRAIN_CAP * 1e9:
                if len(empty) < len(queues):  # not a drain that was waiting out the recovery of empty queues
                    state.drain_gave_up = True
                break
        start = rt.now_ns()
        msg_id = None
        try:  # recorder.measure, inline: this is the hot path
            delivery = await client.get(queue, POLL_WAIT)
            if delivery is None:
                outcome, error = "fail", "empty"
            else:
                outcome = error = None
                msg_id = message.decode(delivery.body)[0]
        except Exception as e:
            delivery = None
            outcome, error = recorder.failure(e)
            if outcome == "info":
                state.last_unknown_get = rt.now_ns()
        recorder.record(node, name, "get", queue, msg_id, start, rt.now_ns() - start, outcome or "ok", error,
                        0 if delivery is None else len(delivery.body), None, None)
        if delivery is None:
            if error != "empty":
                await rt.sleep(RETRY_PAUSE)  # the get failed: back off
            elif draining:
                try:
                    held = await client.backlog(queue)
                except Exception:  # unknown: ask again at the next empty get
                    held = 1
                if held:
                    empty.discard(queue)
                    await rt.sleep(RETRY_PAUSE)  # not empty yet: what it holds comes back later
                else:
                    empty.add(queue)
                    if len(empty) == len(queues):
                        # Empty as far as a get and the backlog can tell; but a message a lease
                        # or a repair pass still holds may be invisible to both (CassieQ's size
                        # is a counter that drifts): believe it once the design's own recovery
                        # has had its time since anything was, or may have been, delivered.
                        # Only a fault or a cut get can leave such a message: a clean run's empty
                        # queues are empty (a live CassieQ run must not idle out its recovery).
                        causes = [t for t in (drain_start if state.faulted else None, state.last_unknown_get)
                                  if t is not None]
                        if not causes or rt.now_ns() - max(*causes, state.last_delivery) >= state.recovery_ns:
                            break
                        await rt.sleep(POLL_WAIT)  # look again now and then meanwhile
            continue
        empty.discard(queue)
        state.delivered += 1
        state.last_delivery = rt.now_ns()
        if reliable:
            start = rt.now_ns()
            try:
                await client.ack(delivery)
                outcome = error = None
            except Exception as e:
                outcome, error = recorder.failure(e)
            recorder.record(node, name, "ack", delivery.queue, msg_id, start, rt.now_ns() - start, outcome or "ok",
                            error, 0, None, None)
    await client.close()


class _Progress:
    """The load's progress (time or messages), then the drain's: messages delivered of those
    acknowledged and not yet delivered when the drain began. It appears only after 2 s of
    wall time and only on a terminal, or at once on the stream ``progress`` names."""

    def __init__(self, workload: Workload, world: str, progress: bool | TextIO):
        from tqdm import tqdm

        if progress is True:
            common: dict[str, Any] = dict(delay=2, leave=False, disable=None)
        else:
            common = dict(file=progress, mininterval=0, leave=True)
        self.workload = workload
        self.drain_base: int | None = None
        if workload.messages:
            self.bar = tqdm(total=workload.messages, unit="msg", desc=f"{workload.name} ({world})", **common)
        else:
            total = workload.warmup + workload.duration
            self.bar = tqdm(total=round(total, 2), desc=f"{workload.name} ({world} time)", **common,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s "
                                       "[{elapsed}<{remaining}]")

    def update(self, state: _State, now_ns: int) -> None:
        bar = self.bar
        if state.draining:
            if self.drain_base is None:
                self.drain_base = state.delivered
                bar.bar_format, bar.unit = None, "msg"
                bar.set_description(f"{self.workload.name}: draining", refresh=False)
                bar.reset(total=max(0, state.enqueued - self.drain_base))
            done = min(bar.total, state.delivered - self.drain_base)
        elif self.workload.messages:
            done = state.puts
        else:
            done = min(bar.total, (now_ns - state.t0) / 1e9)
        bar.update(done - bar.n)

    def close(self, state: _State, now_ns: int) -> None:
        self.update(state, now_ns)
        self.bar.close()


async def _tick(rt: Runtime, progress: _Progress, state: _State) -> None:
    while True:
        await rt.sleep(PROGRESS_STEP)
        progress.update(state, rt.now_ns())


def write_manifest(result: RunResult, world: World) -> None:
    """The run folder's manifest.json: what ran, with what, and its verdict and summary."""
    workload = dataclasses.asdict(result.workload)
    manifest = {
        "run_id": result.run_id,
        "workload": workload,
        "backend": result.backend,
        "options": result.verdict.facts.options,  # checked, defaults filled in: what the verdict was judged by
        "fault_kinds": result.verdict.facts.faults,  # the kinds that started (lab.judge.verdict.fault_kinds)
        "world": result.world,
        "seed": result.seed,
        "samples": result.samples,
        "wall_seconds": round(result.wall_seconds, 3),
        "world_seconds": round(result.world_seconds, 6),
        "verdict": result.verdict.to_dict(),
        "warnings": result.warnings,
        "summary": result.summary,
        "versions": versions(),
        "machine": machine(),
    }
    from lab.experiments import planting

    if planting.planted_now is not None:  # a planted bug's run: never mistaken for the design's own
        manifest["mutant"] = planting.planted_now
    net = getattr(world, "net", None)
    if world.kind == "sim" and net is not None:
        manifest["network"] = {"delivered": net.delivered, "dropped": dict(sorted(net.dropped.items()))}
    (result.run_dir / "manifest.json").write_text(json.dumps(_plain(manifest), indent=2, allow_nan=False) + "\n")


def _plain(value: Any) -> Any:
    """JSON-ready: NaN becomes null, tuples lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value
