"""Charts people would rather look at than read: latency by percentile, OMB style.

The x axis is log-percentile (50, 90, 99, 99.9, 99.99: each step ten times rarer),
so the tail gets as much room as the median; the y axis is log latency, labelled at
decades only, each label with its unit (100 µs, 1 ms, 10 s: seconds once a value passes
1,000 ms). Every chart draws a design in the same colour and a world in the same line
style, and says in its legend which lines lie on top of each other. Percentiles come from the log-bucket histogram
(``lab.history.record.LogHistogram``), as in every table, so a chart's p50 is the table's.

Besides the latency-by-percentile grid (``latency_figure``):

- ``timeline_figure``: one run over time, in bins of 100 ms: ok throughput per operation
  (puts, get deliveries) and latency p50/p99 per bin (each bin's own LogHistogram), with
  every fault shaded and labelled (``fault_bands``; ``fault_spans`` reads them from the
  run's fault rows).
- ``verdict_heatmap`` / ``verdict_grid``: verdicts as coloured cells (valid green, allowed
  amber, invalid red) with their numbers: ``lab matrix``'s heat map and the notebooks' grids.
- ``throughput_bars``: throughput p50 bars with a p5–p95 whisker, per design and world.
- ``compare_figure``: the compare notebook's main figure, a column per workload (throughput,
  put and end-to-end latency by percentile) over the verdict grid of every run.
- ``phase_figure``: the fault notebooks' steady / fault / heal phases per design, latency
  p50 to p99 and throughput, the fault slots shaded as fault bands are.

Figures are matplotlib ``Figure`` objects, never pyplot state: nothing to close, safe in
worker processes; each saves itself as PNG when given a ``path``.
"""

from __future__ import annotations

import math
import zlib
from typing import Mapping, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from lab.design.registry import REGISTRY
from lab.history.record import GAMMA, LogHistogram, ok_ops
from lab.judge.verdict import ALLOWED, INVALID, VALID

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
    scale = _decade_axis(ax, positive)  # lines in s past 1,000 ms, else ms: what a notebook reading them gets
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


def _finish(fig: Figure, title: str | None, path) -> Figure:
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


def _decade_axis(ax, positive_ns: np.ndarray) -> float:
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


FAULT_COLOUR = "#d62728"


