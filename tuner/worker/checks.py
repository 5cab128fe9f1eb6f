"""Checks of a model before its trial, with the advice the mixed-precision guides give.

* A float16/bfloat16 model output or loss: the guides say to keep the last layer (the softmax)
  in float32 for numeric stability. This is a ``low_precision_output`` hazard naming the layer;
  the trial appends a float32 cast (which keeps the loss in float32, not the softmax).
* Widths that are not multiples of 8: NVIDIA's Tensor Core guidance is that matrix dimensions
  should be multiples of 8 for float16 (NVIDIA, "Train With Mixed Precision", Deep Learning
  Performance Guide). Said only where Tensor Cores exist (NVIDIA compute capability 7.0 and
  up), and never about the layer that produces a model output: its width is the number of
  classes or targets, which the user cannot pad.
"""

from __future__ import annotations

from typing import Any

import keras

from tuner import keras_private
from tuner.policies import FLOAT32
from tuner.trials.hazards import (
    FLOAT16_TINY,
    LOW_PRECISION_DTYPES,
    LOW_PRECISION_OUTPUT,
    Hazard,
)
from tuner.worker.loading import all_layers

#: Layer attributes that become a matrix dimension.
_WIDTH_ATTRIBUTES = ("units", "filters", "output_dim", "key_dim")


def low_precision_outputs(model: keras.Model, sample_x: Any) -> list[str]:
    """The dtypes of outputs in float16 or bfloat16 (empty when there are none), of every
    output in whatever structure the model returns (a dict of heads, a list)."""
    from tuner import keras_setup

    outputs = getattr(model, "outputs", None)
    if outputs:
        dtypes = [str(o.dtype) for o in outputs]
    elif not keras_setup.defines_call(model):
        return []  # no forward pass apart from its own train_step (the keras.io VAE)
    else:  # a subclassed model: run it once to see
        result = model(sample_x, training=False)
        dtypes = [str(getattr(r, "dtype", "float32")) for r in keras.tree.flatten(result)]
    return [d.replace("tf.", "") for d in dtypes if "float16" in d]


def with_float32_output(model: keras.Model) -> keras.Model:
    """The same model with its outputs cast to float32, in the structure it returns them (a
    dict of named heads stays that dict, a list that list) and under the names it gives them
    (``output_names``), so that the losses, metrics and sample weights it was compiled with
    per output still find theirs."""
    outputs = getattr(model, "outputs", None)
    if not outputs:
        return _Float32Output(model)
    names = list(getattr(model, "output_names", None) or [])
    flat = [
        keras.layers.Activation(
            "linear", dtype="float32", name=f"mptune_float32_output_{i}" if i else _CAST
        )(tensor)
        for i, tensor in enumerate(outputs)
    ]
    cast = keras.tree.pack_sequence_as(_built(model, "output", outputs), flat)
    wrapped = keras.Model(_built(model, "input", model.inputs), cast, name=model.name)
    if len(names) == len(flat):
        wrapped.output_names = names  # the cast layers' names are not the outputs'
    return wrapped


#: The name of the (first) float32 cast a trial appends to a model's outputs.
_CAST = "mptune_float32_output"


def _built(model: keras.Model, which: str, flat: list[Any]) -> Any:
    """A functional model's inputs or outputs (``which``) in the structure it was built with
    (Keras' ``model.input`` and ``model.output``: a dict of named tensors, a list), ``flat`` as
    they are listed; one tensor alone where the model keeps no structure (a Sequential)."""
    try:
        struct = getattr(model, which)
    except (AttributeError, ValueError):  # a Sequential that was never called
        struct = None
    if struct is None or len(keras.tree.flatten(struct)) != len(flat):
        return flat[0] if len(flat) == 1 else list(flat)
    return struct


# keras ships no type information, so keras.Model is Any to mypy.
class _Float32Output(keras.Model):  # type: ignore[misc]
    """Wraps a subclassed model whose outputs are float16; returns them in its structure."""

    def __init__(self, inner: keras.Model) -> None:
        super().__init__(name=f"{inner.name}_float32_output")
        self.inner = inner

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        result = self.inner(inputs, training=training)
        return keras.tree.map_structure(lambda r: keras.ops.cast(r, "float32"), result)


def narrow_layers(model: keras.Model) -> list[str]:
    """Layers with a width that is not a multiple of 8, as ``name (attribute=value)``; the
    layers that produce the model's outputs are left out."""
    final = {id(layer) for layer in output_layers(model)}
    found = []
    for layer in all_layers(model):
        if id(layer) in final:
            continue
        for attribute in _WIDTH_ATTRIBUTES:
            value = getattr(layer, attribute, None)
            if isinstance(value, int) and value % 8:
                found.append(f"{layer.name} ({attribute}={value})")
    return found


#: Layers that pass their input's width through (an activation after the output Dense).
_PASS_THROUGH = ("Activation", "Softmax", "Dropout", "ReLU", "Identity", "Reshape", "Flatten")


