"""`lab compare`: the standard workloads on every registered backend, in both worlds.

Each (workload, backend, world) is one run of the runner, written under one compare
folder; the Spark pipeline (``lab.aggregate.pipeline``) then summarises all of them at once.
The comparison is a table (Markdown for people, CSV for tools) built from the
pipeline's ``measured`` rows (steady, fault and heal) and checker totals (the whole run)
— plus the reordering that only the per-run checker measures — and a latency chart (put
and end-to-end latency by percentile, one line per backend and world) drawn from the
same rows' histograms, so the chart's p50 is the table's; and the table's answer in words
(``lab.present.answer``: who lost or duplicated what, allowed or not, and who put fastest).
A workload does not run in a world that cannot apply its faults
(``lab.experiments.runner.fault_refusal``); a combination that cannot run is named and
skipped, and a comparison with nothing to run fails before anything starts.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from lab.worlds import interrupt
from lab.design.registry import backend_class, usable
from lab.history.paths import runs_dir
from lab.history.record import MEASURED_PHASES, LogHistogram
from lab.experiments.runner import fault_refusal, run
from lab.experiments.errors import NothingToRun
from lab.experiments.runner_manifest import RunResult
from lab.judge.summary import MEASURED, format_ns
from lab.judge.findings import Verdict
from lab.workloads.spec import Workload, load_workload, standard_workload_files

if TYPE_CHECKING:  # PySpark and matplotlib load only when a comparison runs (the CLI imports this)
    from lab.aggregate.pipeline import Aggregation


COLUMNS = ("workload", "backend", "world", "put_tput_p50", "get_tput_p50", "put_p50_ns", "put_p99_ns",
           "put_p999_ns", "e2e_p50_ns", "e2e_p99_ns", "e2e_p999_ns", "lost", "duplicated", "unexpected",
           "recovered", "inversions", "verdict", "run_id", "reason")
PHASES_NOTE = (f"Throughput and latency: the {MEASURED} phases ({', '.join(MEASURED_PHASES)}; not warm-up or "
               "drain), as in latency.png; e2e = put start to first delivery, in the phase of that delivery. "
               "lost, dup, unexp, inversions: the whole run.")
PANELS = {"put": "put latency", "e2e": "end to end"}
VERDICT_CELLS = {Verdict.VALID: "valid", Verdict.ALLOWED: "allowed", Verdict.INVALID: "**invalid**"}


@dataclass
class Comparison:
    rows: list[dict[str, Any]]
    directory: Path
    panels: dict[str, dict[tuple[str, str], LogHistogram]]  # what latency.png draws

    @property
    def markdown_path(self) -> Path:
        return self.directory / "compare.md"

    @property
    def csv_path(self) -> Path:
        return self.directory / "compare.csv"

    @property
    def plot_path(self) -> Path:
        return self.directory / "latency.png"

    @property
    def answer_path(self) -> Path:
        """The table's answer in words (``lab.present.answer``): one paragraph to paste."""
        return self.directory / "answer.md"


def standard_workloads() -> list[Workload]:
    return [load_workload(p) for p in standard_workload_files()]


