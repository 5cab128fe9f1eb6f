"""Issue 49's closed loop in the window: each `mptune run` of a session's tuned setup is kept in
the session, and History says the last one against the figure it was tuned at."""

from __future__ import annotations

from typing import Any

from app.qt_history import QtHistoryDialog
from tuner import api

RUNS = (
    {"when": "2026-11-28T00:56:23+00:00", "script": "train.py", "setup": "float32 b128 none",
     "tuned_samples_per_second": 10_000.0, "samples_per_second": 9_100.0, "validation_s": 0.4},
    {"when": "2026-11-28T01:20:00+00:00", "script": "train.py", "setup": "float32 b128 none",
     "tuned_samples_per_second": 10_000.0, "samples_per_second": 9_700.0},
)  # fmt: skip


def test_history_says_the_last_run_against_its_tuned_figure(qtbot: Any) -> None:
    dialog = QtHistoryDialog()
    qtbot.addWidget(dialog)
    summary = api.SessionSummary(
        "train-1", "script:train.py", "2026-11-28", 12, "float32 b128 none", runs=RUNS
    )
    dialog.set_sessions(
        [summary, api.SessionSummary("other", "builtin:cnn", "2026-11-27", 3, None)]
    )
    last = dialog.table.item(0, len(api.SessionSummary.COLUMNS) - 1).text()
    assert last.endswith("; last run 0.97x tuned, 2 runs")
    assert "last run" not in dialog.table.item(1, len(api.SessionSummary.COLUMNS) - 1).text()


def test_show_lists_each_run_with_its_ratio() -> None:
    lines = api.run_lines(RUNS)
    assert lines[0] == (
        "2026-11-28T00:56:23+00:00  train.py  float32 b128 none: trained at 9,100 samples/s, "
        "tuned at 10,000 (0.91x); validation 0.40 s an epoch"
    )
    assert lines[1].endswith("trained at 9,700 samples/s, tuned at 10,000 (0.97x)")
    untimed = api.run_lines(({"when": "t", "script": "s", "setup": "x"},))
    assert untimed == ["t  s  x: not timed"]
