"""Widgets fed a recorded real search's events: fast, no TensorFlow, no worker."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.qt_plots import QtLivePlots
from app.qt_trials import COLUMNS
from tuner import api


def test_replayed_search_fills_table_plots_and_recommendation(
    make_window, qtbot, recorded_events
) -> None:
    window = make_window()
    window.bridge.feed(recorded_events)
    qtbot.waitUntil(lambda: window.recommendation.recommendation is not None, timeout=5_000)
    finished = [e for e in recorded_events if isinstance(e, api.TrialFinished)]
    assert window.table.trials.rowCount() == len(finished)
    rec = window.recommendation.recommendation
    assert rec == next(e for e in recorded_events if isinstance(e, api.Recommended)).recommendation
    window.plots.redraw(everything=True)
    ok = [e for e in finished if e.result.ok]
    plotted = sum(
        len(item.xData)
        for item in window.plots.throughput_points.values()
        if item.xData is not None
    )
    assert plotted == len(ok)
    assert window.plots.baseline_line.isVisible()
    assert window.plots.memory_curve.getData()[0] is not None
    assert "Setup" in window.recommendation.text()
    assert window.session_name == "recorded"


def test_recorded_worker_messages_load_typed_and_round_trip(recorded_events) -> None:
    """The recorded file (written before the messages were typed) loads as typed records,
    none left over as an unread dict, and writing the events out again reads back the same."""
    messages = [e.message for e in recorded_events if isinstance(e, api.WorkerReported)]
    kinds = {type(m) for m in messages}
    assert api.OtherMessage not in kinds
    assert {api.StepMessage, api.PhaseMessage, api.StartedMessage, api.ResultMessage} <= kinds
    first_step = next(m for m in messages if isinstance(m, api.StepMessage))
    assert first_step.phase == "warmup"
    assert first_step.step == 1
    assert first_step.loss > 0
    again = [api.event_from_dict(e.to_dict()) for e in recorded_events]
    assert [e.to_dict() for e in again] == [e.to_dict() for e in recorded_events]


def test_sorting_and_selecting_a_trial_shows_its_curves(
    make_window, qtbot, recorded_events
) -> None:
    window = make_window()
    window.bridge.feed(recorded_events)
    qtbot.waitUntil(lambda: window.recommendation.recommendation is not None, timeout=5_000)
    table = window.table
    speed = COLUMNS.index("samples/s")
    table.sortByColumn(speed, table.horizontalHeader().sortIndicatorOrder().DescendingOrder)
    first = table.proxy.index(0, speed).data()
    second = table.proxy.index(1, speed).data()
    assert float(first.replace(",", "")) >= float(second.replace(",", ""))
    selected = []
    table.trialSelected.connect(selected.append)
    table.selectRow(0)
    assert selected
    assert selected[0].result.losses
    window.plots.redraw(everything=True)
    xs, _ys = window.plots.loss_curve.getData()
    assert len(xs) == len(selected[0].result.losses)


def test_every_mixed_trial_shows_its_loss_gap_as_it_finishes(
    make_window, qtbot, recorded_events
) -> None:
    """Not only the recommendation and its alternatives: each trial of a lower precision that
    has a float32 trial at its batch size shows its gap as soon as both ran, with what it was
    compared with in the tooltip; the recommendation's gap is its trial's."""
    window = make_window()
    searched = [e for e in recorded_events if not isinstance(e, api.Recommended)]
    finished = [e for e in searched if isinstance(e, api.TrialFinished)]
    window.bridge.feed(searched)
    qtbot.waitUntil(lambda: window.table.trials.rowCount() == len(finished), timeout=5_000)
    model = window.table.trials
    gap_column = COLUMNS.index("loss gap")
    float32_at = {
        e.result.spec.batch_size: e.number
        for e in reversed(finished)
        if e.result.ok and e.result.spec.setup.precision == "float32"
    }
    mixed = [e for e in finished if e.result.ok and e.result.spec.setup.policy.is_mixed]
    assert {e.result.spec.setup.policy.name for e in mixed} == {"mixed_float16", "mixed_bfloat16"}
    shown = {}
    for i, row in enumerate(model.rows):
        cell = model.index(i, gap_column)
        setup = row.result.spec.setup
        if setup.policy.is_mixed and setup.batch_size in float32_at:
            assert cell.data().endswith("%"), (row.number, setup.label)
            tip = cell.data(Qt.ItemDataRole.ToolTipRole)
            assert f"against float32 trial #{float32_at[setup.batch_size]} " in tip
            shown[setup] = cell.data()
        elif setup.policy.is_mixed:
            assert cell.data() == ""
            assert "no float32 trial" in cell.data(Qt.ItemDataRole.ToolTipRole)
        else:
            assert cell.data() == ""  # float32: what the others are compared with
    assert any(s.policy.name == "mixed_bfloat16" for s in shown)  # the issue saw none
    rec = next(e for e in recorded_events if isinstance(e, api.Recommended)).recommendation
    window.bridge.feed([api.Recommended(rec)])
    qtbot.waitUntil(lambda: window.recommendation.recommendation is not None, timeout=5_000)
    told = [(rec.setup, rec.loss_gap)] + [(a.setup, a.loss_gap) for a in rec.alternatives]
    compared = [(setup, gap) for setup, gap in told if gap is not None and setup in shown]
    assert compared
    for setup, gap in compared:
        assert shown[setup] == f"{gap:.2%}", setup.label


def test_loss_scale_plot_marks_skipped_steps(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.start_trial()
    plots.add_steps(
        [
            api.StepMessage(loss=1.0, loss_scale=32768.0, skipped=True),
            api.StepMessage(loss=0.9, loss_scale=16384.0, skipped=False),
            api.StepMessage(loss=math.inf, loss_scale=16384.0, skipped=True),
        ]
    )
    plots.redraw(everything=True)
    _xs, ys = plots.scale_curve.getData()  # the plot's y axis is logarithmic
    assert [round(10**y) for y in ys] == [32768, 16384, 16384]
    _xs, skipped = plots.skipped_points.getData()
    assert [round(10**y) for y in skipped] == [32768, 16384]  # on the same log axis
    # The view stays around the scale (log10 of 16384..32768), not 10^-308..10^308.
    plots.loss_scale.getPlotItem().getViewBox().updateAutoRange()
    low, high = plots.loss_scale.getPlotItem().getViewBox().viewRange()[1]
    assert 3 < low < 4.3
    assert 4.4 < high < 6


def test_plots_save_one_figure_as_named(qtbot, tmp_path) -> None:
    """Save plots writes the file the user named: one figure of the four plots, a PNG wide
    enough for a report (it wrote four small PNGs beside the name), or an SVG."""
    from PySide6.QtGui import QImage

    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.resize(800, 440)
    plots.add_memory([0, 1, 2], [100, 120, 110])
    png = plots.save(str(tmp_path / "report.png"))
    assert png == str(tmp_path / "report.png")
    image = QImage(png)
    assert image.width() >= 1600
    assert image.height() == round(440 * image.width() / 800)
    # Drawn, not blank: the four plots' axes, text and curves leave many non-white pixels.
    white = image.pixel(0, 0)
    sampled = [
        image.pixel(x, y) for x in range(0, image.width(), 5) for y in range(0, image.height(), 5)
    ]
    assert sum(p != white for p in sampled) > 0.02 * len(sampled)
    assert len(set(sampled)) > 5
    svg = plots.save(str(tmp_path / "report.svg"))
    text = Path(svg).read_text()
    assert text.startswith("<?xml")
    assert "<svg" in text
    assert "Throughput" in text
    assert plots.save(str(tmp_path / "noext")) == str(tmp_path / "noext.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noext.png", "report.png", "report.svg"]


def test_a_trial_whose_loss_scale_skipped_steps_has_one_figure_in_table_and_plot(
    make_window, qtbot, recorded_events
) -> None:
    """Issue 35: the table and the throughput plot show the samples a trial trained (a step
    the loss scale skipped trained nothing), the figure the recommendation's medians take."""
    import dataclasses

    window = make_window()
    finished = next(
        e
        for e in recorded_events
        if isinstance(e, api.TrialFinished) and e.result.ok and e.result.steps_completed >= 4
    )
    result = dataclasses.replace(
        finished.result, skipped_steps=finished.result.steps_completed // 4
    )
    trained = result.trained_samples_per_second
    assert trained is not None
    assert result.samples_per_second is not None
    assert trained < result.samples_per_second
    window.add_trial(finished.number, finished.stage, result)
    model = window.table.trials
    column = COLUMNS.index("samples/s")
    shown = model.data(model.index(0, column), Qt.ItemDataRole.DisplayRole)
    assert float(str(shown).replace(",", "")) == pytest.approx(trained, abs=0.5)
    window.plots.redraw(everything=True)
    policy = result.spec.setup.policy.name
    ys = window.plots.throughput_points[policy].yData
    assert ys is not None
    assert list(ys) == [pytest.approx(trained)]
