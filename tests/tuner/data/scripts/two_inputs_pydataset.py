"""A two-input model fed by a keras.utils.PyDataset, as keras.io's multi-input examples write
it: a dict of inputs, one-hot labels, batches the PyDataset makes itself. Synthetic data."""

import math

import keras
import numpy as np
from keras import layers


class Pairs(keras.utils.PyDataset):
    def __init__(self, n, batch_size, **kwargs):
        super().__init__(**kwargs)
        rng = np.random.default_rng(2)
        self.title = rng.random((n, 12), dtype=np.float32)
        self.body = rng.random((n, 24), dtype=np.float32)
        self.labels = keras.utils.to_categorical(rng.integers(0, 4, n), 4)
        self.batch_size = batch_size

    def __len__(self):
        return math.ceil(len(self.labels) / self.batch_size)

    def __getitem__(self, idx):
        s = slice(idx * self.batch_size, (idx + 1) * self.batch_size)
        return {"title": self.title[s], "body": self.body[s]}, self.labels[s]


title = keras.Input(shape=(12,), name="title")
body = keras.Input(shape=(24,), name="body")
x = layers.concatenate(
    [layers.Dense(16, activation="relu")(title), layers.Dense(16, activation="relu")(body)]
)
out = layers.Dense(4, activation="softmax")(x)
model = keras.Model({"title": title, "body": body}, out)
model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="categorical_crossentropy")
model.fit(Pairs(1024, 64), epochs=2)
