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


# -- the knobs --------------------------------------------------------------------------------

TRIAL = ["trial", "--model", "builtin:cnn", "--policy"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["tune", "--global-batch", "0"], "argument --global-batch: must be at least 1, not 0"),
        (["tune", "--global-batch", "lots"], "argument --global-batch: 'lots' is not a whole"),
        (["tune", "--global-batch", str(1 << 25)], "--global-batch must be from 1 to 16777216"),
        (["tune", "--xla", "maybe"], "argument --xla: invalid choice: 'maybe'"),
        (
            [*TRIAL, "mixed_float16", "--batch-size", "8", "--tf32"],
            "TF32 is a variant of float32; mixed_float16 already computes in float16",
        ),
        (
            [*TRIAL, "float32", "--batch-size", "8", "--steps-per-execution", "0"],
            "argument --steps-per-execution: must be at least 1, not 0",
        ),
        (
            [*TRIAL, "float32", "--batch-size", "8", "--accumulate", "2x"],
            "argument --accumulate: '2x' is not a whole number",
        ),
        (
            [*TRIAL, "float32", "--batch-size", "8", "--accumulate", "4096"],
            "gradient accumulation steps must be a whole number from 1 to 1024, not 4096",
        ),
    ],
)
def test_bad_knobs_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    assert_one_line_error(mptune(*args), fragment)


def test_trial_flags_build_the_setup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuner import api, cli

    seen: list[api.TrialSpec] = []

    def run_trial(spec: api.TrialSpec, on_event: object = None, **kwargs: object) -> object:
        seen.append(spec)
        return api.TrialResult(spec, api.TrialStatus.OK, samples_per_second=100.0)

    monkeypatch.setattr(api, "run_trial", run_trial)
    args = cli.build_parser().parse_args(
        [
            *TRIAL,
            "float32",
            "--batch-size",
            "16",
            "--xla",
            "--steps-per-execution",
            "4",
            "--tf32",
            "--accumulate",
            "8",
            "--steps",
            "3",
        ]
    )
    assert cli._cmd_trial(args) == 0
    (spec,) = seen
    assert spec.setup == api.Setup(
        "float32", 16, xla=True, steps_per_execution=4, tf32=True, gradient_accumulation_steps=8
    )
    assert spec.steps == 3
    out = capsys.readouterr().out
    assert "float32+tf32  batch 16  loss scale none  XLA  4 steps per execution" in out
    assert "8 accumulation steps (global batch 128)" in out
    # Without the flags: the knobs at their defaults.
    plain = cli.build_parser().parse_args([*TRIAL, "float32", "--batch-size", "16"])
    assert cli._cmd_trial(plain) == 0
    assert seen[-1].setup == api.Setup("float32", 16)


def test_tune_flags_and_the_model_files_batch_size_reach_the_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner import api, cli

    model = tmp_path / "net.py"
    model.write_text("BATCH_SIZE = 48\n\ndef build_model():\n    pass\n")
    spaces: list[api.SearchSpace] = []

    class Profile:
        advice = tuple(type("A", (), {"policy": p})() for p in ("float32", "mixed_bfloat16"))

    def tune(model: str | None = None, **kwargs: object) -> object:
        space = kwargs["space"]
        assert isinstance(space, api.SearchSpace)
        spaces.append(space)
        raise api.MptuneError("stopped by the test")

    monkeypatch.setattr(api, "detect", lambda: Profile())
    monkeypatch.setattr(api, "tune", tune)

    def tune_with(*flags: str) -> api.SearchSpace:
        args = cli.build_parser().parse_args(["tune", "--model", str(model), *flags])
        with pytest.raises(api.MptuneError, match="stopped by the test"):
            cli._cmd_tune(args)
        return spaces[-1]

    space = tune_with()
    assert (space.user_batch, space.xla, space.global_batch) == (48, "auto", None)
    space = tune_with("--start-batch", "32", "--xla", "off")
    assert (space.user_batch, space.start_batch, space.xla) == (32, 32, "off")
    space = tune_with("--global-batch", "96", "--xla", "on")
    assert (space.global_batch, space.start_batch, space.xla) == (96, 96, "on")
    assert all(96 % b == 0 for b in space.batch_sizes)


def test_the_console_shows_knobs_and_the_unsupported_status() -> None:
    from rich.console import Console

    from tuner import api
    from tuner.console import render_trial, trials_table
    from tuner.trials.result import TrialError

    setup = api.Setup("float32", 64, xla=True, steps_per_execution=4)
    spec = api.TrialSpec(model="builtin:cnn", setup=setup)
    result = api.TrialResult(
        spec, api.TrialStatus.UNSUPPORTED, error=TrialError("XLA cannot compile tf.py_function")
    )
    text = render_trial(result)
    assert "status  unsupported" in text and "reason  XLA cannot compile" in text
    assert "XLA  4 steps per execution" in text
    stored = api.StoredTrial(7, "xla", result, "FAIL")
    console = Console(width=200, record=True)
    console.print(trials_table([stored]))
    table = console.export_text()
    assert "xla spe4" in table and "unsupported: XLA cannot compile" in table
