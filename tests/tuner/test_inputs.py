"""Trials fed as ``fit`` feeds: models with several inputs of different shapes and dtypes, in a
dict or nested, with and without ``make_dataset``, on every backend; and a failure of mptune's
own code reported as mptune's (crashed, traceback kept), never as the user's error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from test_backends import BACKENDS

from tuner.setup import Setup
from tuner.trials.messages import ErrorMessage
from tuner.trials.outcome import WorkerFacts, classify
from tuner.trials.result import TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec
from tuner.worker.usercode import InternalError, raised_by_mptune

#: A dict of an image and a table (inputs of different ranks), no make_dataset: mptune makes
#: the data, in the dict the model was built with. The regression of issue 25 (item 0).
DICT_INPUTS = """
import keras

def build_model():
    image = keras.Input((16, 16, 3), name="image")
    table = keras.Input((12,), name="table")
    a = keras.layers.Conv2D(4, 3, activation="relu")(image)
    a = keras.layers.GlobalAveragePooling2D()(a)
    b = keras.layers.Dense(4, activation="relu")(table)
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.Concatenate()([a, b]))
    model = keras.Model({"image": image, "table": table}, out)
    model.compile("adam", "categorical_crossentropy")
    return model
"""

#: Nested inputs (a list holding a tuple), float32 token ids beside images, one-hot labels, the
#: data from make_dataset as arrays in that structure.
NESTED_WITH_DATA = """
import keras
import numpy as np

def build_model():
    ids = keras.Input((10,), name="ids", dtype="float32")
    image = keras.Input((8, 8, 1), name="image")
    extra = keras.Input((3,), name="extra")
    e = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 4)(ids))
    x = keras.layers.Concatenate()([e, keras.layers.Flatten()(image), extra])
    model = keras.Model([ids, (image, extra)], keras.layers.Dense(3, activation="softmax")(x))
    model.compile("sgd", "categorical_crossentropy")
    return model

def make_dataset(batch_size):
    n = batch_size * 4
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(n, 10)).astype("float32")
    image = rng.standard_normal((n, 8, 8, 1)).astype("float32")
    extra = rng.standard_normal((n, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, size=n)]
    return [ids, (image, extra)], y
"""

#: A dict of int32 token ids and a float table, make_dataset returning a dict.
DICT_WITH_DATA = """
import keras
import numpy as np

def build_model():
    tokens = keras.Input((6,), name="tokens", dtype="int32")
    table = keras.Input((5,), name="table")
    t = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(30, 4)(tokens))
    x = keras.layers.Concatenate()([t, keras.layers.Dense(4)(table)])
    model = keras.Model({"tokens": tokens, "table": table}, keras.layers.Dense(1)(x))
    model.compile("adam", "mse")
    return model

def make_dataset(batch_size):
    n = batch_size * 3
    rng = np.random.default_rng(1)
    x = {
        "tokens": rng.integers(0, 30, size=(n, 6)).astype("int32"),
        "table": rng.standard_normal((n, 5)).astype("float32"),
    }
    return x, rng.standard_normal((n, 1)).astype("float32")
