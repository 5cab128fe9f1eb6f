"""The tuned config and its renderings, without TensorFlow."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests_support import make_config

from tuner.export import ConfigError, HardwareFingerprint, Setup, TunedConfig, render

ROOT = Path(__file__).resolve().parents[2]


def assignments(code: str) -> dict[str, object]:
    """Top-level NAME = <literal> assignments of generated code."""
    values = {}
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def test_round_trip_and_atomic_save(tmp_path: Path) -> None:
    config = make_config(policy="mixed_float16", loss_scale="dynamic:1024:500")
    path = tmp_path / "tuned.json"
    config.save(path)
    assert TunedConfig.load(path) == config
    data = json.loads(path.read_text())
    assert data["schema"] == "mptune.config" and data["schema_version"] == 1
    assert data["setup"] == {
        "policy": "mixed_float16",
        "batch_size": 16,
        "loss_scale": "dynamic:1024:500",
    }
    assert [p.name for p in tmp_path.iterdir()] == ["tuned.json"]  # no temp file left


def corrupt(mutate) -> dict:
    data = make_config().to_dict()
    mutate(data)
    return data


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (
            lambda d: d["setup"].pop("batch_size"),
            "field setup.batch_size must be a positive integer",
        ),
        (
            lambda d: d["setup"].update(batch_size="abc"),
            "setup.batch_size must be a positive integer, got 'abc'",
        ),
        (lambda d: d["setup"].update(batch_size=True), "setup.batch_size"),
        (lambda d: d["setup"].update(loss_scale=128), "field setup.loss_scale must be a non-empty"),
        (lambda d: d.pop("model"), "field model must be a non-empty string"),
        (
            lambda d: d["hardware"].update(cpu_flags="avx2"),
            "field hardware.cpu_flags must be a list",
        ),
        (lambda d: d["versions"].update(keras=3), "field versions.keras"),
        (
            lambda d: d["evidence"].update(samples_per_second_spread=[1.0]),
            "evidence.samples_per_second_spread must be a list of two numbers",
        ),
        (
            lambda d: d["evidence"].update(speedup_vs_float32=float("nan")),
            "evidence.speedup_vs_float32 must be a finite number",
        ),
        (lambda d: d["setup"].update(batch_size=0), "setup.batch_size"),
        (lambda d: d["setup"].update(policy="float64"), "field setup.policy: unknown policy"),
        (lambda d: d["setup"].update(loss_scale="fixed:-1"), "field setup.loss_scale: malformed"),
        (lambda d: d.update(schema="other.tool"), "not an mptune config"),
        (lambda d: d.update(schema_version=2), "schema version 2 is newer than this mptune"),
        (lambda d: d.update(schema_version="1"), "schema_version must be an integer"),
        (lambda d: d["evidence"].update(trials=["x"]), "evidence.trials"),
        (lambda d: d["hardware"].update(device="tpu"), "hardware.device"),
        (lambda d: d.pop("setup"), "field setup must be an object"),
        (lambda d: d["evidence"].update(samples_per_second="fast"), "evidence.samples_per_second"),
    ],
)
def test_corrupt_configs_name_the_field(mutate, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"^cfg\.json: .*") as info:
        TunedConfig.from_dict(corrupt(mutate), source="cfg.json")
    assert fragment in str(info.value)


def test_unknown_keys_are_ignored_within_version_1() -> None:
    data = make_config().to_dict()
    data["added_in_1_5"] = {"anything": [1, 2]}
    assert TunedConfig.from_dict(data) == make_config()


def test_setup_checks_and_canonicalises_itself() -> None:
    assert str(Setup("mixed_float16", 8, " Dynamic:1024.0 ").loss_scale) == "dynamic:1024"
    assert Setup("mixed_float16", 8, "fixed:128.0") == Setup("mixed_float16", 8, "fixed:128")
    with pytest.raises(ValueError, match="unknown policy 'float64'"):
        Setup("float64", 8, "none")
    with pytest.raises(ValueError, match="batch size must be from 1"):
        Setup("float32", 0, "none")
    with pytest.raises(ValueError, match="malformed loss scale"):
        Setup("float32", 8, "dynamic:0")


@pytest.mark.parametrize(
    "setup, fragment",
    [
        (
            {"policy": "float64", "batch_size": 8, "loss_scale": "none"},
            "field setup.policy: unknown policy 'float64'",
        ),
        (
            {"policy": "float32", "batch_size": 0, "loss_scale": "none"},
            "field setup.batch_size must be a positive integer",
        ),
        (
            {"policy": "float32", "batch_size": 10**400, "loss_scale": "none"},
            "field setup.batch_size: batch size must be from 1",
        ),
        (
            {"policy": "float32", "batch_size": 8, "loss_scale": "dynamic:0"},
            "field setup.loss_scale: malformed loss scale",
        ),
        (
            {"policy": "float32", "batch_size": 8, "loss_scale": "fixed:1e300"},
            r"field setup.loss_scale: .*fixed scale must be a positive number up to 2\*\*127",
        ),
    ],
)
def test_config_setup_fields_are_named(setup: dict, fragment: str) -> None:
    data = make_config().to_dict()
    data["setup"] = setup
    with pytest.raises(ConfigError, match=fragment):
        TunedConfig.from_dict(data)


def fake_profile(cpu_model: str = "Test CPU", gpu_names: tuple[str, ...] = ()) -> Any:
    """The attributes of tuner.hardware's HardwareProfile that a fingerprint reads."""
    gpus = tuple(
        SimpleNamespace(
            index=i,
            name=name,
            compute_capability=(8, i),
            memory_total_mb=40960.0,
            memory_used_mb=100.0 * i,
        )
        for i, name in enumerate(gpu_names)
    )
    return SimpleNamespace(gpus=gpus, cpu=SimpleNamespace(model=cpu_model, flags=("avx2", "fma")))


