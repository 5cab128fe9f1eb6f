"""The window driven as a user would: detection, inline model errors, a real search, export."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import QSettings, Qt

from app.qt_setup import QtSetupPanel

TINY = "builtin:mlp:features=16,width=32,depth=1"


def test_hardware_is_shown_without_a_gpu(make_window) -> None:
    window = make_window("no_driver")
    text = window.hardware.verdict.text()
    assert "no NVIDIA GPU found" in text and "no NVIDIA driver" in text
    assert window.start_button.isEnabled()  # no GPU: it still tunes, on the CPU


def test_gpu_cards_and_advice(make_window) -> None:
    window = make_window("ampere_8.0")
    cards = " ".join(label.text() for label in window.hardware.findChildren(type(window.status)))
    assert "NVIDIA A100-SXM4-40GB" in cards and "compute capability 8.0" in cards
    assert "float16 and bfloat16 Tensor Cores" in window.hardware.verdict.text()
    assert window.plots.budget_line.isVisible()
    assert window.plots.budget_line.value() == pytest.approx(40960 * 0.9)


def test_a_broken_model_file_is_reported_inline(make_window, tmp_path: Path) -> None:
    window = make_window()
    broken = tmp_path / "my_model.py"
    broken.write_text("import keras\n\ndef build_model(:\n    pass\n")
    window.setup.set_model(str(broken))
    assert f"{broken}:3: syntax error" in window.setup.model_problem.text()
    assert not window.start_button.isEnabled()
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    window.setup.set_model(str(empty))
    assert "defines no build_model()" in window.setup.model_problem.text()
    window.setup.set_model("builtin:cnn")
    assert window.setup.model_problem.text() == "" and window.start_button.isEnabled()


def test_settings_are_remembered(make_window, qtbot) -> None:
    first = make_window()
    first.setup.objective.setCurrentText("memory")
    first.setup.policy_boxes["mixed_float16"].setChecked(False)
    first.setup.batch_max.setValue(256)
    first.shutdown()  # saves the settings, as closing the window does
    panel = QtSetupPanel(QSettings(first.settings.fileName(), QSettings.Format.IniFormat))
    qtbot.addWidget(panel)
    assert panel.objective.currentText() == "memory"
    assert not panel.policy_boxes["mixed_float16"].isChecked()
    assert panel.batch_max.value() == 256


def configure_tiny_search(window, measure: float = 0.3) -> None:
    setup = window.setup
    setup.set_model(TINY)
    setup.policy_boxes["mixed_float16"].setChecked(False)
    setup.policy_boxes["mixed_bfloat16"].setChecked(False)
    setup.policy_boxes["float32"].setChecked(True)
    setup.batch_min.setValue(8)
    setup.batch_max.setValue(16)
    setup.measure_seconds.setValue(measure)


@pytest.mark.slow
def test_a_real_search_ends_with_a_recommendation_and_exports_a_script(
        make_window, qtbot, tmp_path: Path) -> None:
    window = make_window()
    configure_tiny_search(window)
    with qtbot.waitSignal(window.bridge.finished, timeout=300_000) as finished:
        qtbot.mouseClick(window.start_button, Qt.MouseButton.LeftButton)
    assert finished.args[0] == "done", finished.args
    rec = window.recommendation.recommendation
    assert rec is not None and rec["policy"] == "float32" and rec["batch_size"] in (8, 16)
    assert "float32 at batch size" in window.recommendation.summary.text()
    assert window.table.trials.rowCount() >= 2
    assert window.tabs.currentWidget() is window.recommendation
    assert len(window.plots.throughput_points["float32"].xData) >= 2

    dialog = window.open_export("script")
    assert dialog is not None and "def main(" in dialog.text()
    dialog.keras.setCurrentIndex(1)  # Keras 2: the script is Keras 3 only, said inline
    assert "Keras 3 only" in dialog.problem.text() and not dialog.save_button.isEnabled()
    dialog.keras.setCurrentIndex(0)
    script = dialog.save_to(tmp_path / "train tuned.py")
    dialog.close()
    proc = subprocess.run([sys.executable, str(script), "--max-steps", "2"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "final loss" in proc.stdout


@pytest.mark.slow
def test_stop_ends_the_running_trial_within_two_seconds(make_window, qtbot) -> None:
    window = make_window()
    configure_tiny_search(window, measure=30.0)
    measuring = []
    window.bridge.eventsReady.connect(lambda events: measuring.extend(
        e for e in events if e["type"] == "worker" and e["event"]["type"] == "step"))
    window.start_search()
    qtbot.waitUntil(lambda: bool(measuring), timeout=120_000)
    workers = psutil.Process().children(recursive=True)
    assert workers, "a trial worker should be running"
    t0 = time.monotonic()
    with qtbot.waitSignal(window.bridge.finished, timeout=10_000) as finished:
        window.stop_button.click()
    assert time.monotonic() - t0 < 2.0
    assert finished.args[0] == "stopped"
    gone, alive = psutil.wait_procs(workers, timeout=2)
    assert not alive
    assert window.start_button.isEnabled() and not window.stop_button.isEnabled()


def test_a_stopped_search_resumes_its_session(make_window, qtbot) -> None:
    calls: list[dict] = []

    def fake_tune(on_event, cancel, **kwargs):
        """Stands in for tune(): opens a session, runs until stopped."""
        calls.append(kwargs)
        on_event({"type": "session", "name": kwargs.get("study") or "first-session",
                  "model": kwargs["model"]})
        cancel.wait(30)
        raise KeyboardInterrupt

    window = make_window(tune_function=fake_tune)
    window.setup.set_model("builtin:mlp")
    window.start_search()
    qtbot.waitUntil(lambda: window.session_name == "first-session", timeout=5_000)
    with qtbot.waitSignal(window.bridge.finished, timeout=5_000) as finished:
        window.stop_button.click()
    assert finished.args[0] == "stopped"
    assert window.start_button.text() == "Resume"
    with qtbot.waitSignal(window.bridge.eventsReady, timeout=5_000):
        window.start_button.click()
    assert calls[1]["study"] == "first-session" and calls[1]["resume"] is True
    with qtbot.waitSignal(window.bridge.finished, timeout=5_000):
        window.stop_search()
