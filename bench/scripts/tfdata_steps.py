"""A tf.data pipeline that repeats, with ``steps_per_epoch`` (the usual form for a data set that
does not fit in memory), as keras.io's guides write it. Synthetic data (bench/bench_run.py)."""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()

rng = np.random.default_rng(0)
x = rng.standard_normal((8192, 64)).astype("float32")
y = rng.integers(0, 10, size=(8192,))
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(8192).repeat().batch(32)
train = train.prefetch(tf.data.AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer="adam",
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
# Each epoch's end on the wall clock: what an epoch takes, all of it.
clock = keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(f"epoch {epoch + 1} ended at {time.perf_counter():.4f}")
)
model.fit(train, steps_per_epoch=200, epochs=args.epochs, callbacks=[clock], verbose=2)
