"""The tuned config and its renderings, without TensorFlow."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import tokenize
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests_support import HAZARDS, make_config

from tuner.export import ConfigError, HardwareFingerprint, Hazard, Setup, TunedConfig, render
from tuner.export.render import COMMENT_WIDTH

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
    assert data["schema"] == "mptune.config"
    assert data["schema_version"] == 1
    # The export writes every execution knob, at its default too (Setup.to_dict(explicit=True)).
    assert data["setup"] == {
        "policy": "mixed_float16",
        "batch_size": 16,
        "loss_scale": "dynamic:1024:500",
        "xla": False,
        "float8": False,
        "steps_per_execution": 1,
        "tf32": False,
        "gradient_accumulation_steps": 1,
        "remat": False,
        "backend": "tensorflow",
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
    assert second.gpu_memory_total_mb == 40960.0
    assert second.cpu_flags == ("avx2", "fma")
    assert HardwareFingerprint.from_profile(profile, "gpu").gpu_name == "GPU Zero"
    # No GPU here at all: a "gpu" device falls back to describing the CPU honestly.
    assert HardwareFingerprint.from_profile(fake_profile(), "gpu:0 (x)").device == "cpu"
    # The digest identifies the hardware: stable, 16 hex digits, different per device.
    assert second.digest == HardwareFingerprint.from_profile(profile, "gpu:1").digest
    assert len(second.digest) == 16
    assert int(second.digest, 16) >= 0
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
        fixed_by = "loss_scale_factor" if keras == "3" else "dynamic=False"
        assert fixed_by in snippet
    # keras_setup.compile_kwargs: jit_compile and steps_per_execution always (False and 1 here).
    expected: dict[str, object] = {"jit_compile": False, "steps_per_execution": 1}
    if keras == "3" and not scale.startswith("dynamic"):
        expected["auto_scale_loss"] = False
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
    make_config(policy="mixed_float16", loss_scale="fixed:128", hazards=HAZARDS).save(path)
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


def write_config(tmp_path: Path, mutate) -> Path:
    """A config file: make_config() changed by ``mutate``, written as JSON (json.dumps spells a
    control character or a lone surrogate as a \\u escape, as a hostile file would)."""
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(corrupt(mutate)))
    return path


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.update(model="builtin:mlp\x00"), "field model"),
        (lambda d: d.update(model="my\rmodel.py"), "field model"),
        (lambda d: d.update(session="s\x001"), "field session"),
        (lambda d: d.update(created="2026\x1b[31m"), "field created"),
        (lambda d: d["evidence"].update(reason="fast\x00"), "field evidence.reason"),
        (lambda d: d["hardware"].update(cpu_model="CPU\x85"), "field hardware.cpu_model"),
        (lambda d: d["hardware"].update(cpu_flags=["avx\x7f"]), "field hardware.cpu_flags"),
        (lambda d: d["versions"].update({"keras\x00": "3"}), "field versions (a key)"),
    ],
)
def test_control_characters_are_rejected_naming_the_field(
    tmp_path: Path, mutate, field: str
) -> None:
    path = write_config(tmp_path, mutate)
    with pytest.raises(ConfigError, match=r"must not contain control characters") as info:
        TunedConfig.load(path)
    assert field in str(info.value)
    assert "\n" not in str(info.value)


def test_free_text_keeps_tabs_and_line_breaks(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        lambda d: (
            d["evidence"].update(reason="fast\tand\nstable"),
            d.update(model=str(tmp_path / "new\nline.py")),
        ),
    )
    config = TunedConfig.load(path)
    assert config.evidence.reason == "fast\tand\nstable"
    for fmt, keras in (("snippet", "3"), ("snippet", "2"), ("script", "3")):
        compile(render(config, fmt, keras), "x.py", "exec")


NASTY = [
    "nul\x00byte",
    "escape\x1b[31m and bell\x07",
    "lone \ud800 surrogate",
    "breaks\r\n\x0b\x0c\x1c\x85\u2028\u2029end",
    "tab\tDEL\x7f C1\x9b",
    'quotes \'"""\' and back\\slash\\',
    "coding: latin-1",
    "-*- coding=no-such-codec -*-",
    "ünïcødé 模型 \ufeff",
]