def test_fingerprint_from_profile() -> None:
    profile = fake_profile(gpu_names=("GPU Zero", "GPU One"))
    on_cpu = HardwareFingerprint.from_profile(profile, "cpu")
    assert (on_cpu.device, on_cpu.gpu_name, on_cpu.cpu_model) == ("cpu", None, "Test CPU")
    second = HardwareFingerprint.from_profile(profile, "gpu:1 (GPU One)")
    assert (second.device, second.gpu_name, second.compute_capability) == ("gpu", "GPU One", "8.1")
    assert second.gpu_memory_total_mb == 40960.0 and second.cpu_flags == ("avx2", "fma")
    assert HardwareFingerprint.from_profile(profile, "gpu").gpu_name == "GPU Zero"
    # No GPU here at all: a "gpu" device falls back to describing the CPU honestly.
    assert HardwareFingerprint.from_profile(fake_profile(), "gpu:0 (x)").device == "cpu"
    # The digest identifies the hardware: stable, 16 hex digits, different per device.
    assert second.digest == HardwareFingerprint.from_profile(profile, "gpu:1").digest
    assert len(second.digest) == 16 and int(second.digest, 16) >= 0
    assert (
        len(
            {
                on_cpu.digest,
                second.digest,
                HardwareFingerprint.from_profile(profile, "gpu:0").digest,
            }
        )
        == 3
    )


def test_lazy_apply_config_keeps_keras_out() -> None:
    code = (
        "import sys, tuner.export as e\n"
        "from tuner.export.apply import apply_config, HardwareMismatchWarning\n"
        "assert e.apply_config is apply_config\n"
        "assert e.HardwareMismatchWarning is HardwareMismatchWarning\n"
        "bad = {'keras', 'tensorflow', 'tf_keras'} & set(sys.modules)\n"
        "assert not bad, bad\n"
        "print('lazy-ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "lazy-ok" in proc.stdout


def test_not_json_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "mptune.config",\n  "setup": oops}')
    with pytest.raises(ConfigError, match=r"bad.json is not valid JSON \(line 2, column 12"):
        TunedConfig.load(bad)
    with pytest.raises(ConfigError, match="config file not found"):
        TunedConfig.load(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="the top level must be an object"):
        TunedConfig.from_dict([1, 2])