def compare(
    backends: Iterable[str] | None = None,
    worlds: Iterable[str] = ("sim", "live"),
    workloads: list[Workload] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> Comparison:
    backends, worlds = list(backends or sorted(usable())), list(worlds)
    for name in backends:
        backend_class(name)  # an unknown name fails before any run starts
    workloads = workloads if workloads is not None else standard_workloads()
    runnable, skipped = plan(workloads, backends, worlds)
    if not runnable:
        raise NothingToRun("nothing to run: " + "; ".join(skipped))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    directory = Path(out) if out is not None else runs_dir() / f"compare-{stamp}"
    directory.mkdir(parents=True, exist_ok=True)

    for line in skipped:
        echo(f"  skipped {line}")
    results: list[RunResult] = []
    try:
        return _compare(runnable, directory, progress, echo, results)
    except KeyboardInterrupt:  # the run cut short removed its own folder; the finished ones stay
        interrupt.mark_interrupted(directory, "compare", runs_done=[r.run_dir.name for r in results],
                                   runs_planned=len(runnable))
        raise


def _compare(runnable: list[tuple[Workload, str, str]], directory: Path, progress: bool,
             echo: Callable[[str], None], results: list[RunResult]) -> Comparison:
    for workload, backend, world in runnable:
        result = run(workload, backend, world, out=directory / f"{workload.name}-{backend}-{world}",
                     progress=progress)
        results.append(result)
        echo(f"  {workload.name:<16} {backend:<10} {world:<5} {result.verdict.upper():<7}"
             f"  {result.samples:>8,} operations in {result.wall_seconds:.1f} s")

    echo("  aggregating with Spark ...")
    from lab.aggregate.pipeline import aggregate
    from lab.present.answer import compare_answer
    from lab.present.plots import latency_figure
    from lab.aggregate.spark import spark_session

    summaries = aggregate(spark_session(), [r.run_dir for r in results], directory / "summary")
    rows = [_row(result, summaries) for result in results]
    comparison = Comparison(rows, directory, _panels(results, summaries))
    _write_csv(rows, comparison.csv_path)
    comparison.markdown_path.write_text(markdown_table(rows) + "\n")
    comparison.answer_path.write_text(compare_answer(rows) + "\n")
    latency_figure(comparison.panels, comparison.plot_path,
                   title=f"{MEASURED} phases ({', '.join(MEASURED_PHASES)}), as compare.md; "
                         "end to end = put start to first delivery")
    return comparison


def plan(workloads: list[Workload], backends: list[str],
         worlds: Iterable[str]) -> tuple[list[tuple[Workload, str, str]], list[str]]:
    """The (workload, backend, world) runs that can go, and a line for each that can't."""
    runnable, skipped = [], []
    for workload in workloads:
        for backend in backends:
            supported = backend_class(backend).worlds
            for world in worlds:
                if world not in supported:
                    reason = f"{backend} runs in the {' and '.join(supported)} world(s) only"
                elif (refusal := fault_refusal(workload, world, backend)) is not None:
                    reason = refusal
                else:
                    runnable.append((workload, backend, world))
                    continue
                skipped.append(f"{workload.name} on {backend} in the {world} world: {reason}")
    return runnable, skipped


def _panels(results: list[RunResult], summaries: "Aggregation") -> dict[str, dict[tuple[str, str], LogHistogram]]:
    """Per workload, put and end-to-end latency: the histograms behind the table's measured rows."""
    from lab.aggregate.histograms import histogram

    measured = summaries.histograms[summaries.histograms.phase == MEASURED]
    panels: dict[str, dict[tuple[str, str], LogHistogram]] = {}
    for result in results:
        for op, name in PANELS.items():
            rows = measured[(measured.run_id == result.run_id) & (measured.op == op)]
            panel = panels.setdefault(f"{result.workload.name}: {name}, {MEASURED} phases", {})
            panel[(result.backend, result.world)] = histogram(rows) if len(rows) else LogHistogram()
    return panels


def _row(result: RunResult, summaries: "Aggregation") -> dict[str, Any]:
    summary = summaries.summary
    measured = summary[(summary.run_id == result.run_id) & (summary.phase == MEASURED)]
    by_op = {r["op"]: r for _, r in measured.iterrows()}
    checks = summaries.checks[summaries.checks.run_id == result.run_id].iloc[0]

    def value(op: str, column: str) -> float | None:
        r = by_op.get(op)
        return None if r is None or r[column] != r[column] else float(r[column])

    return {
        "workload": result.workload.name,
        "backend": result.backend,
        "world": result.world,
        "put_tput_p50": value("put", "tput_p50"),
        "get_tput_p50": value("get", "tput_p50"),
        "put_p50_ns": value("put", "p50_ns"),
        "put_p99_ns": value("put", "p99_ns"),
        "put_p999_ns": value("put", "p999_ns"),
        "e2e_p50_ns": value("e2e", "p50_ns"),
        "e2e_p99_ns": value("e2e", "p99_ns"),
        "e2e_p999_ns": value("e2e", "p999_ns"),
        "lost": int(checks["lost"]),
        "duplicated": int(checks["duplicated"]),
        "unexpected": int(checks["unexpected"]),
        "recovered": int(checks["recovered"]),
        "inversions": result.check.reordering.inversions,
        "verdict": checks["verdict"],  # valid, allowed or invalid (lab.judge.verdict), as the checker's
        "run_id": result.run_id,
        "reason": checks["reason"],  # the verdict's why: the fault and allowance, or the promise broken
    }


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = ("workload", "backend", "world", "put/s p50", "get/s p50", "put p50", "put p99", "put p99.9",
              "e2e p50", "e2e p99", "e2e p99.9", "lost", "dup", "unexp", "inversions", "verdict")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["workload"], r["backend"], r["world"], _rate(r["put_tput_p50"]), _rate(r["get_tput_p50"]),
                 *(format_ns(_num(r[k])) for k in ("put_p50_ns", "put_p99_ns", "put_p999_ns",
                                                   "e2e_p50_ns", "e2e_p99_ns", "e2e_p999_ns")),
                 r["lost"], r["duplicated"], r["unexpected"], r["inversions"], VERDICT_CELLS[r["verdict"]]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", PHASES_NOTE]
    return "\n".join(lines)


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _rate(value: Any) -> str:
    value = _num(value)
    return "-" if value != value else f"{value:,.0f}"