@pytest.mark.parametrize("nasty", NASTY)
def test_any_string_renders_code_that_compiles(nasty: str) -> None:
    """A config built in code is not checked; whatever its strings, the generated file
    compiles, both as text and as the UTF-8 bytes a saved file holds (which Python decodes by
    any coding declaration in the first two lines)."""
    base = make_config()
    config = dataclasses.replace(
        base,
        model=nasty,
        session=nasty,
        created=nasty,
        evidence=dataclasses.replace(base.evidence, reason=nasty),
        hardware=dataclasses.replace(base.hardware, cpu_model=nasty, gpu_name=nasty),
    )
    for fmt, keras in (("snippet", "3"), ("snippet", "2"), ("script", "3")):
        code = render(config, fmt, keras)
        compile(code, "x.py", "exec")
        compile(code.encode("utf-8"), "x.py", "exec")
        if fmt == "script":
            assert assignments(code)["MODEL"] == nasty


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.update(session="s\ud800"), "field session"),
        (lambda d: d.update(model="builtin:mlp\udfff"), "field model"),
        (lambda d: d["evidence"].update(reason="\udc80"), "field evidence.reason"),
        (lambda d: d["versions"].update(keras="3\ud800"), "field versions.keras"),
        (lambda d: d["versions"].update({"\ud800": "3"}), "field versions (a key)"),
    ],
)
def test_lone_surrogates_are_rejected_naming_the_field(tmp_path: Path, mutate, field: str) -> None:
    path = write_config(tmp_path, mutate)
    assert "\\ud" in path.read_text()  # a \\u escape, as JSON spells it
    with pytest.raises(ConfigError, match="must be valid Unicode text") as info:
        TunedConfig.load(path)
    assert field in str(info.value)
    str(info.value).encode("utf-8")  # the message itself can be printed anywhere


def nested(depth: int) -> list:
    """``depth`` lists, one inside the other, built without recursion."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_deeply_nested_json_is_rejected(tmp_path: Path) -> None:
    only_notes = tmp_path / "notes.json"
    only_notes.write_text('{"notes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    inside = tmp_path / "inside.json"
    inside.write_text(with_deep_notes())
    for path in (only_notes, inside):
        with pytest.raises(ConfigError, match="nested too deeply") as info:
            TunedConfig.load(path)
        assert str(info.value).startswith(str(path))
    from tuner.export import apply_config

    # It fails before Keras is imported, on one line.
    with pytest.raises(ConfigError, match="nested too deeply"):
        apply_config(inside)


def test_deeply_nested_data_is_rejected_naming_the_field() -> None:
    data = make_config().to_dict()
    data["notes"] = nested(100_000)
    with pytest.raises(ConfigError, match=r"^cfg\.json: field notes is nested too deeply"):
        TunedConfig.from_dict(data, source="cfg.json")
    data = make_config().to_dict()
    data["evidence"]["trials"] = nested(100_000)  # a field that is read and shown when wrong
    with pytest.raises(ConfigError, match="field evidence is nested too deeply"):
        TunedConfig.from_dict(data, source="cfg.json")
    data = make_config().to_dict()
    data["later"] = {"a": nested(20)}  # within the limit: unknown fields are still ignored
    assert TunedConfig.from_dict(data) == make_config()


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (
            lambda d: d["evidence"].update(samples_per_second=-1.0),
            "field evidence.samples_per_second must be a number at least 0, got -1.0",
        ),
        (
            lambda d: d["evidence"].update(samples_per_second=10**400),
            "field evidence.samples_per_second must be a finite number",
        ),
        (
            lambda d: d["evidence"].update(samples_per_second_spread=[1250.0, 1200.0]),
            "field evidence.samples_per_second_spread must be a list of two numbers, the lower",
        ),
        (
            lambda d: d["evidence"].update(samples_per_second_spread=[-5.0, 1.0]),
            "field evidence.samples_per_second_spread must be a number at least 0",
        ),
        (
            lambda d: d["evidence"].update(baseline_samples_per_second=-2),
            "field evidence.baseline_samples_per_second must be a number at least 0",
        ),
        (
            lambda d: d["evidence"].update(speedup_vs_float32=-0.5),
            "field evidence.speedup_vs_float32 must be a number at least 0",
        ),
        (
            lambda d: d["evidence"].update(memory_saving=1.5),
            "field evidence.memory_saving must be a number at most 1",
        ),
        (
            lambda d: d["evidence"].update(peak_memory_mb=-1),
            "field evidence.peak_memory_mb must be a number at least 0",
        ),
        (
            lambda d: d["evidence"].update(loss_gap=-0.01),
            "field evidence.loss_gap must be a number at least 0",
        ),
        (
            lambda d: d["evidence"].update(skipped_steps=2**63),
            "field evidence.skipped_steps must be a whole number from 0 to 2**63-1",
        ),
        (
            lambda d: d["evidence"].update(trials=[0, -1]),
            "field evidence.trials must be a whole number from 0",
        ),
        (
            lambda d: d["hardware"].update(gpu_memory_total_mb=-40960.0),
            "field hardware.gpu_memory_total_mb must be a number at least 0",
        ),
    ],
)
def test_numbers_out_of_range_name_the_field(tmp_path: Path, mutate, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        TunedConfig.load(write_config(tmp_path, mutate))
    assert fragment in str(info.value)


def test_numbers_in_range_still_load(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        lambda d: d["evidence"].update(
            memory_saving=-0.25, samples_per_second=0, samples_per_second_spread=[7.0, 7.0]
        ),
    )
    config = TunedConfig.load(path)
    assert config.evidence.memory_saving == -0.25  # more memory than float32: negative
    assert config.evidence.samples_per_second_spread == (7.0, 7.0)


def test_numbers_json_cannot_hold(tmp_path: Path) -> None:
    text = make_config().to_json()
    infinite = tmp_path / "infinite.json"
    infinite.write_text(text.replace('"loss_gap": 0.0', '"loss_gap": 1e999'))
    with pytest.raises(ConfigError, match=r"field evidence\.loss_gap must be a finite number"):
        TunedConfig.load(infinite)
    long = tmp_path / "long.json"
    long.write_text(text.replace('"loss_gap": 0.0', '"loss_gap": 1' + "0" * 5000))
    with pytest.raises(ConfigError, match=r"long\.json is not valid JSON: a number has too many"):
        TunedConfig.load(long)


def with_deep_notes() -> str:
    """A good config with 100,000 nested lists in an extra field (json.dumps cannot write it)."""
    deep = "[" * 100_000 + "]" * 100_000
    return make_config().to_json().rstrip().rstrip("}") + ', "notes": ' + deep + "}"


@pytest.mark.parametrize(
    "text, fragment",
    [
        (lambda: json.dumps(corrupt(lambda d: d.update(session="s\x00"))), "field session"),
        (lambda: json.dumps(corrupt(lambda d: d.update(model="m\ud800"))), "field model"),
        (with_deep_notes, "nested too deeply"),
        (
            lambda: json.dumps(corrupt(lambda d: d["evidence"].update(loss_gap=-1))),
            "field evidence.loss_gap",
        ),
    ],
)
def test_export_cli_reports_a_bad_config_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text, fragment: str
) -> None:
    from tuner import cli

    path = tmp_path / "tuned.json"
    path.write_text(text())
    assert cli.main(["export", str(path), "--format", "script"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mptune: error:"), err
    assert fragment in lines[0]
    assert "Traceback" not in err


# -- precision hazards ----------------------------------------------------------------------
def comments(code: str) -> list[str]:
    """The text of every comment in ``code``, as Python's tokenizer finds them."""
    tokens = tokenize.generate_tokens(io.StringIO(code).readline)
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


