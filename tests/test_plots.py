"""Latency charts, checked on the figure objects: ticks, units, colours, line styles, notes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.design.registry import REGISTRY, SPARE_COLOURS
from lab.present.plots import latency_figure
from lab.present.plots_style import WORLD_STYLES, colour

MS = 1e6
rng = np.random.default_rng(7)


def spread(low_ms: float, high_ms: float, n: int = 5000) -> np.ndarray:
    """Latencies (ns) spread log-uniformly between two bounds."""
    return np.exp(rng.uniform(math.log(low_ms * MS), math.log(high_ms * MS), n))


def lines_of(ax) -> dict[str, object]:
    """The drawn lines by label (not the legend's empty note entries)."""
    return {line.get_label(): line for line in ax.get_lines() if len(line.get_xdata())}


def test_the_latency_axis_has_labelled_decades_only():
    ax = latency_figure({"p": {("kestrel", "sim"): spread(0.15, 40)}}).axes[0]
    low, high = ax.get_ylim()
    majors = [v for v in ax.yaxis.get_majorticklocs() if low <= v <= high]
    assert len(majors) >= 2 and all(math.isclose(math.log10(v), round(math.log10(v))) for v in majors)
    assert [t.get_text() for t in ax.yaxis.get_ticklabels()] and all(
        t.get_text() == "" for t in ax.yaxis.get_ticklabels(minor=True))
    assert [t.get_text() for t in ax.yaxis.get_ticklabels() if low <= t.get_position()[1] <= high] == \
        ["1 ms", "10 ms", "100 ms"]


def test_units_switch_to_seconds_past_1000_ms():
    fig = latency_figure({"fast": {("kestrel", "sim"): spread(1, 900)},
                          "slow": {("queuefka", "sim"): spread(200, 4000)}})
    fast, slow = fig.axes[:2]
    assert lines_of(slow)["queuefka (sim)"].get_ydata().max() == pytest.approx(4.0, rel=0.02)
    assert [t.get_text() for t in slow.yaxis.get_ticklabels()
            if slow.get_ylim()[0] <= t.get_position()[1] <= slow.get_ylim()[1]] == ["100 ms", "1 s", "10 s"]
    assert [t.get_text() for t in fast.yaxis.get_ticklabels()
            if fast.get_ylim()[0] <= t.get_position()[1] <= fast.get_ylim()[1]] == ["10 ms", "100 ms", "1 s"]


def test_every_chart_draws_a_design_in_one_colour_and_a_world_in_one_line_style():
    series = {(d, w): spread(0.1 * (i + 1), 5 * (i + 1)) for i, d in enumerate(("ideal", "kestrel", "queuefka"))
              for w in ("sim", "live")}
    fig = latency_figure({"a": series, "b": {k: series[k] for k in list(series)[::-1]}})
    for ax in fig.axes:
        drawn = lines_of(ax)
        assert len(drawn) == 6
        for (design, world) in series:
            line = drawn[f"{design} ({world})"]
            assert line.get_color() == colour(design) and line.get_linestyle() == WORLD_STYLES[world]
    assert WORLD_STYLES == {"sim": "--", "live": "-"} and colour("ideal") == "#7f7f7f"
    own = [name for name in REGISTRY if REGISTRY[name].colour is None]  # each declares its own, in its Backend
    assert len({colour(name) for name in own}) == len(own) >= 9  # one colour per design and broker
    assert not {colour(name) for name in own} & set(SPARE_COLOURS)  # the spares stay free for plug-ins
    assert colour("newcomer") == colour("newcomer") and colour("newcomer") not in {colour(name) for name in own}


def test_lines_that_coincide_are_named_in_the_legend():
    same = spread(0.2, 9)
    ax = latency_figure({"p": {("ideal", "sim"): same, ("kestrel", "sim"): same * 1.003,
                               ("queuefka", "sim"): same * 3}}).axes[0]
    notes = [t.get_text() for t in ax.get_legend().get_texts() if "=" in t.get_text()]
    assert notes == ["ideal (sim) = kestrel (sim)\n(the same line)"]
    apart = latency_figure({"p": {("ideal", "sim"): same, ("kestrel", "sim"): same * 1.05}}).axes[0]
    assert not [t for t in apart.get_legend().get_texts() if "=" in t.get_text()]


def test_nothing_to_draw_is_a_clear_error():
    with pytest.raises(ValueError, match="no latencies"):
        latency_figure({})


# ---------------------------------------------------------------- timeline of one run

def synthetic_run(pause=(2.0, 2.4), end_s=4.0, rate=1000):
    """A run's samples: puts and deliveries at ``rate``/s each, none completing inside the
    pause, five puts just after it held as long as the pause; a fault's start and heal rows."""
    import pyarrow as pa

    from lab.history.phases import fault_text
    from lab.history.record import SAMPLE_SCHEMA

    t0 = 1_700_000_000 * 10**9  # epoch ns, as the live world writes them
    rows = []
    first_after = round(pause[1] * rate)
    for i in range(round(end_s * rate)):
        t = i / rate
        if round(pause[0] * rate) <= i < first_after:
            continue
        held = first_after < i <= first_after + 5  # five: their bin (105 puts) has them at p99
        put_ns = int((pause[1] - pause[0]) * 1e9) if held else 200_000
        rows.append(("put", f"p:{i}", int(t0 + t * 1e9), put_ns, "ok"))
        rows.append(("get", f"p:{i}", int(t0 + t * 1e9) + 300_000, 3_000_000, "ok"))
        rows.append(("get", None, int(t0 + t * 1e9), 100_000, "fail"))  # empty polls: no deliveries
    for event, at in (("start", pause[0]), ("heal", pause[1])):
        rows.append(("fault", None, int(t0 + at * 1e9), 0, "info", fault_text(event, 0, "pause", "s0")))
    columns = {name: [] for name in SAMPLE_SCHEMA.names}
    for row in rows:
        op, msg, t, latency, outcome, *error = row
        for name, value in (("run_id", "r"), ("world", "sim"), ("backend", "kestrel"), ("scenario", "x"),
                            ("node", "s0" if op == "fault" else "c0"), ("client", "nemesis" if op == "fault" else "c0"),
                            ("op", op), ("queue", "q"), ("msg_id", msg), ("t_start_ns", t), ("latency_ns", latency),
                            ("outcome", outcome), ("error", error[0] if error else None), ("bytes", 100),
                            ("phase", "steady"), ("delay_ns", None)):
            columns[name].append(value)
    return pa.table(columns, schema=SAMPLE_SCHEMA)


def band_of(patch) -> tuple[float, float]:
    """A shaded band's (start, end) in data units (matplotlib draws axvspan as a Rectangle
    from 3.9, a Polygon before)."""
    if hasattr(patch, "get_width"):
        return (round(patch.get_x(), 6), round(patch.get_x() + patch.get_width(), 6))
    xs = np.asarray(patch.get_xy())[:, 0]
    return (round(xs.min(), 6), round(xs.max(), 6))


def test_a_timeline_shows_throughput_and_latency_per_bin_with_the_fault_shaded_and_labelled():
    from lab.present.plots_faults import FAULT_COLOUR, fault_spans, timeline_figure

    samples = synthetic_run()
    spans = fault_spans(samples)
    assert spans == [(pytest.approx(2.0), pytest.approx(2.4), "pause")]
    fig = timeline_figure(samples, faults=spans, title="kestrel gc")
    top, bottom = fig.axes
    assert top.get_shared_x_axes().joined(top, bottom)
    assert top.get_ylabel() == "ok ops/s" and bottom.get_xlabel() == "seconds since the run's first sample"
    put, get = lines_of(top)["put"], lines_of(top)["get (deliveries)"]
    x, y = np.asarray(put.get_xdata()), np.asarray(put.get_ydata())
    assert y[(x > 0.5) & (x < 1.5)] == pytest.approx(1000, rel=0.02)  # 100 puts per 100 ms: 1,000/s
    assert y[(x >= 2.05) & (x < 2.35)].max() == 0  # nothing completes inside the pause
    # empty polls are not deliveries: gets count the same 1,000/s
    gx, gy = np.asarray(get.get_xdata()), np.asarray(get.get_ydata())
    assert gy[(gx > 0.5) & (gx < 1.5)] == pytest.approx(1000, rel=0.02)
    # latency: p50 of gets 3 ms in every bin with deliveries, a gap (no point) inside the pause
    p50 = lines_of(bottom)["get p50"]
    lx, ly = np.asarray(p50.get_xdata()), np.asarray(p50.get_ydata())
    assert ly[(lx > 0.5) & (lx < 1.5)] == pytest.approx(3.0, rel=0.02)  # drawn in ms
    assert np.isnan(ly[(lx > 2.05) & (lx < 2.35)]).all()
    # the held puts (400 ms) are their bin's p99
    p99 = lines_of(bottom)["put p99"]
    px, py = np.asarray(p99.get_xdata()), np.asarray(p99.get_ydata())
    assert np.nanmax(py) == pytest.approx(400, rel=0.02) and 2.7 < px[np.nanargmax(py)] < 2.9
    # decade labels with units on the latency axis
    low, high = bottom.get_ylim()
    labels = [t.get_text() for t in bottom.yaxis.get_ticklabels() if low <= t.get_position()[1] <= high]
    assert labels == ["100 µs", "1 ms", "10 ms", "100 ms", "1 s"]
    # the fault: one shaded band from 2.0 to 2.4 s in each panel, labelled
    for ax in (top, bottom):
        bands = [p for p in ax.patches if p.get_label() == "_fault"]
        assert len(bands) == 1
        assert band_of(bands[0]) == (pytest.approx(2.0), pytest.approx(2.4))
        assert any(t.get_text() == "pause" and t.get_color() == FAULT_COLOUR for t in ax.texts)
    assert fig._suptitle.get_text() == "kestrel gc"


def test_a_timeline_switches_to_seconds_and_refuses_nonsense():
    from lab.present.plots_faults import timeline_figure

    samples = synthetic_run(pause=(1.0, 3.5))  # the held puts take 2.5 s
    bottom = timeline_figure(samples).axes[1]
    low, high = bottom.get_ylim()
    labels = [t.get_text() for t in bottom.yaxis.get_ticklabels() if low <= t.get_position()[1] <= high]
    assert labels[-1] == "10 s" and "1 s" in labels and "100 µs" in labels
    assert not [p for p in bottom.patches if p.get_label() == "_fault"]  # no faults given: none shaded
    with pytest.raises(ValueError, match="bin_s"):
        timeline_figure(samples, bin_s=0)
    with pytest.raises(ValueError, match="no samples"):
        timeline_figure(samples.slice(0, 0))


def test_fault_bands_label_each_fault():
    from matplotlib.figure import Figure

    from lab.present.plots_faults import fault_bands

    ax = Figure().subplots()
    ax.set_xlim(0, 10)
    fault_bands(ax, [(1, 2, "partition"), (5, 7.5, "crash")])
    assert sorted(t.get_text() for t in ax.texts) == ["crash", "partition"]
    assert sorted(band_of(p) for p in ax.patches) == [(1, 2), (5, 7.5)]


# ---------------------------------------------------------------- verdicts, throughput, comparisons, phases

def test_the_verdict_heatmap_colours_each_cell_by_its_verdict_and_writes_its_numbers(tmp_path):
    from matplotlib.colors import to_hex

    from lab.present.plots_verdict import VERDICT_COLOURS, verdict_heatmap

    cells = {("kestrel syncJournal=never", "crash-all"): ("allowed", "600/0"),
             ("kestrel syncJournal=never", "split-one"): ("valid", "0/0"),
             ("queuefka", "crash-all"): ("invalid", "3/1\nlate")}
    fig = verdict_heatmap(cells, title="t", path=tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 5_000
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["crash-all", "split-one"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["kestrel syncJournal=never", "queuefka"]
    image = ax.images[0]
    rgba = image.to_rgba(image.get_array())
    assert to_hex(rgba[0][0]) == VERDICT_COLOURS["allowed"] and to_hex(rgba[0][1]) == VERDICT_COLOURS["valid"]
    assert to_hex(rgba[1][0]) == VERDICT_COLOURS["invalid"]
    assert rgba[1][1][3] == 0  # no such cell: blank, and said so
    assert sorted(t.get_text() for t in ax.texts) == ["0/0", "3/1\nlate", "600/0", "not run"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["valid", "allowed", "invalid", "no evidence"]


def test_throughput_bars_are_p50_with_a_p5_to_p95_whisker_in_the_design_colour():
    from matplotlib.figure import Figure

    from lab.present.plots import throughput_bars

    ax = Figure().subplots()
    throughput_bars(ax, [{"design": "kestrel", "world": "sim", "p5": 900, "p50": 1000, "p95": 1100},
                         {"design": "queuefka", "world": "live", "p5": 400, "p50": 800, "p95": 850}], "t")
    bars = ax.patches
    assert [b.get_height() for b in bars] == [1000, 800]
    assert bars[0].get_facecolor()[:3] == pytest.approx(matplotlib_rgb(colour("kestrel")))
    assert bars[0].get_hatch() == "//" and bars[1].get_hatch() is None  # sim hatched
    assert bars[0].get_linestyle() == "--" and bars[1].get_linestyle() == "-"
    whiskers = [c for c in ax.collections if len(c.get_segments())]
    spans = sorted(tuple(sorted(s[:, 1])) for c in whiskers for s in c.get_segments())
    assert spans == [(400, 850), (900, 1100)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["kestrel (sim)", "queuefka (live)"]


def matplotlib_rgb(hex_colour: str):
    from matplotlib.colors import to_rgb

    return to_rgb(hex_colour)


def test_the_compare_figure_has_a_column_per_workload_and_the_verdicts_below(tmp_path):
    from lab.present.plots import compare_figure

    series = {("kestrel", "sim"): spread(0.2, 2), ("kestrel", "live"): spread(0.3, 5)}
    fig = compare_figure(
        {"steady": [{"design": "kestrel", "world": "sim", "p5": 990, "p50": 1000, "p95": 1010}],
         "net-split": [{"design": "kestrel", "world": "live", "p5": 900, "p50": 1000, "p95": 1100}]},
        {"steady": {"put latency": series, "end to end": series}, "net-split": {"put latency": series}},
        {("kestrel (sim)", "steady"): ("valid", "0/0"), ("kestrel (live)", "net-split"): ("allowed", "3/0")},
        title="t", path=tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 20_000
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:3] == ["steady: puts/s (p5, p50, p95)", "steady: put latency", "steady: end to end"]
    assert titles[3:6] == ["net-split: puts/s (p5, p50, p95)", "net-split: put latency", "net-split: end to end"]
    assert not lines_of(fig.axes[5])  # net-split has no end-to-end series: an empty panel
    grid = fig.axes[-1]
    assert [t.get_text() for t in grid.get_xticklabels()] == ["steady", "net-split"]
    assert sorted(t.get_text() for t in grid.texts) == ["0/0", "3/0", "not run", "not run"]
    # a latency panel keeps the decade labels
    assert all(t.get_text().endswith(("µs", "ms", "s")) for t in fig.axes[1].yaxis.get_ticklabels()
               if t.get_text())


def test_the_phase_figure_puts_each_phase_of_a_design_in_its_slot_and_shades_the_fault():
    from lab.present.plots_faults import FAULT_COLOUR, PHASE_MARKERS, phase_figure

    latency = [{"label": label, "design": label.split()[0], "op": op, "phase": phase,
                "p50_ns": (5e6 if phase == "fault" else 1e6) * k, "p99_ns": (2e9 if phase == "fault" else 4e6) * k}
               for k, label in enumerate(("kestrel a", "queuefka"), start=1) for op in ("put", "e2e")
               for phase in ("steady", "fault", "heal")]
    throughput = [{"label": row["label"], "design": row["design"], "op": "get", "phase": row["phase"],
                   "ops_per_s": 100.0 if row["phase"] == "fault" else 300.0} for row in latency if row["op"] == "put"]
    fig = phase_figure(latency, throughput, title="t")
    put, e2e, gets = fig.axes
    assert [t.get_text() for t in gets.get_xticklabels()] == ["kestrel a", "queuefka"]
    markers = [line for line in put.get_lines() if line.get_marker() in PHASE_MARKERS.values()]
    assert len(markers) == 6
    fault = [m for m in markers if m.get_marker() == PHASE_MARKERS["fault"]]
    assert sorted(float(m.get_xdata()[0]) for m in fault) == pytest.approx([0.0, 1.0])  # the middle slot
    assert sorted(float(m.get_ydata()[0]) for m in fault) == pytest.approx([0.005, 0.01])  # p50 in s: p99 past 1 s
    assert fault[0].get_color() == colour("kestrel")
    # the fault p99 of 2-4 s: e2e drawn in seconds, its axis labelled up to 10 s
    low, high = e2e.get_ylim()
    labels = [t.get_text() for t in e2e.yaxis.get_ticklabels() if low <= t.get_position()[1] <= high]
    assert labels[0] == "1 ms" and labels[-1] == "10 s"
    bars = sorted((b.get_x() + b.get_width() / 2, b.get_height()) for b in gets.patches if b.get_label() != "_fault")
    assert [h for _, h in bars] == [300, 100, 300, 300, 100, 300]
    bands = [p for p in gets.patches if p.get_label() == "_fault"]
    assert len(bands) == 2 and all(p.get_facecolor()[:3] == pytest.approx(matplotlib_rgb(FAULT_COLOUR))
                                   for p in bands)
    assert sorted(round(sum(band_of(p)) / 2, 6) for p in bands) == [0, 1]  # centred on the fault slots
