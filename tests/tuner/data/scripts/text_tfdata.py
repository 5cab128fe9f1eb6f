"""Text classification from token ids, written as keras.io writes it: a tf.data pipeline with
map and prefetch, token ids in a float32 Input, a two-layer classifier. Synthetic data. With
SLOW_INPUT_MS set, each batch's map sleeps that long (an input that holds training back)."""

import os
import time

import keras
import numpy as np
import tensorflow as tf
from keras import layers

max_features = 500
sequence_length = 32
batch_size = 32
slow_ms = float(os.environ.get("SLOW_INPUT_MS", "0"))

rng = np.random.default_rng(1)
tokens = rng.integers(1, max_features, (1024, sequence_length)).astype("int64")
labels = rng.integers(0, 2, (1024, 1)).astype("float32")


def slow(x, y):
    if slow_ms:
        time.sleep(slow_ms / 1000)
    return x, y


def vectorize(x, y):
    x, y = tf.numpy_function(slow, [x, y], [tf.int64, tf.float32])
    x.set_shape([None, sequence_length])
    y.set_shape([None, 1])
    return tf.cast(x, "float32"), y


train_ds = tf.data.Dataset.from_tensor_slices((tokens, labels)).batch(batch_size)
train_ds = train_ds.map(vectorize).prefetch(tf.data.AUTOTUNE)

inputs = keras.Input(shape=(None,), dtype="float32")
x = layers.Embedding(max_features, 16)(inputs)
x = layers.GlobalAveragePooling1D()(x)
x = layers.Dense(16, activation="relu")(x)
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)
model = keras.Model(inputs, predictions)
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(train_ds, epochs=3)
