"""The runner: one workload against one backend in one world, every operation recorded.

It starts the design's nodes, one node per producer (``p0``, ``p1``...) and per consumer
(``c0``...), runs the load for the workload's duration or message count while the
nemesis (``lab.workloads.nemesis``) applies the fault schedule, heals everything, drains every queue,
and writes the run directory (``lab.experiments.runner_manifest``):

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

The producers and consumers are ``lab.experiments.runner_clients``. A workload with ``consumers: 0`` loads the server with puts alone; after the load the
runner starts one consumer, ``drain``, that reads every queue until it is empty, so every
acknowledged put is still checked for delivery: its gets are all in the drain phase.
"""

from __future__ import annotations

import functools
import secrets
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, TextIO

from lab.design.backend import Backend, outcome_of
from lab.design.registry import backend_class
from lab.design.runtime import Runtime
from lab.design.world import World
from lab.experiments.run_spec import WORLDS, Calibration, RunSpec
from lab.experiments.runner_clients import (DRAIN_CAP, DRAIN_CONSUMER, DRAIN_STALL, ClientPool, LoadState, Pace,
                                            consume, produce, produce_open, send_gaps, split_evenly)
from lab.experiments.runner_manifest import (CHECKED_COLUMNS, SPILL_FILE, RunResult, write_manifest,
                                             write_samples_phased)
from lab.history.paths import make_run_dir, runs_dir
from lab.history.phases import fault_kinds
from lab.history.record import Recorder, read_samples
from lab.judge.checker import check
from lab.judge.summary import summarize
from lab.workloads.clients import ClientPlan, consumer_queues
from lab.workloads.errors import WorkloadError
from lab.workloads.fault_base import Cast, FaultWorld
from lab.workloads.faults import kinds_in, supports
from lab.workloads.nemesis import Nemesis
from lab.workloads.spec import Workload

PROGRESS_STEP = 0.25  # seconds (of the world's clock) between progress updates


def world_class(kind: str) -> type[World]:
    if kind == "sim":
        from models.world import SimWorld

        return SimWorld
    if kind == "live":
        from lab.worlds.live import LiveWorld

        return LiveWorld
    raise ValueError(f"unknown world {kind!r} (sim or live)")


class RunWorld(World, FaultWorld, Protocol):
    """The world a run drives: what the runner asks of it and the verbs its faults use (the
    sim and the live world have both)."""


def make_world(spec: RunSpec) -> RunWorld:
    """The world of a run: the sim's physical parameters from the workload's ``sim:`` block
    and its CPU model from the spec's calibration (loaded once, at the door); live, node
    disks in a temporary folder, removed after the run."""
    if spec.world == "sim":
        from models.config import SimConfig
        from models.world import SimWorld

        config = SimConfig.from_spec(spec.workload.sim)
        config.service = spec.calibration.model
        config.cpu = spec.calibration.model is not None
        return SimWorld(spec.seed, config)
    from lab.worlds.live import LiveWorld

    return LiveWorld(spec.seed)


def fault_refusal(workload: Workload, world: str, backend: str | None = None) -> str | None:
    """Why ``world`` cannot apply ``workload``'s fault schedule (one line), or None if it can;
    with ``backend``, also why not to that design's servers (live: they must be processes)."""
    return refusal(workload, world, backend_class(backend) if backend is not None else None)


def refusal(workload: Workload, world: str, design: type[Backend] | None = None) -> str | None:
    """``fault_refusal`` for a design's class at hand (the spec's)."""
    found = supports(kinds_in(world), workload.faults)
    if found is None:
        peer = design is not None and design.is_peer
        if peer and design is not None and any(fault.kind == "crash" for fault in workload.faults):
            from lab.worlds.live.powerfs import unavailable

            if (why := unavailable()) is not None:
                return (f"a crash of {design.name} loses what it did not fsync only on the power-loss file system, "
                        f"and it cannot mount here: {why} (a kill fault keeps the page cache and needs none)")
        if world == "live" and design is not None and workload.faults and not peer and design.parts.serve is None:
            return (f"the live world applies faults to server processes, and {design.name} has none "
                    f"(it runs in the runner's process)")
        refuse = world_class(world).refusal  # what else the world cannot do
        return next((f"the {world} world cannot apply faults[{number}] ({fault.kind}): {why}"
                     for number, fault in enumerate(workload.faults) if (why := refuse(fault))), None)
    number, fault = found
    able = [w for w in WORLDS if fault.kind in kinds_in(w)]
    return (f"the {world} world cannot apply faults[{number}] ({fault.kind}); "
            f"{fault.kind} faults run in the {' and '.join(able) or 'no'} world{'s' if len(able) > 1 else ''} only")


