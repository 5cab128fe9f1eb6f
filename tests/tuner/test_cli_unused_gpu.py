"""The command line on a machine whose GPU the backend cannot use (issue 33, item 2): NVML sees
an H100 (the scripted one, ``MPTUNE_FAKE_NVML=hopper_9.0``) and TensorFlow is a plain ``pip
install tensorflow``, a CUDA build without its CUDA libraries. ``mptune detect`` says so with
the fix, ``mptune tune`` refuses in one line before any trial, and ``--device cpu`` tunes on
the CPU knowingly, its recommendation saying the GPU went unused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_MLP = "builtin:mlp:features=8,width=16,depth=1"
HEADLINE = "NVML sees 1 NVIDIA GPU (NVIDIA H100 80GB HBM3) but the TensorFlow backend can use none"
FIX = "pip install 'tensorflow[and-cuda]'"

#: ``mptune`` (tuner.cli:main) with the installed TensorFlow read as a plain ``pip install
#: tensorflow`` on Linux, whatever this machine has: a CUDA 12 build whose libraries are missing.
PLAIN_TENSORFLOW = """\
import dataclasses, sys
import tuner.hardware as hardware
from tuner.cli import main

real = hardware.read_software

def plain_tensorflow(*args):
    found = real(*args)
    plain = dict(
        tensorflow="2.21.0", tf_is_cuda_build=True, tf_cuda_version="12.5.1",
        tf_cudnn_version="9",
        tf_cuda_libraries_missing=("libcudart.so.12", "libcublas.so.12", "libcudnn.so.9"),
    )
    known = {f.name for f in dataclasses.fields(found)}
    return dataclasses.replace(found, **{k: v for k, v in plain.items() if k in known})

hardware.read_software = plain_tensorflow
sys.exit(main(sys.argv[1:]))
"""


def mptune(*args: str, scenario: str = "hopper_9.0") -> subprocess.CompletedProcess[str]:
    return _python(PLAIN_TENSORFLOW, *args, scenario=scenario)


def _python(code: str, *args: str, scenario: str) -> subprocess.CompletedProcess[str]:
    """``code`` run as mptune's command line with ``args``, under the fake NVML ``scenario``."""
    env = {**os.environ, "MPTUNE_FAKE_NVML": scenario}
    env.pop("KERAS_BACKEND", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )


def test_tune_refuses_in_one_line_before_any_trial(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    # (a trial limit: where it is not refused, it ends soon)
    proc = mptune("tune", "--model", TINY_MLP, "--max-trials", "1", "--storage", storage)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"mptune: error: {HEADLINE} (TensorFlow 2.21.0 is a CUDA 12 build")
    assert line.endswith(f": fix it with {FIX}, or tune on the CPU anyway with --device cpu")
    # No trial ran: nothing was stored.
    listed = mptune("sessions", "--storage", storage)
    assert listed.returncode == 0
    assert "no stored sessions" in listed.stdout


#: ...and its trial scripted: a result at once, no worker (the line is said before the trial).
SCRIPTED_TRIAL = PLAIN_TENSORFLOW.replace(
    "hardware.read_software = plain_tensorflow\n",
    """hardware.read_software = plain_tensorflow
import tuner.api as api

def scripted_trial(spec, on_event=None, cancel=None):
    print(f"trial on {spec.device}", file=sys.stderr)
    return api.TrialResult(spec, api.TrialStatus.OK, samples_per_second=1000.0)

api.run_trial = scripted_trial
""",
)


def trial(*args: str, scenario: str = "hopper_9.0") -> subprocess.CompletedProcess[str]:
    """``mptune trial`` of a tiny MLP, its trial scripted (no worker starts), under the fake
    NVML ``scenario``."""
    argv = ("trial", "--model", TINY_MLP, "--policy", "float32", "--batch-size", "8", *args)
    return _python(SCRIPTED_TRIAL, *argv, scenario=scenario)


