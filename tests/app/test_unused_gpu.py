"""The window on a machine whose GPU the backend cannot use (issue 33, item 2): NVML sees an H100
(scripted) and TensorFlow is a plain ``pip install tensorflow`` without its CUDA libraries. The
hardware panel says so with the fix, selectable; Start asks once before tuning on the CPU; the
recommendation says it first. With no GPU at all nothing changes."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QMessageBox

import tuner.hardware as hardware
from app.qt_recommendation import QtRecommendation
from tuner import api

MISSING = ("libcudart.so.12", "libcublas.so.12", "libcudnn.so.9")
HEADLINE = "NVML sees 1 NVIDIA GPU (NVIDIA H100 80GB HBM3) but the TensorFlow backend can use none"
FIX = "pip install 'tensorflow[and-cuda]'"


def plain(rich: str) -> str:
    """Rich text as the user reads (and copies) it."""
    doc = QTextDocument()
    doc.setHtml(rich)
    return doc.toPlainText()


@pytest.fixture
def plain_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection reads TensorFlow as a CUDA 12 build whose CUDA libraries are missing."""
    real = hardware.read_software

    def plain_tf(*args: object) -> api.SoftwareInfo:
        found = real(*args)  # type: ignore[arg-type]
        plain = dict(
            tensorflow="2.21.0",
            tf_is_cuda_build=True,
            tf_cuda_version="12.5.1",
            tf_cudnn_version="9",
            tf_cuda_libraries_missing=MISSING,
        )
        known = {f.name for f in dataclasses.fields(found)}
        return dataclasses.replace(found, **{k: v for k, v in plain.items() if k in known})

    monkeypatch.setattr(hardware, "read_software", plain_tf)


class Answer:
    """QMessageBox.exec, answered by clicking the button named ``choice``; every box kept."""

    def __init__(self, choice: str) -> None:
        self.choice = choice
        self.asked: list[tuple[str, str]] = []

    def __call__(self, box: QMessageBox) -> int:
        self.asked.append((plain(box.text()), plain(box.informativeText())))
        (button,) = [b for b in box.buttons() if b.text().replace("&", "") == self.choice]
        button.click()
        return 0


def test_the_hardware_panel_warns_with_the_fix_to_copy(make_window, plain_tensorflow) -> None:
    window = make_window("hopper_9.0")
    label = window.hardware.unused_gpu
    assert not label.isHidden()
    text = plain(label.text())
    assert f"{HEADLINE} (TensorFlow 2.21.0 is a CUDA 12 build" in text
    assert "its trials would run on the CPU" in text
    assert f"Fix: {FIX}" in text.splitlines()
    assert label.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse
    # The verdict is for the backend chosen (issue 54: it read "mixed precision should pay
    # here" above the warning): the CPU's first, where the trials would run, then the GPU's
    # once TensorFlow can use it; why and the fix are the warning's, below it, said once.
    verdict = plain(window.hardware.verdict.text())
    assert window.setup.backend_choice() == "tensorflow"
    assert verdict.startswith("TensorFlow cannot use the GPU, so trials would run on the CPU: ")
    assert verdict.index("on the CPU") < verdict.index("mixed precision should pay here")
    assert verdict == window.profile.verdict_for("tensorflow", detail=False)
    assert FIX not in verdict
    # The verdict follows the backend chosen in the Search panel.
    window.setup.backend.setCurrentIndex(api.BACKENDS.index("jax"))
    assert plain(window.hardware.verdict.text()) == window.profile.verdict_for("jax", False)


def test_no_gpu_no_warning(make_window, plain_tensorflow) -> None:
    window = make_window("no_driver")
    assert window.hardware.unused_gpu.isHidden()
    assert "no NVIDIA GPU found" in window.hardware.verdict.text()


def test_start_asks_once_before_tuning_on_the_cpu(
    make_window, plain_tensorflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window("hopper_9.0")
    window.setup.backend.setCurrentIndex(api.BACKENDS.index("tensorflow"))
    started: list[api.TuneRequest] = []
    monkeypatch.setattr(window.bridge, "start", started.append)

    cancel = Answer("Cancel")
    monkeypatch.setattr(QMessageBox, "exec", lambda box: cancel(box))
    window.start_search()
    assert started == []
    assert len(cancel.asked) == 1
    text, informative = cancel.asked[0]
    assert text == HEADLINE
    assert FIX in informative
    assert "the recommendation is the CPU's" in informative
    assert window.status.text().startswith("Not started: NVML sees 1 NVIDIA GPU")

    on_cpu = Answer("Tune on the CPU")
    monkeypatch.setattr(QMessageBox, "exec", lambda box: on_cpu(box))
    window.start_search()
    (request,) = started
    assert request.settings is not None
    assert request.settings.device == "cpu"
    # The CPU's advice orders the policies, and the memory budget is the CPU's.
    cpu_order = api.hardware_prior(window.profile, "cpu")
    assert request.space is not None
    assert list(request.space.policies) == [p for p in cpu_order if p in request.space.policies]
    assert window._memory_budget == api.memory_budget_mb(window.profile, "cpu")

    # Chosen once: not asked again.
    window.start_search()
    assert len(on_cpu.asked) == 1
    assert len(started) == 2
    assert started[1].settings is not None
    assert started[1].settings.device == "cpu"


def test_with_no_gpu_start_asks_nothing(
    make_window, plain_tensorflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unchanged where there is no GPU at all: it tunes on the CPU without a question."""
    window = make_window("no_driver")
    started: list[api.TuneRequest] = []
    monkeypatch.setattr(window.bridge, "start", started.append)
    never = Answer("Cancel")
    monkeypatch.setattr(QMessageBox, "exec", lambda box: never(box))
    window.start_search()
    assert never.asked == []
    (request,) = started
    assert request.settings is not None
    assert request.settings.device == "auto"


def test_the_recommendation_says_it_first() -> None:
    unused = api.UnusedGpu(
        "tensorflow",
        1,
        "NVIDIA H100 80GB HBM3",
        "TensorFlow 2.21.0 is a CUDA 12 build, but its CUDA libraries are not installed",
        FIX,
    )
    rec = api.Recommendation(
        setup=api.Setup("float32", 64),
        samples_per_second=5000.0,
        samples_per_second_spread=(4900.0, 5100.0),
        baseline_samples_per_second=5000.0,
        float32_samples_per_second=5000.0,
        speedup_vs_float32=1.0,
        speedup_vs_baseline=1.0,
        memory_saving=None,
        peak_memory_mb=700.0,
        memory_kind="cpu_rss",
        loss_gap=0.0,
        skipped_steps=0,
        reason="float32 at batch size 64 is the best setup here",
        trials=(0,),
        objective="speed",
        device="cpu",
        unused_gpu=unused,
    )
    panel = QtRecommendation()
    panel.set_recommendation(rec)
    lines = [line for line in plain(panel.text()).splitlines() if line]
    assert lines[:2] == [
        "\u26a0 Unused GPU",
        f"This setup is for the CPU. {HEADLINE} ({unused.reason}).",
    ], lines[:4]
    assert lines[2] == f"Fix: {FIX}"
    setup = next(i for i, line in enumerate(lines) if line == "Setup")
    assert setup > lines.index(f"Fix: {FIX}")
    assert "<b>float32, batch size 64" in panel.text()  # the setup stays the bold answer
