"""What differs between Keras 3's backends inside a trial: the framework's import, the device,
GPU memory, out-of-memory errors, the gradient the numerics probe takes, and how training
steps are driven the way ``fit`` drives them.

The worker process runs one backend, set by ``KERAS_BACKEND`` before Keras is imported
(:func:`tuner.trials.environment.worker_environment`); :func:`current` returns its
:class:`Backend`. Each backend's framework is imported here, lazily, and nowhere else in the
engine but the worker's other modules (the import contracts in pyproject.toml).

Facts from Keras 3 this follows (keras/src/backend/*/trainer.py): TensorFlow's ``fit`` calls
``train_function(iterator)`` on a ``tf.data`` iterator, ``steps_per_execution`` steps a call;
JAX's ``fit`` takes the model's state out of its variables once (``_get_jax_state``), calls
``train_function(state, iterator)`` and writes the state back at the end of the epoch
(``jax_state_sync``); PyTorch's ``fit`` calls ``train_function([batch])`` one step at a time
(``steps_per_execution`` must be 1) after ``model.train()``.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import os
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tuner import keras_private
from tuner.policies import JAX, TENSORFLOW, TORCH
from tuner.worker.usercode import InternalError, UserCodeError, first_line


class Backend:
    """The TensorFlow backend; :class:`JaxBackend` and :class:`TorchBackend` override what
    differs."""

    name = TENSORFLOW
    #: how the GPU peak is read, named in every GPU trial's result
    gpu_memory_method = "tf.config.experimental.get_memory_info('GPU:0')['peak']"
    #: whether the GPU peak can start afresh (after the warm-up, and for a warm worker's next
    #: trial); JAX keeps one peak for the process's life
    resets_gpu_peak = True
    #: whether each step leaves reference cycles behind, so that the steps must run with
    #: Python's automatic collection on (as in ``fit``) for their memory to be freed
    cyclic_steps = False
    #: the fix of a ``train_step`` of the model's own that never scales its loss under a
    #: ``LossScaleOptimizer`` (issue 71's ``unscaled_loss``), as a step is written on this
    #: backend (keras.io's "Customizing what happens in fit()" guide for it)
    scale_loss_fix = (
        "scale the loss in train_step: `loss = self.optimizer.scale_loss(loss)` inside the "
        "tape before `tape.gradient`"
    )

    def import_framework(self) -> None:
        import tensorflow  # noqa: F401

    def versions(self) -> dict[str, str]:
        import tensorflow as tf

        return {"tensorflow": tf.__version__}

    def configure_device(self, device: str, memory_limit_mb: float | None) -> tuple[str, bool]:
        """Pick the device before the framework touches it; returns the device (``cpu`` or
        ``gpu:N (name)``) and whether it has Tensor Cores (compute capability 7.0 and up)."""
        import tensorflow as tf

        gpus = [] if device == "cpu" else tf.config.list_physical_devices("GPU")
        if device.startswith("gpu:") and not gpus:
            raise UserCodeError(f"device {device} was asked for, but TensorFlow sees no GPU")
        if not gpus:
            return "cpu", False
        gpu = gpus[0]  # the runner narrowed CUDA_VISIBLE_DEVICES to the chosen GPU
        if memory_limit_mb is not None:
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(memory_limit_mb))]
            )
        else:
            # Without growth TensorFlow reserves the whole card and the peak means nothing.
            tf.config.experimental.set_memory_growth(gpu, True)
        details = tf.config.experimental.get_device_details(gpu)
        capability = tuple(details.get("compute_capability") or (0, 0))
        return _gpu_label(device, details.get("device_name", "GPU")), capability >= (7, 0)

    def gpu_in_use_mb(self) -> float | None:
        """What this process holds on the GPU now (live buffers), where the backend says."""
        return None

    def gpu_limit_mb(self) -> float | None:
        """What this process's GPU allocator can give in all (its limit, not the card's size),
        where the backend says."""
        return None

    def reset_gpu_peak(self) -> None:
        """Start the GPU peak afresh (where :attr:`resets_gpu_peak`)."""
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats("GPU:0")

    def gpu_peak_mb(self) -> float:
        import tensorflow as tf

        return float(tf.config.experimental.get_memory_info("GPU:0")["peak"]) / 2**20

    def is_oom(self, exc: BaseException) -> bool:
        """``exc`` is the device running out of memory, as this backend raises it."""
        return isinstance(exc, MemoryError) or type(exc).__name__ == "ResourceExhaustedError"

    def gradients(self, model: Any, x: Any, y: Any, loss_fn: Any, scale: float) -> list[Any]:
        """The gradients of ``mean(loss_fn(y, model(x))) * scale`` (the loss in float32, as a
        trial computes it) for each trainable weight; None where a weight gets none."""
        import keras
        import tensorflow as tf

        with tf.GradientTape() as tape:
            value = _scaled_loss(keras, model(x, training=False), y, loss_fn, scale)
        return list(tape.gradient(value, model.trainable_weights))

    def steps(self, model: Any, batches: Sequence[tuple[Any, Any]]) -> Steps:
        return TensorFlowSteps(model, batches)


class JaxBackend(Backend):
    name = JAX
    gpu_memory_method = "jax Device.memory_stats()['peak_bytes_in_use']"
    resets_gpu_peak = False
    #: A stateless step reads the scale from its state, as Keras' own JAX step does (outside
    #: a StatelessScope, ``scale_loss`` would read the variable's value when the step was
    #: traced: the initial scale, for ever).
    scale_loss_fix = (
        "scale the loss that jax.value_and_grad differentiates, with the scale in the step's "
        "state: in compute_loss_and_updates, `with keras.StatelessScope(state_mapping="
        "list(zip(self.optimizer.variables, optimizer_variables))): loss = "
        "self.optimizer.scale_loss(loss)` (pass it optimizer_variables), and report the "
        "unscaled loss"
    )

    def import_framework(self) -> None:
        import jax  # noqa: F401

    def versions(self) -> dict[str, str]:
        import jax

        return {"jax": jax.__version__}

    def configure_device(self, device: str, memory_limit_mb: float | None) -> tuple[str, bool]:
        # The environment chose the platform and the allocator (worker_environment).
        import jax

        gpus = [] if device == "cpu" else _jax_gpus(jax)
        if device.startswith("gpu:") and not gpus:
            raise UserCodeError(f"device {device} was asked for, but JAX sees no GPU")
        if not gpus:
            return "cpu", False
        gpu = gpus[0]
        capability = _capability(getattr(gpu, "compute_capability", None))
        return _gpu_label(device, getattr(gpu, "device_kind", "GPU")), capability >= (7, 0)

    def reset_gpu_peak(self) -> None:
        """JAX has no way to (see :attr:`resets_gpu_peak`)."""

    def gpu_in_use_mb(self) -> float | None:
        import jax

        stats = _jax_gpus(jax)[0].memory_stats() or {}
        value = stats.get("bytes_in_use")
        return None if value is None else float(value) / 2**20

    def gpu_limit_mb(self) -> float | None:
        import jax

        stats = _jax_gpus(jax)[0].memory_stats() or {}
        value = stats.get("bytes_limit")
        return None if value is None else float(value) / 2**20

    def gpu_peak_mb(self) -> float:
        import jax

        stats = _jax_gpus(jax)[0].memory_stats() or {}
        return float(stats.get("peak_bytes_in_use", 0)) / 2**20

    def is_oom(self, exc: BaseException) -> bool:
        # XLA's status code, in JaxRuntimeError's (XlaRuntimeError's) message.
        return isinstance(exc, MemoryError) or (
            "RuntimeError" in type(exc).__name__ and "RESOURCE_EXHAUSTED" in str(exc)
        )

    def gradients(self, model: Any, x: Any, y: Any, loss_fn: Any, scale: float) -> list[Any]:
        import jax
        import keras

        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        def value(weights: list[Any]) -> Any:
            pred, _ = model.stateless_call(weights, frozen, x, training=False)
            return _scaled_loss(keras, pred, y, loss_fn, scale)

        return list(jax.grad(value)(trainable))

    def steps(self, model: Any, batches: Sequence[tuple[Any, Any]]) -> Steps:
        return JaxSteps(model, batches)


class TorchBackend(Backend):
    name = TORCH
    gpu_memory_method = "torch.cuda.max_memory_allocated()"
    #: Keras' torch tree functions (``traverse``, ``_dict_to_ordered_dict``) flatten with a
    #: lambda that holds the structure, inside torch's recursive ``tree_flatten`` helper: a
    #: reference cycle per call, some hundreds of objects a step, freed only by the collector.
    #: A worker that kept collection off while it stepped (as it does on TensorFlow and JAX,
    #: whose steps leave none) kept every one, with what they hold.
    cyclic_steps = True
    scale_loss_fix = (
        "scale the loss before its gradients: `self.optimizer.scale_loss(loss).backward()` in "
        "place of `loss.backward()`"
    )

    def import_framework(self) -> None:
        import torch  # noqa: F401

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": str(torch.__version__)}

    def configure_device(self, device: str, memory_limit_mb: float | None) -> tuple[str, bool]:
        import torch

        available = device != "cpu" and torch.cuda.is_available()
        if device.startswith("gpu:") and not available:
            raise UserCodeError(f"device {device} was asked for, but PyTorch sees no GPU")
        if not available:
            return "cpu", False
        if memory_limit_mb is not None:
            total = torch.cuda.get_device_properties(0).total_memory / 2**20
            torch.cuda.set_per_process_memory_fraction(min(1.0, memory_limit_mb / total), 0)
        capability = torch.cuda.get_device_capability(0)
        return _gpu_label(device, torch.cuda.get_device_name(0)), tuple(capability) >= (7, 0)

    def reset_gpu_peak(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(0)

    def gpu_peak_mb(self) -> float:
        import torch

        return float(torch.cuda.max_memory_allocated(0)) / 2**20

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"

    def gradients(self, model: Any, x: Any, y: Any, loss_fn: Any, scale: float) -> list[Any]:
        import keras
        import torch

        weights = [v.value for v in model.trainable_variables]
        value = _scaled_loss(keras, model(x, training=False), y, loss_fn, scale)
        grads = torch.autograd.grad(value, weights, allow_unused=True)
        return [None if g is None else g.detach() for g in grads]

    def steps(self, model: Any, batches: Sequence[tuple[Any, Any]]) -> Steps:
        return TorchSteps(model, batches)


_BACKENDS: dict[str, type[Backend]] = {
    TENSORFLOW: Backend,
    JAX: JaxBackend,
    TORCH: TorchBackend,
}


def get(name: str) -> Backend:
    """The backend called ``name``."""
    return _BACKENDS[name]()


def current() -> Backend:
    """The backend this worker runs (``KERAS_BACKEND``, TensorFlow when unset, as in Keras)."""
    return get(os.environ.get("KERAS_BACKEND") or TENSORFLOW)


@contextlib.contextmanager
def ours(what: str) -> Iterator[None]:
    """A region of mptune's own work on data the checks already accepted (as ``fit`` accepts
    it): what fails there is mptune's bug, an :class:`InternalError`, not the user's. The
    device running out of memory stays what it is: a trial outcome."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, (UserCodeError, InternalError)) or current().is_oom(exc):
            raise
        raise InternalError(f"mptune failed {what}: {first_line(exc)}") from exc


