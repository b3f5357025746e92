"""`lab matrix`: every design, under every fault scenario, over several seeds, as one table.

A cell is (design, one of its option sets that change a promise, scenario); each cell runs
once per seed in the sim world, in parallel worker processes (or in the live world, one run
at a time: the only world of the real brokers, ``lab.peers``). Per cell, over its seeds:
the checker's counts summed (lost, duplicated, unexpected; inversions, and the most
messages that overtook one), the worst verdict class with its reason (a broken promise,
named), put and end-to-end latency per phase from the Spark pipeline's histograms merged
over the seeds (never averages of percentiles), and the time to recover after the heal
(``lab.judge.recovery``; the slowest seed), held to the scenario's ``recover_within`` budget.
A cell is INVALID when any of its seeds broke a promise; ``lab matrix`` then exits 1
(``invalid_rows``), so a script or CI can gate on it; allowed cells do not fail it. A seed
with no evidence (nothing acknowledged or delivered) is counted apart (``no_evidence``):
the cell's verdict is the worst of the seeds that gave evidence, ``no evidence`` only if
none did.

With ``spark=MASTER`` each run is a Spark task (``lab.experiments.spark_runs``; all the runs one
job) in place of a pool's job, its run folder written under the matrix folder, and the table's aggregation runs on
the same cluster over those folders (the samples never pass through this process).

Designs come from the registry and their option sets from ``Backend.promised.option_sets``
(or ``--option-sets FILE``), scenarios from ``lab.workloads.spec.scenario_files``: a design or a
scenario joins by being registered or written, with no change here. Output: ``matrix.csv``
(a row per cell), ``matrix.md`` (the grid, then the figures) and ``heatmap.png``.
"""

from __future__ import annotations

import contextlib
import csv
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from lab.worlds import interrupt
from lab.design.registry import backend_class, usable
from lab.history.paths import runs_dir
from lab.judge.summary import format_ns
from lab.judge.findings import Verdict, worst
from lab.workloads.spec import Workload, load_workload
from lab.workloads.errors import WorkloadError

WORLD = "sim"
PHASES = ("steady", "fault", "heal")
OPS = ("put", "e2e")
QUANTILES = ("p50_ns", "p99_ns", "p999_ns")
COLUMNS = ("backend", "options", "scenario", "seeds", "no_evidence", "verdict", "reason", "lost", "duplicated",
           "unexpected", "inversions", "most_overtakers", "recover_s", "undelivered", "recover_within", "recovered_in_time",
           *(f"{op}_{phase}_{q}" for op in OPS for phase in PHASES for q in QUANTILES), "run_ids")


@dataclass(frozen=True)
class Cell:
    backend: str
    options: tuple[tuple[str, Any], ...]  # an option set, sorted: hashable
    scenario: str

    @property
    def row(self) -> str:
        """The design and its options, as the grid's row label."""
        return " ".join([self.backend, *(f"{k}={v}" for k, v in self.options)])


@dataclass
class SeedRun:
    """What a worker process sends back of one run."""

    run_id: str
    run_dir: str
    seed: int
    verdict: str
    reason: str
    lost: int
    duplicated: int
    unexpected: int
    inversions: int
    most_overtakers: int
    recover_s: float | None
    undelivered: int
    wall_seconds: float


@dataclass
class Matrix:
    directory: Path
    cells: dict[Cell, list[SeedRun]]
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per cell, COLUMNS

    @property
    def csv_path(self) -> Path:
        return self.directory / "matrix.csv"

    @property
    def markdown_path(self) -> Path:
        return self.directory / "matrix.md"

    @property
    def heatmap_path(self) -> Path:
        return self.directory / "heatmap.png"


def invalid_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The cells (rows, COLUMNS) whose worst verdict is INVALID: a broken promise, not an
    anomaly the design's promises allow."""
    return [row for row in rows if row["verdict"] == Verdict.INVALID]


