"""Precision hazards in the window: the trial rows, the plots' markers, the recommendation."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.qt_plots import QtLivePlots, marker_text
from app.qt_recommendation import QtRecommendation
from app.qt_trials import (
    FAILED_COLOUR,
    HAZARD_COLOUR,
    UNSAFE_COLOUR,
    QtTrialsTable,
    TrialRow,
    TrialsModel,
)
from tuner import api

INTEGER_CAST = api.Hazard(
    "integer_cast",
    "mixed_float16",
    "layer 'embed' (Embedding)",
    "its float32 input holds whole numbers up to 19,999 (ids, indices or counts), and "
    "mixed_float16 casts it to float16: 584 of 6,400 values changed",
    'declare the model input as integers (keras.Input(..., dtype="int32"))',
    severity="unsafe",
    figure="19,999 became 20,000",
)
OUTPUT = api.Hazard(
    "low_precision_output",
    "mixed_float16",
    "layer 'head' (Dense)",
    "the model's output softmax is computed in float16",
    'give that layer dtype="float32"',
)
UNDERFLOW = api.Hazard(
    "underflow",
    "mixed_float16",
    None,
    "2.1% of the gradient values that float32 computes flush to zero in float16 without loss "
    "scaling (below 6e-08)",
    "use dynamic loss scaling",
    figure="2.1% flushed",
)
DIVERGENCE = api.Hazard(
    "divergence",
    "mixed_bfloat16",
    "layer 'norm' (LayerNormalization)",
    "its output differs from float32's by 40.0% on the same batch and weights",
    'keep this layer in float32 (dtype="float32" on it)',
    figure="40.0% off float32",
)


def result(
    policy: str,
    status: str = "ok",
    hazards: tuple[api.Hazard, ...] = (),
    error: str | None = None,
    loss_scale: str | None = None,
) -> api.TrialResult:
    setup = api.Setup(policy, 32, loss_scale)
    data: dict[str, Any] = api.TrialResult(
        api.TrialSpec("builtin:mlp", setup), api.TrialStatus(status), samples_per_second=500.0
    ).to_dict()
    data["hazards"] = [h.to_dict() for h in hazards]
    data["error"] = {"message": error} if error else None
    return api.TrialResult.from_dict(data)


def status_cell(model: TrialsModel, row: int, role: Qt.ItemDataRole) -> Any:
    return model.index(row, model.columnCount() - 1).data(role)


def test_trial_rows_show_unsafe_and_hazards(qtbot) -> None:
    model = TrialsModel()
    unsafe_message = "mixed_float16 is unsafe for this model: whole numbers rounded"
    model.add(TrialRow(0, "baseline", result("float32")))
    model.add(TrialRow(1, "policies", result("mixed_bfloat16", hazards=(OUTPUT,))))
    model.add(
        TrialRow(
            2,
            "policies",
            result("mixed_float16", "unsafe", (INTEGER_CAST, OUTPUT), unsafe_message),
        )
    )
    model.add(TrialRow(3, "batch", result("float32", "oom", error="out of memory")))
    display = Qt.ItemDataRole.DisplayRole
    assert status_cell(model, 0, display) == "ok"
    assert status_cell(model, 1, display) == "ok \u26a0 1 hazard"
    assert status_cell(model, 2, display) == f"unsafe \u26a0 2 hazards: {unsafe_message}"
    assert status_cell(model, 3, display) == "oom: out of memory"

    tooltip = Qt.ItemDataRole.ToolTipRole
    assert status_cell(model, 0, tooltip) is None
    unsafe_tip = status_cell(model, 2, tooltip)
    assert unsafe_message in unsafe_tip
    for hazard in (INTEGER_CAST, OUTPUT):
        assert html.escape(hazard.describe(), quote=False) in unsafe_tip
    assert html.escape(OUTPUT.describe(), quote=False) in status_cell(model, 1, tooltip)

    # Unsafe has a look of its own: its colour (not the failures' red) on a tint.
    colour = Qt.ItemDataRole.ForegroundRole
    assert status_cell(model, 0, colour) is None
    assert status_cell(model, 1, colour) == QColor(HAZARD_COLOUR)
    assert status_cell(model, 2, colour) == QColor(UNSAFE_COLOUR)
    assert status_cell(model, 3, colour) == QColor(FAILED_COLOUR)
    assert QColor(UNSAFE_COLOUR) != QColor(FAILED_COLOUR)
    background = Qt.ItemDataRole.BackgroundRole
    assert status_cell(model, 2, background) is not None
    assert status_cell(model, 3, background) is None
    # Only the status cell carries the look.
    assert model.index(2, 0).data(colour) is None


def test_columns_fit_rows_added_later(qtbot) -> None:
    table = QtTrialsTable()
    qtbot.addWidget(table)
    table.resize(900, 300)
    table.trials.add(TrialRow(0, "baseline", result("float32")))
    table.show()
    qtbot.waitExposed(table)
    header = table.horizontalHeader()
    qtbot.waitUntil(lambda: header.length() == table.viewport().width())  # laid out
    unsafe = result("mixed_float16", "unsafe", (INTEGER_CAST,))
    table.trials.add(TrialRow(1, "policies", unsafe))
    # The policy column grows to "mixed_float16" at once; the status column takes the rest.
    assert table.columnWidth(2) >= table.sizeHintForColumn(2) > 0
    assert header.length() == table.viewport().width()
    # One line a row: a long status is elided (its tooltip has it all), not wrapped.
    assert not table.wordWrap()


def test_marker_text_names_the_hazard_and_its_figure() -> None:
    assert marker_text(UNDERFLOW) == "\u26a0 underflow: 2.1% flushed"
    assert marker_text(INTEGER_CAST) == "\u26a0 unsafe integer cast: 19,999 became 20,000"
    assert marker_text(DIVERGENCE) == "\u26a0 divergence: 40.0% off float32"
    assert marker_text(OUTPUT) == "\u26a0 low-precision output"


def marker_labels(markers: list) -> list[str]:
    return [line.label.textItem.toPlainText() for line in markers]


def test_live_hazards_are_marked_on_their_plot_and_cleared(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.start_trial(scaled=True)
    for hazard in (UNDERFLOW, INTEGER_CAST, OUTPUT):
        plots.add_hazard(hazard)
    # Underflow on the loss-scale plot, the others on the loss plot, at the trial's first step.
    assert marker_labels(plots.scale_markers) == [marker_text(UNDERFLOW)]
    assert marker_labels(plots.loss_markers) == [marker_text(INTEGER_CAST), marker_text(OUTPUT)]
    assert all(line.value() == 1 for line in plots.scale_markers + plots.loss_markers)
    assert plots.scale_markers[0] in plots.loss_scale.getPlotItem().items
    assert plots.loss_markers[0] in plots.loss.getPlotItem().items
    assert plots.loss_markers[0].toolTip() == INTEGER_CAST.describe()
    # Stacked, not on top of each other.
    positions = [line.label.orthoPos for line in plots.loss_markers]
    assert len(set(positions)) == 2

    # A trial without loss scaling keeps the last scaled trial's loss-scale curve in view:
    # its own underflow goes on its loss plot instead.
    scale_markers = list(plots.scale_markers)
    plots.start_trial(scaled=False)
    assert plots.loss_markers == []
    assert plots.scale_markers == scale_markers
    plots.add_hazard(UNDERFLOW)
    assert marker_labels(plots.loss_markers) == [marker_text(UNDERFLOW)]

    plots.clear()
    assert plots.scale_markers == []
    assert plots.loss_markers == []
    for plot in (plots.loss_scale, plots.loss):
        assert not [i for i in plot.getPlotItem().items if i.__class__.__name__ == "InfiniteLine"]


def test_a_stored_trials_curves_come_with_its_hazard_markers(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.show_trial_curves([1.0, 0.9], [32768.0, 32768.0], hazards=(UNDERFLOW, DIVERGENCE))
    assert marker_labels(plots.scale_markers) == [marker_text(UNDERFLOW)]
    assert marker_labels(plots.loss_markers) == [marker_text(DIVERGENCE)]
    plots.show_trial_curves([1.0, 0.9], [None, None])  # another trial, without hazards
    assert plots.scale_markers == []
    assert plots.loss_markers == []


def test_hazard_events_mark_the_running_trial_and_probe_reads_in_words(make_window, qtbot) -> None:
    window = make_window()
    spec = api.TrialSpec("builtin:mlp", api.Setup("mixed_float16", 32))
    with qtbot.waitSignal(window.bridge.eventsReady):
        window.bridge.feed(
            [
                api.TrialStarted(3, "policies", spec),
                api.WorkerReported(3, api.PhaseMessage(phase="probe", t=4.0)),
            ]
        )
    assert window.status.text() == (
        "Trial #3: mixed_float16, batch size 32, loss scale dynamic: probing numerics against "
        "float32"
    )
    with qtbot.waitSignal(window.bridge.eventsReady):
        window.bridge.feed(
            [
                api.WorkerReported(3, api.HazardMessage(hazard=UNDERFLOW)),
                api.WorkerReported(3, api.HazardMessage(hazard=INTEGER_CAST)),
                api.WorkerReported(3, api.PhaseMessage(phase="warmup", t=5.0)),
                api.WorkerReported(3, api.StepMessage(phase="warmup", loss=1.0)),
            ]
        )
    assert window.status.text().endswith(": warming up")
    assert marker_labels(window.plots.scale_markers) == [marker_text(UNDERFLOW)]
    assert marker_labels(window.plots.loss_markers) == [marker_text(INTEGER_CAST)]

    # Picking a stored trial in the table shows its own hazards.
    window.add_trial(4, "policies", result("mixed_bfloat16", hazards=(DIVERGENCE,)))
    window.table.select_number(4)
    assert window.plots.scale_markers == []
    assert marker_labels(window.plots.loss_markers) == [marker_text(DIVERGENCE)]


def recommendation(hazards: tuple[api.Hazard, ...]) -> api.Recommendation:
    return api.Recommendation(
        setup=api.Setup("float32", 64),
        samples_per_second=550.0,
        samples_per_second_spread=(530.0, 570.0),
        baseline_samples_per_second=520.0,
        float32_samples_per_second=550.0,
        speedup_vs_float32=1.0,
        speedup_vs_baseline=1.06,
        memory_saving=None,
        peak_memory_mb=776.0,
        memory_kind="cpu_rss",
        loss_gap=0.0,
        skipped_steps=0,
        reason="float32 at batch size 64 is the best setup here",
        trials=(3, 5),
        objective="speed",
        alternatives=(
            api.Alternative(
                api.Setup("mixed_float16", 32),
                266.0,
                0.51,
                None,
                "mixed_float16 is unsafe for this model: whole numbers rounded",
            ),
        ),
        hazards=hazards,
    )


def test_the_recommendation_shows_each_hazard_with_evidence_and_fix(qtbot) -> None:
    panel = QtRecommendation()
    qtbot.addWidget(panel)
    panel.set_recommendation(recommendation((INTEGER_CAST, OUTPUT)))
    text = panel.text()
    for hazard in (INTEGER_CAST, OUTPUT):
        assert html.escape(hazard.evidence) in text
        assert f"<i>Fix:</i> {html.escape(hazard.fix)}" in text
    # The unsafe one right under the setup, in its colour; the warning before the alternatives.
    setup_at = text.index("float32, batch size 64")
    unsafe_at = text.index(html.escape(INTEGER_CAST.evidence))
    throughput_at = text.index("Throughput")
    warning_at = text.index(html.escape(OUTPUT.evidence))
    alternative_at = text.index("Alternative")
    assert setup_at < unsafe_at < throughput_at < warning_at < alternative_at
    assert "\u26a0&nbsp;Unsafe" in text
    assert "\u26a0&nbsp;Hazard" in text
    # A long recommendation scrolls inside its tab, the buttons stay in view; and it still
    # does after a search's "Searching..." stood in between (it did not after a resume).
    panel.resize(420, 220)
    panel.show()
    qtbot.waitExposed(panel)
    bar = panel.summary.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    panel.set_recommendation(None, "Searching...")
    qtbot.waitUntil(lambda: bar.maximum() == 0)
    panel.set_recommendation(recommendation((INTEGER_CAST, OUTPUT)))
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    bar.setValue(bar.maximum())  # the last row can be reached
    assert panel.export_button.isVisible()

    panel.set_recommendation(recommendation(()))
    assert "Unsafe" not in panel.text()
    assert "Hazard" not in panel.text()
