"""Every private Keras name mptune relies on (tuner/keras_private.py), each checked on a real
tiny model for the meaning mptune uses, so that a Keras release that renames or changes one
fails here, by name; and a scan of tuner/ and app/ that finds them in that module alone.

In-process on TensorFlow (the suite's default backend); the JAX trainer's names in one JAX
process of a few seconds. No trial worker."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

from tuner import keras_private
from tuner.worker import script

ROOT = Path(__file__).resolve().parents[2]


class Block(keras.layers.Layer):
    """A custom layer holding a Dense in an attribute (which ``Model.layers`` does not show)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(6, name="inner")

    def call(self, x: Any) -> Any:
        return self.inner(x)


def _model() -> keras.Model:
    inputs = keras.Input((4,), name="x")
    hidden = Block(name="block")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3, name="head")(hidden))


def _batch(n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4)).astype("float32"), rng.normal(size=(n, 3)).astype("float32")


# ---- one test per name -------------------------------------------------------------------


def check_global_attribute_setter() -> None:
    """The monkeypatch target exists, and every public way of setting the policy goes through
    it under GLOBAL_POLICY_ATTRIBUTE; it is put back after."""
    from keras.src.backend.common import global_state

    original = global_state.set_global_attribute
    seen: list[str] = []

    def wrap(inner: keras_private.SetGlobalAttribute) -> keras_private.SetGlobalAttribute:
        def spy(name: str, value: Any) -> None:
            seen.append(name)
            inner(name, value)

        return spy

    before = keras.config.dtype_policy().name
    try:
        with keras_private.global_attribute_setter(wrap):
            keras.mixed_precision.set_global_policy("mixed_bfloat16")
            keras.config.set_dtype_policy("float32")
    finally:
        keras.config.set_dtype_policy(before)
    assert seen == [keras_private.GLOBAL_POLICY_ATTRIBUTE] * 2, seen
    assert global_state.set_global_attribute is original


def check_policy_held_by_a_script() -> None:
    """The policy a script sets is recorded and held back (tuner.worker.script.policy_held)."""
    held: list[script.HeldSetting] = []
    before = keras.config.dtype_policy().name
    with script.policy_held(held):
        keras.mixed_precision.set_global_policy("mixed_float16")
        assert keras.config.dtype_policy().name == before, "the script's policy went through"
    assert [h.policy for h in held] == ["mixed_float16"]


def check_seed_global_generators() -> None:
    """The two global attributes are the ones keras.utils.set_random_seed sets, and a fresh
    generator follows."""
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils import rng_utils

    names: list[str] = []

    def wrap(inner: keras_private.SetGlobalAttribute) -> keras_private.SetGlobalAttribute:
        def spy(name: str, value: Any) -> None:
            names.append(name)
            inner(name, value)

        return spy

    with keras_private.global_attribute_setter(wrap):
        keras.utils.set_random_seed(3)
    assert rng_utils.GLOBAL_RANDOM_SEED in names, names
    assert seed_generator.GLOBAL_SEED_GENERATOR in names, names
    old = seed_generator.global_seed_generator()
    keras_private.seed_global_generators(11)
    assert global_state.get_global_attribute(rng_utils.GLOBAL_RANDOM_SEED) == 11
    assert seed_generator.global_seed_generator() is not old


def check_tracked_layers() -> None:
    model = _model()
    names = [layer.name for layer in keras_private.tracked_layers(model) or []]
    assert {"block", "inner", "head"} <= set(names), names
    assert model.name not in names
    assert keras_private.tracked_layers(model, include_self=True)[0] is model  # type: ignore[index]
    assert keras_private.tracked_layers(object()) is None


def check_direct_sublayers() -> None:
    model = _model()
    block = model.get_layer("block")
    assert [layer.name for layer in keras_private.direct_sublayers(block)] == ["inner"]
    assert not keras_private.direct_sublayers(model.get_layer("head"))


def check_own_trainable_variables() -> None:
    model = _model()
    block, head = model.get_layer("block"), model.get_layer("head")
    assert keras_private.own_trainable_variables(block) == []
    assert len(block.trainable_variables) == 2  # the inner Dense's, counted there
    own = keras_private.own_trainable_variables(head)
    assert [tuple(v.shape) for v in own] == [(6, 3), (3,)]


def check_kernel_variable() -> None:
    dense = keras.layers.Dense(5)
    dense.build((None, 7))
    kernel = keras_private.kernel_variable(dense)
    assert isinstance(kernel, keras.Variable)
    assert tuple(kernel.shape) == (7, 5)
    assert kernel is dense.kernel
    assert keras_private.kernel_variable(keras.layers.ReLU()) is None


def check_build_shapes() -> None:
    model = _model()
    shapes = keras_private.build_shapes(model.get_layer("head"))
    assert [tuple(s) for s in shapes.values()] == [(None, 6)], shapes