class Steps(abc.ABC):
    """Drives a compiled model's training steps as ``fit`` does on one backend: one
    :meth:`execute` is one ``train_function`` call (``steps_per_execution`` steps)."""

    def __init__(self, model: Any, batches: Sequence[tuple[Any, Any]]) -> None:
        self.model = model
        self.batches = batches

    @abc.abstractmethod
    def execute(self) -> Any:
        """One ``train_function`` call; its logs (the running mean loss under ``loss``)."""

    def read(self, variable: Any) -> Any:
        """``variable``'s value now (an optimizer's, read between executions)."""
        return variable.numpy()

    def reset_metrics(self) -> None:
        self.model.reset_metrics()

    def sync(self) -> None:  # noqa: B027 - only JAX keeps the state apart
        """The model's variables hold the trained values (JAX keeps them apart while it
        trains)."""

    @property
    def predicts_memory(self) -> bool:
        """Whether :meth:`step_memory` can answer."""
        return False

    def step_memory(self) -> dict[str, int] | None:
        """What one training step at this batch size needs, from its compiled program, before
        any step runs: XLA's ``memory_analysis()`` in bytes (``argument``, ``output``,
        ``alias``: outputs written over donated arguments, ``temp``, ``code``). None where the
        backend cannot say without running the step (TensorFlow and PyTorch: their searches
        predict from the ladder's line through the peaks of the rungs that ran)."""
        return None


