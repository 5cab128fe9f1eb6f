"""A model with its own training step, as keras.io's "Customizing what happens in fit() with
PyTorch" writes it: a ``keras.Model`` subclass whose ``train_step(self, data)`` clears the
gradients (``self.zero_grad()``), runs the forward pass, calls ``loss.backward()``, applies
the weights' gradients with ``self.optimizer.apply`` and updates its metric trackers.
Compiled with an optimizer only (the step has its own loss). Synthetic regression data in
place of the guide's random arrays. Runs on the PyTorch backend only."""

import argparse

import keras
import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()


class CustomModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data

        # Clear the leftover gradients.
        self.zero_grad()

        # The forward pass, and the loss.
        y_pred = self(x, training=True)
        loss = self.loss_fn(y, y_pred)

        # The gradients, on the weights' tensors.
        loss.backward()
        trainable_weights = [v for v in self.trainable_weights]
        gradients = [v.value.grad for v in trainable_weights]

        # Update the weights.
        with torch.no_grad():
            self.optimizer.apply(gradients, trainable_weights)

        # Our own metrics.
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {
            "loss": self.loss_tracker.result(),
            "mae": self.mae_metric.result(),
        }

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


inputs = keras.Input(shape=(32,))
hidden = keras.layers.Dense(64, activation="relu")(inputs)
outputs = keras.layers.Dense(1)(hidden)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam")

rng = np.random.default_rng(0)
x = rng.random((512, 32), dtype=np.float32)
y = x[:, :4].sum(axis=1, keepdims=True) + 0.1 * rng.random((512, 1), dtype=np.float32)
model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size)
