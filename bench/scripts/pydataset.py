"""Batches from a ``keras.utils.PyDataset``, as keras.io's guides write one: ``__len__`` and
``__getitem__`` over arrays in memory, the last batch short. Synthetic data
(bench/bench_run.py)."""

import argparse
import math
import time

import keras
import numpy as np


class Images(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y = x, y
        self.batch_size = batch_size

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, idx):
        low = idx * self.batch_size
        high = min(low + self.batch_size, len(self.x))
        return self.x[low:high], self.y[low:high]


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()

rng = np.random.default_rng(1)
x = rng.random((6000, 28, 28), dtype=np.float32)
y = keras.utils.to_categorical(rng.integers(0, 10, 6000), 10)

model = keras.Sequential(
    [
        keras.Input((28, 28)),
        keras.layers.Flatten(),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"])
clock = keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(f"epoch {epoch + 1} ended at {time.perf_counter():.4f}")
)
model.fit(Images(x, y, 64), epochs=args.epochs, callbacks=[clock], verbose=2)
