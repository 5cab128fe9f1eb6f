"""Real trials with the execution knobs: XLA, steps per execution, gradient accumulation, TF32,
and the measurement that runs steps the way ``model.fit`` does."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from tuner.setup import Setup
from tuner.trials.messages import StepMessage, WorkerMessage
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

pytestmark = pytest.mark.slow

TINY_MLP = "builtin:mlp:features=16,width=32,depth=1"


def trial(setup: Setup, model: str = TINY_MLP, **kwargs: object) -> TrialResult:
    values: dict[str, object] = {
        "steps": 8,
        "warmup_steps": 1,
        "device": "cpu",
        "timeout_s": 120.0,
        "probe": False,
    }
    values.update(kwargs)
    return run_trial(TrialSpec(model=model, setup=setup, **values))  # type: ignore[arg-type]


def test_steps_per_execution_runs_whole_executions_and_reports_both_figures() -> None:
    events: list[WorkerMessage] = []
    spec = TrialSpec(
        model=TINY_MLP,
        setup=Setup("float32", 16, steps_per_execution=4),
        steps=8,
        warmup_steps=1,
        device="cpu",
        probe=False,
    )
    result = run_trial(spec, events.append)
    assert result.status is TrialStatus.OK, result.error
    # 8 steps in executions of 4: two calls; the steps of one call share its time and loss.
    assert result.executions == 2
    assert result.steps_completed == 8
    steps = [e for e in events if isinstance(e, StepMessage) and e.phase == "measure"]
    assert [e.step for e in steps] == list(range(1, 9))
    assert len({e.time_ms for e in steps[:4]}) == 1
    assert len({e.loss for e in steps[4:]}) == 1
    assert result.samples_per_second
    assert result.median_samples_per_second
    # Both figures, each from what it names (compared as rates they are bench/'s, not a test's
    # on a loaded machine: a median of two executions beside other tests once read 0.56x fit's):
    # the median from the executions' step times, the figure from fit's own loop.
    assert result.median_samples_per_second == pytest.approx(
        16 * 1000 / result.step_time_ms["p50"], rel=1e-6
    )
    assert result.input is not None
    assert result.input.fit_loop
    assert result.samples_per_second == result.input.samples_per_second
    assert all(math.isfinite(v) for v in result.losses)


def test_losses_match_whatever_the_steps_per_execution() -> None:
    # The same seed and data: one step per call and four per call train the same weights, so
    # the mean loss of each group of four steps agrees. (Warm-up runs whole executions: four
    # warm-up steps start both measured windows at the same step.)
    one = trial(Setup("float32", 16), steps=8, warmup_steps=4)
    four = trial(Setup("float32", 16, steps_per_execution=4), steps=8, warmup_steps=4)
    assert one.ok
    assert four.ok
    for group in range(2):
        mean_one = sum(one.losses[4 * group : 4 * group + 4]) / 4
        assert four.losses[4 * group] == pytest.approx(mean_one, rel=1e-4)


def test_xla_trains_the_same_way() -> None:
    plain = trial(Setup("float32", 16))
    xla = trial(Setup("float32", 16, xla=True))
    assert plain.ok, plain.error
    assert xla.ok, xla.error
    assert xla.losses[0] == pytest.approx(plain.losses[0], rel=1e-3)


def test_gradient_accumulation_updates_once_per_global_batch() -> None:
    # mixed_float16 with dynamic scaling: the micro-steps that only accumulate must not be
    # counted as steps the loss scaler skipped.
    result = trial(Setup("mixed_float16", 16, gradient_accumulation_steps=2))
    assert result.status is TrialStatus.OK, result.error
    assert result.skipped_steps == 0
    assert result.steps_completed == 8


def test_tf32_is_float32_on_a_cpu() -> None:
    plain = trial(Setup("float32", 16))
    tf32 = trial(Setup("float32", 16, tf32=True))
    assert tf32.ok
    assert tf32.spec.setup.precision == "float32+tf32"
    # No TF32 units on a CPU: the same arithmetic.
    assert tf32.losses == pytest.approx(plain.losses, rel=1e-6)


def test_a_model_xla_cannot_compile_is_unsupported_not_the_users_error(tmp_path: Path) -> None:
    path = tmp_path / "pyfunc_model.py"
    path.write_text(
        textwrap.dedent(
            """
            import keras
            import numpy as np
            import tensorflow as tf


            class Host(keras.layers.Layer):
                # A host-side NumPy step: fine in a tf.function, not compilable by XLA.
                def call(self, x):
                    y = tf.numpy_function(lambda a: a * 1.0, [x], x.dtype)
                    return tf.ensure_shape(y, x.shape)


            def build_model():
                inputs = keras.Input((8,))
                x = Host()(inputs)
                outputs = keras.layers.Dense(1)(x)
                return keras.Model(inputs, outputs)
            """
        )
    )
    result = trial(Setup("float32", 16, xla=True), model=str(path))
    assert result.status is TrialStatus.UNSUPPORTED, (result.status, result.error)
    assert result.error
    assert result.error.message.startswith("fails only with XLA; it trains without it: ")
    assert trial(Setup("float32", 16), model=str(path)).ok
