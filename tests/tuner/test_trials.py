"""Real trials: TensorFlow on the CPU, tiny models, a few steps each, one worker per trial."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tuner.setup import Setup
from tuner.trials.messages import (
    MemoryMessage,
    ResultMessage,
    StartedMessage,
    StepMessage,
    WorkerMessage,
)
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

pytestmark = pytest.mark.slow

TINY_MLP = "builtin:mlp:features=16,width=32,depth=1"


def trial(
    model: str,
    policy: str = "float32",
    batch_size: int = 16,
    loss_scale: str | None = None,
    backend: str = "tensorflow",
    **kwargs,
) -> TrialResult:
    values = {"steps": 4, "warmup_steps": 1, "device": "cpu", "timeout_s": 120.0}
    values.update(kwargs)
    setup = Setup(policy, batch_size, loss_scale, backend=backend)
    return run_trial(TrialSpec(model=model, setup=setup, **values))


def write_model(tmp_path: Path, body: str, name: str = "user_model.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_ok_trial_reports_every_figure() -> None:
    events: list[WorkerMessage] = []
    spec = TrialSpec.create(
        "builtin:cnn:image_size=16,filters=8,dense=16",
        "float32",
        16,
        steps=5,
        warmup_steps=2,
        device="cpu",
    )
    result = run_trial(spec, events.append)
    assert result.status is TrialStatus.OK, result.error
    assert result.samples_per_second
    assert result.samples_per_second > 0
    assert result.step_time_ms["p50"] <= result.step_time_ms["p90"]
    assert result.peak_memory_mb
    assert result.memory_kind == "cpu_rss"
    assert len(result.losses) == 5 == result.steps_completed
    assert all(math.isfinite(v) for v in result.losses)
    assert result.loss_scales == (None,) * 5
    t = result.timings
    assert t.total_s >= t.startup_s + t.build_s + t.warmup_s + t.measure_s - 1e-6
    assert 0 < t.measured_share < 1
    assert result.device == "cpu"
    assert result.versions["tensorflow"]
    kinds = [type(e) for e in events]
    assert kinds.index(StartedMessage) < kinds.index(ResultMessage)
    steps = [e for e in events if isinstance(e, StepMessage)]
    assert [s.phase for s in steps] == ["warmup"] * 2 + ["measure"] * 5
    # The parent samples the worker's memory and its CPU use (issue 35: the window plots it),
    # a share of the machine's cores; the first sample has no interval to measure over.
    memory = [e for e in events if isinstance(e, MemoryMessage)]
    use = [m.cpu_percent for m in memory[1:]]
    assert memory
    assert memory[0].cpu_percent is None
    assert use
    assert all(u is not None and 0 <= u <= 100 for u in use)
    assert max(use) > 0  # type: ignore[operator]


@pytest.mark.parametrize("model", ["builtin:mlp", "builtin:transformer:seq_len=16,vocab=64"])
def test_other_builtins_train(model: str) -> None:
    result = trial(model, "mixed_bfloat16", batch_size=8)
    assert result.status is TrialStatus.OK, result.error


def test_same_seed_gives_the_same_losses_across_policies() -> None:
    f32 = trial(TINY_MLP, "float32", steps=3)
    f16 = trial(TINY_MLP, "mixed_float16", steps=3)
    assert f16.status is TrialStatus.OK
    # Same weights and data: the first loss agrees to float16 precision.
    assert f16.losses[0] == pytest.approx(f32.losses[0], rel=1e-2)
    assert f16.loss_scales[0] == 32768.0


def test_dynamic_loss_scale_trace_and_skipped_steps() -> None:
    # A huge initial scale overflows float16 gradients: steps are skipped and the scale halves.
    result = trial(
        TINY_MLP, "mixed_float16", loss_scale="dynamic:1e30:1000", steps=6, warmup_steps=0
    )
    assert result.status is TrialStatus.OK, result.error
    assert result.skipped_steps >= 1
    scales = [s for s in result.loss_scales if s is not None]
    assert scales[0] < 1e30
    assert scales == sorted(scales, reverse=True)


def test_fixed_loss_scale_overflow_diverges() -> None:
    result = trial(TINY_MLP, "mixed_float16", loss_scale="fixed:1e12", steps=4)
    assert result.status is TrialStatus.DIVERGED
    assert result.nonfinite_steps >= 1
    assert "inf/NaN" in result.error.message or "not finite" in result.error.message


def test_dynamic_scale_collapsing_to_one_diverges(tmp_path: Path) -> None:
    # Activations past float16's range (65504): every step overflows, whatever the scale.
    model = write_model(
        tmp_path,
        """
        import keras

        def build_model():
            inputs = keras.Input((8,))
            x = keras.layers.Dense(8)(inputs)
            x = keras.layers.Lambda(lambda t: t * 1e6)(x)
            outputs = keras.layers.Dense(1, dtype="float32")(x)
            model = keras.Model(inputs, outputs)
            model.compile(optimizer="sgd", loss="mse")
            return model
    """,
    )
    result = trial(model, "mixed_float16", loss_scale="dynamic:4", steps=5, warmup_steps=0)
    assert result.status is TrialStatus.DIVERGED, result
    assert result.loss_scales[-1] <= 1.0  # Keras 3 keeps halving below 1


@pytest.mark.product_launcher  # the resident memory of a process of its own
def test_cpu_memory_limit_is_oom() -> None:
    result = trial(TINY_MLP, memory_limit_mb=50)
    assert result.status is TrialStatus.OOM
    assert "50 MB" in result.error.message


@pytest.mark.product_launcher  # its stacks and group, as a user's
def test_timeout_keeps_the_steps_already_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPTUNE_TEST_FAULT", "hang@4")  # warm-up 1 + 2 measured, then stuck
    events: list[WorkerMessage] = []
    # On JAX (the runner's limit is the same on every backend), whose worker starts fastest:
    # 20 s covers a fresh worker's start (its import: 12 s did not, once, with the machine's
    # load at 11 on its 2 cores) and first steps; the hang reaches it.
    setup = Setup("float32", 16, backend="jax")
    spec = TrialSpec(
        model=TINY_MLP, setup=setup, steps=10, warmup_steps=1, device="cpu", timeout_s=20
    )
    result = run_trial(spec, events.append)
    assert result.status is TrialStatus.TIMEOUT
    assert result.steps_completed == 2
    assert len(result.losses) == 2
    assert result.timings.total_s >= 20
    assert any(isinstance(e, MemoryMessage) and e.rss_mb for e in events)


@pytest.mark.product_launcher  # its log and channel, as a user's
def test_user_prints_do_not_break_the_channel(tmp_path: Path) -> None:
    model = write_model(
        tmp_path,
        """
        import sys
        import keras

        print('{"type": "result", "samples_per_second": 1e9}')
        print("not json at all", file=sys.stderr)

        def build_model():
            print("building...")
            inputs = keras.Input((4,))
            return keras.Model(inputs, keras.layers.Dense(2)(inputs))
    """,
    )
    result = trial(model, steps=3)
    assert result.status is TrialStatus.OK, result.error
    assert result.samples_per_second < 1e9


def test_make_dataset_and_user_compile_are_used(tmp_path: Path) -> None:
    model = write_model(
        tmp_path,
        """
        import numpy as np
        import tensorflow as tf
        import keras

        def build_model():
            inputs = keras.Input((6,))
            outputs = keras.layers.Dense(3, activation="softmax", dtype="float32")(
                keras.layers.Dense(8)(inputs))
            model = keras.Model(inputs, outputs)
            model.compile(optimizer=keras.optimizers.SGD(0.1),
                          loss="sparse_categorical_crossentropy")
            return model

        def make_dataset(batch_size):
            x = np.ones((64, 6), np.float32)
            y = np.zeros((64,), np.int32)
            return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    """,
    )
    result = trial(model, "mixed_float16", batch_size=16, steps=6)
    assert result.status is TrialStatus.OK, result.error
    assert result.losses[-1] < result.losses[0]  # SGD on constant data learns it
    assert not any("float16" in w and "output" in w for w in result.warnings)


@pytest.mark.parametrize(
    "body, fragment, line",
    [
        (
            """
     def build_model():
         raise RuntimeError("no weights here")
     """,
            "build_model() failed: RuntimeError: no weights here",
            3,
        ),
        (
            """
     def build_model():
         return 42
     """,
            "returned int, not a keras.Model",
            None,
        ),
        (
            """
     import keras
     import numpy as np

     def build_model():
         inputs = keras.Input((8,))
         return keras.Model(inputs, keras.layers.Dense(1)(inputs))

     def make_dataset(batch_size):
         return np.zeros((64, 5), np.float32), np.zeros((64, 1), np.float32)
     """,
            "ValueError",
            None,
        ),
        (
            """
     import keras

     raise ImportError("missing dependency foo")

     def build_model():
         pass
     """,
            "importing",
            4,
        ),
    ],
)
def test_user_errors_name_the_problem(
    tmp_path: Path, body: str, fragment: str, line: int | None
) -> None:
    model = write_model(tmp_path, body)
    # The worker's reading of the user's code is the same whatever the backend: JAX, which
    # starts fastest.
    result = trial(model, backend="jax")
    assert result.status is TrialStatus.USER_ERROR
    assert fragment in result.error.message
    if line is not None:
        assert result.error.location == f"{model}:{line}"


def test_a_float8_policy_set_globally_is_one_line_saying_to_quantize_after_the_build(
    tmp_path: Path,
) -> None:
    """Issue 53: under a global float8 policy Keras builds the layers' float8 variables with
    them and then cannot build the model to train it (keras-team/keras#23479, "Unable to
    automatically build the model"): the trial says where the policy is set, and how Keras
    trains in float8 (on JAX: the worker's reading of the policy is the same everywhere)."""
    model = write_model(
        tmp_path,
        """
        import keras

        def build_model():
            keras.mixed_precision.set_global_policy("float8_from_mixed_bfloat16")
            inputs = keras.Input((8,))
            model = keras.Model(inputs, keras.layers.Dense(4)(inputs))
            model.compile("adam", "mse")
            return model
    """,
    )
    result = trial(model, backend="jax")
    assert result.status is TrialStatus.USER_ERROR, result.error
    assert result.error.location == f"{model}:5"
    assert "float8_from_mixed_bfloat16" in result.error.message
    assert "set mixed_bfloat16 instead" in result.error.message
    assert 'model.quantize("float8")' in result.error.message


def test_float16_output_is_warned_and_cast(tmp_path: Path) -> None:
    model = write_model(
        tmp_path,
        """
        import keras

        def build_model():
            inputs = keras.Input((16,))
            x = keras.layers.Dense(12)(inputs)
            return keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(x))
    """,
    )
    result = trial(model, "mixed_float16")
    assert result.status is TrialStatus.OK, result.error
    [hazard] = result.hazards
    assert hazard.kind == "low_precision_output"
    assert hazard.layer == "layer 'dense_1' (Dense)"
    assert "softmax is computed in float16" in hazard.evidence
    # No Tensor Cores on a CPU: no advice about widths that are not multiples of 8.
    assert not any("units=12" in w for w in result.warnings)


TEXT_MODEL = """
    import keras
    import numpy as np

    VOCAB, LENGTH = 5000, 16

    class TokenAndPositionEmbedding(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.token_emb = keras.layers.Embedding(VOCAB, 16)
            self.pos_emb = keras.layers.Embedding(LENGTH, 16)

        def call(self, x):
            positions = self.pos_emb(keras.ops.arange(LENGTH))
            return self.token_emb(x) + positions

    def build_model():
        inputs = keras.Input(shape=(LENGTH,){dtype})
        x = TokenAndPositionEmbedding(name="embed")(inputs)
        x = keras.layers.GlobalAveragePooling1D()(x)
        outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(x)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        return model

    def make_dataset(batch_size):
        rng = np.random.default_rng(0)
        x = rng.integers(0, VOCAB, size=(4 * batch_size, LENGTH))
        return x.astype("{x_dtype}"), rng.integers(0, 2, size=(4 * batch_size,))
"""


def test_token_ids_through_a_float32_input_are_unsafe_with_figures_and_the_fix(
    tmp_path: Path,
) -> None:
    """The published pattern: ids in a float32 Input reach a custom embedding layer, which
    casts them to bfloat16 (exact only up to 256)."""
    model = write_model(tmp_path, TEXT_MODEL.format(dtype="", x_dtype="float32"))
    result = trial(model, "mixed_bfloat16")
    assert result.status is TrialStatus.UNSAFE, result.error
    assert "unsafe for this model" in result.error.message
    assert "layer 'embed' (TokenAndPositionEmbedding)" in result.error.message
    [hazard] = [h for h in result.hazards if h.unsafe]
    assert hazard.kind == "integer_cast"
    assert hazard.layer == ("layer 'embed' (TokenAndPositionEmbedding)")
    assert 'dtype="int32"' in hazard.fix
    # Measured as the policy would run once fixed: figures, and the fix named.
    assert result.samples_per_second
    assert result.samples_per_second > 0
    assert result.numerics["fixed_layers"] == ["embed"]
    assert any("measured with the fix applied" in w for w in result.warnings)
    assert result.timings.probe_s
    assert result.timings.probe_s > 0
    # float32 runs it as it is; with integer ids the policy is safe.
    assert trial(model, "float32").status is TrialStatus.OK
    fixed = write_model(
        tmp_path, TEXT_MODEL.format(dtype=', dtype="int32"', x_dtype="int32"), "fixed.py"
    )
    result = trial(fixed, "mixed_bfloat16")
    assert result.status is TrialStatus.OK, result.error
    assert result.hazards == ()


POLICY_ONLY_FAILURE = """
    import keras
    import tensorflow as tf

    class Projection(keras.layers.Layer):
        def call(self, x):
            return tf.matmul(x, tf.ones((8, 8), tf.float32))

    def build_model():
        inputs = keras.Input((8,))
        x = Projection(name="projection")(inputs)
        return keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x))
"""


def test_a_failure_only_under_the_policy_is_unsafe_not_the_users_error(tmp_path: Path) -> None:
    model = write_model(tmp_path, POLICY_ONLY_FAILURE)
    result = trial(model, "mixed_float16")
    assert result.status is TrialStatus.UNSAFE
    assert "fails only under mixed_float16" in result.error.message
    # named as the trap it is, at its line in the user's code (issue 71), TensorFlow's meaningful
    # line kept in the hazard's evidence
    assert "a float32 value meets a half-precision tensor" in result.error.message
    assert "user_model.py:" in result.error.message
    (trap,) = [h for h in result.hazards if h.kind == "dtype_mismatch"]
    assert "does not match type float16" in trap.evidence, trap.evidence
    assert trial(model, "float32").status is TrialStatus.OK


def test_a_tensorflow_error_is_reported_by_its_meaningful_line(tmp_path: Path) -> None:
    model = write_model(
        tmp_path,
        """
        import keras
        import numpy as np

        def build_model():
            inputs = keras.Input((4,), dtype="int32")
            x = keras.layers.Flatten()(keras.layers.Embedding(10, 4)(inputs))
            return keras.Model(inputs, keras.layers.Dense(1)(x))

        def make_dataset(batch_size):
            return np.full((batch_size, 4), 12, np.int32), np.zeros((batch_size, 1), np.float32)
    """,
    )
    result = trial(model, "float32")
    assert result.status is TrialStatus.USER_ERROR
    assert "is not in [0, 10)" in result.error.message
    assert "Graph execution error" not in result.error.message
    assert "Graph execution error" in result.error.traceback  # the whole of it, for --verbose


@pytest.fixture(scope="module")
def saved_keras_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("saved") / "tiny.keras"
    script = textwrap.dedent(f"""
        import keras
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8,))
        x = keras.layers.Dense(16, activation="relu")(inputs)
        outputs = keras.layers.Dense(2, activation="softmax")(x)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer=keras.optimizers.RMSprop(0.01), loss="categorical_crossentropy")
        model.save({str(path)!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    return str(path)


def test_saved_keras_model_is_rebuilt_under_the_policy(saved_keras_model: str) -> None:
    result = trial(saved_keras_model, "mixed_float16", steps=3)
    assert result.status is TrialStatus.OK, result.error
    # It was saved in float32; rebuilt under mixed_float16 its softmax becomes float16.
    assert [(h.kind, h.layer) for h in result.hazards] == [
        ("low_precision_output", "layer 'dense_1' (Dense)")
    ]
    assert "softmax is computed in float16" in result.hazards[0].evidence
    assert result.numerics["probe_s"] > 0  # the probe compared the rebuilt model with float32
    # Dynamic loss scaling is on: Keras starts at 32768 and halves on an overflowing step
    # (which a warm-up step with some weights is).
    scale = result.loss_scales[0]
    assert scale is not None
    assert 1 < scale <= 32768.0
    assert math.log2(scale).is_integer()


def test_gpu_requested_without_one_is_a_clear_error() -> None:
    result = trial(TINY_MLP, device="gpu:0")
    assert result.status is TrialStatus.USER_ERROR
    assert "sees no GPU" in result.error.message
