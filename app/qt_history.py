"""Past sessions from storage, to open and view again."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from tuner import api

#: No column but the last (the recommendation, which stretches) wider than this.
MAX_COLUMN_PX = 220


class QtHistoryDialog(QDialog):
    """Lists the stored sessions. It opens at once, saying it is reading; the window reads the
    storage off the GUI thread and hands the list over with :meth:`set_sessions`.

    Signals:
        sessionChosen(str): the session the user opened.
    """

    sessionChosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Past sessions")
        self.resize(960, 420)
        self.chosen: str | None = None
        layout = QVBoxLayout(self)
        self.table = QTableWidget(0, len(api.SessionSummary.COLUMNS))
        self.table.setHorizontalHeaderLabels(list(api.SessionSummary.COLUMNS))
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.doubleClicked.connect(self.accept)
        layout.addWidget(self.table)
        self.message = QLabel("Reading the stored sessions...")
        layout.addWidget(self.message)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        self.open_button = buttons.button(QDialogButtonBox.StandardButton.Open)
        self.open_button.setEnabled(False)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def set_sessions(self, sessions: list[api.SessionSummary]) -> None:
        """Show ``sessions`` (newest first)."""
        self.message.setText("" if sessions else "No stored sessions yet.")
        self.table.setRowCount(0)
        for s in sessions:
            row = self.table.rowCount()
            self.table.insertRow(row)
            for column, value in enumerate(s.cells()):
                item = QTableWidgetItem(value)
                item.setToolTip(value)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.table.setItem(row, column, item)
        self.table.resizeColumnsToContents()
        # The long columns are elided (their tooltips hold them whole), so that the trials and
        # the recommendation are in view without scrolling sideways.
        for column in range(self.table.columnCount() - 1):
            if self.table.columnWidth(column) > MAX_COLUMN_PX:
                self.table.setColumnWidth(column, MAX_COLUMN_PX)
        if sessions:
            self.table.selectRow(0)
        self.open_button.setEnabled(bool(sessions))

    def set_problem(self, message: str) -> None:
        """The storage could not be read."""
        self.message.setText(message)

    def accept(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        item = self.table.item(rows[0].row(), 0) if rows else None
        if item is not None:
            self.chosen = item.text()
            self.sessionChosen.emit(self.chosen)
        super().accept()
