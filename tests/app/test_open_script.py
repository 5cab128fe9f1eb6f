"""Issue 37 in the window: File > Open training script... takes a script and its own arguments
(the model a search tunes: the script up to its model.fit), and the export dialog of a setup
tuned on a script shows the command that runs the script with it, unedited."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from app.qt_export import run_command
from tuner import api

SCRIPT = Path(__file__).resolve().parents[1] / "tuner" / "data" / "scripts" / "mnist_arrays.py"


def make_config(model: str = "builtin:mlp") -> api.TunedConfig:
    return api.TunedConfig.from_dict(
        {
            "schema": "mptune.config",
            "schema_version": 1,
            "model": model,
            "setup": api.Setup("float32", 64).to_dict(explicit=True),
            "evidence": {"samples_per_second": 900.0, "trials": [1]},
            "hardware": {"device": "cpu", "cpu_model": "Test CPU"},
        }
    )


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """What the file dialog and the arguments' box answer; lists the warnings shown."""
    given: dict[str, object] = {"path": str(SCRIPT), "line": "--samples 512", "ok": True}
    warned: list[str] = []
    given["warned"] = warned
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (given["path"], ""))
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: (given["line"], given["ok"]))
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text: warned.append(text))
    return given


def test_a_script_and_its_arguments_become_the_model(make_window, qtbot, answers) -> None:
    window = make_window()
    window.open_script()
    spec = api.ScriptCommand(str(SCRIPT), ("--samples", "512")).spec
    assert window.setup.model_spec() == spec
    assert window.setup.model.currentText() == "mnist_arrays.py --samples 512 (script)"
    assert window.setup.model_description.text() == (
        f"training script, run as {SCRIPT} --samples 512 up to its model.fit"
    )
    # The engine checks it off the GUI thread, as it checks a model file: it reads as a script.
    qtbot.waitUntil(lambda: spec in window.setup._model_checks, timeout=10_000)
    assert window.setup._model_checks[spec] is None


def test_unreadable_arguments_are_said_and_nothing_changes(make_window, answers) -> None:
    window = make_window()
    before = window.setup.model_spec()
    answers["line"] = "--note 'unclosed"
    window.open_script()
    assert window.setup.model_spec() == before
    assert answers["warned"]
    assert "unclosed" in str(answers["warned"][0])
    answers["ok"] = False  # the arguments' box cancelled: nothing either
    answers["line"] = ""
    window.open_script()
    assert window.setup.model_spec() == before


def test_the_export_of_a_scripts_setup_shows_how_to_run_it() -> None:
    config = make_config(
        model=api.ScriptCommand(str(SCRIPT), ["--samples", "512"], fit_call=2).spec
    )
    line = run_command(config)
    command = line.split(": ", 1)[1]
    assert shlex.split(command) == [
        "mptune", "run", str(SCRIPT), "--config", "tuned.json", "--fit-call", "2",
        "--", "--samples", "512",
    ]  # fmt: skip
    assert run_command(make_config()) == ""
    with pytest.raises(api.MptuneError, match="mptune run"):
        api.render_config(config, "script")
