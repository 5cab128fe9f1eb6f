"""The search end to end on real CPU trials with tiny models and a small budget."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.export import TunedConfig
from tuner.search.recommend import NoViableSetup
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import tune
from tuner.trials.spec import LossScale, Setup

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = "builtin:mlp:features=16,width=32,depth=1"
QUICK = SearchSettings(
    measure_seconds=0.3, warmup_steps=1, min_steps=8, guard_steps=8, device="cpu", timeout_s=120
)


class CpuProfile:
    """A CPU-only profile, so the test does not depend on this machine's GPUs."""

    gpus = ()
    advice = ()
    cpu = type("C", (), {"ram_total_mb": 16000.0})()

    def to_dict(self) -> dict:
        return {"gpus": [], "cpu": {"model": "test CPU", "flags": []}}


OVERFLOW_MODEL = """
import keras
import numpy as np

def build_model():
    inputs = keras.Input((8,))
    x = keras.layers.Lambda(lambda t: t * 1e-9)(inputs)
    x = keras.layers.Dense(8, use_bias=False)(x)
    x = keras.layers.Lambda(lambda t: t * 1e9)(x)  # 1e9 is inf in float16
    outputs = keras.layers.Dense(1, dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model

def make_dataset(batch_size):
    x = np.random.default_rng(0).standard_normal((batch_size * 8, 8)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)
"""

# float16 has a spacing of 2 between 2048 and 4096: the offset wipes out the inputs' detail,
# with nothing large enough to overflow.
PRECISION_MODEL = """
import keras
import numpy as np

def build_model():
    inputs = keras.Input((8,))
    x = keras.layers.Lambda(lambda t: t + 2048.0)(inputs)
    x = keras.layers.Lambda(lambda t: t - 2048.0)(x)
    outputs = keras.layers.Dense(1, dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model

def make_dataset(batch_size):
    x = np.random.default_rng(0).standard_normal((batch_size * 8, 8)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)
"""

# float16 alone: on this CPU it would otherwise be dropped for speed before any guard ran.
F16_ONLY = SearchSpace(
    policies=("mixed_float16",),
    batch_sizes=(16,),
    start_batch=16,
    loss_scales=(LossScale.parse("dynamic"),),
)


@pytest.mark.parametrize(
    "body, message",
    [
        (OVERFLOW_MODEL, r"mixed_float16 b16 dynamic: diverged"),
        (
            PRECISION_MODEL,
            r"mixed_float16 at batch size 16 .*loss gap to float32 .* over the "
            r"tolerance 5%",
        ),
    ],
)
def test_guard_rejects_float16_that_breaks_the_numbers(
    tmp_path: Path, body: str, message: str
) -> None:
    model = tmp_path / "numbers.py"
    model.write_text(body)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(NoViableSetup, match=message):
        tune(
            TuneRequest(
                str(model),
                space=F16_ONLY,
                storage=storage,
                study="guard",
                profile=CpuProfile(),
                settings=dataclasses.replace(QUICK, guard_steps=40),
            )
        )
    trials = TuningSession.load("guard", storage).trials()
    if "loss gap" in message:  # float32 ran beside it at the same batch size, seed and data
        # (a tiny model's short steps also get the steps-per-execution ladder before the guard)
        stages = [t.stage for t in trials]
        assert stages[0] == "baseline"
        assert stages[-1] == "guard"
        # (and the pick's confirming run, its neighbourhood and a runoff of its near ties)
        assert set(stages) <= {
            "baseline",
            "steps-per-execution",
            "remeasure",
            "neighbourhood",
            "runoff",
            "guard",
        }
        guard = trials[-1].result
        # float32 at the candidate's steps per execution: its losses are grouped the same way.
        spe = {t.result.spec.setup.steps_per_execution for t in trials[:-1]}
        assert guard.spec.setup.replace(steps_per_execution=1) == Setup("float32", 16)
        assert guard.spec.setup.steps_per_execution in spe
        assert guard.ok


