"""Issue 70: ``mptune run`` counts what fit did. Its achieved figure is the batches fit
actually consumed (their real sizes, a short last batch included) over the wall time of whole
epochs after the compiling one, or of a lone epoch from its second execution on; never worked
out from the script's arguments.

Each test runs a training script of its own, written as keras.io's guides write them
(synthetic data, a tiny model), that counts for itself: a layer keeps the samples the model
trained on in a weight of its own (as the subclassing guide's ``ComputeSum`` does), and a
callback records them and the wall time of each epoch's training (its start to its validation
or its end), into a file the test reads. ``run``'s figure must be within 10% of that count
over the same epochs. Both figures time the same stretches of the same run, so the machine's
load moves them alike: the tests judge no rate against another run and are not serial (they
read 1.000-1.003 here, alone and two at a time)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from test_backends import BACKENDS
from tests_support import run_python

from tuner import cli
from tuner.search.session import TuningSession
from tuner.setup import Setup
from tuner.trials.models import RUN_CONTEXT_VARIABLE, RUN_SETUP_VARIABLE, ScriptCommand

#: What every script below begins with: its own count of what its model trained on.
COUNTING = '''
import argparse
import json
import time

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--record", required=True)
args = parser.parse_args()
keras.utils.set_random_seed(0)


class SeenSamples(keras.layers.Layer):
    """Passes its input on, and keeps how many samples the model trained on."""

    def build(self, input_shape):
        self.total = self.add_weight(shape=(), initializer="zeros", trainable=False)

    def call(self, inputs, training=None):
        if training:
            self.total.assign_add(keras.ops.cast(keras.ops.shape(inputs)[0], "float32"))
        return inputs


class Record(keras.callbacks.Callback):
    """Each epoch's training: its samples and its seconds, from its start to its validation
    (or its end); with from_first_batch, also where its first batch ended."""

    def __init__(self, seen, path, from_first_batch=False):
        super().__init__()
        self.seen, self.path, self.from_first_batch = seen, path, from_first_batch
        self.epochs, self.first, self.keys = [], None, set()

    def total(self):
        return float(keras.ops.convert_to_numpy(self.seen.total))

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.before, self.open = time.perf_counter(), self.total(), True

    def on_train_batch_end(self, batch, logs=None):
        self.keys.update(logs or {})
        if self.from_first_batch and self.first is None:
            self.first = {"at": time.perf_counter() - self.start, "samples": self.total()}

    def close(self):
        if self.open:
            seconds = time.perf_counter() - self.start
            self.epochs.append({"seconds": seconds, "samples": self.total() - self.before})
            self.open = False

    def on_test_begin(self, logs=None):
        self.close()

    def on_epoch_end(self, epoch, logs=None):
        self.close()
        self.keys.update(logs or {})

    def on_train_end(self, logs=None):
        with open(self.path, "w") as f:
            json.dump({"epochs": self.epochs, "first": self.first, "keys": sorted(self.keys)}, f)


def mlp(inputs, seen, classes=10):
    x = keras.layers.Dense(256, activation="relu")(seen(inputs))
    x = keras.layers.Dense(256, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(classes, activation="softmax")(x))
'''

#: A tf.data pipeline batched at 32 and repeated, fit for 100 steps an epoch (the usual form
#: for a data set that does not fit in memory).
TF_DATA = """
import tensorflow as tf

x = np.random.rand(2048, 32).astype("float32")
y = np.random.randint(0, 10, 2048)
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048).batch(32).repeat()
ds = ds.prefetch(tf.data.AUTOTUNE)
seen = SeenSamples()
model = mlp(keras.Input((32,)), seen)
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(ds, steps_per_epoch=100, epochs=4, callbacks=[Record(seen, args.record)])
"""

#: A PyDataset of 2,000 samples in batches of 32 (its last of 16).
PY_DATASET = """
class Samples(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, index):
        low = index * self.batch_size
        high = min(low + self.batch_size, len(self.x))
        return self.x[low:high], self.y[low:high]


