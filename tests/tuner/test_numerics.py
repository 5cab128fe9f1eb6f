"""The numerics probe on small models of each hazard kind, with and without the fix.

The probe runs in this process (it is worker code, and importing TensorFlow once here is far
cheaper than a worker per case); tests/tuner/test_trials.py and the search tests cover it
inside real trials.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from tuner.trials.hazards import (
    DIVERGENCE,
    INTEGER_CAST,
    LOW_PRECISION_OUTPUT,
    OVERFLOW,
    POLICY_FAILURE,
    UNDERFLOW,
    Hazard,
)

pytestmark = pytest.mark.slow  # imports TensorFlow

keras = pytest.importorskip("keras")

# The models both the probe's tests and its per-backend cases use, written once.
from probe_cases import LENGTH, VOCAB, TokenEmbedding, small_mlp, tiny_loss  # noqa: E402

from tuner import workloads  # noqa: E402
from tuner.worker import checks, loading, probe, probe_pass  # noqa: E402

F16, BF16 = "mixed_float16", "mixed_bfloat16"


@pytest.fixture(autouse=True)
def float32_afterwards() -> Iterator[None]:
    yield
    keras.mixed_precision.set_global_policy("float32")


def run_probe(
    build: Callable[[], Any],
    policy: str,
    x: Any,
    y: Any,
    loss: Any = "mean_squared_error",
    scale: float | None = None,
) -> tuple[probe.ProbeReport, Any]:
    """Build ``build()`` under ``policy`` and probe it, as the worker does."""
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(policy)
    model = build()

    def twin() -> Any:
        keras.utils.set_random_seed(0)
        keras.mixed_precision.set_global_policy("float32")
        try:
            return build()
        finally:
            keras.mixed_precision.set_global_policy(policy)

    report = probe.probe(
        model, twin, policy, (x, y), loss, scale, lambda v, n: loading._slice(v, 0, n)
    )
    return report, model


def kinds(report: probe.ProbeReport) -> list[str]:
    return [h.kind for h in report.hazards]


def only(report: probe.ProbeReport, kind: str) -> Hazard:
    found = [h for h in report.hazards if h.kind == kind]
    assert len(found) == 1, report.hazards
    return found[0]


# -- integer-valued data through a low-precision cast ------------------------------------------


class TakeRows(keras.layers.Layer):
    """A lookup written with ops.take, no Embedding inside."""

    def build(self, input_shape: Any) -> None:
        self.table = self.add_weight(shape=(VOCAB, 8), initializer="random_normal")

    def call(self, ids: Any) -> Any:
        return keras.ops.take(self.table, keras.ops.cast(ids, "int32"), axis=0)


def text_model(layer: type, input_dtype: str = "float32") -> Callable[[], Any]:
    def build() -> Any:
        inputs = keras.Input((LENGTH,), dtype=input_dtype, name="ids")
        x = layer(name="lookup")(inputs)
        x = keras.layers.GlobalAveragePooling1D()(x)
        outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(x)
        return keras.Model(inputs, outputs)

    return build


def token_ids() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, VOCAB, size=(32, LENGTH)).astype("float32")
    x[:, 0] = VOCAB - 1  # 4999: not exact in float16 (spacing 4 above 4096), nor in bfloat16
    return x, rng.integers(0, 2, size=(32,))


@pytest.mark.parametrize("policy", [F16, BF16])
def test_token_ids_rounded_by_a_custom_layer_are_unsafe_and_named(policy: str) -> None:
    x, y = token_ids()
    report, model = run_probe(
        text_model(TokenEmbedding), policy, x, y, "sparse_categorical_crossentropy"
    )
    hazard = only(report, INTEGER_CAST)
    assert hazard.unsafe
    assert hazard.policy == policy
    assert hazard.layer == "layer 'lookup' (TokenEmbedding)"
    assert "4,999 became" in hazard.evidence
    assert "Embedding" in hazard.evidence  # where the rounded ids end up
    assert 'dtype="int32"' in hazard.fix
    assert "autocast=False" in hazard.fix
    # The probe applied the fix, so the trial measures the policy as it would run once fixed.
    assert report.unsafe_layers == [model.get_layer("lookup")]
    assert model.get_layer("lookup").autocast is False
    assert report.failure is None
    assert report.numerics["fixed_layers"] == ["lookup"]


def test_a_lookup_without_an_embedding_is_caught_by_its_output() -> None:
    x, y = token_ids()
    report, _ = run_probe(text_model(TakeRows), BF16, x, y, "sparse_categorical_crossentropy")
    hazard = only(report, INTEGER_CAST)
    assert hazard.layer == "layer 'lookup' (TakeRows)"
    assert "its output differs from float32's" in hazard.evidence


@pytest.mark.parametrize("policy", [F16, BF16])
@pytest.mark.parametrize("layer", [TokenEmbedding, TakeRows])
def test_integer_inputs_fix_the_lookup(policy: str, layer: type) -> None:
    x, y = token_ids()
    report, _ = run_probe(
        text_model(layer, "int32"), policy, x.astype("int32"), y, "sparse_categorical_crossentropy"
    )
    assert report.compared
    assert report.hazards == []


def test_whole_numbers_the_format_holds_exactly_are_no_hazard() -> None:
    """Pixel values 0..255 are exact in bfloat16 (up to 256), counts rounded in a Dense layer
    are ordinary rounding: neither selects anything."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(32, 16)).astype("float32")

    class Scale(keras.layers.Layer):
        def call(self, x: Any) -> Any:
            return x / 255.0

    def build() -> Any:
        inputs = keras.Input((16,))
        x = Scale()(inputs)
        x = keras.layers.Dense(8, activation="relu")(x)
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))

    report, _ = run_probe(build, BF16, pixels, np.zeros((32, 1), "float32"))
    assert report.hazards == []
    counts = rng.integers(0, 5000, size=(32, 16)).astype("float32")
    report, _ = run_probe(build, F16, counts / 1.0, np.zeros((32, 1), "float32"))
    assert INTEGER_CAST not in kinds(report)


