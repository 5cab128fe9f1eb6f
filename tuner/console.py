"""Terminal output for the CLI: live progress of a trial or a search, results as tables, and the
files the user names on its command line (``export -o``, ``tune --out``).

Part of the command-line face: like :mod:`tuner.cli` it uses the engine through :mod:`tuner.api`
only.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.status import Status
from rich.style import Style
from rich.table import Table
from rich.text import Text

from tuner import api
from tuner.api import TrialResult, TrialSpec, WorkerMessage
from tuner.cli_arguments import flag_words


class _Worded:
    """A stream of the command line's: what is written to it has each setting the engine names
    (:mod:`tuner.said`) in the command line's words, the flag that sets it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(api.said.render(text, flag_words))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def worded_streams() -> Iterator[None]:
    """Everything the command line prints (tables, progress, JSON, its errors) in its own
    words: one place, so that no text of the engine's reaches a terminal unworded."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Worded(out), _Worded(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


class TrialProgress:
    """A spinner on stderr that says what the running trial is doing (silent when stderr is not
    a terminal, so logs and pipes stay clean)."""

    def __init__(self, spec: TrialSpec, console: Console | None = None) -> None:
        self.spec = spec
        self.console = console or Console(stderr=True)
        self._status: Status | None = None
        self._phase = "starting the worker (importing TensorFlow)"
        self._last_update = 0.0

    def __enter__(self) -> TrialProgress:
        if self.console.is_terminal:
            self._status = self.console.status(self._text())
            self._status.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._status is not None:
            self._status.stop()

    def on_event(self, message: WorkerMessage) -> None:
        if isinstance(message, api.PhaseMessage):
            self._phase = api.PHASES.get(message.phase, message.phase)
        elif isinstance(message, api.StepMessage):
            now = time.monotonic()
            if now - self._last_update < 0.1:  # a fast model sends hundreds of steps a second
                return
            self._last_update = now
            # A diverged loss reads "nan" or "inf", as the worker measured it.
            loss = "n/a" if message.loss is None else format(message.loss, ".4g")
            self._phase = (
                f"{api.PHASES.get(message.phase, '')}: step {message.step}"
                f", {message.time_ms or 0:.1f} ms, loss {loss}"
            )
        else:
            return
        if self._status is not None:
            self._status.update(self._text())

    def _text(self) -> str:
        return f"trial {self.spec.model} {self.spec.describe()}: {self._phase}"


def _fmt(value: object, spec: str = ".3g", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    return f"{format(value, spec)}{unit}"


def _as_trained_rows(result: TrialResult) -> list[tuple[str, str]]:
    """What the trial's model trained under, read back from it, and what a training script
    runs today, held off or left out of the figure (issue 49)."""
    rows = []
    got = result.trained
    if got is not None:
        words = f"{got.policy}, loss scale {got.loss_scale or 'none'}"
        if got.quantized:
            words += f", {got.quantized} layers ({got.quantized}_from_{got.policy})"
        if got.replicas > 1:
            share = result.spec.batch_size // got.replicas
            words += (
                f"; {got.distribution} over {got.replicas} devices: batch "
                f"{result.spec.batch_size} is fit's global batch, {share} on each"
            )
        rows.append(("read back", f"{words} (from the model the trial trained)"))
    own = result.script
    if own is not None:
        words = f"{own.policy}, batch size {own.batch_size or 'unknown'}"
        if own.policy_at:
            words += f" ({own.policy_at} sets {own.policy}: held off for the trial's setup)"
        if own.left_out:
            words += "; its fit also runs " + ", ".join(own.left_out) + ", left out of the figure"
        if own.validation_s is not None:
            words += f" (one validation pass: {own.validation_s:.2f} s)"
        rows.append(("your script", words))
    return rows


def render_trial(result: TrialResult, verbose: bool = False) -> str:
    """A trial result as a few aligned lines."""
    spec = result.spec
    setup = spec.setup
    knobs = "".join(f"  {knob}" for knob in setup.knob_words())
    rows: list[tuple[str, str]] = [
        (
            "trial",
            f"{spec.model}  {setup.precision}  batch {spec.batch_size}  "
            f"loss scale {spec.loss_scale}{knobs}  on {result.device or spec.device}",
        ),
        ("status", ", ".join(filter(None, [result.status.value, result.pruned_words]))),
    ]
    if result.error is not None:
        where = f"{result.error.location}: " if result.error.location else ""
        rows.append(("reason", where + result.error.message))
    if result.samples_per_second is not None:
        rows += _throughput_rows(result)
    rows += _as_trained_rows(result)
    trained = result.trained_samples_per_second
    if trained is not None and trained != result.samples_per_second:
        rows.append(
            (
                "trained",
                f"{trained:,.1f} samples/s, the figure the search ranks and every table shows: "
                f"{result.skipped_steps} of {result.steps_completed} measured steps were skipped "
                "by the loss scale and trained nothing",
            )
        )
    if result.peak_memory_mb is not None and not result.predicted_oom:
        what = (
            "GPU allocator peak" if result.memory_kind == "gpu" else "worker peak resident memory"
        )
        if (result.memory_method or "").startswith("predicted"):
            what = "predicted: the worker's peak was an earlier trial's"
        rows.append(("peak memory", f"{result.peak_memory_mb:,.0f} MB ({what})"))
    prediction = result.memory_prediction
    if prediction is not None:
        limit = prediction.limit_mb
        rows.append(
            (
                "predicted",
                f"{prediction.peak_mb:,.0f} MB before the first step (XLA's memory_analysis)"
                + (f", against {limit:,.0f} MB it may use" if limit else ""),
            )
        )
    if result.losses:
        rows.append(
            (
                "loss",
                f"{_fmt(result.losses[0], '.4g')} -> {_fmt(result.losses[-1], '.4g')}"
                f"  over {result.steps_completed} measured steps",
            )
        )
    scales = [s for s in result.loss_scales if s is not None]
    if scales:
        rows.append(
            (
                "loss scale",
                f"{_fmt(scales[0], 'g')} -> {_fmt(scales[-1], 'g')}, "
                f"{result.skipped_steps} skipped, {result.nonfinite_steps} "
                "non-finite steps"
                + (
                    f" (and {result.calibration_steps} skipped before them while the scale "
                    "came down: calibration, not counted)"
                    if result.calibration_steps
                    else ""
                ),
            )
        )
    elif result.nonfinite_steps:
        rows.append(("non-finite", f"{result.nonfinite_steps} steps"))
    if result.timings.total_s is not None:
        rows.append(("time", _time_spent(result.timings, result.timings.total_s)))
    for hazard in result.hazards:
        rows += hazard_rows(hazard)
    for warning in result.warnings:
        rows.append(("warning", warning))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _over_epochs(fed: api.InputRate) -> str:
    """How fit's loop was timed: over whole epochs (and a settling one left out), or within
    one, whose start it does not count."""
    epochs, settling_s = fed.epochs, fed.settling_s
    if not epochs and fed.epoch_end_wait_s:
        return (
            f" (within one epoch, and {fed.epoch_end_wait_s:.2f} s an epoch priced in: "
            "TensorFlow's input autotuner holds each epoch's end until it wakes)"
        )
    if not epochs:
        return " (within one epoch: the work at an epoch's start is not in it)"
    settled = (
        f", after a first epoch of {settling_s:.1f} s left out (the input settling, paid once)"
        if settling_s
        else ""
    )
    return f" over {epochs} whole epoch{'s' if epochs > 1 else ''}{settled}"


def _throughput_rows(result: TrialResult) -> list[tuple[str, str]]:
    """What fit can reach; where the input was timed, the device's figure and the input's
    apart, and what to do when the input is the bound."""
    device = result.device_samples_per_second or result.samples_per_second
    fed = result.input
    if fed is None or device is None or result.samples_per_second is None:
        return [("throughput", _throughput(result, result.samples_per_second or 0.0))]
    if fed.fit_loop:
        held = (
            f" (input-bound: {result.samples_per_second / device:.0%} of the device's rate)"
            if result.input_bound
            else ""
        )
        rows = [
            (
                "throughput",
                f"{result.samples_per_second:,.1f} samples/s in fit's own loop"
                f"{_over_epochs(fed)}{held}",
            ),
            ("fed by", fed.fed_by),
            ("device", _throughput(result, device) + ", from batches in memory"),
        ]
    else:  # stored before issue 35: the input timed alone
        held = " (input-bound: fit is held to the input's rate)" if result.input_bound else ""
        rows = [
            ("throughput", f"{result.samples_per_second:,.1f} samples/s, what fit can reach{held}"),
            ("device", _throughput(result, device)),
            ("input", f"{fed.samples_per_second:,.1f} samples/s from {fed.fed_by}"),
        ]
    if result.input_bound:
        rows.append(("advice", fed.advice(result.spec.setup.backend)))
    return rows


def _throughput(result: TrialResult, samples_per_second: float) -> str:
    """The device's throughput, both figures, with its step times."""
    step_time = result.step_time_ms
    return (
        f"{samples_per_second:,.1f} samples/s over the measured window"
        + (
            f", {result.median_samples_per_second:,.1f} at the median step"
            if result.median_samples_per_second is not None
            else ""
        )
        + f"  (step time p50 {_fmt(step_time.get('p50'), '.2f')} ms, p90 "
        f"{_fmt(step_time.get('p90'), '.2f')} ms"
        + (
            f", {result.executions} calls of {result.spec.setup.steps_per_execution} steps"
            if result.executions and result.spec.setup.steps_per_execution > 1
            else ""
        )
        + ")"
    )


