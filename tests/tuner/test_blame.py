"""Whose failure it is (issue 70): a trial that fails is asked again without each setting it
added, each as the setting really is (float8 on TensorFlow goes with the XLA it brings), and
the verdict names the setting; a precision is called unsafe only where float32 alone trains."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tuner.setup import KNOB_BY_NAME, Setup
from tuner.trials.result import TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec


def test_each_knob_is_asked_without_as_the_setup_really_is() -> None:
    from tuner.worker.blame import _ASKED, only_with, without

    # float8 first: it brings XLA on TensorFlow, so XLA alone is never asked of it.
    assert [knob.name for knob in _ASKED][:2] == ["float8", "xla"]
    assert {knob.name for knob in _ASKED} == set(KNOB_BY_NAME)
    fp8 = Setup("mixed_bfloat16", 32, float8=True, steps_per_execution=4)
    assert fp8.xla
    assert without(fp8, KNOB_BY_NAME["float8"]) == Setup(
        "mixed_bfloat16", 32, steps_per_execution=4
    )
    assert without(fp8, KNOB_BY_NAME["xla"]) == fp8  # brought by float8: it goes only with it
    assert without(fp8, KNOB_BY_NAME["steps_per_execution"]) == Setup(
        "mixed_bfloat16", 32, float8=True
    )
    assert without(fp8, KNOB_BY_NAME["remat"]) == fp8  # at its default already
    # XLA of its own goes alone; float8 on JAX brings nothing.
    xla = Setup("mixed_float16", 32, xla=True, gradient_accumulation_steps=2)
    assert without(xla, KNOB_BY_NAME["xla"]) == Setup(
        "mixed_float16", 32, gradient_accumulation_steps=2
    )
    jax = Setup("mixed_bfloat16", 32, float8=True, backend="jax")
    assert without(jax, KNOB_BY_NAME["float8"]) == Setup("mixed_bfloat16", 32, backend="jax")

    # The verdict names the setting, with what it brought.
    assert only_with(KNOB_BY_NAME["float8"], fp8) == (
        "fails only with float8 (and the XLA it brings on TensorFlow); it trains without them"
    )
    assert only_with(KNOB_BY_NAME["float8"], jax) == "fails only with float8; it trains without it"
    assert only_with(KNOB_BY_NAME["xla"], xla) == "fails only with XLA; it trains without it"
    assert only_with(KNOB_BY_NAME["gradient_accumulation_steps"], xla) == (
        "fails only with 2 accumulation steps (global batch 64); it trains without it"
    )
    assert only_with(KNOB_BY_NAME["steps_per_execution"], fp8).startswith(
        "fails only with 4 steps per execution;"
    )


#: A model whose own layer has a float8 path (``model.quantize`` calls a layer's ``quantize``,
#: as Keras' guide to quantizing custom layers has it) with a bug in it: its quantized call
#: multiplies its bfloat16 input by its float8 kernel without a cast. Unquantized, it trains.
FLOAT8_BUG = """
    import keras


    class Gate(keras.layers.Layer):
        def build(self, shape):
            self.kernel = self.add_weight(shape=(shape[-1], shape[-1]), initializer="identity")
            self.mode = None

        def quantize(self, mode, type_check=True, config=None):
            self.mode = mode

        def call(self, x):
            if self.mode == "float8":
                return keras.ops.matmul(x, keras.ops.cast(self.kernel, "float8_e4m3fn"))
            return keras.ops.matmul(x, keras.ops.cast(self.kernel, x.dtype))


    def build_model():
        inputs = keras.Input((16,))
        x = keras.layers.Dense(16, activation="relu")(inputs)
        x = Gate(name="gate")(x)
        return keras.Model(inputs, keras.layers.Dense(1)(x))
"""


@pytest.mark.slow
def test_a_float8_trial_that_fails_on_tensorflow_is_blamed_on_float8_not_the_precision(
    tmp_path: Path,
) -> None:
    """Before issue 70 the blame asked it again "without XLA", which float8 brings back: the
    same setup failed again, float32 trained the batch, and mixed_bfloat16 was called unsafe
    ("fails only under mixed_bfloat16")."""
    path = tmp_path / "gate.py"
    path.write_text(textwrap.dedent(FLOAT8_BUG), encoding="utf-8")

    def trial(setup: Setup):  # type: ignore[no-untyped-def]
        spec = TrialSpec(
            model=str(path), setup=setup, steps=3, warmup_steps=1, device="cpu", probe=False
        )
        return run_trial(spec)

    failed = trial(Setup("mixed_bfloat16", 16, float8=True))
    assert failed.status is TrialStatus.UNSUPPORTED, (failed.status, failed.error)
    assert failed.error is not None
    message = failed.error.message
    assert message.startswith(
        "fails only with float8 (and the XLA it brings on TensorFlow); it trains without them: "
    ), message
    assert "float8" in message.split(": ", 1)[1]  # the error itself, after the verdict
    assert "fails only under" not in message
    # The precision trains the same model as it is: it is not unsafe.
    plain = trial(Setup("mixed_bfloat16", 16))
    assert plain.status is TrialStatus.OK, plain.error
