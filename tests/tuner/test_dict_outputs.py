"""What a trial adds to the user's model keeps its structure (issue 70): a model of two heads
returned as a dict (a softmax head and a regression head), with losses, metrics and sample
weights per output, trains under both mixed policies. Before, the float32 cast appended to its
outputs made them a list of two outputs both named ``mptune_float32_output``, compile's dict of
losses found no key, and both mixed policies were called unsafe ("fails only under
mixed_bfloat16; float32 trains the same batch: ValueError: Expected keys ...")."""

from __future__ import annotations

import dataclasses
import math
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import make_config, run_python

from tuner.export.render import render
from tuner.setup import Setup
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

#: Two heads as a dict, compiled per output as the keras.io multi-output guides do; its data
#: gives sample weights per output (``{weights}``: the regression head's).
HEADS = """
    import keras
    import numpy as np

    FEATURES, CLASSES = 12, 4


    def build_model():
        inputs = keras.Input((FEATURES,), name="features")
        x = keras.layers.Dense(16, activation="relu")(inputs)
        kind = keras.layers.Dense(CLASSES, activation="softmax", name="kind")(x)
        size = keras.layers.Dense(1, name="size")(x)
        model = keras.Model(inputs, {{"kind": kind, "size": size}})
        model.compile(
            optimizer="adam",
            loss={{"kind": "sparse_categorical_crossentropy", "size": "mse"}},
            loss_weights={{"kind": 1.0, "size": 0.5}},
            metrics={{"kind": ["accuracy"], "size": ["mae"]}},
            weighted_metrics={{"size": ["mse"]}},
        )
        return model


    def make_dataset(batch_size):
        rng = np.random.default_rng(0)
        n = 4 * batch_size
        x = rng.standard_normal((n, FEATURES)).astype("float32")
        y = {{
            "kind": rng.integers(0, CLASSES, size=(n,)),
            "size": rng.standard_normal((n, 1)).astype("float32"),
        }}
        weights = {{"kind": np.full((n,), {kind}, "float32"), "size": {weights}}}
        return x, y, weights
"""


def write_heads(tmp_path: Path, name: str, kind: float = 1.0, weights: str = "") -> str:
    weights = weights or 'rng.uniform(0.5, 1.5, (n,)).astype("float32")'
    path = tmp_path / name
    path.write_text(textwrap.dedent(HEADS.format(kind=kind, weights=weights)), encoding="utf-8")
    return str(path)


def trial(model: str, policy: str) -> TrialResult:
    spec = TrialSpec(
        model=model, setup=Setup(policy, 16), steps=4, warmup_steps=1, device="cpu", timeout_s=120
    )
    return run_trial(spec)


@pytest.mark.slow
def test_dict_heads_with_losses_metrics_and_sample_weights_train_under_both_mixed_policies(
    tmp_path: Path,
) -> None:
    model = write_heads(tmp_path, "heads.py")
    for policy in ("mixed_float16", "mixed_bfloat16"):
        result = trial(model, policy)
        assert result.status is TrialStatus.OK, (policy, result.error)
        assert result.losses
        assert all(math.isfinite(loss) for loss in result.losses)
        # The heads compute in the policy's dtype: the trial appended its float32 cast.
        assert [h.kind for h in result.hazards] == ["low_precision_output"]
    # The sample weights reach the step: weighed by zero, every head's loss is nothing.
    zero = write_heads(tmp_path, "zero.py", kind=0.0, weights='np.zeros((n,), "float32")')
    result = trial(zero, "mixed_bfloat16")
    assert result.status is TrialStatus.OK, result.error
    assert result.losses == (0.0, 0.0, 0.0, 0.0)


@pytest.fixture
def mixed_float16() -> Iterator[None]:
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.usefixtures("mixed_float16")
def test_the_float32_cast_keeps_inputs_outputs_and_their_names() -> None:
    """Named inputs as a dict, outputs as a list whose losses and sample weights are given by
    the outputs' names, and a subclassed model returning a dict: cast to float32, each in its
    structure and under its names, and trained under mixed_float16."""
    import keras

    from tuner.worker.checks import check_model, with_float32_output

    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    x = keras.layers.Dense(8)(keras.layers.Concatenate()([a, b]))
    listed = keras.Model(
        {"a": a, "b": b},
        [keras.layers.Dense(1, name="first")(x), keras.layers.Dense(2, name="second")(x)],
    )
    cast = with_float32_output(listed)
    assert cast.output_names == ["first", "second"]
    rng = np.random.default_rng(0)
    xs = {"a": rng.standard_normal((8, 3)), "b": rng.standard_normal((8, 2))}
    out = cast(xs)
    assert isinstance(out, list)
    assert [keras.backend.standardize_dtype(o.dtype) for o in out] == ["float32", "float32"]
    cast.compile(optimizer="adam", loss={"first": "mse", "second": "mse"})
    ys = {"first": rng.standard_normal((8, 1)), "second": rng.standard_normal((8, 2))}
    # Weights in the outputs' order, as Keras takes them for a list (the second weighed out):
    # each output's loss under its own name.
    logs = cast.train_on_batch(xs, ys, sample_weight=[np.ones(8), np.zeros(8)], return_dict=True)
    assert sorted(logs) == ["first_loss", "loss", "second_loss"]
    assert logs["second_loss"] == 0.0
    assert math.isfinite(logs["loss"])

    class Heads(keras.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.kind = keras.layers.Dense(3, activation="softmax")
            self.size = keras.layers.Dense(1)

        def call(self, inputs: Any) -> dict[str, Any]:
            return {"kind": self.kind(inputs), "size": self.size(inputs)}

    sample = rng.standard_normal((8, 5)).astype("float32")
    wrapped, _, hazards = check_model(Heads(), "mixed_float16", 8, sample)
    assert hazards  # its float16 outputs were found inside the dict
    out = wrapped(sample)
    assert sorted(out) == ["kind", "size"]
    assert {keras.backend.standardize_dtype(v.dtype) for v in out.values()} == {"float32"}


@pytest.mark.slow
def test_the_exported_script_trains_dict_heads_with_their_sample_weights(tmp_path: Path) -> None:
    """The exported script's own float32 cast (``float32_outputs``) keeps the dict too, and
    its tf.data pipeline takes make_dataset's (x, y, sample_weight)."""
    model = write_heads(tmp_path, "heads.py")
    config = dataclasses.replace(make_config(), setup=Setup("mixed_float16", 16), model=model)
    script = tmp_path / "train_tuned.py"
    script.write_text(render(config, "script"), encoding="utf-8")
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""}
    proc = run_python([str(script), "--max-steps", "3"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "after 3 steps (mixed_float16, batch 16" in proc.stdout, proc.stdout
