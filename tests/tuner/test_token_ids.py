"""Token ids in a float32 ``keras.Input`` (the published pattern: ``Input((maxlen,))`` into a
custom ``TokenAndPositionEmbedding``) get whole-number synthetic data in their table's range,
so that the numerics probe sees what a custom layer's autocast does to them; ids stay in range
whichever table they reach. String inputs get words of the StringLookup they go into."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from test_trials import trial, write_model

from tuner.trials.hazards import INTEGER_CAST
from tuner.trials.result import TrialStatus
from tuner.worker.loading import float_token_inputs, synthesise_batches
from tuner.worker.usercode import UserCodeError

VOCAB, LENGTH = 5000, 16


class TokenAndPosition(keras.layers.Layer):
    """keras.io's text classification with a Transformer: a token table and a position table."""

    def __init__(self, vocab: int = VOCAB, **kwargs) -> None:
        super().__init__(**kwargs)
        self.token_emb = keras.layers.Embedding(vocab, 8)
        self.pos_emb = keras.layers.Embedding(LENGTH, 8)

    def call(self, x):
        return self.token_emb(x) + self.pos_emb(keras.ops.arange(LENGTH))


class IdsAndSegments(keras.layers.Layer):
    """BERT's embeddings: ids and segment ids, each into its own table, in one layer."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.words = keras.layers.Embedding(VOCAB, 8)
        self.segments = keras.layers.Embedding(2, 8)

    def call(self, inputs):
        ids, segments = inputs
        return self.words(ids) + self.segments(segments)


class SmallTableUsed(keras.layers.Layer):
    """Holds a large table it never feeds the input to: the ids reach the small one."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.unused = keras.layers.Embedding(VOCAB, 8)
        self.small = keras.layers.Embedding(40, 8)

    def call(self, x):
        return self.small(x)


def classifier(inputs, x) -> keras.Model:
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax", dtype="float32")(x))


def batches_of(model: keras.Model) -> list:
    return synthesise_batches(model, "sparse_categorical_crossentropy", 8, 2, seed=0)


def test_ids_into_a_custom_layer_are_whole_numbers_over_the_token_table() -> None:
    tokens = keras.Input((LENGTH,))  # float32, as published
    model = classifier(tokens, TokenAndPosition()(tokens))
    assert float_token_inputs(model) == {0: VOCAB}  # the token table, not the position one
    x = np.concatenate([x for x, _ in batches_of(model)])
    assert x.dtype == np.float32
    assert np.array_equal(x, np.round(x))
    assert x.min() >= 0
    assert x.max() < VOCAB
    assert x.max() > 256  # past bfloat16's whole numbers


def test_a_sequential_model_is_read_as_its_graph() -> None:
    model = keras.Sequential(
        [keras.Input((LENGTH,)), TokenAndPosition(), keras.layers.GlobalAveragePooling1D()]
    )
    assert float_token_inputs(model) == {0: VOCAB}


def test_ids_straight_into_an_embedding_and_features_into_a_dense() -> None:
    ids, features = keras.Input((LENGTH,), name="ids"), keras.Input((LENGTH,), name="features")
    x = keras.layers.Embedding(300, 8)(ids)
    f = keras.layers.Dense(8)(features)
    model = classifier([ids, features], x + keras.layers.Reshape((1, 8))(f))
    assert float_token_inputs(model) == {0: 300}
    for x, _ in batches_of(model):
        assert np.array_equal(x[0], np.round(x[0]))
        assert not np.array_equal(x[1], np.round(x[1]))  # features stay noise


def test_two_inputs_into_one_layer_get_its_smallest_table() -> None:
    ids, segments = keras.Input((LENGTH,)), keras.Input((LENGTH,))
    model = classifier([ids, segments], IdsAndSegments()([ids, segments]))
    assert float_token_inputs(model) == {0: 2, 1: 2}
    model(batches_of(model)[0][0])  # every id in range


def test_a_range_the_model_refuses_shrinks_until_it_takes_it() -> None:
    tokens = keras.Input((LENGTH,))
    model = classifier(tokens, SmallTableUsed()(tokens))
    assert float_token_inputs(model) == {0: VOCAB}  # from the graph alone: the largest table
    x = batches_of(model)[0][0]
    assert x.max() < 40  # the forward pass refused 5000 and its halvings down to 39
    model(x)


