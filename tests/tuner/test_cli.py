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
#: The CLI's reading and printing of a trial are the same whatever the backend: these trials
#: run on JAX, whose worker starts fastest (about 1 s, TensorFlow's 2.6 s).
FAST = ["--steps", "2", "--warmup", "1", "--device", "cpu", "--backend", "jax"]


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
    assert verbose.returncode == 2
    assert "Traceback" in verbose.stderr


@pytest.mark.slow
@pytest.mark.product_launcher  # the CLI's worker, as a user's starts
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
    assert result["status"] == "ok"
    assert result["error"] is None
    assert len(result["losses"]) == 2
    assert result["loss_scales"] == [32768.0, 32768.0]
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
    assert result["numerics"] == {}
    assert result["timings"]["probe_s"] is None


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
    assert proc.returncode == 0
    assert "detect" in proc.stdout
    assert "trial" in proc.stdout


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
        assert isinstance(stopped, Terminated)
        assert stopped.exit_code == 128 + signals.SIGTERM
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


@pytest.fixture
def seen_trials(monkeypatch: pytest.MonkeyPatch) -> list:
    """The specs ``mptune trial`` runs, recorded by a stand-in for ``api.run_trial`` that
    answers each with an ok result."""
    from tuner import api

    seen: list[api.TrialSpec] = []

    def run_trial(spec: api.TrialSpec, on_event: object = None, **kwargs: object) -> object:
        seen.append(spec)
        return api.TrialResult(spec, api.TrialStatus.OK, samples_per_second=100.0)

    monkeypatch.setattr(api, "run_trial", run_trial)
    return seen


def test_trial_flags_build_the_setup(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    seen_trials: list,
) -> None:
    from tuner import api, cli

    seen = seen_trials

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

    def tune(request: api.TuneRequest, **kwargs: object) -> object:
        space = request.space
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
    assert (space.user_batch, space.choice("xla"), space.global_batch) == (48, "auto", None)
    space = tune_with("--start-batch", "32", "--xla", "off")
    assert (space.user_batch, space.start_batch, space.choice("xla")) == (32, 32, "off")
    space = tune_with("--global-batch", "96", "--xla", "on")
    assert (space.global_batch, space.start_batch, space.choice("xla")) == (96, 96, "on")
    assert all(96 % b == 0 for b in space.batch_sizes)
    space = tune_with("--float8", "off")
    assert space.switches == {"xla": "auto", "float8": "off"}


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
    assert "status  unsupported" in text
    assert "reason  XLA cannot compile" in text
    assert "XLA  4 steps per execution" in text
    stored = api.StoredTrial(7, "xla", result, "FAIL")
    console = Console(width=200, record=True)
    console.print(trials_table([stored]))
    table = console.export_text()
    assert "xla spe4" in table
    assert "unsupported: XLA cannot compile" in table


def test_the_console_says_how_fits_loop_was_timed() -> None:
    """Over whole epochs, within one, or within one with the wait at an epoch's end for
    TensorFlow's input autotuner priced in (issue 50): said beside the figure it shapes."""
    from tuner import api
    from tuner.console import render_trial

    spec = api.TrialSpec(model="builtin:cnn", setup=api.Setup("float32", 512))

    def said(**fed: object) -> str:
        rate = api.InputRate(700.0, "synthetic", "arrays", fit_loop=True, **fed)  # type: ignore[arg-type]
        result = api.TrialResult(
            spec,
            api.TrialStatus.OK,
            samples_per_second=700.0,
            device_samples_per_second=720.0,
            input=rate,
        )
        return next(line for line in render_trial(result).splitlines() if "throughput" in line)

    assert "over 3 whole epochs" in said(epochs=3)
    assert "the work at an epoch's start is not in it" in said(epochs=0)
    priced = said(epochs=0, epoch_end_wait_s=0.32)
    assert "within one epoch, and 0.32 s an epoch priced in" in priced
    assert "TensorFlow's input autotuner" in priced


