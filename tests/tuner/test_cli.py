"""The command line as a user meets it: exit codes, one-line errors, JSON output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_MLP = "builtin:mlp:features=8,width=16,depth=1"
FAST = ["--steps", "2", "--warmup", "1", "--device", "cpu"]


def mptune(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["trial", "--model", "builtin:cnn", "--policy", "float64", "--batch-size", "8"],
            "invalid choice: 'float64'",
        ),
        (
            ["trial", "--model", "builtin:cnn", "--policy", "float32", "--batch-size", "0"],
            "--batch-size: must be at least 1",
        ),
        (
            [
                "trial",
                "--model",
                "builtin:cnn",
                "--policy",
                "float32",
                "--batch-size",
                "8",
                "--loss-scale",
                "fixed:",
            ],
            "malformed loss scale",
        ),
        (
            ["trial", "--model", "builtin:vgg", "--policy", "float32", "--batch-size", "8"],
            "unknown built-in model 'vgg'",
        ),
        (
            ["trial", "--model", "missing.py", "--policy", "float32", "--batch-size", "8"],
            "model file not found: missing.py",
        ),
        (
            [
                "trial",
                "--model",
                "builtin:cnn",
                "--policy",
                "float32",
                "--batch-size",
                "8",
                "--device",
                "tpu:0",
            ],
            "unknown device",
        ),
        (["trial", "--policy", "float32", "--batch-size", "8"], "--model"),
        (["tune-everything"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    assert_one_line_error(mptune(*args), fragment)


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text("import keras\ndef build_model()\n    return None\n")
    proc = mptune("trial", "--model", str(model), "--policy", "float32", "--batch-size", "4")
    assert_one_line_error(proc, f"{model}:2: syntax error")


@pytest.mark.slow
def test_user_error_in_build_model_is_exit_2_with_location(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text(
        textwrap.dedent("""\
        import keras

        def build_model():
            return keras.Sequential([keras.layers.Dense(4)]) + 1
    """)
    )
    proc = mptune("trial", "--model", str(model), "--policy", "float32", "--batch-size", "4", *FAST)
    assert proc.returncode == 2
    assert f"mptune: trial user_error: {model}:4: build_model() failed" in proc.stderr
    assert "Traceback" not in proc.stderr
    verbose = mptune(
        "--verbose",
        "trial",
        "--model",
        str(model),
        "--policy",
        "float32",
        "--batch-size",
        "4",
        *FAST,
    )
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr


@pytest.mark.slow
def test_trial_json_has_the_documented_keys() -> None:
    proc = mptune(
        "trial",
        "--model",
        TINY_MLP,
        "--policy",
        "mixed_float16",
        "--batch-size",
        "8",
        "--json",
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    for key in (
        "status",
        "samples_per_second",
        "step_time_ms",
        "peak_memory_mb",
        "losses",
        "loss_scales",
        "skipped_steps",
        "nonfinite_steps",
        "timings",
        "error",
        "hazards",
        "numerics",
    ):
        assert key in result
    assert result["status"] == "ok" and result["error"] is None
    assert len(result["losses"]) == 2 and result["loss_scales"] == [32768.0, 32768.0]
    assert set(result["timings"]) >= {
        "startup_s",
        "build_s",
        "probe_s",
        "warmup_s",
        "measure_s",
        "total_s",
    }
    assert result["hazards"] == []  # the tiny MLP is safe under mixed_float16
    assert result["numerics"]["probe_s"] > 0


@pytest.mark.slow
def test_no_probe_skips_the_numerics_probe() -> None:
    proc = mptune(
        "trial",
        "--model",
        TINY_MLP,
        "--policy",
        "mixed_bfloat16",
        "--batch-size",
        "8",
        "--no-probe",
        "--json",
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["numerics"] == {} and result["timings"]["probe_s"] is None


@pytest.mark.slow
def test_failed_trial_is_exit_1_and_still_printed() -> None:
    proc = mptune(
        "trial",
        "--model",
        TINY_MLP,
        "--policy",
        "float32",
        "--batch-size",
        "8",
        *FAST,
        env={"MPTUNE_TEST_FAULT": "oom@2"},
    )
    assert proc.returncode == 1
    assert "status       oom" in proc.stdout
    assert "mptune: trial oom:" in proc.stderr


def test_detect_json_has_the_documented_keys() -> None:
    proc = mptune("detect", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"gpus", "gpu_unavailable_reason", "cpu", "software", "advice"} <= set(data)
    assert [a["policy"] for a in data["advice"]]
    assert all(a["reason"] for a in data["advice"])


def test_detect_with_scripted_gpu_reports_it() -> None:
    proc = mptune("detect", "--json", env={"MPTUNE_FAKE_NVML": "ampere_8.0"})
    data = json.loads(proc.stdout)
    assert data["gpus"][0]["compute_capability"] == "8.0"
    assert data["gpu_unavailable_reason"] is None
    assert data["advice"][-1]["policy"] == "float32"
    text = mptune("detect", env={"MPTUNE_FAKE_NVML": "ampere_8.0"}).stdout
    assert "A100" in text


def test_no_command_prints_help() -> None:
    proc = mptune()
    assert proc.returncode == 0 and "detect" in proc.stdout and "trial" in proc.stdout


def test_a_stop_signal_asks_and_a_second_one_raises() -> None:
    import signal as signals

    from tuner import cli
    from tuner.errors import Terminated

    cli._STOP.reset()
    try:
        cli._on_stop_signal(signals.SIGTERM, None)  # asks, does not raise
        assert cli._STOP.is_set()
        # A trial or search cancelled through the event ends as that signal would have.
        stopped = cli._stop_exception(RuntimeError("cancelled"))
        assert isinstance(stopped, Terminated) and stopped.exit_code == 128 + signals.SIGTERM
        with pytest.raises(KeyboardInterrupt):  # a second signal stops at once
            cli._on_stop_signal(signals.SIGINT, None)
        assert cli._stop_exception(RuntimeError("cancelled")) is stopped  # the first one counts
    finally:
        cli._STOP.reset()
