"""What a model trains under, read back from the model itself (issue 49), never from what was
set: the precision its layers compute in, its optimizer's loss scaling, its compile settings,
and the distribution it trains in.

A script may set its own precision (``set_global_policy``, ``dtype=`` on its layers), its own
``LossScaleOptimizer``, ``jit_compile`` and ``steps_per_execution``, and may build its model
under a ``tf.distribute`` strategy or a ``keras.distribution``. A trial reads these twice: from
the model the script hands to ``fit`` (what the user runs today, the baseline), and from the
model the trial compiled (what the trial's figure is about). ``mptune run`` reads the second
from inside the script's fit, for the line it prints.

This module imports Keras; only the worker and ``apply_script`` use it.
"""

from __future__ import annotations

import collections
from typing import Any

import keras

from tuner import keras_private
from tuner.setup import LossScale, Policy


def layer_policy(model: Any) -> str:
    """The policy most of ``model``'s weights are computed under: the compute and variable
    dtypes of its layers' policies (:meth:`tuner.setup.Policy.of_dtypes`: bfloat16 compute
    over float32 variables is mixed_bfloat16, over bfloat16 ones the full bfloat16), each
    counted by the weights it holds (a float32 output layer, the guides' advice under mixed
    precision, does not make a mixed model float32). A model with no weights reads as its own
    policy's; a pair of dtypes mptune knows no policy for reads as its compute dtype."""
    counts: collections.Counter[str] = collections.Counter()
    for layer in _leaves(model):
        weights = sum(int(_size(w)) for w in keras_private.own_trainable_variables(layer))
        if not weights:
            continue
        own = getattr(layer, "dtype_policy", None)
        compute = str(getattr(own, "compute_dtype", None))
        variable = str(getattr(own, "variable_dtype", None) or compute)
        known = Policy.of_dtypes(compute, variable)
        counts[known.name if known is not None else compute] += weights
    if not counts:
        return str(getattr(getattr(model, "dtype_policy", None), "name", "float32"))
    return counts.most_common(1)[0][0]


def trainable_share(model: Any) -> float | None:
    """The share of ``model``'s weights (by values) that train: a frozen backbone with a small
    head, or LoRA (its adapters train, its kernels do not), holds few; None for a model with
    no weights."""
    trainable = sum(_size(w) for w in getattr(model, "trainable_weights", []) or [])
    frozen = sum(_size(w) for w in getattr(model, "non_trainable_weights", []) or [])
    total = trainable + frozen
    return trainable / total if total else None


def trainable_dtypes(model: Any) -> tuple[str, ...]:
    """The dtypes ``model``'s trainable weights are kept in (LoRA's adapters are float32 under
    any policy), sorted."""
    return tuple(
        sorted({str(getattr(w, "dtype", "")) for w in getattr(model, "trainable_weights", [])})
    )


def loss_scale_of(optimizer: Any) -> LossScale:
    """The loss scaling ``optimizer`` applies: a ``LossScaleOptimizer``'s dynamic scale (its
    initial scale and growth steps), a ``loss_scale_factor`` (fixed), or none."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return LossScale(
            "dynamic",
            float(optimizer.initial_scale),
            int(optimizer.dynamic_growth_steps),
        )
    factor = getattr(optimizer, "loss_scale_factor", None)
    if factor:
        return LossScale("fixed", value=float(factor))
    return LossScale("none")


def distribution_of(model: Any) -> tuple[str | None, int]:
    """The distribution ``model`` trains in, by name (``MirroredStrategy``, ``DataParallel``),
    and over how many devices; ``(None, 1)`` for none."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        strategy = keras_private.distribute_strategy(model)
        if strategy is not None:
            return type(strategy).__name__, int(strategy.num_replicas_in_sync)
        return None, 1
    if backend == "jax":
        found = keras.distribution.distribution()
        if found is not None:
            mesh = getattr(found, "device_mesh", None)
            devices = getattr(mesh, "devices", None)
            return type(found).__name__, int(getattr(devices, "size", 1) or 1)
    return None, 1


def quantization_of(model: Any) -> str | None:
    """The quantization mode (``float8``) most of ``model``'s layers that Keras quantized are
    in, read from their policies (``float8_from_mixed_bfloat16``); None where none is."""
    from tuner import keras_setup

    modes = collections.Counter(
        str(layer.dtype_policy.quantization_mode) for layer in keras_setup.quantized_layers(model)
    )
    return modes.most_common(1)[0][0] if modes else None


