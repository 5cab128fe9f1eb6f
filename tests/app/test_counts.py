"""The window's counts from one source: the progress bar, the status line, the table and
History agree live, after Stop, after Resume and after opening a past session (issue 27)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from app.counts import TrialCounts
from app.qt_trials import COLUMNS
from tuner import api

MODEL = "builtin:mlp"


def spec(batch: int) -> api.TrialSpec:
    return api.TrialSpec.create(MODEL, "float32", batch, device="cpu")


def ok(batch: int) -> api.TrialResult:
    return api.TrialResult(spec(batch), api.TrialStatus.OK, samples_per_second=1000.0 * batch)


class ScriptedEngine:
    """tuner.api with a scripted search: each call to tune plays the next script's events,
    pausing at each ``"wait"`` until the test lets it go on, or until Stop."""

    def __init__(self, *scripts: list) -> None:
        self.scripts = list(scripts)
        self.go_on = threading.Event()
        self.paused = threading.Event()

    def __getattr__(self, name: str):
        return getattr(api, name)

    def tune(self, request, *, on_event, cancel):
        ran = 0
        for event in self.scripts.pop(0):
            if event == "wait":
                self.go_on.clear()
                self.paused.set()
                while not self.go_on.wait(0.01):
                    if cancel.is_set():
                        raise KeyboardInterrupt
                self.paused.clear()
                continue
            ran += isinstance(event, api.TrialFinished)
            on_event(event)
        return SimpleNamespace(session="counted", ran=ran, recalled=0)


def bar(window) -> str:
    """The progress bar's text as the user reads it."""
    return window.progress.text()


def test_counts_agree_live_after_stop_resume_and_reopen(make_window, qtbot) -> None:
    first = [
        api.SessionOpened("counted", MODEL),
        api.PlanUpdated(0, 3),
        api.TrialStarted(0, "baseline", spec(16)),
        api.TrialFinished(0, "baseline", ok(16)),
        # The engine's estimate falls short: it thinks one trial in all is done.
        api.PlanUpdated(1, 1),
        api.TrialStarted(1, "batch", spec(32)),
        "wait",
    ]
    second = [
        api.SessionOpened("counted", MODEL, resumed=True),
        api.PlanUpdated(2, 3),
        api.TrialStarted(2, "batch", spec(32)),
        "wait",
        api.TrialFinished(2, "batch", ok(32)),
        api.PlanUpdated(3, 3),
    ]
    engine = ScriptedEngine(first, second)
    window = make_window(engine=engine)
    assert bar(window) == "no trials yet"  # idle: not "0 / 1"
    window.setup.set_model(MODEL)
    qtbot.waitUntil(window.start_button.isEnabled)
    window.start_search()
    qtbot.waitUntil(lambda: engine.paused.is_set() and window.counts.running == 1)
    # Trial #1 runs: the bar never reads "1 / 1" while a trial is still to finish.
    assert bar(window) == "1 / 2 trials"
    assert window.table.trials.rowCount() == 1

    with qtbot.waitSignal(window.bridge.finished, timeout=5_000):
        window.stop_button.click()
    # The stopped trial keeps its row, marked stopped; the bar counts it as History will.
    rows = window.table.trials.rows
    assert [(r.number, r.stopped) for r in rows] == [(0, False), (1, True)]
    status = window.table.trials.index(1, window.table.trials.columnCount() - 1).data()
    assert status.startswith("stopped")
    skipped = window.table.trials.index(1, COLUMNS.index("skipped")).data()
    assert skipped == ""  # it measured nothing: no figure, not a 0
    assert bar(window) == "2 trials, stopped"
    assert "Resume" in window.recommendation.text()  # not "Searching..."

    window.start_search()  # Resume: the rows stay, the count goes on from them
    qtbot.waitUntil(lambda: engine.paused.is_set() and window.counts.running == 1)
    assert bar(window) == "2 / 3 trials"
    engine.go_on.set()
    qtbot.waitUntil(lambda: window.finished_status == "done", timeout=5_000)
    assert [r.number for r in window.table.trials.rows] == [0, 1, 2]
    assert bar(window) == "3 trials, finished"
    # The status line's figures add up to the bar's: run now, and the one stopped before.
    assert window.status.text().endswith("1 trial run, 0 recalled, 1 stopped before")

    # Opened again from History: the same rows, the same count (a stopped trial included).
    view = api.SessionView(
        "counted",
        MODEL,
        None,
        {},
        {},
        {},
        (
            api.StoredTrial(0, "baseline", ok(16), "COMPLETE"),
            api.StoredTrial(1, "batch", None, "FAIL", "stopped by its search", spec(32)),
            api.StoredTrial(2, "batch", ok(32), "COMPLETE"),
        ),
        None,
    )
    window.show_session(view, None)
    assert [(r.number, r.stopped) for r in window.table.trials.rows] == [
        (0, False),
        (1, True),
        (2, False),
    ]
    assert bar(window) == "3 trials, stopped"  # no recommendation: the search did not finish
    assert "3 trials" in window.status.text()


