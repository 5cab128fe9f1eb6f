"""Fit's loop bounded by the trial's window (issue 50): steps of over a second end within
:data:`~tuner.worker.feeding.LONGEST` times the window after the warm executions, whatever an
epoch's length, and a trial reports what it measured before its time limit instead of
reaching it while it times."""

from __future__ import annotations

import dataclasses
import math
import time
from types import SimpleNamespace

import keras
import numpy as np
import pytest

from tuner import api
from tuner.search.space import SearchSettings
from tuner.setup import Setup
from tuner.trials.spec import FLOOR_STEPS, WARMUP_FLOOR
from tuner.worker import feeding, training

WINDOW_S = 2.5


def _slow_model(width: int) -> keras.Model:
    inputs = keras.Input((width,))
    hidden = keras.layers.Dense(width, activation="relu")(inputs)
    hidden = keras.layers.Dense(width, activation="relu")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(10)(hidden))
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _batch_for_a_second(model: keras.Model, width: int) -> int:
    """A batch size whose step takes about 2 s on this machine in ``train_on_batch`` (a step's
    work grows with its batch), found from timed steps: at batch 256, then at the batch that
    foretold. Fit's own steps of that batch run faster (its arrays are converted once, not at
    each call): 1.4 s here read 0.96 s in fit on an AVX2-only EPYC, hence the 2 s."""
    batch = 256
    for _ in range(2):
        x = np.ones((batch, width), "float32")
        y = np.zeros((batch,), "int32")
        model.train_on_batch(x, y)  # traced
        start = time.perf_counter()
        model.train_on_batch(x, y)
        batch = max(256, int(2.0 * batch / (time.perf_counter() - start)))
    return batch


@pytest.mark.serial("judges how long fit's loop ran after its warm executions")
@pytest.mark.slow  # a real fit of 2 s steps: about 16 s
def test_steps_over_a_second_end_within_the_bound() -> None:
    """Steps of over a second in epochs of a dozen of them: fit's loop is timed within the
    first epoch and ends within LONGEST times the window after the warm executions (a 2.5 s
    window, where fit's loop of Keras' ResNet50 at 32x32 on JAX ran 135 s after a 44 s device
    window)."""
    # Wide layers, so that a 2 s step needs a batch of thousands, not tens of thousands: at a
    # width of 1024 the batch was 58,663 here and fit spent 20 s taking in its 2.9 GB of
    # arrays before its first step; at 4096 the test takes 16 s, not 30.
    width = 4096
    model = _slow_model(width)
    batch = _batch_for_a_second(model, width)
    # Ones, not random draws: the step's time is the same, and drawing 700 MB of them took 7 s.
    x = np.ones((12 * batch, width), "float32")
    y = np.zeros((12 * batch,), "int32")
    clock = feeding.FitClock(WINDOW_S)
    model.fit(x, y, batch_size=batch, epochs=feeding.EPOCHS, verbose=0, callbacks=[clock])
    end = time.perf_counter()
    assert clock.start is not None
    executions, seconds, _ = clock.window(end)
    assert seconds / executions > 1.0, "the model's steps must take over a second here"
    assert clock.epochs == 0  # timed within the first epoch
    assert executions >= 1
    # Within the bound, with a tenth of a step for the foresight's error.
    assert end - clock.start <= feeding.LONGEST * WINDOW_S + 0.1 * seconds / executions


@pytest.mark.slow  # fit runs until the limit, 5 s in
def test_fit_loop_stops_at_the_trials_limit() -> None:
    """``until`` before the window's end: fit's loop stops there and gives what it timed."""
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile("sgd", "mse")
    x = np.ones((64 * 16, 8), "float32")
    y = np.zeros((64 * 16, 2), "float32")
    model.fit(x[:64], y[:64], batch_size=16, epochs=1, verbose=0)  # built and traced
    feed = feeding.Feed(x, y, "arrays", "arrays")
    start = time.perf_counter()
    # 5 s for fit's warm executions to end first, on a machine busy with other tests (1 s
    # was not always enough beside them: the limit then came before any was timed; 2 s was
    # not either, in the fast lane, which runs this test two at a time too). Not serial: the
    # stop is judged against 15 s, three times the limit, which the fast lane's runs beside
    # another test always met.
    fed = feeding.fit_rate(model, feed, 16, 60.0, until=start + 5.0)
    assert time.perf_counter() - start < 15.0  # not the 60 s window
    assert fed["samples_per_second"] > 0
    assert fed["batches"] > 0