def test_an_out_of_range_lookup_under_float16_is_explained_not_blamed_on_the_user() -> None:
    """On a CPU the rounded id 20000 is out of range: the forward pass raises under
    mixed_float16 only. The probe names the cause and, with the fix, the model runs."""
    vocab = 20000

    class Wrapped(keras.layers.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.tokens = keras.layers.Embedding(vocab, 4)

        def call(self, ids: Any) -> Any:
            return self.tokens(ids)

    def build() -> Any:
        inputs = keras.Input((4,))
        x = keras.layers.Flatten()(Wrapped(name="wrapped")(inputs))
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))

    x = np.full((8, 4), vocab - 1, "float32")  # 19999 rounds to 20000 in float16
    report, _ = run_probe(build, F16, x, np.zeros((8, 1), "float32"))
    hazard = only(report, INTEGER_CAST)
    assert "19,999 became 20,000" in hazard.evidence
    assert "is not in [0, 20000)" in hazard.evidence  # the lookup's own error, by its line
    assert report.failure is None  # fixed and run again


# -- a failure only under the policy ------------------------------------------------------------


class FixedProjection(keras.layers.Layer):
    """Multiplies by a float32 constant with a raw TensorFlow op: a dtype mismatch under a
    mixed policy, fine under float32."""

    def call(self, x: Any) -> Any:
        import tensorflow as tf

        return tf.matmul(x, tf.ones((4, 4), tf.float32))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape  # so that building the model does not run call()


def test_a_failure_only_under_the_policy_is_a_policy_failure() -> None:
    def build() -> Any:
        inputs = keras.Input((4,))
        x = FixedProjection(name="projection")(inputs)
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))

    x = np.ones((8, 4), "float32")
    report, _ = run_probe(build, F16, x, np.zeros((8, 1), "float32"))
    hazard = only(report, POLICY_FAILURE)
    assert hazard.unsafe
    assert hazard.layer == "layer 'projection' (FixedProjection)"
    assert report.failure is not None
    assert "Graph execution error" not in report.failure

    def fixed() -> Any:
        inputs = keras.Input((4,))
        x = FixedProjection(name="projection", dtype="float32")(inputs)
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))

    report, _ = run_probe(fixed, F16, x, np.zeros((8, 1), "float32"))
    assert report.failure is None
    assert POLICY_FAILURE not in kinds(report)


def test_a_model_that_fails_under_float32_too_is_not_compared() -> None:
    def build() -> Any:
        inputs = keras.Input((4,))
        x = keras.layers.Lambda(lambda t: keras.ops.reshape(t, (-1, 3)))(inputs)
        return keras.Model(inputs, x)

    report, _ = run_probe(build, F16, np.ones((8, 4), "float32"), np.zeros((8, 3), "float32"))
    assert not report.compared
    assert report.note
    assert "float32 fails on the same batch too" in report.note
    assert report.hazards == []


