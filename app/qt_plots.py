"""The four live plots: memory, throughput, loss scale and loss.

They draw from data the main window hands them (plain numbers), on a timer; long series stay
fluid through pyqtgraph's downsampling and clip-to-view.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QGridLayout, QWidget

from app.sampler import Sample
from tuner.api import POLICIES, Hazard, StepMessage

POLICY_COLOURS = {"float32": "#3b82f6", "mixed_float16": "#10b981", "mixed_bfloat16": "#f59e0b"}
#: The full half policies' (issue 71): a series of their own, made when a trial of one is
#: shown (a script's own, or one offered for a frozen backbone), never in every legend.
FULL_HALF_COLOURS = {"bfloat16": "#a16207", "float16": "#047857"}
#: Hazard markers: an unsafe policy's in red, a warning's in amber.
HAZARD_COLOURS = {"unsafe": "#be123c", "warning": "#b45309"}
#: Hazards about the loss scale's range go on the loss-scale plot; the others on the loss plot.
SCALE_HAZARDS = ("underflow", "overflow")
#: A marker's words per hazard kind (the hazard's ``figure`` follows them).
_MARKER = {
    "integer_cast": "integer cast",
    "policy_failure": "fails under this policy",
    "overflow": "overflow",
    "underflow": "underflow",
    "low_precision_output": "low-precision output",
    "divergence": "divergence",
}
#: The width of a saved figure in pixels: wide enough for a report or a slide.
REPORT_WIDTH_PX = 1800
pg.setConfigOptions(antialias=True, background="w", foreground="#222")


#: Labels on a vertical axis at least this far apart (a line of 8-9 pt text and a gap).
MIN_LABEL_PX = 22
_LOG10_2 = math.log10(2)
_SUPERSCRIPT = str.maketrans(
    "-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)


class PowersOfTwoAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph is untyped
    """A log axis of loss scales, which are powers of two: ticks at 2^k only (2¹⁵), as many as
    fit without two labels touching (pyqtgraph's own log ticks labelled 2e+04, 3e+04, ...
    over each other on a short axis)."""

    def tickValues(self, min_val: float, max_val: float, size: float) -> list[Any]:
        if not self.logMode:
            ticks: list[Any] = super().tickValues(min_val, max_val, size)
            return ticks
        low, high = sorted((min_val, max_val))
        first, last = math.ceil(low / _LOG10_2), math.floor(high / _LOG10_2)
        if last < first:  # inside one power of two: the nearest one
            first = last = round((low + high) / 2 / _LOG10_2)
        room = max(1, int(size // MIN_LABEL_PX))
        step = max(1, math.ceil((last - first + 1) / room))
        powers = [k for k in range(first, last + 1) if k % step == 0] or [first]
        return [(step * _LOG10_2, [k * _LOG10_2 for k in powers])]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if not self.logMode:
            strings: list[str] = super().tickStrings(values, scale, spacing)
            return strings
        return ["2" + str(round(v / _LOG10_2)).translate(_SUPERSCRIPT) for v in values]


#: The use plot's curves: utilisation (a GPU's, or a CPU worker's share of the cores), power.
USE_COLOUR = "#16a34a"
POWER_COLOUR = "#f97316"


def _first(values: tuple[float | None, ...]) -> float:
    """The first GPU's reading, NaN where there is none (a gap in its curve)."""
    return values[0] if values and values[0] is not None else math.nan


#: pyqtgraph's height of a plot's title row: one line of the title.
TITLE_ROW = 30