def _time_spent(t: api.Timings, total_s: float) -> str:
    """Where the trial's time went: each part that was timed, and the measured share."""
    parts = [
        f"{name} {_fmt(v, '.1f')} s"
        for name, v in (
            ("start-up", t.startup_s),
            ("build", t.build_s),
            ("numerics probe", t.probe_s),
            ("compile", t.compile_s),
            ("warm-up", t.warmup_s),
            ("measured", t.measure_s),
            ("fit's loop", t.input_s),
        )
        if v is not None
    ]
    share = f" ({t.measured_share:.0%} measuring)" if t.measured_share is not None else ""
    return f"{total_s:.1f} s: " + ", ".join(parts) + share


def hazard_rows(hazard: api.Hazard) -> list[tuple[str, str]]:
    """A hazard as two labelled lines: what was found, and the fix."""
    where = f" in {hazard.layer}" if hazard.layer else ""
    where += f" at {hazard.at}" if hazard.at else ""
    return [
        (
            "hazard",
            f"{hazard.severity} ({hazard.kind}) under {hazard.policy}{where}: {hazard.evidence}",
        ),
        ("fix", hazard.fix),
    ]


class TuneProgress:
    """A progress bar for ``mptune tune``: trials done/planned, the current trial, the plan
    left priced in time and the budget left (:meth:`PlanUpdated.words`).

    Rich draws it only on a terminal; elsewhere each finished trial is printed as one line, so
    a log of a headless run still shows the search advancing.
    """

    def __init__(self, console: Console | None = None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("trials"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[plan]}"),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        )
        self.task = self.progress.add_task("starting", total=None, plan="")
        #: the plan's trial count last printed (a log prints the plan when it changes)
        self._planned: int | None = None
        self.session: str | None = None
        #: the running trials (several with --parallel): number -> what it is and does now
        self.running: dict[int, tuple[str, str]] = {}
        self._last_step = 0.0

    def __enter__(self) -> TuneProgress:
        self.progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.progress.stop()

    def on_event(self, event: api.SearchEvent) -> None:
        if isinstance(event, api.SessionOpened):
            self.session = event.name
        elif isinstance(event, api.PlanUpdated):
            words = event.words()
            self.progress.update(self.task, completed=event.done, total=event.planned, plan=words)
            if not self.console.is_terminal and event.planned != self._planned:
                self._planned = event.planned
                self.console.print(f"plan: {words}", highlight=False, soft_wrap=True)
        elif isinstance(event, api.StageStarted):
            self.progress.update(self.task, description=event.message)
        elif isinstance(event, api.TrialStarted):
            device = event.spec.device
            label = f"#{event.number} {event.spec.setup.label}" + (
                f" on {device}" if device.startswith("gpu:") else ""
            )
            self.running[event.number] = (label, "starting")
            self._describe()
        elif isinstance(event, api.WorkerReported):
            message = event.message
            if (
                isinstance(message, api.StepMessage)
                and event.number in self.running
                and time.monotonic() - self._last_step > 0.2
            ):
                self._last_step = time.monotonic()
                label, _ = self.running[event.number]
                self.running[event.number] = (label, f"{message.phase} step {message.step}")
                self._describe()
        elif isinstance(event, api.TrialFinished):
            result = event.result
            self.running.pop(event.number, None)
            self._describe()
            self.progress.advance(self.task)
            line = f"trial #{event.number} {result.spec.setup.label:28s} " + _result_cell(result)
            if self.console.is_terminal:
                self.progress.console.print(line, highlight=False)
            else:
                self.console.print(line, highlight=False, soft_wrap=True)

    def _describe(self) -> None:
        """The running trials in the bar's description: one, or several side by side."""
        if self.running:
            text = "; ".join(f"{label}: {doing}" for label, doing in self.running.values())
            self.progress.update(self.task, description=text)


def _result_cell(result: TrialResult) -> str:
    if result.ok:
        return (
            f"{_fmt(result.trained_samples_per_second, ',.0f')} samples/s, "
            f"{_fmt(result.peak_memory_mb, ',.0f')} MB"
            + (f" ({result.pruned_words})" if result.pruned else "")
        )
    reason = result.error.message if result.error else ""
    return f"{result.status.value}: {shorten(reason, 90)}"


def shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: cut at the last word boundary that leaves room
    for an ellipsis, which marks the cut (inside a word only when the first is too long)."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    cut_in_a_word = not (head[-1:].isspace() or text[limit - 1].isspace())
    if cut_in_a_word and len(head.split()) > 1:
        head = head.rsplit(None, 1)[0]  # drop the word cut short
    return head.rstrip().rstrip(",;:") + "…"


#: The narrowest the sessions table's columns other than the name may get: room for a word or
#: two of each (the trial count's heading). Where they do not fit beside the longest name, the
#: sessions are printed as blocks instead (:func:`print_sessions`).
SESSION_MIN_WIDTHS = {"model": 12, "created": 10, "hardware": 10, "trials": 6, "recommendation": 16}


def print_sessions(console: Console, sessions: Sequence[api.SessionSummary]) -> None:
    """The sessions as a table whose name column is never cut (the name is the string
    ``show``, ``export`` and ``--resume`` take): the other columns give way, wrapping. On a
    terminal too narrow for them beside the longest name, each session is a block instead: its
    name alone on a line (wider than the terminal, the terminal wraps it; nothing is cut), the
    other columns under it."""
    names, *others = api.SessionSummary.COLUMNS
    longest = max(len(s.name) for s in sessions)
    # Each column but the last takes its width and two spaces of padding.
    needed = longest + sum(SESSION_MIN_WIDTHS.get(c, 10) + 2 for c in others)
    if needed <= console.width:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        table.add_column(names, no_wrap=True, min_width=longest)
        for column in others:
            table.add_column(column, overflow="fold", min_width=SESSION_MIN_WIDTHS.get(column))
        for summary in sessions:
            table.add_row(*(Text(cell) for cell in _session_cells(summary)))  # not markup
        console.print(table)
        return
    for i, summary in enumerate(sessions):
        name, *cells = _session_cells(summary)
        console.print(Text(name), soft_wrap=True)
        for column, cell in zip(others, cells, strict=True):
            if cell:  # wrapped lines indented under their own
                console.print(Padding(Text(f"{column}: {cell}"), (0, 0, 0, 2), expand=False))
        if i < len(sessions) - 1:
            console.print()


def _session_cells(summary: api.SessionSummary) -> tuple[str, ...]:
    """A session's cells, its creation time with a space after the date (a narrow column wraps
    there, not inside the time)."""
    name, model, created, *rest = summary.cells()
    return (name, model, created.replace("T", " ", 1), *rest)


def output_console() -> Console:
    """stdout; 120 columns when it is not a terminal, so logged tables are not squeezed."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


#: The trials table's columns: (heading, justification). ``knobs`` and ``skipped`` show only
#: where some trial has one, as in the window.
TRIAL_COLUMNS = (
    ("#", "right"),
    ("stage", "left"),
    ("precision", "left"),
    ("batch", "right"),
    ("loss scale", "left"),
    ("knobs", "left"),
    ("samples/s", "right"),
    ("p50 ms", "right"),
    ("peak MB", "right"),
    ("skipped", "right"),
    ("loss gap", "right"),
    ("status", "left"),
)


#: The least width a status column wraps its text in; where the other columns leave it less, or
#: a status would need more than :data:`STATUS_LINES` lines, every long status moves to a line
#: of its own under its row (issue 54: at 120 columns a transformer's table gave the status one
#: word a line, and rich cut the precision short to make room).
STATUS_ROOM = 24
#: The most lines a row's status may take in its own column.
STATUS_LINES = 3
#: Columns whose cells wrap at their spaces where the table is short of room ("3 (+12
#: calibrating)", "xla spe16"): every other one but the status keeps its cells on one line.
WRAPPED = frozenset({"knobs", "skipped"})
#: The spaces between two columns.
PAD = 2
#: The headings the table's layout reads: the trial's number and its status.
NUMBER, STATUS = TRIAL_COLUMNS[0][0], TRIAL_COLUMNS[-1][0]
#: The key of a row's index in its cells' style (:class:`TrialsTable`).
ROW = "mptune_trial_row"


def trials_table(trials: Sequence[api.StoredTrial], title: str = "Trials") -> TrialsTable:
    """The session's trials as a table (``StoredTrial`` items), fitted to the width it is
    printed at (:class:`TrialsTable`): no vertical rules, the stage elided past 14 characters,
    the knobs and skipped steps only where some trial has them, a long status wrapped in its
    own column where that leaves it room, else on a line under its row; a reason longer than
    60 characters is shortened at a word, with an ellipsis."""
    # Each trial's loss gap to float32 at its batch size, where the session has that float32
    # trial (the numerical guard's comparison, for every trial).
    gaps = api.trial_loss_gaps({t.number: t.result for t in trials if t.result is not None})
    notes = api.figure_notes(trials)  # a figure that did not hold, and its second look
    rows = [_trial_cells(t, gaps.get(t.number), notes.get(t.number, "")) for t in trials]
    shown = [
        (name, justify)
        for name, justify in TRIAL_COLUMNS
        if name not in ("knobs", "skipped") or any(row.cells[name] not in ("", "0") for row in rows)
    ]
    # Worded before rich lays the cells out (the stream's words come after).
    return TrialsTable(title, shown, [row.worded() for row in rows])


class TrialsTable:
    """The trials table as rich renders it at the console's width, laid out here (rich, short of
    room, cuts any column, a precision's name included). Each status in its column, wrapped at
    words, where the other columns leave it :data:`STATUS_ROOM` and no status needs more than
    :data:`STATUS_LINES` lines there; else the column holds the short status (``unsafe``,
    ``crashed``) and the rest goes on lines of its own under its row, wrapped at words. Short
    of room, a heading wraps at its spaces first, then the knobs and skipped steps at theirs,
    then the stage is elided; every other cell stays whole, on one line.

    Args:
        title: the table's title.
        shown: the columns shown, (heading, justification).
        rows: each trial's cells (:class:`TrialCells`).
    """

    def __init__(
        self, title: str, shown: Sequence[tuple[str, str]], rows: Sequence[TrialCells]
    ) -> None:
        self.title = title
        self.shown = list(shown)
        self.rows = list(rows)

    def widths(self, level: int) -> dict[str, int]:
        """Every column's width but the status': at ``level`` 0 the widest cell or heading;
        1 the headings wrapped at their spaces; 2 the knobs and skipped steps too; 3 the stage
        elided at 8 characters."""
        widths: dict[str, int] = {}
        for name, _ in self.shown:
            if name == "status":
                continue
            cells = [row.cells[name] for row in self.rows]
            widest = max((cell_len(c) for c in cells), default=0)
            heading = max(cell_len(word) for word in name.split()) if level >= 1 else len(name)
            if name == "stage":
                widths[name] = max(heading, min(widest, 14 if level < 3 else 8))
            elif name in WRAPPED and level >= 2:
                words = [cell_len(w) for c in cells for w in c.split()]
                widths[name] = max([heading, *words])
            else:
                widths[name] = max(heading, widest)
        return widths

    def layout(self, width: int) -> tuple[dict[str, int], int, bool]:
        """The columns' widths at ``width``, the status column's, and whether the long statuses
        go under their rows."""
        gaps = PAD * (len(self.shown) - 1)
        statuses = [row.status for row in self.rows]
        for level in (0, 1):
            widths = self.widths(level)
            room = width - sum(widths.values()) - gaps
            if room >= STATUS_ROOM and all(
                len(textwrap.wrap(text, room, break_long_words=False)) <= STATUS_LINES
                and all(cell_len(word) <= room for word in text.split())
                for text in statuses
            ):
                return widths, room, False
        short = max([len(STATUS), *(cell_len(row.short) for row in self.rows)])
        for level in (0, 1, 2, 3):
            widths = self.widths(level)
            if sum(widths.values()) + gaps + short <= width:
                break
        return widths, short, True

    def table(self, widths: dict[str, int], status: int, under: bool) -> Table:
        """The rich table at these widths: full statuses wrapped in their column, or
        (``under``) short ones; without edges, so that it ends on its last row."""
        table = Table(
            title=self.title,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
            show_edge=False,
        )
        for name, justify in self.shown:
            if name == "status":
                table.add_column(name, width=status, overflow="fold")
            elif name == "stage":
                table.add_column(name, width=widths[name], no_wrap=True, overflow="ellipsis")
            else:
                # At least its widest cell, or (WRAPPED) its longest word: only a heading
                # or those cells wrap, at their spaces.
                table.add_column(name, width=widths[name], justify=justify)  # type: ignore[arg-type]
        for i, row in enumerate(self.rows):
            cells = {**row.cells, STATUS: row.short if under else row.status}
            # Each row's lines carry its index, so that its status can go right under them.
            table.add_row(*(cells[name] for name, _ in self.shown), style=Style(meta={ROW: i}))
        return table

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Any]:
        width = options.max_width
        widths, status, under = self.layout(width)
        table = self.table(widths, status, under)
        if not under:
            yield table
            return
        lines = console.render_lines(table, options, pad=False)
        last: dict[int, int] = {}  # row -> its last line
        for i, line in enumerate(lines):
            for segment in line:
                if segment.style is not None and ROW in segment.style.meta:
                    last[segment.style.meta[ROW]] = i
        after = {i: row for row, i in last.items()}
        # Under the stage: past the widest trial number and the padding after it.
        indent = " " * (widths.get(NUMBER, 1) + PAD)
        for i, line in enumerate(lines):
            yield from line
            yield Segment.line()
            row = after.get(i, -1)
            if row >= 0 and self.rows[row].status != self.rows[row].short:
                for wrapped in textwrap.wrap(
                    self.rows[row].status,
                    max(20, width - len(indent)),
                    initial_indent=indent,
                    subsequent_indent=indent + "  ",
                    break_long_words=False,
                ):
                    yield Text(wrapped)


@dataclass(frozen=True)
class TrialCells:
    """One trial's row of the trials table: its cells by heading (:data:`TRIAL_COLUMNS`; the
    status in full) and its status in a word or two (``unsafe``, ``ok, pruned``), what the
    status column holds where the full one goes under the row."""

    cells: dict[str, str]
    short: str

    @property
    def status(self) -> str:
        return self.cells[STATUS]

    def worded(self) -> TrialCells:
        """The cells in the stream's words (``--xla auto`` where the engine names a setting)."""
        said = {k: api.said.render(v, flag_words) for k, v in self.cells.items()}
        return TrialCells(said, api.said.render(self.short, flag_words))