x = np.random.rand(2000, 32).astype("float32")
y = np.random.randint(0, 10, 2000)
seen = SeenSamples()
model = mlp(keras.Input((32,)), seen)
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(Samples(x, y, 32), epochs=4, callbacks=[Record(seen, args.record)])
"""

#: One epoch over arrays (4,000 samples: at batch 64 a last batch of 32).
ONE_EPOCH = """
x = np.random.rand(4000, 32).astype("float32")
y = np.random.randint(0, 10, 4000)
seen = SeenSamples()
model = mlp(keras.Input((32,)), seen)
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=32, epochs=1, callbacks=[Record(seen, args.record, True)])
"""

#: EarlyStopping on the validation loss of labels drawn at random: it stops within a few of
#: the 30 epochs asked.
EARLY_STOPPING = """
x = np.random.rand(3000, 32).astype("float32")
y = np.random.randint(0, 2, 3000)
seen = SeenSamples()
model = mlp(keras.Input((32,)), seen, classes=2)
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=1)
model.fit(x, y, batch_size=32, epochs=30, validation_split=0.2,
          callbacks=[stop, Record(seen, args.record)])
"""

#: Three steps, one epoch.
TOO_SHORT = """
x = np.random.rand(96, 32).astype("float32")
y = np.random.randint(0, 10, 96)
seen = SeenSamples()
model = mlp(keras.Input((32,)), seen)
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x, y, batch_size=32, epochs=1, callbacks=[Record(seen, args.record)])
"""

SESSION = "counts"


def _run(tmp_path: Path, body: str, setup: Setup) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``mptune run`` of the script ``body`` under ``setup``, kept in a session: what the
    script recorded, the run as ``show --json`` holds it, and what mptune said.

    The program is what ``mptune run`` becomes once it has read its config
    (``python -m tuner.worker.apply_script``, with the setup and the session in the
    environment: test_script_as_it_is runs the command itself), forked from an interpreter
    that imported the backend once."""
    script = tmp_path / "train.py"
    script.write_text(COUNTING + textwrap.dedent(body), encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    TuningSession.create(SESSION, store, {"model": ScriptCommand(str(script)).spec})
    record = tmp_path / "record.json"
    env = {
        **os.environ,
        "KERAS_BACKEND": setup.backend,
        RUN_SETUP_VARIABLE: json.dumps(setup.to_dict()),
        RUN_CONTEXT_VARIABLE: json.dumps({"session": SESSION, "storage": store, "tuned": 1000.0}),
    }
    done = run_python(
        ["-m", "tuner.worker.apply_script", "1", str(script), "--record", str(record)],
        tmp_path, env, backend=setup.backend,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    view = TuningSession.load(SESSION, store).view().to_dict()
    assert len(view["runs"]) == 1
    return json.loads(record.read_text()), view["runs"][0], done.stderr


def _counted(record: dict[str, Any]) -> tuple[float, float, int]:
    """The script's own count over the epochs ``run`` times (whole epochs after the first):
    samples, seconds and epochs."""
    epochs = record["epochs"][1:]
    return sum(e["samples"] for e in epochs), sum(e["seconds"] for e in epochs), len(epochs)


def _agrees(run: dict[str, Any], samples: float, seconds: float) -> float:
    """``run``'s figure against the script's own count, which must be within 10%; the ratio."""
    ratio: float = run["samples_per_second"] / (samples / seconds)
    assert 0.9 <= ratio <= 1.1, (ratio, run, samples, seconds)
    return ratio


@pytest.mark.slow
def test_a_rescaled_tf_data_epoch_is_counted_at_the_batches_fit_took(tmp_path: Path) -> None:
    """Batched at 32 with 100 steps an epoch, run at 256: fit takes 13 batches of 256 an
    epoch (3,328 samples), not 100 of them (the figure was 7.7x over)."""
    record, run, said = _run(tmp_path, TF_DATA, Setup("float32", 256))
    samples, seconds, epochs = _counted(record)
    assert [e["samples"] for e in record["epochs"]] == [3328.0] * 4
    assert run["covered"]["samples"] == samples == 3 * 3328
    assert (run["covered"]["epochs"], run["covered"]["steps"], epochs) == (3, 39, 3)
    assert run["covered"]["how"] == "3 whole epochs after the first"
    _agrees(run, samples, seconds)
    assert "over 3 whole epochs after the first: 39 steps, 9,984 samples" in said
    assert record["keys"] == ["accuracy", "loss"]  # the script's logs, as it has them


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "spe"), [("tensorflow", 4), pytest.param("jax", 2, marks=BACKENDS[1].marks)]
)
def test_a_py_dataset_is_counted_with_its_short_last_batch(
    tmp_path: Path, backend: str, spe: int
) -> None:
    """A PyDataset of 2,000 samples in batches of 32, regrouped at 96: 21 batches an epoch,
    the last of 80, several an execution. TensorFlow counts in the step (the logs carry each
    execution's last batch); JAX as fit draws the batches."""
    setup = Setup("float32", 96, backend=backend, steps_per_execution=spe)
    record, run, said = _run(tmp_path, PY_DATASET, setup)
    samples, seconds, _ = _counted(record)
    assert [e["samples"] for e in record["epochs"]] == [2000.0] * 4
    assert (run["covered"]["samples"], run["covered"]["steps"]) == (3 * 2000, 3 * 21)
    assert record["keys"] == ["accuracy", "loss"]
    _agrees(run, samples, seconds)
    assert "too few" not in said


