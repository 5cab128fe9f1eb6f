"""Past sessions from storage, to open and view again."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QLabel, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from tuner.errors import MptuneError
from tuner.search.session import list_sessions


class QtHistoryDialog(QDialog):
    """Lists the stored sessions; ``chosen`` is the one the user opened."""

    def __init__(self, storage: str | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Past sessions")
        self.resize(760, 420)
        self.chosen: str | None = None
        layout = QVBoxLayout(self)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["session", "model", "created", "trials",
                                              "recommendation"])
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.doubleClicked.connect(self.accept)
        layout.addWidget(self.table)
        self.message = QLabel()
        layout.addWidget(self.message)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        try:
            sessions = list_sessions(storage)
        except MptuneError as exc:
            sessions = []
            self.message.setText(str(exc))
        if not sessions and not self.message.text():
            self.message.setText("No stored sessions yet.")
        for s in sessions:
            row = self.table.rowCount()
            self.table.insertRow(row)
            for column, value in enumerate((s.name, s.model or "", s.created or "",
                                            str(s.trials), s.recommendation or "none yet")):
                item = QTableWidgetItem(value)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.table.setItem(row, column, item)
        self.table.resizeColumnsToContents()
        if sessions:
            self.table.selectRow(0)

    def accept(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            self.chosen = self.table.item(rows[0].row(), 0).text()
        super().accept()
