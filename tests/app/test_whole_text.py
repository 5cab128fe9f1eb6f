"""Nothing elided that fits (issue 54): a plot's title is whole, on two lines where one does not
fit, and the loss-scale candidates wrap in the Search column instead of scrolling sideways."""

from __future__ import annotations

import pytest

from app.qt_plots import TITLE_ROW, QtLivePlots

TITLE = "Memory over seconds (budget 21,695 MB)"


def _memory_plot(qtbot, width: int):
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.name_use(on_gpu=True)  # the right axis (GPU %) takes its share of the width
    plots.set_budget(21_695.0)
    plots.resize(2 * width, 600)
    plots.show()
    qtbot.waitExposed(plots)
    plot = plots.memory
    qtbot.waitUntil(lambda: abs(plot.width() - width) < 40, timeout=5_000)
    return plots, plot


def test_a_title_too_wide_for_one_line_is_whole_on_two(qtbot) -> None:
    # About what a 1366x768 screen with a larger font leaves the memory plot: one line of the
    # title does not fit beside its two axes, two do.
    _plots, plot = _memory_plot(qtbot, 330)
    item = plot.getPlotItem()
    room = plot.viewport().width()
    one_line = plot._title[1]
    axes = sum(item.getAxis(side).width() for side in ("left", "right"))
    assert one_line > room - axes, "the title fits on one line here: the test proves nothing"
    qtbot.waitUntil(lambda: "<br>" in item.titleLabel.text, timeout=5_000)
    assert plot.title_shown == TITLE
    label = item.titleLabel
    assert label.sceneBoundingRect().right() <= room + 1
    # Its row is as tall as its two lines: neither is cut off.
    assert label.itemRect().height() <= label.size().height() + 1
    assert label.size().height() > TITLE_ROW


def test_a_title_is_cut_only_where_two_lines_do_not_fit_either(qtbot) -> None:
    _plots, plot = _memory_plot(qtbot, 230)
    shown = plot.title_shown
    assert shown.endswith("\u2026")
    assert len(shown) < len(TITLE)


@pytest.mark.parametrize("width, height", [(1280, 720), (1366, 768)])
def test_the_loss_scale_candidates_wrap_in_the_search_column(
    make_window, qtbot, width, height
) -> None:
    window = make_window()
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: window.width() == width and window.height() == height)
    scales = window.setup.loss_scales.list
    texts = [scales.item(i).text() for i in range(scales.count())]
    assert "dynamic from 1024, \u00d72 every 500 steps" in texts
    assert scales.horizontalScrollBar().maximum() == 0  # never scrolls sideways
    viewport = scales.viewport().width()
    for i in range(scales.count()):
        rect = scales.visualItemRect(scales.item(i))
        assert rect.right() <= viewport, (texts[i], rect, viewport)
        # Whole: a text wider than its row wraps, and the row is as tall as its lines.
        metrics = scales.fontMetrics()
        if metrics.horizontalAdvance(texts[i]) > rect.width() - 24:  # the tick box's room
            assert rect.height() >= 2 * metrics.height(), (texts[i], rect)
