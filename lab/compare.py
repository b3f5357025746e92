"""`lab compare`: the standard workloads on every registered backend, in both worlds.

Each (workload, backend, world) is one run of the runner, written under one compare
folder; the Spark pipeline (``lab.aggregate``) then summarises all of them at once.
The comparison is a table (Markdown for people, CSV for tools) built from the
pipeline's ``measured`` rows and checker totals — plus the reordering that only the
per-run checker measures — and a latency chart (put and end-to-end latency by
percentile, one line per backend and world). Workloads with a fault schedule run in the
sim world only.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from lab.aggregate import MEASURED, Aggregation, aggregate
from lab.backends import REGISTRY, backend_class
from lab.paths import runs_dir
from lab.plots import latency_figure
from lab.record import ok_ops, read_samples
from lab.runner import RunResult, run
from lab.summary import end_to_end_ns, format_ns
from lab.workload import Workload, load_workload

STANDARD_WORKLOADS = Path(__file__).parent / "workloads"

COLUMNS = ("workload", "backend", "world", "put_tput_p50", "get_tput_p50", "put_p50_ns", "put_p99_ns",
           "put_p999_ns", "e2e_p50_ns", "e2e_p99_ns", "e2e_p999_ns", "lost", "duplicated", "unexpected",
           "recovered", "inversions", "valid", "run_id")


@dataclass
class Comparison:
    rows: list[dict[str, Any]]
    directory: Path

    @property
    def markdown_path(self) -> Path:
        return self.directory / "compare.md"

    @property
    def csv_path(self) -> Path:
        return self.directory / "compare.csv"

    @property
    def plot_path(self) -> Path:
        return self.directory / "latency.png"


def standard_workloads() -> list[Workload]:
    return [load_workload(p) for p in sorted(STANDARD_WORKLOADS.glob("*.yaml"))]


def compare(
    backends: Iterable[str] | None = None,
    worlds: Iterable[str] = ("sim", "live"),
    workloads: list[Workload] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
    echo: Callable[[str], None] = print,
) -> Comparison:
    backends = list(backends or sorted(REGISTRY))
    for name in backends:
        backend_class(name)  # an unknown name fails before any run starts
    workloads = workloads if workloads is not None else standard_workloads()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    directory = Path(out) if out is not None else runs_dir() / f"compare-{stamp}"
    directory.mkdir(parents=True, exist_ok=True)

    results: list[RunResult] = []
    panels: dict[str, dict[str, np.ndarray]] = {}
    for workload in workloads:
        for backend in backends:
            for world in worlds:
                if world not in backend_class(backend).worlds or (workload.faults and world != "sim"):
                    continue
                result = run(workload, backend, world, out=directory / f"{workload.name}-{backend}-{world}",
                             progress=progress)
                results.append(result)
                echo(f"  {workload.name:<16} {backend:<10} {world:<5} {'VALID' if result.verdict.valid else 'INVALID'}"
                     f"  {result.samples:>8,} operations in {result.wall_seconds:.1f} s")
                put, e2e = _latencies(result)
                label = f"{backend} ({world})"
                panels.setdefault(f"{workload.name}: put latency", {})[label] = put
                panels.setdefault(f"{workload.name}: end to end", {})[label] = e2e

    echo("  aggregating with Spark ...")
    from lab.spark import spark_session

    summaries = aggregate(spark_session(), [r.run_dir for r in results], directory / "summary")
    rows = [_row(result, summaries) for result in results]
    comparison = Comparison(rows, directory)
    _write_csv(rows, comparison.csv_path)
    comparison.markdown_path.write_text(markdown_table(rows) + "\n")
    latency_figure(panels, comparison.plot_path)
    return comparison


def _row(result: RunResult, summaries: Aggregation) -> dict[str, Any]:
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
        "inversions": result.verdict.reordering.inversions,
        "valid": bool(checks["valid"]),
        "run_id": result.run_id,
    }


def _latencies(result: RunResult) -> tuple[np.ndarray, np.ndarray]:
    samples = read_samples(result.run_dir)
    puts = ok_ops(samples, "put", measured_only=True)
    return puts.column("latency_ns").to_numpy(), end_to_end_ns(samples)


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = ("workload", "backend", "world", "put/s p50", "get/s p50", "put p50", "put p99", "put p99.9",
              "e2e p50", "e2e p99", "e2e p99.9", "lost", "dup", "unexp", "inversions", "valid")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["workload"], r["backend"], r["world"], _rate(r["put_tput_p50"]), _rate(r["get_tput_p50"]),
                 *(format_ns(_num(r[k])) for k in ("put_p50_ns", "put_p99_ns", "put_p999_ns",
                                                   "e2e_p50_ns", "e2e_p99_ns", "e2e_p999_ns")),
                 r["lost"], r["duplicated"], r["unexpected"], r["inversions"], "yes" if r["valid"] else "**NO**"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _rate(value: Any) -> str:
    value = _num(value)
    return "-" if value != value else f"{value:,.0f}"
