"""Every trial's loss gap to float32 (issue 27: the window's loss gap column was blank for every
mixed trial but the recommended one and the alternatives): one engine figure per trial, the
numerical guard's comparison, so that a row and the recommendation never tell two gaps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tuner import api
from tuner.search.measures import reference_of

SEARCHES = Path(__file__).resolve().parent / "data" / "searches"
GOLDENS = sorted(p.name.removesuffix(".golden.json") for p in SEARCHES.glob("*.golden.json"))


def result(
    policy: str,
    batch: int,
    losses: list[float],
    status: api.TrialStatus = api.TrialStatus.OK,
    seed: int = 0,
    **setup: object,
) -> api.TrialResult:
    spec = api.TrialSpec("builtin:mlp", api.Setup(policy, batch, **setup), seed=seed)
    return api.TrialResult(spec, status, samples_per_second=1000.0, losses=tuple(losses))


LOSSES = [1.0] * 40


def test_each_trial_is_compared_with_float32_at_its_batch_size() -> None:
    trials = {
        0: result("float32", 16, LOSSES),
        1: result("mixed_bfloat16", 16, [1.1] * 40),
        2: result("mixed_bfloat16", 32, [1.1] * 40),  # no float32 at 32
        3: result("float32", 16, LOSSES, tf32=True),
        4: result("mixed_bfloat16", 16, [1.0] * 40, xla=True),
        5: result("float32", 16, [1.2] * 40, xla=True),  # float32: the reference precision
        6: result("mixed_bfloat16", 16, [math.nan] * 40),
        7: result("mixed_bfloat16", 16, [1.1] * 40, api.TrialStatus.OOM),
        8: result("mixed_bfloat16", 16, [1.1] * 40, seed=1),  # other data: no comparison
    }
    gaps = api.trial_loss_gaps(trials)
    assert gaps[1] == api.TrialGap(pytest.approx(0.1), 0, 16)
    assert gaps[1].words().startswith("10.00% against float32 trial #0 at batch size 16")
    assert gaps[3].gap == 0.0
    assert gaps[3].reference == 0  # TF32 against IEEE float32
    assert gaps[4].reference == 0  # XLA is compared without it, as the guard does
    assert gaps[6].gap == math.inf  # a loss that is not finite
    # Every ok trial of a lower precision has an entry: its gap, or why it has none.
    assert gaps[2].gap is None
    assert "no float32 trial at batch size 32" in gaps[2].words()
    assert gaps[8].gap is None
    assert gaps[8].reference is None
    assert set(gaps) == {1, 2, 3, 4, 6, 8}


def test_the_first_ok_float32_trial_is_the_reference() -> None:
    trials = {
        0: result("float32", 16, [9.0] * 40, api.TrialStatus.CRASHED),
        1: result("float32", 16, [2.0] * 40),
        2: result("float32", 16, [4.0] * 40),
        3: result("mixed_float16", 16, [3.0] * 40, loss_scale="dynamic"),
    }
    assert api.trial_loss_gaps(trials) == {3: api.TrialGap(0.5, 1, 16)}
    # The window of steps compared is the guard's (its last quarter): the steps past it, where
    # this trial drifts, do not count unless asked for.
    trials[4] = result("mixed_float16", 16, [2.0] * 40 + [8.0] * 40, loss_scale="dynamic")
    trials[1] = result("float32", 16, [2.0] * 80)
    assert api.trial_loss_gaps(trials)[4].gap == 0.0
    assert api.trial_loss_gaps(trials, window=80)[4].gap == pytest.approx(3.0)


def test_too_few_steps_to_compare_is_said() -> None:
    trials = {0: result("float32", 8, [1.0] * 40), 1: result("mixed_bfloat16", 8, [1.0] * 3)}
    (gap,) = api.trial_loss_gaps(trials).values()
    assert gap.gap is None
    assert gap.reference == 0
    assert (
        gap.words()
        == "No loss gap: too few measured steps to compare its loss with float32 trial #0."
    )


@pytest.mark.parametrize("name", GOLDENS)
def test_the_table_and_the_recommendation_tell_one_gap(name: str) -> None:
    """Over every recorded search: each guarded candidate's gap is the gap of a trial of it
    (its first, where float32 ran at its batch size; else one at the batch the guard compared
    at), and every ok trial with an ok float32 trial at its reference has a gap."""
    golden = json.loads((SEARCHES / f"{name}.golden.json").read_text())
    events = [api.event_from_dict(e) for e in golden["events"]]
    results = {e.number: e.result for e in events if isinstance(e, api.TrialFinished)}
    rec = [e for e in events if isinstance(e, api.Recommended)][-1].recommendation
    gaps = api.trial_loss_gaps(results)
    references = {r.spec.setup for r in results.values() if r.ok}
    for number, r in results.items():
        setup = r.spec.setup
        if r.ok and setup.precision != "float32" and reference_of(setup) in references:
            assert number in gaps, (name, number, setup.label)
            assert len(r.losses) < 4 or gaps[number].gap is not None, (name, setup.label)
    candidates = [(rec.setup, rec.loss_gap)] + [(a.setup, a.loss_gap) for a in rec.alternatives]
    for setup, gap in candidates:
        ran = [n for n, r in results.items() if r.spec.setup == setup and r.ok]
        if gap is None or setup.precision == "float32" or not ran:
            continue  # float32 itself, or recalled from before a resume (not in the events)
        first = min(ran)
        if gaps[first].gap is not None:
            assert gaps[first].gap == pytest.approx(gap), (name, setup.label)
        else:  # float32 did not run there: the guard compared at a smaller batch size
            assert any(g.gap == pytest.approx(gap) for g in gaps.values()), (name, setup.label)