@pytest.mark.serial("judges a worker's report within its 10 s limit")
@pytest.mark.slow
def test_a_trial_reports_before_its_limit_instead_of_timing_out() -> None:
    """A trial asked to measure longer than its limit allows: its worker stops timing in time
    (the limit's seconds reach it with its trial), reports the device's figure, and says that
    fit's loop was not timed; it does not end timed out."""
    spec = api.TrialSpec(
        model="builtin:mlp",
        setup=Setup("float32", 64, backend="jax"),
        measure_seconds=60.0,
        timeout_s=10.0,  # the worker times until 5 s (REPORT_MIN_S) before it
        probe=False,
        device="cpu",
    )
    start = time.monotonic()
    result = api.run_trial(spec)
    assert result.ok, result.error
    assert time.monotonic() - start < spec.timeout_s
    assert result.samples_per_second
    assert result.samples_per_second > 0
    assert any("time limit" in w for w in result.warnings), result.warnings


def test_fit_is_timed_for_the_window_the_trial_measured() -> None:
    """A trial measured for seconds times fit's loop for as many; one of a fixed number of
    steps, for as long as those steps took (it timed fit for ``measure_seconds``, 5 s by
    default, after a window of 6 ms)."""
    timed = api.TrialSpec(model="builtin:mlp", setup=Setup("float32", 16), measure_seconds=2.0)
    assert timed.fit_seconds(0.7) == 2.0
    counted = dataclasses.replace(timed, steps=6)
    assert counted.fit_seconds(0.7) == 0.7


@pytest.mark.slow
def test_a_trial_of_a_few_steps_times_fit_for_a_few() -> None:
    """What fit's loop counted in a trial of 6 steps of a tiny model: a few executions, not
    the thousands of batches of a 5 s window (``measure_seconds`` left at its default)."""
    spec = api.TrialSpec(
        model="builtin:mlp:features=16,width=32,depth=1",
        setup=Setup("float32", 16, backend="jax"),
        steps=6,
        warmup_steps=2,
        probe=False,
        device="cpu",
    )
    result = api.run_trial(spec)
    assert result.ok, result.error
    assert result.input is not None
    assert result.input.fit_loop
    # A few executions within fit's first epoch (1-7 here), where a 5 s window counted 3,072
    # batches over 48 epochs.
    assert result.input.epochs == 0, result.input
    assert 0 < result.input.batches < 64, result.input