"""

MODELS = {"dict": DICT_INPUTS, "nested+data": NESTED_WITH_DATA, "dict+data": DICT_WITH_DATA}


def _spec(path: Path, backend: str, policy: str = "mixed_float16") -> TrialSpec:
    return TrialSpec(
        model=str(path),
        setup=Setup(policy, 16, backend=backend),
        device="cpu",
        measure_seconds=0.3,
        warmup_steps=1,
        min_steps=8,
    )


#: Each structure on one backend, each backend once: how a trial takes a structure of inputs
#: (the synthetic batches, Keras' data adapter, the probe's call, loss scaling) is mptune's own
#: code and the same on every backend; what differs, each backend's train step, every backend
#: runs here. (All nine pairs ran before: 3x the workers for the same mechanisms.)
PAIRS = [
    pytest.param("dict", BACKENDS[0], id="dict-tensorflow"),
    pytest.param("dict+data", *BACKENDS[1].values, marks=BACKENDS[1].marks, id="dict+data-jax"),
    pytest.param(
        "nested+data", *BACKENDS[2].values, marks=BACKENDS[2].marks, id="nested+data-torch"
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "backend"), PAIRS)
def test_multi_input_models_train_as_fit_feeds_them(
    name: str, backend: str, tmp_path: Path
) -> None:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODELS[name]))
    # mixed_float16: loss scaling and the numerics probe (which calls the model on a batch)
    # take the structure too.
    result = run_trial(_spec(path, backend))
    assert result.status is TrialStatus.OK, result.error
    assert result.steps_completed >= 8
    assert result.samples_per_second
    assert result.samples_per_second > 0
    assert all(loss == loss for loss in result.losses)  # finite, not NaN
    # The input was timed through Keras' data adapter in the same structure (issue 25, item 4).
    assert result.input is not None, result.warnings
    assert result.input.kind == ("synthetic" if name == "dict" else "arrays")
    assert result.input.samples_per_second > 0


@pytest.mark.slow
def test_a_bug_in_mptune_is_crashed_not_the_users_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(DICT_INPUTS))
    monkeypatch.setenv("MPTUNE_TEST_FAULT", "bug@3")
    result = run_trial(_spec(path, "tensorflow", "float32"))
    assert result.status is TrialStatus.CRASHED
    assert result.error is not None
    assert "a bug in mptune" in result.error.message
    assert "injected by MPTUNE_TEST_FAULT" in result.error.message
    assert result.error.traceback
    assert "tuner/worker/training.py" in result.error.traceback
    assert result.error.location is None  # nothing in the user's file to point at


def _raise_here() -> None:
    raise KeyError("oops")


def test_an_exception_raised_in_the_engine_is_mptunes(tmp_path: Path) -> None:
    with pytest.raises(KeyError) as here:
        _raise_here()  # this file is not the engine
    assert not raised_by_mptune(here.value)
    from tuner.worker import loading, structure

    with pytest.raises(TypeError) as unsized:
        structure.leading_dim(object.__new__(_Unsized))
    assert not raised_by_mptune(unsized.value)  # raised in this file's __getattr__
    with pytest.raises(TypeError) as engine:
        loading.pool_size("x", 1)  # type: ignore[arg-type]
    assert raised_by_mptune(engine.value)  # raised in tuner/worker/loading.py itself
    assert raised_by_mptune(InternalError("wrapped"))


class _Unsized:
    def __getattr__(self, name: str) -> object:
        raise TypeError("no attributes")


def test_ours_wraps_failures_but_not_oom_or_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.worker import backends
    from tuner.worker.usercode import UserCodeError

    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    wrapped = pytest.raises(InternalError, match="mptune failed feeding: ValueError: ragged")
    with wrapped, backends.ours("feeding"):
        raise ValueError("ragged")
    with pytest.raises(MemoryError), backends.ours("feeding"):
        raise MemoryError
    with pytest.raises(UserCodeError), backends.ours("feeding"):
        raise UserCodeError("theirs")


def test_internal_error_is_crashed_even_for_a_users_model() -> None:
    error = {
        "exception": "ValueError",
        "message": "mptune failed feeding the batches to tf.data: ValueError: x",
        "location": None,
        "oom": False,
        "user_code": False,
        "internal": True,
        "traceback": "Traceback ...",
    }
    status, reason = classify(
        WorkerFacts(result=None, error=ErrorMessage.from_dict(error), user_model=True)
    )
    assert status is TrialStatus.CRASHED
    assert reason is not None
    assert "a bug in mptune" in reason.message
    assert reason.traceback == "Traceback ..."
    status, _ = classify(
        WorkerFacts(
            result=None,
            error=ErrorMessage.from_dict({**error, "internal": False}),
            user_model=True,
        )
    )
    assert status is TrialStatus.USER_ERROR


def test_a_pool_of_large_samples_stays_within_its_bytes() -> None:
    """A model file's pool of batches is sized by what its samples weigh (issue 34: ResNet50's
    224x224x3 images were taken as 4 KiB, so batch 1024 made eight batches, 4.9 GB, every
    trial)."""
    import keras

    from tuner.worker import loading

    images = keras.Input((224, 224, 3))
    ids = keras.Input((16,), dtype="int32")
    model = keras.Model(
        [images, ids],
        keras.layers.Concatenate()(
            [keras.layers.GlobalAveragePooling2D()(images), keras.ops.cast(ids, "float32")]
        ),
    )
    assert loading.model_sample_bytes(model) == 224 * 224 * 3 * 4 + 16 * 4
    assert loading.pool_size(loading.model_sample_bytes(model), 1024) == 1
    assert loading.pool_size(loading.model_sample_bytes(model), 64) == 6  # 256 MB // 38.5 MB
    small = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    assert loading.pool_size(loading.model_sample_bytes(small), 1024) == 8