def scenarios_named(names: Iterable[str] | None) -> list[Workload]:
    """The scenarios by name or file (default: every scenario file)."""
    if names:
        return [load_workload(name) for name in names]
    from lab.workloads.spec import scenario_files

    return [load_workload(p) for p in scenario_files()]


def option_sets(backends: Iterable[str], overrides: Mapping[str, list[Mapping[str, Any]]] | None = None,
                world: str = WORLD) -> dict[str, list[dict[str, Any]]]:
    """Each design's option sets, checked for ``world`` (a bad one fails before any run)."""
    sets = {}
    for name in backends:
        cls = backend_class(name)
        chosen = [dict(s) for s in (overrides or {}).get(name, cls.promised.option_sets)]
        for options in chosen:
            cls.check_options(options, world)  # BadOption now, naming the option, before any run
        sets[name] = chosen
    unknown = sorted(set(overrides or {}) - set(sets))
    if unknown:
        raise WorkloadError(f"option sets for {', '.join(unknown)}: not among the designs run ({', '.join(sets)})")
    return sets


def plan(backends: list[str], scenarios: list[Workload], sets: Mapping[str, list[dict[str, Any]]],
         world: str = WORLD) -> list[Cell]:
    from lab.experiments.runner import fault_refusal

    cells = []
    for backend in backends:
        if world not in backend_class(backend).worlds:
            raise WorkloadError(f"{backend} runs in the {' and '.join(backend_class(backend).worlds)} world only, "
                                f"not {world}")
        for options in sets[backend]:
            for scenario in scenarios:
                refusal = fault_refusal(scenario, world, backend)
                if refusal is not None:
                    raise WorkloadError(f"{scenario.name} on {backend}: {refusal}")
                cells.append(Cell(backend, tuple(sorted(options.items())), scenario.name))
    return cells


def run_matrix(backends: Iterable[str] | None = None, scenarios: Iterable[str] | None = None, seeds: int = 5,
               overrides: Mapping[str, list[Mapping[str, Any]]] | None = None, jobs: int | None = None,
               out: str | Path | None = None, progress: bool = True,
               echo: Callable[[str], None] = print, world: str = WORLD, spark: str | None = None) -> Matrix:
    """Run every cell over ``seeds`` seeds (1..seeds) in ``world`` and write the matrix. Live
    runs go one at a time unless ``jobs`` says otherwise: side by side they would time each
    other's CPU, not the design. ``spark``: a Spark master whose tasks run the sim runs."""
    backends = list(backends or sorted(usable()))
    if seeds < 1:
        raise WorkloadError(f"--seeds {seeds}: use 1 or more")
    sets = option_sets(backends, overrides, world)
    workloads = {w.name: w for w in scenarios_named(scenarios)}
    cells = plan(backends, list(workloads.values()), sets, world)
    if spark is not None:
        from lab.experiments.spark_runs import check_master

        if world != WORLD:
            raise WorkloadError("--spark runs the sim world only: a live run needs the brokers on this machine")
        check_master(spark)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    directory = Path(out) if out is not None else runs_dir() / f"matrix-{stamp}"
    directory.mkdir(parents=True, exist_ok=True)
    stack = contextlib.ExitStack()  # the Spark session of --spark: it runs the runs, then the aggregation
    with stack:
        pool = _spark_pool(stack, spark, jobs) if spark is not None else None
        jobs = getattr(pool, "slots", None) or jobs or (1 if world == "live" else os.cpu_count() or 1)
        work = [(cell, seed) for cell in cells for seed in range(1, seeds + 1)]
        where = f"on Spark {spark}" if spark is not None else f"in the {world} world"
        echo(f"lab matrix: {len(cells)} cells ({len(backends)} designs, {len(workloads)} scenarios) x {seeds} seeds "
             f"= {len(work)} runs {where}, {jobs} at a time; folder {directory}")
        results = _run_all(pool, work, workloads, jobs, directory, world, progress, spark, stack)
        matrix = Matrix(directory, {cell: sorted(runs, key=lambda r: r.seed) for cell, runs in results.items()})
        echo("  aggregating with Spark ...")
        latencies = _latencies(matrix)
    matrix.rows = [cell_row(cell, runs, workloads[cell.scenario], latencies) for cell, runs in matrix.cells.items()]
    _write_csv(matrix.rows, matrix.csv_path)
    matrix.markdown_path.write_text(markdown(matrix.rows, seeds) + "\n")
    heatmap(matrix.rows, matrix.heatmap_path, seeds)
    return matrix


