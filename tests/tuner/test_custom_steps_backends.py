"""Issue 71's own training steps on JAX and PyTorch, written as keras.io's "Customizing what
happens in fit()" guides write them for each backend: a stateless JAX ``train_step(self,
state, data)`` (``jax.value_and_grad``, ``optimizer.stateless_apply``, trackers updated with
``stateless_update_state``), a PyTorch ``train_step(self, data)`` (``zero_grad``,
``loss.backward()``, ``optimizer.apply``), and a model that overrides only ``compute_loss``.
Each tunes (trial #0 trains the script as it is: compiled with an optimizer only, it trains
only through its own step or loss, so a trial that ran timed that step) and runs under its
backend with its epochs counted; a step that never scales its loss under mixed_float16 is
named with the fix as a step is written on that backend, and the fixed step is not."""

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
from tuner.trials.hazards import UNSCALED_LOSS
from tuner.trials.models import ScriptCommand
from tuner.trials.result import TrialStatus
from tuner.trials.runner import run_trial
from tuner.trials.spec import TrialSpec

pytestmark = pytest.mark.slow

JAX_STEP = SCRIPTS / "jax_stateless_step.py"
TORCH_STEP = SCRIPTS / "torch_own_step.py"
OWN_LOSS = SCRIPTS / "own_compute_loss.py"


