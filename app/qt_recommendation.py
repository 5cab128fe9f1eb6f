"""The recommendation: the chosen setup, its evidence and reason, hazards, alternatives."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.words import window_words
from tuner import api

#: The label colour of a hazard row: an unsafe policy's in red, a warning's in amber.
HAZARD_COLOURS = {"Unsafe": "#be123c", "Hazard": "#b45309"}
#: Rows the warnings come before: they bear on the answer more than the alternatives do.
_AFTER_HAZARDS = ("Alternative", "Not tried", "Note")


class QtRecommendation(QWidget):
    """The recommendation tab.

    Args:
        parent: the owning widget.
        engine: the engine's face (:mod:`tuner.api`, or a test's fake with its functions),
            which words the evidence.

    Signals:
        exportRequested(str): the format to open the export dialog on.
    """

    exportRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None, engine: Any = api) -> None:
        super().__init__(parent)
        self.engine = engine
        layout = QVBoxLayout(self)
        # Hazards and alternatives make the text longer than the tab: it scrolls, always. A
        # text browser lays its document out for the width it has and scrolls it itself (a
        # word-wrapped label in a scroll area kept the height of an earlier text after a
        # resumed search, and its last rows could not be reached).
        self.summary = QTextBrowser()
        self.summary.setOpenLinks(False)
        self.summary.setFrameShape(QFrame.Shape.NoFrame)
        self.summary.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.summary.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.summary.viewport().setAutoFillBackground(False)
        self._html = ""
        self._show("No recommendation yet: start a search, or open a past session.")
        layout.addWidget(self.summary, 1)
        buttons = QHBoxLayout()
        self.export_button = QPushButton("Export...")
        self.apply_button = QPushButton("Apply to my script")
        self.apply_button.setToolTip("The paste-ready snippet for your own training script")
        for button in (self.export_button, self.apply_button):
            button.setEnabled(False)
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
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
            self._show(html.escape(window_words(message or "No recommendation.")))
            return
        self._show(render(rec, self.engine))

    def _show(self, text: str) -> None:
        self._html = text
        self.summary.setHtml(text)
        self.summary.verticalScrollBar().setValue(0)  # a new text is read from its top

    def text(self) -> str:
        """The rich text on show, as it was set (the browser's own HTML is rewritten)."""
        return self._html


def render(rec: api.Recommendation, engine: Any = api) -> str:
    """The recommendation's evidence rows (``engine.evidence_rows``) as a rich-text table: the
    setup in bold, each unsafe policy's hazard under it, the warnings before the alternatives;
    a hazard in colour, its evidence and its fix on lines of their own."""
    rows: list[tuple[str, str, str]] = []  # (label, label cell, text cell)
    hazard_rows: list[tuple[str, str, str]] = []
    hazards = iter(rec.hazards)
    for label, text in engine.evidence_rows(rec):
        text = window_words(text)  # the controls' names, not the command line's flags
        if label == "Setup":  # the whole of it, its knobs included
            text = with_knobs(rec.setup, text)
        if rec.unused_gpu is not None and label == "Unused GPU":
            continue  # worded here, above the setup (unused_gpu_row)
        if label == "Today":
            continue  # worded here, first of all (today_row)
        if label in HAZARD_COLOURS:
            colour = HAZARD_COLOURS[label]
            cell = f"<b style='color:{colour}'>\u26a0&nbsp;{html.escape(label)}</b>"
            hazard_rows.append((label, cell, _hazard_cell(next(hazards, None), text)))
        else:
            rows.append((label, f"<b>{html.escape(label)}</b>", html.escape(text)))
    # The setup line in bold: it is the answer.
    rows[0] = (*rows[0][:2], f"<b>{rows[0][2]}</b>")
    # Unsafe policies right under the setup (they are why mixed precision is not the answer);
    # warnings before the alternatives.
    unsafe = [row for row in hazard_rows if row[0] == "Unsafe"]
    at = next((i for i, row in enumerate(rows) if row[0] in _AFTER_HAZARDS), len(rows))
    rows[at:at] = [row for row in hazard_rows if row[0] != "Unsafe"]
    rows[1:1] = unsafe
    if rec.unused_gpu is not None:
        rows.insert(0, unused_gpu_row(rec.unused_gpu))
    if rec.today_trap is not None:
        rows.insert(0, today_row(rec.today_trap))
    return (
        "<table cellspacing='4'>"
        + "".join(f"<tr><td valign='top'>{k}</td><td>{v}</td></tr>" for _, k, v in rows)
        + "</table>"
    )


def today_row(trap: str) -> tuple[str, str, str]:
    """The first row where what the user runs today does not train or fails (issue 71): the
    most important line of the recommendation, in the unsafe hazards' colour."""
    colour = HAZARD_COLOURS["Unsafe"]
    text = html.escape(f"{trap[0].upper()}{trap[1:]}")
    return (
        "Today",
        f"<b style='color:{colour}'>\u26a0&nbsp;Today</b>",
        f"<b style='color:{colour}'>{text}</b>",
    )


def unused_gpu_row(unused: api.UnusedGpu) -> tuple[str, str, str]:
    """The first row when the trials ran on the CPU while NVML saw a GPU the backend could not
    use: in red, with the command that fixes it on a line of its own."""
    reason = f" ({html.escape(unused.reason)})" if unused.reason else ""
    fix = f"<br>Fix: <code>{html.escape(unused.fix)}</code>" if unused.fix else ""
    cell = f"<b style='color:{HAZARD_COLOURS['Unsafe']}'>\u26a0&nbsp;Unused GPU</b>"
    text = f"This setup is for the CPU. {html.escape(unused.headline)}{reason}.{fix}"
    return "Unused GPU", cell, text


def knob_phrases(setup: api.Setup) -> list[tuple[tuple[str, ...], str]]:
    """The setup's execution knobs (and TF32) in words, each with the words that already name
    it in a line of text: ``(("xla", "torch.compile"), "XLA")``; from the engine's one
    declaration of the knobs (``api.KNOBS``)."""
    return [
        (knob.aliases(setup), phrase)
        for knob in api.KNOBS
        if (phrase := knob.phrase_of(setup)) is not None
    ]


def with_knobs(setup: api.Setup, text: str) -> str:
    """The engine's setup line with each of the setup's knobs it does not name yet added, so
    that the answer shows the whole setup whichever version of the engine wrote the line."""
    lowered = text.lower()
    missing = [
        phrase
        for needles, phrase in knob_phrases(setup)
        if not any(needle in lowered for needle in needles)
    ]
    return ", ".join([text, *missing]) if missing else text


def _hazard_cell(hazard: api.Hazard | None, text: str) -> str:
    """A hazard's row: where (policy and layer), what was measured, and the fix, each on a
    line; the engine's line as it is when it is not this hazard's."""
    if hazard is None or hazard.describe() != text:
        return html.escape(text)
    where = f", {html.escape(hazard.layer)}" if hazard.layer else ""
    colour = HAZARD_COLOURS["Unsafe" if hazard.unsafe else "Hazard"]
    return (
        f"<span style='color:{colour}'><b>{html.escape(hazard.policy)}</b>{where}: "
        f"{html.escape(hazard.kind.replace('_', ' '))}</span><br>"
        f"{html.escape(hazard.evidence)}.<br><i>Fix:</i> {html.escape(hazard.fix)}"
    )
