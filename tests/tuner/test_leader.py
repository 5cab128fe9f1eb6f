"""The search's leader, as the faces mark it (issue 54): the setup the search leads with, at the
median of its runs, so that a first run that was an outlier never stands once the setup ran
again, and at the end the recommendation's setup at its figure."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

from test_search_strategy import Machine, run

from tuner.search.events import LeaderChanged, Recommended, SearchEvent, TrialFinished, from_dict
from tuner.setup import Setup

#: float32 at batch 256 first runs at 4,000 samples/s, then at its model's 1,690: the outlier a
#: star on the highest figure ever seen sat on, above mixed_bfloat16's steady 2,197 there.
OUTLIER = 4000.0


def outlier_machine() -> Machine:
    return Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1300, "mixed_float16": 300},
        script={("float32", 256): [OUTLIER]},
    )


def outlier_search(tmp_path: Path) -> list[SearchEvent]:
    """A scripted search whose float32 b256 first run is an outlier; its events in order."""
    events: list[SearchEvent] = []
    run(outlier_machine(), tmp_path, on_event=events.append)
    return events


def test_the_leader_stands_on_the_median_of_its_runs_and_ends_on_the_recommendation(
    tmp_path: Path,
) -> None:
    events = outlier_search(tmp_path)
    leaders = [e for e in events if isinstance(e, LeaderChanged)]
    rec = next(e for e in events if isinstance(e, Recommended)).recommendation
    figures = {
        e.number: e.result.trained_samples_per_second
        for e in events
        if isinstance(e, TrialFinished)
    }
    outlier = Setup("float32", 256)
    # The outlier led while it was float32 b256's one run (the search then measured it again)...
    assert any(e.setup == outlier and e.samples_per_second == OUTLIER for e in leaders)
    for e in leaders:
        # ...and every figure is the median of the runs it names, never a run of another setup.
        assert e.samples_per_second == statistics.median(figures[n] for n in e.trials)
        if e.setup == outlier and len(e.trials) > 1:
            assert e.samples_per_second < OUTLIER
    # Once float32 b256 ran again, its first run never led alone.
    ran = [
        i
        for i, e in enumerate(events)
        if isinstance(e, TrialFinished) and e.result.spec.setup == outlier
    ]
    assert len(ran) > 1, "the search never measured the outlier's setup again"
    after = [e for e in events[ran[1] :] if isinstance(e, LeaderChanged)]
    assert after
    assert all(e.samples_per_second != OUTLIER for e in after)
    # The last leader is the recommendation: its setup, at its figure.
    assert rec.setup != outlier
    assert leaders[-1].setup == rec.setup
    assert leaders[-1].samples_per_second == rec.samples_per_second
    # Told only when it moved.
    assert all(a != b for a, b in itertools.pairwise(leaders))


def test_the_leader_event_round_trips() -> None:
    event = LeaderChanged(Setup("mixed_bfloat16", 256), 6869.0, (8, 15, 16))
    again = from_dict(event.to_dict())
    assert again == event
    assert event.words() == "mixed_bfloat16 b256 none at 6,869 samples/s (median of #8, #15, #16)"
    assert LeaderChanged(Setup("float32", 64), 1000.0, (0,)).words().endswith("(trial #0)")