def test_killed_tune_resumes_without_rerunning(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    args = [
        sys.executable,
        "-m",
        "tuner",
        "tune",
        "--model",
        TINY,
        "--policies",
        "float32,mixed_bfloat16",
        "--batch-sizes",
        "8,16",
        "--start-batch",
        "8",
        "--measure-seconds",
        "0.3",
        "--max-trials",  # the ladder and a knob: the resume is the mechanism, not the stages
        "6",
        "--device",
        "cpu",
        "--backend",  # the resume is the same on every backend; JAX starts fastest
        "jax",
        "--storage",
        storage,
        "--study",
        "killed",
    ]
    proc = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    # Wait until one trial has finished and the next is running, then kill the whole run.
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("trial #0"):
            break
    session = TuningSession.load("killed", storage)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    done_before = [t for t in session.trials() if t.result is not None]
    assert len(done_before) >= 1
    resumed = subprocess.run(
        [*args[:-2], "--resume", "killed", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    rec = json.loads(resumed.stdout)
    assert rec["session"] == "killed"
    assert rec["policy"] in ("float32", "mixed_bfloat16")
    after = TuningSession.load("killed", storage).trials()
    finished_specs = [t.result.spec.to_dict() for t in after if t.result is not None]
    # No setup was measured twice except the deliberate re-measurements (the confirming run,
    # and the turns back to back of a runoff and of the final).
    again = {"remeasure", "runoff", "final"}
    firsts = [t for t in after if t.result is not None and t.stage not in again]
    keys = [t.result.spec.setup for t in firsts]
    assert len(keys) == len(set(keys)), finished_specs
    orphan = [t for t in after if t.state == "FAIL" and t.result is None]
    assert all("died" in (t.note or "") for t in orphan)


def test_tune_json_has_the_documented_keys(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "tune",
            "--model",
            TINY,
            "--policies",
            "float32",
            "--batch-sizes",
            "8,16",
            "--start-batch",
            "8",
            "--measure-seconds",
            "0.3",
            "--device",
            "cpu",
            "--backend",  # the JSON is the same on every backend; JAX starts fastest
            "jax",
            "--storage",
            f"sqlite:///{tmp_path / 's.db'}",
            "--json",
            "--out",
            str(tmp_path / "tuned.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    config = TunedConfig.load(tmp_path / "tuned.json")
    assert (config.setup.policy, config.setup.batch_size) == (rec["policy"], rec["batch_size"])
    assert config.session == rec["session"]
    assert config.hardware.device == "cpu"
    for key in (
        "policy",
        "batch_size",
        "loss_scale",
        "samples_per_second",
        "speedup_vs_float32",
        "memory_saving",
        "reason",
        "trials",
    ):
        assert key in rec
    assert rec["policy"] == "float32"
    assert rec["speedup_vs_float32"] == pytest.approx(1.0)


def test_ctrl_c_stops_the_trial_keeps_the_finished_ones(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner",
            "tune",
            "--model",
            TINY,
            "--policies",
            "float32",
            "--batch-sizes",
            "8,16,32",
            "--start-batch",
            "8",
            "--measure-seconds",
            "0.3",
            "--device",
            "cpu",
            "--storage",
            storage,
            "--study",
            "interrupted",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Run from a background job, pytest's children inherit SIGINT as ignored, and Python
        # then never raises KeyboardInterrupt: give the child what an interactive shell gives.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    assert proc.stdout is not None
    for line in proc.stderr:  # the first trial is done, the second is running
        if line.startswith("trial #0"):
            break
    import psutil

    workers = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; finished trials are kept in session interrupted" in err
    assert "mptune tune --resume interrupted" in err
    assert "Traceback" not in err
    _gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, f"trial workers left running: {alive}"
    trials = TuningSession.load("interrupted", storage).trials()
    assert trials[0].result is not None
    assert trials[0].result.ok
    stopped = [t for t in trials if t.result is None]
    assert all(t.note == "stopped by the user" for t in stopped)


def test_unreachable_storage_from_the_cli(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "sessions",
            "--storage",
            f"sqlite:///{tmp_path}/no/such/dir/s.db",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("mptune: error: cannot open session storage")