def comment_text(code: str) -> str:
    """All comments joined into one line, their wrapping undone."""
    return " ".join(c.lstrip("#").strip() for c in comments(code))


def test_round_trip_with_hazards(tmp_path: Path) -> None:
    config = make_config(policy="mixed_bfloat16", hazards=HAZARDS)
    path = tmp_path / "tuned.json"
    config.save(path)
    assert TunedConfig.load(path) == config
    data = json.loads(path.read_text())
    assert data["hazards"] == [h.to_dict() for h in HAZARDS]
    assert set(data["hazards"][0]) == {
        "kind",
        "layer",
        "policy",
        "evidence",
        "fix",
        "severity",
        "figure",
        "at",
        "whose",
    }
    assert data["hazards"][2]["layer"] is None  # the model as a whole
    assert TunedConfig.from_dict(config.to_dict()).hazards == HAZARDS
    assert json.loads(render(config, "json"))["hazards"] == data["hazards"]
    assert config.policy_hazards() == (HAZARDS[1],)


def test_a_config_without_hazards_still_loads(tmp_path: Path) -> None:
    """A config written before hazards existed has no such key: it loads with none."""
    data = make_config().to_dict()
    assert data.pop("hazards") == []
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    config = TunedConfig.load(path)
    assert config.hazards == ()
    assert config == make_config()
    assert "mptune numerics" not in render(config, "snippet")


def test_hazard_free_text_keeps_tabs_and_line_breaks(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        lambda d: d.update(
            hazards=[{**HAZARDS[0].to_dict(), "evidence": "a\tb\nc", "layer": "x\ny", "fix": "f"}]
        ),
    )
    hazard = TunedConfig.load(path).hazards[0]
    assert (hazard.evidence, hazard.layer, hazard.fix) == ("a\tb\nc", "x\ny", "f")


