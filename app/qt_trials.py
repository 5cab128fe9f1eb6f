"""The table of trials: sortable, one row per trial, selecting a row shows its curves."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from app.tooltips import TOOLTIPS
from app.words import window_words
from tuner import api

COLUMNS = (
    "#",
    "stage",
    "precision",
    "batch",
    "loss scale",
    "knobs",
    "samples/s",
    "device/s",
    "p50 ms",
    "peak MB",
    "skipped",
    "loss gap",
    "status",
)
_TIPS = {
    "precision": TOOLTIPS["precision"],
    "knobs": TOOLTIPS["knobs"],
    "loss scale": TOOLTIPS["loss_scale"],
    "batch": TOOLTIPS["batch_size"],
    "skipped": TOOLTIPS["skipped"],
    "loss gap": TOOLTIPS["loss_gap"],
    "p50 ms": "The median step time of the measured steps, in milliseconds.",
    "samples/s": "The setup's one figure: what fit's own loop trains on your input (your "
    "make_dataset, or arrays through Keras' data adapter), less the steps a loss scale skipped.",
    "device/s": "What the device trains from batches already in memory, beside fit's figure. "
    "Shown, marked, once your input holds fit under 90% of it.",
}
#: No column wider than this (a long loss scale or status is elided; its tooltip has it whole),
#: so that the table fits beside the settings at 1280 pixels once knobs show; only the status
#: takes more, where the table has room left over.
MAX_COLUMN_PX = 124
#: The columns that give way, in turn, where the table is narrower than its columns want: the
#: stage (its tooltip has it whole), then the status (its tooltip has the reason in full)...
GIVE_WAY = ("stage", "status")
#: ...never narrower than this ("policies", "baseline", "stopped" in full).
GIVE_WAY_MIN_PX = 72

Index = QModelIndex | QPersistentModelIndex

#: The status cell's text colour: failures red; an unsafe policy (the model's numbers are
#: corrupted, not the trial broken) in its own colour, on a tint of it.
FAILED_COLOUR = "#b91c1c"
UNSAFE_COLOUR = "#9d174d"
UNSAFE_BACKGROUND = "#fce7f3"
#: An unsupported knob (the model cannot do it; the setup without it trains): neither a failure
#: nor a hazard, in a quiet slate on a tint of it.
UNSUPPORTED_COLOUR = "#475569"
#: An input that holds fit below the device's rate: a warning, not a failure.
INPUT_BOUND_COLOUR = "#b45309"
UNSUPPORTED_BACKGROUND = "#e2e8f0"
#: A trial stopped before it finished: no figures, nothing wrong with it; the same quiet look.
STOPPED_LOOK = (UNSUPPORTED_COLOUR, UNSUPPORTED_BACKGROUND)
#: The colour of the hazard marker on a trial that stays a candidate (warnings only).
HAZARD_COLOUR = "#b45309"


@dataclass(frozen=True)
class TrialRow:
    """One row: a trial's number in its session, the stage that asked for it, its result.
    A trial stopped before it finished (Stop, or a search that ended under it) keeps its row,
    ``stopped``, with the engine's result of such a trial (no figures, the reason)."""

    number: int
    stage: str
    result: api.TrialResult
    stopped: bool = False


