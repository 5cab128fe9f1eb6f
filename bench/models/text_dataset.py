"""A text classifier written the way published Keras examples write one: a float32 ``Input`` of
token ids, a custom token-and-position embedding layer, a transformer block, one-hot labels,
and ``make_dataset`` feeding ``fit`` through ``tf.data``. Synthetic tokens: nothing is
downloaded. Used by bench/bench_fit.py as "a model file with make_dataset"."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

VOCAB, MAXLEN, WIDTH, CLASSES = 5000, 64, 32, 4


class TokenAndPosition(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tokens = layers.Embedding(VOCAB, WIDTH)
        self.positions = layers.Embedding(MAXLEN, WIDTH)

    def call(self, x):
        return self.tokens(x) + self.positions(ops.arange(0, ops.shape(x)[-1]))


def build_model():
    inputs = layers.Input(shape=(MAXLEN,))
    x = TokenAndPosition()(inputs)
    attention = layers.MultiHeadAttention(num_heads=2, key_dim=WIDTH)(x, x)
    x = layers.LayerNormalization()(x + attention)
    x = layers.LayerNormalization()(x + layers.Dense(WIDTH)(layers.Dense(64, "relu")(x)))
    x = layers.GlobalAveragePooling1D()(x)
    outputs = layers.Dense(CLASSES, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy")
    return model


def make_dataset(batch_size):
    rng = np.random.default_rng(0)
    n = batch_size * 16
    x = rng.integers(0, VOCAB, size=(n, MAXLEN)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, CLASSES, size=n), CLASSES)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True)
    return data.with_options(fixed())


def fixed():
    """tf.data's options with its autotuning off. bench_fit compares two runs of this pipeline
    (a trial's and a plain fit's): on a 2-core machine the autotuner's own threads took the
    cores from the model and its choices differed from process to process (the plain fit's
    epochs at b64 drifted from 0.30 to 0.23 s within a run, and three runs made 3,684-4,028
    samples/s; with it off, 4,300-4,498), which is the pipeline's spread, not the trial's."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options
