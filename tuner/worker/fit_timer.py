"""Counts and times a training script's real fit as it trains (``mptune run``, issues 49 and
70): the batches fit actually consumed, at their real sizes (a short last batch included,
wherever fit's shuffling puts it), and the wall time of each epoch's training from its start
to its validation (or its end), so that the figure compares with the trials' (which leave
validation out, and say so); the validation apart. Nothing is worked out from the script's
arguments.

How a batch is seen, on each of Keras 3's backends (keras/src/backend/*/trainer.py), with the
user's pipeline untouched:

- JAX: ``fit`` calls ``train_function(state, iterator)``, which draws ``steps_per_execution``
  batches from ``iterator`` in Python; the iterator is handed on wrapped, and each batch it
  gives is counted at its leading dimension (a global array's under a distribution).
- PyTorch: ``fit`` calls ``train_function([batch])``, one step a call: the batch is counted.
- TensorFlow: the batches are drawn inside the compiled function, which returns only the
  execution's last step's logs. So the model's ``train_step`` (an instance attribute over the
  class's, the user's own override included) also adds its batch's leading dimension and one
  step to a counter of mptune's (a variable of two numbers, read at an epoch's ends). Under a
  ``tf.distribute`` strategy the counter is each replica's own, summed when read (as Keras 2's
  metrics were): the global batch. The step's logs are the user's, unchanged.

A wrapper of ``train_function`` counts the executions and, once, waits for the first to end:
that end is where a fit of one epoch is timed from (its first execution compiles). Otherwise
nothing is read back from the device while an epoch runs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras

#: An epoch of its own is timed from its second execution on only where at least this many
#: executions follow the first: fewer are too short to time
MIN_EXECUTIONS = 3


@dataclasses.dataclass
class EpochCount:
    """What one epoch's training consumed, and how long it took (validation apart)."""

    seconds: float = 0.0
    samples: int = 0
    steps: int = 0
    executions: int = 0


@dataclasses.dataclass(frozen=True)
class Achieved:
    """What a real fit trained at, and what the figure covers: ``how`` says which part of the
    fit (``2 whole epochs after the first``, ``its one epoch from its second execution on``)."""

    samples_per_second: float
    epochs: int
    steps: int
    samples: int
    seconds: float
    how: str

    def covered(self) -> dict[str, Any]:
        """What the figure covered, as ``show --json`` holds it."""
        return {
            "epochs": self.epochs,
            "steps": self.steps,
            "samples": self.samples,
            "seconds": round(self.seconds, 4),
            "how": self.how,
        }


