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

So after the measured steps a trial runs ``model.fit`` itself on that input, for the trial's
measuring window (never over :data:`~tuner.trials.spec.LONGEST` times it after its warm
executions, whatever an epoch's length: issue 50), and times it with a callback that reads
no log (Keras then dispatches batch callbacks as it would without it, off the main thread
where the backend allows), after
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
import math
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from tuner.said import setting
from tuner.trials.spec import (  # how fit's loop is timed, read by the pricing too
    EPOCH_BATCHES,
    EPOCH_BYTES,
    LONGEST,
    MIN_EPOCHS,
    MIN_EXECUTIONS,
    WARM_EXECUTIONS,
)
from tuner.worker import loading, structure
from tuner.worker.usercode import UserCodeError, call_user, first_line

#: Fit's loop gives up (the input is not timed) when its warm executions take longer than this
#: many times the measured window (an input that stalls).
STALL_FACTOR = 20.0
#: Epochs without a finished step that make an input empty.
EMPTY_EPOCHS = 3
#: A window within one epoch begins after the executions that ended in this share of it
#: (:meth:`FitClock.window`).
STEADY_FROM = 1 / 3
#: The first timed epoch is the input settling, paid once, where it lasted over this many times
#: the next one: counted apart (``settling_s``), the window begins after it.
#: Measured: Keras' JAX trainer on text_dataset.py's tf.data, then autotuned (b256, epochs of
#: 1.5-2.9 s), in about one process in three its first epoch after the compiling one took
#: 5.5-6.5 s, and in 25 s of epochs no other came near (2026-11-27); a long run pays it once, a
#: 3 s window held it whole (a figure a third of fit's). Recurring slow epochs (1.5-2x) stay
#: counted.
SETTLING_FACTOR = 2.5
#: An execution of fit's first epoch that took over this many times the steady one compiled (a
#: new input signature: the epoch's last, partial batch, traced and compiled anew): paid once in
#: a long run, so it is not counted against the bound of fit's loop (:data:`LONGEST`) nor in
#: foreseeing the next execution. Measured: a JAX script under ``DataParallel`` over two CPU
#: devices (tests/tuner/data/scripts/data_parallel.py, 1,000 rows at b128) compiled its partial
#: batch in 0.73 s where an execution took about 1 ms; counted, the bound ended fit one
#: execution into its second epoch and the figure was 7 executions over 0.75 s, about 1% of a
#: plain fit's (2026-11-29).
COMPILE_FACTOR = 5.0
#: Against the bound and the trial's limit, the next execution's end is foreseen this many times
#: later than the steady ones so far say: an execution varies, and the first timed ones are
#: foreseen from one warm execution run alone. Measured: steps of 2.1 s where the foresight
#: said about 1.8 (a model of 2 s steps on an AVX2-only EPYC, tests/tuner/test_one_pass.py), so
#: two executions began where the 2.5 s window's bound of 3.75 s held one, and fit's loop ran
#: 4.2 s (2026-12-01). Only the bound's check is so padded: the window's own length is not.
FORESIGHT_MARGIN = 1.25
#: The steady executions the median that :data:`COMPILE_FACTOR` multiplies is taken over (the
#: first epoch's first ones): the clock runs on fit's callback thread, beside the training, and
#: a median over every execution of a long first epoch would be a sort a step.
STEADY_SAMPLE = 32
#: Epochs fit is asked for: its clock stops it (``stop_training``) long before.
EPOCHS = 1_000_000
#: TensorFlow's tf.data autotuner (``Model::OptimizeLoop``, started with an iterator's pipeline)
#: wakes this long after it starts, then after periods that double...
AUTOTUNE_FIRST_S = 0.01
#: ... up to this one.
AUTOTUNE_LONGEST_S = 60.0


def _autotuner_wakes(after: float) -> float:
    """The first wake of a tf.data autotuner at or after ``after`` seconds from its start:
    0.01, 0.03, 0.07, 0.15, ... 2.55, 5.11, 10.23 s, then every 60 s."""
    wake = period = round(AUTOTUNE_FIRST_S * 1000)  # whole milliseconds: no drift in the sums
    while wake < after * 1000 - 1e-6:
        period = min(2 * period, round(AUTOTUNE_LONGEST_S * 1000))
        wake += period
    return wake / 1000


def autotune_wait(work_s: float) -> float:
    """The mean seconds an epoch of arrays on TensorFlow waits at its end, for epochs whose
    steps take ``work_s`` in all: half the time from ``work_s`` to the autotuner's next wake.

    Keras' array adapter gives TensorFlow a tf.data pipeline it autotunes, and makes each
    epoch a new iterator of it, the next one as an epoch begins; the last epoch's iterator is let
    go as the next epoch's first step runs, and TensorFlow's iterator destructor then waits for
    that iterator's autotuner to wake (its thread sleeps its period out). An iterator's autotuner
    starts as the iterator is made, before that wait: so one epoch waits until its iterator's
    next wake after its steps, and the next one's iterator, having lived that wait too, ends its
    steps just at a wake and hardly waits. Measured on a 2-core CPU (keras.io's MNIST convnet,
    mixed_bfloat16 b512, epochs of 64 batches, 2.9 s of steps): the first execution of every
    other epoch waited 2.2-2.6 s (to the wake at 5.11 s), the others 0.05-0.08 s; fit made
    8,299 and 9,152 samples/s, and 12,456 and 11,966 with the pipeline's autotuning off
    (2026-11-29). Epochs that end just past a wake can wait a whole period instead: the same
    fit at b1024 (7.9 s of steps, wakes at 10.23 and 20.47 s) moved 37% over five runs."""
    return (_autotuner_wakes(work_s) - work_s) / 2


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
    #: the arrays' sample weights, where the user's input gives them (fit weighs by them)
    sample_weight: Any = None
    #: the library's ``fit`` that makes this input of the script's data (a KerasHub task's)
    made_by: str | None = None

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
        kind = structure.input_kind(data)
        if kind == "tf_data":
            words = f"{what}, a tf.data.Dataset, as fit iterates it"
            return Feed(data, None, kind, words, made_by=loaded.input_made_by)
        if kind == "py_dataset":
            return Feed(data, None, kind, f"{what}, a keras.utils.PyDataset, as fit iterates it")
        if kind == "generator":
            return Feed(data, None, kind, f"{what}, a generator, as fit iterates it")
        x, *rest = loading.fit_structure(tuple(data))
        y, weights = (rest[0] if rest else None), rest[1:]
        return Feed(
            x,
            y,
            "arrays",
            f"{what}: arrays through Keras' data adapter, as fit slices them",
            *weights,
        )
    if source.kind == "builtin":
        fed_by = "the built-in workload's arrays through Keras' data adapter, as fit slices them"
    else:
        fed_by = (
            "arrays in memory through Keras' data adapter (mptune's synthetic data: your own "
            "input is not known to it; define make_dataset(batch_size) to have it counted)"
        )
    x, *rest = epoch_arrays(batches)
    y, weights = (rest[0] if rest else None), rest[1:]
    return Feed(x, y, "arrays" if source.kind == "builtin" else "synthetic", fed_by, *weights)


def epoch_arrays(batches: list[Any]) -> tuple[Any, ...]:
    """The trial's batches as one epoch of arrays for ``fit``: repeated up to
    :data:`EPOCH_BATCHES` batches (within :data:`EPOCH_BYTES`), since fit's work between
    epochs (a new iterator, a shuffle, on JAX the state written back) counted once every 8
    batches of the trial's pool would weigh as it never does in a real epoch: on a 2-core CPU a
    small MLP's fit reached 4,700 samples/s on 8-batch epochs and 8,700 on 64-batch ones.
    Returns ``(x, y)``, or ``(x, y, sample_weight)`` for batches that carry their weights."""
    epoch = keras.tree.map_structure(lambda *parts: np.concatenate(parts), *batches)
    size = sum(np.asarray(a).nbytes for a in keras.tree.flatten(epoch))
    repeats = max(1, min(-(-EPOCH_BATCHES // len(batches)), EPOCH_BYTES // max(1, size)))
    if repeats > 1:
        epoch = keras.tree.map_structure(lambda a: np.concatenate([a] * repeats), epoch)
    return tuple(epoch)


class FitClock(keras.callbacks.Callback):  # type: ignore[misc]
    """Times ``fit``'s loop without changing it: it reads no log, and says it is safe to call
    off the main thread (``async_safe``), so Keras dispatches the batch callbacks as it would
    without it, and lets fit queue as many executions as it does without it (Keras' JAX trainer
    dispatches a whole epoch ahead where no callback reads the logs): it only runs the warm
    executions one at a time, and stops fit (``stop_training``) before it queues an execution
    that would end past its bound, foreseeing the end of every one in flight.

    Its window holds the work between epochs as often as fit's own does. Where an epoch ends
    after the first ``warm`` executions (Keras calls ``on_epoch_end`` once the epoch's logs are
    ready), the window runs from that end over whole epochs, to the end nearest ``seconds``
    later: a new iterator, the pipeline filling again and fit's epoch-end work weigh once an
    epoch, as in the user's run. A window of fit's loop that began after the warm executions
    and stopped at any step counted them once per window instead: on a 16-batch ``tf.data``
    epoch (bench/models/text_dataset.py, b256, about 2 s an epoch) a 3 s window held one such
    start where fit pays one every epoch. Where no epoch ends within the window, it runs from
    the end of the warm executions for ``seconds`` and at least ``least`` executions, stopping
    fit (``stop_training``) within the epoch, where one epoch's start weighs little.

    Whatever the epochs, fit's loop ends within :data:`LONGEST` times ``seconds`` after the
    warm executions (and the first epoch's compiles: :data:`COMPILE_FACTOR`), and by ``until``
    (``time.perf_counter``; the trial's time limit, less its report): each execution's end is
    foreseen from the steady ones before (the warm ones' last, until a timed one has ended),
    and the execution after which the next would end past either, foreseen late
    (:data:`FORESIGHT_MARGIN`), is the last one begun.

    A window of whole epochs holds at least :data:`MIN_EPOCHS` of them, and leaves out a first
    one that was the input settling (:data:`SETTLING_FACTOR`): ``settling_s`` says how long it
    took, and the window begins at its end."""

    def __init__(
        self,
        seconds: float,
        warm: int = WARM_EXECUTIONS,
        least: int = MIN_EXECUTIONS,
        until: float | None = None,
    ):
        super().__init__()
        self.async_safe = True
        self.seconds, self.warm, self.least, self.until = seconds, warm, least, until
        self._ended = threading.Condition()
        self.begun = self.done = 0
        self.started: float | None = None  #: when fit began
        self.start: float | None = None  #: when the warm executions had finished
        #: when the last warm execution began to run (the one before it had ended)
        self._warm_began: float | None = None
        self._done_times: list[float] = []  #: when each timed execution ended
        #: the first epoch's first timed executions' seconds, end to end, but those that compiled
        self._steady: list[float] = []
        #: seconds the first epoch's executions that compiled took over a steady one
        self.compiled_s = 0.0
        self._first_epoch_over = False
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
        self.cut = False  #: ``until`` came first (fit was stopped)

    def window(self, end: float) -> tuple[int, float, int]:
        """Executions timed, the seconds they took, and those left out at the start of an
        epoch, for fit having returned at ``end``. Over whole epochs, from the end of the first
        to the end of the last (whatever fit ran after it is not counted). Within an epoch,
        the window leaves out the executions that ended in its first :data:`STEADY_FROM`
        (where at least ``least`` remain): an epoch's start (an array adapter's shuffle, a
        pipeline filling) is paid once an epoch, and a window inside one epoch would count it
        whole."""
        if self.epoch_start is not None and self.epochs:
            # Whole epochs, to the last one's end: fit stopped within the epoch after it (its
            # bound foreseen: LONGEST, ``until``) counts none of that epoch's executions, which
            # would be a part of an epoch without its start (seen under load: 10 executions
            # for 2 epochs of 4).
            last_end, begun = self._ends[-1]
            return begun - self.begun_at_epoch_start, last_end - self.epoch_start, 0
        assert self.start is not None
        timed = self.begun - self.warm
        steady = self.start + STEADY_FROM * (end - self.start)
        left_out = sum(1 for t in self._done_times if t <= steady)
        if left_out and timed - left_out >= self.least:
            return timed - left_out, end - self._done_times[left_out - 1], left_out
        return timed, end - self.start, 0

    def on_train_begin(self, logs: Any = None) -> None:
        self.started = time.perf_counter()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        assert self.started is not None
        stall = STALL_FACTOR * self.seconds + 5
        with self._ended:
            # One at a time until the warm ones have ended, so that the first timed one begins
            # foreseen; then as many in flight as fit queues without the clock, as a user's fit
            # does (on JAX, an epoch ahead): each one's end is foreseen below, behind those in
            # flight. A queue held at 2, as the bound first did, timed another fit than the
            # user's (docs/benchmarks.md: JAX text_dataset.py b256).
            if self.start is None:
                self._ended.wait_for(lambda: self.begun == self.done, timeout=stall)
            self.begun += 1
            now = time.perf_counter()
            per = self._per_execution()
            in_flight = self.begun - 1 - self.done
        if self.until is not None and now >= self.until:
            self.cut = self.model.stop_training = True
            return
        if self.start is None:
            if now - self.started > stall:
                self.stalled = self.model.stop_training = True
            return
        if per is None:
            return
        ends = now + (in_flight + 1) * per  # when the execution begun now ends
        # ... and the one after it, foreseen late (FORESIGHT_MARGIN)
        late = now + (in_flight + 2) * per * FORESIGHT_MARGIN
        if late > self.start + self.compiled_s + LONGEST * self.seconds:
            self.model.stop_training = True  # the next would end past the bound
        elif self.until is not None and late > self.until:
            self.cut = self.model.stop_training = True  # ... past the trial's limit
        elif self.epoch_start is None:
            if self.begun - self.warm >= self.least and ends >= self.start + self.seconds:
                self.model.stop_training = True  # no epoch ended: timed within one
        elif self.epochs and not self._settled:
            first_end = self._ends[0][0]
            if now - first_end >= self._first_epoch() / SETTLING_FACTOR:
                self._settled = True  # the next epoch outlasts what a settling one allows

    def _per_execution(self) -> float | None:
        """An execution's seconds, foreseen: the timed ones' mean so far, else the last warm
        one's; None before the warm executions have ended."""
        if self.start is None:
            return None
        if self._done_times:
            return (self._done_times[-1] - self.start - self.compiled_s) / len(self._done_times)
        if self._warm_began is None:
            return None
        return self.start - self._warm_began

    def _first_epoch(self) -> float:
        assert self.epoch_start is not None
        return self._ends[0][0] - self.epoch_start

    def _counted_from(self) -> float:
        """Where the window's length counts from: the first timed epoch is left out of it
        while it may yet be judged the input settling."""
        assert self.epoch_start is not None
        return self.epoch_start if self._settled or not self._ends else self._ends[0][0]

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        with self._ended:
            self.done += 1
            now = time.perf_counter()
            if self.done == self.warm - 1:
                self._warm_began = now
            if self.done == self.warm:
                self.start = now
                if self._warm_began is None:  # one warm execution: its compile foreseen too
                    self._warm_began = self.started
            elif self.done > self.warm:
                self._time_execution(now)
                self._done_times.append(now)
            self._ended.notify_all()

    def _time_execution(self, now: float) -> None:
        """Keep the execution that ended ``now``: one of the first epoch that took over
        :data:`COMPILE_FACTOR` times the steady one (the median so far, else the last warm
        one's) compiled, and only a steady one's time of it is counted in foreseeing the next
        and against the bound."""
        if self._first_epoch_over:
            return  # only the first epoch compiles a new signature
        assert self.start is not None
        took = now - (self._done_times[-1] if self._done_times else self.start)
        warm = self.start - (self._warm_began or self.start)
        steady = statistics.median(self._steady) if self._steady else warm
        if steady > 0 and took > COMPILE_FACTOR * steady:
            self.compiled_s += took - steady
        elif len(self._steady) < STEADY_SAMPLE:  # a median each step stays cheap
            self._steady.append(took)

    def on_train_end(self, logs: Any = None) -> None:
        self._reconcile()

    def _reconcile(self) -> None:
        """Every execution begun has ended (Keras waits for their callbacks at an epoch's end
        and fit's): one begun that never ran (an input found exhausted as it began) is not
        counted."""
        with self._ended:
            self.begun = self.done

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._reconcile()
        self._first_epoch_over = True
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


def fit_rate(
    model: Any, feed: Feed, batch_size: int, seconds: float, until: float | None = None
) -> dict[str, Any]:
    """Run ``model.fit`` on ``feed`` at ``batch_size`` for about ``seconds`` after its warm
    executions (:class:`FitClock`), epoch after epoch as the input gives them, and not past
    ``until``: the ``input`` part of the trial's result, whose rate is fit's own
    (``fit_loop``)."""
    clock = FitClock(seconds, until=until)
    spe = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
    kwargs: dict[str, Any] = {} if feed.batched else {"batch_size": batch_size, "shuffle": True}
    with warnings.catch_warnings(), _collected_as_a_script_is():
        # A finite input ends its epoch as fit's would; fit's own note says so each epoch.
        warnings.filterwarnings("ignore", message=".*ran out of data.*")
        warnings.filterwarnings("ignore", message=".*shuffle=True. was passed, but will be ign.*")
        if feed.sample_weight is not None:
            kwargs["sample_weight"] = feed.sample_weight
        model.fit(feed.x, feed.y, epochs=EPOCHS, verbose=0, callbacks=[clock], **kwargs)
        end = time.perf_counter()
    if clock.empty or clock.begun == 0:
        raise UserCodeError("the input yields no batches")
    if clock.cut and (clock.start is None or clock.begun <= clock.warm):
        raise UserCodeError("the trial's time limit came before fit's loop was timed")
    if clock.stalled or clock.start is None:
        raise UserCodeError(
            f"fit's first {clock.warm} steps on the input took over "
            f"{STALL_FACTOR * seconds + 5:.0f} s"
        )
    executions, elapsed, left_out = clock.window(end)
    samples = executions * spe * batch_size
    wait = _epoch_end_wait(feed, batch_size, spe, elapsed / executions) if clock.epochs == 0 else 0
    per_epoch = _executions_per_epoch(feed, batch_size, spe)
    counted = elapsed + (executions * wait / per_epoch if wait and per_epoch else 0.0)
    return {
        "samples_per_second": samples / counted if counted > 0 else None,
        "kind": feed.kind,
        "fed_by": feed.fed_by,
        "made_by": feed.made_by,
        "batches": executions * spe,
        "seconds": elapsed,
        "epochs": clock.epochs,
        "settling_s": clock.settling_s,
        "left_out": left_out * spe,
        "epoch_end_wait_s": wait,
        "fit_loop": True,
        "cut": clock.cut,
    }


def _executions_per_epoch(feed: Feed, batch_size: int, spe: int) -> int | None:
    """Fit's executions in an epoch of array input; None for an input that batches itself."""
    if feed.batched:
        return None
    batches = math.ceil(len(keras.tree.flatten(feed.x)[0]) / batch_size)
    return math.ceil(batches / spe)


def _epoch_end_wait(feed: Feed, batch_size: int, spe: int, execution_s: float) -> float:
    """Seconds each epoch waits at its end that a window within one epoch did not see: on
    TensorFlow, arrays (whose pipeline Keras has TensorFlow autotune) wait for the autotuner of
    the epoch's iterator (:func:`autotune_wait`), priced from the executions timed; 0 elsewhere."""
    per_epoch = _executions_per_epoch(feed, batch_size, spe)
    if per_epoch is None or keras.backend.backend() != "tensorflow":
        return 0.0
    return autotune_wait(per_epoch * execution_s)


@contextlib.contextmanager
def _collected_as_a_script_is() -> Iterator[None]:
    """Python's collector as in the user's own process while fit runs: on, over every object,
    and settled, as after the script's own first full collection.

    A worker keeps the collector off between its own collections, and freezes what lives on
    (:func:`tuner.worker.warm.between_trials`), which the user's script does not. Unfrozen,
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
    until: float | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """Fit's figures, or None and why they could not be had (said as a warning: the device's
    figure stands), or the figures and that they were cut short. The device running out of
    memory in fit's loop is the trial's outcome, raised as it is."""
    try:
        fed = fit_rate(model, feed(), batch_size, seconds, until)
    except Exception as exc:
        if is_oom(exc):
            raise
        why = str(exc) if isinstance(exc, UserCodeError) else first_line(exc)
        return None, f"fit's rate on the input could not be measured: {why}"
    if fed.pop("cut"):
        return fed, (
            f"fit's loop was timed for {fed['seconds']:.1f} s of the {seconds:g} s asked: the "
            f"trial's time limit came first (raise {setting('timeout')} to time it all)"
        )
    return fed, None
