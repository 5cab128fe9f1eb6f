"""One walk over a model's layers (``loading.all_layers``) for every check that reads them: it
reaches the layers a custom layer keeps in its attributes, which ``Model.layers`` does not show."""

from __future__ import annotations

import keras

from tuner.worker.checks import narrow_layers
from tuner.worker.loading import all_layers


class Block(keras.layers.Layer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(12, name="inner_dense")

    def call(self, x):
        return self.inner(x)


def test_the_walk_and_the_tensor_core_check_see_inside_custom_layers() -> None:
    inputs = keras.Input((16,))
    x = Block(name="block")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(8, name="head")(x))
    names = [layer.name for layer in all_layers(model)]
    assert "block" in names
    assert "inner_dense" in names
    assert "head" in names
    assert model.name not in names
    assert all_layers(model, include_self=True)[0] is model
    assert narrow_layers(model) == ["inner_dense (units=12)"]