class _Plot(pg.PlotWidget):  # type: ignore[misc]
    """A plot laid out within its width: its legend row takes as many columns as fit and wraps
    into rows past that, and a title wider than the plot gives way (its text runs under the
    axes' space) instead of widening it.

    Four entries in one row ("float32  mixed_float16  mixed_bfloat16  best") need about 440
    pixels; a plot at 1280x720 had about 420, and pyqtgraph laid the plot out wider than its
    view, cutting the legend and the plot's right edge off.
    """

    #: a legend entry's sample (its line or symbol) and the spacing beside it, in pixels
    SAMPLE = 20 + 8
    #: how the legend was last laid out: (columns, entries)
    _legend_shape: tuple[int, int] | None = None
    #: the title in full and its width (set by :meth:`setTitle`)
    _title: tuple[str, float] | None = None

    def resizeEvent(self, event: Any) -> None:
        self.fit_width()
        super().resizeEvent(event)

    def setTitle(self, title: str) -> None:
        item = self.getPlotItem()
        item.setTitle(title)
        self._title = (title, item.titleLabel.preferredWidth())
        self.fit_width()

    def legend_changed(self) -> None:
        """Entries were removed or added: lay the legend out again, in their order."""
        self._legend_shape = None
        self.fit_width()

    def fit_width(self) -> None:
        """Called on a resize and whenever an axis changes its width (its tick labels)."""
        item = self.getPlotItem()  # None while pyqtgraph builds the widget
        legend = getattr(item, "legend", None)
        if legend is None:
            return
        axes = [item.getAxis(side) for side in ("left", "right")]
        room = self.width() - sum(axis.width() for axis in axes if axis.isVisible()) - 6
        self._fit_title(item, room)
        entries = [self.SAMPLE + label.minimumWidth() for _sample, label in legend.items]
        columns = 1
        for n in range(min(LEGEND_COLUMNS, len(entries)), 0, -1):
            if sum(max(entries[c::n]) for c in range(n)) <= room:
                columns = n
                break
        if (columns, len(entries)) != self._legend_shape:
            _lay_out_legend(legend, columns)
            self._legend_shape = (columns, len(entries))

    def _fit_title(self, item: Any, room: float) -> None:
        """The title whole where it fits: on one line, else on two (broken at the space nearest
        its middle, the title's row made as tall as they are); cut short with an ellipsis only
        where neither fits ``room``. pyqtgraph's title takes its text's width as its minimum,
        whatever the plot's."""
        if self._title is None:
            return
        full, width = self._title
        if not width > room > 0:
            self._show_title(item, full)
            return
        wrapped = _two_lines(full)
        if wrapped is not None:
            self._show_title(item, wrapped)
            if item.titleLabel.preferredWidth() <= room:
                return
        # Cut by the characters' share of the width, then shorter until it fits (a glyph's
        # width varies): a few tries at most.
        keep = max(int(len(full) * room / width), 1)
        while True:
            self._show_title(item, full[:keep].rstrip() + "\u2026")
            if keep == 1 or item.titleLabel.preferredWidth() <= room:
                return
            keep -= 1

    @property
    def title_shown(self) -> str:
        """The title as drawn now, its line break a space (the full one is :attr:`_title`)."""
        return str(self.getPlotItem().titleLabel.text).replace("<br>", " ")

    @staticmethod
    def _show_title(item: Any, text: str) -> None:
        """Draw ``text`` as the title, its row as tall as its lines (pyqtgraph fixes it at 30
        pixels, one line)."""
        if text == item.titleLabel.text:
            return
        item.titleLabel.setText(text)
        height = max(TITLE_ROW, math.ceil(item.titleLabel.itemRect().height()))
        item.titleLabel.setMaximumHeight(height)
        item.layout.setRowFixedHeight(0, height)


def _two_lines(title: str) -> str | None:
    """``title`` on two lines, broken at the space nearest its middle (rich text); None for a
    title of one word."""
    spaces = [i for i, c in enumerate(title) if c == " "]
    if not spaces:
        return None
    middle = min(spaces, key=lambda i: abs(i - len(title) / 2))
    return f"{title[:middle]}<br>{title[middle + 1 :]}"


def _lay_out_legend(legend: pg.LegendItem, columns: int) -> None:
    """The legend's entries in the order they were added, ``columns`` to a row (pyqtgraph's
    own ``setColumnCount`` fills the cells an entry removed before, which reordered them)."""
    layout = legend.layout
    for i in range(layout.count() - 1, -1, -1):
        layout.removeAt(i)
    for i, (sample, label) in enumerate(legend.items):
        row, column = divmod(i, columns)
        layout.addItem(sample, row, 2 * column, alignment=Qt.AlignmentFlag.AlignVCenter)
        layout.addItem(label, row, 2 * column + 1)
    legend.columnCount = columns
    legend.rowCount = math.ceil(len(legend.items) / columns)
    legend.updateSize()


