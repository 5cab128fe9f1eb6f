"""Plots that carry a session (issue 27): time is the session's across resumes (a gap, not a
diagonal), a reopened session has the live axes, labels never overlap, legends sit outside the
data."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtGui import QColor

from app.qt_plots import MIN_LABEL_PX, PowersOfTwoAxis, QtLivePlots
from tuner import api


def test_loss_scale_ticks_are_powers_of_two_that_never_touch(qtbot) -> None:
    axis = PowersOfTwoAxis(orientation="left")
    axis.setLogMode(False, True)
    for low, high, pixels in [(2**14, 2**15, 150), (1, 2**24, 100), (2**10, 2**30, 400)]:
        ((spacing, values),) = axis.tickValues(math.log10(low), math.log10(high), pixels)
        span = math.log10(high) - math.log10(low)
        gap_px = spacing / span * pixels
        assert len(values) == 1 or gap_px >= MIN_LABEL_PX, (low, high, gap_px)
        powers = [v / math.log10(2) for v in values]
        assert all(abs(p - round(p)) < 1e-9 for p in powers)
    labels = axis.tickStrings([15 * math.log10(2), 24 * math.log10(2)], 1.0, 1.0)
    assert labels == ["2\u00b9\u2075", "2\u00b2\u2074"]


def test_the_memory_line_breaks_where_a_resumed_search_begins(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.add_memory([0.0, 1.0, 2.0], [100.0, 120.0, 110.0])
    plots.mark_peak(2.5, 130.0)
    assert plots.memory_end() == 2.5
    plots.break_memory()
    plots.add_memory([4.5, 5.5], [105.0, 115.0])
    plots.redraw(everything=True)
    xs, ys = plots.memory_curve.getData()
    assert list(xs) == [0.0, 1.0, 2.0, 2.5, 4.5, 5.5]  # time goes on: it never restarts at 0
    assert np.isnan(ys[3]) and np.isfinite(ys[[0, 1, 2, 4, 5]]).all()
    assert plots.memory_curve.opts["connect"] == "finite"  # so no line crosses the gap


def test_legends_sit_outside_the_data(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.resize(900, 500)
    plots.show()
    qtbot.waitExposed(plots)
    for plot in (plots.memory, plots.throughput, plots.loss_scale, plots.loss):
        item = plot.getPlotItem()
        legend = item.legend
        assert legend.items, "the plot's named items are in its legend"
        data = item.vb.sceneBoundingRect()
        assert not legend.sceneBoundingRect().intersects(data)


def test_a_reopened_session_plots_memory_over_seconds(make_window) -> None:
    window = make_window()

    def trial(number: int, total_s: float, peak: float) -> api.StoredTrial:
        spec = api.TrialSpec.create("builtin:mlp", "float32", 16 * (number + 1), device="cpu")
        result = api.TrialResult(
            spec,
            api.TrialStatus.OK,
            samples_per_second=1000.0,
            peak_memory_mb=peak,
            timings=api.Timings(total_s=total_s),
        )
        return api.StoredTrial(number, "batch", result, "COMPLETE")

    view = api.SessionView(
        "old", "builtin:mlp", None, {}, {}, {}, (trial(0, 4.0, 300.0), trial(1, 6.0, 350.0)), None
    )
    window.show_session(view, None)
    # Seconds of the session, as a live search has them (each trial after those before it),
    # not the trials' numbers 0 and 1.
    assert window.plots._peaks == [(4.0, 300.0), (10.0, 350.0)]


def test_legend_symbols_wear_their_colours_before_any_point(qtbot) -> None:
    """A legend sample is drawn in its series' colour even while the series has no point (a
    policy not measured yet, or a reopened session without it): it showed a grey dot."""
    from app.qt_plots import POLICY_COLOURS

    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.resize(900, 500)
    plots.show()
    qtbot.waitExposed(plots)
    plots.add_throughput("float32", 64, 1000.0)  # one policy with a point, the others without
    plots.redraw(everything=True)
    expected = {**POLICY_COLOURS, "best": "#dc2626", "skipped (overflow)": "#ef4444"}
    for plot in (plots.throughput, plots.loss_scale):
        image = plot.grab().toImage()
        for sample, label in plot.getPlotItem().legend.items:
            name = label.text
            if name not in expected:
                continue
            centre = plot.mapFromScene(sample.sceneBoundingRect().center())
            want = QColor(expected[name])
            near = [
                QColor(image.pixel(centre.x() + dx, centre.y() + dy))
                for dx in range(-3, 4)
                for dy in range(-3, 4)
            ]
            assert any(_close(c, want) for c in near), name


def _close(a, b) -> bool:
    return all(abs(x - y) <= 24 for x, y in zip(a.getRgb()[:3], b.getRgb()[:3], strict=True))
