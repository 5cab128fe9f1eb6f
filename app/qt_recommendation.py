"""The recommendation: the chosen setup, its evidence and reason, alternatives."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from tuner import api


class QtRecommendation(QWidget):
    """Signals: exportRequested(str): the format to open the export dialog on."""

    exportRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        self.summary = QLabel("No recommendation yet: start a search, or open a past session.")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.summary)
        buttons = QHBoxLayout()
        self.export_button = QPushButton("Export...")
        self.apply_button = QPushButton("Apply to my script")
        self.apply_button.setToolTip("The paste-ready snippet for your own training script")
        for button in (self.export_button, self.apply_button):
            button.setEnabled(False)
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addStretch(1)
        self.export_button.clicked.connect(lambda: self.exportRequested.emit("json"))
        self.apply_button.clicked.connect(lambda: self.exportRequested.emit("snippet"))
        self.recommendation: api.Recommendation | None = None

    def set_recommendation(
        self, rec: api.Recommendation | None, message: str | None = None
    ) -> None:
        self.recommendation = rec
        enabled = rec is not None
        self.export_button.setEnabled(enabled)
        self.apply_button.setEnabled(enabled)
        if rec is None:
            self.summary.setText(html.escape(message or "No recommendation."))
            return
        rows = [(label, html.escape(text)) for label, text in api.evidence_rows(rec)]
        # The setup line in bold: it is the answer.
        rows[0] = (rows[0][0], f"<b>{rows[0][1]}</b>")
        self.summary.setText(
            "<table cellspacing='4'>"
            + "".join(f"<tr><td valign='top'><b>{k}</b></td><td>{v}</td></tr>" for k, v in rows)
            + "</table>"
        )
