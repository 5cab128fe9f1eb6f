"""Every private Keras name mptune relies on, in one place (issue 72).

Keras' public API does not say everything a trial has to read or do: which layers a custom
layer holds, the shapes a layer was built for, what a model was compiled with, the JAX state
``fit`` threads through its steps. Each such use is a function or a constant here, with a line
saying why mptune needs it and which Keras releases have it (read in the source of releases
3.0, 3.3, 3.5, 3.6, 3.8 to 3.13 and 3.15.1 on 2026-12-06: "3.5-3.15.1" names the first of
those that has it). The rest of mptune calls these and names no private Keras attribute
or ``keras.src`` module itself; ``tests/tuner/test_keras_private.py`` checks each name on a real
model, so that a Keras release that changes one fails there, by name, and checks that
:data:`PRIVATE_NAMES` appear nowhere else under ``tuner/`` and ``app/``.

Only the worker's floor imports this module (as ``keras_setup.py``: the layers contract in
``pyproject.toml``); it imports nothing of mptune.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: The attribute names and ``keras.src`` modules used here, and nowhere else in tuner/ or app/
#: (the test scans the source for each).
PRIVATE_NAMES = (
    "_flatten_layers",
    "_layers",
    "_trainable_variables",
    "_kernel",
    "_build_shapes_dict",
    "_compile_config",
    "_distribute_strategy",
    "_iterations",
    "_inbound_nodes",
    "_keras_history",
    "_inputs_struct",
    "_outputs_struct",
    "_symbolic_build",
    "_maybe_symbolic_build",
    "_get_jax_state",
    "_jax_state_synced",
    "_jax_state",
    "_make_function",
    "_distribute_data",
)

#: Module paths of Keras 2 classes (tf_keras, Keras 3's ``keras.src.legacy``, TF's own copy):
#: a model or optimizer from there is refused by name. ``keras.src.legacy``: Keras 3.0-3.15.1.
LEGACY_MODULES = ("tf_keras", "keras.src.legacy", "tensorflow.python.keras")

#: The global attribute every public way of setting the precision policy ends in
#: (``set_global_policy``, ``keras.config.set_dtype_policy``): a script's own setting is seen
#: there. Keras 3.0-3.15.1.
GLOBAL_POLICY_ATTRIBUTE = "dtype_policy"

SetGlobalAttribute = Callable[[str, Any], None]


@contextmanager
def global_attribute_setter(
    wrap: Callable[[SetGlobalAttribute], SetGlobalAttribute],
) -> Iterator[None]:
    """While it lasts, ``keras.src.backend.common.global_state.set_global_attribute`` is
    ``wrap(original)``: a script's trial sees (and may hold back) the policy the script sets,
    whichever public name it sets it with. Keras 3.0-3.15.1."""
    from keras.src.backend.common import global_state

    original = global_state.set_global_attribute
    global_state.set_global_attribute = wrap(original)
    try:
        yield
    finally:
        global_state.set_global_attribute = original


def policy_getter_code() -> Any:
    """The code of Keras' global policy getter (``keras.config.dtype_policy``, defined in
    ``keras.src.dtype_policies.dtype_policy``), which sets ``DTypePolicy(floatx())`` itself the
    first time a layer reads the policy and none is set: a setting that is Keras' default, not
    a script's (issue 71: a KerasHub backbone's first layer met it). Keras 3.0-3.15.1."""
    from keras.src.dtype_policies import dtype_policy

    return dtype_policy.dtype_policy.__code__


def seed_global_generators(seed: int) -> None:
    """Keras' global seed and a fresh global seed generator, as ``keras.utils.set_random_seed``
    sets them, without the import of TensorFlow that function makes on every backend.
    ``rng_utils.GLOBAL_RANDOM_SEED``: Keras 3.10-3.15.1; ``seed_generator.GLOBAL_SEED_GENERATOR``:
    3.13-3.15.1."""
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils import rng_utils

    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)


def tracked_layers(layer: Any, include_self: bool = False) -> list[Any] | None:
    """Every layer ``layer`` holds at any depth, as Keras tracks them (``_flatten_layers``):
    nested models' layers and those a custom layer keeps in its attributes, which
    ``Model.layers`` does not show. None for an object that is no Keras layer. Keras 3.0-3.15.1."""
    flatten = getattr(layer, "_flatten_layers", None)
    if not callable(flatten):
        return None
    return list(flatten(include_self=include_self, recursive=True))


def direct_sublayers(layer: Any) -> Any:
    """The layers ``layer`` holds itself, one level down (``_layers``; a custom layer's too,
    where ``layers`` is a model's only), or None. Keras 3.0-3.15.1."""
    return getattr(layer, "_layers", None)


def own_trainable_variables(layer: Any) -> list[Any]:
    """The trainable variables ``layer`` holds itself, not its sublayers'
    (``_trainable_variables``): each weight counted once, at the layer that computes with it.
    Keras 3.0-3.15.1."""
    return list(getattr(layer, "_trainable_variables", []) or [])


def kernel_variable(layer: Any) -> Any:
    """A ``Dense``/``EinsumDense`` layer's kernel variable itself (``_kernel``), whose shape
    is the weight's; ``kernel`` may be another tensor (LoRA's sum, a quantized layer's). None
    where the layer keeps none. Keras 3.3-3.15.1."""
    return getattr(layer, "_kernel", None)


def build_shapes(layer: Any) -> dict[str, Any]:
    """The input shapes ``layer`` was built for, by ``build``'s argument name
    (``_build_shapes_dict``): where its multiply-adds are counted from. Keras 3.0-3.15.1."""
    return dict(getattr(layer, "_build_shapes_dict", None) or {})


def compile_arguments(model: Any) -> dict[str, Any]:
    """The arguments ``model.compile`` was called with (``_compile_config.config``): the
    metrics, loss weights and ``auto_scale_loss`` a script's model was compiled with, to
    compile it again the same. Empty where it was not compiled. Keras 3.0-3.15.1."""
    return getattr(getattr(model, "_compile_config", None), "config", None) or {}


def distribute_strategy(model: Any) -> Any:
    """The ``tf.distribute`` strategy ``model`` was built under (``_distribute_strategy``, on
    TensorFlow), or None: its scope to compile in, its replicas to split batches over.
    Keras 3.0-3.15.1."""
    return getattr(model, "_distribute_strategy", None)


def iterations_variable(optimizer: Any) -> Any:
    """The variable counting the steps ``optimizer`` applied (``_iterations``): it stands still
    on a step the loss scaler skipped. None where it has none. Keras 3.5-3.15.1."""
    return getattr(optimizer, "_iterations", None)


def inbound_tensors(layer: Any) -> list[Any]:
    """The tensors ``layer`` was called on in a functional graph (``_inbound_nodes``'
    ``input_tensors``): which model inputs feed which layer. Keras 3.0-3.15.1."""
    tensors: list[Any] = []
    for node in getattr(layer, "_inbound_nodes", []):
        tensors.extend(getattr(node, "input_tensors", ()))
    return tensors


def producer(tensor: Any) -> Any:
    """The layer a symbolic tensor came out of (``_keras_history[0]``), or None.
    Keras 3.0-3.15.1."""
    history = getattr(tensor, "_keras_history", None)
    return history[0] if history else None


def input_structure(model: Any) -> Any:
    """The structure (a dict, a list, one tensor) a functional model's inputs were given in
    (``_inputs_struct``), to feed synthetic data in it; None where there is none.
    Keras 3.0-3.15.1."""
    return getattr(model, "_inputs_struct", None)


def output_structure(model: Any) -> Any:
    """The same for its outputs (``_outputs_struct``), to shape synthetic targets.
    Keras 3.0-3.15.1."""
    return getattr(model, "_outputs_struct", None)


def symbolic_build(model: Any, batch: Any) -> None:
    """What ``fit`` does before its first step (``_symbolic_build``): the optimizer's and the
    metrics' variables made, so a trial's own step loop can be traced. Keras 3.3-3.15.1."""
    model._symbolic_build(data_batch=batch)


def maybe_symbolic_build(model: Any, batch: Any) -> None:
    """TensorFlow's form of it (``_maybe_symbolic_build``), made in the model's strategy as
    ``fit`` makes it under a ``tf.distribute`` strategy. Keras 3.5-3.15.1."""
    model._maybe_symbolic_build(data_batch=batch)


def jax_state(model: Any, purge: bool = False) -> Any:
    """The state JAX's ``fit`` threads through its steps (``_get_jax_state``): trainable,
    non-trainable, optimizer and metrics variables. With ``purge``, the model's variables
    are released and marked out of sync (``_jax_state_synced``), as ``fit`` does, until
    :func:`put_jax_state`. Keras 3.3-3.15.1."""
    state = model._get_jax_state(
        trainable_variables=True,
        non_trainable_variables=True,
        optimizer_variables=True,
        metrics_variables=True,
        **({"purge_model_variables": True} if purge else {}),
    )
    if purge:
        model._jax_state_synced = False
    return state


def put_jax_state(model: Any, state: Any) -> None:
    """The state from :func:`jax_state`, after steps, written back into ``model``'s
    variables (``_jax_state`` read by ``jax_state_sync``), as ``fit`` does at its end.
    Keras 3.3-3.15.1."""
    trainable, frozen, optimizer, metrics = state
    model._jax_state = {
        "trainable_variables": trainable,
        "non_trainable_variables": frozen,
        "optimizer_variables": optimizer,
        "metrics_variables": metrics,
    }
    model.jax_state_sync()
    model._jax_state = None


def make_function(model: Any, step: Any) -> Any:
    """The ``train_function`` JAX's trainer makes around a jitted step (``_make_function``),
    so a step mptune jitted itself (to compile it ahead and read its memory) is the one
    ``fit``'s loop calls. Keras 3.8-3.15.1."""
    return model._make_function(step)


def distribute_data(batch: Any) -> Any:
    """A batch laid out over the devices of the current ``keras.distribution`` as JAX's
    ``fit`` lays it out (``keras.src.backend.jax.trainer._distribute_data``).
    Keras 3.0-3.15.1."""
    from keras.src.backend.jax.trainer import _distribute_data

    return _distribute_data(batch)
