"""A simple MNIST-style convnet, written as keras.io's examples are: the data loaded and
shaped at the top, the model built inline, compiled, fitted and evaluated. Synthetic data in
place of keras.datasets.mnist.load_data() (nothing is downloaded)."""

import argparse

import keras
import numpy as np
from keras import layers

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=15)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--samples", type=int, default=2048)
args = parser.parse_args()

num_classes = 10
input_shape = (28, 28, 1)

rng = np.random.default_rng(0)
x_train = rng.random((args.samples, 28, 28), dtype=np.float32)
y_train = rng.integers(0, num_classes, args.samples)
x_train = np.expand_dims(x_train, -1)
print("x_train shape:", x_train.shape)
y_train = keras.utils.to_categorical(y_train, num_classes)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, validation_split=0.1)

score = model.evaluate(x_train, y_train, verbose=0)
print("Test loss:", score[0])
model.save("never_written.keras")