@pytest.mark.parametrize("step_s", [0.001, 0.05, 0.3, 1.1, 4.0])
def test_the_least_steps_follow_one_rule_in_the_worker_and_the_simulation(
    step_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard's 40 steps shrink where they would outlast ``min_steps_seconds`` (10 s),
    never under FLOOR_STEPS: the worker's rule, run step by step on a clock of ``step_s``
    steps, ends where :meth:`TrialSpec.least_steps` (the simulated trials' price) says."""
    spec = api.TrialSpec(
        model="builtin:mlp",
        setup=Setup("float32", 64),
        measure_seconds=2.0,
        min_steps=40,
        min_steps_seconds=10.0,
    )
    least = training._Least(spec.min_steps, spec.min_steps_seconds)
    count = 0
    # The worker's clock, stepped: ``count`` steps of ``step_s`` since the phase began.
    monkeypatch.setattr(training, "time", SimpleNamespace(perf_counter=lambda: count * step_s))
    while not training.StepRunner._ended(
        count, None, least, spec.max_steps, spec.measure_seconds, 0.0
    ):
        count += 1
    by_time = math.ceil(spec.measure_seconds / step_s)
    assert count == max(spec.least_steps(step_s), by_time)
    if step_s * 40 <= 10.0:
        assert count >= 40  # the guard's whole window where it is cheap
    else:
        assert FLOOR_STEPS <= count < 40
        assert count * step_s <= max(10.0 + step_s, FLOOR_STEPS * step_s)


@pytest.mark.parametrize("step_s", [0.001, 0.3, 0.7, 0.9, 1.1, 4.0])
def test_the_warm_up_follows_one_rule_in_the_worker_and_the_simulation(
    step_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search's 5 warm-up steps end at its ``warmup_seconds`` (3 s) once WARMUP_FLOOR
    ran: the worker's phase, run step by step on a clock of ``step_s`` steps, ends where
    :meth:`TrialSpec.warmup_count` (the simulated trials' price) says; all 5 where they fit."""
    spec = api.TrialSpec(
        model="builtin:mlp", setup=Setup("float32", 64), warmup_steps=5, warmup_seconds=3.0
    )
    least = training._Least(min(WARMUP_FLOOR, spec.warmup_steps))
    count = 0
    monkeypatch.setattr(training, "time", SimpleNamespace(perf_counter=lambda: count * step_s))
    assert spec.warmup_seconds is not None
    while not training.StepRunner._ended(
        count, None, least, spec.warmup_steps, spec.warmup_seconds, 0.0
    ):
        count += 1
    assert count == spec.warmup_count(step_s)
    if 5 * step_s <= 3.0:
        assert count == 5
    else:
        assert WARMUP_FLOOR <= count <= 5  # 0.7 s: the fifth begins at 2.8 s, within them
        assert count * step_s <= max(3.0 + step_s, WARMUP_FLOOR * step_s)
        assert count < 5 or (count - 1) * step_s < 3.0
    # Without the seconds (``mptune trial --warmup N``), N steps whatever they take.
    assert dataclasses.replace(spec, warmup_seconds=None).warmup_count(step_s) == 5
    assert dataclasses.replace(spec, warmup_steps=1).warmup_count(step_s) == 1


def test_the_seconds_for_the_least_steps_round_trip_and_leave_old_specs_as_they_were() -> None:
    plain = api.TrialSpec(model="builtin:mlp", setup=Setup("float32", 64))
    assert "min_steps_seconds" not in plain.to_dict()  # specs stored before it read the same
    assert "warmup_seconds" not in plain.to_dict()
    timed = dataclasses.replace(plain, min_steps_seconds=10.0, warmup_seconds=3.0)
    assert api.TrialSpec.from_dict(timed.to_dict()) == timed
    with pytest.raises(ValueError, match="positive"):
        dataclasses.replace(plain, min_steps_seconds=0.0)
    with pytest.raises(ValueError, match="warm-up's seconds must be positive"):
        dataclasses.replace(plain, warmup_seconds=-1.0)
    with pytest.raises(ValueError, match="warm-up's seconds must be positive"):
        SearchSettings(warmup_seconds=math.inf)


@pytest.mark.slow
def test_a_trials_warm_up_and_least_steps_end_at_their_seconds() -> None:
    """A real trial asked for 5 warm-up steps within 1 ms and 2,000 measured steps at least,
    which may take 0.5 s: it warms up with WARMUP_FLOOR steps and measures what fits in the
    0.5 s (at least FLOOR_STEPS), not the 2,000; its result says how many of each."""
    spec = api.TrialSpec(
        model="builtin:mlp",
        setup=Setup("float32", 64, backend="jax"),
        warmup_steps=5,
        warmup_seconds=0.001,
        measure_seconds=0.2,
        min_steps=2000,
        min_steps_seconds=0.5,
        probe=False,
        device="cpu",
    )
    result = api.run_trial(spec)
    assert result.ok, result.error
    assert result.warmup_updates == WARMUP_FLOOR
    assert FLOOR_STEPS <= len(result.losses) < 2000
