"""A JAX script written as the Keras distribution guide writes it: data parallel over every
device Keras lists (on a CPU, as many as --xla_force_host_platform_device_count makes).
--report writes what fit trains under, from inside the script. Synthetic arrays."""

import argparse
import json

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--report", default="")
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

devices = keras.distribution.list_devices()
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))

x = np.random.default_rng(1).random((1000, 20), dtype=np.float32)
y = (x.sum(axis=1) > 10).astype("int32")

model = keras.Sequential(
    [
        keras.Input((20,)),
        keras.layers.Dense(64, activation="relu", name="hidden"),
        keras.layers.Dense(2, name="logits"),
        keras.layers.Activation("softmax", dtype="float32"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])


class Report(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        if args.report:
            with open(args.report, "w") as f:
                json.dump(
                    {
                        "hidden": self.model.get_layer("hidden").dtype_policy.name,
                        "loss_scale_optimizer": isinstance(
                            self.model.optimizer, keras.optimizers.LossScaleOptimizer
                        ),
                        "devices": len(devices),
                        "steps": self.params["steps"],
                    },
                    f,
                )


model.fit(
    x,
    y,
    batch_size=args.batch_size,
    epochs=2,
    validation_split=0.2,
    callbacks=[Report()],
    verbose=0,
)
print("after fit")
