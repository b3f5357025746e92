"""`lab fidelity`: does the sim world predict the live one? One design, one workload, both worlds.

The same workload runs live (servers as processes on loopback) and simulated with the
design's calibrated service-time model and the calibration's loopback network latency
(``sim: {latency: calibrated}``), and the two are set side by side: put and end-to-end
p50 and p99, live and sim, and their ratio (sim / live). Then a closed-loop ramp (1, 2, 4 ...
producers and as many consumers, no rate limit) finds where each world saturates — the
most puts per second either reaches — and the workload runs again, rate-limited, at
fractions of the *live* saturation throughput (50 % and 90 % by default), where queueing
begins to show. Each row is held to the goal the issue set: sim p50 within 10 % and p99
within 25 % of live.

Everything lands in one folder: each run's own directory, ``fidelity.json`` (the table),
and ``fidelity.png`` (latency by percentile, live solid and sim dashed, one panel per
load point).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from lab.worlds import interrupt
from lab.design.registry import backend_class
from lab.history.paths import runs_dir
from lab.history.record import read_samples, ok_ops
from lab.experiments.run_spec import Calibration
from lab.experiments.runner import run
from lab.experiments.runner_manifest import RunResult
from lab.judge.summary import MEASURED, end_to_end_ns, format_ns
from lab.workloads.spec import Workload

GOAL = {"p50": 0.10, "p99": 0.25}  # the largest |sim / live - 1| that counts as a prediction
RAMP = (1, 2, 4, 8, 16)  # producers (and consumers) of the closed-loop ramp
RAMP_GAIN = 1.05  # the ramp stops once doubling the clients gains less than this
METRICS = (("put", "p50"), ("put", "p99"), ("e2e", "p50"), ("e2e", "p99"))


@dataclass
class Point:
    """One load point run in both worlds."""

    name: str
    rate: float  # msg/s asked for (0: closed loop)
    live: dict[str, float]
    sim: dict[str, float]
    runs: dict[str, str] = field(default_factory=dict)  # world -> run dir (named after the workload run)

    def ratio(self, op: str, stat: str) -> float | None:
        live, sim = self.live.get(f"{op}_{stat}_ns"), self.sim.get(f"{op}_{stat}_ns")
        return sim / live if live and sim is not None else None

    def meets(self, op: str, stat: str) -> bool | None:
        ratio = self.ratio(op, stat)
        return None if ratio is None else abs(ratio - 1.0) <= GOAL[stat]


@dataclass
class Fidelity:
    backend: str
    workload: str
    calibration: str
    points: list[Point]
    saturation: dict[str, dict[str, float]]  # world -> {per_s, producers}
    directory: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "workload": self.workload, "calibration": self.calibration,
            "goal": GOAL, "saturation": self.saturation,
            "points": [{"name": p.name, "rate": p.rate, "live": p.live, "sim": p.sim, "runs": p.runs,
                        "ratio": {f"{op}_{stat}": p.ratio(op, stat) for op, stat in METRICS},
                        "meets_goal": {f"{op}_{stat}": p.meets(op, stat) for op, stat in METRICS}}
                       for p in self.points],
        }


def figures(result: RunResult) -> dict[str, float]:
    """The measured phases' put throughput and put and e2e p50/p99 of one run."""
    measured = result.summary.get(MEASURED, {})
    out: dict[str, float] = {}
    for op in ("put", "e2e"):
        entry = measured.get(op, {})
        for stat in ("p50", "p99"):
            if entry.get(f"{stat}_ns") is not None:
                out[f"{op}_{stat}_ns"] = float(entry[f"{stat}_ns"])
    out["put_per_s"] = float(measured.get("put", {}).get("ops_per_s") or 0.0)
    return out


def fidelity(backend: str, workload: Workload, calibration: str | None = None,
             fractions: tuple[float, ...] = (0.5, 0.9), ramp_duration: float = 3.0,
             out: str | Path | None = None, progress: bool = True,
             echo: Callable[[str], None] = print) -> Fidelity:
    """Run ``workload`` live and simulated, find each world's saturation, run the load
    points; write ``fidelity.json`` and ``fidelity.png`` into ``out`` and return the table."""
    cls = backend_class(backend)
    if "live" not in cls.worlds or "sim" not in cls.worlds:
        raise ValueError(f"{backend} does not run in both worlds")
    if workload.faults:
        raise ValueError(f"{workload.source}: fidelity compares fault-free load; this workload has faults")
    chosen: str | Path
    if calibration is not None:
        chosen = calibration
    else:
        committed = cls.cpu.path(cls)
        if committed is None or not committed.exists():
            raise ValueError(f"{backend} has no committed calibration: run `lab calibrate {backend}` first")
        chosen = committed
    model = Calibration.load(chosen)  # once, for every sim run
    source = model.source
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    directory = Path(out) if out is not None else runs_dir() / f"fidelity-{backend}-{workload.name}-{stamp}"
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory}: not empty (give --out a new folder)")
    directory.mkdir(parents=True, exist_ok=True)

    def both(load: Workload, name: str) -> tuple[RunResult, RunResult]:
        pair = []
        for world in ("live", "sim"):
            result = run(_in_world(load, world), backend, world, out=directory / f"{load.name}-{world}",
                         progress=progress, calibration=model if world == "sim" else None)
            pair.append(result)
            fig = figures(result)
            echo(f"  {name:<14} {world:<4} put {fig['put_per_s']:>9,.0f}/s  p50 {format_ns(fig.get('put_p50_ns', 0)):>9}"
                 f"  p99 {format_ns(fig.get('put_p99_ns', 0)):>9}  ({result.wall_seconds:.1f} s)")
        return pair[0], pair[1]

    points: list[Point] = []
    results: dict[str, tuple[RunResult, RunResult]] = {}

    def add(load: Workload, name: str) -> None:
        live, sim = results[name] = both(load, name)
        points.append(Point(name, load.rate, figures(live), figures(sim),
                            {"live": str(live.run_dir), "sim": str(sim.run_dir)}))

    try:
        add(workload, workload.name)
        saturation, producers = _saturation(workload, both, ramp_duration)
        for fraction in fractions:
            rate = fraction * saturation["live"]["per_s"]
            load = dataclasses.replace(workload, name=f"{workload.name}-at{fraction * 100:.0f}pct",
                                       rate=round(rate, 1), arrivals="constant", producers=producers,
                                       consumers=producers, messages=None, duration=ramp_duration,
                                       warmup=min(workload.warmup or 1.0, 1.0))
            add(load, f"{fraction:.0%} of sat.")
    except KeyboardInterrupt:  # the run cut short removed its own folder; the finished ones stay
        interrupt.mark_interrupted(directory, "fidelity", points_done=[p.name for p in points])
        raise

    table = Fidelity(backend, workload.name, source, points, saturation, directory)
    (directory / "fidelity.json").write_text(json.dumps(table.to_dict(), indent=2) + "\n")
    _plot(table, results, directory / "fidelity.png")
    return table