def test_the_console_table_shows_loss_gaps_and_stopped_trials() -> None:
    """The trials table tells what the window tells: each mixed trial's loss gap to float32 at
    its batch size, and a trial stopped under its search with its setup, as stopped."""
    from rich.console import Console

    from tuner import api
    from tuner.console import trials_table

    def ok(policy: str, losses: float) -> api.TrialResult:
        spec = api.TrialSpec("builtin:mlp", api.Setup(policy, 32))
        return api.TrialResult(
            spec, api.TrialStatus.OK, samples_per_second=1000.0, losses=(losses,) * 40
        )

    stopped = api.TrialSpec("builtin:mlp", api.Setup("mixed_float16", 64))
    trials = [
        api.StoredTrial(0, "baseline", ok("float32", 2.0), "COMPLETE"),
        api.StoredTrial(1, "policies", ok("mixed_bfloat16", 2.05), "COMPLETE"),
        api.StoredTrial(2, "batch", None, "FAIL", "stopped by its search", stopped),
    ]
    # At the 120 columns a log gets (output_console), every column in view: the status too.
    console = Console(width=120, record=True)
    console.print(trials_table(trials))
    text = console.export_text()
    lines = text.splitlines()
    assert any(line.split()[-1:] == ["status"] for line in lines)
    (bf16,) = [line for line in lines if "mixed_bfloat16" in line]
    assert "2.50%" in bf16
    assert bf16.split()[-1] == "ok"
    assert "knobs" not in text  # no trial has one: no column for them
    (row,) = [line for line in lines if "mixed_float16" in line]
    assert "64" in row
    assert "dynamic" in row
    assert "stopped by its search" in row
    assert "failed" not in row


# -- the Keras backend ------------------------------------------------------------------------

TINY_TRIAL = [*TRIAL, "float32", "--batch-size", "8"]


@pytest.mark.parametrize(
    "args, env, fragment",
    [
        (
            [*TINY_TRIAL, "--backend", "numpy"],
            {},
            "argument --backend: invalid choice: 'numpy' (choose from 'tensorflow', 'jax', "
            "'torch')",
        ),
        (
            TINY_TRIAL,
            {"KERAS_BACKEND": "numpy"},
            "KERAS_BACKEND='numpy' (from the environment) is not a backend mptune tunes "
            "(tensorflow, jax, torch): give --backend, or unset KERAS_BACKEND",
        ),
        (
            ["tune", "--model", "builtin:mlp", "--max-trials", "1"],
            {"KERAS_BACKEND": "openvino"},
            "KERAS_BACKEND='openvino' (from the environment) is not a backend mptune tunes",
        ),
        (
            [*TINY_TRIAL, "--backend", "torch", "--steps-per-execution", "4"],
            {},
            "steps per execution must be 1 on the torch backend",
        ),
    ],
)
def test_bad_backends_are_one_line_and_exit_2(
    args: list[str], env: dict[str, str], fragment: str
) -> None:
    assert_one_line_error(mptune(*args, env=env), fragment)


def test_an_explicit_backend_wins_over_a_bad_keras_backend_variable(
    monkeypatch: pytest.MonkeyPatch,
    seen_trials: list,
) -> None:
    from tuner import cli

    seen = seen_trials

    monkeypatch.setenv("KERAS_BACKEND", "numpy")
    args = cli.build_parser().parse_args([*TINY_TRIAL, "--backend", "tensorflow"])
    assert cli._cmd_trial(args) == 0
    assert seen[-1].setup.backend == "tensorflow"


@pytest.fixture
def every_backend(monkeypatch: pytest.MonkeyPatch) -> dict[str, str | None]:
    """Every backend reads as installed (the checks are tested on their own); the dict can be
    edited to take one away."""
    from tuner.hardware import software

    installed: dict[str, str | None] = {"tensorflow": "2.21.0", "jax": "0.6.2", "torch": "2.7.1"}
    monkeypatch.setattr(software, "read_backends", lambda: dict(installed))
    return installed


def test_the_backend_reaches_the_trials_setup(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    every_backend: dict[str, str | None],
    seen_trials: list,
) -> None:
    from tuner import api, cli

    seen = seen_trials

    def backend_of(*flags: str) -> str:
        assert cli._cmd_trial(cli.build_parser().parse_args([*TINY_TRIAL, *flags])) == 0
        return seen[-1].setup.backend

    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert backend_of() == "tensorflow"  # Keras' own default
    assert backend_of("--backend", "jax") == "jax"
    assert "on JAX" in capsys.readouterr().out
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert backend_of() == "torch"  # as Keras would pick it
    assert backend_of("--backend", "tensorflow") == "tensorflow"  # the flag wins
    # torch.compile is the torch backend's --xla; JAX always compiles (xla stays False).
    assert seen[-1].setup.xla is False
    backend_of("--backend", "torch", "--xla")
    assert seen[-1].setup == api.Setup("float32", 8, backend="torch", xla=True)
    assert "torch.compile" in capsys.readouterr().out
    backend_of("--backend", "jax", "--xla")  # said, not silently dropped
    assert seen[-1].setup.xla is False
    assert "--xla changes nothing on the jax backend" in capsys.readouterr().err

    # A backend that is not installed is refused before anything runs, with the fix.
    every_backend["jax"] = None
    runs = len(seen)
    with pytest.raises(api.MptuneError) as refused:
        cli._cmd_trial(cli.build_parser().parse_args([*TINY_TRIAL, "--backend", "jax"]))
    assert str(refused.value) == (
        "the JAX backend (jax) is not installed here: install it with pip install 'mptune[jax]'"
    )
    assert refused.value.exit_code == 2
    assert len(seen) == runs