class FitTimer(keras.callbacks.Callback):  # type: ignore[misc]
    """A callback put first in the script's own list: it counts the batches fit consumes
    (through :meth:`attach`'s wrappers) and times each epoch's training and each validation
    pass. It defines no batch hook, so Keras' asynchronous dispatch of batch callbacks (JAX,
    PyTorch) stays as the script has it."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[EpochCount] = []
        self.validation: list[float] = []
        #: the fit's first execution: when it ended (waited for), what it consumed
        self.first: tuple[float, int, int] | None = None
        self._current: EpochCount | None = None
        self._start = 0.0
        self._test = 0.0
        self._active = False
        self._backend = keras.backend.backend()
        #: TensorFlow: mptune's counter (samples, steps) and where the epoch began on it
        self._counter: Any = None
        self._replicas = 1
        self._from = (0, 0)

    # -- installing --------------------------------------------------------------------------
    def attach(self, model: Any) -> None:
        """Make ``model``'s steps count what they consume, before its ``fit`` builds its train
        function (TensorFlow: its ``train_step`` adds to mptune's counter)."""
        if self._backend != "tensorflow" or "train_step" in vars(model):
            return
        import tensorflow as tf

        strategy = model.distribute_strategy
        self._replicas = max(1, int(getattr(strategy, "num_replicas_in_sync", 1) or 1))
        with strategy.scope():
            # float64: whole numbers exact to 2**53; each replica's own, summed when read
            self._counter = tf.Variable(
                [0.0, 0.0],
                dtype=tf.float64,
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
                name="mptune_fit_count",
            )
        model.train_step = _counting_step(model.train_step, self._counter)
        model.train_function = None  # built again by fit, from the step above

    def _wrap_train_function(self) -> None:
        model = self.model
        inner = getattr(model, "train_function", None)
        if inner is None or getattr(inner, "_mptune_counted", False):
            return
        wrap = {"jax": _counted_jax, "tensorflow": _counted_tf}.get(self._backend, _counted_torch)
        counted = wrap(self, inner)
        counted._mptune_counted = True
        model.train_function = counted

    # -- counting ----------------------------------------------------------------------------
    def _executed(self, logs: Any, samples: int, steps: int) -> None:
        """One execution: ``steps`` batches of ``samples`` in all (TensorFlow: counted on the
        device, read at the epoch's end)."""
        epoch = self._current
        if epoch is None:
            return
        epoch.samples += samples
        epoch.steps += steps
        epoch.executions += 1
        if self.first is None:
            _wait_for(logs)
            self._read_counter(epoch)
            self.first = (time.perf_counter(), epoch.samples, epoch.steps)

    def _counted(self) -> tuple[int, int]:
        """TensorFlow's counter, read (samples, steps over every replica)."""
        samples, steps = (float(v) for v in self._counter.numpy())
        return round(samples), round(steps / self._replicas)

    def _read_counter(self, epoch: EpochCount) -> None:
        if self._counter is not None:
            samples, steps = self._counted()
            epoch.samples, epoch.steps = samples - self._from[0], steps - self._from[1]

    # -- Keras' hooks --------------------------------------------------------------------------
    def on_train_begin(self, logs: Any = None) -> None:
        self._wrap_train_function()  # fit built it just before (every backend's trainer)
        self._active = True

    def on_train_end(self, logs: Any = None) -> None:
        self._active = False
        if self._backend == "tensorflow":
            self.model.__dict__.pop("train_step", None)  # a later compile builds the class's

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self._counter is not None:
            self._from = self._counted()
        self._current = EpochCount()
        self._start = time.perf_counter()

    def on_test_begin(self, logs: Any = None) -> None:
        self._close_epoch()
        self._test = time.perf_counter()

    def on_test_end(self, logs: Any = None) -> None:
        self.validation.append(time.perf_counter() - self._test)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._close_epoch()

    def _close_epoch(self) -> None:
        epoch = self._current
        if epoch is None:
            return
        epoch.seconds = time.perf_counter() - self._start
        self._read_counter(epoch)
        self._current = None
        if epoch.executions:
            self.epochs.append(epoch)

    # -- the figure ----------------------------------------------------------------------------
    def achieved(self) -> Achieved | None:
        """Samples per second over the whole epochs after the first (which compiles), or, where
        one epoch ran, over it from its second execution on; None where nothing can be timed
        (:meth:`untimed` says why)."""
        if len(self.epochs) >= 2:
            timed = self.epochs[1:]
            seconds = sum(e.seconds for e in timed)
            samples = sum(e.samples for e in timed)
            if seconds <= 0 or samples <= 0:
                return None
            n, steps = len(timed), sum(e.steps for e in timed)
            how = f"{n} whole epoch{'s' if n != 1 else ''} after the first"
            return Achieved(samples / seconds, n, steps, samples, seconds, how)
        if len(self.epochs) == 1 and self.first is not None:
            epoch = self.epochs[0]
            seconds = self._start + epoch.seconds - self.first[0]
            samples, steps = epoch.samples - self.first[1], epoch.steps - self.first[2]
            if epoch.executions - 1 < MIN_EXECUTIONS or seconds <= 0 or samples <= 0:
                return None
            how = "its one epoch from its second execution on (the first compiles)"
            return Achieved(samples / seconds, 1, steps, samples, seconds, how)
        return None

    def untimed(self) -> str:
        """Why :meth:`achieved` has no figure: what was missing."""
        if not self.epochs:
            return "fit ended before its first epoch did: nothing to time"
        epoch = self.epochs[0]
        steps = f"{epoch.steps} step{'s' if epoch.steps != 1 else ''}"
        if len(self.epochs) == 1:
            return f"1 epoch of {steps}: too short to time (its first execution compiles)"
        return "its epochs after the first consumed no samples: nothing to time"


def _counting_step(own: Callable[[Any], Any], counter: Any) -> Callable[[Any], Any]:
    """A TensorFlow ``train_step`` that runs ``own`` and adds its batch (samples, one step) to
    ``counter``; its logs are ``own``'s."""
    import tensorflow as tf

    def train_step(data: Any) -> Any:
        logs = own(data)
        one = tf.constant(1.0, tf.float64)
        counter.assign_add(tf.stack([tf.cast(_batch_size_tf(data), tf.float64), one]))
        return logs

    return train_step


def _counted_jax(timer: FitTimer, inner: Any) -> Any:
    def counted(state: Any, iterator: Any) -> Any:
        if not timer._active:
            return inner(state, iterator)
        batches = _Counting(iterator)
        out = inner(state, batches)
        timer._executed(out[0], batches.samples, batches.steps)
        return out

    return counted


def _counted_tf(timer: FitTimer, inner: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        logs = inner(*args, **kwargs)
        if timer._active:
            timer._executed(logs, 0, 0)  # the counter holds the batches
        return logs

    return counted


def _counted_torch(timer: FitTimer, inner: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        logs = inner(*args, **kwargs)
        if timer._active:
            data = args[0] if args else kwargs.get("data")
            batches = data if isinstance(data, list) else [data]  # fit's buffer: [batch]
            timer._executed(logs, sum(_leading(b) for b in batches), len(batches))
        return logs

    return counted


class _Counting(Iterator[Any]):
    """The batches of one JAX execution, handed on as drawn and counted."""

    def __init__(self, inner: Iterator[Any]) -> None:
        self.inner = inner
        self.samples = 0
        self.steps = 0

    def __next__(self) -> Any:
        batch = next(self.inner)
        self.samples += _leading(batch)
        self.steps += 1
        return batch


def _x_of(data: Any) -> Any:
    """A batch's inputs, as Keras' own steps unpack it (``(x,)``, ``(x, y)``, ``(x, y, w)``)."""
    return keras.utils.unpack_x_y_sample_weight(data)[0]


def _leading(batch: Any) -> int:
    """How many samples a batch drawn by fit holds: its inputs' first array's leading
    dimension (a shape, never a value read from the device)."""
    for leaf in keras.tree.flatten(_x_of(batch)):
        shape = getattr(leaf, "shape", None)
        if shape is not None and len(shape) and shape[0] is not None:
            return int(shape[0])
    return 0


def _batch_size_tf(data: Any) -> Any:
    """Inside a TensorFlow step: its batch's leading dimension (each replica's share under a
    strategy)."""
    import tensorflow as tf

    for leaf in keras.tree.flatten(_x_of(data)):
        if leaf is not None and getattr(leaf, "shape", None) is not None and leaf.shape.rank:
            return tf.shape(leaf)[0]
    return tf.constant(0)


def _wait_for(logs: Any) -> None:
    """Wait until an execution's outputs are computed (they are its end)."""
    for value in keras.tree.flatten(logs):
        try:
            keras.ops.convert_to_numpy(value)
        except Exception:  # noqa: BLE001 - a value that is not a tensor needs no wait
            continue
