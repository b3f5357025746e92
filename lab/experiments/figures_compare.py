"""The documentation's main figure from a `lab compare` folder: every design on the standard
workloads in both worlds (throughput bars, put and end-to-end latency by percentile, the verdict
grid), drawn by ``lab.present.plots.compare_figure`` from the comparison's Spark summary — the
figure notebook 02 draws, made here so `lab figures` can remake it without the notebook.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TITLE = "every design on the standard workloads, sim (dashed, hatched) and live (solid); measured phases"


def compare_designs(directory: Path, order: list[str], path: Path) -> Any:
    """Draw the figure of the comparison in ``directory`` (its ``summary/`` parquet files),
    workloads in ``order``, and save it as PNG at ``path``; returns the figure."""
    import pandas as pd

    from lab.aggregate.histograms import histogram
    from lab.present.plots import compare_figure

    summary_dir = Path(directory) / "summary"
    summary = pd.read_parquet(summary_dir / "summary.parquet")
    histograms = pd.read_parquet(summary_dir / "histograms.parquet")
    checks = pd.read_parquet(summary_dir / "checks.parquet")
    runs = summary[["run_id", "scenario", "backend", "world"]].drop_duplicates().rename(columns={"scenario": "workload"})
    order = [w for w in order if w in set(runs.workload)]
    measured = summary[summary.phase == "measured"]

    bars: dict[str, list[dict[str, Any]]] = {w: [] for w in order}
    for r in measured[measured.op == "put"].itertuples():
        bars[r.scenario].append({"design": r.backend, "world": r.world, "p5": r.tput_p5, "p50": r.tput_p50,
                                 "p95": r.tput_p95})
    for row in bars.values():
        row.sort(key=lambda b: (b["design"], b["world"] != "sim"))

    latency = histograms[(histograms.phase == "measured") & histograms.op.isin(["put", "e2e"])]
    panels: dict[str, dict[str, dict[tuple[str, str], Any]]] = {w: {"put latency": {}, "end to end": {}}
                                                                for w in order}
    for (workload, backend, world, op), rows in latency.merge(runs[["run_id", "workload"]], on="run_id").groupby(
            ["workload", "backend", "world", "op"]):
        panels[workload]["put latency" if op == "put" else "end to end"][(backend, world)] = histogram(rows)

    delivery = runs.merge(checks[["run_id", "lost", "duplicated", "verdict"]], on="run_id")
    verdicts = {(f"{r.backend} ({r.world})", r.workload): (r.verdict, f"{r.lost}/{r.duplicated}")
                for r in delivery.sort_values(["backend", "world"]).itertuples()}
    return compare_figure(bars, panels, verdicts, path=path, title=TITLE)