def test_trial_on_the_default_device_says_in_one_line_that_it_runs_on_the_cpu() -> None:
    """Issue 54: ``trial --device auto`` where the backend cannot use the GPU ran on the CPU
    without a word."""
    proc = trial()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    note = f"mptune: note: this trial runs on the CPU (--device auto). {HEADLINE} (TensorFlow "
    assert lines[0].startswith(note), lines
    assert lines[0].endswith(f": fix it with {FIX}")
    assert lines[1] == "trial on auto"  # said before the trial, once
    assert sum("runs on the CPU" in line for line in lines) == 1
    # Asked for the CPU, or on a machine without a GPU: no word.
    for quiet in (trial("--device", "cpu"), trial(scenario="no_driver")):
        assert quiet.returncode == 0, quiet.stderr
        assert "runs on the CPU" not in quiet.stderr
        assert "trial on " in quiet.stderr


def test_detect_says_it_in_its_verdict_and_under_the_gpu() -> None:
    proc = mptune("detect")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    flat = " ".join(line.strip() for line in lines)
    assert f"Warning: {HEADLINE}: TensorFlow 2.21.0 is a CUDA 12 build" in flat
    assert f"         fix: {FIX}" in lines
    verdict = flat[flat.index("Verdict: ") :]
    assert verdict.startswith("Verdict: TensorFlow cannot use the GPU (TensorFlow 2.21.0")
    assert "so trials would run on the CPU: " in verdict
    assert f"Once it can (fix it with {FIX}), on the GPU: " in verdict
    data = json.loads(mptune("detect", "--json").stdout)
    assert [(u["backend"], u["fix"]) for u in data["unused_gpus"]][:1] == [("tensorflow", FIX)]
    # No GPU at all: nothing goes unused, nothing is said.
    none = mptune("detect", scenario="no_driver")
    assert "Warning" not in none.stdout
    assert "cannot use" not in none.stdout


@pytest.mark.slow
def test_device_cpu_tunes_on_the_cpu_and_says_the_gpu_went_unused(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    proc = mptune(
        "tune", "--model", TINY_MLP, "--device", "cpu", "--max-trials", "1",
        "--measure-seconds", "0.3", "--storage", storage, "--study", "cpu",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"mptune: note: tuning on the CPU as --device cpu asks. {HEADLINE}")
    assert first.endswith(f"fix it with {FIX}")
    shown = subprocess.run(
        [sys.executable, "-m", "tuner", "show", "cpu", "--storage", storage],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    # The recommendation's first row, above its setup.
    after = shown.stdout[shown.stdout.index("Recommendation:") :].splitlines()[1:]
    assert after[0].startswith("unused gpu")
    assert "this setup is for the CPU. NVML sees" in after[0]
    assert any(line.startswith("setup ") for line in after[1:])


def test_a_gpu_the_machine_lacks_is_refused_before_any_trial(tmp_path: Path) -> None:
    """``--device gpu:1`` where NVML sees one GPU (and ``gpu:0`` where it sees none) is the
    user's device, not the model: refused in one line, no session made, nothing run (it once
    ran a trial that failed "in the model's own code")."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    cases = (("hopper_9.0", "gpu:1", "NVML sees 1 GPU"), ("no_driver", "gpu:0", "NVML sees no GPU"))
    for scenario, device, seen in cases:
        run = mptune(
            "tune", "--model", TINY_MLP, "--device", device, "--storage", storage,
            scenario=scenario,
        )  # fmt: skip
        assert run.returncode == 2, run.stderr
        line = run.stderr.strip()
        assert line == (
            f"mptune: error: --device {device} asks for a GPU this machine does not have "
            f"({seen} here): leave out --device or tune on the CPU with --device cpu"
        ), line
        assert "trial #" not in run.stdout + run.stderr
    listed = mptune("sessions", "--storage", storage)
    assert "no stored sessions" in listed.stdout, listed.stdout