class TrialsModel(QAbstractTableModel):
    """One :class:`TrialRow` per trial."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.rows: list[TrialRow] = []
        #: each trial's loss gap to IEEE float32, by number (the engine's ``trial_loss_gaps``)
        self.loss_gaps: dict[int, api.TrialGap] = {}
        #: by number, a trial whose figure did not hold and the one that measured it again
        #: (the engine's ``figure_notes``)
        self.figure_notes: dict[int, str] = {}

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return _TIPS.get(COLUMNS[section])
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        column = COLUMNS[index.column()]
        value = self._value(row, column)
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(column, value)
        if role == Qt.ItemDataRole.UserRole:  # what sorting compares
            return value if value is not None else -math.inf
        if column == "status" and role in _STATUS_ROLES:
            note = self.figure_notes.get(row.number, "")
            return _status_data(row.result, role, row.stopped, note)
        if role == Qt.ItemDataRole.ToolTipRole and column in ("precision", "batch", "knobs"):
            return setup_tooltip(row.result.spec.setup)
        if role == Qt.ItemDataRole.ToolTipRole and column in ("stage", "loss scale"):
            return self._text(column, value)
        if column == "device/s" and role == Qt.ItemDataRole.ForegroundRole:
            return QColor(INPUT_BOUND_COLOUR) if row.result.input_bound else None
        if role == Qt.ItemDataRole.ToolTipRole and column in ("samples/s", "device/s"):
            return _rates_tooltip(row.result)
        if role == Qt.ItemDataRole.ToolTipRole and column == "loss gap":
            gap = self.loss_gaps.get(row.number)
            return gap.words() if gap else None
        if role == Qt.ItemDataRole.TextAlignmentRole and column not in (
            "stage",
            "precision",
            "loss scale",
            "knobs",
            "status",
        ):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    #: What a stopped trial shows: its setup and why; it measured nothing.
    _STOPPED_SHOWS = ("#", "stage", "precision", "batch", "loss scale", "knobs", "status")

    def _value(self, row: TrialRow, column: str) -> Any:
        if row.stopped and column not in self._STOPPED_SHOWS:
            return None
        r = row.result
        setup = r.spec.setup
        return {
            "#": row.number,
            "stage": row.stage,
            "precision": setup.precision,
            "batch": setup.batch_size,
            "loss scale": str(setup.loss_scale),
            "knobs": " ".join(setup.knobs),
            "samples/s": r.trained_samples_per_second,
            "device/s": r.device_samples_per_second if r.input else None,
            "p50 ms": r.step_time_ms.get("p50"),
            "peak MB": r.peak_memory_mb,
            "skipped": r.skipped_steps,
            "loss gap": gap.gap if (gap := self.loss_gaps.get(row.number)) else None,
            "status": status_text(r, row.stopped, self.figure_notes.get(row.number, "")),
        }[column]

    @staticmethod
    def _text(column: str, value: Any) -> str:
        if value is None:
            return ""
        if column in ("samples/s", "device/s"):
            return f"{value:,.0f}"
        if column in ("p50 ms",):
            return f"{value:.2f}"
        if column == "peak MB":
            return f"{value:,.0f}"
        if column == "loss gap":
            return f"{value:.2%}"
        return str(value)

    def add(self, row: TrialRow) -> None:
        for i, old in enumerate(self.rows):
            if old.number == row.number:  # a replayed or reloaded trial replaces its row
                self.rows[i] = row
                self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))
                return
        self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows))
        self.rows.append(row)
        self.endInsertRows()

    def set_loss_gaps(
        self, gaps: dict[int, api.TrialGap], notes: dict[int, str] | None = None
    ) -> None:
        """Each trial's loss gap, and (``notes``) what its status says of a figure that did
        not hold (the engine's ``figure_notes``)."""
        self.loss_gaps = dict(gaps)
        self.figure_notes = dict(notes or {})
        if self.rows:
            self.dataChanged.emit(
                self.index(0, 0), self.index(len(self.rows) - 1, len(COLUMNS) - 1)
            )

    def clear(self) -> None:
        self.beginResetModel()
        self.rows = []
        self.loss_gaps = {}
        self.figure_notes = {}
        self.endResetModel()


def status_text(result: api.TrialResult, stopped: bool = False, note: str = "") -> str:
    """The status cell: ``ok``, ``ok ⚠ 1 hazard``, ``ok, pruned``, ``unsafe ⚠ 2 hazards: why``,
    ``oom: why``, ``unsupported: why``, ``stopped: why``; ``note`` after it (a figure that did
    not hold: ``ok; measured again: the first figure (#3) did not hold``)."""
    if stopped:
        why = window_words(result.error.message) if result.error else ""
        return why if why.startswith("stopped") else "stopped" + (f": {why}" if why else "")
    text = result.status.value
    if result.pruned:
        text += ", pruned"
    if result.hazards:
        n = len(result.hazards)
        text += f" \u26a0 {n} hazard{'s' if n > 1 else ''}"
    if not result.ok:
        text += f": {window_words(result.error.message) if result.error else ''}"
    return f"{text}; {note}" if note else text


_STATUS_ROLES = (
    Qt.ItemDataRole.ToolTipRole,
    Qt.ItemDataRole.ForegroundRole,
    Qt.ItemDataRole.BackgroundRole,
)


#: The statuses with a look of their own: (text colour, background).
_STATUS_LOOKS = {
    api.TrialStatus.UNSAFE: (UNSAFE_COLOUR, UNSAFE_BACKGROUND),
    api.TrialStatus.UNSUPPORTED: (UNSUPPORTED_COLOUR, UNSUPPORTED_BACKGROUND),
}


def _status_data(result: api.TrialResult, role: int, stopped: bool = False, note: str = "") -> Any:
    look = STOPPED_LOOK if stopped else _STATUS_LOOKS.get(result.status)
    if role == Qt.ItemDataRole.ToolTipRole:
        return status_tooltip(result, stopped, note)
    if role == Qt.ItemDataRole.ForegroundRole:
        if look is not None:
            return QColor(look[0])
        if not result.ok:
            return QColor(FAILED_COLOUR)
        return QColor(HAZARD_COLOUR) if result.hazards else None
    if role == Qt.ItemDataRole.BackgroundRole and look is not None:
        return QColor(look[1])
    return None


def setup_tooltip(setup: api.Setup) -> str | None:
    """The setup in words where it has knobs (or TF32), e.g. ``float32 with TF32 matmuls at
    batch size 32 (no loss scaling, XLA, 2 accumulation steps (global batch 64))``."""
    return setup.describe() if setup.knobs or setup.tf32 else None


def status_tooltip(result: api.TrialResult, stopped: bool = False, note: str = "") -> str | None:
    """The failure's reason and each hazard in full (rich text, so that Qt wraps it); an
    unsupported knob also says what that status means, a pruned trial why it measured less,
    a figure that did not hold (``note``) what was done, and a stopped one that it has no
    figures."""
    parts = []
    if stopped:
        parts.append(f"<p>{html.escape(TOOLTIPS['stopped'], quote=False)}</p>")
    if result.pruned:
        parts.append(f"<p>{html.escape(result.pruned_words, quote=False)}</p>")
    if note:
        parts.append(f"<p>{html.escape(note, quote=False)}</p>")
    if result.error is not None:
        parts.append(f"<p>{html.escape(window_words(result.error.message), quote=False)}</p>")
    if result.status is api.TrialStatus.UNSUPPORTED:
        parts.append(f"<p>{html.escape(TOOLTIPS['unsupported'], quote=False)}</p>")
    if result.hazards:
        items = "".join(
            f"<li><b>{h.severity}</b> ({h.kind.replace('_', ' ')}): "
            f"{html.escape(h.describe(), quote=False)}</li>"
            for h in result.hazards
        )
        parts.append(f"<p>Precision hazards:</p><ul>{items}</ul>")
    return "".join(parts) or None


class QtTrialsTable(QTableView):
    """The trials, sortable by any column.

    Signals:
        trialSelected(TrialRow): the selected row's trial.
    """

    trialSelected = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trials = TrialsModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.trials)
        self.proxy.setSortRole(Qt.ItemDataRole.UserRole)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setAlternatingRowColors(True)
        # One line a row: a long status is elided, and its tooltip gives it in full.
        self.setWordWrap(False)
        self.verticalHeader().setVisible(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)  # sized by _size_columns
        self.selectionModel().selectionChanged.connect(self._on_selection)
        # The header fits its columns to the rows there when it is set up, not to rows added
        # later: a search's first mixed-precision row would show "mixed_..." without this.
        self.trials.rowsInserted.connect(self._fit_columns)
        self.trials.dataChanged.connect(self._fit_columns)
        self.trials.modelReset.connect(self._fit_columns)
        self._fit_columns()

    def _fit_columns(self) -> None:
        rows = self.trials.rows
        # The knobs column shows once a trial has a knob: a search without any keeps its width.
        self.setColumnHidden(
            COLUMNS.index("knobs"), not any(r.result.spec.setup.knobs for r in rows)
        )
        # The device's own rate shows once the input holds a trial back; the samples/s tooltip
        # has it always.
        fed = COLUMNS.index("device/s")
        self.setColumnHidden(fed, not any(r.result.input_bound for r in rows))
        # Skipped steps show once a trial skipped one (float16's dynamic loss scale, on an
        # overflow); until then the column would be zeros, and the loss-scale plot marks them.
        skipped = COLUMNS.index("skipped")
        self.setColumnHidden(skipped, not any(r.result.skipped_steps for r in rows))
        self._size_columns()

    def _size_columns(self) -> None:
        """Each column as wide as its header and cells, up to :data:`MAX_COLUMN_PX` (a longer
        text elided, its tooltip whole). Where the table is narrower than that, the stage and
        then the status give way, each to what the others leave but not below
        :data:`GIVE_WAY_MIN_PX` (at 1280 pixels with knobs the stage read only "..."); where
        even that is too little, the table scrolls sideways. Room left over goes to the
        status."""
        header = self.horizontalHeader()
        shown = [i for i in range(len(COLUMNS)) if not self.isColumnHidden(i)]
        widths = {
            i: min(max(self.sizeHintForColumn(i), header.sectionSizeHint(i)), MAX_COLUMN_PX)
            for i in shown
        }
        room = self.viewport().width()
        for column in (COLUMNS.index(name) for name in GIVE_WAY):
            over = sum(widths.values()) - room
            floor = min(widths[column], GIVE_WAY_MIN_PX)
            widths[column] = max(widths[column] - max(0, over), floor)
        widths[COLUMNS.index("status")] += max(0, room - sum(widths.values()))
        for column, width in widths.items():
            header.resizeSection(column, width)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._size_columns()

    def _on_selection(self) -> None:
        rows = self.selectionModel().selectedRows()
        if rows:
            source = self.proxy.mapToSource(rows[0])
            self.trialSelected.emit(self.trials.rows[source.row()])

    def select_number(self, number: int) -> None:
        for i, row in enumerate(self.trials.rows):
            if row.number == number:
                self.selectRow(self.proxy.mapFromSource(self.trials.index(i, 0)).row())
                return


def _rates_tooltip(result: api.TrialResult) -> str | None:
    """The device's rate and the input's apart, and whether the input is the bound."""
    fed, device = result.input, result.device_samples_per_second
    if fed is None or device is None:
        return None
    verdict = (
        "input-bound: fit is held to the input's rate. " + fed.advice(result.spec.setup.backend)
        if result.input_bound
        else "the input keeps up"
    )
    if fed.fit_loop:  # one figure: fit's loop gave the row's samples/s
        return (
            f"fit's own loop on {fed.fed_by}; device {device:,.0f} samples/s from batches in "
            f"memory: {verdict}"
        )
    return (
        f"device {device:,.0f} samples/s from batches in memory; input "
        f"{fed.samples_per_second:,.0f} samples/s from {fed.fed_by}: {verdict}"
    )
