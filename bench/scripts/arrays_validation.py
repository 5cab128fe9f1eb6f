"""NumPy arrays with ``validation_split``, as keras.io's "Training & evaluation with the
built-in methods" guide writes it. Synthetic data (bench/bench_run.py)."""

import argparse
import time

import keras
import numpy as np
from keras import layers

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()

rng = np.random.default_rng(2)
x_train = rng.random((10000, 784), dtype=np.float32)
y_train = rng.integers(0, 10, 10000)

inputs = keras.Input(shape=(784,), name="digits")
x = layers.Dense(256, activation="relu", name="dense_1")(inputs)
x = layers.Dense(256, activation="relu", name="dense_2")(x)
outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(
    optimizer=keras.optimizers.RMSprop(),
    loss=keras.losses.SparseCategoricalCrossentropy(),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)
clock = keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(f"epoch {epoch + 1} ended at {time.perf_counter():.4f}")
)
model.fit(
    x_train,
    y_train,
    batch_size=64,
    epochs=args.epochs,
    validation_split=0.2,
    callbacks=[clock],
    verbose=2,
)
