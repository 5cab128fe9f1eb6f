"""The throughput plot's star is the engine's leader (issue 54): where a setup's first run was an
outlier, the star follows the median the search stands on, and ends on the recommendation's
setup at its figure."""

from __future__ import annotations

from pathlib import Path

from test_leader import OUTLIER, outlier_machine, outlier_search
from test_search_strategy import run

from tuner import api


def _star(window) -> tuple[list[float], list[float]]:
    """Where the star is drawn: batch size and samples/s (the plot's x axis is a log one)."""
    window.plots.redraw(everything=True)
    xs, ys = window.plots.best_point.getData()
    if xs is None or len(xs) == 0:
        return [], []
    return [round(10**x) for x in xs], [float(y) for y in ys]


def test_the_star_follows_the_leader_not_the_highest_run(
    make_window, qtbot, tmp_path: Path
) -> None:
    events = outlier_search(tmp_path)
    finished = [e for e in events if isinstance(e, api.TrialFinished)]
    outlier = next(e for e in finished if e.result.trained_samples_per_second == OUTLIER)
    again = next(
        e
        for e in finished
        if e.number > outlier.number and e.result.spec.setup == outlier.result.spec.setup
    )
    window = make_window()
    # Up to the outlier's setup measured again: the star has left its first run's figure.
    cut = events.index(again) + 1
    while not isinstance(events[cut], (api.TrialStarted, api.StageStarted, api.Recommended)):
        cut += 1  # the leader that trial moved
    window.bridge.feed(events[:cut])
    qtbot.waitUntil(lambda: window.table.trials.rowCount() == again.number + 1, timeout=5_000)
    _, ys = _star(window)
    assert len(ys) == 1
    assert ys[0] < OUTLIER
    # The outlier is still on the plot, as a point of its own: only the star left it.
    assert OUTLIER in set(window.plots.throughput_points["float32"].getData()[1])

    window.bridge.feed(events[cut:])
    qtbot.waitUntil(lambda: window.recommendation.recommendation is not None, timeout=5_000)
    rec = window.recommendation.recommendation
    assert rec.setup != outlier.result.spec.setup
    assert _star(window) == ([rec.setup.batch_size], [rec.samples_per_second])


def test_a_session_opened_again_stars_its_recommendation(make_window, qtbot, tmp_path) -> None:
    """History has no leader events: the star is the stored recommendation's."""
    result = run(outlier_machine(), tmp_path, study="again")
    window = make_window()
    window.load_session("again", f"sqlite:///{tmp_path / 's.db'}")
    qtbot.waitUntil(lambda: window.recommendation.recommendation is not None, timeout=10_000)
    rec = result.recommendation
    assert _star(window) == ([rec.setup.batch_size], [rec.samples_per_second])