#: a legend's entries in one row, where the plot is wide enough
LEGEND_COLUMNS = 4


def _plot(title: str, left: str, bottom: str, axis: pg.AxisItem | None = None) -> _Plot:
    # The x axis is named in the title ("Loss by step"), not under its ticks: that row holds
    # the legend instead, and the data keeps the height.
    widget = _Plot(axisItems={"left": axis} if axis is not None else None)
    item = widget.getPlotItem()
    item.setLabel("left", left)
    item.showGrid(x=True, y=True, alpha=0.2)
    item.setDownsampling(auto=True, mode="peak")
    item.setClipToView(True)
    # The legend in a row of its own under the plot, outside the data (inside, it covered
    # points); the plot's named items join it as they are added.
    legend = pg.LegendItem(labelTextSize="8pt", colCount=LEGEND_COLUMNS, frame=False, verSpacing=-6)
    item.layout.addItem(legend, 4, 1)
    item.legend = legend
    for side in ("left", "right"):  # tick labels widen an axis after the plot's resize
        item.getAxis(side).geometryChanged.connect(widget.fit_width)
    widget.setTitle(f"{title} by {bottom}")
    widget.setMinimumSize(220, 160)
    return widget


def _points(
    plot: pg.PlotWidget, name: str, symbol: str, size: int, brush: str, pen: str | None = None
) -> pg.PlotDataItem:
    """A named series of points: a plot data item (not a bare scatter item), so that a log axis
    transforms it, whose legend sample shows its symbol and colour before it has any point.
    pyqtgraph draws the sample from the item's inner scatter, which takes the item's symbol
    options only with its first data: a policy not measured yet showed a grey dot."""
    item = plot.plot(
        [],
        [],
        pen=None,
        symbol=symbol,
        symbolSize=size,
        symbolBrush=brush,
        symbolPen=pen,
        name=name,
    )
    item.scatter.setSymbol(symbol)
    item.scatter.setSize(size)
    item.scatter.setBrush(pg.mkBrush(brush))
    item.scatter.setPen(pg.mkPen(pen))
    return item


class _Series:
    """A growing (x, y) series kept in numpy arrays that double as they fill."""

    def __init__(self) -> None:
        self.x = np.empty(1024)
        self.y = np.empty(1024)
        self.n = 0

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        need = self.n + len(xs)
        if need > len(self.x):
            size = max(need, 2 * len(self.x))
            self.x = np.resize(self.x, size)
            self.y = np.resize(self.y, size)
        self.x[self.n : need] = xs
        self.y[self.n : need] = ys
        self.n = need

    def clear(self) -> None:
        self.n = 0

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x[: self.n], self.y[: self.n]


