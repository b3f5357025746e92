"""Charts people would rather look at than read: latency by percentile, OMB style.

The x axis is log-percentile (50, 90, 99, 99.9, 99.99: each step ten times rarer),
so the tail gets as much room as the median; the y axis is log latency, labelled at
decades only, each label with its unit (100 µs, 1 ms, 10 s: seconds once a value passes
1,000 ms). Every chart draws a design in the same colour and a world in the same line
style, and says in its legend which lines lie on top of each other. Percentiles come from the log-bucket histogram
(``lab.history.record.LogHistogram``), as in every table, so a chart's p50 is the table's.

Besides the latency-by-percentile grid (``latency_figure``):

- ``throughput_bars``: throughput p50 bars with a p5–p95 whisker, per design and world.
- ``compare_figure``: the compare notebook's main figure, a column per workload (throughput,
  put and end-to-end latency by percentile) over the verdict grid of every run.

The other chart families have rooms of their own: ``plots_style`` (colours, line styles, the
decade axis), ``plots_faults`` (timelines and phases), ``plots_verdict`` (verdict grids and
heat maps), ``plots_load`` (saturation, sim/live ratios, series over time).

Figures are matplotlib ``Figure`` objects, never pyplot state: nothing to close, safe in
worker processes; each saves itself as PNG when given a ``path``.
"""

from __future__ import annotations

from typing import Mapping, Sequence, Union

import numpy as np
from matplotlib.figure import Figure

from lab.history.record import GAMMA, LogHistogram
from lab.present.plots_style import colour, decade_axis, finish, line_style
from lab.present.plots_verdict import verdict_grid, verdict_legend

PERCENTILE_TICKS = (50, 90, 99, 99.9, 99.99)
# p50 .. p99.99, evenly spaced on the log-percentile axis
PERCENTILES = 100.0 - np.logspace(np.log10(50.0), -2.0, 60)
# Closer than one log bucket at every percentile is the same line: each quantile is within
# 1 % of its value, so values 0.3 % apart may still land one bucket (2 %) apart.
COINCIDE = GAMMA - 1.0

Latencies = Union[np.ndarray, LogHistogram]  # ns


def _x(percentile: np.ndarray) -> np.ndarray:
    return np.log10(100.0 / (100.0 - percentile))


def quantiles_ns(latencies: Latencies, percentiles: np.ndarray = PERCENTILES) -> np.ndarray:
    """Latency at each percentile, from the log-bucket histogram of ``latencies``."""
    if isinstance(latencies, LogHistogram):
        h = latencies
    else:
        h = LogHistogram()
        h.add_many(latencies)
    return np.array([h.quantile(p / 100.0) for p in percentiles])


def coinciding(curves: Mapping[str, np.ndarray], tolerance: float = COINCIDE) -> list[list[str]]:
    """Groups of labels whose curves agree within ``tolerance`` at every point."""
    groups: list[list[str]] = []
    for label, values in curves.items():
        for group in groups:
            first = curves[group[0]]
            if np.all(np.abs(values - first) <= tolerance * np.maximum(np.abs(values), np.abs(first))):
                group.append(label)
                break
        else:
            groups.append([label])
    return [g for g in groups if len(g) > 1]


def plot_latency_quantiles(ax, series: Mapping[tuple[str, str], Latencies], title: str) -> None:
    """One line per (design, world): latency against log-percentile."""
    curves = {key: quantiles_ns(latencies) for key, latencies in series.items()
              if (latencies.count if isinstance(latencies, LogHistogram) else latencies.size)}
    positive = np.concatenate([c[c > 0] for c in curves.values()]) if curves else np.array([])
    scale = decade_axis(ax, positive)  # lines in s past 1,000 ms, else ms: what a notebook reading them gets
    labels = {}
    for (design, world), ns in curves.items():
        labels[(design, world)] = label = f"{design} ({world})"
        ax.plot(_x(PERCENTILES), ns / scale, label=label, color=colour(design), linestyle=line_style(world),
                linewidth=1.6)
    ax.set_xticks(_x(np.array(PERCENTILE_TICKS)))
    ax.set_xticklabels([f"p{p:g}" for p in PERCENTILE_TICKS])
    ax.set_ylabel("latency")  # each tick says its unit
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    groups = coinciding({labels[k]: v for k, v in curves.items()})
    for group in groups:  # the later line hides the earlier: say so where the lines are named
        ax.plot([], [], linestyle="none", label=" = ".join(group) + "\n(the same line)")
    if curves:
        ax.legend(fontsize=7)




