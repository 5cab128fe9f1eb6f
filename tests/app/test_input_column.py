"""The window shows what the input does to fit (issues 25 and 35): the samples/s cell is fit's
own figure and its tooltip holds the device's rate beside it; the device/s column shows, in its
warning colour, once a trial is held back by its input, with the advice. A trial stored before
issue 35 (the input timed alone) still reads."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.qt_trials import COLUMNS, INPUT_BOUND_COLOUR, QtTrialsTable, TrialRow
from tuner import api


def result(device: float, fed: float, fit_loop: bool = True) -> api.TrialResult:
    return api.TrialResult(
        api.TrialSpec("builtin:mlp", api.Setup("float32", 32)),
        api.TrialStatus.OK,
        samples_per_second=fed if fit_loop else min(device, fed),
        device_samples_per_second=device,
        input=api.InputRate(
            fed, "tf_data", "make_dataset(32), a tf.data.Dataset", fit_loop=fit_loop
        ),
    )


def test_the_device_column_shows_once_a_trial_is_input_bound(qtbot) -> None:
    table = QtTrialsTable()
    qtbot.addWidget(table)
    model = table.trials
    device_at = COLUMNS.index("device/s")
    speed_at = COLUMNS.index("samples/s")
    model.add(TrialRow(0, "baseline", result(1000.0, 990.0)))
    assert table.isColumnHidden(device_at)
    assert model.index(0, speed_at).data(Qt.ItemDataRole.DisplayRole) == "990"
    tip = model.index(0, speed_at).data(Qt.ItemDataRole.ToolTipRole)
    assert "fit's own loop" in tip
    assert "device 1,000 samples/s" in tip
    assert "the input keeps up" in tip
    model.add(TrialRow(1, "policies", result(4000.0, 1500.0)))
    assert not table.isColumnHidden(device_at)
    assert model.index(1, speed_at).data(Qt.ItemDataRole.DisplayRole) == "1,500"
    cell = model.index(1, device_at)
    assert cell.data(Qt.ItemDataRole.DisplayRole) == "4,000"
    assert cell.data(Qt.ItemDataRole.ForegroundRole) == QColor(INPUT_BOUND_COLOUR)
    assert model.index(0, device_at).data(Qt.ItemDataRole.ForegroundRole) is None
    tip = cell.data(Qt.ItemDataRole.ToolTipRole)
    assert "input-bound" in tip
    assert "prefetch" in tip
    assert "1,500" not in tip
    # Stored before issue 35: the input's own rate, timed alone, is in the tooltip.
    model.add(TrialRow(2, "policies", result(4000.0, 1500.0, fit_loop=False)))
    tip = model.index(2, speed_at).data(Qt.ItemDataRole.ToolTipRole)
    assert "input 1,500 samples/s" in tip
