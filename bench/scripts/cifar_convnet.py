"""A small convnet on 32x32 colour images (CIFAR-10's shape), as keras.io's image
classification examples write it: arrays in memory, rescaled inside the model, ``batch_size``
given to fit. Synthetic data in place of keras.datasets.cifar10 (bench/bench_run.py); an epoch
takes 5 s or more on a 2-core CPU."""

import argparse
import time

import keras
import numpy as np
from keras import layers

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=16000)
args = parser.parse_args()

rng = np.random.default_rng(4)
x_train = rng.integers(0, 256, (args.samples, 32, 32, 3)).astype("uint8")
y_train = rng.integers(0, 10, args.samples)

model = keras.Sequential(
    [
        keras.Input(shape=(32, 32, 3)),
        layers.Rescaling(1.0 / 255),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(10),
    ]
)
model.compile(
    optimizer="adam",
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
clock = keras.callbacks.LambdaCallback(
    on_epoch_end=lambda epoch, logs: print(f"epoch {epoch + 1} ended at {time.perf_counter():.4f}")
)
model.fit(x_train, y_train, batch_size=64, epochs=args.epochs, callbacks=[clock], verbose=2)
