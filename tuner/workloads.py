"""The built-in workloads: small Keras 3 models with deterministic, learnable synthetic data.

A public module: the training scripts ``mptune export --format script`` writes for a built-in
workload call :func:`build`, :func:`make_batches` and :data:`LOSS`, so their names and
signatures stay. It imports Keras; the engine's parent process never imports it.

Labels come from a fixed random "teacher" applied to the inputs, so the loss falls during a
trial and loss curves from different policies can be compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from tuner.trials.models import BUILTINS, builtin_sample_bytes

_TEACHER_SEED = 1234


def build(name: str, params: dict[str, int]) -> keras.Model:
    """Build the named workload under the current global dtype policy."""
    builders: dict[str, Callable[..., Any]] = {
        "mlp": _mlp,
        "cnn": _cnn,
        "transformer": _transformer,
    }
    return builders[name](**{**BUILTINS[name].params, **params})


LOSS = "sparse_categorical_crossentropy"


def make_batches(
    name: str, params: dict[str, int], batch_size: int, n_batches: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_batches`` batches of inputs and integer labels, the same for every policy."""
    p = {**BUILTINS[name].params, **params}
    rng = np.random.default_rng(seed)
    teacher = np.random.default_rng(_TEACHER_SEED)
    n = batch_size * n_batches
    x: np.ndarray  # float32 features or images, or int32 token ids
    if name == "mlp":
        x = rng.standard_normal((n, p["features"]), dtype=np.float32)
        w = teacher.standard_normal((p["features"], p["classes"]), dtype=np.float32)
        y = np.argmax(x @ w, axis=1)
    elif name == "cnn":
        shape = (n, p["image_size"], p["image_size"], p["channels"])
        x = rng.random(shape, dtype=np.float32)
        # Label by which coarse region is brightest, so the convnet has something to learn.
        w = teacher.standard_normal((p["channels"] * 16, p["classes"]), dtype=np.float32)
        pooled = _coarse_pool(x, 4).reshape(n, -1)
        y = np.argmax((pooled - pooled.mean(axis=1, keepdims=True)) @ w, axis=1)
    else:
        x = rng.integers(0, p["vocab"], size=(n, p["seq_len"]), dtype=np.int32)
        low = (x < p["vocab"] // 2).sum(axis=1)
        y = np.minimum(low * p["classes"] // (p["seq_len"] + 1), p["classes"] - 1)
    y = y.astype(np.int32)
    return [
        (x[i * batch_size : (i + 1) * batch_size], y[i * batch_size : (i + 1) * batch_size])
        for i in range(n_batches)
    ]


def sample_bytes(name: str, params: dict[str, int]) -> int:
    """Bytes of one input sample, to size the data pool."""
    return builtin_sample_bytes(name, params)


def _coarse_pool(x: np.ndarray, cells: int) -> np.ndarray:
    n, h, w, c = x.shape
    hs, ws = max(1, h // cells), max(1, w // cells)
    x = x[:, : hs * cells, : ws * cells, :]
    pooled: np.ndarray = x.reshape(n, cells, hs, cells, ws, c).mean(axis=(2, 4))
    return pooled


class PositionEmbedding(keras.layers.Layer):  # type: ignore[misc]
    """Adds a learned embedding of each position to the token embeddings, inside the model's
    graph. (An ``Embedding`` called on ``keras.ops.arange(seq_len)`` while the model is built
    runs once, eagerly: on TensorFlow and JAX its output is a constant that never trains, and on
    PyTorch it keeps the autograd graph of that one call, so the second training step fails
    with "Trying to backward through the graph a second time".)"""

    def __init__(self, seq_len: int, embed_dim: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seq_len, self.embed_dim = seq_len, embed_dim
        self.embedding = keras.layers.Embedding(seq_len, embed_dim, name="positions")

    def build(self, input_shape: Any) -> None:
        self.embedding.build((self.seq_len,))

    def call(self, x: Any) -> Any:
        positions = keras.ops.arange(keras.ops.shape(x)[1])
        return x + keras.ops.cast(self.embedding(positions), x.dtype)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "seq_len": self.seq_len, "embed_dim": self.embed_dim}


def _output(x: Any, classes: int) -> Any:
    # The guides' advice: compute the logits in the policy's dtype, the softmax in float32.
    x = keras.layers.Dense(classes, name="logits")(x)
    return keras.layers.Activation("softmax", dtype="float32", name="predictions")(x)


def _mlp(features: int, width: int, depth: int, classes: int) -> keras.Model:
    inputs = keras.Input((features,), name="features")
    x = inputs
    for i in range(depth):
        x = keras.layers.Dense(width, activation="relu", name=f"dense_{i}")(x)
    return keras.Model(inputs, _output(x, classes), name="builtin_mlp")


def _cnn(image_size: int, channels: int, filters: int, dense: int, classes: int) -> keras.Model:
    inputs = keras.Input((image_size, image_size, channels), name="image")
    x = keras.layers.Conv2D(filters, 3, activation="relu", name="conv_1")(inputs)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(filters * 2, 3, activation="relu", name="conv_2")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(dense, activation="relu", name="dense")(x)
    return keras.Model(inputs, _output(x, classes), name="builtin_cnn")


def _transformer(
    seq_len: int, vocab: int, embed_dim: int, heads: int, ff_dim: int, layers: int, classes: int
) -> keras.Model:
    inputs = keras.Input((seq_len,), dtype="int32", name="tokens")
    tokens = keras.layers.Embedding(vocab, embed_dim, name="token_embedding")(inputs)
    x = PositionEmbedding(seq_len, embed_dim, name="position_embedding")(tokens)
    for i in range(layers):
        attn = keras.layers.MultiHeadAttention(heads, embed_dim // heads, name=f"attention_{i}")(
            x, x
        )
        x = keras.layers.LayerNormalization(epsilon=1e-6)(x + attn)
        ff = keras.layers.Dense(ff_dim, activation="relu", name=f"ff_in_{i}")(x)
        ff = keras.layers.Dense(embed_dim, name=f"ff_out_{i}")(ff)
        x = keras.layers.LayerNormalization(epsilon=1e-6)(x + ff)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, _output(x, classes), name="builtin_transformer")
