"""Issue 71: models with their own training step (the keras.io VAE: a ``keras.Model`` subclass
with its own ``train_step``, compiled with an optimizer only) tune and run, and the precision
traps in the user's own code are named with their line and fix: a float32 draw meeting a
float16 tensor in a layer's ``call`` (dtype_mismatch), a metric with no float16 kernel on
TensorFlow (no_kernel: the trial casts nothing the run lacks), a ``train_step`` that never
scales its loss under a ``LossScaleOptimizer`` (unscaled_loss)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_scripts import SCRIPTS

from tuner import cli
from tuner.setup import Setup
from tuner.trials.hazards import DTYPE_MISMATCH, NO_KERNEL, UNSCALED_LOSS
from tuner.trials.models import ScriptCommand
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

VAE = SCRIPTS / "vae.py"
VAE_DTYPE_SAFE = SCRIPTS / "vae_dtype_safe.py"
TOPK_METRIC = SCRIPTS / "topk_metric.py"


def _line(path: Path, text: str) -> int:
    """The number of the first line of ``path`` holding ``text``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_a_models_own_step_is_told_by_its_class() -> None:
    import keras

    from tuner import keras_setup
    from tuner.worker.training import reported_loss, reports_a_mean

    class Steps(keras.Model):  # type: ignore[misc]
        def train_step(self, data: Any) -> Any:
            return {}

    class Below(Steps):
        pass

    class Forward(keras.Model):  # type: ignore[misc]
        def call(self, x: Any) -> Any:
            return x

    inputs = keras.Input((3,))
    functional = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    assert keras_setup.own_step(Below()) is Steps  # the class that defines it, not the type
    assert keras_setup.own_step(functional) is None
    assert keras_setup.own_step(Forward()) is None
    assert not keras_setup.defines_call(Below())  # the keras.io VAE: no forward pass
    assert keras_setup.defines_call(Forward())
    assert keras_setup.defines_call(functional)
    # The loss a step reports: its logs' loss, else its first tracker's, else its first value.
    mean = keras.metrics.Mean(name="total_loss")
    mean.update_state(3.0)

    class Tracked(Steps):
        @property
        def metrics(self) -> list[Any]:
            return [keras.metrics.Mean(name="kl"), mean]

    assert reported_loss({"loss": 1.0, "total_loss": 2.0}, Tracked()) == 1.0
    assert reported_loss({"other": 5.0, "total_loss": 2.0}, Tracked()) == 2.0
    assert reported_loss({"other": 5.0}, Tracked()) == 5.0
    # A tracker's running mean is recovered per execution; a batch's own loss is taken as is.
    assert reports_a_mean(Tracked(), 3.0)
    assert not reports_a_mean(Tracked(), 5.0)


def test_scale_loss_is_counted_once_per_optimizer_and_only_for_an_own_step() -> None:
    """The counter goes on a LossScaleOptimizer of a model whose train_step is its own, and a
    warm worker's later runner on the same compiled model reads the same count (its step is not
    traced again); Keras' own step, or no loss scaling, is not counted."""
    import keras

    from tuner.worker.training import count_scale_loss

    class Steps(keras.Model):  # type: ignore[misc]
        def train_step(self, data: Any) -> Any:
            return {}

    own = Steps()
    own.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam()))
    calls = count_scale_loss(own)
    assert calls == [0]
    own.optimizer.scale_loss(2.0)
    assert calls == [1]
    assert count_scale_loss(own) is calls  # the same optimizer: the same count
    inputs = keras.Input((2,))
    functional = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    functional.compile(
        optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam()), loss="mse"
    )
    assert count_scale_loss(functional) is None
    plain = Steps()
    plain.compile(optimizer="adam")
    assert count_scale_loss(plain) is None


