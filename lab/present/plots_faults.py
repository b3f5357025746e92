"""Charts of faults over time: one run's timeline and the fault notebooks' phases.

- ``timeline_figure``: one run over time, in bins of 100 ms: ok throughput per operation
  (puts, get deliveries) and latency p50/p99 per bin (each bin's own LogHistogram), with
  every fault shaded and labelled (``fault_bands``; ``fault_spans`` reads them from the
  run's fault rows).
- ``phase_figure``: the fault notebooks' steady / fault / heal phases per design, latency
  p50 to p99 and throughput, the fault slots shaded as fault bands are.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.figure import Figure

from lab.history.record import LogHistogram, ok_ops
from lab.present.plots_style import colour, decade_axis, finish

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
    from lab.history.phases import HEAL, START, FaultEvent, fault_events

    t = samples.column("t_start_ns")
    t0 = pc.min(t).as_py() if t0_ns is None else t0_ns
    last = pc.max(pc.add(t, samples.column("latency_ns"))).as_py()
    starts: dict[int, FaultEvent] = {}
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
    scale = decade_axis(bottom, values[np.isfinite(values) & (values > 0)])
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
    return finish(fig, title, path)


_OP_COLOURS = {"put": "#1f77b4", "get": "#2ca02c"}


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
        scale = decade_axis(ax, values)
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
            fault_bands(ax, [(x(name, "fault") - width / 2, x(name, "fault") + width / 2, "") for name in labels],
                        label=False)
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

