"""Controls in a scrolled panel that take the mouse wheel only when the user chose them."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QWidget,
)

#: What a wheel turns: the value of a spin box, the item of a combo box.
WHEEL_CONTROLS = (QComboBox, QAbstractSpinBox)


class QtWheelGuard(QObject):
    """An event filter that lets a wheel scroll the panel instead of turning a control the
    pointer passes over (issue 33: scrolling the Search panel changed Objective and XLA, and
    reached "Open a model file..." in the Model box).

    A control without the keyboard passes the wheel on to the scroll area around it, which
    scrolls; one with the keyboard (clicked or tabbed to) takes it, as Qt's controls do.
    Guarded controls take the keyboard from a click or Tab only (``Qt.StrongFocus``): Qt's
    default for them, ``WheelFocus``, gave them the keyboard on the first notch, then turned
    them.
    """

    def guard(self, root: QWidget) -> None:
        """Guard every combo box and spin box inside ``root``."""
        for kind in WHEEL_CONTROLS:
            for control in root.findChildren(kind):
                control.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
                control.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget):
            return False
        if watched.hasFocus():
            return False
        assert isinstance(event, QWheelEvent)
        area = _scroll_area(watched)
        if area is None:
            # Nothing here to scroll: Qt hands an ignored wheel on to the parents.
            event.ignore()
            return True
        # Sent on to the scroll area's viewport, as a wheel over the panel's background goes
        # (Qt would not hand a synthesized wheel on; the scroll area takes either).
        viewport = area.viewport()
        at = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
        QApplication.sendEvent(
            viewport,
            QWheelEvent(
                at,
                event.globalPosition(),
                event.pixelDelta(),
                event.angleDelta(),
                event.buttons(),
                event.modifiers(),
                event.phase(),
                event.inverted(),
                event.source(),
            ),
        )
        event.accept()  # taken: Qt does not hand it to the parents, which would scroll twice
        return True


def guard_wheels(root: QWidget) -> QtWheelGuard:
    """Guard the combo boxes and spin boxes of ``root`` (see :class:`QtWheelGuard`); the guard
    lives as long as ``root``."""
    guard = QtWheelGuard(root)
    guard.guard(root)
    return guard


def _scroll_area(widget: QWidget) -> QAbstractScrollArea | None:
    """The nearest scroll area that ``widget`` sits in, if any."""
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None
