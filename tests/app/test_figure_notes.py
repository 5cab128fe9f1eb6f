"""A figure that did not hold in the window's trials table (issue 70): both runs keep their
figures, the first says it did not hold and where it was measured again, the second why it
ran."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.qt_trials import COLUMNS
from tuner import api


def finished(
    number: int, stage: str, samples_per_second: float, mean_ms: float
) -> api.TrialFinished:
    spec = api.TrialSpec("builtin:mlp", api.Setup("mixed_bfloat16", 64))
    result = api.TrialResult(
        spec,
        api.TrialStatus.OK,
        samples_per_second=samples_per_second,
        step_time_ms={"p50": 1.0, "mean": mean_ms},
    )
    return api.TrialFinished(number, stage, result)


def test_the_trials_table_shows_both_figures_and_why(make_window, qtbot) -> None:
    window = make_window()
    events = [
        finished(1, "policies", 640.0, 100.0),  # 100x its median: does not hold
        finished(2, "policies", 64_000.0, 1.05),
        finished(3, "runoff", 500.0, 100.0),  # not an exploring stage: said, not run again
    ]
    window.bridge.feed(events)
    model = window.table.trials
    qtbot.waitUntil(lambda: model.rowCount() == 3, timeout=5_000)

    def cell(row: int, column: str, role: Qt.ItemDataRole = Qt.ItemDataRole.DisplayRole) -> str:
        return model.index(row, COLUMNS.index(column)).data(role) or ""

    assert cell(0, "samples/s") == "640"
    assert cell(1, "samples/s") == "64,000"
    assert cell(0, "status") == (
        "ok; its mean step 100 ms was 100.0x its median 1 ms: the figure did not hold, "
        "measured again in #2"
    )
    assert cell(1, "status") == "ok; measured again: the first figure (#1) did not hold"
    assert "measured again in #2" in cell(0, "status", Qt.ItemDataRole.ToolTipRole)
    assert cell(2, "status").endswith("the figure did not hold")
