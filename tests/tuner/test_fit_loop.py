"""Fit's own loop, timed (issue 35, item 1): the callback that times ``model.fit`` changes how
Keras dispatches nothing, counts every step it times and no other, and runs at least as long as
asked; arrays of mptune's own reach fit as a real epoch would, not the trial's 8-batch pool."""

from __future__ import annotations

import time
from typing import Any

import keras
import numpy as np
import pytest

from tuner.worker import feeding
from tuner.worker.usercode import UserCodeError


def _model(steps_per_execution: int = 1) -> keras.Model:
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(2, activation="softmax")(keras.layers.Dense(16)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "sparse_categorical_crossentropy", steps_per_execution=steps_per_execution)
    return model


def _arrays(batches: int, batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    n = batches * batch_size
    return rng.standard_normal((n, 8)).astype("float32"), rng.integers(0, 2, n).astype("int32")


def test_the_clock_leaves_fits_dispatch_as_it_was() -> None:
    """A callback with batch hooks would make Keras run every batch's callbacks on the main
    thread, converting the logs (a sync each step); the clock says it is safe off it."""
    plain = keras.callbacks.CallbackList([keras.callbacks.History()])
    timed = keras.callbacks.CallbackList([feeding.FitClock(1.0)])
    assert timed._async_train == plain._async_train

    class Hooked(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            pass

    if plain._async_train:  # on a backend whose callbacks may run off the main thread
        assert not keras.callbacks.CallbackList([Hooked()])._async_train


@pytest.mark.serial("a 0.3 s window: which epoch ends fall in it moves with the machine's load")
@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_fit_rate_times_whole_epochs_where_they_are_short(steps_per_execution: int) -> None:
    """Epochs of 12 batches, far shorter than the window: it runs from an epoch's end to
    another's, so the work between epochs weighs once an epoch as in the user's fit."""
    model = _model(steps_per_execution)
    x, y = _arrays(12)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # built and traced
    before = int(model.optimizer.iterations.numpy())
    fed = feeding.fit_rate(model, feeding.Feed(x, y, "arrays", "arrays"), 16, 0.3)
    steps = int(model.optimizer.iterations.numpy()) - before
    assert fed["epochs"] >= 1
    # Every step of the whole epochs timed, and no other: the epochs before are not counted.
    assert fed["batches"] == 12 * fed["epochs"]
    assert steps % 12 == 0
    assert steps > fed["batches"]
    # The epoch end nearest the window: at least half of it, less than one epoch over.
    assert fed["seconds"] >= 0.15
    assert fed["samples_per_second"] == pytest.approx(fed["batches"] * 16 / fed["seconds"])
    assert fed["fit_loop"]
    assert fed["kind"] == "arrays"


def test_fit_rate_times_within_an_epoch_longer_than_its_window() -> None:
    """An epoch of 400 batches outlasts a 0.1 s window: timed from the warm executions' end,
    stopped within the epoch, every step it began counted."""
    model = _model()
    x, y = _arrays(400)
    model.fit(x[:160], y[:160], batch_size=16, epochs=1, verbose=0)  # built and traced
    before = int(model.optimizer.iterations.numpy())
    fed = feeding.fit_rate(model, feeding.Feed(x, y, "arrays", "arrays"), 16, 0.1)
    steps = int(model.optimizer.iterations.numpy()) - before
    assert fed["epochs"] == 0
    assert steps < 400  # stopped within the first epoch
    # Every step it began counted, but those of the epoch's start left out.
    assert fed["batches"] + fed["left_out"] == steps - feeding.WARM_EXECUTIONS
    assert fed["left_out"] > 0
    assert fed["batches"] >= feeding.MIN_EXECUTIONS
    # Until the execution foreseen to end at the window's end (foreseen from those before),
    # from the end of its first third.
    assert fed["seconds"] >= 0.75 * 0.1 * (1 - feeding.STEADY_FROM)
    # On TensorFlow each epoch's end waits for its input autotuner: priced from the executions
    # timed (an epoch of 400), not timed.
    if keras.backend.backend() == "tensorflow":
        execution_s = fed["seconds"] / fed["batches"]
        assert fed["epoch_end_wait_s"] == pytest.approx(feeding.autotune_wait(400 * execution_s))
        assert fed["epoch_end_wait_s"] > 0
    counted = fed["seconds"] + fed["batches"] * fed["epoch_end_wait_s"] / 400
    assert fed["samples_per_second"] == pytest.approx(fed["batches"] * 16 / counted)


def test_the_wait_at_an_epochs_end_follows_the_autotuners_wakes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TensorFlow's tf.data autotuner wakes 10 ms after it starts, then after periods that
    double up to 60 s; an epoch of arrays whose steps end between two wakes waits, every other
    epoch, for the next (issue 50: keras.io's MNIST convnet at b512, 2.9 s of steps, waited
    2.2-2.6 s every other epoch, until 5.11 s)."""
    wakes = [feeding._autotuner_wakes(t) for t in (0.0, 0.01, 0.011, 0.05, 2.9, 5.2, 41.0, 100.0)]
    assert wakes == pytest.approx([0.01, 0.01, 0.03, 0.07, 5.11, 10.23, 81.91, 141.91])
    assert feeding.autotune_wait(2.9) == pytest.approx((5.11 - 2.9) / 2)
    assert feeding.autotune_wait(5.11) == pytest.approx(0.0)
    # Arrays only (a dataset's own pipeline is timed over whole epochs or said), and on
    # TensorFlow only: JAX's and PyTorch's array iterators have no autotuner.
    x, y = _arrays(64)
    arrays = feeding.Feed(x, y, "arrays", "")
    monkeypatch.setattr(keras.backend, "backend", lambda: "tensorflow")
    assert feeding._epoch_end_wait(arrays, 16, 1, 0.045) == pytest.approx(
        feeding.autotune_wait(64 * 0.045)
    )
    assert feeding._epoch_end_wait(arrays, 16, 4, 0.045) == pytest.approx(
        feeding.autotune_wait(16 * 0.045)
    )
    assert feeding._epoch_end_wait(feeding.Feed(x, None, "tf_data", ""), 16, 1, 0.045) == 0.0
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    assert feeding._epoch_end_wait(arrays, 16, 1, 0.045) == 0.0


def test_the_clock_counts_each_epochs_start_as_fit_does() -> None:
    """An input whose every epoch begins with work of its own (a PyDataset that shuffles its
    index when an epoch's first batch is asked for): the timed window holds whole epochs, each
    with its start, as fit pays them."""

    class ShuffledEachEpoch(keras.utils.PyDataset):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.x, self.y = _arrays(4)
            self.starts = 0
            self.order = np.arange(1 << 16)

        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
            if i == 0:  # an epoch's start: its work, counted
                self.starts += 1
                self.order = np.random.default_rng(self.starts).permutation(self.order)
            return self.x[i * 16 : (i + 1) * 16], self.y[i * 16 : (i + 1) * 16]

    model = _model()
    data = ShuffledEachEpoch()
    model.fit(data, epochs=1, verbose=0)  # built and traced
    before = data.starts
    fed = feeding.fit_rate(model, feeding.Feed(data, None, "py_dataset", ""), 16, 0.5)
    assert fed["epochs"] >= 2
    assert fed["batches"] == 4 * fed["epochs"]
    # Every timed epoch began with its start, and the warm epoch before them with its own.
    assert data.starts - before >= fed["epochs"] + 1
    assert fed["seconds"] > 0


class _Ticks:
    """``time.perf_counter`` for :class:`feeding.FitClock`: a tenth of a second a reading, so
    that epochs of as many callbacks take as long (no epoch is taken for the input settling)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.1
        return self.now


def test_a_fit_stopped_within_an_epoch_is_timed_over_its_whole_epochs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fit stopped part way into an epoch after whole ones were timed (its bound foreseen,
    under load): the window is the whole epochs, not them and a part of the next without its
    start (seen: 10 executions for 2 epochs of 4)."""
    import types

    monkeypatch.setattr(feeding, "time", _Ticks())
    clock = feeding.FitClock(seconds=100.0, warm=2)
    model = types.SimpleNamespace(stop_training=False)
    clock.set_model(model)
    clock.on_train_begin()

    def epoch(batches: int) -> None:
        for i in range(batches):
            clock.on_train_batch_begin(i)
            clock.on_train_batch_end(i)

    for n in range(3):  # the warm executions' epoch, then two timed
        epoch(4)
        clock.on_epoch_end(n)
    assert clock.epochs == 2
    assert not model.stop_training
    epoch(2)
    model.stop_training = True  # as the clock does when the next execution would end too late
    clock.on_epoch_end(3)
    clock.on_train_end()
    executions, seconds, left_out = clock.window(feeding.time.perf_counter())
    assert (executions, left_out) == (8, 0)
    first_end, last_end = clock.epoch_start, clock._ends[-1][0]
    assert first_end is not None
    assert seconds == pytest.approx(last_end - first_end)


class _Manual:
    """``time.perf_counter`` for :class:`feeding.FitClock` that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _fit(clock: feeding.FitClock, timer: _Manual, epochs: list[list[float]]) -> Any:
    """Drive ``clock`` as Keras' fit loop does, each execution taking its seconds in turn
    (one at a time), until the clock stops fit or the epochs run out; the model."""
    import types

    model = types.SimpleNamespace(stop_training=False)
    clock.set_model(model)
    clock.on_train_begin()
    for n, executions in enumerate(epochs):
        for i, took in enumerate(executions):
            clock.on_train_batch_begin(i)
            timer.now += took
            clock.on_train_batch_end(i)
            if model.stop_training:
                break
        clock.on_epoch_end(n)
        if model.stop_training:
            break
    clock.on_train_end()
    return model


def _fit_ahead(
    clock: feeding.FitClock, timer: _Manual, epochs: list[list[float]], dispatch_s: float = 1e-4
) -> Any:
    """Drive ``clock`` as Keras' JAX trainer drives it where no callback reads the logs: each
    execution is dispatched ``dispatch_s`` after the one before, and the device runs them one
    after another; an execution's batch-end callback runs once its result is ready (Keras
    converts its logs first, off the main thread), and an epoch's end waits for every one in
    flight. The clock's wait for the warm executions is met by delivering their ends before
    the next dispatch. Returns the model and how many executions were ever in flight at once."""
    import types

    model = types.SimpleNamespace(stop_training=False)
    clock.set_model(model)
    clock.on_train_begin()
    pending: list[tuple[float, int]] = []  # (end, batch) of the executions in flight

    def deliver(upto: float) -> None:
        while pending and pending[0][0] <= upto:
            end, i = pending.pop(0)
            timer.now = max(timer.now, end)
            clock.on_train_batch_end(i)

    deepest = 0
    for n, executions in enumerate(epochs):
        free = timer.now  # when the device is done with what it holds
        for i, took in enumerate(executions):
            if clock.start is None and pending:  # the clock waits for the warm ones to end
                deliver(pending[-1][0])
            clock.on_train_batch_begin(i)
            free = max(free, timer.now) + took
            pending.append((free, i))
            deepest = max(deepest, len(pending))
            if model.stop_training:
                break
            deliver(timer.now + dispatch_s)
            timer.now += dispatch_s
        if pending:
            deliver(pending[-1][0])
        clock.on_epoch_end(n)
        if model.stop_training:
            break
    clock.on_train_end()
    return model, deepest


@pytest.mark.parametrize(
    ("took", "per_epoch"), [(1.1, 12), (0.125, 16)], ids=["slow-steps", "short-epochs"]
)
def test_fit_queues_as_it_would_and_stays_within_the_bound(
    monkeypatch: pytest.MonkeyPatch, took: float, per_epoch: int
) -> None:
    """Fit's loop on JAX queues executions as a plain fit does (a whole epoch ahead; a queue
    held at 2 made another fit than the user's), and each one's end is foreseen behind those
    in flight: with steps of 1.1 s (Keras' ResNet50 at 32x32 on 2 cores) fit's loop still
    ends within LONGEST times the window, and with epochs of 2 s the window holds whole ones
    at the device's rate."""
    timer = _Manual()
    monkeypatch.setattr(feeding, "time", timer)
    clock = feeding.FitClock(seconds=3.0, warm=2)
    epochs = [[took] * per_epoch for _ in range(100)]
    model, deepest = _fit_ahead(clock, timer, epochs)
    assert model.stop_training
    assert clock.start is not None
    assert deepest > 2  # queued ahead, as without the clock
    executions, seconds, _ = clock.window(timer.now)
    assert executions >= 1
    assert seconds / executions == pytest.approx(took, rel=0.01)
    # What was queued ran to its end within the bound, the foresight's error aside.
    assert timer.now - clock.start <= feeding.LONGEST * 3.0 + 1e-6
    if per_epoch * took < 3.0:
        assert clock.epochs >= 1
        assert executions == per_epoch * clock.epochs  # whole epochs
    else:
        assert clock.epochs == 0  # within the first epoch


@pytest.mark.parametrize("compile_in", [0, 1], ids=["first-epoch", "later-epoch"])
def test_an_execution_that_compiles_in_the_first_epoch_is_not_held_against_the_bound(
    monkeypatch: pytest.MonkeyPatch, compile_in: int
) -> None:
    """Epochs of 8 executions of 1 ms whose last, partial batch compiles anew (0.73 s, a JAX
    script under DataParallel on two CPU devices): in fit's first epoch it is paid once, so the
    bound and the next execution's end are foreseen without it and the window holds whole
    epochs at the steady rate (counted, fit stopped one execution into the second epoch and
    the figure was 1% of a plain fit's). A slow execution after the first epoch counts."""
    timer = _Manual()
    monkeypatch.setattr(feeding, "time", timer)
    clock = feeding.FitClock(seconds=0.5, warm=2)
    epochs = [[0.001] * 8 for _ in range(2000)]
    epochs[compile_in][-1] = 0.73
    model = _fit(clock, timer, epochs)
    assert model.stop_training
    executions, seconds, _ = clock.window(timer.now)
    if compile_in == 0:
        assert clock.compiled_s == pytest.approx(0.729)
        assert clock.epochs >= feeding.MIN_EPOCHS
        assert executions == 8 * clock.epochs
        assert seconds == pytest.approx(executions * 0.001)  # the steady rate
        # Bounded still: the window's length, after the compile.
        assert timer.now <= 0.002 + 0.73 + feeding.LONGEST * 0.5 + 0.01
    else:
        assert clock.compiled_s == 0.0
        # Within the bound from the warm executions' end, the slow execution inside it.
        assert timer.now <= 0.002 + feeding.LONGEST * 0.5 + 0.001


class _SlowEpochs(keras.utils.PyDataset):  # type: ignore[misc]
    """Four batches an epoch; the epochs named in ``slow`` (counted from 1 over fit's calls
    together) begin with ``pause`` seconds of the input's own work (a pipeline settling, or a
    slow epoch that recurs): a slow input on purpose, not a wait for anything."""

    def __init__(self, slow: set[int], pause: float) -> None:
        super().__init__()
        self.x, self.y = _arrays(4)
        self.slow, self.pause = slow, pause
        self.begun = 0

    def __len__(self) -> int:
        return 4

    def on_epoch_begin(self) -> None:
        self.begun += 1
        if self.begun in self.slow:
            time.sleep(self.pause)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.x[i * 16 : (i + 1) * 16], self.y[i * 16 : (i + 1) * 16]


@pytest.mark.serial("judges an epoch's length against the next's (SETTLING_FACTOR) in real fit")
@pytest.mark.slow  # a real fit of a slowed input, epoch after epoch: 3-4 s
def test_a_first_epoch_of_the_input_settling_is_left_out() -> None:
    """The first timed epoch lasting far over the next (tf.data's autotuning on JAX took 5.5-6.5
    s there, in one process of three, where later epochs took 1.5-2.9 s): a long run pays it
    once, so the window begins after it, holds MIN_EPOCHS whole epochs, and says what it left
    out."""
    model = _model()
    data = _SlowEpochs(slow={3}, pause=0.5)  # 1: the fit below; 2: fit_rate's warm epoch
    model.fit(data, epochs=1, verbose=0)  # built and traced
    fed = feeding.fit_rate(model, feeding.Feed(data, None, "py_dataset", ""), 16, 2.0)
    assert fed["settling_s"] >= 0.5
    assert fed["epochs"] >= feeding.MIN_EPOCHS
    assert fed["batches"] >= 4 * fed["epochs"]  # whole epochs, and the last one's part
    # The settling epoch is not in the window, and fit's loop stayed within its bound.
    assert fed["seconds"] + fed["settling_s"] <= feeding.LONGEST * 2.0 + 0.2
    assert data.begun >= 3 + fed["epochs"]


def test_slow_epochs_after_the_first_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """An input whose slow epochs recur is what fit trains at: only a first timed epoch can be
    left out, and one that is no slower than SETTLING_FACTOR times the next stays in. On the
    clock's own time (each execution's seconds given): with fit's real epochs of a tiny model
    the next epoch's length was the machine's load (a fresh-clone run, three tests on two
    cores, read a first epoch of 0.3 s over 4 ms steps as no settling)."""

    def run(slow: set[int]) -> tuple[feeding.FitClock, _Manual]:
        timer = _Manual()
        monkeypatch.setattr(feeding, "time", timer)
        clock = feeding.FitClock(seconds=1.5, warm=2)
        # Epoch 0 holds the warm executions; the timed ones count from 1. A slow epoch's first
        # execution carries the input's 0.3 s (a pipeline refilling), its others 10 ms.
        epochs = [[0.31 if n in slow else 0.01] + [0.01] * 3 for n in range(200)]
        _fit(clock, timer, epochs)
        return clock, timer

    clock, timer = run(slow={2, 4})  # the first timed epoch is steady: nothing left out
    executions, seconds, _ = clock.window(timer.now)
    assert clock.settling_s == 0.0
    assert clock.epochs >= feeding.MIN_EPOCHS
    assert executions == 4 * clock.epochs
    assert seconds >= 0.04 + 0.34  # epoch 1, then the slow epoch 2 counted

    clock, timer = run(slow={1, 3})  # the first timed epoch slow, over 2.5x the next
    executions, seconds, _ = clock.window(timer.now)
    assert clock.settling_s == pytest.approx(0.34)  # left out...
    assert clock.epochs >= 2
    assert executions == 4 * clock.epochs
    assert seconds >= 0.04 + 0.34  # ... but epoch 3, slow again, counted
    # The window begins at its end: after the warm epoch (0.04 s) and it (0.34 s).
    assert clock.epoch_start == pytest.approx(0.04 + 0.34)
    assert seconds == pytest.approx(clock._ends[-1][0] - clock.epoch_start)

    clock, timer = run(slow=set())  # steady throughout: the window runs to about its length
    assert clock.settling_s == 0.0
    assert clock.window(timer.now)[1] == pytest.approx(1.5, abs=0.04)


def test_a_dataset_is_given_to_fit_as_it_is() -> None:
    """A batched input (tf.data here) is not rebatched: fit is given no batch_size."""
    tf = pytest.importorskip("tensorflow")
    model = _model()
    x, y = _arrays(6)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    feed = feeding.Feed(data, None, "tf_data", "make_dataset(16)")
    assert feed.batched
    fed = feeding.fit_rate(model, feed, 16, 0.2)
    assert fed["kind"] == "tf_data"
    assert fed["samples_per_second"] > 0


def test_an_empty_input_is_said_in_words() -> None:
    tf = pytest.importorskip("tensorflow")
    model = _model()
    x, y = _arrays(0)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    with pytest.raises(UserCodeError, match="no batches"):
        feeding.fit_rate(model, feeding.Feed(data, None, "tf_data", ""), 16, 0.2)


def test_mptunes_own_arrays_make_an_epoch_of_64_batches() -> None:
    x, y = _arrays(8)
    batches = [(x[i * 16 : (i + 1) * 16], y[i * 16 : (i + 1) * 16]) for i in range(8)]
    ex, ey = feeding.epoch_arrays(batches)
    assert len(ex) == len(ey) == 64 * 16
    np.testing.assert_array_equal(ex[: 8 * 16], x)
    np.testing.assert_array_equal(ex[8 * 16 : 16 * 16], x)  # the pool again
    # Structures (two inputs) keep their shape.
    two = [((bx, bx), by) for bx, by in batches[:2]]
    (a, b), _ = feeding.epoch_arrays(two)
    assert len(a) == len(b) == 64 * 16


def test_the_epoch_stays_within_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _arrays(8)
    batches = [(x[i * 16 : (i + 1) * 16], y[i * 16 : (i + 1) * 16]) for i in range(8)]
    pool = x.nbytes + y.nbytes
    monkeypatch.setattr(feeding, "EPOCH_BYTES", 3 * pool)
    ex, _ = feeding.epoch_arrays(batches)
    assert len(ex) == 3 * len(x)
    monkeypatch.setattr(feeding, "EPOCH_BYTES", pool // 2)
    ex, _ = feeding.epoch_arrays(batches)
    assert len(ex) == len(x)  # never less than the pool itself
