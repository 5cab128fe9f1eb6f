"""A model that overrides only ``compute_loss``, as keras.io's guides write it for any
backend: Keras' own ``train_step`` runs (its gradients, its loss scaling, its metrics), and
the loss is the model's: a mean squared error plus the layers' own losses. Compiled with an
optimizer only. Synthetic regression data."""

import argparse

import keras
import numpy as np
from keras import ops

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()


class CustomModel(keras.Model):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = ops.mean(ops.square(y_pred - y))
        # The layers' own losses (the activity regularizer's), added one by one: on JAX,
        # ops.sum over the list of traced values (Keras' docstring example) fails.
        for extra in self.losses:
            loss = loss + extra
        return loss


inputs = keras.Input(shape=(32,))
hidden = keras.layers.Dense(
    64, activation="relu", activity_regularizer=keras.regularizers.L2(1e-4)
)(inputs)
outputs = keras.layers.Dense(1)(hidden)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam")

rng = np.random.default_rng(0)
x = rng.random((512, 32), dtype=np.float32)
y = x[:, :4].sum(axis=1, keepdims=True) + 0.1 * rng.random((512, 1), dtype=np.float32)
model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size)
