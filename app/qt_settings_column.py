"""The window's left column: the machine, then the search's settings, scrolling up and down."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget


class QtSettingsColumn(QScrollArea):
    """Scrolls its content up and down, never sideways: it is never narrower than the widest
    row its content must show whole (the loss-scale editor's rows, the batch sizes' two
    boxes), so a splitter or a small screen cannot cut a row or a word off at the right edge.

    A fixed minimum width did cut them: at 1366x768 the column was 344 pixels inside where its
    rows needed 449, and with the horizontal scroll bar off the hardware verdict, the CPU's
    instruction sets and the second batch-size box ran out of sight. Wrapped text (the
    verdict, the cards) then wraps at the width the column has.
    """

    def __init__(self, *sections: tuple[str, QWidget], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        content = QWidget()
        column = QVBoxLayout(content)
        for title, widget in sections:
            column.addWidget(QLabel(f"<h3>{title}</h3>"))
            column.addWidget(widget)
        column.addStretch(1)
        self.setWidget(content)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # The content's rows change (a GPU's card, a candidate added): the column's own
        # minimum follows them.
        content.installEventFilter(self)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        content = self.widget()
        if content is None:
            return hint
        width = (
            content.minimumSizeHint().width()
            + self.verticalScrollBar().sizeHint().width()
            + 2 * self.frameWidth()
        )
        return QSize(max(hint.width(), width), hint.height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
        return super().eventFilter(watched, event)
