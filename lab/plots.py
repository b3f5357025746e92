"""Charts people would rather look at than read: latency by percentile, OMB style.

The x axis is log-percentile (50, 90, 99, 99.9, 99.99: each step ten times rarer),
so the tail gets as much room as the median; the y axis is log latency, labelled at
decades only, each label with its unit (100 µs, 1 ms, 10 s: seconds once a value passes
1,000 ms). Every chart draws a design in the same colour and a world in the same line
style, and says in its legend which lines lie on top of each other. Percentiles come from the log-bucket histogram
(``lab.record.LogHistogram``), as in every table, so a chart's p50 is the table's.
"""

from __future__ import annotations

import math
import zlib
from typing import Mapping, Union

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from lab.backends import REGISTRY
from lab.record import GAMMA, LogHistogram

PERCENTILE_TICKS = (50, 90, 99, 99.9, 99.99)
# p50 .. p99.99, evenly spaced on the log-percentile axis
PERCENTILES = 100.0 - np.logspace(np.log10(50.0), -2.0, 60)
SPARE_COLOURS = ("#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")  # a name the registry does not know
WORLD_STYLES = {"sim": "--", "live": "-"}
# Closer than one log bucket at every percentile is the same line: each quantile is within
# 1 % of its value, so values 0.3 % apart may still land one bucket (2 %) apart.
COINCIDE = GAMMA - 1.0

Latencies = Union[np.ndarray, LogHistogram]  # ns


def colour(design: str) -> str:
    """A design's colour, the same in every chart: the registry's (a name it does not know:
    a stable spare)."""
    entry = REGISTRY.get(design)
    return entry.colour if entry else SPARE_COLOURS[zlib.crc32(design.encode()) % len(SPARE_COLOURS)]


def line_style(world: str) -> str:
    return WORLD_STYLES.get(world, ":")


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
    seconds = positive.size > 0 and positive.max() > 1e9  # past 1,000 ms
    scale = 1e9 if seconds else 1e6  # lines in s or ms: what a notebook reading them gets
    labels = {}
    for (design, world), ns in curves.items():
        labels[(design, world)] = label = f"{design} ({world})"
        ax.plot(_x(PERCENTILES), ns / scale, label=label, color=colour(design), linestyle=line_style(world),
                linewidth=1.6)
    ax.set_xticks(_x(np.array(PERCENTILE_TICKS)))
    ax.set_xticklabels([f"p{p:g}" for p in PERCENTILE_TICKS])
    ax.set_yscale("log")
    if positive.size:  # whole decades, so there are always two labelled ticks
        low, high = math.floor(math.log10(positive.min() / scale)), math.ceil(math.log10(positive.max() / scale))
        ax.set_ylim(10.0**low, 10.0 ** max(high, low + 1))
    ax.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: decade_label(v * scale)))
    ax.yaxis.set_minor_formatter(NullFormatter())  # minor ticks unlabelled: their labels overlapped
    ax.set_ylabel("latency")  # each tick says its unit
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    groups = coinciding({labels[k]: v for k, v in curves.items()})
    for group in groups:  # the later line hides the earlier: say so where the lines are named
        ax.plot([], [], linestyle="none", label=" = ".join(group) + "\n(the same line)")
    if curves:
        ax.legend(fontsize=7)


def decade_label(ns: float) -> str:
    """A decade of nanoseconds with its unit: 100 µs, 1 ms, 10 s."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= size * 0.999:
            return f"{ns / size:.3g} {unit}"
    return f"{ns:.3g} ns"


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
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