def with_hazard(**changes: Any):
    """A mutation of config data: HAZARDS[0] with ``changes`` (None: the key removed)."""

    def mutate(data: dict) -> None:
        hazard = {**HAZARDS[0].to_dict(), **changes}
        data["hazards"] = [HAZARDS[1].to_dict(), {k: v for k, v in hazard.items() if v is not ...}]

    return mutate


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda d: d.update(hazards="none"), "field hazards must be a list, got 'none'"),
        (lambda d: d.update(hazards={"kind": "x"}), "field hazards must be a list"),
        (lambda d: d.update(hazards=[HAZARDS[0].to_dict(), 3]), "field hazards[1] must be an"),
        (with_hazard(kind="nope"), "field hazards[1].kind: unknown hazard kind 'nope'"),
        (with_hazard(kind=...), "field hazards[1].kind must be a non-empty string, got None"),
        (with_hazard(kind=7), "field hazards[1].kind must be a non-empty string, got 7"),
        (with_hazard(policy="float64"), "field hazards[1].policy: unknown policy 'float64'"),
        (with_hazard(policy=""), "field hazards[1].policy must be a non-empty string"),
        (with_hazard(severity="fatal"), "field hazards[1].severity: unknown severity 'fatal'"),
        (with_hazard(severity=...), "field hazards[1].severity must be a non-empty string"),
        (with_hazard(evidence=...), "field hazards[1].evidence must be a non-empty string"),
        (with_hazard(evidence=""), "field hazards[1].evidence must be a non-empty string, got ''"),
        (with_hazard(evidence=["a"]), "field hazards[1].evidence must be a non-empty string"),
        (with_hazard(fix=None), "field hazards[1].fix must be a non-empty string, got None"),
        (with_hazard(layer=5), "field hazards[1].layer must be a string, got 5"),
        (
            with_hazard(evidence="x" * 4001),
            "field hazards[1].evidence must be at most 4,000 characters, got 4,001",
        ),
        (
            with_hazard(layer="L" * 5000),
            "field hazards[1].layer must be at most 4,000 characters, got 5,000",
        ),
        (
            lambda d: d.update(hazards=[HAZARDS[0].to_dict()] * 1001),
            "field hazards must list at most 1,000 hazards, got 1,001",
        ),
    ],
)
def test_bad_hazards_name_the_field(tmp_path: Path, mutate, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        TunedConfig.load(write_config(tmp_path, mutate))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'tuned.json'}: "), message
    assert fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"evidence": "fast\x00"}, "field hazards[1].evidence"),
        ({"fix": "do \x1b[31mthis"}, "field hazards[1].fix"),
        ({"layer": "dense\x85"}, "field hazards[1].layer"),
        ({"kind": "overflow\t"}, "field hazards[1].kind"),
        ({"policy": "mixed_float16\n"}, "field hazards[1].policy"),
        ({"severity": "unsafe\r"}, "field hazards[1].severity"),
    ],
)
def test_hazard_control_characters_are_rejected(tmp_path: Path, changes: dict, field: str) -> None:
    with pytest.raises(ConfigError, match="must not contain control characters") as info:
        TunedConfig.load(write_config(tmp_path, with_hazard(**changes)))
    assert field in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("key", ["evidence", "fix", "layer"])
def test_hazard_lone_surrogates_are_rejected(tmp_path: Path, key: str) -> None:
    path = write_config(tmp_path, with_hazard(**{key: "x\ud800"}))
    with pytest.raises(ConfigError, match="must be valid Unicode text") as info:
        TunedConfig.load(path)
    assert f"field hazards[1].{key}" in str(info.value)


FORMATS_RENDERED = [("snippet", "3"), ("snippet", "2"), ("script", "3")]


@pytest.mark.parametrize("fmt, keras", FORMATS_RENDERED)
def test_every_format_shows_the_hazards_as_comments(fmt: str, keras: str) -> None:
    """Chosen mixed_bfloat16: its own warning, and why mixed_float16 (unsafe) was not chosen;
    mixed_float16's mere warning stays in the JSON only."""
    config = make_config(policy="mixed_bfloat16", hazards=HAZARDS)
    code = render(config, fmt, keras)
    compile(code, "x.py", "exec")
    text = comment_text(code)
    unsafe, warning, other_warning = HAZARDS
    # Each hazard: a "# mptune numerics: ..." comment, then "# fix: ...", wrapped.
    heads = [c for c in comments(code) if not c.startswith("#   ")]
    first = next(
        i
        for i, c in enumerate(heads)
        if c.startswith("# mptune numerics: divergence in 'dense_1' (Dense): its output")
    )
    assert heads[first + 1].startswith("# fix: keep this layer in float32")
    assert heads[first + 2].startswith(
        "# mptune numerics (why not mixed_float16): integer_cast in 'embedding' (Embedding):"
    )
    assert heads[first + 3].startswith("# fix: declare the model input")
    # The whole evidence and fix, their wrapping undone.
    assert f"mptune numerics: divergence in 'dense_1' (Dense): {warning.evidence}" in text
    assert f"fix: {warning.fix}" in text
    assert f"{unsafe.evidence} fix: {unsafe.fix}" in text
    assert other_warning.evidence not in code
    # Only comments: the code is the same as without hazards, and every added line is one.
    plain = render(make_config(policy="mixed_bfloat16"), fmt, keras)
    assert code_only(code) == code_only(plain)
    added = [line for line in code.splitlines() if line not in plain.splitlines()]
    assert len(added) >= 4
    assert all(line.startswith("# ") for line in added)
    assert all(len(line) <= COMMENT_WIDTH for line in added)


