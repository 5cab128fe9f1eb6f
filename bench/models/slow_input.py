"""A model whose input is slowed on purpose: every batch of ``make_dataset`` waits 5 ms in a
``tf.numpy_function`` (as a decode or a read from disk would), so the input, not the device,
holds ``fit`` back. Used by bench/bench_fit.py to check that a trial flags it input-bound and
that its figure is what fit reaches."""

import time

import keras
import numpy as np
import tensorflow as tf

FEATURES, CLASSES = 64, 4


def build_model():
    inputs = keras.Input((FEATURES,))
    x = keras.layers.Dense(256, activation="relu")(inputs)
    x = keras.layers.Dense(256, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(CLASSES, activation="softmax")(x))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def _slow(x, y):
    time.sleep(0.005)
    return x, y


def make_dataset(batch_size):
    rng = np.random.default_rng(0)
    n = batch_size * 16
    x = rng.standard_normal((n, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=n).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True)
    data = data.map(lambda a, b: tf.numpy_function(_slow, [a, b], [tf.float32, tf.int32]))
    data = data.map(
        lambda a, b: (
            tf.ensure_shape(a, (batch_size, FEATURES)),
            tf.ensure_shape(b, (batch_size,)),
        )
    )
    # tf.data's autotuning off, as in text_dataset.py (its fixed()): on 2 cores its own
    # threads and choices made two runs of one pipeline differ, which bench_fit would read as
    # the trial's error.
    options = tf.data.Options()
    options.autotune.enabled = False
    return data.with_options(options)
