"""The window's history on a PostgreSQL store (a real server, see tests/conftest.py)."""

from __future__ import annotations

from test_search_strategy import FakeProfile, Machine

from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession
from tuner.search.tune import tune

SPEEDS = {"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300}


def test_the_history_lists_and_opens_sessions_stored_in_postgresql(
    make_window, qtbot, postgres_url: str
) -> None:
    result = tune(
        TuneRequest(
            "builtin:mlp",
            storage=postgres_url,
            study="pg-window",
            profile=FakeProfile(cpu_model="Window CPU"),
        ),
        runner=Machine(speed=SPEEDS),
    )
    window = make_window()
    window.setup.storage.setText(postgres_url)
    dialog = window.open_history()
    qtbot.waitUntil(lambda: dialog.table.rowCount() > 0, timeout=10_000)
    rows = {
        dialog.table.item(r, 0).text(): [
            dialog.table.item(r, c).text() for c in range(dialog.table.columnCount())
        ]
        for r in range(dialog.table.rowCount())
    }
    row = rows["pg-window"]
    assert "CPU Window CPU (avx2)" in row
    assert any(cell.startswith(result.recommendation.setup.label) for cell in row)
    window.load_session("pg-window", postgres_url)
    qtbot.waitUntil(lambda: window.session_name == "pg-window", timeout=10_000)
    stored = [t for t in TuningSession.load("pg-window", postgres_url).trials() if t.result]
    qtbot.waitUntil(lambda: window.table.trials.rowCount() == len(stored), timeout=10_000)
    assert window.session_name == "pg-window"
    assert window.storage == postgres_url
    dialog.close()