class TensorFlowSteps(Steps):
    def __init__(self, model: Any, batches: Sequence[tuple[Any, Any]]) -> None:
        import tensorflow as tf

        super().__init__(model, batches)
        # The trial's batches in order, again and again: step k sees batch k mod the pool, as
        # every trial of the same batch size and seed does. Batched by tf.data from the
        # samples, as fit batches arrays: the batch dimension is unknown to the traced step (as
        # in fit, whose last batch may be short), so a warm worker's next batch size reuses the
        # trace. The batches hold tuples where the user gave lists (loading.fit_structure): to
        # tf.data a list is one tensor, which inputs of different shapes cannot be.
        with ours("feeding the batches to tf.data"):
            flat = [tf.nest.flatten(tuple(batch)) for batch in batches]
            columns = [np.concatenate([parts[i] for parts in flat]) for i in range(len(flat[0]))]
            samples = tf.nest.pack_sequence_as(fit_element(batches[0]), columns)
            batch_size = int(np.shape(flat[0][0])[0])
            dataset = tf.data.Dataset.from_tensor_slices(samples).batch(batch_size)
            dataset = dataset.repeat().prefetch(tf.data.AUTOTUNE)
            strategy = keras_private.distribute_strategy(model)
            if strategy is not None:
                # A script's model under a tf.distribute strategy: each batch split over its
                # replicas, as fit splits it (fit's batch is the global one), and the
                # optimizer's variables made in the strategy before the step is traced, as fit
                # makes them (made inside the traced step, they fail there).
                dataset = strategy.experimental_distribute_dataset(dataset)
                keras_private.maybe_symbolic_build(model, fit_element(batches[0]))
            self.iterator: Any = iter(dataset)
        model.make_train_function()

    def execute(self) -> Any:
        return self.model.train_function(self.iterator)


