"""The Search panel's loss scales as a control of their own (issue 36, item 4): candidates to
tick, a row that adds one from its kind and numbers, and none of the command line's syntax to
type; what is listed and ticked is kept between runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt

from app.qt_loss_scales import LossScalesEditor, scale_sentence, scale_words
from app.qt_setup import QtSetupPanel
from tuner import api

DEFAULTS = tuple(api.LossScale.parse(s) for s in api.DEFAULT_LOSS_SCALES)


def _settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def _panel(qtbot, settings: QSettings) -> QtSetupPanel:
    panel = QtSetupPanel(settings)
    qtbot.addWidget(panel)
    return panel


def _tick(editor: LossScalesEditor, written: str, ticked: bool) -> None:
    row = editor.written().index(written)
    state = Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked
    editor.list.item(row).setCheckState(state)


def test_the_defaults_are_listed_ticked_in_words(qtbot, tmp_path: Path) -> None:
    panel = _panel(qtbot, _settings(tmp_path))
    editor = panel.loss_scales
    assert editor.listed() == DEFAULTS
    assert editor.candidates() == DEFAULTS
    assert panel.search_space(list(api.POLICIES)).loss_scales == DEFAULTS
    shown = [editor.list.item(i).text() for i in range(editor.list.count())]
    assert shown[0] == "dynamic (Keras' default)"
    assert shown[1] == "dynamic from 1024, \u00d72 every 500 steps"
    assert shown[2] == "fixed at 1024"
    assert not any("dynamic:" in text or "fixed:" in text for text in shown)  # words, not syntax


def test_a_candidate_unticked_is_not_searched(qtbot, tmp_path: Path) -> None:
    panel = _panel(qtbot, _settings(tmp_path))
    _tick(panel.loss_scales, "fixed:128", False)
    scales = [str(s) for s in panel.search_space(list(api.POLICIES)).loss_scales]
    assert scales == ["dynamic", "dynamic:1024:500", "fixed:1024"]


@pytest.mark.parametrize(
    "kind, scale, growth, written",
    [("fixed", 512, None, "fixed:512"), ("dynamic", 256, 100, "dynamic:256:100")],
)
def test_the_row_adds_a_candidate_ticked(
    qtbot, tmp_path: Path, kind: str, scale: int, growth: int | None, written: str
) -> None:
    panel = _panel(qtbot, _settings(tmp_path))
    editor = panel.loss_scales
    editor.kind.setCurrentText(kind)
    assert editor.growth.isEnabled() == (kind == "dynamic")
    editor.scale.setValue(scale)
    if growth is not None:
        editor.growth.setValue(growth)
    with qtbot.waitSignal(editor.changed, timeout=1000):
        qtbot.mouseClick(editor.add, Qt.MouseButton.LeftButton)
    assert editor.written()[-1] == written
    assert written in [str(s) for s in panel.search_space(list(api.POLICIES)).loss_scales]
    # Added again: still listed once.
    qtbot.mouseClick(editor.add, Qt.MouseButton.LeftButton)
    assert editor.written().count(written) == 1


def test_the_selected_candidate_is_removed(qtbot, tmp_path: Path) -> None:
    panel = _panel(qtbot, _settings(tmp_path))
    editor = panel.loss_scales
    assert not editor.remove.isEnabled()
    editor.list.setCurrentRow(3)
    assert editor.remove.isEnabled()
    qtbot.mouseClick(editor.remove, Qt.MouseButton.LeftButton)
    assert "fixed:128" not in editor.written()
    assert len(editor.written()) == 3


def test_float16_needs_a_ticked_loss_scale(qtbot, tmp_path: Path) -> None:
    panel = _panel(qtbot, _settings(tmp_path))
    for written in panel.loss_scales.written():
        _tick(panel.loss_scales, written, False)
    with pytest.raises(ValueError, match="tick at least one loss scale for mixed_float16"):
        panel.search_space(list(api.POLICIES))
    panel.policy_boxes[api.MIXED_FLOAT16].setChecked(False)
    assert api.MIXED_FLOAT16 not in panel.search_space(list(api.POLICIES)).policies


def test_what_is_listed_and_ticked_is_kept(qtbot, tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    panel = _panel(qtbot, settings)
    panel.loss_scales.add_scale(api.LossScale("fixed", value=64.0))
    _tick(panel.loss_scales, "dynamic", False)
    panel.save()
    settings.sync()
    again = _panel(qtbot, _settings(tmp_path))
    assert again.loss_scales.written() == [*api.DEFAULT_LOSS_SCALES, "fixed:64"]
    assert [str(s) for s in again.loss_scales.candidates()] == [
        "dynamic:1024:500",
        "fixed:1024",
        "fixed:128",
        "fixed:64",
    ]


def test_a_setting_an_earlier_version_kept_as_text_still_reads(qtbot, tmp_path: Path) -> None:
    """Before this control, the ticked loss scales were kept as the field's text: those are
    ticked, the defaults listed beside them; a text that does not parse leaves the defaults."""
    settings = _settings(tmp_path)
    settings.setValue("loss_scales", "fixed:128,dynamic:2048")
    panel = _panel(qtbot, settings)
    assert panel.loss_scales.written() == [*api.DEFAULT_LOSS_SCALES, "dynamic:2048"]
    assert [str(s) for s in panel.loss_scales.candidates()] == ["fixed:128", "dynamic:2048"]
    (tmp_path / "b").mkdir()
    broken = _settings(tmp_path / "b")
    broken.setValue("loss_scales", "dynamic:lots")
    fallback = _panel(qtbot, broken)
    assert fallback.loss_scales.candidates() == DEFAULTS


def test_scales_in_words() -> None:
    assert scale_sentence(api.LossScale("dynamic")) == (
        "dynamic (Keras' default): starts at 32768, halves and skips the step on an overflow, "
        "doubles after 2000 clean steps"
    )
    assert scale_words(api.LossScale("fixed", value=128.0)) == "fixed at 128"
    assert scale_words(api.LossScale("none")) == "none"