def _spark_pool(stack: contextlib.ExitStack, master: str, jobs: int | None) -> Any:
    """The runs' executor on Spark: twice the cluster's cores in flight unless ``jobs`` (a job's own
    start then overlaps another's run)."""
    from lab.experiments.spark_runs import SparkRuns, spark_context

    sc = stack.enter_context(spark_context(master))
    return SparkRuns(sc, jobs or 2 * sc.defaultParallelism, init=_quiet)


def _run_all(pool: Any, work: list[tuple[Cell, int]], workloads: Mapping[str, Workload], jobs: int,
             directory: Path, world: str, progress: bool, spark: str | None,
             stack: contextlib.ExitStack) -> dict[Cell, list[SeedRun]]:
    """Every (cell, seed) of ``work``, on ``pool`` (a process pool when None); interrupted, the runs
    in flight are cut short and the folder marked."""
    from lab.experiments.spark_runs import TaskFailed

    results: dict[Cell, list[SeedRun]] = {cell: [] for cell, _ in work}
    bar = _bar(len(work), progress)
    # interrupt.worker_init: a worker dies with the lab, and a signal ends its run cleanly, then it
    pool = pool or ProcessPoolExecutor(max_workers=jobs, initializer=interrupt.worker_init, initargs=(_quiet,))
    completed = interrupted = False
    try:
        calls = [((cell, seed), (_run_one, workloads[cell.scenario], cell.backend, dict(cell.options), seed,
                                 directory / _folder(cell, seed), world)) for cell, seed in work]
        ended: contextlib.AbstractContextManager[Iterable[tuple[tuple[Cell, int], Any]]]  # each run's future, as it ends
        if hasattr(pool, "run_all"):  # on Spark: every run a task of one job, not a job each
            ended = contextlib.closing(pool.run_all(interrupt.worker_call, calls, directory))
        else:
            futures = {pool.submit(interrupt.worker_call, *args): key for key, args in calls}
            ended = contextlib.nullcontext((futures[f], f) for f in as_completed(futures))
        with ended as finished:
            for (cell, seed), future in finished:
                try:
                    results[cell].append(future.result())
                except TaskFailed as e:  # named, not lost in a Java stack trace
                    raise WorkloadError(f"{cell.row} under {cell.scenario}, seed {seed}: {e}") from None
                bar.update(1)
        completed = True
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        bar.close()
        interrupt.stop_pool(pool, interrupted=not completed)  # Ctrl-C, SIGTERM: runs in flight cut short
        if not completed:
            stack.close()  # Spark's session stopped: its Python workers with it
            if spark is not None:  # a Spark task's worker is killed, not left to clean up
                from lab.experiments.spark_runs import remove_cut_runs

                remove_cut_runs(directory)
        if interrupted:  # after the pool: its workers have removed the run folders they had begun
            interrupt.mark_interrupted(directory, "matrix", runs_done=sum(map(len, results.values())),
                                       runs_planned=len(work))
    return results


def _folder(cell: Cell, seed: int) -> str:
    options = "-".join(f"{k}={v}" for k, v in cell.options) or "defaults"
    return f"{cell.backend}/{options}/{cell.scenario}/s{seed}"