class JaxSteps(Steps):
    """JAX: the state taken out of the variables once and threaded through the calls, as in
    ``fit``; written back by :meth:`sync` (at the end of each phase, and before the metrics are
    reset). The pool of batches is put on the device once, as a prefetching input would have
    it there."""

    def __init__(self, model: Any, batches: Sequence[tuple[Any, Any]]) -> None:
        import jax

        super().__init__(model, batches)
        keras_private.symbolic_build(model, fit_element(batches[0]))  # as fit: optimizer, metrics
        model.make_train_function()
        #: the jitted step Keras' train_function calls, kept so that its program can be
        #: compiled (and its memory read) ahead of the first step: see _own_jit
        self.step = _own_jit(model)
        import keras

        with ours("putting the batches on the device"):
            if keras.distribution.distribution() is not None:
                # Under a keras.distribution (DataParallel): each batch laid out over the
                # devices as fit lays it out.
                self.pool = [keras_private.distribute_data(fit_element(b)) for b in batches]
            else:
                self.pool = [
                    jax.tree_util.tree_map(jax.numpy.asarray, fit_element(b)) for b in batches
                ]
        self.iterator: Iterator[Any] = itertools.cycle(self.pool)
        self.state: Any = None
        self._index: dict[int, int] = {}

    @property
    def predicts_memory(self) -> bool:
        return self.step is not None

    def step_memory(self) -> dict[str, int] | None:
        """The step's program compiled ahead of time for this batch (``lower(...).compile()``
        on the jitted step ``train_function`` calls), so the warm-up's first step finds it
        compiled, and its ``memory_analysis()``.

        Traced with the model's variables released, as ``fit`` traces it: a step that reads a
        variable outside its state (a stateless ``train_step`` of the model's own calling
        ``self.optimizer.scale_loss`` outside a ``StatelessScope``) fails in the trial as in
        the user's ``fit``, instead of keeping the value it had when traced (the initial loss
        scale, for ever: a trial that overflowed at every scale while the run crashed)."""
        if self.step is None or self.state is not None:
            return None
        state = keras_private.jax_state(self.model, purge=True)
        try:
            analysis = self.step.lower(state, self.pool[0]).compile().memory_analysis()
        finally:
            keras_private.put_jax_state(self.model, state)  # nothing ran: the same values
        if analysis is None:
            return None
        return {
            "argument": int(analysis.argument_size_in_bytes),
            "output": int(analysis.output_size_in_bytes),
            "alias": int(analysis.alias_size_in_bytes),
            "temp": int(analysis.temp_size_in_bytes),
            "code": int(getattr(analysis, "generated_code_size_in_bytes", 0) or 0),
        }

    def execute(self) -> Any:
        model = self.model
        if self.state is None:
            self.state = keras_private.jax_state(model, purge=True)
            # Indexed when the state is taken: a warm worker builds the optimizer again (new
            # variables) after this driver was made.
            self._index = {id(v): i for i, v in enumerate(model.optimizer.variables)}
        logs, self.state = model.train_function(self.state, self.iterator)
        return logs

    def read(self, variable: Any) -> Any:
        index = self._index.get(id(variable))
        if self.state is None or index is None:
            return variable.numpy()
        return np.asarray(self.state[2][index])

    def reset_metrics(self) -> None:
        self.sync()
        self.model.reset_metrics()

    def sync(self) -> None:
        if self.state is None:
            return
        keras_private.put_jax_state(self.model, self.state)
        self.state = None