def _trial_cells(t: api.StoredTrial, gap: api.TrialGap | None, note: str = "") -> TrialCells:
    """One trial's cells under :data:`TRIAL_COLUMNS`; ``note`` ends its status."""
    r = t.result
    setup = r.spec.setup if r is not None else t.spec.setup if t.spec is not None else None
    cells = dict.fromkeys((name for name, _ in TRIAL_COLUMNS), "")
    cells.update({"#": str(t.number), "stage": t.stage})
    if setup is not None:
        cells.update(
            {
                "precision": setup.precision,
                "batch": str(setup.batch_size),
                "loss scale": str(setup.loss_scale),
                "knobs": " ".join(setup.knobs),
            }
        )
    if r is None:
        # Closed without a result (stopped, or given up): its setup, and why; no figures.
        why = t.note or "it closed without a result"
        if why.startswith("stopped"):
            return TrialCells({**cells, "status": why}, "stopped")
        return TrialCells({**cells, "status": f"failed: {why}"}, "failed")
    short = (f"{r.status.value}, pruned" if r.pruned else r.status.value) if r.ok else None
    status = short or f"{r.status.value}: {shorten(r.error.message if r.error else '', 60)}"
    status += f" (hazard: {', '.join(sorted({h.kind for h in r.hazards}))})" if r.hazards else ""
    status += f"; {note}" if note else ""
    cells.update(
        {
            "samples/s": _fmt(r.trained_samples_per_second, ",.0f"),
            "p50 ms": _fmt(r.step_time_ms.get("p50"), ".2f"),
            "peak MB": _fmt(r.peak_memory_mb, ",.0f"),
            "skipped": str(r.skipped_steps)
            + (f" (+{r.calibration_steps} calibrating)" if r.calibration_steps else ""),
            "loss gap": f"{gap.gap:.2%}" if gap is not None and gap.gap is not None else "",
            "status": status,
        }
    )
    return TrialCells(cells, short or r.status.value)


