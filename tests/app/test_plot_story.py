"""Plots that carry a session (issue 27): time is the session's across resumes (a gap, not a
diagonal), a reopened session has the live axes, labels never overlap, legends sit outside the
data."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtGui import QColor

from app.qt_plots import MIN_LABEL_PX, PowersOfTwoAxis, QtLivePlots
from app.session_clock import RESUME_GAP_S, SessionClock
from tuner import api


def test_loss_scale_ticks_are_powers_of_two_that_never_touch(qtbot) -> None:
    axis = PowersOfTwoAxis(orientation="left")
    axis.setLogMode(False, True)
    for low, high, pixels in [(2**14, 2**15, 150), (1, 2**24, 100), (2**10, 2**30, 400)]:
        ((spacing, values),) = axis.tickValues(math.log10(low), math.log10(high), pixels)
        span = math.log10(high) - math.log10(low)
        gap_px = spacing / span * pixels
        assert len(values) == 1 or gap_px >= MIN_LABEL_PX, (low, high, gap_px)
        powers = [v / math.log10(2) for v in values]
        assert all(abs(p - round(p)) < 1e-9 for p in powers)
    labels = axis.tickStrings([15 * math.log10(2), 24 * math.log10(2)], 1.0, 1.0)
    assert labels == ["2\u00b9\u2075", "2\u00b2\u2074"]


def test_the_memory_line_breaks_where_a_resumed_search_begins(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.add_memory([0.0, 1.0, 2.0], [100.0, 120.0, 110.0])
    plots.mark_peak(2.5, 130.0)
    assert plots.memory_end() == 2.5
    plots.break_memory()
    plots.add_memory([4.5, 5.5], [105.0, 115.0])
    plots.redraw(everything=True)
    xs, ys = plots.memory_curve.getData()
    assert list(xs) == [0.0, 1.0, 2.0, 2.5, 4.5, 5.5]  # time goes on: it never restarts at 0
    assert np.isnan(ys[3])
    assert np.isfinite(ys[[0, 1, 2, 4, 5]]).all()
    assert plots.memory_curve.opts["connect"] == "finite"  # so no line crosses the gap


def test_legends_sit_outside_the_data(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.resize(900, 500)
    plots.show()
    qtbot.waitExposed(plots)
    for plot in (plots.memory, plots.throughput, plots.loss_scale, plots.loss):
        item = plot.getPlotItem()
        legend = item.legend
        assert legend.items, "the plot's named items are in its legend"
        data = item.vb.sceneBoundingRect()
        assert not legend.sceneBoundingRect().intersects(data)


@pytest.mark.parametrize("width", [480, 900, 1400])
def test_a_plot_and_its_legend_fit_its_width(qtbot, width) -> None:
    """A legend's entries take as many columns as the plot's width allows and wrap into rows
    past that: the plot is never laid out wider than its view (at 1280x720 the throughput
    plot's four entries in one row cut its legend and right edge off)."""
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.name_use(on_gpu=True)  # five entries under the memory plot
    plots.resize(width, 500)
    plots.show()
    qtbot.waitExposed(plots)
    for plot in (plots.memory, plots.throughput, plots.loss_scale, plots.loss):
        item = plot.getPlotItem()
        view = plot.viewport().width()
        qtbot.waitUntil(lambda item=item, view=view: item.minimumWidth() <= view)
        entries = len(item.legend.items)
        rows = item.legend.layout.rowCount()
        if width >= 1400:  # room for every entry in one row: one row
            assert rows == 1, (plot, rows)
        assert rows * item.legend.columnCount >= entries
        # In the order the entries were added, row by row.
        places = [label.mapToScene(0, 0) for _sample, label in item.legend.items]
        assert places == sorted(places, key=lambda p: (round(p.y()), p.x())), plot
    assert plots.throughput.getPlotItem().legend.columnCount < 4 or width > 480


def test_a_reopened_session_plots_memory_over_seconds(make_window) -> None:
    window = make_window()

    def trial(number: int, total_s: float, peak: float) -> api.StoredTrial:
        spec = api.TrialSpec.create("builtin:mlp", "float32", 16 * (number + 1), device="cpu")
        result = api.TrialResult(
            spec,
            api.TrialStatus.OK,
            samples_per_second=1000.0,
            peak_memory_mb=peak,
            timings=api.Timings(total_s=total_s),
        )
        return api.StoredTrial(number, "batch", result, "COMPLETE")

    view = api.SessionView(
        "old", "builtin:mlp", None, {}, {}, {}, (trial(0, 4.0, 300.0), trial(1, 6.0, 350.0)), None
    )
    window.show_session(view, None)
    # Seconds of the session, as a live search has them (each trial after those before it),
    # not the trials' numbers 0 and 1.
    assert window.plots._peaks == [(4.0, 300.0), (10.0, 350.0)]


def test_legend_symbols_wear_their_colours_before_any_point(qtbot) -> None:
    """A legend sample is drawn in its series' colour even while the series has no point (a
    policy not measured yet, or a reopened session without it): it showed a grey dot."""
    from app.qt_plots import POLICY_COLOURS

    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.resize(900, 500)
    plots.show()
    qtbot.waitExposed(plots)
    plots.add_throughput("float32", 64, 1000.0)  # one policy with a point, the others without
    plots.redraw(everything=True)
    expected = {**POLICY_COLOURS, "best": "#dc2626", "skipped (overflow)": "#ef4444"}
    for plot in (plots.throughput, plots.loss_scale):
        image = plot.grab().toImage()
        for sample, label in plot.getPlotItem().legend.items:
            name = label.text
            if name not in expected:
                continue
            centre = plot.mapFromScene(sample.sceneBoundingRect().center())
            want = QColor(expected[name])
            near = [
                QColor(image.pixel(centre.x() + dx, centre.y() + dy))
                for dx in range(-3, 4)
                for dy in range(-3, 4)
            ]
            assert any(_close(c, want) for c in near), name


def _close(a, b) -> bool:
    return all(abs(x - y) <= 24 for x, y in zip(a.getRgb()[:3], b.getRgb()[:3], strict=True))


# -- issue 33: the live axis and the reopened one agree; a new worker's line starts at its trial --
class ReplayedSearch:
    """tuner.api with a search that replays recorded events: the first run up to ``stop_at``'s
    start and a few of its worker's messages, then waits to be stopped (that trial is stopped
    under it); the resumed run the trials after it."""

    def __init__(self, events: list, stop_at: int) -> None:
        started = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, api.TrialStarted) and e.number == stop_at
        )
        finished = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, api.TrialFinished) and e.number == stop_at
        )
        worker = [e for e in events[started:finished] if isinstance(e, api.WorkerReported)]
        self.runs = [events[: started + 1] + worker[: len(worker) // 2], events[finished + 1 :]]
        #: how far the stopped trial's worker got: the last ``t`` it reported
        self.stopped_after = max(e.message.t for e in worker[: len(worker) // 2])

    def __getattr__(self, name: str):
        return getattr(api, name)

    def tune(self, request, *, on_event, cancel):
        events = self.runs.pop(0)
        for event in events:
            on_event(event)
        if self.runs:
            cancel.wait(30)
            raise KeyboardInterrupt
        ran = sum(isinstance(e, api.TrialFinished) for e in events)
        return SimpleNamespace(session="recorded", ran=ran, recalled=0)


def test_a_reopened_session_places_its_peaks_where_the_live_search_did(
    make_window, qtbot, recorded_events
) -> None:
    """Issue 33: reopened from History, the peaks sat 8-10 s before where the live search had
    them (live counted the wall clock between trials and a gap at the resume; reopened summed
    the trials' own seconds). Here a search is stopped under its third trial and resumed, then
    the session as storage keeps it is opened again: every peak at the same second."""
    finished = [e for e in recorded_events if isinstance(e, api.TrialFinished)]
    stop_at = finished[2].number
    engine = ReplayedSearch(recorded_events, stop_at)
    live = make_window(engine=engine)
    qtbot.waitUntil(live.start_button.isEnabled)
    with qtbot.waitSignal(live.bridge.finished, timeout=10_000) as ended:
        live.start_search()
        qtbot.waitUntil(lambda: live.session_name == "recorded")
        qtbot.waitUntil(lambda: live.counts.running == 1 and live.table.trials.rowCount() == 2)
        live.stop_search()
    assert ended.args[0] == "stopped"
    with qtbot.waitSignal(live.bridge.finished, timeout=10_000) as ended:
        live.start_search()  # Resume
    assert ended.args[0] == "done"
    peaks_live = list(live.plots._peaks)
    assert len(peaks_live) == len(finished) - 1  # the stopped trial has none

    # The same session as storage keeps it: the finished trials' records, and the stopped one
    # with the times storage opened and closed it.
    opened = datetime(2026, 11, 1, 12, 0, 0)
    trials = [
        api.StoredTrial(e.number, e.stage, e.result, "COMPLETE")
        for e in finished
        if e.number != stop_at
    ]
    stopped = finished[2]
    trials.append(
        api.StoredTrial(
            stop_at,
            stopped.stage,
            None,
            "FAIL",
            "stopped by the user",
            stopped.result.spec,
            opened,
            opened + timedelta(seconds=engine.stopped_after),
        )
    )
    trials.sort(key=lambda t: t.number)
    view = api.SessionView(
        "recorded", live.setup.model_spec(), None, {}, {}, {}, tuple(trials), None
    )
    reopened = make_window()
    reopened.show_session(view, None)
    peaks_reopened = list(reopened.plots._peaks)
    assert [t for t, _ in peaks_reopened] == pytest.approx([t for t, _ in peaks_live], abs=1e-6)
    assert [mb for _, mb in peaks_reopened] == [mb for _, mb in peaks_live]
    # The resumed search went on after a gap: its first peak is past the stopped trial's end.
    before = [t for t, _ in peaks_live][1]
    assert [t for t, _ in peaks_live][2] > before + engine.stopped_after


def test_a_new_workers_memory_line_starts_where_it_has_its_trial(
    make_window, qtbot, recorded_events
) -> None:
    """Issue 33: each new worker's memory line began at 0 MB, a process just spawned that has
    not loaded its framework yet, and squashed the axis to 0-800 MB. The line starts where
    the worker has its trial (its "started" message)."""
    window = make_window()  # no GPU: the plot is the trial worker's memory
    window.bridge.feed(recorded_events)
    qtbot.waitUntil(lambda: window.recommendation.recommendation is not None, timeout=5_000)
    window.plots.redraw(everything=True)
    _xs, ys = window.plots.memory_curve.getData()
    with_trial: list[float] = []  # each worker's memory once it had its trial
    every: list[float] = []
    has_trial: set[int] = set()
    for e in recorded_events:
        if not isinstance(e, api.WorkerReported):
            continue
        if isinstance(e.message, api.StartedMessage):
            has_trial.add(e.number)
        elif isinstance(e.message, api.MemoryMessage) and e.message.rss_mb is not None:
            every.append(e.message.rss_mb)
            if e.number in has_trial:
                with_trial.append(e.message.rss_mb)
    assert min(every) < min(with_trial) / 10  # the recording has a worker's first moments
    assert np.nanmin(ys) >= min(with_trial)
    low, _high = window.plots.memory_curve.dataBounds(1)
    assert low >= min(with_trial)  # the axis' range is the trials' memory, not 0


def test_trials_run_at_once_reopen_where_they_ran_live() -> None:
    """Trials that ran at once (--parallel) each start where the axis had got to when they
    began; reopened, storage's open and close times give that order. A stopped trial lasts as
    long as it ran, and the resumed search starts after a gap."""
    spec = api.TrialSpec.create("builtin:mlp", "float32", 16, device="cpu")

    def ok(seconds: float) -> api.TrialResult:
        return api.TrialResult(spec, api.TrialStatus.OK, timings=api.Timings(total_s=seconds))

    # What happened, on the wall (seconds after 12:00): #0 and #1 start together; #1 ends
    # first and #2 takes its slot; #3 is stopped under the search; #4 runs after the resume.
    happened = [  # (number, opened, closed, the trial's own seconds; None: stopped)
        (0, 0.0, 4.1, 4.0),
        (1, 0.0, 3.05, 3.0),
        (2, 3.1, 5.2, 2.0),
        (3, 5.3, 6.8, None),
        (4, 60.0, 61.0, 1.0),
    ]
    live = SessionClock()
    ends_live: dict[int, float] = {}
    steps = [(opened, 1, n, s) for n, opened, _, s in happened]
    steps += [(closed, 0, n, s) for n, _, closed, s in happened]
    for wall, is_start, number, seconds in sorted(steps):
        if is_start:
            live.start(number, wall)
        elif seconds is not None:
            ends_live[number] = live.finish(number, seconds)
        else:
            live.stop(number, live.seconds_since_start(number, wall))
    noon = datetime(2026, 11, 1, 12, 0, 0)
    stored = [
        api.StoredTrial(
            n,
            "batch",
            ok(s) if s is not None else None,
            "COMPLETE" if s is not None else "FAIL",
            None if s is not None else "stopped by the user",
            spec,
            noon + timedelta(seconds=opened),
            noon + timedelta(seconds=closed),
        )
        for n, opened, closed, s in happened
    ]
    clock, ends = SessionClock.of_session(stored)
    assert ends == pytest.approx(ends_live)
    assert ends[0] == 4.0
    assert ends[1] == 3.0
    assert ends[2] == 3.0 + 2.0  # #2 started as #1 ended
    # #3 ran 1.5 s from where the axis was (5.0), then the gap, then #4's own second.
    assert ends[4] == pytest.approx(5.0 + 1.5 + RESUME_GAP_S + 1.0)
    assert clock.end == pytest.approx(live.end)


def test_a_gpus_memory_is_drawn_on_the_session_axis_while_a_trial_runs(
    make_window, qtbot, recorded_events
) -> None:
    """On a GPU the line is NVML's, sampled on a thread: the samples of a running trial go on
    the session's axis from where the trial starts on it."""
    window = make_window("ampere_8.0")
    first = next(e for e in recorded_events if isinstance(e, api.TrialStarted))
    finished = next(e for e in recorded_events if isinstance(e, api.TrialFinished))
    fed = time.monotonic()
    window.bridge.feed([first])
    qtbot.waitUntil(lambda: window.plots._memory.n >= 3, timeout=5_000)
    xs, ys = window.plots._memory.view()
    assert np.all(np.isfinite(ys))
    assert np.all(np.diff(xs) >= 0)
    # Seconds into the trial, from 0 (the session's first): no more than have gone by.
    assert xs.min() >= 0.0
    assert xs.max() <= time.monotonic() - fed
    window.bridge.feed([finished])
    qtbot.waitUntil(lambda: len(window.plots._peaks) == 1)
    assert window.plots._peaks[0][0] == pytest.approx(finished.result.timings.total_s)