def code_only(code: str) -> str:
    """The code's syntax tree, which holds no comments."""
    return ast.dump(ast.parse(code))


@pytest.mark.parametrize(
    "policy, shown, hidden",
    [
        # float32 chosen: only the other policies' unsafe hazards.
        ("float32", ["why not mixed_float16): integer_cast"], ["divergence", "underflow"]),
        # A config edited to use the unsafe policy: its own hazards, the unsafe one marked.
        (
            "mixed_float16",
            ["mptune numerics (unsafe): integer_cast", "mptune numerics: underflow:"],
            ["divergence", "why not"],
        ),
    ],
)
def test_which_hazards_the_comments_show(policy: str, shown: list, hidden: list) -> None:
    for fmt, keras in FORMATS_RENDERED:
        text = comment_text(render(make_config(policy=policy, hazards=HAZARDS), fmt, keras))
        for fragment in shown:
            assert fragment in text
        for fragment in hidden:
            assert fragment not in text


def test_long_hazard_text_is_wrapped() -> None:
    hazard = Hazard("overflow", "float32", "'d' (Dense)", "word " * 200 + "x" * 300, "fix " * 100)
    code = render(make_config(hazards=(hazard,)), "snippet")
    plain = render(make_config(), "snippet").splitlines()
    lines = [line for line in code.splitlines() if line not in plain]
    assert len(lines) > 10
    assert all(line.startswith("# ") for line in lines)
    assert max(map(len, lines)) <= COMMENT_WIDTH
    assert "x" * 300 in comment_text(code).replace(" ", "")  # a long word broken, not lost


@pytest.mark.parametrize("nasty", NASTY)
def test_any_hazard_text_renders_code_that_compiles(nasty: str) -> None:
    """Hazards built in code are not checked; whatever their text, the generated file compiles
    and the text stays in comments."""
    hazards = (
        Hazard("integer_cast", nasty, nasty, nasty, nasty, severity="unsafe"),
        Hazard("overflow", "float32", nasty, nasty, nasty),
        Hazard("underflow", "float32", None, nasty + "\\", "\\" + nasty),
    )
    config = make_config(hazards=hazards)
    for fmt, keras in FORMATS_RENDERED:
        code = render(config, fmt, keras)
        compile(code, "x.py", "exec")
        compile(code.encode("utf-8"), "x.py", "exec")
        assert code_only(code) == code_only(render(make_config(), fmt, keras))


@pytest.mark.parametrize("fmt", ["snippet", "script"])
def test_hazard_text_cannot_break_out_of_comments(fmt: str) -> None:
    attack = 'x"""\r\nimport os; os.system("echo pwned")\n# \\\n'
    hazards = (
        Hazard("overflow", "float32", attack, attack, attack),
        Hazard("integer_cast", attack, attack, attack, attack, severity="unsafe"),
    )
    code = render(make_config(hazards=hazards), fmt)
    tree = ast.parse(code)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "system"]
    assert calls == []
    assert 'import os; os.system("echo pwned")' in comment_text(code)


def test_config_from_session_carries_the_hazards() -> None:
    from tuner.export import config_from_session

    base = make_config(policy="mixed_bfloat16", hazards=HAZARDS)
    evidence = dataclasses.asdict(base.evidence)
    rec = SimpleNamespace(
        setup=base.setup,
        device="cpu",
        versions=base.versions,
        hazards=HAZARDS,
        input=None,
        **evidence,
    )
    session = SimpleNamespace(
        name="s1",
        model=base.model,
        recommendation=rec,
        hardware={"cpu": {"model": "Test CPU", "flags": ["avx2"]}},
    )
    config = config_from_session(session)  # type: ignore[arg-type]
    assert config.hazards == HAZARDS
    assert config.evidence == base.evidence
    assert TunedConfig.from_dict(json.loads(config.to_json())) == config


# -- execution knobs (XLA, steps per execution, TF32, gradient accumulation) ----------------
def knob_config(
    policy: str = "float32", loss_scale: str = "none", batch_size: int = 16, **knobs: Any
) -> TunedConfig:
    """make_config with a setup that carries ``knobs``."""
    config = make_config(policy=policy, loss_scale=loss_scale, batch_size=batch_size)
    return dataclasses.replace(config, setup=Setup(policy, batch_size, loss_scale, **knobs))


KNOBS = {"xla": True, "steps_per_execution": 4, "gradient_accumulation_steps": 2}