def check_compile_arguments() -> None:
    model = _model()
    assert keras_private.compile_arguments(model) == {}
    model.compile(optimizer="adam", loss="mse", metrics=["mae"], loss_weights=[0.5])
    asked = keras_private.compile_arguments(model)
    assert asked["metrics"] == ["mae"]
    assert asked["loss_weights"] == [0.5]
    assert asked.get("auto_scale_loss", True) is True


def check_distribute_strategy() -> None:
    import tensorflow as tf

    assert keras_private.distribute_strategy(_model()) is None
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = _model()
    assert keras_private.distribute_strategy(model) is strategy


def check_iterations_variable() -> None:
    optimizer = keras.optimizers.SGD(0.1)
    weight = keras.Variable(np.ones((2,), "float32"))
    optimizer.build([weight])
    counter = keras_private.iterations_variable(optimizer)
    assert int(counter.numpy()) == 0
    optimizer.apply_gradients([(np.ones((2,), "float32"), weight)])
    assert int(counter.numpy()) == 1
    assert keras_private.iterations_variable(object()) is None


def check_inbound_tensors_and_producer() -> None:
    model = _model()
    block = model.get_layer("block")
    tensors = keras_private.inbound_tensors(block)
    assert len(tensors) == 1
    assert tensors[0] is model.inputs[0]
    assert keras_private.producer(model.outputs[0]) is model.get_layer("head")
    assert keras_private.producer(np.zeros(2)) is None


def check_input_and_output_structure() -> None:
    a, b = keras.Input((2,), name="a"), keras.Input((3,), name="b")
    joined = keras.layers.Concatenate()([a, b])
    model = keras.Model({"a": a, "b": b}, [keras.layers.Dense(1)(joined), joined])
    inputs = keras_private.input_structure(model)
    assert isinstance(inputs, dict)
    assert sorted(inputs) == ["a", "b"]
    outputs = keras_private.output_structure(model)
    assert isinstance(outputs, (list, tuple))
    assert len(outputs) == 2


def check_symbolic_build() -> None:
    model = _model()
    model.compile(optimizer="adam", loss="mse")
    assert not model.optimizer.built
    keras_private.symbolic_build(model, _batch())
    assert model.optimizer.built
    assert model.optimizer.variables


def check_maybe_symbolic_build() -> None:
    import tensorflow as tf

    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = _model()
        model.compile(optimizer="adam", loss="mse")
    keras_private.maybe_symbolic_build(model, _batch())
    assert model.optimizer.built


def check_legacy_modules() -> None:
    import importlib.util

    assert importlib.util.find_spec("keras.src.legacy") is not None
    tf_keras = pytest.importorskip("tf_keras")
    assert tf_keras.Model.__module__.startswith(keras_private.LEGACY_MODULES)
    assert not keras.Model.__module__.startswith(keras_private.LEGACY_MODULES)


_JAX_CHECK = textwrap.dedent("""
    import jax, keras, numpy as np
    from tuner import keras_private

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    x = np.ones((8, 4), "float32")
    y = np.zeros((8, 3), "float32")
    keras_private.symbolic_build(model, (x, y))
    model.make_train_function()
    step = jax.jit(model.train_step, donate_argnums=0)
    model.train_function = keras_private.make_function(model, step)
    batch = keras_private.distribute_data((x, y))
    assert all(isinstance(t, jax.Array) for t in batch), batch
    state = keras_private.jax_state(model)
    assert [len(part) for part in state] == [2, 0, len(model.optimizer.variables),
                                             len(model.metrics_variables)], state
    before = np.array(model.trainable_variables[0].numpy())
    state = keras_private.jax_state(model, purge=True)
    assert model._jax_state_synced is False
    logs, state = model.train_function(state, iter([batch]))
    assert np.isfinite(float(logs["loss"]))
    keras_private.put_jax_state(model, state)
    assert model._jax_state is None
    after = model.trainable_variables[0].numpy()
    assert not np.allclose(before, after), "the step's state was not written back"
    print("jax-ok")
""")


def check_jax_trainer() -> None:
    """_get_jax_state, _jax_state_synced, _jax_state, _make_function and _distribute_data, on
    JAX: the state taken, one step through a train_function made around our jitted step, the
    state written back into the variables."""
    pytest.importorskip("jax")
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _JAX_CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jax-ok" in proc.stdout