# -- overflow -----------------------------------------------------------------------------------


def big_activations(rescale: float) -> Callable[[], Any]:
    def build() -> Any:
        inputs = keras.Input((8,))
        x = keras.layers.Rescaling(rescale, name="rescale")(inputs)
        x = keras.layers.Dense(8, kernel_initializer="ones", name="wide_sum")(x)
        x = keras.layers.Dense(8, kernel_initializer="ones", name="wider_sum")(x)
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32", name="out")(x))

    return build


def test_overflow_names_the_first_layer_past_float16s_range() -> None:
    x = np.full((16, 8), 2000.0, "float32")  # 8 x 2000 = 16,000; then 8 x 16,000 = 128,000
    report, _ = run_probe(big_activations(1.0), F16, x, np.zeros((16, 1), "float32"))
    hazard = only(report, OVERFLOW)
    assert not hazard.unsafe
    assert hazard.layer == "layer 'wider_sum' (Dense)"
    assert "65,504" in hazard.evidence
    assert "inf" in hazard.evidence
    assert "float32" in hazard.fix
    # bfloat16 has float32's range: no overflow there.
    report, _ = run_probe(big_activations(1.0), BF16, x, np.zeros((16, 1), "float32"))
    assert OVERFLOW not in kinds(report)
    # Normalised input: no overflow.
    report, _ = run_probe(big_activations(1 / 2000), F16, x, np.zeros((16, 1), "float32"))
    assert OVERFLOW not in kinds(report)


# -- underflow ----------------------------------------------------------------------------------


def test_underflow_without_loss_scaling_and_none_with_it() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16)).astype("float32")
    y = rng.standard_normal((32, 1)).astype("float32")
    report, _ = run_probe(small_mlp, F16, x, y, tiny_loss, scale=None)
    hazard = only(report, UNDERFLOW)
    assert "without loss scaling" in hazard.evidence
    assert "loss scaling" in hazard.fix
    shares = report.numerics["flush_share"]
    assert shares["1"] > 0.01 > shares["32768"]  # predicted from float32's gradients
    assert report.numerics["flush_share_measured"]["1"] > 0.01
    report, _ = run_probe(small_mlp, F16, x, y, tiny_loss, scale=2.0**15)
    assert UNDERFLOW not in kinds(report)
    assert report.numerics["flush_share_measured"]["32768"] <= 0.01


# -- divergence ---------------------------------------------------------------------------------


class Cancel(keras.layers.Layer):
    """Adds and subtracts a large constant: exact in float32 for these values, while float16
    keeps only steps of 0.5 at 1000 (catastrophic cancellation)."""

    def call(self, x: Any) -> Any:
        return (x + 1000.0) - 1000.0


def cancelling(dtype: str | None) -> Callable[[], Any]:
    def build() -> Any:
        inputs = keras.Input((8,))
        x = keras.layers.Dense(8, name="before")(inputs)
        x = Cancel(name="cancel", dtype=dtype)(x)
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))

    return build


def test_divergence_names_the_first_layer_past_the_threshold() -> None:
    x = np.random.default_rng(0).standard_normal((16, 8)).astype("float32") * 0.1
    report, _ = run_probe(cancelling(None), F16, x, np.zeros((16, 1), "float32"))
    hazard = only(report, DIVERGENCE)
    assert hazard.layer == "layer 'cancel' (Cancel)"
    assert "threshold is 1.6%" in hazard.evidence
    assert 'dtype="float32"' in hazard.fix
    report, _ = run_probe(cancelling("float32"), F16, x, np.zeros((16, 1), "float32"))
    assert DIVERGENCE not in kinds(report)


# -- no false alarms ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("policy", [F16, BF16])
def test_the_builtin_models_raise_no_alarm(name: str, policy: str) -> None:
    (x, y), *_ = workloads.make_batches(name, {}, 32, 1, 0)
    report, _ = run_probe(
        lambda: workloads.build(name, {}),
        policy,
        x,
        y,
        workloads.LOSS,
        scale=2.0**15 if policy == F16 else None,
    )
    assert report.compared, report.note
    assert report.hazards == []
    # Every layer stays well inside the threshold (docs/numerics.md quotes these figures).
    assert report.numerics["max_layer_error"] < 0.5 * 32 * (2**-11 if policy == F16 else 2**-8)
    assert report.numerics["probe_s"] < 10


