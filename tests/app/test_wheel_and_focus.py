"""The mouse and the keyboard where a first-time user met them (issue 33): a wheel over the
Search panel scrolls it and changes no setting, and a closed dialog gives the keyboard back to
the window, so that F5 works without a click."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt, QTimer
from PySide6.QtGui import QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QSpinBox,
    QWidget,
)

from tuner import api


class ScriptedEngine:
    """tuner.api with a search that opens a session and runs until it is stopped."""

    def __init__(self) -> None:
        self.searches = 0

    def __getattr__(self, name: str):
        return getattr(api, name)

    def tune(self, request, *, on_event, cancel):
        self.searches += 1
        on_event(api.SessionOpened("scripted", request.model))
        cancel.wait(30)
        raise KeyboardInterrupt


def shown_and_active(window, qtbot, size: tuple[int, int] = (1100, 700)) -> None:
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)


# -- the wheel ---------------------------------------------------------------------------------
def wheel_controls(panel: QWidget) -> list[QWidget]:
    """Every control of ``panel`` that a wheel turns, found by walking its children: a control
    added to the panel later is checked too."""
    return [*panel.findChildren(QComboBox), *panel.findChildren(QAbstractSpinBox)]


def value(control: QWidget) -> object:
    if isinstance(control, QComboBox):
        return control.currentIndex()
    assert isinstance(control, QAbstractSpinBox)
    return control.text()


def turnable(control: QWidget) -> None:
    """Put ``control`` where one notch down changes it: a combo box on its last item but one
    (the Model's is the last model before "Open a model file..."), a spin box in mid-range."""
    if isinstance(control, QComboBox):
        control.setCurrentIndex(control.count() - 2)
    elif isinstance(control, QSpinBox):
        control.setValue((control.minimum() + control.maximum()) // 2)
    else:
        assert isinstance(control, QDoubleSpinBox), control  # a new kind: say how to turn it
        control.setValue((control.minimum() + control.maximum()) / 2)


def wheel_down(widget: QWidget) -> None:
    """One notch of a mouse wheel over the middle of ``widget``."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(centre.toPoint())),
        QPoint(),
        QPoint(0, -120),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


@pytest.fixture
def no_file_dialog(monkeypatch) -> list[str]:
    """Fails nothing itself: lists each file dialog asked for (none opens)."""
    asked: list[str] = []

    def ask(*args, **kwargs):
        asked.append(str(args[1] if len(args) > 1 else kwargs.get("caption")))
        return "", ""

    monkeypatch.setattr(QFileDialog, "getOpenFileName", ask)
    return asked


def test_a_wheel_over_the_search_panel_scrolls_it_and_changes_nothing(
    make_window, qtbot, no_file_dialog
) -> None:
    window = make_window()
    panel = window.setup
    # Every backend installable, so that a combo box's next item can be chosen; every control
    # enabled (the global batch's spin box is greyed out until "keep" is ticked).
    panel.set_installed_backends({name: "1.0" for name in api.BACKENDS})
    panel.keep_global_batch.setChecked(True)
    shown_and_active(window, qtbot, (1100, 420))  # short: the Search panel scrolls
    controls = wheel_controls(panel)
    assert {
        panel.model,
        panel.switches["xla"],
        panel.objective,
        panel.batch_min,
        panel.measure_seconds,
    } <= set(controls)
    assert len(controls) >= 11
    bar = window.settings_scroll.verticalScrollBar()
    assert bar.maximum() > 0, "the panel does not scroll at this size: nothing is checked"
    window.table.setFocus()  # the keyboard is elsewhere, as while one scrolls the panel
    qtbot.waitUntil(window.table.hasFocus)
    for control in controls:
        assert control.isEnabled(), control
        turnable(control)
        before = value(control)
        bar.setValue(0)
        wheel_down(control)
        assert value(control) == before, f"{control!r} turned under the wheel"
        assert bar.value() > 0, f"the panel did not scroll under {control!r}"
        # A real wheel does not give it the keyboard either (Qt's WheelFocus would, and the
        # wheel would turn it).
        assert control.focusPolicy() == Qt.FocusPolicy.StrongFocus, control
    assert no_file_dialog == []  # the Model's wheel never reaches "Open a model file..."

    # With the keyboard on it, a control takes the wheel: the user chose it.
    for control in controls:
        turnable(control)
        control.setFocus()
        qtbot.waitUntil(control.hasFocus)
        before = value(control)
        bar.setValue(0)
        wheel_down(control)
        assert value(control) != before, f"{control!r} with the keyboard ignored the wheel"
        assert bar.value() == 0
        turnable(control)  # back as it was: one control may enable another (a loss scale's kind)


# -- the keyboard after a dialog -----------------------------------------------------------------
def close_the_dialog_when_it_opens(window) -> list[QWidget]:
    """Close the next modal dialog as soon as it has the keyboard; lists what it closed."""
    closed: list[QWidget] = []
    timer = QTimer(window)  # lives as long as the window

    def close() -> None:
        dialog = QApplication.activeModalWidget()
        if isinstance(dialog, QDialog) and QApplication.activeWindow() is dialog:
            closed.append(dialog)
            timer.stop()
            dialog.reject()

    timer.timeout.connect(close)
    timer.start(10)
    return closed


def open_model(window) -> None:
    window.open_model()


def save_plots(window) -> None:
    window.save_plots()


def model_combo(window) -> None:
    """The Search panel's own file dialog: "Open a model file..." chosen in the Model box."""
    last = window.setup.model.count() - 1
    window.setup.model.setCurrentIndex(last)
    window.setup.model.activated.emit(last)


def message_box(window) -> None:
    window.session_name = None
    window.open_export()  # "Nothing to export" in a message box


@pytest.mark.parametrize(
    "dialog", [open_model, save_plots, model_combo, message_box], ids=lambda f: f.__name__
)
def test_after_a_dialog_the_window_has_the_keyboard_and_f5_starts(
    make_window, qtbot, dialog: Callable
) -> None:
    engine = ScriptedEngine()
    window = make_window(engine=engine)
    shown_and_active(window, qtbot)
    qtbot.waitUntil(window.start_action.isEnabled)  # the model was checked
    closed = close_the_dialog_when_it_opens(window)
    dialog(window)
    assert closed, "no dialog opened"
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=2_000)
    # (a model chosen again, as "Open a model file..." cancelled does, is checked again)
    qtbot.waitUntil(window.start_action.isEnabled)
    with qtbot.waitSignal(window.start_action.triggered, timeout=2_000):
        QTest.keyClick(QApplication.focusWidget() or window, Qt.Key.Key_F5)
    qtbot.waitUntil(lambda: window.session_name == "scripted", timeout=5_000)
    assert engine.searches == 1
    with qtbot.waitSignal(window.bridge.finished, timeout=5_000):
        window.stop_search()


def test_after_the_history_dialog_the_window_has_the_keyboard(make_window, qtbot) -> None:
    window = make_window(engine=ScriptedEngine())
    shown_and_active(window, qtbot)
    dialog = window.open_history()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is dialog)
    dialog.reject()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=2_000)
