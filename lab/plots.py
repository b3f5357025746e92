"""Charts people would rather look at than read: latency by percentile, OMB style.

The x axis is log-percentile (50, 90, 99, 99.9, 99.99: each step ten times rarer),
so the tail gets as much room as the median; the y axis is log latency.
"""

from __future__ import annotations

from typing import Mapping

import matplotlib

matplotlib.use("Agg")  # files, not windows: this runs in CI and in notebooks alike

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

PERCENTILE_TICKS = (50, 90, 99, 99.9, 99.99)


def _x(percentile: np.ndarray) -> np.ndarray:
    return np.log10(100.0 / (100.0 - percentile))


def plot_latency_quantiles(ax, series: Mapping[str, np.ndarray], title: str) -> None:
    """One line per label: latency (ns in, ms drawn) against log-percentile."""
    percentiles = 100.0 - np.logspace(np.log10(50.0), -2.0, 60)  # p50 .. p99.99, even on the log axis
    for label, latencies in series.items():
        if latencies.size == 0:
            continue
        values = np.percentile(latencies, percentiles) / 1e6
        ax.plot(_x(percentiles), values, label=label, linewidth=1.6)
    ax.set_xticks(_x(np.array(PERCENTILE_TICKS)))
    ax.set_xticklabels([f"p{p:g}" for p in PERCENTILE_TICKS])
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 0.2, 1, 50 rather than 2×10⁻¹
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel("latency (ms)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def latency_figure(panels: Mapping[str, Mapping[str, np.ndarray]], path) -> None:
    """A grid of quantile plots, one panel per title, saved as PNG at ``path``."""
    n = len(panels)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels.items()):
        plot_latency_quantiles(ax, series, title)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
