"""Checks of a model before its trial, with the advice the mixed-precision guides give.

* A float16/bfloat16 model output: the guides say to keep the last layer (the softmax) in
  float32 for numeric stability. The trial warns and appends a float32 cast.
* Widths that are not multiples of 8: NVIDIA's Tensor Core guidance is that matrix dimensions
  should be multiples of 8 for float16 (NVIDIA, "Train With Mixed Precision", Deep Learning
  Performance Guide).
"""

from __future__ import annotations

from typing import Any

import keras

from tuner.policies import FLOAT32
from tuner.worker.loading import _all_layers

#: Layer attributes that become a matrix dimension.
_WIDTH_ATTRIBUTES = ("units", "filters", "output_dim", "key_dim")


def low_precision_outputs(model: keras.Model, sample_x: Any) -> list[str]:
    """The dtypes of outputs in float16 or bfloat16 (empty when there are none)."""
    outputs = getattr(model, "outputs", None)
    if outputs:
        dtypes = [str(o.dtype) for o in outputs]
    else:  # a subclassed model: run it once to see
        result = model(sample_x, training=False)
        results = result if isinstance(result, (list, tuple)) else [result]
        dtypes = [str(getattr(r, "dtype", "float32")) for r in results]
    return [d.replace("tf.", "") for d in dtypes if "float16" in d]


def with_float32_output(model: keras.Model) -> keras.Model:
    """The same model with its outputs cast to float32."""
    cast = keras.layers.Activation("linear", dtype="float32", name="mptune_float32_output")
    outputs = getattr(model, "outputs", None)
    if outputs:
        new_outputs = [cast(o) for o in outputs] if len(outputs) > 1 else cast(outputs[0])
        return keras.Model(model.inputs, new_outputs, name=model.name)
    return _Float32Output(model)


# keras ships no type information, so keras.Model is Any to mypy.
class _Float32Output(keras.Model):  # type: ignore[misc]
    """Wraps a subclassed model whose outputs are float16."""

    def __init__(self, inner: keras.Model) -> None:
        super().__init__(name=f"{inner.name}_float32_output")
        self.inner = inner

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        result = self.inner(inputs, training=training)
        if isinstance(result, (list, tuple)):
            return [keras.ops.cast(r, "float32") for r in result]
        return keras.ops.cast(result, "float32")


def narrow_layers(model: keras.Model) -> list[str]:
    """Layers with a width that is not a multiple of 8, as ``name (attribute=value)``."""
    found = []
    for layer in _all_layers(model):
        for attribute in _WIDTH_ATTRIBUTES:
            value = getattr(layer, attribute, None)
            if isinstance(value, int) and value % 8:
                found.append(f"{layer.name} ({attribute}={value})")
    return found


def check_model(
    model: keras.Model, policy: str, batch_size: int, sample_x: Any
) -> tuple[keras.Model, list[tuple[str, str]]]:
    """Run the checks; returns the model to train (maybe wrapped) and ``(code, message)``
    warnings."""
    warnings: list[tuple[str, str]] = []
    low = low_precision_outputs(model, sample_x)
    if low:
        warnings.append(
            (
                "low_precision_output",
                f"the model's output is {low[0]}: the mixed-precision guides keep the "
                "last layer in float32 (e.g. Activation('softmax', dtype='float32')); "
                "this trial appends a float32 cast",
            )
        )
        model = with_float32_output(model)
    if policy != FLOAT32:
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
    return model, warnings
