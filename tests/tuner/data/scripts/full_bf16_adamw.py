"""A fine-tune as KerasHub's Gemma guides write it, in plain Keras (no download): the whole
model in bfloat16 (``keras.config.set_dtype_policy("bfloat16")``: weights, optimizer state and
compute), AdamW, fit. Under Keras 3.15 AdamW's beta_2 0.999 is 1.0 in bfloat16 and every
update is 0 (keras-team/keras-hub#2629): the loss stays where it starts. ``--policy float32``
trains. A token-id text classifier on synthetic ids."""

import argparse

import keras
import numpy as np
from keras import layers

parser = argparse.ArgumentParser()
parser.add_argument("--policy", default="bfloat16")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

keras.config.set_dtype_policy(args.policy)

VOCAB, LENGTH = 512, 16
rng = np.random.default_rng(0)
ids = rng.integers(1, VOCAB, size=(1024, LENGTH)).astype("int32")
labels = (ids[:, 0] % 2).astype("int32")  # learnable from the first token

inputs = keras.Input((LENGTH,), dtype="int32")
x = layers.Embedding(VOCAB, 32)(inputs)
x = layers.GlobalAveragePooling1D()(x)
x = layers.Dense(32, activation="relu")(x)
outputs = layers.Dense(2)(x)
model = keras.Model(inputs, outputs)
model.compile(
    optimizer=keras.optimizers.AdamW(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
history = model.fit(ids, labels, batch_size=32, epochs=args.epochs, verbose=0)
print("losses:", [round(v, 4) for v in history.history["loss"]])