class TorchSteps(Steps):
    """PyTorch: one step a call, on batches put on the model's device once, the module in
    training mode (as ``fit`` sets it)."""

    def __init__(self, model: Any, batches: Sequence[tuple[Any, Any]]) -> None:
        import keras
        import torch

        super().__init__(model, batches)
        keras_private.symbolic_build(model, fit_element(batches[0]))  # as fit: optimizer, metrics
        model.make_train_function()
        model.train()

        def on_device(value: Any) -> Any:
            return keras.ops.convert_to_tensor(value)

        with torch.no_grad(), ours("putting the batches on the device"):
            self.pool = [keras.tree.map_structure(on_device, fit_element(b)) for b in batches]
        self.iterator: Iterator[Any] = itertools.cycle(self.pool)

    def execute(self) -> Any:
        return self.model.train_function([next(self.iterator)])

    def read(self, variable: Any) -> Any:
        return variable.value.detach().cpu().numpy()


#: The jitted step of each model's train_function, made by :func:`_own_jit`.
_JITTED: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _own_jit(model: Any) -> Any:
    """The jitted train step behind ``model.train_function``, or None where Keras does not jit
    it (``run_eagerly``, ``jit_compile=False``, NNX, a distribution).

    Keras' JAX trainer makes ``train_function`` from ``jax.jit(self.train_step,
    donate_argnums=0)`` and keeps the jitted function to itself; this makes the same function
    and the same ``train_function`` around it (``_make_function``, as ``make_train_function``
    does), so that a program compiled ahead of time through it (``lower().compile()``) is the
    one the steps call, and is not compiled twice. Kept per model until its train_function is
    made again (a recompile)."""
    import jax
    import keras

    made = _JITTED.get(model)
    if made is not None and made[0] is model.train_function:
        return made[1]
    if (
        model.run_eagerly
        or not model.jit_compile
        or keras.config.is_nnx_enabled()
        or keras.distribution.distribution() is not None
    ):
        return None
    step = jax.jit(model.train_step, donate_argnums=0)
    model.train_function = keras_private.make_function(model, step)
    _JITTED[model] = (model.train_function, step)
    return step


def fit_element(batch: Any) -> Any:
    """A trial's batch as ``fit``'s data adapters hand it to the train step: ``(x, y)`` or
    ``(x, y, sample_weight)`` as a tuple, and inputs alone (``fit(x)`` with no targets, as a
    model with its own ``train_step`` is fed: the keras.io VAE) as ``x`` itself, not a
    one-element tuple (Keras' ``pack_x_y_sample_weight``)."""
    batch = tuple(batch)
    return batch[0] if len(batch) == 1 else batch


def _scaled_loss(keras: Any, pred: Any, y: Any, loss_fn: Any, scale: float) -> Any:
    """The loss in float32 (a low-precision output gets a float32 cast, as in a trial: a
    float16 loss times the scale would overflow by itself), times ``scale``."""
    pred = keras.tree.map_structure(lambda t: keras.ops.cast(t, "float32"), pred)
    return keras.ops.mean(loss_fn(y, pred)) * scale


def _gpu_label(device: str, name: str) -> str:
    index = device.split(":")[1] if device.startswith("gpu:") else "0"
    return f"gpu:{index} ({name})"


def _jax_gpus(jax: Any) -> list[Any]:
    try:
        return list(jax.devices("gpu"))
    except RuntimeError:  # no GPU platform
        return []


def _capability(text: Any) -> tuple[int, ...]:
    """``"9.0"`` -> ``(9, 0)``; ``(0, 0)`` when unknown."""
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return (0, 0)