class QtLivePlots(QWidget):
    """Memory over time, with the device's use beside it on a right axis (a GPU's utilisation
    and power through NVML, or on a CPU the trial worker's share of the cores, so that a device
    waiting for its input shows as it happens: issue 35), throughput per batch size, loss scale
    per step, loss per step."""

    PLOTS = ("memory", "throughput", "loss_scale", "loss", "use")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        self.memory = _plot("Memory", "MB", "seconds of the session")
        self.throughput = _plot("Throughput", "samples/s", "batch size")
        self.loss_scale = _plot(
            "Loss scale (float16)", "scale", "step", PowersOfTwoAxis(orientation="left")
        )
        self.loss = _plot("Loss", "loss", "step")
        self.throughput.getPlotItem().setLogMode(x=True, y=False)
        self.throughput.getPlotItem().getViewBox().setDefaultPadding(0.12)  # edge points show
        # Batch sizes as ticks (the ladder's powers of two), not 7*10^1.
        self.throughput.getPlotItem().getAxis("bottom").setTicks(
            [[(math.log10(2**k), str(2**k)) for k in range(0, 17)]]
        )
        self.loss_scale.getPlotItem().setLogMode(x=False, y=True)
        for i, plot in enumerate((self.memory, self.throughput, self.loss_scale, self.loss)):
            grid.addWidget(plot, i // 2, i % 2)
        # The device's use over the same seconds, on the memory plot's right axis (percent):
        # a GPU's utilisation and power, a CPU worker's share of the cores (issue 35).
        memory = self.memory.getPlotItem()
        self.use_view = pg.ViewBox(enableMouse=False)
        memory.showAxis("right")
        memory.scene().addItem(self.use_view)
        memory.getAxis("right").linkToView(self.use_view)
        memory.getAxis("right").setLabel("use %")
        self.use_view.setXLink(memory)
        self.use_view.setYRange(0, 100, padding=0.02)
        memory.vb.sigResized.connect(self._fit_use_view)
        self._utilization = _Series()
        self._power = _Series()
        self.utilization_curve = pg.PlotCurveItem(
            pen=pg.mkPen(USE_COLOUR, width=1), connect="finite"
        )
        self.power_curve = pg.PlotCurveItem(
            pen=pg.mkPen(POWER_COLOUR, width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
            connect="finite",
        )
        self.use_view.addItem(self.utilization_curve)
        self.use_view.addItem(self.power_curve)

        self._memory = _Series()
        # A resumed search's samples start after a gap, not joined to the last run's by a line.
        self.memory_curve = self.memory.plot(
            pen=pg.mkPen("#6366f1", width=1), name="memory", connect="finite"
        )
        self.memory_peaks = pg.ScatterPlotItem(
            symbol="t", size=10, brush="#ef4444", name="trial peak"
        )
        self.memory.addItem(self.memory_peaks)
        self.budget_line = pg.InfiniteLine(
            angle=0, pen=pg.mkPen("#ef4444", style=pg.QtCore.Qt.PenStyle.DashLine)
        )
        self.budget_line.setVisible(False)
        # The budget does not stretch the view: far above a small model's memory it would flatten
        # the curve; the title says its value, and the line shows when memory comes close.
        self.memory.getPlotItem().addItem(self.budget_line, ignoreBounds=True)
        self.name_use(on_gpu=False)  # after memory's own entries, in its legend too

        self.throughput_points = {
            p: _points(self.throughput, p, "o", 9, POLICY_COLOURS[p]) for p in POLICIES
        }
        self.best_point = _points(self.throughput, "best", "star", 18, "#dc2626")
        self.baseline_line = pg.InfiniteLine(
            angle=0,
            pen=pg.mkPen("#3b82f6", style=pg.QtCore.Qt.PenStyle.DotLine),
            label="float32 baseline",
            labelOpts={"position": 0.15, "color": "#3b82f6"},
        )
        self.baseline_line.setVisible(False)
        self.throughput.addItem(self.baseline_line)

        self._scale = _Series()
        self.scale_curve = self.loss_scale.plot(pen=pg.mkPen("#10b981", width=1), name="scale")
        # A plot data item (_points): a bare scatter point at 16384 was taken for 10^16384 on
        # the log axis and blew the range to 1e±308.
        self.skipped_points = _points(
            self.loss_scale, "skipped (overflow)", "x", 10, "#ef4444", pen="#ef4444"
        )
        self._skipped: list[tuple[float, float]] = []

        self._loss = _Series()
        self.loss_curve = self.loss.plot(pen=pg.mkPen("#f59e0b", width=1), name="this trial")
        self.baseline_loss_curve = self.loss.plot(
            pen=pg.mkPen("#3b82f6", width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
            name="float32 baseline",
        )
        # Hazard markers of the trial on show, on the loss-scale plot and on the loss plot.
        self.scale_markers: list[pg.InfiniteLine] = []
        self.loss_markers: list[pg.InfiniteLine] = []
        self._scaled = True
        self._points: dict[str, list[tuple[float, float]]] = {p: [] for p in POLICIES}
        self._peaks: list[tuple[float, float]] = []
        self._best: tuple[list[int], list[float]] = ([], [])
        # Which plots have new data; redraw() paints one of them per call, in turn, so a busy
        # stream of events never costs the event loop more than one plot's paint at a time.
        self._dirty: set[str] = set(self.PLOTS)
        self._turn = 0

    # -- feeding -----------------------------------------------------------------------------
    def add_memory(self, times: list[float], values_mb: list[float]) -> None:
        self._memory.extend(times, values_mb)
        self._dirty.add("memory")

    def add_use(
        self, times: list[float], utilization: list[float], power: list[float] | None = None
    ) -> None:
        """The device's use at ``times``: a GPU's utilisation and power (percent of its limit),
        or a CPU worker's share of the cores (``power`` None)."""
        self._utilization.extend(times, utilization)
        if power is not None:
            self._power.extend(times, power)
        self._dirty.add("use")

    def add_gpu_samples(self, placed: list[tuple[float, Sample]]) -> None:
        """The sampler's readings of the first GPU at their session times: its memory, and its
        utilisation and power beside it (a reading NVML could not give is a gap, not a 0)."""
        if not placed:
            return
        times = [t for t, _ in placed]
        self.add_memory(times, [_first(s.gpu_used_mb) for _, s in placed])
        self.add_use(
            times,
            [_first(s.gpu_utilization) for _, s in placed],
            [_first(s.gpu_power) for _, s in placed],
        )

    def name_use(self, on_gpu: bool) -> None:
        """What the memory plot's right axis shows, named in its legend (short: the legend's
        row sets the plot's least width): a GPU's utilisation (``GPU %``) and power drawn of its
        limit (``power %``), or the trial worker's share of the CPU's cores (``CPU %``)."""
        legend = self.memory.getPlotItem().legend
        for curve in (self.utilization_curve, self.power_curve):
            legend.removeItem(curve)
        if on_gpu:
            legend.addItem(self.utilization_curve, "GPU %")
            legend.addItem(self.power_curve, "power %")
        else:
            legend.addItem(self.utilization_curve, "CPU %")
        self.memory.legend_changed()

    def _fit_use_view(self) -> None:
        memory = self.memory.getPlotItem()
        self.use_view.setGeometry(memory.vb.sceneBoundingRect())
        self.use_view.linkedViewChanged(memory.vb, self.use_view.XAxis)

    def memory_end(self) -> float:
        """The session time of the last memory sample or trial peak (0 when there is none)."""
        xs, _ = self._memory.view()
        finite = xs[np.isfinite(xs)]
        ends = [float(finite.max()) if finite.size else 0.0, *(t for t, _ in self._peaks)]
        return max(ends)

    def break_memory(self) -> None:
        """End the memory curve's run of samples: the next ones start a new line (a resumed
        search's time continues the session's, after a gap)."""
        if self._memory.n:
            self._memory.extend([self.memory_end()], [math.nan])
        if self._utilization.n:  # a fresh worker's CPU use is a line of its own too
            self._utilization.extend([self.memory_end()], [math.nan])

    def mark_peak(self, t: float, peak_mb: float) -> None:
        self._peaks.append((t, peak_mb))
        self._dirty.add("memory")

    def set_budget(self, budget_mb: float | None) -> None:
        if budget_mb:
            self.budget_line.setValue(budget_mb)
        self.budget_line.setVisible(bool(budget_mb))
        self.memory.setTitle(
            f"Memory over seconds (budget {budget_mb:,.0f} MB)"
            if budget_mb
            else "Memory over seconds"
        )

    def add_throughput(self, policy: str, batch_size: int, samples_per_second: float) -> None:
        if policy not in self.throughput_points:  # a full half policy's first point
            colour = FULL_HALF_COLOURS.get(policy, "#6b7280")
            self.throughput_points[policy] = _points(self.throughput, policy, "o", 9, colour)
        self._points.setdefault(policy, []).append((batch_size, samples_per_second))
        self._dirty.add("throughput")

    def set_best(self, batch_size: int | None, samples_per_second: float | None) -> None:
        self._best = (
            ([batch_size], [samples_per_second]) if batch_size and samples_per_second else ([], [])
        )
        self._dirty.add("throughput")

    def set_baseline(self, samples_per_second: float | None) -> None:
        if samples_per_second:
            self.baseline_line.setValue(samples_per_second)
        self.baseline_line.setVisible(bool(samples_per_second))

    def start_trial(self, scaled: bool = True) -> None:
        """A new trial: its loss curve starts empty, and so does the loss-scale curve when the
        trial scales its loss (otherwise the last scaled trial's trace stays in view)."""
        self._scaled = scaled
        if scaled:
            self._scale.clear()
            self._skipped = []
            self._dirty.add("loss_scale")
            self._remove_markers(self.loss_scale, self.scale_markers)
        self._loss.clear()
        self._dirty.add("loss")
        self._remove_markers(self.loss, self.loss_markers)

    def add_hazard(self, hazard: Hazard) -> None:
        """Mark a hazard of the current trial at its first step: underflow and overflow on the
        loss-scale plot (on the loss plot when the trial scales no loss, whose loss-scale plot
        still shows an earlier trial), the others on the loss plot. The line's tooltip gives
        the hazard in full."""
        on_scale = hazard.kind in SCALE_HAZARDS and self._scaled
        plot, markers = (
            (self.loss_scale, self.scale_markers) if on_scale else (self.loss, self.loss_markers)
        )
        colour = HAZARD_COLOURS.get(hazard.severity, HAZARD_COLOURS["warning"])
        line = pg.InfiniteLine(
            pos=1,
            angle=90,
            pen=pg.mkPen(colour, width=2, style=pg.QtCore.Qt.PenStyle.DashLine),
            label=marker_text(hazard),
            labelOpts={
                # Stacked from the bottom (the legend sits top right), one line of text
                # apart, on a see-through fill: a curve under a label stays visible.
                "position": min(0.95, 0.08 + 0.14 * len(markers)),
                "color": colour,
                "fill": pg.mkBrush(255, 255, 255, 140),
                "anchors": [(0, 0.5), (0, 0.5)],
            },
        )
        line.setToolTip(hazard.describe())
        # A marker does not stretch the view: the trial's curve decides its range.
        plot.getPlotItem().addItem(line, ignoreBounds=True)
        markers.append(line)

    def _remove_markers(self, plot: pg.PlotWidget, markers: list[pg.InfiniteLine]) -> None:
        for line in markers:
            plot.getPlotItem().removeItem(line)
        markers.clear()

    def add_steps(self, steps: list[StepMessage]) -> None:
        """Step messages of the current trial (measured and warm-up, numbered in order)."""
        base = self._loss.n
        xs = list(range(base + 1, base + len(steps) + 1))
        self._loss.extend(xs, [_finite(s.loss) for s in steps])
        scales = [
            (x, s.loss_scale) for x, s in zip(xs, steps, strict=True) if s.loss_scale is not None
        ]
        if scales:
            self._scale.extend([x for x, _ in scales], [v for _, v in scales])
        self._skipped += [
            (x, s.loss_scale) for x, s in zip(xs, steps, strict=True) if s.skipped and s.loss_scale
        ]
        self._dirty.add("loss")
        if scales:
            self._dirty.add("loss_scale")

    def show_trial_curves(
        self,
        losses: list[float],
        scales: list[float | None],
        skipped: list[bool] | None = None,
        hazards: Iterable[Hazard] = (),
    ) -> None:
        """Replace the step curves with a stored trial's (a row picked in the table), with its
        hazards marked."""
        self.start_trial()
        self._scaled = any(s is not None for s in scales)
        for hazard in hazards:
            self.add_hazard(hazard)
        # Not strict: a stored trial whose lists differ in length shows their common steps.
        steps = [
            StepMessage(loss=loss, loss_scale=s, skipped=bool(skipped and skipped[i]))
            for i, (loss, s) in enumerate(zip(losses, scales, strict=False))
        ]
        self.add_steps(steps)

    def set_baseline_losses(self, losses: list[float]) -> None:
        self.baseline_loss_curve.setData(
            np.arange(1, len(losses) + 1), np.array([_finite(v) for v in losses])
        )

    def clear(self) -> None:
        self._memory.clear()
        self._utilization.clear()
        self._power.clear()
        self._peaks = []
        self._dirty.update(("memory", "use"))  # else the last search's curves stay
        self._points = {p: [] for p in self.throughput_points}  # a full half one's emptied too
        self.set_best(None, None)
        self.set_baseline(None)
        self.baseline_loss_curve.setData([], [])
        self.start_trial()

    # -- drawing (called on a timer) ---------------------------------------------------------
    def redraw(self, everything: bool = False) -> None:
        """Paint the next plot with new data (or, ``everything``, all of them)."""
        for _ in range(len(self.PLOTS)):
            name = self.PLOTS[self._turn % len(self.PLOTS)]
            self._turn += 1
            if name in self._dirty:
                self._dirty.discard(name)
                getattr(self, f"_draw_{name}")()
                if not everything:
                    return

    def _draw_memory(self) -> None:
        self.memory_curve.setData(*self._memory.view())
        xs, ys = zip(*self._peaks, strict=True) if self._peaks else ((), ())
        self.memory_peaks.setData(list(xs), list(ys))

    def _draw_throughput(self) -> None:
        for policy, points in self._points.items():
            xs, ys = zip(*points, strict=True) if points else ((), ())
            self.throughput_points[policy].setData(list(xs), list(ys))
        self.best_point.setData(*self._best)

    def _draw_loss_scale(self) -> None:
        self.scale_curve.setData(*self._scale.view())
        self.skipped_points.setData(
            *(zip(*self._skipped, strict=True) if self._skipped else ([], []))
        )

    def _draw_loss(self) -> None:
        self.loss_curve.setData(*self._loss.view())

    def _draw_use(self) -> None:
        self.utilization_curve.setData(*self._utilization.view())
        self.power_curve.setData(*self._power.view())

    def save(self, path: str, width: int = REPORT_WIDTH_PX) -> str:
        """The plots (the device's use among them) as one figure, written to ``path`` as
        given: SVG when it ends in ``.svg``, else PNG ``width`` pixels wide (``.png`` added to
        a name without either ending). Returns the file written.

        Raises:
            OSError: the file could not be written.
        """
        if not path.lower().endswith((".png", ".svg")):
            path += ".png"
        if path.lower().endswith(".svg"):
            _render_svg(self, path)
            return path
        self.redraw(everything=True)  # what is pending is in the figure too
        size = self.size()
        scale = width / max(1, size.width())
        image = QImage(width, round(size.height() * scale), QImage.Format.Format_ARGB32)
        image.fill(QColor("white"))
        painter = QPainter(image)
        try:
            # Drawn scaled, not a screenshot scaled up: lines and text stay sharp.
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
            painter.scale(scale, scale)
            self.render(painter, QPoint())
        finally:
            painter.end()
        if not image.save(path):
            raise OSError(f"cannot write {path}")
        return path


def marker_text(hazard: Hazard) -> str:
    """A hazard in a few words for its marker, e.g. ``⚠ underflow: 2.1% flushed`` or
    ``⚠ unsafe integer cast: 19,999 became 19,968``."""
    title = _MARKER.get(hazard.kind, hazard.kind.replace("_", " "))
    unsafe = "unsafe " if hazard.unsafe else ""
    return f"\u26a0 {unsafe}{title}" + (f": {hazard.figure}" if hazard.figure else "")


def _render_svg(widget: QWidget, path: str) -> None:
    """Plots as vector SVG through Qt's own generator (pyqtgraph's SVGExporter cannot parse
    the paths Qt 6.12 writes): the widget's render() draws it, and the plots in it (each a
    QGraphicsView), onto a painter."""
    generator = QSvgGenerator()
    generator.setFileName(path)
    generator.setSize(widget.size())
    generator.setViewBox(widget.rect())
    generator.setTitle("mptune plot")
    painter = QPainter(generator)
    try:
        widget.render(painter, QPoint())
    finally:
        painter.end()


def _finite(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan
