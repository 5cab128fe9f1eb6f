"""The Search panel's loss scales: a list of candidates to tick, and a row to add one.

A float16 search tries each ticked loss scale (``SearchSpace.loss_scales``). The window shows
them as candidates in words ("dynamic from 1024, times 2 every 500 steps"), each with a
tick; a new one is made from its kind and numbers (never typed as ``dynamic:1024:500``, the
command line's syntax), and one the user added can be removed. What is ticked, and what is
listed, is kept between runs as the engine writes loss scales (``str(LossScale)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QListView,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.tooltips import TOOLTIPS
from tuner import api

#: The largest scale the add row offers (2^24: far above where float16 gradients overflow).
MAX_SCALE = 1 << 24
_ROLE = Qt.ItemDataRole.UserRole


def scale_words(scale: api.LossScale) -> str:
    """A loss scale in a few words, as the list shows it (:func:`scale_sentence` in full)."""
    if scale.kind == "fixed":
        return f"fixed at {scale.value:g}"
    if scale.kind == "none":
        return "none"
    if scale.initial_scale is None and scale.growth_steps is None:
        return "dynamic (Keras' default)"
    return (
        f"dynamic from {scale.effective_initial_scale:g}, "
        f"\u00d72 every {scale.effective_growth_steps} steps"
    )


def scale_sentence(scale: api.LossScale) -> str:
    """A loss scale in full, for its tooltip."""
    if scale.kind == "fixed":
        return f"fixed at {scale.value:g}: a constant scale, never a skipped step"
    if scale.kind == "none":
        return "no loss scaling"
    default = " (Keras' default)" if scale.initial_scale is None else ""
    return (
        f"dynamic{default}: starts at {scale.effective_initial_scale:g}, halves and skips the "
        f"step on an overflow, doubles after {scale.effective_growth_steps} clean steps"
    )


class LossScalesEditor(QWidget):
    """Candidates to tick, and a row that adds one (dynamic from N, growing every M steps; or
    fixed at N). ``changed`` is emitted whenever what is ticked or listed changes."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.list = QListWidget()
        self.list.setToolTip(TOOLTIPS["loss_scale"])
        self.list.setMaximumHeight(self.list.fontMetrics().height() * 6 + 12)  # about five rows
        # A long candidate ("dynamic from 1024, x2 every 500 steps") wraps within the column's
        # width (issue 54: the list scrolled sideways to show it at 1366x768), never cut.
        self.list.setWordWrap(True)
        self.list.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.list.setResizeMode(QListView.ResizeMode.Adjust)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.itemChanged.connect(lambda _item: self.changed.emit())
        self.list.currentItemChanged.connect(lambda *_: self._enable_remove())
        layout.addWidget(self.list)

        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        self.kind = QComboBox()
        self.kind.addItems(("dynamic", "fixed"))
        self.kind.setToolTip("dynamic: Keras lowers the scale on overflow and raises it again; "
                             "fixed: one scale throughout")  # fmt: skip
        self.scale = QSpinBox()
        self.scale.setRange(1, MAX_SCALE)
        self.scale.setValue(1024)
        self.scale.setToolTip("the scale (dynamic: the one it starts from)")
        self.growth = QSpinBox()
        self.growth.setRange(1, 10**6)
        self.growth.setValue(500)
        self.growth.setPrefix("every ")
        self.growth.setSuffix(" steps")
        self.growth.setToolTip("dynamic: clean steps before the scale doubles")
        self.kind.currentTextChanged.connect(lambda kind: self.growth.setEnabled(kind == "dynamic"))
        self.add = QPushButton("Add")
        self.add.setToolTip("add this loss scale to the candidates, ticked")
        self.add.clicked.connect(self._add_from_row)
        self.remove = QPushButton("Remove")
        self.remove.setToolTip("remove the selected candidate")
        self.remove.setEnabled(False)
        self.remove.clicked.connect(self._remove_current)
        # Short lines, the Search column is narrow and never cuts a row (QtSettingsColumn): Remove
        # under the list it removes from; then the candidate to add, over two lines.
        below = QHBoxLayout()
        below.setContentsMargins(0, 0, 0, 0)
        below.addStretch(1)
        below.addWidget(self.remove)
        for widget in (self.kind, self.scale):
            row.addWidget(widget)
        second = QHBoxLayout()
        second.setContentsMargins(0, 0, 0, 0)
        for control in (self.growth, self.add):
            second.addWidget(control)
        layout.addLayout(below)
        layout.addLayout(row)
        layout.addLayout(second)

    # -- what it holds ---------------------------------------------------------------------
    def set_candidates(self, listed: Iterable[api.LossScale], ticked: Iterable[Any]) -> None:
        """List ``listed`` (repeats once), ticking those whose written form is in ``ticked``."""
        chosen = {str(s) for s in ticked}
        self.list.blockSignals(True)
        self.list.clear()
        for scale in listed:
            if str(scale) not in self.written():
                self._append(scale, str(scale) in chosen)
        self.list.blockSignals(False)
        self._enable_remove()
        self.changed.emit()

    def candidates(self) -> tuple[api.LossScale, ...]:
        """The ticked loss scales, in the list's order."""
        return tuple(
            self.list.item(i).data(_ROLE)
            for i in range(self.list.count())
            if self.list.item(i).checkState() == Qt.CheckState.Checked
        )

    def listed(self) -> tuple[api.LossScale, ...]:
        """Every loss scale in the list, ticked or not."""
        return tuple(self.list.item(i).data(_ROLE) for i in range(self.list.count()))

    def written(self) -> list[str]:
        """Every listed loss scale as the engine writes it."""
        return [str(s) for s in self.listed()]

    def add_scale(self, scale: api.LossScale) -> None:
        """Add ``scale``, ticked; one already listed is ticked instead."""
        for i in range(self.list.count()):
            if str(self.list.item(i).data(_ROLE)) == str(scale):
                self.list.item(i).setCheckState(Qt.CheckState.Checked)
                return
        self._append(scale, True)
        self.changed.emit()

    # -- the list's rows ---------------------------------------------------------------------
    def _append(self, scale: api.LossScale, ticked: bool) -> None:
        item = QListWidgetItem(scale_words(scale))
        item.setData(_ROLE, scale)
        item.setToolTip(scale_sentence(scale))
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked)
        self.list.addItem(item)

    def _add_from_row(self) -> None:
        if self.kind.currentText() == "fixed":
            scale = api.LossScale("fixed", value=float(self.scale.value()))
        else:
            scale = api.LossScale(
                "dynamic", initial_scale=float(self.scale.value()), growth_steps=self.growth.value()
            )
        self.add_scale(scale)

    def _remove_current(self) -> None:
        row = self.list.currentRow()
        if row >= 0:
            self.list.takeItem(row)
            self._enable_remove()
            self.changed.emit()

    def _enable_remove(self) -> None:
        self.remove.setEnabled(self.list.currentRow() >= 0)