def run(
    workload: Workload,
    backend: str,
    world: str = "sim",
    seed: int | None = None,
    out: str | Path | None = None,
    progress: bool | TextIO = True,
    options: Mapping[str, Any] | None = None,
    calibration: str | Calibration | None = None,
) -> RunResult:
    """Run ``workload`` against ``backend`` in ``world``; write and return the results.

    ``calibration`` (sim): a calibration file, or ``none``, for the server nodes' CPU model
    (default: the workload's ``sim: calibration``, else the design's own). ``progress``:
    True for a bar on a terminal, False for none, or a stream to draw it on."""
    spec = RunSpec.resolve(workload, backend, world, seed=seed, options=options, calibration=calibration)
    return run_spec(spec, out, progress)


def run_spec(spec: RunSpec, out: str | Path | None = None, progress: bool | TextIO = True) -> RunResult:
    """Run a resolved spec: the world, the design's servers, the load and the nemesis, then
    the checker; the run folder written (``out``, else ``results/runs/<run_id>``)."""
    workload = spec.workload
    refused = refusal(workload, spec.world, spec.design)
    if refused is not None:
        raise WorkloadError(f"{workload.source}: {refused}")

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_id = f"{stamp}-{workload.name}-{spec.backend}-{spec.world}-s{spec.seed}-{secrets.token_hex(2)}"
    run_dir = Path(out) if out is not None else runs_dir() / run_id
    created = make_run_dir(run_dir)
    recorder: Recorder | None = None
    try:
        the_world = make_world(spec)
        the_world.keep_logs(run_dir / "servers")  # live: the server processes' logs go beside the samples
        recorder = Recorder(run_id, spec.world, spec.backend, workload.name, classify=outcome_of,
                            spill=run_dir / SPILL_FILE)
        warnings: list[str] = []
        phase_bounds: list[int] = []  # warm-up end and drain start, as _main finds them
        wall_start = time.perf_counter()
        world_seconds = the_world.run(
            lambda control: _main(control, the_world, spec.design(the_world, spec.options), workload, recorder,
                                  progress, warnings, phase_bounds)
        )
        wall_seconds = time.perf_counter() - wall_start

        rows = write_samples_phased(recorder, run_dir / "samples.parquet", *phase_bounds)
        table = read_samples(run_dir, CHECKED_COLUMNS, lean=True)  # what the checker and summary read
        verdict = check(table, spec.facts(fault_kinds(recorder.fault_table())))
        recorder.discard()
        summary = summarize(table)
        del table
        result = RunResult(run_id, run_dir, spec, verdict, summary, rows, wall_seconds, world_seconds, warnings)
        write_manifest(result, the_world)
    except BaseException:
        if recorder is not None:
            recorder.discard()
        if created:  # a failed run leaves no half-written folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return result