@pytest.mark.parametrize(
    "config",
    [
        knob_config("mixed_float16", "dynamic:1024:500", **KNOBS),
        knob_config("float32", tf32=True, **KNOBS),
        knob_config("mixed_bfloat16", steps_per_execution=1024, gradient_accumulation_steps=1024),
    ],
)
def test_round_trip_with_knobs(tmp_path: Path, config: TunedConfig) -> None:
    path = tmp_path / "tuned.json"
    config.save(path)
    assert TunedConfig.load(path) == config
    setup = json.loads(path.read_text())["setup"]
    assert setup == config.setup.to_dict(explicit=True)
    assert {k: setup[k] for k in ("xla", "steps_per_execution", "tf32")} == {
        "xla": config.setup.xla,
        "steps_per_execution": config.setup.steps_per_execution,
        "tf32": config.setup.tf32,
    }
    assert json.loads(render(config, "json"))["setup"] == setup


def test_a_config_without_knobs_loads_with_the_defaults(tmp_path: Path) -> None:
    """A config written before the knobs existed: only policy, batch size and loss scale."""
    path = write_config(
        tmp_path,
        lambda d: d.update(setup={"policy": "float32", "batch_size": 16, "loss_scale": "none"}),
    )
    setup = TunedConfig.load(path).setup
    assert setup == make_config().setup
    assert (setup.xla, setup.steps_per_execution, setup.tf32) == (False, 1, False)
    assert setup.gradient_accumulation_steps == 1


def with_setup(**changes: Any):
    """A mutation of config data: its setup with ``changes``."""
    return lambda d: d["setup"].update(changes)


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (with_setup(xla="yes"), "field setup.xla must be true or false, got 'yes'"),
        (with_setup(xla=1), "field setup.xla must be true or false, got 1"),
        (with_setup(xla=None), "field setup.xla must be true or false, got None"),
        (with_setup(tf32="false"), "field setup.tf32 must be true or false, got 'false'"),
        (
            with_setup(steps_per_execution=0),
            "field setup.steps_per_execution must be a positive integer, got 0",
        ),
        (
            with_setup(steps_per_execution=True),
            "field setup.steps_per_execution must be a positive integer, got True",
        ),
        (
            with_setup(steps_per_execution=4.0),
            "field setup.steps_per_execution must be a positive integer, got 4.0",
        ),
        (
            with_setup(steps_per_execution=2000),
            "field setup.steps_per_execution: steps per execution must be a whole number "
            "from 1 to 1024, not 2000",
        ),
        (
            with_setup(gradient_accumulation_steps=-2),
            "field setup.gradient_accumulation_steps must be a positive integer, got -2",
        ),
        (
            with_setup(gradient_accumulation_steps="2"),
            "field setup.gradient_accumulation_steps must be a positive integer, got '2'",
        ),
        (
            with_setup(gradient_accumulation_steps=10**400),
            "field setup.gradient_accumulation_steps: gradient accumulation steps must be a "
            "whole number from 1 to 1024",
        ),
        (
            with_setup(policy="mixed_float16", loss_scale="dynamic", tf32=True),
            "field setup.tf32: TF32 is a variant of float32; mixed_float16 already computes in "
            "float16",
        ),
        (
            with_setup(policy="mixed_bfloat16", tf32=True),
            "field setup.tf32: TF32 is a variant of float32; mixed_bfloat16",
        ),
        (with_setup(turbo=True), "unknown field(s) in setup: turbo"),
        (
            with_setup(backend="numpy"),
            "field setup.backend: unknown Keras backend 'numpy': choose one of tensorflow, jax, "
            "torch",
        ),
        (with_setup(backend=3), "field setup.backend must be a non-empty string, got 3"),
        (with_setup(backend=None), "field setup.backend must be a non-empty string, got None"),
        (
            with_setup(backend="torch", steps_per_execution=4),
            "setup: steps per execution must be 1 on the torch backend",
        ),
    ],
)
def test_bad_knobs_name_the_field_on_one_line(tmp_path: Path, mutate, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        TunedConfig.load(write_config(tmp_path, mutate))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'tuned.json'}: "), message
    assert fragment in message, message
    assert "\n" not in message


def test_export_cli_reports_a_bad_knob_on_one_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, with_setup(policy="mixed_float16", tf32=True))
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "export", str(path), "--format", "snippet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"mptune: error: {path}: field setup.tf32: ")


