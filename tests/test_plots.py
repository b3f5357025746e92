"""Latency charts, checked on the figure objects: ticks, units, colours, line styles, notes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lab.backends import REGISTRY
from lab.plots import WORLD_STYLES, colour, latency_figure

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
            assert line.get_color() == REGISTRY[design].colour and line.get_linestyle() == WORLD_STYLES[world]
    assert WORLD_STYLES == {"sim": "--", "live": "-"} and REGISTRY["ideal"].colour == "#7f7f7f"
    assert len({entry.colour for entry in REGISTRY.values()}) == len(REGISTRY)  # one colour per design
    assert colour("newcomer") == colour("newcomer") and colour("newcomer") not in {e.colour for e in REGISTRY.values()}


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
