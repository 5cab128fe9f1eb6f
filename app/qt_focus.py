"""The keyboard handed back to the window that opened a dialog, once the dialog closes."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication, QWidget


class QtFocusReturn(QObject):
    """Gives the keyboard back to a dialog's owner when the dialog closes, whatever the dialog
    (a file dialog, a message box, History, Export, and any added later).

    A window manager does this on most desktops. Without one (Xvfb, some remote and kiosk
    sessions) nothing did: after File > Open model... no window had the keyboard, and F5 did
    nothing until the user clicked the window (issue 33).

    Qt reports the keyboard leaving the dialog (``QApplication.focusChanged`` to no widget)
    while the dialog is still closing, so the check waits for the event loop's next turn. Then
    the dialog has gone (hidden, or deleted with its static function) and, when no window of
    the application has the keyboard, its owner takes it. A dialog still showing is one the
    user left for another application: that stays so.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        app.focusChanged.connect(self._on_focus_changed)

    def _on_focus_changed(self, old: QWidget | None, new: QWidget | None) -> None:
        if old is None or new is not None:
            return
        closing = old.window()
        opener = closing.parentWidget()
        if opener is None:  # a main window left for another application
            return
        owner = opener.window()
        QTimer.singleShot(0, self, lambda: _give_back(closing, owner))


def _give_back(closing: QWidget, owner: QWidget) -> None:
    """Activate ``owner`` when ``closing`` has gone and no window has the keyboard."""
    if shiboken6.isValid(closing) and closing.isVisible():
        return
    if QApplication.activeWindow() is not None:
        return
    if shiboken6.isValid(owner) and owner.isVisible():
        owner.raise_()
        owner.activateWindow()