def _line(path: Path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _tune(
    capsys: pytest.CaptureFixture[str], script: Path, backend: str, policies: str, tmp: Path
) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    """Tune ``script`` on ``backend`` (two trials at batch 32); the recommendation, the
    trials' results and the tuned config."""
    store, out = f"sqlite:///{tmp / 's.db'}", tmp / "tuned.json"
    code = cli.main(
        ["tune", "--script", str(script), "--backend", backend, "--device", "cpu",
         "--measure-seconds", "0.3", "--storage", store, "--json", "--out", str(out),
         "--policies", policies, "--batch-sizes", "32", "--max-trials", "2"]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0, text
    rec = json.loads(text)
    assert cli.main(["show", rec["session"], "--storage", store, "--json"]) == 0
    trials = [t["result"] for t in json.loads(capsys.readouterr().out)["trials"]]
    first = trials[0]
    assert (first["status"], first["spec"]["policy"]) == ("ok", "float32"), first
    assert first["losses"]
    assert all(v > 0 for v in first["losses"])  # the step's own loss, its tracker's mean
    fit = _line(script, "model.fit(")
    assert rec["today"] == f"float32, batch size 32 (fit at {script.name}:{fit})"
    return rec, trials, out


def _unscaled(trials: list[dict[str, Any]], script: Path) -> dict[str, Any]:
    """The unscaled_loss hazard of the mixed_float16 trial, at the step's line."""
    (half,) = [r for r in trials if r["spec"]["policy"] == "mixed_float16"]
    assert half["status"] == "unsafe", half
    (hazard,) = [h for h in half["hazards"] if h["kind"] == UNSCALED_LOSS]
    step = _line(script, "def train_step")
    assert hazard["at"] == f"{script.name}:{step} in CustomModel.train_step"
    assert (hazard["whose"], hazard["severity"]) == ("model", "unsafe")
    assert "gradient is divided by its scale (32768)" in hazard["evidence"]
    assert "tape" not in hazard["fix"]  # TensorFlow's wording, on no other backend
    return hazard  # type: ignore[no-any-return]


def _run(script: Path, config: Path, backend: str) -> str:
    """``mptune run`` of ``script`` with the tuned ``config`` under ``backend``, 3 epochs."""
    env = {**os.environ, "KERAS_BACKEND": backend}
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(script), "--config", str(config), "--",
         "--epochs", "3"],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    name = re.escape(script.name)
    policy = Setup.from_dict(json.loads(config.read_text())["setup"]).policy.name
    # the loss scale is said where the recommendation has one (mixed_float16 may win here)
    assert re.search(
        rf"{name}'s fit runs {policy}(, loss scale [^,]+)?, batch size 32 \(read back", done.stderr
    ), done.stderr
    # 512 samples at batch 32: 16 steps an epoch, 2 whole epochs after the first timed.
    assert re.search(
        rf"{name}'s fit trained at [\d,]+ samples/s over 2 whole epochs after the first: "
        r"32 steps, 1,024 samples",
        done.stderr,
    ), done.stderr
    return done.stderr


def _trial(script: Path, backend: str) -> Any:
    spec = TrialSpec(
        model=ScriptCommand(str(script)).spec,
        setup=Setup("mixed_float16", 32, "dynamic", backend=backend),
        device="cpu",
        measure_seconds=0.3,
        warmup_steps=2,
        min_steps=4,
        timeout_s=240,
    )
    return run_trial(spec)


def test_a_stateless_train_step_tunes_and_runs_on_jax(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stateless step is what the trial jits and times; under mixed_float16 it never
    scales its loss (named, with the fix a stateless step needs: the scale from its state);
    the step scaled that way is not named; float32 runs with its epochs counted."""
    rec, trials, config = _tune(capsys, JAX_STEP, "jax", "float32,mixed_float16", tmp_path)
    assert Setup.from_dict(rec["setup"]).policy.name == "float32"
    hazard = _unscaled(trials, JAX_STEP)
    assert "jax.value_and_grad" in hazard["fix"]
    assert "keras.StatelessScope(state_mapping=" in hazard["fix"]
    _run(JAX_STEP, config, "jax")

    scaled = tmp_path / "jax_scaled.py"
    text = JAX_STEP.read_text(encoding="utf-8")
    for old, new in [
        ("x, y, training=False\n", "x, y, training=False, optimizer_variables=None\n"),
        (
            "        loss = self.loss_fn(y, y_pred)\n        return loss, (y_pred, ",
            "        loss = self.loss_fn(y, y_pred)\n"
            "        mapping = list(zip(self.optimizer.variables, optimizer_variables))\n"
            "        with keras.StatelessScope(state_mapping=mapping):\n"
            "            scaled = self.optimizer.scale_loss(loss)\n"
            "        return scaled, (loss, y_pred, ",
        ),
        ("(loss, (y_pred, non", "(_, (loss, y_pred, non"),
        ("x, y, training=True\n", "x, y, training=True, optimizer_variables=optimizer_variables\n"),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    scaled.write_text(text, encoding="utf-8")
    fixed = _trial(scaled, "jax")
    assert fixed.status is TrialStatus.OK, fixed.error
    assert not [h for h in fixed.hazards if h.kind == UNSCALED_LOSS]

    # The scale read outside the step's state: fit traces the step with the variables
    # released and fails there (TypeError); the trial, which compiles the step ahead to read
    # its memory, traces it the same way and fails at the same line, where it had kept the
    # initial scale and ended "diverged".
    naive = tmp_path / "jax_naive.py"
    naive.write_text(
        text.replace("        with keras.StatelessScope(state_mapping=mapping):\n    ", ""),
        encoding="utf-8",
    )
    crashed = _trial(naive, "jax")
    assert crashed.status is TrialStatus.USER_ERROR, crashed.error
    assert crashed.error is not None
    line = _line(naive, "scaled = self.optimizer.scale_loss(loss)")
    assert crashed.error.location == f"script:{naive}:{line}"


def test_a_pytorch_train_step_tunes_and_runs_on_torch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The step that calls backward itself trains in the trial and in the run; under
    mixed_float16 its unscaled loss is named with the PyTorch fix, which the trial accepts."""
    rec, trials, config = _tune(capsys, TORCH_STEP, "torch", "float32,mixed_float16", tmp_path)
    assert Setup.from_dict(rec["setup"]).policy.name == "float32"
    hazard = _unscaled(trials, TORCH_STEP)
    assert "`self.optimizer.scale_loss(loss).backward()`" in hazard["fix"]
    _run(TORCH_STEP, config, "torch")

    scaled = tmp_path / "torch_scaled.py"
    text = TORCH_STEP.read_text(encoding="utf-8")
    assert "        loss.backward()\n" in text
    scaled.write_text(
        text.replace(
            "        loss.backward()\n", "        self.optimizer.scale_loss(loss).backward()\n"
        ),
        encoding="utf-8",
    )
    fixed = _trial(scaled, "torch")
    assert fixed.status is TrialStatus.OK, fixed.error
    assert not [h for h in fixed.hazards if h.kind == UNSCALED_LOSS]


def test_a_compute_loss_override_tunes_and_runs_on_jax(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Keras' own step with the model's loss: compiled without one, it tunes (Keras' step
    scales the loss itself: no unscaled_loss) and runs what was recommended."""
    _, trials, config = _tune(capsys, OWN_LOSS, "jax", "float32,mixed_float16", tmp_path)
    assert not [h for r in trials for h in r["hazards"] if h["kind"] == UNSCALED_LOSS]
    _run(OWN_LOSS, config, "jax")