def fault_bands(ax, faults: Sequence[tuple[float, float, str]], label: bool = True) -> None:
    """Shade each fault (start, end, label) on ``ax``'s x axis; with ``label``, write the
    label at the top of its band."""
    for start, end, text in faults:
        ax.axvspan(start, end, color=FAULT_COLOUR, alpha=0.15, linewidth=0, label="_fault")
        if label and text:
            ax.annotate(text, xy=(start, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                        textcoords="offset points", ha="left", va="top", fontsize=7, color=FAULT_COLOUR)


def fault_spans(samples: pa.Table, t0_ns: int | None = None) -> list[tuple[float, float, str]]:
    """The faults of a run as (start_s, end_s, label), seconds since ``t0_ns`` (default:
    the run's first sample), from its fault rows (``lab.history.phases``); a fault never healed
    ends at the run's last sample."""
    from lab.history.phases import HEAL, START, fault_events

    t = samples.column("t_start_ns")
    t0 = pc.min(t).as_py() if t0_ns is None else t0_ns
    last = pc.max(pc.add(t, samples.column("latency_ns"))).as_py()
    starts: dict[int, object] = {}
    spans = []
    for event in fault_events(samples):
        if event.event == START:
            starts[event.number] = event
        elif event.event == HEAL and event.number in starts:
            begun = starts.pop(event.number)
            spans.append(((begun.t_ns - t0) / 1e9, (event.t_ns - t0) / 1e9, begun.kind))
    for begun in starts.values():
        spans.append(((begun.t_ns - t0) / 1e9, (last - t0) / 1e9, begun.kind))
    return sorted(spans)


TIMELINE_OPS = {"put": "put", "get": "get (deliveries)"}


def timeline_figure(samples: pa.Table, *, bin_s: float = 0.1, faults: Sequence[tuple[float, float, str]] = (),
                    title: str | None = None, path=None) -> Figure:
    """One run over time: two panels sharing x (seconds since the run's first sample).

    Top: ok operations completed per bin, per op (puts; gets that delivered a message),
    in ops/s. Bottom: latency p50 and p99 of the ok operations completed in each bin, from
    the bin's own ``LogHistogram`` (log axis, decade labels with units). Each fault
    (start_s, end_s, label) is shaded in both panels and labelled in the top one.
    Saved as PNG at ``path`` if given.
    """
    if bin_s <= 0:
        raise ValueError(f"bin_s must be positive, got {bin_s}")
    if samples.num_rows == 0:
        raise ValueError("no samples to draw")
    t0 = pc.min(samples.column("t_start_ns")).as_py()
    fig = Figure(figsize=(10, 5.6 + (0.3 if title else 0)))
    top, bottom = fig.subplots(2, 1, sharex=True)
    series = {}
    end_s = 0.0
    for op in TIMELINE_OPS:
        rows = ok_ops(samples, op)
        if rows.num_rows == 0:
            continue
        latency = rows.column("latency_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        done = (rows.column("t_start_ns").to_numpy(zero_copy_only=False).astype(np.int64) + latency - t0) / 1e9
        series[op] = (done, latency)
        end_s = max(end_s, float(done.max()))
    end_s = max([end_s, *(end for _, end, _ in faults)])
    edges = np.arange(0.0, end_s + bin_s, bin_s)
    if edges.size < 2:
        edges = np.array([0.0, bin_s])
    lines = {}
    for op, (done, latency) in series.items():
        counts, _ = np.histogram(done, edges)
        top.step(edges[:-1], counts / bin_s, where="post", color=_OP_COLOURS[op], linewidth=1.2,
                 label=TIMELINE_OPS[op])
        which = np.clip(np.searchsorted(edges, done, side="right") - 1, 0, edges.size - 2)
        order = np.argsort(which, kind="stable")
        splits = np.flatnonzero(np.diff(which[order])) + 1
        p50 = np.full(edges.size - 1, np.nan)  # a bin without operations is a gap in the line
        p99 = np.full(edges.size - 1, np.nan)
        for chunk in np.split(order, splits):
            if chunk.size == 0:
                continue
            h = LogHistogram()
            h.add_many(latency[chunk])
            p50[which[chunk[0]]], p99[which[chunk[0]]] = h.quantile(0.50), h.quantile(0.99)
        lines[op] = (edges[:-1] + bin_s / 2, p50, p99)
    top.set_ylabel("ok ops/s")
    top.set_ylim(bottom=0)
    top.set_title(f"throughput per {bin_s * 1000:g} ms", fontsize=9)
    values = np.concatenate([np.concatenate([a, b]) for _, a, b in lines.values()]) if lines else np.array([])
    scale = _decade_axis(bottom, values[np.isfinite(values) & (values > 0)])
    for op, (mids, p50, p99) in lines.items():
        for quantile, ns, style in (("p50", p50, "-"), ("p99", p99, ":")):
            ns = np.where(ns > 0, ns, np.nan)  # 0 ns has no place on a log axis
            bottom.plot(mids, ns / scale, color=_OP_COLOURS[op], linestyle=style, linewidth=1.0, marker=".",
                        markersize=2, label=f"{op} {quantile}")
    bottom.set_ylabel("latency")
    bottom.set_title(f"latency per {bin_s * 1000:g} ms (p50 solid, p99 dotted)", fontsize=9)
    bottom.set_xlabel("seconds since the run's first sample")
    bottom.set_xlim(0, edges[-1])
    for ax in (top, bottom):
        fault_bands(ax, faults, label=True)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    return _finish(fig, title, path)


_OP_COLOURS = {"put": "#1f77b4", "get": "#2ca02c"}


VERDICT_COLOURS = {VALID: "#4caf50", ALLOWED: "#ffb300", INVALID: "#e53935"}
VERDICT_LEVEL = {VALID: 0, ALLOWED: 1, INVALID: 2}


def verdict_grid(ax, cells: Mapping[tuple[str, str], tuple[str, str]], title: str | None = None) -> None:
    """On ``ax``: ``cells`` maps (row, column) to (verdict, text); rows and columns in
    first-seen order; each cell coloured by its verdict (valid green, allowed amber,
    invalid red; no cell: blank, marked "not run") with its text on it."""
    from matplotlib.colors import ListedColormap

    columns = list(dict.fromkeys(c for _, c in cells))
    labels = list(dict.fromkeys(r for r, _ in cells))
    grid = [[VERDICT_LEVEL[cells[(l, c)][0]] if (l, c) in cells else math.nan for c in columns] for l in labels]
    ax.imshow(grid, cmap=ListedColormap([VERDICT_COLOURS[v] for v in (VALID, ALLOWED, INVALID)]), vmin=0, vmax=2,
              aspect="auto")
    for i, label in enumerate(labels):
        for j, column in enumerate(columns):
            cell = cells.get((label, column))
            if cell is not None:
                ax.text(j, i, cell[1], ha="center", va="center", fontsize=7)
            else:  # a combination that did not run (a fault schedule live on the in-process control)
                ax.text(j, i, "not run", ha="center", va="center", fontsize=7, color="grey")
    ax.set_xticks(range(len(columns)), columns, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)


def verdict_legend(figure: Figure) -> None:
    from matplotlib.patches import Patch

    figure.legend(handles=[Patch(color=c, label=v) for v, c in VERDICT_COLOURS.items()], loc="outside lower center",
                  ncols=3, fontsize=8)


def verdict_heatmap(cells: Mapping[tuple[str, str], tuple[str, str]], *, title: str, path=None) -> Figure:
    """A figure of one ``verdict_grid`` and a legend of its colours: ``lab matrix``'s heat
    map (rows: designs and options, columns: scenarios) and the notebooks' verdict grids.
    Saved as PNG at ``path`` (120 dpi) if given."""
    columns = set(c for _, c in cells)
    labels = set(r for r, _ in cells)
    figure = Figure(figsize=(max(6.0, 2.5 + 0.8 * len(columns)), 1.6 + 0.45 * len(labels)), layout="constrained")
    verdict_grid(figure.subplots(), cells, title)
    verdict_legend(figure)
    if path is not None:
        figure.savefig(path, dpi=120)
    return figure


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


PHASE_MARKERS = {"steady": "o", "fault": "X", "heal": "s"}


def phase_figure(latency: Sequence[Mapping], throughput: Sequence[Mapping], *, ops: Sequence[str] = ("put", "e2e"),
                 title: str | None = None, path=None) -> Figure:
    """Fault phase against healed phase, per design: one latency panel per op in ``ops``
    (entries of ``latency``: ``label``, ``design`` (or ``backend``), ``op``, ``phase``, ``p50_ns``,
    ``p99_ns``; a marker at p50 with a line up to p99, log axis with decade labels) and a
    throughput panel (entries of ``throughput``: ``label``, ``design``, ``op``, ``phase``,
    ``ops_per_s``; bars). Each design's label gets one slot per phase (steady, fault,
    heal, marked o / X / s), the fault slots shaded as faults are everywhere."""
    labels = list(dict.fromkeys([*(r["label"] for r in latency), *(r["label"] for r in throughput)]))
    if not labels:
        raise ValueError("nothing to draw")
    phases = [p for p in PHASE_MARKERS if any(r["phase"] == p for r in [*latency, *throughput])]
    width = 1.0 / (len(phases) + 1)

    def x(label: str, phase: str) -> float:
        return labels.index(label) + (phases.index(phase) - (len(phases) - 1) / 2) * width

    tput_ops = sorted(dict.fromkeys(r["op"] for r in throughput), key=lambda op: (op != "put", op))  # puts first
    panels = len(ops) + len(tput_ops)
    fig = Figure(figsize=(max(7.0, 1.1 * len(labels) + 3), 2.9 * panels + (0.4 if title else 0)), layout="constrained")
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    for ax, op in zip(axes, ops):
        rows = [r for r in latency if r["op"] == op]
        values = np.array([v for r in rows for v in (r["p50_ns"], r["p99_ns"]) if v == v and v and v > 0])
        scale = _decade_axis(ax, values)
        for r in rows:
            if not (r["p50_ns"] == r["p50_ns"]):
                continue
            at, c = x(r["label"], r["phase"]), colour(r.get("design", r.get("backend", "")))
            ax.plot([at, at], [r["p50_ns"] / scale, r["p99_ns"] / scale], color=c, linewidth=1.4)
            ax.plot([at], [r["p50_ns"] / scale], marker=PHASE_MARKERS[r["phase"]], color=c, markersize=6,
                    linestyle="none")
            ax.plot([at], [r["p99_ns"] / scale], marker="_", color=c, markersize=9, linestyle="none")
        ax.set_ylabel(f"{op} latency")
        ax.set_title(f"{op} latency: marker p50, line up to p99", fontsize=9)
    for ax, op in zip(axes[len(ops):], tput_ops):
        for r in (r for r in throughput if r["op"] == op):
            ax.bar(x(r["label"], r["phase"]), r["ops_per_s"], width=width * 0.9,
                   color=colour(r.get("design", r.get("backend", ""))),
                   alpha={"steady": 0.45, "fault": 0.95, "heal": 0.7}[r["phase"]], edgecolor="black", linewidth=0.5)
        ax.set_ylabel(f"ok {op}/s")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{op} throughput per phase", fontsize=9)
    for ax in axes:
        if "fault" in phases:
            fault_bands(ax, [(x(l, "fault") - width / 2, x(l, "fault") + width / 2, "") for l in labels], label=False)
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    from matplotlib.lines import Line2D

    fig.legend(handles=[Line2D([], [], marker=m, color="black", linestyle="none", label=p)
                        for p, m in PHASE_MARKERS.items() if p in phases],
               loc="outside upper right", ncols=len(phases), fontsize=8, title="phase (fault: shaded)",
               title_fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    if path is not None:
        fig.savefig(path, dpi=110)
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
    return _finish(fig, title, path)


# --- live-vs-sim and load tests


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
    return _finish(fig, title, path)


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
    values = [v for _, _, v in points]
    low = 2.0 ** min(-1, math.floor(math.log2(min(values))))
    high = 2.0 ** max(1, math.ceil(math.log2(max(values))))
    ax.set_ylim(low, high)
    ax.yaxis.set_major_locator(LogLocator(base=2.0, subs=(1.0,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _ratio_label(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("sim / live")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.set_title("calibrated sim against live (green: the goal)", fontsize=10)
    ax.legend(fontsize=7)
    return _finish(fig, title, path)


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
                x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
                step = x[-1] - x[-2] if x.size > 1 else 1.0
                ax.step(np.append(x, x[-1] + step), np.append(y, y[-1]), where="post", color=colour(design),
                        linestyle=line_style(world), linewidth=1.3, label=f"{design} ({world})")
        ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_title(panel, fontsize=10)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right", ncol=2)
    axes[-1].set_xlabel(xlabel)
    return _finish(fig, title, path)
