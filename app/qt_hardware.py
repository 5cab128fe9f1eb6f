"""The hardware panel: GPU cards, the CPU, versions, and the verdict in one sentence."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from app.tooltips import TOOLTIPS
from tuner import api


def _na(value: Any, fmt: str = "{}") -> str:
    return "n/a" if value is None else fmt.format(value)


def unused_gpu_text(unused: api.UnusedGpu) -> str:
    """One backend's unused GPU, in rich text: what, why, and the fix as code."""
    reason = f" ({html.escape(unused.reason)})" if unused.reason else ""
    fix = f"<br>Fix: <code>{html.escape(unused.fix)}</code>" if unused.fix else ""
    return (
        f"<span style='color:#be123c'>\u26a0 <b>{html.escape(unused.headline)}</b>{reason}: "
        f"its trials would run on the CPU.</span>{fix}"
    )


class QtHardwarePanel(QWidget):
    """Shows a hardware profile (:class:`tuner.api.HardwareProfile`, as detection found it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self.verdict = QLabel("Reading the hardware...")
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self._layout.addWidget(self.verdict)
        # A GPU that a backend installed here cannot use: right under the verdict, in red, with
        # the command that fixes it (selectable, to be copied).
        self.unused_gpu = QLabel()
        self.unused_gpu.setObjectName("unusedGpu")
        self.unused_gpu.setWordWrap(True)
        self.unused_gpu.setTextFormat(Qt.TextFormat.RichText)
        self.unused_gpu.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.unused_gpu.hide()
        self._layout.addWidget(self.unused_gpu)
        self._cards: list[QWidget] = []
        self.profile: api.HardwareProfile | None = None

    def set_profile(self, profile: api.HardwareProfile) -> None:
        self.profile = profile
        for card in self._cards:
            card.deleteLater()
        self._cards = []
        # The hardware's verdict; each backend's unused GPU on a line of its own below it.
        self.verdict.setText(f"<b>{html.escape(profile.verdict_for(None))}</b>")
        unused = profile.unused_gpus
        self.unused_gpu.setText("<br><br>".join(unused_gpu_text(u) for u in unused))
        self.unused_gpu.setVisible(bool(unused))
        for gpu in profile.gpus:
            self._add_card(self._gpu_text(gpu, profile), TOOLTIPS["compute_capability"])
        # No GPU: the verdict says so, and why, once; no card says it again.
        self.verdict.setToolTip("" if profile.gpus else TOOLTIPS["no_gpu"])
        cpu = profile.cpu
        flags = ", ".join(cpu.flags) or "none of the relevant ones"
        self._add_card(
            f"<b>CPU</b> {html.escape(_na(cpu.model))} ({cpu.arch})<br>"
            f"{_na(cpu.physical_cores)} cores / {_na(cpu.logical_cores)} threads, "
            f"{_na(cpu.ram_total_mb, '{:,.0f}')} MB RAM<br>instruction sets: {flags}",
            TOOLTIPS["cpu_flags"],
        )
        sw = profile.software
        build = (
            f", built with CUDA {_na(sw.tf_cuda_version)} / cuDNN {_na(sw.tf_cudnn_version)}"
            if sw.tf_is_cuda_build
            else ""
        )
        self._add_card(
            f"<b>Software</b> Python {sw.python}, TensorFlow "
            f"{_na(sw.tensorflow)}{build}, Keras {_na(sw.keras)}" + self._backends_text(sw),
            None,
        )

    @staticmethod
    def _backends_text(sw: api.SoftwareInfo) -> str:
        """The Keras backends installed, and how to install the others."""
        installed = [
            f"{html.escape(api.BACKEND_NAMES.get(name, name))} {html.escape(str(version))}"
            for name, version in sw.backends.items()
            if version
        ]
        text = f"<br>Keras backends: {', '.join(installed) or 'none'}"
        missing = sw.missing_backends
        if missing:
            text += "<br>not installed: " + ", ".join(
                f"{html.escape(api.BACKEND_NAMES.get(name, name))} "
                f"(<code>{html.escape(str(hint))}</code>)"
                for name, hint in missing.items()
            )
        return text

    @staticmethod
    def _gpu_text(gpu: api.GpuInfo, profile: api.HardwareProfile) -> str:
        units = gpu.units
        return (
            f"<b>GPU {gpu.index}: {html.escape(_na(gpu.name))}</b><br>"
            f"compute capability {_na(gpu.capability_text)} "
            f"({units.architecture if units else 'unknown'}): "
            f"{units.summary if units else 'n/a'}<br>"
            f"memory {_na(gpu.memory_used_mb, '{:,.0f}')} / "
            f"{_na(gpu.memory_total_mb, '{:,.0f}')} MB used<br>"
            f"driver {_na(profile.driver_version)}, CUDA "
            f"{_na(profile.cuda_driver_version)}"
        )

    def _add_card(self, text: str, tooltip: str | None) -> None:
        card = QFrame()
        card.setObjectName("card")
        card.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(card)
        label = QLabel(text)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(label)
        if tooltip:
            card.setToolTip(tooltip)
        self._layout.addWidget(card)
        self._cards.append(card)