@pytest.mark.slow
def test_a_single_epoch_is_timed_from_its_second_execution(tmp_path: Path) -> None:
    """One epoch of 4,000 samples at batch 64 (63 steps, the last of 32): timed from where its
    first execution (which compiles) ended, and said so."""
    record, run, said = _run(tmp_path, ONE_EPOCH, Setup("float32", 64))
    (epoch,) = record["epochs"]
    assert epoch["samples"] == 4000.0
    assert record["first"]["samples"] == 64.0
    samples = epoch["samples"] - record["first"]["samples"]
    seconds = epoch["seconds"] - record["first"]["at"]
    assert (run["covered"]["samples"], run["covered"]["steps"]) == (samples, 62)
    assert run["covered"]["how"].startswith("its one epoch from its second execution on")
    _agrees(run, samples, seconds)
    assert "its one epoch from its second execution on (the first compiles)" in said


@pytest.mark.slow
def test_fit_stopped_early_is_counted_over_the_epochs_it_ran(tmp_path: Path) -> None:
    """EarlyStopping ends fit after a few of its 30 epochs; the epochs it ran (2,400 samples
    each, at batch 128 the last of 96) are counted, and its validation kept apart."""
    record, run, _ = _run(tmp_path, EARLY_STOPPING, Setup("float32", 128))
    ran = len(record["epochs"])
    assert 2 <= ran < 30
    assert all(e["samples"] == 2400.0 for e in record["epochs"])
    samples, seconds, epochs = _counted(record)
    assert (run["covered"]["epochs"], run["covered"]["samples"]) == (epochs, samples)
    assert run["covered"]["steps"] == 19 * epochs
    assert run["validation_s"] > 0
    _agrees(run, samples, seconds)


@pytest.mark.slow
def test_what_cannot_be_timed_is_said_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One epoch of three steps: nothing after its first execution is long enough to time;
    ``run`` says what was missing, and the session keeps the run, not timed."""
    _, run, said = _run(tmp_path, TOO_SHORT, Setup("float32", 32))
    assert "train.py's fit: 1 epoch of 3 steps: too short to time" in said
    assert "tuned at 1,000 samples/s" in said
    assert run["samples_per_second"] is None
    assert run["covered"] is None
    assert run["untimed"].startswith("1 epoch of 3 steps: too short to time")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert cli.main(["show", SESSION, "--storage", store]) == 0
    assert "not timed: 1 epoch of 3 steps" in capsys.readouterr().out