def test_loading_never_executes_anything(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    config = make_config(model=payload)
    path = tmp_path / "evil.json"
    config.save(path)
    loaded = TunedConfig.load(path)
    script = render(loaded, "script")
    assert loaded.model == payload
    assert assignments(script)["MODEL"] == payload  # a string literal, nothing more
    assert not marker.exists()


@pytest.mark.parametrize(
    "path_text",
    [
        'my "quoted" model.py',
        "it's here.py",
        "back\\slash\\model.py",
        "new\nline.py",
        "ünïcødé model 模型.py",
    ],
)
def test_paths_are_escaped_in_generated_code(tmp_path: Path, path_text: str) -> None:
    model = str(tmp_path / path_text)
    script = render(make_config(model=model), "script")
    compile(script, "script.py", "exec")
    assert assignments(script)["MODEL"] == model


@pytest.mark.parametrize("keras", ["3", "2"])
@pytest.mark.parametrize(
    "policy, scale",
    [
        ("float32", "none"),
        ("mixed_float16", "dynamic"),
        ("mixed_float16", "dynamic:1024:500"),
        ("mixed_float16", "fixed:128"),
        ("mixed_bfloat16", "none"),
        ("mixed_float16", "none"),
    ],
)
def test_snippets_compile_and_carry_the_setup(keras: str, policy: str, scale: str) -> None:
    snippet = render(make_config(policy=policy, loss_scale=scale, batch_size=96), "snippet", keras)
    compile(snippet, "snippet.py", "exec")
    assert f"set_global_policy({policy!r})" in snippet
    assert assignments(snippet)["BATCH_SIZE"] == 96
    if scale.startswith("dynamic"):
        assert "LossScaleOptimizer" in snippet
    if scale.startswith("fixed"):
        assert ("loss_scale_factor" in snippet) if keras == "3" else ("dynamic=False" in snippet)
    if keras == "3":
        expected = {} if scale.startswith("dynamic") else {"auto_scale_loss": False}
        assert assignments(snippet)["COMPILE_KWARGS"] == expected


def test_unoffered_combinations_are_clear() -> None:
    with pytest.raises(ConfigError, match="Keras 3 only"):
        render(make_config(), "script", "2")
    with pytest.raises(ConfigError, match="unknown export format"):
        render(make_config(), "yaml")


def test_fingerprint_mismatches() -> None:
    tuned = make_config().hardware
    same = dataclasses.replace(tuned)
    assert tuned.mismatches(same) == []
    other_cpu = dataclasses.replace(tuned, cpu_model="Other CPU", cpu_flags=())
    assert tuned.mismatches(other_cpu) == ["CPU Test CPU vs Other CPU", "this CPU lacks avx2"]
    gpu = HardwareFingerprint(device="gpu", gpu_name="A100", compute_capability="8.0")
    assert tuned.mismatches(gpu) == ["tuned on cpu, running on gpu"]


def test_export_cli_rejects_a_corrupt_config(tmp_path: Path) -> None:
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(corrupt(lambda d: d["setup"].update(batch_size=-3))))
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "export", str(path), "--format", "snippet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"mptune: error: {path}: field setup.batch_size must be a positive integer, got -3"
    ]


def test_export_cli_writes_every_format(tmp_path: Path) -> None:
    path = tmp_path / "tuned.json"
    make_config(policy="mixed_float16", loss_scale="fixed:128").save(path)
    for fmt, keras in (("json", "3"), ("snippet", "3"), ("snippet", "2"), ("script", "3")):
        out = tmp_path / f"out-{fmt}-{keras}.txt"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tuner",
                "export",
                str(path),
                "--format",
                fmt,
                "--keras",
                keras,
                "-o",
                str(out),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        assert out.read_text() == render(TunedConfig.load(path), fmt, keras)
    assert os.access(tmp_path / "out-script-3.txt", os.X_OK)


def test_export_from_a_session_without_recommendation_is_clear(tmp_path: Path) -> None:
    from tuner.search.session import TuningSession

    storage = f"sqlite:///{tmp_path / 's.db'}"
    TuningSession.create("unfinished", storage, {"model": "builtin:cnn"})
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "export", "unfinished", "--storage", storage],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "has no recommendation yet" in proc.stderr


@pytest.mark.parametrize("fmt", ["snippet", "script"])
def test_text_fields_cannot_break_out_of_comments(fmt: str) -> None:
    attack = 'x"""\r\nimport os; os.system("echo pwned")\n# '
    config = dataclasses.replace(
        make_config(model="builtin:mlp"),
        session=attack,
        created=attack,
        evidence=dataclasses.replace(make_config().evidence, reason=attack),
        hardware=dataclasses.replace(make_config().hardware, cpu_model=attack),
    )
    code = render(config, fmt)
    tree = ast.parse(code)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "system"]
    assert calls == []
