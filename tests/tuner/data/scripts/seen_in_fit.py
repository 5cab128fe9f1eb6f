"""A keras.io-style script whose fit reports what it trains with (for `mptune run`'s tests):
a callback writes the model's policy, its optimizer's loss scaling and the steps an epoch
takes, to the file --report names. Synthetic arrays, 512 samples."""

import argparse
import json

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--report", required=True)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()

x = np.random.default_rng(3).random((512, 16), dtype=np.float32)
y = keras.utils.to_categorical(np.arange(512) % 3, 3)

model = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(3)]
)
model.compile(optimizer="adam", loss=keras.losses.CategoricalCrossentropy(from_logits=True))


class Report(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        with open(args.report, "w") as f:
            json.dump(
                {
                    "policy": self.model.dtype_policy.name,
                    "loss_scale_optimizer": isinstance(
                        optimizer, keras.optimizers.LossScaleOptimizer
                    ),
                    "steps": self.params["steps"],
                    "epochs": self.params["epochs"],
                },
                f,
            )


model.fit(x, y, batch_size=args.batch_size, epochs=2, callbacks=[Report()], verbose=0)
print("after fit")
