"""The live-vs-sim and load-test charts (lab.present.plots_load), checked on the figure
objects: a design's colour, a world's line style, the axes' labels, the goal bands."""

from __future__ import annotations

import numpy as np
import pytest

from lab.present.plots_load import ratio_figure, saturation_figure, series_figure
from lab.present.plots_style import WORLD_STYLES, colour


def lines_of(ax) -> dict[str, object]:
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def visible_labels(ax) -> list[str]:
    low, high = ax.get_ylim()
    return [t.get_text() for t in ax.yaxis.get_ticklabels() if low <= t.get_position()[1] <= high]


def test_the_saturation_ramp_draws_each_design_and_world_and_rings_the_most():
    ramps = {("kestrel", "live"): {1: 4700, 2: 4800, 4: 6150, 8: 6470, 16: 6620},
             ("kestrel", "sim"): {1: 5900, 2: 10900, 4: 13260, 8: 13250},
             ("queuefka", "live"): {1: 2100, 2: 3900, 4: 3800}}
    ax = saturation_figure(ramps, path=None).axes[0]
    drawn = lines_of(ax)
    for design, world in ramps:
        line = drawn[f"{design} ({world})"]
        assert line.get_color() == colour(design) and line.get_linestyle() == WORLD_STYLES[world]
        assert list(line.get_xdata()) == sorted(ramps[design, world])
    rings = [line for line in ax.get_lines() if line.get_label().startswith("_") and line.get_markersize() == 9]
    assert sorted((line.get_xdata()[0], line.get_ydata()[0]) for line in rings) == [(2, 3900), (4, 13260), (16, 6620)]
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8", "16"]
    assert visible_labels(ax) == ["2,000/s", "5,000/s", "10,000/s", "20,000/s"]


def test_the_ratio_chart_puts_a_dot_per_design_and_metric_and_shades_each_goal(tmp_path):
    ratios = {"ideal": {"put_p50": 0.74, "put_p99": 0.28, "e2e_p50": 0.55, "e2e_p99": 0.16},
              "kestrel": {"put_p50": 0.95, "put_p99": 1.1, "e2e_p50": None, "e2e_p99": 2.5}}
    fig = ratio_figure(ratios, {"p50": 0.10, "p99": 0.25}, path=tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 5_000
    ax = fig.axes[0]
    drawn = lines_of(ax)
    assert list(drawn["ideal"].get_ydata()) == [0.74, 0.28, 0.55, 0.16]
    assert list(drawn["kestrel"].get_ydata()) == [0.95, 1.1, 2.5]  # None is not drawn
    assert drawn["kestrel"].get_color() == colour("kestrel")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["put p50", "put p99", "e2e p50", "e2e p99"]
    bands = [c.get_paths()[0].vertices[:, 1] for c in ax.collections]
    assert [(round(b.min(), 2), round(b.max(), 2)) for b in bands] == [(0.9, 1.1), (0.75, 1.25)] * 2
    assert "1×" in visible_labels(ax) and "1/2×" in visible_labels(ax) and "2×" in visible_labels(ax)


def test_series_panels_share_the_time_axis_and_the_last_value_holds_a_whole_step():
    seconds = np.arange(5)
    fig = series_figure({"puts": {("kestrel", "live"): (seconds, [10, 20, 30, 40, 50]),
                                  ("primer", "live"): (seconds[:3], [5, 5, 5])},
                         "deliveries": {("kestrel", "live"): (seconds, [1, 2, 3, 4, 5])}}, ylabel="ok ops/s")
    top, bottom = fig.axes
    assert top.get_shared_x_axes().joined(top, bottom)
    kestrel = lines_of(top)["kestrel (live)"]
    assert kestrel.get_color() == colour("kestrel") and kestrel.get_linestyle() == WORLD_STYLES["live"]
    assert list(kestrel.get_xdata()) == [0, 1, 2, 3, 4, 5] and list(kestrel.get_ydata())[-2:] == [50, 50]
    assert top.get_ylim()[0] == 0 and top.get_title() == "puts"


@pytest.mark.parametrize("draw, error", [
    (lambda: saturation_figure({}), "no ramp"),
    (lambda: ratio_figure({"ideal": {"put_p50": None}}, {"p50": 0.1}), "no ratios"),
    (lambda: series_figure({"p": {("ideal", "live"): ([], [])}}), "no series"),
])
def test_nothing_to_draw_is_a_clear_error(draw, error):
    with pytest.raises(ValueError, match=error):
        draw()
