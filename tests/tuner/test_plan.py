"""The search's plan (issue 54): what it expects to run, told as it goes (``PlanUpdated``), is
close enough to what it then ran for a progress bar to move with the search, instead of
sitting near its end while its total grows under it.

Read from the recorded searches' goldens (tests/tuner/data/searches/): test_recorded_searches
holds each golden to the event stream its search makes today, the plan's events included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "searches"
GOLDENS = sorted(p.name.removesuffix(".golden.json") for p in DATA.glob("*.golden.json"))
#: How far a plan made after the policies stage may be from the trials the search ran.
WITHIN = 0.30


def _plans(name: str) -> tuple[list[tuple[int, int]], int, int]:
    """The plans made once the policies stage began, as (done, planned); the trials the search
    ran in all (a resumed search's recalled ones counted); the trials closed when the policies
    stage began."""
    events = json.loads((DATA / f"{name}.golden.json").read_text())["events"]
    recalled = next(e["done"] for e in events if e["type"] == "plan")
    closed = recalled
    at_policies = None
    plans = []
    for e in events:
        if e["type"] == "trial_finished":
            closed += 1
        elif e["type"] == "stage" and e["stage"] == "policies" and at_policies is None:
            at_policies = closed
        elif e["type"] == "plan" and at_policies is not None:
            plans.append((e["done"], e["planned"]))
    assert at_policies is not None, f"{name}: no policies stage"
    return plans, closed, at_policies


def test_the_real_recorded_searches_are_among_them() -> None:
    assert {"cnn", "mlp-xla"} <= set(GOLDENS)


@pytest.mark.parametrize("name", GOLDENS)
def test_the_plan_after_the_policies_stage_is_within_30_percent_of_what_ran(name: str) -> None:
    plans, ran, _ = _plans(name)
    assert plans, f"{name}: no plan after the policies stage"
    first = plans[0][1]
    assert abs(first - ran) <= WITHIN * ran, f"{name}: planned {first}, ran {ran}"
    # And every plan after it: the total the bar shows never wanders off as the search goes.
    for done, planned in plans:
        assert abs(planned - ran) <= WITHIN * ran, f"{name}: at {done} planned {planned}/{ran}"
        assert planned >= done


@pytest.mark.parametrize("name", GOLDENS)
def test_the_plan_is_told_at_each_stage_and_ends_on_what_ran(name: str) -> None:
    """Told after each ladder, before the knobs, around the picks, before the guard and before
    the final (the last counts the final's turns), so that the bar ends about full."""
    plans, ran, _ = _plans(name)
    assert len(plans) >= 5, f"{name}: plans {plans}"
    assert abs(plans[-1][1] - ran) <= 2, f"{name}: the last plan {plans[-1]}, ran {ran}"