@pytest.mark.parametrize(
    "policy, scale, expected",
    [
        (
            "mixed_float16",
            "dynamic:1024:500",
            {"jit_compile": True, "steps_per_execution": 4},
        ),
        (
            "mixed_float16",
            "fixed:128",
            {"auto_scale_loss": False, "jit_compile": True, "steps_per_execution": 4},
        ),
        (
            "float32",
            "none",
            {"auto_scale_loss": False, "jit_compile": True, "steps_per_execution": 4},
        ),
    ],
)
def test_keras3_snippet_carries_the_knobs(policy: str, scale: str, expected: dict) -> None:
    """COMPILE_KWARGS is keras_setup.compile_kwargs (test_export_exec compares the two with
    Keras); the accumulation is set on the optimizer before any loss scaling wraps it."""
    config = knob_config(policy, scale, batch_size=32, **KNOBS)
    for fmt in ("snippet", "script"):
        code = render(config, fmt)
        compile(code, f"{fmt}.py", "exec")
        values = assignments(code)
        assert values["COMPILE_KWARGS"] == expected
        assert values["BATCH_SIZE"] == 32
        assert values["GRADIENT_ACCUMULATION_STEPS"] == 2
        assert 'config["gradient_accumulation_steps"] = GRADIENT_ACCUMULATION_STEPS' in code
        accumulate = code.index("gradient_accumulation_steps")
        for wrapping in ("LossScaleOptimizer(", "loss_scale_factor"):
            if wrapping in code:
                assert accumulate < code.index(wrapping, code.index("def "))
        text = comment_text(code)
        assert "global batch of 64 samples" in text
        assert "XLA: compile the training step with XLA" in text
        assert "Run 4 training steps per call into the compiled step" in text
        assert "Gradient accumulation: a copy that updates the weights once every" in text
        # Only float32 touches TF32, and says so in one comment line.
        assert ("enable_tensor_float_32_execution(False)" in code) == (policy == "float32")
        assert "enable_tensor_float_32_execution(True)" not in code
    script = render(config, "script")
    assert "2 accumulation steps (global batch 64)" in comment_text(script)
    assert "steps = -(-steps // per_call) * per_call" in script


def test_knobs_at_their_defaults_add_no_accumulation() -> None:
    code = render(make_config(policy="mixed_bfloat16"), "snippet")
    assert "GRADIENT_ACCUMULATION_STEPS" not in code
    assert "gradient_accumulation" not in code
    assert "TF32" not in code
    assert "tensor_float_32" not in code  # mixed: TF32 left alone
    assert assignments(code)["COMPILE_KWARGS"] == {
        "auto_scale_loss": False,
        "jit_compile": False,
        "steps_per_execution": 1,
    }
    text = comment_text(code)
    assert "No XLA: a plain tf.function" in text
    assert "One training step per call" in text


@pytest.mark.parametrize("fmt, keras", FORMATS_RENDERED)
@pytest.mark.parametrize("tf32", [True, False])
def test_float32_sets_tf32_with_a_one_line_comment(fmt: str, keras: str, tf32: bool) -> None:
    code = render(knob_config("float32", tf32=tf32), fmt, keras)
    compile(code, "x.py", "exec")
    lines = code.splitlines()
    call = next(i for i, line in enumerate(lines) if "enable_tensor_float_32_execution" in line)
    assert lines[call].strip() == f"tf.config.experimental.enable_tensor_float_32_execution({tf32})"
    comment = lines[call - 1].strip()
    assert comment.startswith("# TF32 on: " if tf32 else "# TF32 off: "), comment
    assert "only matters on NVIDIA compute capability 8.0+" in comment
    assert len(lines[call - 1]) <= COMMENT_WIDTH
    # After the policy is set, before the model is built.
    assert code.index("set_global_policy(") < code.index("enable_tensor_float_32_execution")


@pytest.mark.parametrize("keras", ["3", "2"])
def test_every_knob_combination_renders_code_that_compiles(keras: str) -> None:
    for policy, scale in (("float32", "none"), ("mixed_float16", "fixed:128")):
        for xla in (False, True):
            for spe in (1, 8):
                for acc in (1, 4) if keras == "3" else (1,):
                    knobs = {"xla": xla, "steps_per_execution": spe, "tf32": policy == "float32"}
                    config = knob_config(policy, scale, gradient_accumulation_steps=acc, **knobs)
                    for fmt in ("snippet", "script") if keras == "3" else ("snippet",):
                        code = render(config, fmt, keras)
                        compile(code, "x.py", "exec")
                        # Every line this export adds is within the width of generated comments.
                        plain = render(make_config(policy=policy, loss_scale=scale), fmt, keras)
                        added = [x for x in code.splitlines() if x not in plain.splitlines()]
                        assert all(len(x) <= COMMENT_WIDTH for x in added), added


def test_keras2_snippet_carries_xla_and_steps_per_execution() -> None:
    config = knob_config("mixed_float16", "dynamic", xla=True, steps_per_execution=8)
    code = render(config, "snippet", "2")
    assert assignments(code)["COMPILE_KWARGS"] == {"jit_compile": True, "steps_per_execution": 8}
    assert "auto_scale_loss" not in code
    assert "gradient_accumulation" not in code


