"""A session owns its model file's or training script's content (issue 37): trials of two
versions of a model never mix in one session, yet a file fixed after the model's own error
goes on where its session stopped. Scripted trials: no worker, no TensorFlow."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_output import BROKEN
from test_faults import SPEEDS
from test_search_strategy import FakeProfile, Machine, tune_with

from tuner.errors import MptuneError
from tuner.search.session import TuningSession
from tuner.trials.models import ScriptCommand, file_digest

MODEL = "def build_model():\n    return None  # built by the scripted trials\n"
SCRIPT = "import keras\nmodel = keras.Sequential()\nmodel.fit([0], [0])\n"


def _tune(machine: Machine, tmp_path: Path, model: str | None, **kwargs: object) -> object:
    return tune_with(
        model=model,
        storage=f"sqlite:///{tmp_path / 's.db'}",
        study=kwargs.pop("study", "m"),
        runner=machine,
        profile=FakeProfile(),
        **kwargs,
    )


def _digest(tmp_path: Path, study: str = "m") -> str:
    session = TuningSession.load(study, f"sqlite:///{tmp_path / 's.db'}")
    return session.view().model_digest


def test_a_changed_model_file_does_not_resume_a_measured_session(tmp_path: Path) -> None:
    model = tmp_path / "net.py"
    model.write_text(MODEL)
    _tune(Machine(speed=SPEEDS), tmp_path, str(model))
    assert _digest(tmp_path) == file_digest(str(model)) != ""

    model.write_text(MODEL + "# the same model, one more line\n")
    again = Machine(speed=SPEEDS)
    with pytest.raises(MptuneError) as info:
        _tune(again, tmp_path, None, resume=True)
    said = str(info.value)
    assert f"{model} has changed since session 'm' measured it" in said
    assert "would not compare" in said
    assert "[[study]]" in said
    assert not again.calls  # refused before any trial

    model.write_text(MODEL)  # the version it measured, put back: it goes on
    _tune(Machine(speed=SPEEDS), tmp_path, None, resume=True)
    assert _digest(tmp_path) == file_digest(str(model))


def test_a_file_fixed_after_its_own_error_resumes_its_session(tmp_path: Path) -> None:
    model = tmp_path / "net.py"
    model.write_text(MODEL)
    with pytest.raises(MptuneError, match="fails in its own code"):
        _tune(Machine(speed=SPEEDS, status=BROKEN), tmp_path, str(model))
    model.write_text(MODEL.replace("return None", "return None  # fixed"))
    fixed = Machine(speed=SPEEDS)
    result = _tune(fixed, tmp_path, None, resume=True)
    assert fixed.calls  # type: ignore[attr-defined]
    assert result.recommendation is not None
    # The fixed file is the session's from now on: a later change is refused again.
    assert _digest(tmp_path) == file_digest(str(model))
    model.write_text(MODEL + "# changed after the fix\n")
    with pytest.raises(MptuneError, match="has changed since"):
        _tune(Machine(speed=SPEEDS), tmp_path, None, resume=True)


def test_a_session_from_before_digests_records_its_file_when_resumed(tmp_path: Path) -> None:
    model = tmp_path / "net.py"
    model.write_text(MODEL)
    _tune(Machine(speed=SPEEDS), tmp_path, str(model))
    session = TuningSession.load("m", f"sqlite:///{tmp_path / 's.db'}")
    session.set_attr("model_digest", None)  # as a session stored before issue 37
    assert _digest(tmp_path) == ""
    model.write_text(MODEL + "# edited meanwhile: nothing to compare it with\n")
    _tune(Machine(speed=SPEEDS), tmp_path, None, resume=True)
    assert _digest(tmp_path) == file_digest(str(model))


def test_a_training_scripts_session_owns_its_content_and_arguments(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    spec = ScriptCommand(str(script), ("--epochs", "3")).spec
    _tune(Machine(speed=SPEEDS), tmp_path, spec, study="s")
    assert _digest(tmp_path, "s") == file_digest(str(script))
    # Other arguments: another command, refused as another model.
    other = ScriptCommand(str(script), ("--epochs", "4")).spec
    with pytest.raises(MptuneError, match="one session holds one model's trials"):
        _tune(Machine(speed=SPEEDS), tmp_path, other, study="s", resume=True)
    script.write_text(SCRIPT.replace("[0], [0]", "[1], [1]"))
    with pytest.raises(MptuneError, match=f"{script} has changed since session 's'"):
        _tune(Machine(speed=SPEEDS), tmp_path, None, study="s", resume=True)


def test_a_built_in_workload_has_no_file_to_compare(tmp_path: Path) -> None:
    _tune(Machine(speed=SPEEDS), tmp_path, "builtin:mlp")
    assert _digest(tmp_path) == ""
    _tune(Machine(speed=SPEEDS), tmp_path, None, resume=True)