def test_a_float32_draw_in_a_layer_is_named_at_its_line_with_its_fix() -> None:
    """The keras.io Sampling layer called eagerly under mixed_float16 on TensorFlow: the
    innermost frame of the user's code, the values it held in each dtype, and the line that
    draws the float32 noise, given the tensor's dtype."""
    import keras
    import numpy as np
    from keras import ops

    from tuner.worker import blame

    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow does not promote float16 with float32; JAX and PyTorch do")

    class Sampling(keras.layers.Layer):  # type: ignore[misc]
        def call(self, inputs: Any) -> Any:
            z_mean, z_log_var = inputs
            epsilon = keras.random.normal(shape=ops.shape(z_mean))
            return z_mean + ops.exp(0.5 * z_log_var) * epsilon

    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        layer = Sampling(name="sampling")
        z = np.zeros((2, 3), dtype=np.float16)
        with pytest.raises(Exception, match="half tensor but is a float tensor") as caught:
            layer([z, z])
    finally:
        keras.config.set_dtype_policy(before)
    found = next(
        p.search(str(caught.value)) for p in blame._MISMATCH if p.search(str(caught.value))
    )
    assert found is not None
    hazard = blame.dtype_mismatch(caught.value, found, "mixed_float16", {})
    here = Path(__file__).read_text(encoding="utf-8").splitlines()
    call_line = next(i for i, t in enumerate(here, 1) if "* epsilon" in t and "return" in t)
    draw_line = next(i for i, t in enumerate(here, 1) if "epsilon = keras.random.normal(" in t)
    assert hazard.kind == DTYPE_MISMATCH
    assert (hazard.whose, hazard.severity) == ("model", "unsafe")
    assert hazard.layer == "layer 'sampling' (Sampling)"
    assert hazard.at == f"test_custom_steps.py:{call_line} in Sampling.call"
    assert "epsilon (float32) meets z_mean, z_log_var (float16)" in hazard.evidence
    assert hazard.fix == (
        f"draw epsilon in z_mean's dtype at test_custom_steps.py:{draw_line}: "
        "keras.random.normal(..., dtype=z_mean.dtype)"
    )


def test_the_trial_casts_nothing_the_run_lacks_and_names_a_metrics_line() -> None:
    """A float16 output stays float16 where the trial may not cast it (a script, an own step):
    the model trained is the model as it is; a metric's line is where it is made, read from
    the syntax tree (the script's docstring names it first)."""
    import keras

    from tuner.worker import blame, checks

    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    finally:
        keras.config.set_dtype_policy(before)
    x = keras.ops.zeros((2, 4))
    kept, _, hazards = checks.check_model(model, "mixed_float16", 2, x, "mse", cast=False)
    assert kept is model
    assert "this trial adds no cast, as your run has none" in hazards[0].evidence
    cast, _, _ = checks.check_model(model, "mixed_float16", 2, x, "mse")
    assert cast is not model
    assert blame._line_naming(str(TOPK_METRIC), "SparseTopKCategoricalAccuracy") == (
        f"topk_metric.py:{_line(TOPK_METRIC, 'keras.metrics.SparseTopKCategoricalAccuracy(5')}"
    )


def _trial(script: Path, policy: str, **kwargs: Any) -> TrialResult:
    scale = "dynamic" if policy == "mixed_float16" else "none"
    spec = TrialSpec(
        model=ScriptCommand(str(script)).spec,
        setup=Setup(policy, 32, scale, backend="tensorflow"),
        device="cpu",
        measure_seconds=0.3,
        warmup_steps=2,
        min_steps=4,
        timeout_s=240,
        **kwargs,
    )
    return run_trial(spec)


@pytest.mark.slow
def test_a_train_step_that_does_not_scale_its_loss_is_named(tmp_path: Path) -> None:
    """The dtype-safe VAE trains under mixed_float16, but its train_step never calls
    scale_loss while Keras wraps its optimizer: unsafe, at the step's line, with the fix. The
    same script that scales its loss is not named. The probe says what it cannot compare."""
    unscaled = _trial(VAE_DTYPE_SAFE, "mixed_float16")
    assert unscaled.status is TrialStatus.UNSAFE, unscaled.error
    (hazard,) = [h for h in unscaled.hazards if h.kind == UNSCALED_LOSS]
    step = _line(VAE_DTYPE_SAFE, "def train_step")
    assert hazard.at == f"vae_dtype_safe.py:{step} in VAE.train_step"
    assert unscaled.error is not None
    assert unscaled.error.message == (
        "mixed_float16 is unsafe for this model: a custom train_step that does not scale its "
        f"loss at vae_dtype_safe.py:{step} in VAE.train_step"
    )
    assert (hazard.whose, hazard.severity) == ("model", "unsafe")
    assert "gradient is divided by its scale (32768)" in hazard.evidence
    assert "self.optimizer.scale_loss(loss)" in hazard.fix
    assert "no forward pass of its own to compare" in " ".join(unscaled.warnings)
    assert unscaled.losses
    assert all(loss > 0 for loss in unscaled.losses)

    scaled = tmp_path / "vae_scaled.py"
    text = VAE_DTYPE_SAFE.read_text(encoding="utf-8")
    scaled.write_text(
        text.replace(
            "        grads = tape.gradient(total_loss,",
            "            total_loss = self.optimizer.scale_loss(total_loss)\n"
            "        grads = tape.gradient(total_loss,",
        ),
        encoding="utf-8",
    )
    fixed = _trial(scaled, "mixed_float16")
    assert fixed.status is TrialStatus.OK, fixed.error
    assert not [h for h in fixed.hazards if h.kind == UNSCALED_LOSS]