def quantizable_work(model: Any) -> tuple[float | None, tuple[str, ...]]:
    """The share of ``model``'s multiply-adds per sample that sit in the layers Keras'
    ``model.quantize()`` takes (``Dense`` and ``EinsumDense`` themselves, without LoRA), and
    the layers of those kinds it leaves out, each with why (a subclass, LoRA).

    A layer's multiply-adds are its kernel's size times the places it is applied: its output's
    size over the kernel's output dimensions (a Dense layer's tokens, a convolution's output
    positions), from the shape it was built for; a dimension unknown then (None) counts as 1.
    Matmuls outside layers with a kernel (attention's scores) are not counted. None for a
    model with no layer with a kernel."""
    from keras.layers import Dense, EinsumDense

    taken = total = 0.0
    left: list[str] = []
    for layer in _leaves(model):
        kernel = keras_private.kernel_variable(layer)
        if kernel is None:
            kernel = getattr(layer, "kernel", None)
        shape = tuple(int(d or 1) for d in getattr(kernel, "shape", ()) or ())
        if not shape:
            continue
        work = float(_product(shape) * _places(layer, shape))
        total += work
        if isinstance(layer, (Dense, EinsumDense)):
            if type(layer) not in (Dense, EinsumDense):
                left.append(
                    f"{layer.name} (a {type(layer).__name__}: a subclass of "
                    f"{type(layer).__mro__[1].__name__})"
                )
            elif getattr(layer, "lora_enabled", False):
                left.append(f"{layer.name} (LoRA enabled)")
            else:
                taken += work
    return (taken / total if total else None), tuple(left)


def _places(layer: Any, kernel_shape: tuple[int, ...]) -> int:
    """How many times per sample ``layer`` applies its kernel (see :func:`quantizable_work`)."""
    shapes = keras_private.build_shapes(layer)
    input_shape = next(iter(shapes.values()), None)
    try:
        output = getattr(layer, "full_output_shape", None) or layer.compute_output_shape(
            input_shape
        )
    except Exception:  # noqa: BLE001 - a layer that cannot say: applied once
        return 1
    if not isinstance(output, (tuple, list)) or not output or isinstance(output[0], (tuple, list)):
        return 1
    equation = getattr(layer, "equation", None)
    if isinstance(equation, str) and "->" in equation and "," in equation:
        inputs, out_spec = equation.split("->")
        kernel_spec = inputs.split(",")[1].replace("...", "")
        channels = _product(
            d for d, letter in zip(kernel_shape, kernel_spec, strict=False) if letter in out_spec
        )
    else:
        channels = kernel_shape[-1]
    return max(1, _product(int(d or 1) for d in output[1:]) // max(1, channels))


def _product(values: Any) -> int:
    result = 1
    for value in values:
        result *= int(value)
    return result


def read(model: Any) -> dict[str, Any]:
    """Everything :mod:`tuner.worker.as_trained` reads, as the trial record's ``trained``
    (:class:`tuner.trials.result.AsTrained`) fields: ``policy``, ``loss_scale`` (its text),
    ``jit_compile`` (where compiled), ``steps_per_execution``, ``distribution``, ``replicas``,
    ``quantized``, ``quantizable_share`` and ``not_quantizable``."""
    compiled = bool(getattr(model, "compiled", False))
    optimizer = getattr(model, "optimizer", None) if compiled else None
    distribution, replicas = distribution_of(model)
    share, left = quantizable_work(model)
    trainable = trainable_share(model)
    jit = getattr(model, "jit_compile", None) if compiled else None
    return {
        "policy": layer_policy(model),
        "loss_scale": str(loss_scale_of(optimizer)) if optimizer is not None else None,
        "jit_compile": jit if isinstance(jit, bool) else None,
        "steps_per_execution": int(getattr(model, "steps_per_execution", 1) or 1)
        if compiled
        else None,
        "distribution": distribution,
        "replicas": replicas,
        "quantized": quantization_of(model),
        "quantizable_share": share if share is None else round(share, 4),
        "not_quantizable": left,
        "trainable_share": None if trainable is None else round(trainable, 4),
        "trainable_dtypes": trainable_dtypes(model),
    }


def _leaves(model: Any) -> list[Any]:
    """``model``'s layers that hold their own weights (nested models' layers, not the models)."""
    found = []
    for layer in keras_private.tracked_layers(model) or []:
        if not keras_private.direct_sublayers(layer):
            found.append(layer)
    return found


def _size(variable: Any) -> int:
    size = 1
    for dim in getattr(variable, "shape", ()):
        size *= int(dim or 1)
    return size