# -- outputs and losses in low precision; Tensor Core advice ------------------------------------


def classifier(output_dtype: str | None) -> Any:
    inputs = keras.Input((16,))
    x = keras.layers.Dense(20, activation="relu", name="hidden")(inputs)
    outputs = keras.layers.Dense(3, activation="softmax", name="probs", dtype=output_dtype)(x)
    return keras.Model(inputs, outputs)


def test_a_low_precision_softmax_output_is_named_with_its_fix() -> None:
    keras.mixed_precision.set_global_policy(F16)
    model = classifier(None)
    x = np.zeros((4, 16), "float32")
    _, _, hazards = checks.check_model(model, F16, 64, x, "categorical_crossentropy")
    assert [h.kind for h in hazards] == [LOW_PRECISION_OUTPUT]
    assert hazards[0].layer == "layer 'probs' (Dense)"
    assert "softmax is computed in float16" in hazards[0].evidence
    assert 'dtype="float32"' in hazards[0].fix
    _, _, hazards = checks.check_model(classifier("float32"), F16, 64, x, "mse")
    assert hazards == []


def test_tensor_core_advice_only_where_tensor_cores_exist_and_never_for_the_output() -> None:
    keras.mixed_precision.set_global_policy(F16)
    model = classifier("float32")
    x = np.zeros((4, 16), "float32")
    _, warnings, _ = checks.check_model(model, F16, 60, x, tensor_cores=False)
    assert warnings == []
    _, warnings, _ = checks.check_model(model, F16, 60, x, tensor_cores=True)
    text = " ".join(message for _, message in warnings)
    assert "hidden (units=20)" in text
    assert "probs" not in text  # the output's width is the number of classes
    assert "batch size 60" in text


def test_a_model_too_large_for_the_budget_is_compared_as_far_as_it_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probe, "RECORD_BUDGET_BYTES", 4096)
    x, y = token_ids()
    report, _ = run_probe(text_model(TokenEmbedding), BF16, x, y, "sparse_categorical_crossentropy")
    assert report.note
    assert "memory budget" in report.note
    assert INTEGER_CAST in kinds(report)  # the first layer still fit


# -- what the probe costs -----------------------------------------------------------------------


def test_the_probe_says_where_its_seconds_go() -> None:
    (x, y), *_ = workloads.make_batches("cnn", {}, 32, 1, 0)
    build = lambda: workloads.build("cnn", {})  # noqa: E731
    report, _ = run_probe(build, F16, x, y, workloads.LOSS, scale=2.0**15)
    parts = report.numerics["probe_parts"]
    # One pass per model: its forward pass recorded and its gradients from the same tape (on
    # JAX, one compiled function: traced, compiled, run).
    steps = (
        ("trace", "compile", "run")
        if keras.backend.backend() == "jax"
        else ("forward", "gradients")
    )
    passes = {f"{side}_{step}" for side in ("float32", "policy") for step in steps}
    assert set(parts) == {"twin", "weights", *passes, "compare", "flush_check"}
    assert all(s >= 0 for s in parts.values())
    assert sum(parts.values()) <= report.numerics["probe_s"] + 0.01
    report, _ = run_probe(build, BF16, x, y, workloads.LOSS)
    assert not any("gradients" in part for part in report.numerics["probe_parts"])


def test_the_gradients_of_the_recorded_pass_are_the_backends_gradients() -> None:
    """The gradients come from the pass the probe records (one forward pass, not two), and are
    the ones the backend's own gradient function computes."""
    from tuner.worker import backends

    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16)).astype("float32")
    y = rng.standard_normal((32, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(F16)
    model = small_mlp()
    loss = keras.losses.get("mean_squared_error")
    done = probe_pass.eager_pass(
        model,
        probe_pass.Layers.walk(model),
        x,
        probe_pass.Loss(loss, y, 2.0**15),
        probe_pass.Parts(),
        "policy",
        probe.RECORD_BUDGET_BYTES,
    )
    assert done.error is None
    assert done.gradient_error is None
    assert done.gradients is not None
    alone = backends.current().gradients(model, x, y, loss, 2.0**15)
    for mine, theirs in zip(
        done.gradients, probe_pass.float32_gradients(alone, model.trainable_weights), strict=True
    ):
        assert np.array_equal(mine, theirs)
