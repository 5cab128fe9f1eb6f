"""A training script as guides write it: its precision from an argparse default, passed
through a variable; its batch from its tf.data pipeline (no drop_remainder, so no static
batch dimension). mptune must observe both: mixed_bfloat16 at batch 32."""

import argparse

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="mixed_bfloat16")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
precision = args.precision
keras.mixed_precision.set_global_policy(precision)

rng = np.random.default_rng(0)
x = rng.standard_normal((2048, 16)).astype("float32")
y = rng.integers(0, 4, size=(2048,))
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048).batch(32).prefetch(2)

model = keras.Sequential(
    [
        keras.Input((16,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(4),
        keras.layers.Activation("linear", dtype="float32"),
    ]
)
model.compile(
    optimizer="adam",
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(train, epochs=args.epochs)