async def _main(control: Runtime, world: RunWorld, backend: Backend, workload: Workload,
                recorder: Recorder, progress: bool | TextIO, warnings: list[str],
                phase_bounds: list[int]) -> float:
    await backend.start()
    queues = [f"q{i}" for i in range(workload.queues)]
    await backend.prepare(queues)
    t0 = control.now_ns()
    state = LoadState(t0, round(workload.warmup * 1e9))
    state.recovery_ns = round(backend.recovery_s * 1e9)
    state.faulted = bool(workload.faults)
    reliable = workload.reliable

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
    quotas = split_evenly(workload.messages, workload.producers) if workload.messages else [None] * workload.producers

    def at(seconds: float | None) -> int | None:
        return None if seconds is None else t0 + round(seconds * 1e9)

    producers = []
    open_loop = workload.arrivals == "poisson"
    for i, name in enumerate(producer_nodes):
        rt = world.node(name)
        plan = workload.clients.get(name, ClientPlan())
        rate = rate_each if plan.rate is None else plan.rate
        gaps = send_gaps(rt, rate, workload.arrivals if rate else "constant")
        own_stop = at(plan.stop)
        stop = own_stop if stop_at is None else stop_at if own_stop is None else min(stop_at, own_stop)
        queue, size = plan.queue or queues[i % len(queues)], plan.message_size or workload.message_size
        if open_loop and gaps is not None:
            producer = produce_open(rt, ClientPool(backend, rt, reliable), name, queue, size, gaps, stop,
                                    quotas[i], recorder, state, start_at=at(plan.start))
        else:
            producer = produce(rt, backend.client(rt, reliable), name, queue, size, gaps, stop, quotas[i],
                               recorder, state, start_at=at(plan.start))
        producers.append(rt.spawn(producer, name=name))
    consumers = []
    for i, name in enumerate(consumer_nodes):
        rt = world.node(name)
        plan = workload.clients.get(name, ClientPlan())
        its_backend = backend.for_consumer(dict(plan.options)) if plan.options else backend  # its own prefetch, say
        client = its_backend.client(rt, reliable)
        reads = consumer_queues(plan, i, workload.consumers, queues)
        pace = Pace(workload.consumer_delay if plan.start is None else plan.start, plan.work_ms / 1000,
                    *(tuple((at(a) or 0, round(seconds * 1e9)) for a, seconds in spans)
                      for spans in (plan.pauses, plan.dies)))
        consumers.append(rt.spawn(consume(rt, client, name, reads, reliable, recorder, state, pace,
                                          renew=functools.partial(its_backend.client, rt, reliable)), name=name))

    bar = _Progress(workload, world.kind, progress) if progress else None
    ticker = control.spawn(_tick(control, bar, state)) if bar is not None else None
    for task in producers:
        await task
    if nemesis is not None:
        load_end = control.now_ns()
        nemesis.heal_all(control)
        await world.settle()  # live: servers still restarting are ready first
        warnings += _late_restarts(world.restarts, t0, load_end)
        end = (control.now_ns() - t0) / 1e9
        warnings += [f"fault {i} ({f.fault} at {f.at:g} s) never started: the load ended at {end:.2f} s"
                     for i, f in enumerate(workload.faults) if i not in nemesis.started]
    state.draining = True
    phase_bounds += [state.warmup_end, control.now_ns()]  # the phases are set from these and the fault rows
    if not consumers:  # a producer-only load: one consumer drains every queue, so every put is checked
        rt = world.node(DRAIN_CONSUMER)
        consumers.append(rt.spawn(consume(rt, backend.client(rt, reliable), DRAIN_CONSUMER, queues, reliable,
                                          recorder, state), name=DRAIN_CONSUMER))
    for task in consumers:
        await task
    if state.drain_gave_up:
        stall = max(DRAIN_STALL, backend.recovery_s)
        warnings.append(f"the drain gave up ({stall:g} s without a delivery, or {DRAIN_CAP:g} s in all) "
                        "before every queue was empty: what was not delivered counts as lost")
    if ticker is not None and bar is not None:
        ticker.cancel()
        bar.close(state, control.now_ns())
    await backend.stop()
    return (control.now_ns() - t0) / 1e9


def _late_restarts(restarts: Iterable[tuple[str, int, int | None]], t0: int, load_end: int) -> list[str]:
    """Warnings for the servers that a fault's heal restarted during the load and that were
    back only after it ended (or never): nothing put after their crash was acknowledged, so
    the run checks what the crash lost and nothing of what came after — on a busy machine,
    where a start outlasts the rest of the load, that can leave nothing delivered at all."""
    def at(t: int) -> str:
        return f"{(t - t0) / 1e9:.2f} s"

    return [f"{node} restarted at {at(launched)} and was "
            + (f"back only at {at(ready)}" if ready is not None else "never back")
            + f", after the load ended at {at(load_end)}: no put after its crash was checked "
              "(a longer duration gives a slow restart time)"
            for node, launched, ready in restarts if launched < load_end and (ready is None or ready > load_end)]


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
            assert workload.duration is not None  # a workload has a duration or a message count
            total = workload.warmup + workload.duration
            self.bar = tqdm(total=round(total, 2), desc=f"{workload.name} ({world} time)", **common,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s "
                                       "[{elapsed}<{remaining}]")

    def update(self, state: LoadState, now_ns: int) -> None:
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

    def close(self, state: LoadState, now_ns: int) -> None:
        self.update(state, now_ns)
        self.bar.close()


async def _tick(rt: Runtime, progress: _Progress, state: LoadState) -> None:
    while True:
        await rt.sleep(PROGRESS_STEP)
        progress.update(state, rt.now_ns())
