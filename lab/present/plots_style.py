"""The charts' common look: a design's colour, a world's line style, a log latency axis.

Every chart draws a design in the same colour (the registry's) and a world in the same line
style, labels a log latency axis at decades only, each label with its unit (100 µs, 1 ms,
10 s: seconds once a value passes 1,000 ms), and finishes the same way (title, tight layout,
a PNG when given a ``path``). Figures are matplotlib ``Figure`` objects, never pyplot state:
nothing to close, safe in worker processes.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from lab.design import registry

WORLD_STYLES = {"sim": "--", "live": "-"}


def colour(design: str) -> str:
    """A design's colour, the same in every chart: its own (a name the registry does not
    know, or a design that declares none: a stable spare)."""
    return registry.colour(design)


def line_style(world: str) -> str:
    return WORLD_STYLES.get(world, ":")


def finish(fig: Figure, title: str | None, path) -> Figure:
    """Every figure's last steps: its title, a tight layout, and a PNG at ``path`` if given."""
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def decade_label(ns: float) -> str:
    """A decade of nanoseconds with its unit: 100 µs, 1 ms, 10 s."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= size * 0.999:
            return f"{ns / size:.3g} {unit}"
    return f"{ns:.3g} ns"


def decade_axis(ax, positive_ns: np.ndarray) -> float:
    """A log latency y axis labelled at whole decades with units; returns the scale the
    values are drawn in (ns per unit: s past 1,000 ms, else ms)."""
    seconds = positive_ns.size > 0 and positive_ns.max() > 1e9  # past 1,000 ms
    scale = 1e9 if seconds else 1e6
    ax.set_yscale("log")
    if positive_ns.size:  # whole decades, so there are always two labelled ticks
        low = math.floor(math.log10(positive_ns.min() / scale))
        high = math.ceil(math.log10(positive_ns.max() / scale))
        ax.set_ylim(10.0**low, 10.0 ** max(high, low + 1))
    ax.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: decade_label(v * scale)))
    ax.yaxis.set_minor_formatter(NullFormatter())  # minor ticks unlabelled: their labels overlapped
    return scale