def test_integer_ids_into_a_custom_layer_stay_inside_its_smallest_table() -> None:
    tokens = keras.Input((LENGTH,), dtype="int32")
    model = classifier(tokens, TokenAndPosition(vocab=50)(tokens))
    assert float_token_inputs(model) == {}
    x = batches_of(model)[0][0]
    assert x.dtype == np.int32
    assert x.max() < LENGTH  # the position table, the smallest (was 100)
    model(x)


#: keras.io's "Text classification with Transformer", cut down: a float32 Input of token ids, no
#: make_dataset.
PUBLISHED = """
import keras

VOCAB, MAXLEN = 2000, 32

class TokenAndPositionEmbedding(keras.layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = keras.layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = keras.layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = keras.ops.shape(x)[-1]
        positions = keras.ops.arange(start=0, stop=maxlen, step=1)
        return self.token_emb(x) + self.pos_emb(positions)

def build_model():
    inputs = keras.layers.Input(shape=(MAXLEN,))
    x = TokenAndPositionEmbedding(MAXLEN, VOCAB, 16)(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(2, activation="softmax")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
"""


@pytest.mark.slow
def test_the_published_text_transformer_is_unsafe_in_bfloat16_without_make_dataset(
    tmp_path,
) -> None:
    """Before, mptune fed this input normal noise, which bfloat16 rounds harmlessly, and
    recommended mixed_bfloat16 for a model whose ids above 256 it would round."""
    model = write_model(tmp_path, PUBLISHED)
    result = trial(model, "mixed_bfloat16")
    assert result.status is TrialStatus.UNSAFE, result.error
    [hazard] = [h for h in result.hazards if h.unsafe]
    assert hazard.kind == INTEGER_CAST
    assert "TokenAndPositionEmbedding" in hazard.layer
    assert trial(model, "float32").status is TrialStatus.OK


def test_string_inputs_are_fed_words_of_their_lookup_and_others_are_refused() -> None:
    words = ["fixed", "normal", "reversible"]
    thal, age = keras.Input((1,), name="thal", dtype="string"), keras.Input((1,), name="age")
    onehot = keras.layers.StringLookup(vocabulary=words, output_mode="one_hot")(thal)
    x = keras.layers.concatenate([keras.layers.Flatten()(onehot), age])
    model = keras.Model({"thal": thal, "age": age}, keras.layers.Dense(1)(x))
    [(batch, _)] = synthesise_batches(model, "binary_crossentropy", 16, 1, seed=0)
    assert set(batch["thal"].ravel()) <= set(words)
    assert batch["thal"].shape == (16, 1)
    model(batch)

    free_text = keras.Input((1,), name="note", dtype="string")
    hashed = keras.layers.Hashing(8, output_mode="one_hot")(free_text)
    with pytest.raises(UserCodeError, match=r"input 'note' takes strings.*make_dataset"):
        synthesise_batches(keras.Model(free_text, hashed), "mse", 4, 1, seed=0)


#: keras.io's structured-data pattern: a string feature through a StringLookup in the model.
STRINGS = """
import keras

def build_model():
    thal = keras.Input(shape=(1,), name="thal", dtype="string")
    age = keras.Input(shape=(1,), name="age")
    lookup = keras.layers.StringLookup(
        vocabulary=["fixed", "normal", "reversible"], output_mode="one_hot"
    )
    x = keras.layers.concatenate([keras.layers.Flatten()(lookup(thal)), age])
    x = keras.layers.Dense(16, activation="relu")(x)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(x)
    model = keras.Model({"thal": thal, "age": age}, out)
    model.compile("adam", "binary_crossentropy")
    return model
"""


@pytest.mark.slow
def test_a_model_with_a_string_input_runs_and_is_probed_under_a_mixed_policy(tmp_path) -> None:
    """Before: the float32 trial failed casting noise to strings, and the probe of a mixed one
    failed on the strings' dtype (a mptune bug, reported as the user's error)."""
    model = write_model(tmp_path, STRINGS)
    result = trial(model, "mixed_bfloat16")
    assert result.status is TrialStatus.OK, result.error
    assert result.numerics is not None
    assert result.samples_per_second
