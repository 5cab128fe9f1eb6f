"""GUI test fixtures: an offscreen window with scripted GPUs and settings of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.qt_main_window import QtMainWindow
from tuner import api

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def make_window(qtbot, tmp_path: Path):
    """A factory for main windows; each is shut down (threads joined) after the test."""
    windows: list[QtMainWindow] = []

    def make(scenario: str = "no_driver", **kwargs) -> QtMainWindow:
        settings = QSettings(
            str(tmp_path / f"settings-{len(windows)}.ini"), QSettings.Format.IniFormat
        )
        settings.setValue("storage", f"sqlite:///{tmp_path / 'sessions.db'}")
        window = QtMainWindow(
            settings=settings,
            nvml_backend=api.FakeNvmlBackend.named(scenario),
            sample_interval=0.05,
            **kwargs,
        )
        qtbot.addWidget(window)
        windows.append(window)
        qtbot.waitUntil(
            lambda: window.profile is not None and not window.controller.busy, timeout=10_000
        )
        return window

    yield make
    for window in windows:
        window.shutdown()
        # Engine calls still under way end on their own; the test must not leave them behind.
        assert window.controller.wait(10), "an engine call did not end"
        if window.bridge.running:
            assert window.bridge.wait(10), "the search thread did not end"


@pytest.fixture
def recorded_events() -> list[api.SearchEvent]:
    """A real search's event stream (tests/app/data/record_events.py wrote it)."""
    path = DATA / "search_events.jsonl"
    return [
        api.event_from_dict(json.loads(line))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