def _bar(total: int, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="run", disable=not progress, dynamic_ncols=True)


def _quiet() -> None:
    """A worker logs errors only: what a design says of each run (a journal's torn tail
    after a crash) would bury the progress bar; the run's verdict and files hold the facts."""
    import logging

    logging.getLogger().setLevel(logging.ERROR)


def _run_one(workload: Workload, backend: str, options: dict[str, Any], seed: int, out: Path,
             world: str = WORLD) -> SeedRun:
    """One run, in a worker process: the runner's run and its time to recover."""
    from lab.history.record import read_samples
    from lab.judge.recovery import time_to_recover
    from lab.experiments.runner import run

    result = run(workload, backend, world, seed=seed, out=out, progress=False, options=options)
    c = result.check
    recovery = time_to_recover(read_samples(result.run_dir))
    return SeedRun(result.run_id, str(result.run_dir), seed, str(c.verdict), c.reason, c.counts.lost,
                   c.counts.duplicated, c.counts.unexpected, c.reordering.inversions, c.reordering.most_overtakers,
                   recovery.seconds, recovery.undelivered, result.wall_seconds)


def _latencies(matrix: Matrix) -> dict[tuple[Cell, str, str], dict[str, float]]:
    """(cell, op, phase) -> p50/p99/p99.9, from the Spark pipeline's histograms of the
    cell's runs, merged over its seeds."""
    from lab.aggregate.histograms import percentiles
    from lab.aggregate.pipeline import aggregate
    from lab.aggregate.spark import spark_session

    runs = [r for rs in matrix.cells.values() for r in rs]
    summaries = aggregate(spark_session(), [r.run_dir for r in runs], matrix.directory / "summary")
    cell_of = {r.run_id: cell for cell, rs in matrix.cells.items() for r in rs}
    h = summaries.histograms
    h = h[h.op.isin(OPS) & h.phase.isin(PHASES)].copy()
    h["cell"] = h.run_id.map(lambda run_id: _cell_key(cell_of[run_id]))
    merged = percentiles(h, ["cell", "op", "phase"])
    keys = {_cell_key(cell): cell for cell in matrix.cells}
    return {(keys[r.cell], r.op, r.phase): {q: getattr(r, q) for q in QUANTILES} for r in merged.itertuples()}


def _cell_key(cell: Cell) -> str:
    return f"{cell.row}|{cell.scenario}"


def seed_reason(worst_run: SeedRun, seeds: int) -> str:
    """The reason a cell quotes: its worst seed's, named as that seed's when the cell has
    several — the cell's lost/duplicated figures are sums over all its seeds, and a reason's
    own numbers (one seed's) must not read as the cell's."""
    if not worst_run.reason or seeds <= 1:
        return worst_run.reason
    return f"seed {worst_run.seed} (of {seeds}; the counts are summed over all): {worst_run.reason}"


def cell_row(cell: Cell, runs: list[SeedRun], scenario: Workload,
             latencies: Mapping[tuple[Cell, str, str], Mapping[str, float]]) -> dict[str, Any]:
    """A cell's row of the matrix: the worst verdict over its seeds and that seed's reason
    (named as the seed's), the counts summed over the seeds."""
    verdict = worst(r.verdict for r in runs)  # of the seeds with evidence; a seed without is counted apart
    worst_run = next(r for r in runs if r.verdict == verdict)
    recovers = [r.recover_s for r in runs]
    known = [s for s in recovers if s is not None]
    recover = None if len(known) < len(recovers) else max(known, default=None)
    budget = getattr(scenario, "recover_within", None)
    row: dict[str, Any] = {
        "backend": cell.backend, "options": " ".join(f"{k}={v}" for k, v in cell.options),
        "scenario": cell.scenario, "seeds": len(runs),
        "no_evidence": sum(1 for r in runs if r.verdict == Verdict.NO_EVIDENCE), "verdict": str(verdict),
        "reason": seed_reason(worst_run, len(runs)) if verdict is not Verdict.VALID else "",
        "lost": sum(r.lost for r in runs), "duplicated": sum(r.duplicated for r in runs),
        "unexpected": sum(r.unexpected for r in runs), "inversions": sum(r.inversions for r in runs),
        "most_overtakers": max(r.most_overtakers for r in runs),
        "recover_s": recover, "undelivered": sum(r.undelivered for r in runs), "recover_within": budget,
        "recovered_in_time": None if budget is None else (recover is not None and recover <= budget),
        "run_ids": " ".join(r.run_id for r in runs),
    }
    for op in OPS:
        for phase in PHASES:
            values = latencies.get((cell, op, phase), {})
            for q in QUANTILES:
                row[f"{op}_{phase}_{q}"] = values.get(q)
    return row


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _label(row: Mapping[str, Any]) -> str:
    return " ".join(filter(None, [row["backend"], row["options"]]))


