"""A transformer block as published Keras examples write one (keras.io's text classification
with a transformer): token ids in an int32 ``Input``, a token and position embedding, a
``MultiHeadAttention`` (its projections are ``EinsumDense`` layers), a feed-forward pair of
``Dense`` layers, one-hot labels. Its Dense and EinsumDense layers carry nearly all of its
multiply-adds: the model float8 is for (issue 53). Small enough for a CPU trial; synthetic
tokens."""

import keras
from keras import layers, ops

VOCAB, MAXLEN, WIDTH, HEADS, CLASSES = 1000, 16, 64, 4, 4
BATCH_SIZE = 32


class TokenAndPosition(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tokens = layers.Embedding(VOCAB, WIDTH)
        self.positions = layers.Embedding(MAXLEN, WIDTH)

    def call(self, x):
        return self.tokens(x) + self.positions(ops.arange(0, ops.shape(x)[-1]))


def build_model():
    inputs = layers.Input(shape=(MAXLEN,), dtype="int32")
    x = TokenAndPosition()(inputs)
    attention = layers.MultiHeadAttention(num_heads=HEADS, key_dim=WIDTH // HEADS)(x, x)
    x = layers.LayerNormalization()(x + attention)
    hidden = layers.Dense(4 * WIDTH, activation="relu")(x)
    x = layers.LayerNormalization()(x + layers.Dense(WIDTH)(hidden))
    x = layers.GlobalAveragePooling1D()(x)
    outputs = layers.Dense(CLASSES, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy")
    return model
