"""The figure that ranks: ``fit``'s own loop, training on the user's input (issue 35).

A trial's measured steps train from a pool of batches kept in memory (on the device, on JAX and
PyTorch): their rate is what the device can do, and their losses, loss scales and skipped steps
are the numerics guard's telemetry. ``fit`` gets its batches from the user's input - their
``make_dataset(batch_size)`` (a ``tf.data.Dataset``, a ``keras.utils.PyDataset``, a generator,
arrays), or arrays sliced, shuffled and copied by Keras' own data adapter - through the
backend's epoch iterator (tf.data's prefetching threads; JAX's one batch ahead on a GPU; a torch
``DataLoader``), with callbacks dispatched as fit dispatches them. Neither the lower of the
device's and the input's rates timed apart nor their sum is what it reaches (on an H200, JAX
b1024: fit 307 ms a step where the device took 140 and the input 259).

So after the measured steps a trial runs ``model.fit`` itself on that input, for about as long
as its measured window, and times it with a callback that reads no log (Keras then dispatches
batch callbacks as it would without it, off the main thread where the backend allows), after
its first :data:`WARM_EXECUTIONS` executions (which start the pipeline and trace the step for
the input's signature): over whole epochs where they are shorter than the window, so that the
work between epochs weighs as in the user's fit, else within one, to ``fit``'s return (which
waits for the last step) (:class:`FitClock`). That rate is the
trial's figure; the device's rate from batches in memory stays beside it, and the input holds
training back where fit's rate is under :data:`~tuner.trials.result.INPUT_BOUND` of it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from tuner.worker import loading
from tuner.worker.usercode import UserCodeError, call_user, first_line

#: Executions of fit's loop before its clock starts: the first starts the input pipeline and
#: may trace the step anew for the input's own signature (a dataset's shapes, an adapter's
#: dtypes); the second shows the pipeline running.
WARM_EXECUTIONS = 2
#: Fit's loop is timed over at least this many executions after the warm ones...
MIN_EXECUTIONS = 3
#: ... and gives up (the input is not timed) when its warm executions take longer than this
#: many times the measured window (an input that stalls).
STALL_FACTOR = 20.0
#: Epochs without a finished step that make an input empty.
EMPTY_EPOCHS = 3
#: A window of fit's loop lasts at most this many times the seconds asked for (whole epochs
#: a little longer than it, cut within the last).
LONGEST = 2.0
#: A window of whole epochs holds at least this many (within :data:`LONGEST`): a tf.data
#: pipeline's epochs vary (its autotuning; bench/models/text_dataset.py on a 2-core CPU, its
#: autotuning on as it then was: one epoch in three or four 1.5-2x the others), and two epochs
#: made one such epoch half a figure.
MIN_EPOCHS = 3
#: The first timed epoch is the input settling, paid once, where it lasted over this many times
#: the next one: counted apart (``settling_s``), the window begins after it.
#: Measured: Keras' JAX trainer on text_dataset.py's tf.data, then autotuned (b256, epochs of
#: 1.5-2.9 s), in about one process in three its first epoch after the compiling one took
#: 5.5-6.5 s, and in 25 s of epochs no other came near (2026-11-27); a long run pays it once, a
#: 3 s window held it whole (a figure a third of fit's). Recurring slow epochs (1.5-2x) stay
#: counted.
SETTLING_FACTOR = 2.5
#: Until its first timed epoch ends (perhaps a settling one), a window may last this many
#: times the seconds asked for before it is timed within the epoch instead.
FIRST_EPOCH_LONGEST = 4.0
#: Epochs fit is asked for: its clock stops it (``stop_training``) long before.
EPOCHS = 1_000_000
#: Arrays of mptune's own (a built-in workload's, or synthetic) reach fit as an epoch of at
#: least this many batches, repeating the trial's pool...
EPOCH_BATCHES = 64
#: ... within this many bytes.
EPOCH_BYTES = 1 << 30


@dataclass(frozen=True)
class Feed:
    """What ``fit`` would be given: ``x`` (and ``y`` for arrays), what kind of input it is
    (``tf_data``: the user's ``tf.data.Dataset``; ``py_dataset``: their
    ``keras.utils.PyDataset``; ``generator``: their generator of batches; ``arrays``: the
    user's arrays; ``synthetic``: mptune's own arrays, where the user's pipeline is not known),
    and in words."""

    x: Any
    y: Any
    kind: str
    fed_by: str

    @property
    def batched(self) -> bool:
        """The input yields batches itself (``fit`` is given no ``batch_size``)."""
        return self.kind in ("tf_data", "py_dataset", "generator")


def fit_feed(source: Any, loaded: loading.LoadedModel, batch_size: int, batches: list[Any]) -> Feed:
    """The input ``fit`` would train from at ``batch_size``: the user's ``make_dataset``
    again (a fresh one, as their script makes it) or a script's data as it passes it to fit,
    else the trial's batches as arrays."""
    make = loaded.make_dataset
    if make is not None:
        what = loaded.input_words.format(batch=batch_size)
        data = call_user(lambda: make(batch_size), what, source.path, source.spec)
        kind = loading.input_kind(data)
        if kind == "tf_data":
            return Feed(data, None, kind, f"{what}, a tf.data.Dataset, as fit iterates it")
        if kind == "py_dataset":
            return Feed(data, None, kind, f"{what}, a keras.utils.PyDataset, as fit iterates it")
        if kind == "generator":
            return Feed(data, None, kind, f"{what}, a generator, as fit iterates it")
        x, y = loading.fit_structure((data[0], data[1]))
        return Feed(
            x, y, "arrays", f"{what}: arrays through Keras' data adapter, as fit slices them"
        )
    if source.kind == "builtin":
        fed_by = "the built-in workload's arrays through Keras' data adapter, as fit slices them"
    else:
        fed_by = (
            "arrays in memory through Keras' data adapter (mptune's synthetic data: your own "
            "input is not known to it; define make_dataset(batch_size) to have it counted)"
        )
    x, y = epoch_arrays(batches)
    return Feed(x, y, "arrays" if source.kind == "builtin" else "synthetic", fed_by)


def epoch_arrays(batches: list[Any]) -> tuple[Any, Any]:
    """The trial's batches as one epoch of arrays for ``fit``: repeated up to
    :data:`EPOCH_BATCHES` batches (within :data:`EPOCH_BYTES`), since fit's work between
    epochs (a new iterator, a shuffle, on JAX the state written back) counted once every 8
    batches of the trial's pool would weigh as it never does in a real epoch: on a 2-core CPU a
    small MLP's fit reached 4,700 samples/s on 8-batch epochs and 8,700 on 64-batch ones."""
    xs = [batch[0] for batch in batches]
    ys = [batch[1] for batch in batches]
    x = keras.tree.map_structure(lambda *parts: np.concatenate(parts), *xs)
    y = keras.tree.map_structure(lambda *parts: np.concatenate(parts), *ys)
    size = sum(np.asarray(a).nbytes for a in keras.tree.flatten((x, y)))
    repeats = max(1, min(-(-EPOCH_BATCHES // len(batches)), EPOCH_BYTES // max(1, size)))
    if repeats == 1:
        return x, y
    x, y = keras.tree.map_structure(lambda a: np.concatenate([a] * repeats), (x, y))
    return x, y


class FitClock(keras.callbacks.Callback):  # type: ignore[misc]
    """Times ``fit``'s loop without changing it: it reads no log, and says it is safe to call
    off the main thread (``async_safe``), so Keras dispatches the batch callbacks as it would
    without it.

    Its window holds the work between epochs as often as fit's own does. Where an epoch ends
    after the first ``warm`` executions (Keras calls ``on_epoch_end`` once the epoch's logs are
    ready), the window runs from that end over whole epochs, to the end nearest ``seconds``
    later: a new iterator, the pipeline filling again and fit's epoch-end work weigh once an
    epoch, as in the user's run. A window of fit's loop that began after the warm executions
    and stopped at any step counted them once per window instead: on a 16-batch ``tf.data``
    epoch (bench/models/text_dataset.py, b256, about 2 s an epoch) a 3 s window held one such
    start where fit pays one every epoch. Where epochs are longer than the window, it runs
    from the end of the warm executions (Keras calls ``on_train_batch_end`` once the
    execution's logs are ready) for ``seconds`` and at least ``least`` executions, stopping
    fit (``stop_training``) within the epoch, where one epoch's start weighs little; and never
    longer than :data:`LONGEST` times ``seconds``.

    A window of whole epochs holds at least :data:`MIN_EPOCHS` of them, and leaves out a first
    one that was the input settling (:data:`SETTLING_FACTOR`): ``settling_s`` says how long it
    took, and the window begins at its end."""

    def __init__(self, seconds: float, warm: int = WARM_EXECUTIONS, least: int = MIN_EXECUTIONS):
        super().__init__()
        self.async_safe = True
        self.seconds, self.warm, self.least = seconds, warm, least
        self._lock = threading.Lock()
        self.begun = self.done = 0
        self.started: float | None = None  #: when fit began
        self.start: float | None = None  #: when the warm executions had finished
        #: when the first epoch after the warm executions ended, and executions begun by then
        self.epoch_start: float | None = None
        self.begun_at_epoch_start = 0
        self.epochs = 0  #: whole epochs timed since ``epoch_start``
        #: (end, executions begun by then) of each whole epoch timed since ``epoch_start``
        self._ends: list[tuple[float, int]] = []
        #: the first timed epoch, left out as the input settling (0: none was)
        self.settling_s = 0.0
        self._settled = False  #: the first timed epoch has been judged
        self.stalled = False  #: the warm executions took too long (fit was stopped)
        self.empty = False  #: the input gave no batch (fit was stopped)

    def window(self, end: float) -> tuple[int, float]:
        """Executions timed and the seconds they took, for fit having returned at ``end``."""
        if self.epoch_start is not None and self.epochs:
            return self.begun - self.begun_at_epoch_start, end - self.epoch_start
        assert self.start is not None
        return self.begun - self.warm, end - self.start

    def on_train_begin(self, logs: Any = None) -> None:
        self.started = time.perf_counter()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.begun += 1
        now = time.perf_counter()
        if self.start is None:
            if self.started is not None and now - self.started > STALL_FACTOR * self.seconds + 5:
                self.stalled = True
                self.model.stop_training = True
        elif self.begun - self.warm > self.least and self._within_epochs(now):
            # epochs longer than the window: timed within one
            self.epochs = 0
            self.model.stop_training = True
        elif self.epochs:
            first_end = self._ends[0][0]
            if not self._settled and now - first_end >= self._first_epoch() / SETTLING_FACTOR:
                self._settled = True  # the next epoch outlasts what a settling one allows
            if now - self._counted_from() >= LONGEST * self.seconds:
                self.model.stop_training = True  # whole epochs so far, and this one's part

    def _within_epochs(self, now: float) -> bool:
        """No epoch ended within the window (or the first timed one outlasts any settling)."""
        assert self.start is not None
        if self.epoch_start is None:
            return now - self.start >= self.seconds
        return not self.epochs and now - self.epoch_start >= FIRST_EPOCH_LONGEST * self.seconds

    def _first_epoch(self) -> float:
        assert self.epoch_start is not None
        return self._ends[0][0] - self.epoch_start

    def _counted_from(self) -> float:
        """Where the window's length counts from: the first timed epoch is left out of it
        while it may yet be judged the input settling."""
        assert self.epoch_start is not None
        return self.epoch_start if self._settled or not self._ends else self._ends[0][0]

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        with self._lock:
            self.done += 1
            if self.done == self.warm:
                self.start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        now = time.perf_counter()
        # An empty input: epoch after epoch, no step ever finishes (Keras begins one, and finds
        # the input exhausted); a few epochs, so that a step's callbacks run late off the main
        # thread is not taken for it.
        if self.done == 0 and epoch >= EMPTY_EPOCHS:
            self.empty = True
            self.model.stop_training = True
        if self.start is None or self.model.stop_training:
            return
        if self.epoch_start is None:
            self.epoch_start, self.begun_at_epoch_start = now, self.begun
            return
        last = now - (self._ends[-1][0] if self._ends else self.epoch_start)
        self._ends.append((now, self.begun))
        self.epochs += 1
        if not self._settled and self.epochs == 2:
            self._settle()
        if not self._settled:
            return
        # The epoch end nearest the window's length: whole epochs, about ``seconds``, at least
        # MIN_EPOCHS of them; or nearest LONGEST times it.
        reach = now - self._counted_from() + last / 2
        if (self.epochs >= MIN_EPOCHS and reach >= self.seconds) or reach >= LONGEST * self.seconds:
            self.model.stop_training = True

    def _settle(self) -> None:
        """Leave the first timed epoch out where it was the input settling: over
        SETTLING_FACTOR times the next one."""
        self._settled = True
        first, second = self._first_epoch(), self._ends[1][0] - self._ends[0][0]
        if first > SETTLING_FACTOR * second:
            self.settling_s = first
            self.epoch_start, self.begun_at_epoch_start = self._ends.pop(0)
            self.epochs -= 1


def fit_rate(model: Any, feed: Feed, batch_size: int, seconds: float) -> dict[str, Any]:
    """Run ``model.fit`` on ``feed`` at ``batch_size`` for about ``seconds`` after its warm
    executions (:class:`FitClock`), epoch after epoch as the input gives them: the ``input``
    part of the trial's result, whose rate is fit's own (``fit_loop``)."""
    clock = FitClock(seconds)
    spe = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
    kwargs: dict[str, Any] = {} if feed.batched else {"batch_size": batch_size, "shuffle": True}
    with warnings.catch_warnings(), _collected_as_a_script_is():
        # A finite input ends its epoch as fit's would; fit's own note says so each epoch.
        warnings.filterwarnings("ignore", message=".*ran out of data.*")
        warnings.filterwarnings("ignore", message=".*shuffle=True. was passed, but will be ign.*")
        model.fit(feed.x, feed.y, epochs=EPOCHS, verbose=0, callbacks=[clock], **kwargs)
        end = time.perf_counter()
    if clock.empty or clock.begun == 0:
        raise UserCodeError("the input yields no batches")
    if clock.stalled or clock.start is None:
        raise UserCodeError(
            f"fit's first {clock.warm} steps on the input took over "
            f"{STALL_FACTOR * seconds + 5:.0f} s"
        )
    executions, elapsed = clock.window(end)
    samples = executions * spe * batch_size
    return {
        "samples_per_second": samples / elapsed if elapsed > 0 else None,
        "kind": feed.kind,
        "fed_by": feed.fed_by,
        "batches": executions * spe,
        "seconds": elapsed,
        "epochs": clock.epochs,
        "settling_s": clock.settling_s,
        "fit_loop": True,
    }


@contextlib.contextmanager
def _collected_as_a_script_is() -> Iterator[None]:
    """Python's collector as in the user's own process while fit runs: on, over every object,
    and settled, as after the script's own first full collection.

    A worker keeps the collector off between its own collections, and freezes what lives on
    (:func:`tuner.worker.main._between_trials`), which the user's script does not. Unfrozen,
    that heap (380,000 objects with TensorFlow and a small transformer loaded) comes back as
    long-lived objects the collector has not counted, so its first full collection (0.28 s
    on a 2-core CPU) came soon after, within the timed window: a tenth of a 3 s window. So
    it is collected here, before fit, off the clock. Left frozen instead, fit's loop ran
    twice as fast as a plain fit on the built-in MLP's arrays (bench_fit, TensorFlow b64):
    the script's full collections, of everything it holds, are part of what fit reaches.
    Left unfrozen after: the worker's next collection between trials freezes what lives on
    again."""
    was = gc.isenabled()
    gc.unfreeze()
    gc.collect()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def measure(
    model: Any,
    feed: Callable[[], Feed],
    batch_size: int,
    seconds: float,
    is_oom: Callable[[BaseException], bool],
) -> tuple[dict[str, Any] | None, str | None]:
    """Fit's figures, or None and why they could not be had (said as a warning: the device's
    figure stands). The device running out of memory in fit's loop is the trial's outcome,
    raised as it is."""
    try:
        return fit_rate(model, feed(), batch_size, seconds), None
    except Exception as exc:
        if is_oom(exc):
            raise
        why = str(exc) if isinstance(exc, UserCodeError) else first_line(exc)
        return None, f"fit's rate on the input could not be measured: {why}"
