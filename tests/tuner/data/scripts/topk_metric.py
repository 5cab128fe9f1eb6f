"""An image classifier compiled as the keras.io Vision Transformer example compiles it: a
sparse categorical cross-entropy on logits, with accuracy and top-5 accuracy
(``SparseTopKCategoricalAccuracy(5)``). Its last layer computes in the policy's dtype, so
under mixed_float16 the top-5 metric meets float16 logits: TensorFlow has no float16 kernel
for ``TopK``/``InTopK``. A small convnet on synthetic 16x16 images in place of CIFAR-100."""

import keras
import numpy as np
from keras import layers

num_classes = 10
rng = np.random.default_rng(0)
x_train = rng.random((256, 16, 16, 3), dtype=np.float32)
y_train = rng.integers(0, num_classes, size=(256, 1))

inputs = keras.Input(shape=(16, 16, 3))
x = layers.Conv2D(8, 3, activation="relu", padding="same")(inputs)
x = layers.GlobalAveragePooling2D()(x)
x = layers.Dense(16, activation="gelu")(x)
logits = layers.Dense(num_classes)(x)
model = keras.Model(inputs=inputs, outputs=logits)

optimizer = keras.optimizers.AdamW(learning_rate=0.001, weight_decay=0.0001)
model.compile(
    optimizer=optimizer,
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[
        keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
        keras.metrics.SparseTopKCategoricalAccuracy(5, name="top-5-accuracy"),
    ],
)
model.fit(x=x_train, y=y_train, batch_size=32, epochs=2, validation_split=0.1)