def check_policy_getter_code() -> None:
    """The getter that sets Keras' default policy is the public keras.config.dtype_policy, and
    it sets the global attribute itself where none is set (what script.py's hold tells apart
    from a script's own setting)."""
    import keras

    code = keras_private.policy_getter_code()
    assert keras.config.dtype_policy.__code__ is code
    callers: list[str] = []

    def wrap(original):
        def setter(name, value):
            if name == keras_private.GLOBAL_POLICY_ATTRIBUTE:
                callers.append(sys._getframe(2).f_code.co_name)
            original(name, value)

        return setter

    before = keras.config.dtype_policy()
    with keras_private.global_attribute_setter(wrap):
        from keras.src.backend.common import global_state

        global_state.set_global_attribute(keras_private.GLOBAL_POLICY_ATTRIBUTE, None)
        keras.config.dtype_policy()
    keras.config.set_dtype_policy(before)
    assert callers[-1] == code.co_name, callers


#: Each private name, and the check above that fails when a Keras release changes it.
CHECKS = {
    "_flatten_layers": check_tracked_layers,
    "_layers": check_direct_sublayers,
    "_trainable_variables": check_own_trainable_variables,
    "_kernel": check_kernel_variable,
    "_build_shapes_dict": check_build_shapes,
    "_compile_config": check_compile_arguments,
    "_distribute_strategy": check_distribute_strategy,
    "_iterations": check_iterations_variable,
    "_inbound_nodes": check_inbound_tensors_and_producer,
    "_keras_history": check_inbound_tensors_and_producer,
    "_inputs_struct": check_input_and_output_structure,
    "_outputs_struct": check_input_and_output_structure,
    "_symbolic_build": check_symbolic_build,
    "_maybe_symbolic_build": check_maybe_symbolic_build,
    "_get_jax_state": check_jax_trainer,
    "_jax_state_synced": check_jax_trainer,
    "_jax_state": check_jax_trainer,
    "_make_function": check_jax_trainer,
    "_distribute_data": check_jax_trainer,
    # the keras.src names that are no attribute of a Keras object
    "global_state.set_global_attribute": check_global_attribute_setter,
    "policy_held": check_policy_held_by_a_script,
    "GLOBAL_RANDOM_SEED, GLOBAL_SEED_GENERATOR": check_seed_global_generators,
    "keras.src.legacy": check_legacy_modules,
    "dtype_policies.dtype_policy": check_policy_getter_code,
}


def test_every_listed_private_name_has_a_check() -> None:
    missing = [name for name in keras_private.PRIVATE_NAMES if name not in CHECKS]
    assert missing == [], f"private Keras names with no check here: {missing}"


@pytest.mark.parametrize("name", list(CHECKS), ids=list(CHECKS))
def test_the_private_name_still_means_what_mptune_uses(name: str) -> None:
    CHECKS[name]()


# ---- the scan -----------------------------------------------------------------------------


#: A string naming a keras.src module (``"keras.src.legacy"``), not prose that mentions one.
_MODULE = re.compile(r"keras\.src(\.\w+)*$")


def _private_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` names a ``keras.src`` module or one of keras_private.PRIVATE_NAMES (as an
    attribute, or as a string: ``getattr(x, "_layers")``). Attributes of ``self`` are mptune's
    own classes'; docstrings and comments are prose."""
    names = set(keras_private.PRIVATE_NAMES)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        hit = None
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras.src"):
            hit = node.module
        elif isinstance(node, ast.Import):
            hit = next((a.name for a in node.names if a.name.startswith("keras.src")), None)
        elif isinstance(node, ast.Attribute) and node.attr in names:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                hit = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = node.value if node.value in names or _MODULE.match(node.value) else None
        if hit:
            found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')} {hit}")
    return found


def test_private_keras_names_are_used_in_keras_private_alone() -> None:
    own = ROOT / "tuner" / "keras_private.py"
    files = sorted((ROOT / "tuner").rglob("*.py")) + sorted((ROOT / "app").rglob("*.py"))
    elsewhere = [hit for path in files if path != own for hit in _private_uses(path)]
    assert elsewhere == [], f"private Keras names outside tuner/keras_private.py: {elsewhere}"
    # and the scan sees them where they are
    seen = {hit.split()[-1] for hit in _private_uses(own)}
    assert set(keras_private.PRIVATE_NAMES) <= seen, set(keras_private.PRIVATE_NAMES) - seen


def test_the_scan_finds_a_private_use(tmp_path: Path) -> None:
    """The scan is not blind: each form it looks for is found in a file that has it."""
    sample = tmp_path / "sample.py"
    text = textwrap.dedent('''
        """keras.src in prose is not a use; nor is _layers."""
        from keras.src.utils import rng_utils
        import keras.src.backend

        def f(model, self):
            self._layers = 1
            return model._compile_config, getattr(model, "_inbound_nodes", None)
    ''')
    sample.write_text(text)
    hits = [h.split(" ", 1)[1] for h in _private_uses(sample, tmp_path)]
    assert sorted(hits) == sorted(
        ["keras.src.utils", "keras.src.backend", "_compile_config", "_inbound_nodes"]
    ), hits
