"""A dynamic loss scale's calibration apart (issue 35, item 2): the steps it skips while it
comes down from its initial value run before the measured ones and are counted apart, the
setup ranks by its rate after them, and the guard compares its loss with float32's after as
many applied updates; skips after calibration still count against the setup."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tuner.search.measures import Measured, loss_gap, trial_loss_gaps
from tuner.search.space import SearchSettings
from tuner.setup import Setup
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

TINY_MLP = "builtin:mlp:features=16,width=32,depth=1"
#: An initial scale far above what float16 gradients of the tiny MLP can take: it comes down
#: by halving, one skipped step each time, before any step applies (12 of them on this
#: project's CPU).
INITIAL = 1e9


def _spec(policy: str, loss_scale: str | None = None, warmup: int = 5) -> TrialSpec:
    return TrialSpec.create(
        TINY_MLP,
        policy,
        16,
        loss_scale,
        steps=24,
        warmup_steps=warmup,
        device="cpu",
        timeout_s=120.0,
        probe=False,
    )


@pytest.mark.slow
def test_a_loss_scale_coming_down_is_calibration_not_a_cost_of_the_setup() -> None:
    f16 = run_trial(_spec("mixed_float16", f"dynamic:{INITIAL:g}"))
    f32 = run_trial(_spec("float32"))
    assert f16.status is TrialStatus.OK, f16.error
    assert f32.status is TrialStatus.OK, f32.error
    # Its k skipped steps ran before the measured ones, each halving the scale: k of them took
    # it from its initial value to where the measured steps began.
    k = f16.calibration_steps
    assert k > 5  # more than the warm-up's own steps: calibration went on after it
    first = f16.loss_scales[0]
    assert first is not None
    assert INITIAL / first == pytest.approx(2.0**k)
    # The setup ranks by its rate after calibration: the measured steps' own skips (the scale
    # settled at the edge of what fits: a step whose gradients grew may overflow again, as in
    # a real run) count against it, calibration's do not.
    assert f16.skipped_steps < k / 2
    applied = 1 - f16.skipped_steps / f16.steps_completed
    assert f16.samples_per_second is not None
    assert Measured(1, f16).speed == pytest.approx(f16.samples_per_second * applied)
    # The updates it applied before measuring: its warm-up and calibration steps, less k.
    assert f16.warmup_updates is not None
    assert 0 < f16.warmup_updates < f32.updates_before
    assert f32.warmup_updates == 5
    assert f32.calibration_steps == 0
    # The guard compares its loss with float32's after as many updates, and passes it.
    gap = trial_loss_gaps({0: f32, 1: f16}, window=24)[1]
    assert gap.reference == 0
    assert gap.gap is not None
    assert gap.gap < SearchSettings().loss_tolerance, gap
    # The record keeps both figures.
    back = TrialResult.from_dict(f16.to_dict())
    assert (back.calibration_steps, back.warmup_updates) == (k, f16.warmup_updates)


@pytest.mark.slow
def test_a_scale_that_keeps_falling_is_still_marked() -> None:
    # The same scale with no warm-up: nothing runs apart, the measured steps skip while the
    # scale comes down, and they count against the setup.
    f16 = run_trial(_spec("mixed_float16", f"dynamic:{INITIAL:g}", warmup=0))
    assert f16.status is TrialStatus.OK, f16.error
    assert f16.calibration_steps == 0
    assert f16.skipped_steps > 2
    assert f16.samples_per_second is not None
    assert Measured(1, f16).speed < f16.samples_per_second * (1 - 2 / f16.steps_completed)


def _losses(start: int, n: int) -> tuple[float, ...]:
    """A loss that falls with the updates applied: the loss at update u is 1 / (1 + u)."""
    return tuple(1 / (1 + u) for u in range(start, start + n))


def _result(warmup_steps: int, updates: int | None, losses: tuple[float, ...]) -> TrialResult:
    spec = TrialSpec(TINY_MLP, Setup("float32", 16), warmup_steps=warmup_steps)
    return TrialResult(
        spec, TrialStatus.OK, losses=losses, steps_completed=len(losses), warmup_updates=updates
    )


def test_the_loss_gap_pairs_steps_after_as_many_updates() -> None:
    reference = _result(5, None, _losses(5, 40))  # stored before: its 5 warm-up steps applied
    calibrated = _result(5, 1, _losses(1, 40))  # 4 of its warm-up and calibration steps skipped
    assert loss_gap(calibrated, reference, 40) == pytest.approx(0.0, abs=1e-12)
    # Paired step for step instead, it would read a gap that is only the 4 updates it lacks.
    unaligned = dataclasses.replace(calibrated, warmup_updates=5)
    gap = loss_gap(unaligned, reference, 40)
    assert gap is not None
    assert gap > 0.05
    # Results without the figure compare step for step, as before.
    old = _result(5, None, _losses(5, 40))
    assert loss_gap(old, reference, 40) == 0.0


def test_a_measured_skip_counts_against_the_setup_and_calibration_does_not() -> None:
    base = _result(2, 2, _losses(2, 20))
    base = dataclasses.replace(base, samples_per_second=1000.0)
    calibrated = dataclasses.replace(base, calibration_steps=9)
    skipping = dataclasses.replace(base, skipped_steps=5)
    assert Measured(0, calibrated).speed == 1000.0
    assert Measured(0, skipping).speed == pytest.approx(1000.0 * 15 / 20)
    assert not math.isnan(Measured(0, base).speed)
