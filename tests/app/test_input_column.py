"""The window shows what the input delivers (issue 25, item 4): the samples/s cell's tooltip
holds the device's rate and the input's; the input/s column shows, in its warning colour, once a
trial is held back by its input, with the advice."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.qt_trials import COLUMNS, INPUT_BOUND_COLOUR, QtTrialsTable, TrialRow
from tuner import api


def result(device: float, fed: float, kind: str = "tf_data") -> api.TrialResult:
    return api.TrialResult(
        api.TrialSpec("builtin:mlp", api.Setup("float32", 32)),
        api.TrialStatus.OK,
        samples_per_second=min(device, fed),
        device_samples_per_second=device,
        input=api.InputRate(fed, kind, "make_dataset(32), a tf.data.Dataset"),
    )


def test_the_input_column_shows_once_a_trial_is_input_bound(qtbot) -> None:
    table = QtTrialsTable()
    qtbot.addWidget(table)
    model = table.trials
    fed_at = COLUMNS.index("input/s")
    speed_at = COLUMNS.index("samples/s")
    model.add(TrialRow(0, "baseline", result(1000.0, 50_000.0)))
    assert table.isColumnHidden(fed_at)
    tip = model.index(0, speed_at).data(Qt.ItemDataRole.ToolTipRole)
    assert "device 1,000 samples/s" in tip and "the input keeps up" in tip
    model.add(TrialRow(1, "policies", result(4000.0, 1500.0)))
    assert not table.isColumnHidden(fed_at)
    cell = model.index(1, fed_at)
    assert cell.data(Qt.ItemDataRole.DisplayRole) == "1,500"
    assert cell.data(Qt.ItemDataRole.ForegroundRole) == QColor(INPUT_BOUND_COLOUR)
    assert model.index(0, fed_at).data(Qt.ItemDataRole.ForegroundRole) is None
    tip = cell.data(Qt.ItemDataRole.ToolTipRole)
    assert "input-bound" in tip and "prefetch" in tip
