"""Batches from a Python generator, with ``steps_per_epoch``, as older keras.io examples and
many scripts still write it. Synthetic data (bench/bench_run.py)."""

import argparse
import time

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()


def batches(batch_size):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4096, 128)).astype("float32")
    y = (x[:, :1] > 0).astype("float32")
    while True:
        order = rng.permutation(len(x))
        for start in range(0, len(x) - batch_size + 1, batch_size):
            idx = order[start : start + batch_size]
            yield x[idx], y[idx]


model = keras.Sequential(
    [
        keras.Input((128,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ]
)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
clock = keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(f"epoch {epoch + 1} ended at {time.perf_counter():.4f}")
)
model.fit(batches(32), steps_per_epoch=128, epochs=args.epochs, callbacks=[clock], verbose=2)
