"""The recommendation: the chosen setup, its evidence and reason, alternatives."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


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
        self.recommendation: dict[str, Any] | None = None

    def set_recommendation(self, rec: dict[str, Any] | None, message: str | None = None) -> None:
        self.recommendation = rec
        enabled = rec is not None
        self.export_button.setEnabled(enabled)
        self.apply_button.setEnabled(enabled)
        if rec is None:
            self.summary.setText(html.escape(message or "No recommendation."))
            return
        spread = rec.get("samples_per_second_spread") or [None, None]
        rows = [
            ("Setup", f"<b>{rec['policy']}</b>, batch size <b>{rec['batch_size']}</b>, loss "
                      f"scale <b>{html.escape(rec['loss_scale'])}</b>"),
            ("Throughput", f"{rec['samples_per_second']:,.0f} samples/s (measured "
                           f"{_fmt(spread[0], ',.0f')} to {_fmt(spread[1], ',.0f')})"),
            ("Against float32", f"{_fmt(rec.get('speedup_vs_float32'), '.2f')}x the best float32 "
                                f"setup; {_fmt(rec.get('speedup_vs_baseline'), '.2f')}x float32 at "
                                "the starting batch size"),
            ("Memory", f"{_fmt(rec.get('peak_memory_mb'), ',.0f')} MB peak"
                       + (f", {rec['memory_saving']:.0%} less than float32 at this batch size"
                          if rec.get("memory_saving") is not None else "")),
            ("Loss gap", f"{rec['loss_gap']:.2%} to float32" if rec.get("loss_gap") is not None
             else "n/a"),
            ("Evidence", "trials " + ", ".join(f"#{n}" for n in rec.get("trials", []))),
            ("Why", html.escape(rec["reason"])),
        ]
        for alt in rec.get("alternatives", []):
            verdict = alt["rejected"] or f"{_fmt(alt.get('speedup_vs_float32'), '.2f')}x float32"
            rows.append(("Alternative", html.escape(
                f"{alt['policy']} b{alt['batch_size']} {alt['loss_scale']}: "
                f"{_fmt(alt.get('samples_per_second'), ',.0f')} samples/s, {verdict}")))
        for item in rec.get("not_tried", []):
            rows.append(("Not tried", html.escape(f"{item['what']}: {item['why']}")))
        for note in rec.get("notes", []):
            rows.append(("Note", html.escape(note)))
        self.summary.setText("<table cellspacing='4'>" + "".join(
            f"<tr><td valign='top'><b>{k}</b></td><td>{v}</td></tr>" for k, v in rows)
            + "</table>")
