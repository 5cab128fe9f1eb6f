"""A fine-tune of a frozen backbone, as KerasHub's LoRA guides teach it, in plain Keras (no
download): a stack of Dense layers trained once (here: built and left at their initial
weights), frozen, with LoRA adapters on them (``Dense.enable_lora``: Keras keeps the adapters
in float32 under any policy) and a small head; Adam, fit. Most of the weights do not train, so
a full half policy could halve their memory. ``--policy`` sets the script's own precision;
``--head-in-policy`` leaves the head in it (under bfloat16 its weights are bfloat16, and
Adam's beta_2 0.999 is 1.0 there), where by default it is float32, as the adapters are."""

import argparse

import keras
import numpy as np
from keras import layers

parser = argparse.ArgumentParser()
parser.add_argument("--policy", default="float32")
parser.add_argument("--head-in-policy", action="store_true")
parser.add_argument("--no-lora", action="store_true")
args = parser.parse_args()

keras.config.set_dtype_policy(args.policy)

WIDTH = 256
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 64)).astype("float32")
y = (x[:, 0] > 0).astype("int32")

inputs = keras.Input((64,))
h = inputs
# No bias, as Gemma's layers have none: LoRA freezes a layer's kernel, not its bias, and a
# bias left trainable in bfloat16 would not move under Adam either.
backbone = [
    layers.Dense(WIDTH, activation="relu", use_bias=False, name=f"block{i}") for i in range(3)
]
for block in backbone:
    h = block(h)
head_dtype = None if args.head_in_policy else "float32"
outputs = layers.Dense(2, name="head", dtype=head_dtype)(h)
model = keras.Model(inputs, outputs)
for block in backbone:
    if args.no_lora:
        block.trainable = False
    else:
        block.enable_lora(4)  # its kernel frozen, its float32 adapters train
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
print("losses:", [round(v, 4) for v in history.history["loss"]])
print(
    "trainable:",
    sum(int(np.prod(w.shape)) for w in model.trainable_weights),
    "of",
    sum(int(np.prod(w.shape)) for w in model.weights),
)
