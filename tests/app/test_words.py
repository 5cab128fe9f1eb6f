"""Window words for window users: no engine text the window shows names a command-line flag
(issue 27). The CLI keeps its own words: the engine's texts are unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.words import FLAG, window_words

SEARCHES = Path(__file__).resolve().parents[1] / "tuner" / "data" / "searches"


def engine_texts() -> list[str]:
    """Every line of text a recorded search makes: stage messages, plan lines, evidence."""
    texts = []
    for path in sorted(SEARCHES.glob("*.golden.json")):
        golden = json.loads(path.read_text())
        texts += [e["message"] for e in golden["events"] if e.get("type") == "stage"]
        texts += [text for _label, text in golden["evidence"]]
    return texts


def test_recorded_searches_say_flags_the_window_renames() -> None:
    texts = engine_texts()
    flagged = [t for t in texts if FLAG.search(t)]
    assert flagged, "the recorded searches name no flag: this test checks nothing"
    for text in flagged:
        shown = window_words(text)
        assert not FLAG.search(shown), shown


@pytest.mark.parametrize(
    "cli, window",
    [
        (
            "not tried (--xla auto tries XLA on a GPU only, and the trials ran on the CPU)",
            "not tried (XLA: auto in the Search panel tries XLA on a GPU only, and the trials "
            "ran on the CPU)",
        ),
        (
            "not compared with float32 at batch size 64 (the budget ended first); "
            "`mptune tune --resume my-run` runs that check",
            "not compared with float32 at batch size 64 (the budget ended first); Resume runs "
            "that check",
        ),
        (
            "the default time budget on a GPU (20 min, about 48 trials; --budget-minutes sets "
            "another)",
            "the default time budget on a GPU (20 min, about 48 trials; Time budget in the "
            "Search panel sets another)",
        ),
        (
            "the script export is Keras 3 only; use --format snippet --keras 2",
            "the script export is Keras 3 only; use Snippet with Keras 2",
        ),
        (  # issue 33: the knob is named once, not "XLA: XLA: auto ..."
            "XLA: --xla auto tries XLA on a GPU only, and the trials ran on the CPU",
            "XLA: auto in the Search panel tries XLA on a GPU only, and the trials ran on the CPU",
        ),
        (
            "64, kept (--global-batch): batch size 32",
            "64, kept (Global batch in the Search panel): batch size 32",
        ),
    ],
)
def test_each_flag_becomes_the_control_that_sets_it(cli: str, window: str) -> None:
    assert window_words(cli) == window
    assert window_words(window) == window  # window words stay as they are


def search_panel_names(qtbot, tmp_path: Path) -> list[str]:
    """The names the window gives its controls: the Search panel's row labels."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QFormLayout

    from app.qt_setup import QtSetupPanel

    panel = QtSetupPanel(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(panel)
    form = panel.layout()
    assert isinstance(form, QFormLayout)
    names = []
    for row in range(form.rowCount()):
        item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
        label = item.widget() if item is not None else None
        if label is not None and label.text():
            names.append(label.text())
    return names


def test_no_control_is_named_twice_in_a_row(qtbot, tmp_path: Path) -> None:
    """Issue 33: "Not tried: XLA: XLA: auto in the Search panel ...". The engine says what was
    not tried, then why, and the why began with the flag of the same knob; renamed to its
    control, the knob was named twice."""
    names = search_panel_names(qtbot, tmp_path)
    assert "XLA" in names and "Global batch" in names
    texts = engine_texts()
    for path in sorted(SEARCHES.glob("*.golden.json")):  # as the window shows a row: label, text
        texts += [f"{label}: {text}" for label, text in json.loads(path.read_text())["evidence"]]
    checked = 0
    for text in texts:
        shown = window_words(text)
        for name in names:
            twice = re.search(rf"\b{re.escape(name)}\W+{re.escape(name)}\b", shown)
            assert twice is None, shown
            checked += name in shown
    assert checked, "no recorded text names a control: this test checks nothing"