def _grid_cell(row: Mapping[str, Any]) -> str:
    verdict = "**INVALID**" if row["verdict"] == Verdict.INVALID else row["verdict"]
    late = " late" if row["recovered_in_time"] is False else ""
    apart = f" ({row['no_evidence']} no evidence)" if row["no_evidence"] and row["verdict"] != Verdict.NO_EVIDENCE else ""
    return f"{verdict} {row['lost']}/{row['duplicated']}{late}{apart}"


def markdown(rows: list[dict[str, Any]], seeds: int) -> str:
    """The grid (rows: design and options; columns: scenarios; the worst verdict over the
    seeds and lost/duplicated summed), then a line per cell with its figures."""
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    labels = list(dict.fromkeys(_label(r) for r in rows))
    by = {(_label(r), r["scenario"]): r for r in rows}
    lines = [f"Worst verdict over {seeds} seed(s), then lost/duplicated summed over them; `late`: "
             "not every acknowledged message delivered within the scenario's recovery budget.", "",
             "| design | " + " | ".join(scenarios) + " |", "|---|" + "---|" * len(scenarios)]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(_grid_cell(by[(label, s)]) if (label, s) in by else "-"
                                                for s in scenarios) + " |")
    header = ("design", "scenario", "verdict", "lost", "dup", "unexp", "inversions", "put p99 steady / fault / heal",
              "e2e p99 steady / fault / heal", "recover", "why")
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        put = " / ".join(_ns(r[f"put_{p}_p99_ns"]) for p in PHASES)
        e2e = " / ".join(_ns(r[f"e2e_{p}_p99_ns"]) for p in PHASES)
        recover = f"never ({r['undelivered']} undelivered)" if r["undelivered"] else _seconds(r["recover_s"])
        if r["recover_within"] is not None:
            recover += f" (budget {r['recover_within']:g} s)"
        lines.append("| " + " | ".join(str(c) for c in (
            _label(r), r["scenario"], r["verdict"], r["lost"], r["duplicated"], r["unexpected"], r["inversions"],
            put, e2e, recover, r["reason"])) + " |")
    return "\n".join(lines)


def _ns(value: float | None) -> str:
    return "-" if value is None or value != value else format_ns(value)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def heatmap(rows: list[dict[str, Any]], path: Path, seeds: int) -> None:
    """Rows: designs x options; columns: scenarios; colour: the worst verdict; numbers:
    lost/duplicated (summed over the seeds). Drawn by ``lab.present.plots_verdict.verdict_heatmap``."""
    from lab.present.plots_verdict import verdict_heatmap

    cells = {(_label(r), r["scenario"]): (r["verdict"], f"{r['lost']}/{r['duplicated']}"
                                          + ("\nlate" if r["recovered_in_time"] is False else ""))
             for r in rows}
    verdict_heatmap(cells, title=f"worst verdict over {seeds} seed(s); numbers: lost/duplicated", path=path)
