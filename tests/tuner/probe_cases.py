"""Run the numerics probe on small models of each hazard kind, each twice: as the worker runs it
on this backend, and with every pass eager (JAX's compiled pass turned off), and print, as
JSON, what each run found and where its seconds went. Run by tests/tuner/test_probe_backends.py
with KERAS_BACKEND set, one process per backend."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from tuner import workloads
from tuner.worker import loading, probe, probe_pass

F16, BF16 = "mixed_float16", "mixed_bfloat16"
VOCAB, LENGTH = 5000, 12


class TokenEmbedding(keras.layers.Layer):
    """A custom layer around an Embedding, fed a float32 Input (the published pattern)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tokens = keras.layers.Embedding(VOCAB, 8)

    def call(self, ids: Any) -> Any:
        return self.tokens(ids)


class Cancel(keras.layers.Layer):
    """Adds and subtracts a large offset held in a weight (so that no compiler folds it
    away): float16 keeps only steps of 0.5 at 1000."""

    def build(self, input_shape: Any) -> None:
        self.offset = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(1000.0), trainable=False
        )

    def call(self, x: Any) -> Any:
        offset = keras.ops.cast(self.offset, x.dtype)
        return (x + offset) - offset


class ReadsItsValues(keras.layers.Layer):
    """Reads a value in Python, which a traced function cannot: the pass runs eagerly."""

    def call(self, x: Any) -> Any:
        if float(keras.ops.convert_to_numpy(keras.ops.max(x))) > 1e9:
            return x * 0.5
        return x

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape  # so that building the model does not run call()


class NeedsFloat32(keras.layers.Layer):
    """Fails under a mixed policy only."""

    def call(self, x: Any) -> Any:
        if keras.backend.standardize_dtype(x.dtype) != "float32":
            raise ValueError(f"needs float32 inputs, got {x.dtype}")
        return x

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape


def text_model() -> Any:
    inputs = keras.Input((LENGTH,), name="ids")
    x = TokenEmbedding(name="lookup")(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax", dtype="float32")(x))


def big_activations() -> Any:
    inputs = keras.Input((8,))
    x = keras.layers.Dense(8, kernel_initializer="ones", name="wide_sum")(inputs)
    x = keras.layers.Dense(8, kernel_initializer="ones", name="wider_sum")(x)
    return keras.Model(inputs, keras.layers.Dense(1, dtype="float32", name="out")(x))


def small_mlp() -> Any:
    inputs = keras.Input((16,))
    x = keras.layers.Dense(32, activation="relu")(inputs)
    x = keras.layers.Dense(32, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))


def around(layer: Callable[[], Any]) -> Callable[[], Any]:
    def build() -> Any:
        inputs = keras.Input((8,))
        x = keras.layers.Dense(8, name="before")(inputs)
        x = layer()(x)
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))

    return build


def tiny_loss(y_true: Any, y_pred: Any) -> Any:
    return 1e-6 * keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)


def cases() -> dict[str, tuple[Callable[[], Any], str, Any, Any, Any, float | None]]:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, size=(32, LENGTH)).astype("float32")
    ids[:, 0] = VOCAB - 1
    labels = rng.integers(0, 2, size=(32,))
    normal = rng.standard_normal((32, 16)).astype("float32")
    small = (rng.standard_normal((16, 8)) * 0.1).astype("float32")
    zeros = np.zeros((16, 1), "float32")
    (cnn_x, cnn_y), *_ = workloads.make_batches("cnn", {}, 32, 1, 0)
    sparse = "sparse_categorical_crossentropy"
    return {
        "integer_cast_f16": (text_model, F16, ids, labels, sparse, 2.0**15),
        "integer_cast_bf16": (text_model, BF16, ids, labels, sparse, None),
        "overflow": (big_activations, F16, np.full((16, 8), 2000.0, "float32"), zeros, "mse", None),
        "underflow": (small_mlp, F16, normal, normal[:, :1], tiny_loss, None),
        "underflow_scaled": (small_mlp, F16, normal, normal[:, :1], tiny_loss, 2.0**15),
        "divergence": (around(lambda: Cancel(name="cancel")), F16, small, zeros, "mse", None),
        "reads_its_values": (
            around(lambda: ReadsItsValues(name="reads")),
            F16,
            small,
            zeros,
            "mse",
            2.0**15,
        ),
        "policy_failure": (
            around(lambda: NeedsFloat32(name="strict")),
            BF16,
            small,
            zeros,
            "mse",
            None,
        ),
        "cnn": (lambda: workloads.build("cnn", {}), F16, cnn_x, cnn_y, workloads.LOSS, 2.0**15),
    }


def run(build: Callable[[], Any], policy: str, x: Any, y: Any, loss: Any, scale: Any) -> Any:
    keras.utils.clear_session()  # the same layer names in both runs
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(policy)
    model = build()

    def twin() -> Any:
        keras.utils.set_random_seed(0)
        keras.mixed_precision.set_global_policy("float32")
        try:
            return build()
        finally:
            keras.mixed_precision.set_global_policy(policy)

    try:
        report = probe.probe(
            model, twin, policy, (x, y), loss, scale, lambda v, n: loading._slice(v, 0, n)
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    numerics = {k: v for k, v in report.numerics.items() if k not in ("probe_s", "probe_parts")}
    return {
        "hazards": [[h.kind, h.layer, h.figure] for h in report.hazards],
        "failure": report.failure,
        "compared": report.compared,
        "numerics": numerics,
        "parts": report.numerics["probe_parts"],
        "probe_s": report.numerics["probe_s"],
    }


def main() -> None:
    chosen = sys.argv[1:]
    found: dict[str, Any] = {}
    compiled = probe_pass.jax_pass
    for name, case in cases().items():
        if chosen and name not in chosen:
            continue
        found[name] = {"default": run(*case)}
        probe_pass.jax_pass = lambda *args, **kwargs: None  # type: ignore[assignment]
        try:
            found[name]["eager"] = run(*case)
        finally:
            probe_pass.jax_pass = compiled
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    main()
