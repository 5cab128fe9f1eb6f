"""A transformer encoder for issue 53's float8 question, written as keras.io writes one: token
ids in an int32 ``Input``, a token and position embedding, blocks of ``MultiHeadAttention``
(its projections are ``EinsumDense`` layers) and a feed-forward pair of ``Dense`` layers four
times as wide, a float32 softmax over the classes. Synthetic tokens (mptune makes them from
the input's shape). Its size is ``MPTUNE_TRANSFORMER`` = BLOCKSxWIDTHxSEQUENCE, 12x1024x512 by
default (issue 53's suggestion for an H100 or H200); bench/bench_float8.py sets a small one on
a CPU."""

import os

import keras
from keras import layers, ops

BLOCKS, WIDTH, MAXLEN = (
    int(v) for v in os.environ.get("MPTUNE_TRANSFORMER", "12x1024x512").split("x")
)
VOCAB, CLASSES = 32000, 8
HEADS = max(1, WIDTH // 64)
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
    for _ in range(BLOCKS):
        attention = layers.MultiHeadAttention(num_heads=HEADS, key_dim=WIDTH // HEADS)(x, x)
        x = layers.LayerNormalization()(x + attention)
        hidden = layers.Dense(4 * WIDTH, activation="gelu")(x)
        x = layers.LayerNormalization()(x + layers.Dense(WIDTH)(hidden))
    x = layers.GlobalAveragePooling1D()(x)
    outputs = layers.Dense(CLASSES, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss="categorical_crossentropy")
    return model