def test_the_backend_reaches_the_search_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every_backend: dict[str, str | None]
) -> None:
    from tuner import api, cli

    settings: list[api.SearchSettings] = []

    class Profile:
        advice = tuple(type("A", (), {"policy": p})() for p in ("float32", "mixed_bfloat16"))

    def tune(request: api.TuneRequest, **kwargs: object) -> object:
        assert isinstance(request.settings, api.SearchSettings)
        settings.append(request.settings)
        raise api.MptuneError("stopped by the test")

    monkeypatch.setattr(api, "detect", lambda: Profile())
    monkeypatch.setattr(api, "tune", tune)

    def backend_of(*flags: str) -> str:
        args = cli.build_parser().parse_args(["tune", "--model", "builtin:mlp", *flags])
        with pytest.raises(api.MptuneError, match="stopped by the test"):
            cli._cmd_tune(args)
        return settings[-1].backend

    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert backend_of() == "tensorflow"
    assert backend_of("--backend", "torch") == "torch"
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert backend_of() == "jax"
    assert backend_of("--backend", "tensorflow") == "tensorflow"
    every_backend["torch"] = None
    args = cli.build_parser().parse_args(["tune", "--model", "builtin:mlp", "--backend", "torch"])
    with pytest.raises(api.MptuneError, match=r"pip install 'mptune\[torch\]'"):
        cli._cmd_tune(args)


def test_a_stored_session_keeps_its_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every_backend: dict[str, str | None]
) -> None:
    """Continuing a session: its own backend, whatever KERAS_BACKEND says; another one given
    with --backend is refused by the search, naming both."""
    from tuner import api, cli
    from tuner.search.session import TuningSession

    storage = f"sqlite:///{tmp_path / 's.db'}"
    TuningSession.create(
        "on-torch",
        storage,
        {
            "model": "builtin:mlp",
            "space": api.SearchSpace(policies=("float32",)).to_dict(),
            "settings": api.SearchSettings(backend="torch").to_dict(),
            "hardware": api.detect().to_dict(),
        },
    )
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    real_tune = api.tune
    seen: list[api.SearchSettings] = []

    def tune(request: api.TuneRequest, **kwargs: object) -> object:
        assert isinstance(request.settings, api.SearchSettings)
        seen.append(request.settings)
        raise api.MptuneError("stopped by the test")

    monkeypatch.setattr(api, "tune", tune)
    for flags in ([], ["--backend", "torch"]):
        args = cli.build_parser().parse_args(
            ["tune", "--resume", "on-torch", "--storage", storage, *flags]
        )
        with pytest.raises(api.MptuneError, match="stopped by the test"):
            cli._cmd_tune(args)
        assert seen[-1].backend == "torch"

    # The stored backend must be installed here too.
    every_backend["torch"] = None
    args = cli.build_parser().parse_args(["tune", "--resume", "on-torch", "--storage", storage])
    with pytest.raises(api.MptuneError, match=r"PyTorch backend \(torch\) is not installed"):
        cli._cmd_tune(args)
    every_backend["torch"] = "2.7.1"

    # Another backend, given explicitly: the real search refuses it before any trial runs.
    monkeypatch.setattr(api, "tune", real_tune)
    args = cli.build_parser().parse_args(
        ["tune", "--resume", "on-torch", "--storage", storage, "--backend", "jax"]
    )
    with pytest.raises(api.MptuneError) as refused:
        cli._cmd_tune(args)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "session 'on-torch' was measured with other settings (backend 'torch' -> 'jax'): its "
        "trials would not compare."
    ), message
    assert "give another [[study]]" in message  # the engine names the setting


def test_detect_lists_the_backends_and_how_to_install_the_missing_ones() -> None:
    from tuner import api

    proc = mptune("detect", "--json")
    software = json.loads(proc.stdout)["software"]
    assert set(software["backends"]) == set(api.BACKENDS)
    assert software["backends"] == api.installed_backends()
    assert software["missing_backends"] == {
        name: api.BACKEND_INSTALL_HINTS[name]
        for name, version in software["backends"].items()
        if not version
    }
    text = mptune("detect").stdout
    assert "Keras backends: TensorFlow " in text
