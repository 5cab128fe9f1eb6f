"""Each face words the settings the engine names in its own terms (issues 27 and 36): the engine
writes a setting as data (``[[xla auto]]``, :mod:`tuner.said`), the window says the control that
sets it, the command line its flag; no engine text the window shows names a flag or keeps a
setting unworded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.words import CONTROLS, control_words, window_words
from tuner import api
from tuner.cli_arguments import FLAGS, flag_words

SEARCHES = Path(__file__).resolve().parents[1] / "tuner" / "data" / "searches"
S = api.said.setting


def engine_texts() -> list[str]:
    """Every line of text a recorded search makes: stage messages, plan lines, evidence."""
    texts = []
    for path in sorted(SEARCHES.glob("*.golden.json")):
        golden = json.loads(path.read_text())
        texts += [e["message"] for e in golden["events"] if e.get("type") == "stage"]
        texts += [text for _label, text in golden["evidence"]]
    return texts


def _names_a_flag(text: str) -> bool:
    return any(f"{flag} " in f"{text} " or f"{flag})" in text for flag in FLAGS.values())


def test_recorded_searches_name_settings_each_face_words() -> None:
    texts = engine_texts()
    named = [t for t in texts if api.said.names(t)]
    assert named, "the recorded searches name no setting: this test checks nothing"
    for text in texts:
        assert not _names_a_flag(text), f"the engine words a flag itself: {text}"
    for text in named:
        shown = window_words(text)
        assert "[[" not in shown, shown
        assert not _names_a_flag(shown), shown
        said = api.said.render(text, flag_words)
        assert "[[" not in said, said
        assert _names_a_flag(said), said


def test_every_setting_the_engine_may_name_has_words_in_each_face() -> None:
    for name in api.said.known():
        assert name in CONTROLS, f"the window has no words for {name}"
        assert name in FLAGS, f"the command line has no flag for {name}"
        for value in (None, "2"):
            setting = api.said.Setting(name, value)
            assert control_words(setting)
            assert flag_words(setting).startswith(("--", "mptune"))


@pytest.mark.parametrize(
    "engine, window, cli",
    [
        (
            f"not tried ({S('xla', 'auto')} tries XLA on a GPU only, and the trials ran on the "
            "CPU)",
            "not tried (XLA: auto in the Search panel tries XLA on a GPU only, and the trials "
            "ran on the CPU)",
            "not tried (--xla auto tries XLA on a GPU only, and the trials ran on the CPU)",
        ),
        (
            "not compared with float32 at batch size 64 (the budget ended first); "
            f"{S('resume', 'my-run')} runs that check",
            "not compared with float32 at batch size 64 (the budget ended first); Resume runs "
            "that check",
            "not compared with float32 at batch size 64 (the budget ended first); mptune tune "
            "--resume my-run runs that check",
        ),
        (
            f"the default time budget on a GPU (20 min; {S('budget_minutes')} sets another)",
            "the default time budget on a GPU (20 min; Time budget in the Search panel sets "
            "another)",
            "the default time budget on a GPU (20 min; --budget-minutes sets another)",
        ),
        (
            f"the script export is Keras 3 only; use {S('keras', 2)} with {S('format', 'snippet')}",
            "the script export is Keras 3 only; use Keras 2 with Snippet",
            "the script export is Keras 3 only; use --keras 2 with --format snippet",
        ),
        (  # issue 33: the knob is named once, not "XLA: XLA: auto ..."
            f"XLA: {S('xla', 'auto')} tries XLA on a GPU only",
            "XLA: auto in the Search panel tries XLA on a GPU only",
            "XLA: --xla auto tries XLA on a GPU only",
        ),
        (
            f"64, kept ({S('global_batch')}): batch size 32",
            "64, kept (Global batch in the Search panel): batch size 32",
            "64, kept (--global-batch): batch size 32",
        ),
        (  # brackets that hold no setting are the text's own
            "expected shape [[1, 2]] and [[xla_flags]]",
            "expected shape [[1, 2]] and [[xla_flags]]",
            "expected shape [[1, 2]] and [[xla_flags]]",
        ),
    ],
)
def test_each_face_words_a_setting_its_own_way(engine: str, window: str, cli: str) -> None:
    assert window_words(engine) == window
    assert api.said.render(engine, flag_words) == cli
    assert window_words(window) == window  # window words stay as they are


def test_a_setting_is_data() -> None:
    text = f"search with {S('global_batch', 256)} to keep your batch"
    assert api.said.names(text) == [api.said.Setting("global_batch", "256")]
    with pytest.raises(ValueError, match="unknown setting"):
        S("learning_rate")
    with pytest.raises(ValueError, match="cannot be empty"):
        S("study", " ")


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


def test_the_window_names_controls_it_has(qtbot, tmp_path: Path) -> None:
    """A setting said to be in the Search panel is one of its rows, by that row's label."""
    names = search_panel_names(qtbot, tmp_path)
    panel = [label for label, where in CONTROLS.values() if where == " in the Search panel"]
    assert panel
    for label in panel:
        assert label in names or label.removeprefix("the ").removesuffix(" boxes") in names, label


def test_no_control_is_named_twice_in_a_row(qtbot, tmp_path: Path) -> None:
    """Issue 33: "Not tried: XLA: XLA: auto in the Search panel ...". The engine says what was
    not tried, then why, and the why began with the setting of the same knob; renamed to its
    control, the knob was named twice."""
    names = search_panel_names(qtbot, tmp_path)
    assert "XLA" in names
    assert "Global batch" in names
    texts = engine_texts()
    for path in sorted(SEARCHES.glob("*.golden.json")):  # as the window shows a row: label, text
        texts += [f"{label}: {text}" for label, text in json.loads(path.read_text())["evidence"]]
    checked = 0
    for text in texts:
        shown = window_words(text)
        for name in names:
            assert f"{name}: {name}" not in shown, shown
            assert f"{name} {name}" not in shown, shown
            checked += name in shown
    assert checked, "no recorded text names a control: this test checks nothing"