def throughput_bars(ax, bars: Sequence[Mapping], title: str | None = None, unit: str = "ok ops/s") -> None:
    """One bar per entry of ``bars`` (keys ``design``, ``world``, ``p50``, and ``p5`` and
    ``p95`` for the whisker; ``label`` optional): height p50, whisker p5 to p95, the
    design's colour, the world's line style on the bar's edge (sim hatched)."""
    for i, bar in enumerate(bars):
        world = bar.get("world", "")
        ax.bar(i, bar["p50"], color=colour(bar["design"]), alpha=0.85 if world != "sim" else 0.55,
               edgecolor="black", linestyle=line_style(world), linewidth=0.8, hatch="//" if world == "sim" else None)
        if bar.get("p5") is not None and bar.get("p95") is not None:
            low, high = bar["p5"], bar["p95"]
            if low == low and high == high:  # not NaN
                ax.errorbar(i, bar["p50"], yerr=[[max(0.0, bar["p50"] - low)], [max(0.0, high - bar["p50"])]],
                            color="black", capsize=2, linewidth=0.8)
    ax.set_xticks(range(len(bars)), [b.get("label") or f"{b['design']} ({b.get('world', '')})" for b in bars],
                  rotation=45, ha="right", fontsize=7)
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)


def compare_figure(throughput: Mapping[str, Sequence[Mapping]],
                   latencies: Mapping[str, Mapping[str, Mapping[tuple[str, str], Latencies]]],
                   verdicts: Mapping[tuple[str, str], tuple[str, str]], *, title: str | None = None,
                   path=None) -> Figure:
    """Every design on several workloads in both worlds, one column per workload: put
    throughput (``throughput_bars``: p5/p50/p95 of the per-second series), then one
    latency-by-percentile panel per entry of ``latencies[workload]`` (e.g. put, end to
    end); below them all, the verdict grid (rows: design and world, columns: workloads).
    Saved as PNG at ``path`` if given."""
    workloads = list(dict.fromkeys([*throughput, *latencies]))
    if not workloads:
        raise ValueError("no workloads to draw")
    kinds = list(dict.fromkeys(k for w in workloads for k in latencies.get(w, {})))
    rows = 1 + len(kinds)
    grid_rows = len(set(r for r, _ in verdicts))
    cols = len(workloads)
    fig = Figure(figsize=(4.6 * cols, 3.6 * rows + 0.5 + 0.32 * grid_rows + (0.4 if title else 0)),
                 layout="constrained")
    spec = fig.add_gridspec(rows + 1, cols, height_ratios=[1.0] * rows + [0.25 + 0.09 * grid_rows])
    for j, workload in enumerate(workloads):
        ax = fig.add_subplot(spec[0, j])
        throughput_bars(ax, list(throughput.get(workload, [])), f"{workload}: puts/s (p5, p50, p95)")
        for i, kind in enumerate(kinds, start=1):
            ax = fig.add_subplot(spec[i, j])
            plot_latency_quantiles(ax, latencies.get(workload, {}).get(kind, {}), f"{workload}: {kind}")
    if verdicts:
        verdict_grid(fig.add_subplot(spec[rows, :]), verdicts, "delivery verdict per run; numbers: lost/duplicated")
        verdict_legend(fig)
    if title:
        fig.suptitle(title, fontsize=11)
    if path is not None:
        fig.savefig(path, dpi=90)
    return fig


def latency_figure(panels: Mapping[str, Mapping[tuple[str, str], Latencies]], path=None,
                   title: str | None = None) -> Figure:
    """A grid of quantile plots, one panel per title; saved as PNG at ``path`` if given."""
    if not panels:
        raise ValueError("no latencies to draw")
    n = len(panels)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(5.2 * cols, 3.8 * rows + (0.4 if title else 0)))  # no pyplot: nothing to close
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (panel, series) in zip(axes.flat, panels.items()):
        plot_latency_quantiles(ax, series, panel)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    return finish(fig, title, path)


