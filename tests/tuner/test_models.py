"""Model specs checked before any worker starts (no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.errors import MptuneError
from tuner.trials.models import BUILTINS, parse_model_spec


def test_builtins_parse_with_defaults_and_overrides() -> None:
    source = parse_model_spec("builtin:cnn:image_size=64,filters=16")
    assert source.kind == "builtin"
    assert source.name == "cnn"
    assert source.params["image_size"] == 64
    assert source.params["filters"] == 16
    assert source.params["classes"] == BUILTINS["cnn"].params["classes"]
    assert not source.is_user_code


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("builtin:resnet", "unknown built-in model 'resnet'"),
        ("builtin:cnn:depth=3", "has no parameter 'depth'"),
        ("builtin:cnn:filters=x", "must be a whole number"),
        ("builtin:cnn:filters=0", "at least 1"),
        ("builtin:cnn:filters", "write key=value"),
    ],
)
def test_bad_builtin_specs(spec: str, fragment: str) -> None:
    with pytest.raises(MptuneError, match=fragment):
        parse_model_spec(spec)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MptuneError, match="model file not found"):
        parse_model_spec(str(tmp_path / "nope.py"))


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import keras\n\ndef build_model(:\n    pass\n")
    with pytest.raises(MptuneError) as info:
        parse_model_spec(str(path))
    assert str(info.value).startswith(f"{path}:3: syntax error")


def test_file_without_build_model(tmp_path: Path) -> None:
    path = tmp_path / "empty.py"
    path.write_text("def make_model():\n    return None\n")
    with pytest.raises(MptuneError, match="defines no build_model"):
        parse_model_spec(str(path))


@pytest.mark.parametrize(
    "body",
    [
        "def build_model():\n    pass\n",
        "from mylib import build_model\n",
        "build_model = lambda: None\n",
        "try:\n    from fast import build_model\nexcept ImportError:\n    build_model = None\n",
        "from mylib import *\n",
    ],
)
def test_ways_to_define_build_model(tmp_path: Path, body: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(body)
    assert parse_model_spec(str(path)).kind == "python"


def test_make_dataset_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def build_model():\n    pass\n\ndef make_dataset(batch_size):\n    pass\n")
    assert parse_model_spec(str(path)).has_make_dataset


@pytest.mark.parametrize(
    "name, content, fragment",
    [
        ("m.keras", b"not a zip", "not a saved Keras model"),
        ("m.h5", b"", "legacy HDF5"),
        ("m.txt", b"", "unsupported model file"),
        ("m.py", b"\xff\xfe\x00bad", "not UTF-8"),
    ],
)
def test_wrong_kinds_of_file(tmp_path: Path, name: str, content: bytes, fragment: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(MptuneError, match=fragment):
        parse_model_spec(str(path))


def test_directory_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(MptuneError, match="is a directory"):
        parse_model_spec(str(tmp_path))
