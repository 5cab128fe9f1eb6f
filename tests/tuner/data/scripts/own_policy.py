"""A script as the mixed-precision guides write it: the policy set at the top, an output layer
kept in float32, and (with --own-loss-scale) its own LossScaleOptimizer. A callback writes what
fit trains under, read from the model, to the file --report names. Synthetic arrays."""

import argparse
import json

import keras
import numpy as np
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")

parser = argparse.ArgumentParser()
parser.add_argument("--report", default="")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--own-loss-scale", action="store_true")
args = parser.parse_args()

x = np.random.default_rng(3).random((512, 16), dtype=np.float32)
y = keras.utils.to_categorical(np.arange(512) % 3, 3)

inputs = keras.Input((16,))
hidden = layers.Dense(32, activation="relu", name="hidden")(inputs)
logits = layers.Dense(3, name="logits")(hidden)
outputs = layers.Activation("softmax", dtype="float32", name="predictions")(logits)
model = keras.Model(inputs, outputs)
optimizer = keras.optimizers.Adam()
if args.own_loss_scale:
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0**10)
model.compile(optimizer=optimizer, loss="categorical_crossentropy")


class Report(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        if not args.report:
            return
        optimizer = self.model.optimizer
        with open(args.report, "w") as f:
            json.dump(
                {
                    "global_policy": keras.mixed_precision.global_policy().name,
                    "hidden": self.model.get_layer("hidden").dtype_policy.name,
                    "predictions": self.model.get_layer("predictions").dtype_policy.name,
                    "loss_scale_optimizer": isinstance(
                        optimizer, keras.optimizers.LossScaleOptimizer
                    ),
                    "steps": self.params["steps"],
                },
                f,
            )


model.fit(x, y, batch_size=args.batch_size, epochs=2, callbacks=[Report()], verbose=0)
print("after fit:", keras.mixed_precision.global_policy().name)