def output_layers(model: keras.Model) -> list[Any]:
    """The layers whose width is a model output's width: for each output, the layer that
    produced it, and through activations and dropouts the layer with a width before them. A
    subclassed model (no graph): its last layer with a width."""
    outputs = getattr(model, "outputs", None)
    if not outputs:
        widths = [
            layer
            for layer in all_layers(model)
            if any(isinstance(getattr(layer, a, None), int) for a in _WIDTH_ATTRIBUTES)
        ]
        return widths[-1:]
    found = []
    for tensor in outputs:
        layer = _producer(tensor)
        while layer is not None:
            found.append(layer)
            if type(layer).__name__ not in _PASS_THROUGH:
                break
            layer = _producer(_single_input(layer))
    return found


def _single_input(layer: Any) -> Any:
    try:
        inputs = layer.input
    except (AttributeError, ValueError):  # not called in a graph, or called more than once
        return None
    return None if isinstance(inputs, (list, tuple, dict)) else inputs


def _producer(tensor: Any) -> Any:
    return keras_private.producer(tensor)


_PROBABILITY_ACTIVATIONS = ("softmax", "log_softmax", "sigmoid")


def _activation_name(layer: Any) -> str | None:
    if type(layer).__name__ == "Softmax":
        return "softmax"
    activation = getattr(layer, "activation", None)
    name = getattr(activation, "__name__", None) or (
        activation if isinstance(activation, str) else None
    )
    return name if name in _PROBABILITY_ACTIVATIONS else None


def output_hazards(
    model: keras.Model, policy: str, loss: Any, low: list[str], cast: bool = True
) -> list[Hazard]:
    """A probability output (softmax, sigmoid) or a loss computed in float16/bfloat16 (the
    trial's float32 cast after it said where ``cast``)."""
    hazards = []
    appended = (
        "this trial appends a float32 cast"
        if cast
        else "this trial adds no cast, as your run has none"
    )
    dtype = low[0] if low else None
    named = [
        layer
        for layer in output_layers(model)
        if _activation_name(layer) and str(getattr(layer, "compute_dtype", "")) in _LOW
    ]
    if named:
        layer = named[0]
        kind = str(layer.compute_dtype)
        hazards.append(
            Hazard(
                LOW_PRECISION_OUTPUT,
                policy,
                f"layer '{layer.name}' ({type(layer).__name__})",
                f"the model's output {_activation_name(layer)} is computed in {kind}, which "
                f"keeps about {_DIGITS[kind]} significant digits"
                + (f" and nothing below {FLOAT16_TINY:.1e}" if kind == "float16" else "")
                + ": small probabilities and the log in the loss lose their precision ("
                + (
                    f"{appended} after it, which does not help the softmax)"
                    if cast
                    else f"{appended})"
                ),
                f'give that layer dtype="float32" (e.g. Dense(..., activation='
                f'"{_activation_name(layer)}", dtype="float32"), or a separate '
                'Activation(..., dtype="float32") after linear logits)',
                figure=f"{_activation_name(layer)} in {kind}",
            )
        )
    elif dtype is not None:
        hazards.append(
            Hazard(
                LOW_PRECISION_OUTPUT,
                policy,
                None,
                f"the model's output is {dtype}: the loss sees {dtype} predictions ({appended})",
                'give the model\'s last layer dtype="float32" '
                '(e.g. Activation("linear", dtype="float32"))',
                figure=f"output in {dtype}",
            )
        )
    loss_dtype = str(getattr(loss, "dtype", "") or "")
    if loss_dtype in _LOW:
        hazards.append(
            Hazard(
                LOW_PRECISION_OUTPUT,
                policy,
                f"loss {getattr(loss, 'name', type(loss).__name__)!r}",
                f"the loss is computed in {loss_dtype}",
                'create the loss with dtype="float32" (Keras\'s default)',
                figure=f"loss in {loss_dtype}",
            )
        )
    return hazards


_LOW = LOW_PRECISION_DTYPES
_DIGITS = {"float16": "3", "bfloat16": "2"}


def check_model(
    model: keras.Model,
    policy: str,
    batch_size: int,
    sample_x: Any,
    loss: Any = None,
    tensor_cores: bool = False,
    cast: bool = True,
) -> tuple[keras.Model, list[tuple[str, str]], list[Hazard]]:
    """Run the checks; returns the model to train (wrapped in a float32 cast of its
    low-precision outputs where ``cast``), ``(code, message)`` warnings and hazards.

    No cast (``cast`` false) where the user's run will not have one (issue 71): a training
    script that ``mptune run`` runs as written, a model whose ``train_step`` is its own (a
    wrapper would lose it). Its trial then fails where the run would (a metric with no
    float16 kernel), instead of passing on a cast the run lacks."""
    warnings: list[tuple[str, str]] = []
    hazards: list[Hazard] = []
    if policy == FLOAT32:
        return model, warnings, hazards
    low = low_precision_outputs(model, sample_x)
    hazards += output_hazards(model, policy, loss, low, cast)
    if low and cast:
        model = with_float32_output(model)
    if tensor_cores:
        narrow = narrow_layers(model)
        if narrow:
            more = f" and {len(narrow) - 6} more" if len(narrow) > 6 else ""
            shown = ", ".join(narrow[:6]) + more
            warnings.append(
                (
                    "not_multiple_of_8",
                    f"widths that are not multiples of 8 keep Tensor Cores idle: {shown}",
                )
            )
        if batch_size % 8:
            warnings.append(
                (
                    "batch_not_multiple_of_8",
                    f"batch size {batch_size} is not a multiple of 8 (Tensor Core advice)",
                )
            )
    return model, warnings, hazards
