"""A script that compiles as the keras.io Vision Transformer example does: jit_compile,
steps_per_execution and an AdamW with gradient accumulation (a global batch of 16 x 2 = 32).
mptune's baseline must hold all three, and its recommendation keep them and the global batch
unless a trial without one measured faster."""

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.standard_normal((1024, 16)).astype("float32")
y = rng.integers(0, 4, size=(1024,))

model = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)]
)
model.compile(
    optimizer=keras.optimizers.AdamW(1e-3, gradient_accumulation_steps=2),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    jit_compile=True,
    steps_per_execution=4,
)
model.fit(x, y, batch_size=16, epochs=2)
