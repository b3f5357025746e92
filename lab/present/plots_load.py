"""Live-vs-sim and load-test charts: saturation ramps, sim/live ratios, series over time.

- ``saturation_figure``: closed-loop ramps, puts/s against clients, each line's most ringed.
- ``ratio_figure``: sim / live per design and metric against the calibration goal.
- ``series_figure``: per-second (per-bin) series, one panel per title over a shared x axis.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from lab.present.plots_style import colour, finish, line_style

def _per_s_label(value: float) -> str:
    return f"{value:,.0f}/s" if value >= 10 else f"{value:.2g}/s"


def _step_125(value: float, down: bool) -> float:
    """The 1-2-5 step (…, 500, 1,000, 2,000 …) at or below (``down``) or above ``value``."""
    decade = 10.0 ** math.floor(math.log10(value))
    steps = [decade * m for m in (1, 2, 5, 10)]
    return max(s for s in steps if s <= value) if down else min(s for s in steps if s >= value)


def saturation_figure(ramps: Mapping[tuple[str, str], Mapping[int, float]], *, title: str | None = None,
                      path=None) -> Figure:
    """Closed-loop ramps: puts/s against clients (1, 2, 4 … on a log-2 axis), one line per
    (design, world) in the design's colour and the world's style, each line's most puts/s
    ringed (its saturation). The y axis is log, labelled 1-2-5 in puts/s."""
    curves = {key: sorted((int(c), float(v)) for c, v in ramp.items()) for key, ramp in ramps.items() if ramp}
    if not curves:
        raise ValueError("no ramp to draw")
    fig = Figure(figsize=(7.5, 4.4 + (0.3 if title else 0)))
    ax = fig.subplots()
    clients = sorted({c for points in curves.values() for c, _ in points})
    for (design, world), points in curves.items():
        xs, ys = [c for c, _ in points], [v for _, v in points]
        ax.plot(xs, ys, color=colour(design), linestyle=line_style(world), marker="o", markersize=3, linewidth=1.6,
                label=f"{design} ({world})")
        best = int(np.argmax(ys))
        ax.plot([xs[best]], [ys[best]], marker="o", markersize=9, markerfacecolor="none", color=colour(design),
                linestyle="none")
    ax.set_xscale("log", base=2)
    ax.set_xticks(clients)
    ax.set_xticklabels([str(c) for c in clients])
    ax.set_xlabel("clients (producers, and as many consumers)")
    positive = [v for points in curves.values() for _, v in points if v > 0]
    ax.set_yscale("log")
    if positive:
        ax.set_ylim(_step_125(min(positive), down=True), _step_125(max(positive) * 1.1, down=False))
    ax.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _per_s_label(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("puts/s (measured phases)")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title("saturation ramp (ringed: each line's most)", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return finish(fig, title, path)


def _ratio_label(value: float) -> str:
    return f"{value:g}×" if value >= 1 else f"1/{1 / value:g}×"


def ratio_figure(ratios: Mapping[str, Mapping[str, float | None]], goal: Mapping[str, float], *,
                 title: str | None = None, path=None) -> Figure:
    """sim / live per design and metric: one column per metric (``put_p50``, ``e2e_p99`` …,
    in the order of the first design's), a dot per design in its colour on a log axis
    (1/2×, 1×, 2×), each metric's goal (1 ± ``goal[stat]``, the stat after the last ``_``)
    shaded green. A ratio that is None (not measured) is left out."""
    metrics: list[str] = []
    for values in ratios.values():
        metrics += [m for m in values if m not in metrics]
    points = [(d, m, v) for d, values in ratios.items() for m, v in values.items() if v is not None and v > 0]
    if not points:
        raise ValueError("no ratios to draw")
    fig = Figure(figsize=(max(5.0, 1.6 * len(metrics) + 2.0), 4.2 + (0.3 if title else 0)))
    ax = fig.subplots()
    designs = list(ratios)
    width = 0.6 / max(1, len(designs))
    for i, metric in enumerate(metrics):
        tolerance = goal.get(metric.rsplit("_", 1)[-1])
        if tolerance is not None:
            ax.fill_between([i - 0.4, i + 0.4], 1 - tolerance, 1 + tolerance, color="#2ca02c", alpha=0.15,
                            linewidth=0, label="goal" if i == 0 else "_goal")
    for j, design in enumerate(designs):
        xs = [metrics.index(m) + (j - (len(designs) - 1) / 2) * width for d, m, v in points if d == design]
        ys = [v for d, m, v in points if d == design]
        ax.plot(xs, ys, marker="o", linestyle="none", color=colour(design), markersize=7, label=design)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels([m.replace("_", " ") for m in metrics])
    ax.set_xlim(-0.5, len(metrics) - 0.5)
    ax.set_yscale("log", base=2)
    drawn = [v for _, _, v in points]
    low = 2.0 ** min(-1, math.floor(math.log2(min(drawn))))
    high = 2.0 ** max(1, math.ceil(math.log2(max(drawn))))
    ax.set_ylim(low, high)
    ax.yaxis.set_major_locator(LogLocator(base=2.0, subs=(1.0,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _ratio_label(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("sim / live")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.set_title("calibrated sim against live (green: the goal)", fontsize=10)
    ax.legend(fontsize=7)
    return finish(fig, title, path)


def series_figure(panels: Mapping[str, Mapping[tuple[str, str], tuple[Sequence[float], Sequence[float]]]], *,
                  ylabel: str = "ok ops/s", xlabel: str = "seconds since the run's start",
                  title: str | None = None, path=None) -> Figure:
    """Series over time (per second, per bin), one panel per title stacked over a shared x
    axis, one step line per (design, world) in the design's colour and the world's style;
    the y axis starts at 0."""
    if not any(len(x) for series in panels.values() for x, _ in series.values()):
        raise ValueError("no series to draw")
    fig = Figure(figsize=(10, 2.6 * len(panels) + 0.6 + (0.3 if title else 0)))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (panel, series) in zip(axes, panels.items()):
        for (design, world), (x, y) in series.items():
            if len(x):  # each value holds from its x to the next; the last one for as long as the one before
                xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
                step = xs[-1] - xs[-2] if xs.size > 1 else 1.0
                ax.step(np.append(xs, xs[-1] + step), np.append(ys, ys[-1]), where="post", color=colour(design),
                        linestyle=line_style(world), linewidth=1.3, label=f"{design} ({world})")
        ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_title(panel, fontsize=10)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right", ncol=2)
    axes[-1].set_xlabel(xlabel)
    return finish(fig, title, path)
