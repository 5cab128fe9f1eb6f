"""A TensorFlow script written as the Keras distribution guide writes it for several GPUs: the
model built and compiled inside tf.distribute.MirroredStrategy().scope(). Here the strategy
spans two logical CPU devices (one machine's CPU split in two, as TensorFlow's own tests do).
--report writes what fit trains under, from inside the script. Synthetic arrays."""

import argparse
import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

import keras  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--report", default="")
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print("Number of devices:", strategy.num_replicas_in_sync)

x = np.random.default_rng(1).random((1024, 20), dtype=np.float32)
y = (x.sum(axis=1) > 10).astype("int32")

with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input((20,)),
            keras.layers.Dense(64, activation="relu", name="hidden"),
            keras.layers.Dense(2, name="logits"),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )


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
                        "replicas": self.model.distribute_strategy.num_replicas_in_sync,
                        "steps": self.params["steps"],
                    },
                    f,
                )


model.fit(x, y, batch_size=args.batch_size, epochs=2, callbacks=[Report()], verbose=0)
print("after fit")
