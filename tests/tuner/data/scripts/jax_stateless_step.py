"""A model with its own stateless training step, as keras.io's "Customizing what happens in
fit() with JAX" writes it: a ``keras.Model`` subclass whose ``compute_loss_and_updates`` runs
``stateless_call`` under ``jax.value_and_grad``, and whose ``train_step(self, state, data)``
applies the gradients with ``self.optimizer.stateless_apply``, updates its metric trackers
with ``stateless_update_state`` and returns its logs and the new state. Compiled with an
optimizer only (the step has its own loss). Synthetic regression data in place of the guide's
random arrays. Runs on the JAX backend only."""

import argparse

import jax
import keras
import numpy as np

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

    def compute_loss_and_updates(
        self, trainable_variables, non_trainable_variables, x, y, training=False
    ):
        y_pred, non_trainable_variables = self.stateless_call(
            trainable_variables, non_trainable_variables, x, training=training
        )
        loss = self.loss_fn(y, y_pred)
        return loss, (y_pred, non_trainable_variables)

    def train_step(self, state, data):
        (
            trainable_variables,
            non_trainable_variables,
            optimizer_variables,
            metrics_variables,
        ) = state
        x, y = data

        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
        (loss, (y_pred, non_trainable_variables)), grads = grad_fn(
            trainable_variables, non_trainable_variables, x, y, training=True
        )
        trainable_variables, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable_variables
        )

        loss_tracker_vars = metrics_variables[: len(self.loss_tracker.variables)]
        mae_metric_vars = metrics_variables[len(self.loss_tracker.variables) :]
        loss_tracker_vars = self.loss_tracker.stateless_update_state(loss_tracker_vars, loss)
        mae_metric_vars = self.mae_metric.stateless_update_state(mae_metric_vars, y, y_pred)
        logs = {
            self.loss_tracker.name: self.loss_tracker.stateless_result(loss_tracker_vars),
            self.mae_metric.name: self.mae_metric.stateless_result(mae_metric_vars),
        }
        new_metrics_vars = loss_tracker_vars + mae_metric_vars
        state = (
            trainable_variables,
            non_trainable_variables,
            optimizer_variables,
            new_metrics_vars,
        )
        return logs, state

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
