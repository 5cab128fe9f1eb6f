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

from tuner.setup import LossScale

#: The compute dtype each policy trains its layers in.
COMPUTE_DTYPE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
#: ...and back: the policy whose layers compute in a dtype.
POLICY_OF = {v: k for k, v in COMPUTE_DTYPE.items()}


def layer_policy(model: Any) -> str:
    """The policy most of ``model``'s weights are computed under: the compute dtype of its
    layers, each counted by the weights it holds (a float32 output layer, the guides' advice
    under mixed precision, does not make a mixed model float32). A model with no weights
    reads as its own policy's."""
    counts: collections.Counter[str] = collections.Counter()
    for layer in _leaves(model):
        weights = sum(int(_size(w)) for w in getattr(layer, "_trainable_variables", []) or [])
        if not weights:
            continue
        dtype = getattr(getattr(layer, "dtype_policy", None), "compute_dtype", None)
        counts[str(dtype)] += weights
    if not counts:
        return str(getattr(getattr(model, "dtype_policy", None), "name", "float32"))
    dtype = counts.most_common(1)[0][0]
    return POLICY_OF.get(dtype, dtype)


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
        strategy = getattr(model, "_distribute_strategy", None)
        if strategy is not None:
            return type(strategy).__name__, int(strategy.num_replicas_in_sync)
        return None, 1
    if backend == "jax":
        from keras.src.distribution import distribution_lib

        found = distribution_lib.distribution()
        if found is not None:
            mesh = getattr(found, "device_mesh", None)
            devices = getattr(mesh, "devices", None)
            return type(found).__name__, int(getattr(devices, "size", 1) or 1)
    return None, 1


def read(model: Any) -> dict[str, Any]:
    """Everything :mod:`tuner.worker.as_trained` reads, as the trial record's ``trained``
    (:class:`tuner.trials.result.AsTrained`) fields: ``policy``, ``loss_scale`` (its text),
    ``jit_compile`` (where compiled), ``steps_per_execution``, ``distribution`` and
    ``replicas``."""
    compiled = bool(getattr(model, "compiled", False))
    optimizer = getattr(model, "optimizer", None) if compiled else None
    distribution, replicas = distribution_of(model)
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
    }


def _leaves(model: Any) -> list[Any]:
    """``model``'s layers that hold their own weights (nested models' layers, not the models)."""
    found = []
    for layer in getattr(model, "_flatten_layers", lambda **_: [])(include_self=False):
        if not getattr(layer, "_layers", None):
            found.append(layer)
    return found


def _size(variable: Any) -> int:
    size = 1
    for dim in getattr(variable, "shape", ()):
        size *= int(dim or 1)
    return size