def _tune(capsys: pytest.CaptureFixture[str], script: Path, store: str) -> dict[str, Any]:
    code = cli.main(
        ["tune", "--script", str(script), "--backend", "tensorflow", "--device", "cpu",
         "--measure-seconds", "0.3", "--storage", store, "--json",
         "--policies", "float32,mixed_float16", "--batch-sizes", "32", "--max-trials", "2"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def _show(capsys: pytest.CaptureFixture[str], session: str, store: str) -> str:
    assert cli.main(["show", session, "--storage", store]) == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.slow
def test_the_vae_tunes_and_its_sampling_mismatch_is_named_with_line_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trial #0 trains the script as it is (float32, its own train_step, no loss compiled);
    mixed_float16 fails while the model is built, in Sampling.call, and the trial names the
    line, the values and the fix; float32 is recommended."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    rec = _tune(capsys, VAE, store)
    assert Setup.from_dict(rec["setup"]).policy.name == "float32"
    # Keras' default, made where its first layer reads it, is no line of the script's.
    assert rec["today"] == f"float32, batch size 32 (fit at vae.py:{_line(VAE, 'vae.fit(')})"
    call = _line(VAE, "* epsilon")
    draw = _line(VAE, "epsilon = keras.random.normal(")
    text = _show(capsys, rec["session"], store)
    assert (
        f"unsafe mixed_float16, layer 'sampling' (Sampling) at vae.py:{call} in Sampling.call: "
        "epsilon (float32) meets z_mean, z_log_var (float16) in Sampling.call"
    ) in text
    assert (
        f"Fix: draw epsilon in z_mean's dtype at vae.py:{draw}: "
        "keras.random.normal(..., dtype=z_mean.dtype)"
    ) in text
    assert cli.main(["show", rec["session"], "--storage", store, "--json"]) == 0
    trials = json.loads(capsys.readouterr().out)["trials"]
    first = trials[0]["result"]
    assert (first["status"], first["spec"]["policy"]) == ("ok", "float32")
    assert all(v > 0 for v in first["losses"])  # the step's own loss, its tracker's mean
    hazards = [h for t in trials for h in t["result"]["hazards"] if h["kind"] == DTYPE_MISMATCH]
    assert hazards
    assert hazards[0]["whose"] == "model"


@pytest.mark.slow
def test_a_top_k_metric_with_no_float16_kernel_is_named_and_float16_not_recommended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The keras.io ViT's top-5 accuracy on float16 logits: TensorFlow has no float16 InTopK.
    Without the float32 cast the run does not have, the trial fails where the run would."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    rec = _tune(capsys, TOPK_METRIC, store)
    assert Setup.from_dict(rec["setup"]).policy.name == "float32"
    made = _line(TOPK_METRIC, "keras.metrics.SparseTopKCategoricalAccuracy(5")
    text = _show(capsys, rec["session"], store)
    assert (
        "unsafe mixed_float16, metric 'top-5-accuracy' (SparseTopKCategoricalAccuracy) at "
        f"topk_metric.py:{made}: TensorFlow has no float16 kernel for InTopKV2"
    ) in text
    assert re.search(r"Fix: keep SparseTopKCategoricalAccuracy in float32", text)
    assert cli.main(["show", rec["session"], "--storage", store, "--json"]) == 0
    trials = json.loads(capsys.readouterr().out)["trials"]
    half = [t["result"] for t in trials if t["result"]["spec"]["policy"] == "mixed_float16"]
    assert half
    assert all(r["status"] == "unsafe" for r in half)
    kinds = {h["kind"]: h for r in half for h in r["hazards"]}
    assert kinds[NO_KERNEL]["whose"] == "precision"


@pytest.mark.slow
def test_run_trains_the_vae_and_times_its_epochs(tmp_path: Path) -> None:
    """mptune run with a float32 setup: the script's own train_step trains at the tuned batch
    size, and its whole epochs after the first are timed."""
    config = tmp_path / "tuned.json"
    config.write_text(
        json.dumps(
            {
                "schema": "mptune.config",
                "schema_version": 1,
                "model": ScriptCommand(str(VAE)).spec,
                "setup": Setup("float32", 64, backend="tensorflow").to_dict(explicit=True),
                "evidence": {"samples_per_second": 900.0, "trials": [1]},
                "hardware": {"device": "cpu"},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(VAE), "--config", str(config), "--",
         "--epochs", "3"],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "vae.py's fit runs float32, batch size 64 (read back from the model)" in done.stderr
    # 256 images at batch 64: 4 steps an epoch, 2 whole epochs after the first timed.
    assert re.search(
        r"vae\.py's fit trained at [\d,]+ samples/s over 2 whole epochs after the first: "
        r"8 steps, 512 samples",
        done.stderr,
    ), done.stderr
