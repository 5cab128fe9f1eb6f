"""One recorded pass of a model for the numerics probe (:mod:`tuner.worker.probe`): the model
run forward on the probe's batch with every layer's ``call`` recorded, and under mixed_float16
the gradients of its loss, taken from the same pass.

Eagerly on TensorFlow and PyTorch (the gradients from the pass's own tape or autograd graph).
On JAX as one compiled function per model (:func:`jax_pass`): run eagerly, JAX compiles every
operation on its own, which on a GPU cost a search more than a minute per policy (issue 34); a
model JAX cannot trace runs eagerly. Where the seconds go is kept in :class:`Parts`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from tuner import keras_private
from tuner.worker.usercode import first_line

#: Options for the probe's compiled JAX functions. A float16 or bfloat16 intermediate rounds as
#: the eager operation would, never kept in float32 within a fusion (XLA's "excess precision",
#: which would understate the policy's error). No autotuning on a GPU: each function runs once,
#: so timing every convolution's candidate algorithms (XLA's default) costs more than any of
#: them takes; XLA takes cuDNN's and cuBLAS's own first choice. (A CPU ignores the option.)
JIT_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_allow_excess_precision": False,
    "xla_gpu_autotune_level": 0,
}


class Parts:
    """Where the probe's seconds go (``numerics["probe_parts"]``): seconds by part, summed over
    the part's spans. The parts:

    * ``twin``: building the float32 twin (and the trial's model, if it was not built);
    * ``weights``: copying the model's weights into the twin;
    * ``<side>_trace``, ``<side>_compile``, ``<side>_run`` (JAX): tracing a model's pass into
      one function, XLA compiling it, running it and fetching what it recorded (and, under
      mixed_float16, its gradients);
    * ``<side>_forward``, ``<side>_gradients`` (eagerly: TensorFlow, PyTorch, a model JAX
      cannot trace): the recorded forward pass, and the backward pass of its loss;
    * ``compare``: the layer-by-layer comparison (integer casts, errors, overflow, divergence);
    * ``flush_check``: the shares of the gradients that flush to zero in float16.

    ``<side>`` is ``float32`` (the twin), ``policy`` (the trial's model) or ``fixed`` (the
    trial's model again, with the fix for an integer cast applied).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - t0
            self.seconds[name] = self.seconds.get(name, 0.0) + spent

    def rounded(self) -> dict[str, float]:
        return {name: round(s, 3) for name, s in self.seconds.items()}


@dataclass
class Call:
    """One call of one layer, as its ``call`` saw it."""

    layer: int  #: the layer's index in the walk
    entry: int  #: order the calls began in
    inputs: list[np.ndarray | None]
    outputs: list[np.ndarray | None] | None = None
    exit: int | None = None  #: order the calls ended in; None: it raised


@dataclass
class Layers:
    """A model's layers, depth first, with each layer's parent (an index, None at the top)."""

    layers: list[Any]
    parents: list[int | None]

    @classmethod
    def walk(cls, model: Any) -> Layers:
        layers: list[Any] = []
        parents: list[int | None] = []
        seen: set[int] = set()

        def visit(layer: Any, parent: int | None) -> None:
            for sub in _sublayers(layer):
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                layers.append(sub)
                parents.append(parent)
                visit(sub, len(layers) - 1)

        visit(model, None)
        return cls(layers, parents)

    def descends(self, index: int, ancestor: int) -> bool:
        parent = self.parents[index]
        while parent is not None:
            if parent == ancestor:
                return True
            parent = self.parents[parent]
        return False

    def name(self, index: int) -> str:
        layer = self.layers[index]
        return f"layer '{layer.name}' ({type(layer).__name__})"


def _sublayers(layer: Any) -> list[Any]:
    found = keras_private.direct_sublayers(layer)
    if found is None:
        found = getattr(layer, "layers", None) or []
    return [x for x in found if isinstance(x, keras.layers.Layer)]


def _array(value: Any) -> np.ndarray | None:
    """A tensor as a NumPy array (bfloat16 kept as ml_dtypes' bfloat16); None otherwise."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return None
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
        return None
    try:
        return np.asarray(keras.ops.convert_to_numpy(value))
    except Exception:  # noqa: BLE001 - a symbolic or exotic value: not compared
        return None


def _tensor(value: Any) -> Any:
    """A value of a traced pass as the backend's tensor (a tracer), as :func:`_array` would
    take it; None for what it would not."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return None
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
        return None
    try:
        return keras.ops.convert_to_tensor(value)
    except Exception:  # noqa: BLE001 - not a tensor: not compared
        return None


class Recorder:
    """Wraps every layer's ``call`` to record what it received and returned."""

    def __init__(self, layers: Layers, budget_bytes: int) -> None:
        self.layers = layers
        self.budget_bytes = budget_bytes
        self.recorded_bytes = 0
        self.truncated = False
        self.calls: list[Call] = []
        self._entries = itertools.count()
        self._exits = itertools.count()
        #: While a traced (compiled) pass records: the tensors kept, which the compiled
        #: function returns, and where each goes once it is an array (:meth:`resolve`).
        self.traced: list[Any] | None = None
        self._slots: list[tuple[list[np.ndarray | None], int]] = []

    def tracing(self) -> None:
        """Record the tensors of a traced pass: kept as they are, filled in by :meth:`resolve`
        once the compiled function has returned them."""
        self.traced = []

    def resolve(self, arrays: Sequence[Any]) -> None:
        """Put the arrays the compiled function returned (the traced tensors, in order) where
        the calls recorded them."""
        for (values, position), array in zip(self._slots, arrays, strict=True):
            values[position] = np.asarray(array)
        self.traced, self._slots = None, []

    @contextmanager
    def recording(self) -> Iterator[Recorder]:
        wrapped = []
        try:
            for index, layer in enumerate(self.layers.layers):
                original = layer.call
                object.__setattr__(layer, "call", self._wrap(index, original))
                wrapped.append(layer)
            yield self
        finally:
            for layer in wrapped:
                if "call" in layer.__dict__:
                    object.__delattr__(layer, "call")

    def _wrap(self, index: int, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            record = Call(index, next(self._entries), self._keep(keras.tree.flatten(list(args))))
            self.calls.append(record)
            out = original(*args, **kwargs)
            record.outputs = self._keep(keras.tree.flatten(out))
            record.exit = next(self._exits)
            return out

        return call

    def _keep(self, values: list[Any]) -> list[np.ndarray | None]:
        """Each value as an array while the budget lasts (None past it, or for what is no
        tensor); in a traced pass, a place the array goes to later."""
        kept: list[np.ndarray | None] = []
        for value in values:
            if self.recorded_bytes >= self.budget_bytes:
                self.truncated = True
                kept.append(None)
            elif self.traced is None:
                array = _array(value)
                if array is not None:
                    self.recorded_bytes += array.nbytes
                kept.append(array)
            else:
                tensor = _tensor(value)
                kept.append(None)
                if tensor is not None:
                    self.recorded_bytes += int(np.prod(tensor.shape)) * tensor.dtype.itemsize
                    self.traced.append(tensor)
                    self._slots.append((kept, len(kept) - 1))
        return kept

    def by_key(self) -> dict[tuple[int, int], Call]:
        """Calls by (layer, how many times that layer had been called before)."""
        counts: dict[int, int] = {}
        keyed = {}
        for call in self.calls:
            n = counts.get(call.layer, 0)
            counts[call.layer] = n + 1
            keyed[(call.layer, n)] = call
        return keyed


@dataclass
class Loss:
    """What a pass takes the gradients of: ``mean(fn(y, model(x))) * scale``, the loss in
    float32 as a trial computes it."""

    fn: Callable[[Any, Any], Any]
    y: Any
    scale: float


@dataclass
class Pass:
    """One recorded forward pass of a model on the probe batch, with its gradients where asked
    for."""

    recorder: Recorder
    error: str | None = None  #: the forward pass raised: its one line
    gradients: list[np.ndarray] | None = None  #: each trainable weight's, in float32
    gradient_error: str | None = None  #: the gradients could not be taken: why


class Failure(str):
    """A failure in one line (a ``str``), with the exception it was read from (``exc``), so
    that a policy's failure can be read for its trap where it happened in the user's code
    (:func:`tuner.worker.blame.trap_hazards`)."""

    exc: BaseException | None = None


def attempt(fn: Callable[[], Any]) -> str | None:
    """Run ``fn``; its failure as one line (a :class:`Failure`), or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - a failure is a finding here
        failure = Failure(first_line(exc))
        failure.exc = exc
        return failure
    return None


def run_pass(
    model: Any, walk: Layers, x: Any, loss: Loss | None, parts: Parts, side: str, budget: int
) -> Pass:
    """``model(x, training=False)`` with every layer's call recorded, and with ``loss`` the
    gradients of that loss from the same pass. On JAX the pass is one compiled function
    (:func:`jax_pass`): eagerly, JAX compiles every operation on its own, which on a GPU costs
    far more than one compile of the whole model. Elsewhere (and where JAX cannot trace the
    model) it runs eagerly. The seconds go to ``parts`` under ``side``."""
    if keras.backend.backend() == "jax":
        done = jax_pass(model, walk, x, loss, parts, side, budget)
        if done is not None:
            return done
    return eager_pass(model, walk, x, loss, parts, side, budget)


def eager_pass(
    model: Any, walk: Layers, x: Any, loss: Loss | None, parts: Parts, side: str, budget: int
) -> Pass:
    """The pass run eagerly. TensorFlow and PyTorch take the gradients from the pass itself
    (its tape, its autograd graph); JAX, when it could not trace the model, in a pass of their
    own (:meth:`tuner.worker.backends.Backend.gradients`)."""
    from tuner.worker import backends

    backend = keras.backend.backend()
    same_pass = loss is not None and backend in ("tensorflow", "torch")
    done = Pass(Recorder(walk, budget))
    outputs: list[Any] = []
    value: list[Any] = []
    with parts.part(f"{side}_forward"), _tape(backend, same_pass) as tape:
        with done.recorder.recording():
            done.error = attempt(lambda: outputs.append(model(x, training=False)))
        if done.error is None and same_pass and loss is not None:
            done.gradient_error = attempt(
                lambda: value.append(
                    backends._scaled_loss(keras, outputs[0], loss.y, loss.fn, loss.scale)
                )
            )
    if done.error is not None or loss is None or done.gradient_error is not None:
        return done
    if not same_pass:
        eager_gradients(done, model, x, loss, parts, side)
        return done
    weights = model.trainable_weights
    with parts.part(f"{side}_gradients"):
        try:
            if tape is not None:
                grads = list(tape.gradient(value[0], weights))
            else:
                import torch

                found = torch.autograd.grad(value[0], [w.value for w in weights], allow_unused=True)
                grads = [None if g is None else g.detach() for g in found]
            done.gradients = float32_gradients(grads, weights)
        except Exception as exc:  # noqa: BLE001 - no gradients, no underflow evidence
            done.gradient_error = first_line(exc)
    return done


@contextmanager
def _tape(backend: str, wanted: bool) -> Iterator[Any]:
    """TensorFlow's gradient tape around a pass whose gradients are wanted; None otherwise (on
    PyTorch the pass's autograd graph is kept anyway)."""
    if backend != "tensorflow" or not wanted:
        yield None
        return
    import tensorflow as tf

    with tf.GradientTape() as tape:
        yield tape


def jax_pass(
    model: Any, walk: Layers, x: Any, loss: Loss | None, parts: Parts, side: str, budget: int
) -> Pass | None:
    """The pass as one compiled JAX function of the model's weights: the recorded tensors are
    its outputs (the recording budget is kept while tracing, from their shapes), and with a
    loss it returns the gradients too. None when it cannot be traced or compiled (a model that
    reads its values in Python, or one that fails): the pass then runs eagerly, which also
    reports the failure as before. With a loss whose gradients cannot be traced, the forward
    pass alone is compiled and the gradients are taken eagerly."""
    import jax

    from tuner.worker import backends

    recorder = Recorder(walk, budget)
    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]
    variables = [*model.trainable_variables, *model.non_trainable_variables]

    def run(trainable: list[Any], frozen: list[Any], x: Any, y: Any) -> tuple[Any, list[Any]]:
        mapping = list(zip(variables, [*trainable, *frozen], strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            with recorder.recording():
                outputs = model(x, training=False)
            value = (
                None
                if loss is None
                else backends._scaled_loss(keras, outputs, y, loss.fn, loss.scale)
            )
        return value, list(recorder.traced or [])

    y = None if loss is None else loss.y
    function = jax.value_and_grad(run, has_aux=True) if loss is not None else run
    recorder.tracing()
    try:
        with parts.part(f"{side}_trace"):
            lowered = jax.jit(function).lower(trainable, frozen, x, y)
        with parts.part(f"{side}_compile"):
            compiled = lowered.compile(JIT_COMPILER_OPTIONS)
        with parts.part(f"{side}_run"):
            out = compiled(trainable, frozen, x, y)
            (_, traced), grads = out if loss is not None else (out, None)
            recorder.resolve(traced)
            done = Pass(recorder)
            if grads is not None:
                done.gradients = float32_gradients(list(grads), model.trainable_weights)
    except Exception:  # noqa: BLE001 - not traceable: eagerly, where a failure is reported
        if loss is None:
            return None
        done_forward = jax_pass(model, walk, x, None, parts, side, budget)
        if done_forward is not None:
            eager_gradients(done_forward, model, x, loss, parts, side)
        return done_forward
    return done


def eager_gradients(done: Pass, model: Any, x: Any, loss: Loss, parts: Parts, side: str) -> None:
    """The gradients taken the backend's way (:meth:`tuner.worker.backends.Backend.gradients`),
    eagerly, in a pass of their own."""
    from tuner.worker import backends

    with parts.part(f"{side}_gradients"):
        try:
            grads = backends.current().gradients(model, x, loss.y, loss.fn, loss.scale)
            done.gradients = float32_gradients(grads, model.trainable_weights)
        except Exception as exc:  # noqa: BLE001 - no gradients, no underflow evidence
            done.gradient_error = first_line(exc)


def float32_gradients(grads: Sequence[Any], weights: Sequence[Any]) -> list[np.ndarray]:
    """Each trainable weight's gradient as a float32 array (zeros where it gets none)."""
    return [
        np.zeros(tuple(w.shape), np.float32)
        if g is None
        else np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(g, "float32")))
        for g, w in zip(grads, weights, strict=True)
    ]