def test_counts_never_say_a_running_trial_is_the_last_done() -> None:
    counts = TrialCounts(finished=13, running=1, left=0, state="searching")
    assert counts.total == 14
    assert counts.bar_format() == "%v / %m trials"
    counts = TrialCounts(finished=4, running=3, left=5, state="searching")
    assert counts.total == 9
    assert counts.bar_format() == "%v / %m trials, 3 running"
    assert TrialCounts(state="searching").busy
    assert TrialCounts(finished=1, state="stopped").bar_format() == "1 trial, stopped"
    assert TrialCounts(finished=21, state="done").bar_format() == "21 trials, finished"
    # The plan's time: none before it was priced, and none once no trial is left.
    counts = TrialCounts(finished=3, state="searching")
    counts.planned(3, 13, None)
    assert counts.bar_format() == "%v / %m trials"
    counts.planned(3, 13, 200.0)
    assert counts.bar_format() == "%v / %m trials, ~3 min 20 s left"
    counts.planned(13, 13, None)
    assert counts.seconds_left is None
    counts.planned(3, 13, 0.3)  # no time worth saying
    assert counts.bar_format() == "%v / %m trials"


def test_the_bar_says_the_plans_trials_and_time_left_and_moves_with_the_search(
    make_window, qtbot
) -> None:
    """Issue 54: the bar's total is the engine's plan, its time the plan's price, one trial's
    share fewer with each trial that ends, so that the bar moves as the search does."""
    script = [
        api.SessionOpened("counted", MODEL),
        api.PlanUpdated(0, 4, seconds=120.0),
        api.TrialStarted(0, "baseline", spec(16)),
        api.TrialFinished(0, "baseline", ok(16)),
        api.TrialStarted(1, "batch", spec(32)),
        "wait",
    ]
    engine = ScriptedEngine(script)
    window = make_window(engine=engine)
    window.setup.set_model(MODEL)
    qtbot.waitUntil(window.start_button.isEnabled)
    window.start_search()
    qtbot.waitUntil(lambda: window.table.trials.rowCount() == 1, timeout=5_000)
    qtbot.waitUntil(lambda: bar(window).startswith("1 / 4"), timeout=5_000)
    # Three of the plan's four trials left, each priced at 30 s.
    assert bar(window) == "1 / 4 trials, ~1 min 30 s left"
    assert window.progress.value() == 1
    assert window.progress.maximum() == 4
    engine.go_on.set()
    qtbot.waitUntil(lambda: not window.bridge.running, timeout=5_000)


def test_a_reopened_failed_session_says_what_failed_and_how_to_go_on(make_window) -> None:
    """Issue 33, item 11: a session whose model failed in its own code says so, and that the
    fixed file goes on with Resume - not only "the search did not finish"."""
    window = make_window(engine=ScriptedEngine())
    failure = api.SessionFailure("model error", "model.py:3: build_model() returned None", 0)
    view = api.SessionView(
        "broken",
        MODEL,
        None,
        {},
        {},
        {},
        (api.StoredTrial(0, "baseline", None, "FAIL", "failed", spec(16)),),
        None,
        failure,
    )
    window.show_session(view, None)
    text = window.recommendation.text()
    assert "fails in its own code" in text
    assert "build_model() returned None" in text
    assert "trial #0" in text
    assert "Fix the model file, then press Resume" in text
    assert window._resumable == ("broken", MODEL)