def _in_world(workload: Workload, world: str) -> Workload:
    if world != "sim":
        return workload
    return dataclasses.replace(workload, sim={**workload.sim, "latency": "calibrated"})


def _saturation(workload: Workload, both, duration: float) -> tuple[dict[str, dict[str, float]], int]:
    """Each world's most puts per second over a closed-loop ramp, and the live world's
    producers there (the load points use them)."""
    best: dict[str, dict[str, float]] = {"live": {"per_s": 0.0, "producers": 0}, "sim": {"per_s": 0.0, "producers": 0}}
    last = {"live": 0.0, "sim": 0.0}
    for clients in RAMP:
        load = dataclasses.replace(workload, name=f"{workload.name}-ramp{clients}", rate=0.0, arrivals="constant",
                                   producers=clients, consumers=clients, queues=max(workload.queues, 1),
                                   messages=None, duration=duration, warmup=min(workload.warmup or 1.0, 1.0))
        live, sim = both(load, f"ramp {clients}")
        gains = []
        for world, result in (("live", live), ("sim", sim)):
            per_s = figures(result)["put_per_s"]
            gains.append(per_s >= RAMP_GAIN * last[world])
            last[world] = per_s
            if per_s > best[world]["per_s"]:
                best[world] = {"per_s": per_s, "producers": clients}
        if not any(gains):
            break
    return best, int(best["live"]["producers"]) or 1


def _plot(table: Fidelity, results: dict[str, tuple[RunResult, RunResult]], path: Path) -> None:
    from lab.present.plots import latency_figure

    panels = {}
    for point in table.points:
        live, sim = results[point.name]
        panels[f"{point.name}: put" + (f" at {point.rate:,.0f}/s" if point.rate else "")] = {
            (table.backend, "live"): _put_latencies(live), (table.backend, "sim"): _put_latencies(sim)}
        panels[f"{point.name}: end to end"] = {
            (table.backend, "live"): _e2e(live), (table.backend, "sim"): _e2e(sim)}
    latency_figure(panels, path, title=f"{table.backend}: live (solid) against the calibrated sim (dashed), "
                                       f"measured phases")


def _put_latencies(result: RunResult):
    from lab.history.record import MEASURED_PHASES
    import pyarrow as pa
    import pyarrow.compute as pc

    samples = read_samples(result.samples_path)
    measured = samples.filter(pc.is_in(samples.column("phase"), value_set=pa.array(list(MEASURED_PHASES))))
    return ok_ops(measured, "put").column("latency_ns").to_numpy()


def _e2e(result: RunResult):
    from lab.history.record import MEASURED_PHASES

    return end_to_end_ns(read_samples(result.samples_path), MEASURED_PHASES)


def format_table(table: Fidelity) -> str:
    """The live-against-sim table, a line per load point, and where each world saturates."""
    head = f"{'load point':<16}{'rate/s':>9}" + "".join(
        f"  {op + ' ' + stat + ' live':>15}{'sim':>10}{'ratio':>7}" for op, stat in METRICS)
    lines = [head]
    for p in table.points:
        cells = []
        for op, stat in METRICS:
            live, sim = p.live.get(f"{op}_{stat}_ns"), p.sim.get(f"{op}_{stat}_ns")
            ratio = p.ratio(op, stat)
            mark = "" if ratio is None else (" ✓" if p.meets(op, stat) else " ✗")
            cells.append(f"  {format_ns(live) if live else '-':>15}{format_ns(sim) if sim else '-':>10}"
                         f"{(f'{ratio:.2f}' if ratio is not None else '-') + mark:>7}")
        lines.append(f"{p.name:<16}{(f'{p.rate:,.0f}' if p.rate else 'closed'):>9}" + "".join(cells))
    live_top, sim_top = table.saturation["live"], table.saturation["sim"]
    lines.append("")
    lines.append(f"saturation (closed loop, most puts/s over {', '.join(map(str, RAMP))} clients): "
                 f"live {live_top['per_s']:,.0f}/s at {live_top['producers']:.0f}, sim {sim_top['per_s']:,.0f}/s at "
                 f"{sim_top['producers']:.0f} (ratio {sim_top['per_s'] / live_top['per_s'] if live_top['per_s'] else float('nan'):.2f})")
    lines.append(f"goal: sim p50 within {GOAL['p50']:.0%} and p99 within {GOAL['p99']:.0%} of live (✓ met, ✗ missed)")
    return "\n".join(lines)