def test_keras2_refuses_gradient_accumulation() -> None:
    config = knob_config("mixed_float16", "dynamic", gradient_accumulation_steps=2)
    with pytest.raises(ConfigError) as info:
        render(config, "snippet", "2")
    message = str(info.value)
    assert "\n" not in message
    assert "[[keras 3]]" in message
    assert "2 accumulation steps" in message
    assert "tf_keras" in message
    render(config, "snippet", "3")  # Keras 3 can
    assert json.loads(render(config, "json", "2"))["setup"]["gradient_accumulation_steps"] == 2


def test_export_cli_refuses_keras2_accumulation_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "tuned.json"
    knob_config("float32", gradient_accumulation_steps=4).save(path)
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "export", str(path), "--format", "snippet", "--keras", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "export it for Keras 3 (--keras 3)" in lines[0], lines


# -- the Keras backend ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_backend_round_trips_through_the_config_and_the_export_cli(
    tmp_path: Path, backend: str
) -> None:
    config = knob_config("mixed_bfloat16", backend=backend, gradient_accumulation_steps=2)
    path = tmp_path / "tuned.json"
    config.save(path)
    assert json.loads(path.read_text())["setup"]["backend"] == backend
    assert TunedConfig.load(path) == config
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "export", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["setup"] == config.setup.to_dict(explicit=True)
    assert TunedConfig.from_dict(json.loads(proc.stdout)).setup.backend == backend


@pytest.mark.parametrize("fmt", ["snippet", "script"])
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_keras3_exports_set_the_backend_before_keras(fmt: str, backend: str) -> None:
    """KERAS_BACKEND assigned (the tuned backend wins over the shell's) before Keras' first
    import, then checked; TF32 on the backend's own switch; jit_compile as keras_setup has it
    (always on JAX, torch.compile for --xla on PyTorch)."""
    for xla in (False, True):
        config = knob_config("float32", backend=backend, tf32=True, xla=xla)
        code = render(config, fmt)
        compile(code, f"{fmt}.py", "exec")
        assert "setdefault(" not in code
        lines = code.splitlines()
        assert lines.count("import keras  # noqa: E402") == 1
        keras_import = lines.index("import keras  # noqa: E402")
        assign = lines.index('os.environ["KERAS_BACKEND"] = KERAS_BACKEND')
        assert lines.index("import os") < assign < keras_import
        assert not any("import keras" in line for line in lines[:assign])
        assert assignments(code)["KERAS_BACKEND"] == backend
        assert "if keras.backend.backend() != KERAS_BACKEND:" in code
        text = comment_text(code)
        assert "Keras reads KERAS_BACKEND once" in text
        assert "not setdefault" in text
        expected_jit = True if backend == "jax" else xla
        assert assignments(code)["COMPILE_KWARGS"]["jit_compile"] is expected_jit
        if backend == "jax":
            assert "JAX: Keras compiles the training step with XLA" in text
            assert "jax.config.update(\"jax_default_matmul_precision\", 'tensorfloat32')" in code
        if backend == "torch":
            assert ("torch.compile: compile the training step" in text) is xla
            assert "torch.backends.cuda.matmul.allow_tf32 = True" in code
            assert "torch.backends.cudnn.allow_tf32 = True" in code
        assert ("enable_tensor_float_32_execution(True)" in code) is (backend == "tensorflow")
        # Only the tuned backend's framework is imported (the TensorFlow script's tf.data too).
        frameworks = {
            "tensorflow": "import tensorflow",
            "jax": "import jax",
            "torch": "import torch",
        }
        for other, statement in frameworks.items():
            assert (statement in code) is (other == backend), (other, statement)
    plain = render(knob_config("mixed_bfloat16", backend=backend), fmt)
    if backend != "tensorflow" and fmt == "snippet":
        assert f"import {backend}" not in plain  # no TF32 to set: no framework needed


@pytest.mark.parametrize("backend, name", [("jax", "JAX"), ("torch", "PyTorch")])
def test_keras2_refuses_other_backends_on_one_line(tmp_path: Path, backend: str, name: str) -> None:
    config = knob_config("mixed_float16", "dynamic", backend=backend)
    with pytest.raises(ConfigError) as info:
        render(config, "snippet", "2")
    assert str(info.value) == (
        f"this setup was tuned on the {backend} backend ({name}), and tf_keras (Keras 2) runs on "
        "TensorFlow only; export it for Keras 3 ([[keras 3]])"
    )
    path = tmp_path / "tuned.json"
    config.save(path)
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "export", str(path), "--format", "snippet", "--keras", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "tf_keras (Keras 2) runs on TensorFlow only" in lines[0], lines