def render_recommendation(rec: api.Recommendation) -> str:
    """The recommendation and its evidence as aligned lines."""
    rows = api.evidence_rows(rec)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.lower():<{width}}  {value}" for name, value in rows)


# -- files the user names ---------------------------------------------------------------------
def check_writable(path: str, flag: str, example: str = "tuned.json") -> None:
    """Refuse a file the user named (``flag``'s) that cannot be written, before the work that
    makes it (a search may take an hour): a folder, a path under a file, a folder that cannot
    be written in. ``example`` is a file name to suggest in a folder.

    Raises:
        MptuneError: naming the path and the problem.
    """
    target = Path(path)
    if target.is_dir():
        raise api.MptuneError(
            f"{flag} {path} is a directory: give a file name, e.g. {target / example}"
        )
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise api.MptuneError(f"{flag} {path}: {parent}: not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only(parent) else "no permission"
        raise api.MptuneError(f"{flag} {path}: cannot write in {parent} ({why})")


def _read_only(folder: Path) -> bool:
    """Whether ``folder`` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):  # no statvfs (Windows)
        return False


def write_user_file(
    path: str, flag: str, write: Callable[[], object], example: str = "tuned.json"
) -> None:
    """Write the file the user named with ``flag`` (``write`` writes it): checked first; the
    folders it needs are created and said on stderr (``mkdir -p``, said aloud: a mistyped
    folder is seen); a failure is one line naming the path and the problem, and leaves no
    folder it created.

    Raises:
        MptuneError: the file cannot be written.
    """
    check_writable(path, flag, example)
    folder = Path(path).parent
    missing = [f for f in (folder, *folder.parents) if not f.exists()]
    try:
        write()
    except OSError as exc:
        for created in missing:  # the deepest first; each empty, as the write failed
            with contextlib.suppress(OSError):
                created.rmdir()
        raise api.MptuneError(f"cannot write {flag} {path}: {exc.strerror or exc}") from None
    if missing:
        print(f"mptune: created folder {folder}", file=sys.stderr)
