"""The hardware panel: the verdict in one sentence (for the backend chosen), each backend's
unused GPU, the advice (measured here where measured), GPU cards, the CPU, versions."""

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

    def __init__(self, parent: QWidget | None = None, engine: Any = api) -> None:
        super().__init__(parent)
        #: the engine's face (:mod:`tuner.api`, or a test's fake): the advice is its words
        self.engine = engine
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
        # The advice, as `mptune detect` lists it: each policy with its reason, and what was
        # measured of it on this kind of machine (measured ones first, fastest first).
        self.advice = QLabel()
        self.advice.setObjectName("advice")
        self.advice.setWordWrap(True)
        self.advice.setTextFormat(Qt.TextFormat.RichText)
        self.advice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._layout.addWidget(self.advice)
        self._cards: list[QWidget] = []
        self.profile: api.HardwareProfile | None = None
        self.backend = api.TENSORFLOW
        self.measured: dict[str, api.PolicyMeasured] | None = None

    def set_backend(self, backend: str) -> None:
        """The backend the trials would run on: the verdict is for it."""
        self.backend = backend
        self._show_verdict()

    def set_measured(self, measured: dict[str, api.PolicyMeasured] | None) -> None:
        """What searches on this kind of machine measured of each policy
        (:func:`tuner.api.measured_here`), said under its advice."""
        self.measured = measured or None
        self._show_advice()

    def _show_verdict(self) -> None:
        if self.profile is None:
            return
        # For the backend chosen: where it cannot use the GPU, the CPU's verdict first. Why
        # it cannot and the fix are each backend's red line below, said once.
        verdict = self.profile.verdict_for(self.backend, detail=False)
        self.verdict.setText(f"<b>{html.escape(verdict)}</b>")

    def _show_advice(self) -> None:
        if self.profile is None:
            return
        rows = self.engine.advice_rows(self.profile, self.measured)
        items = "".join(
            f"<li><b>{html.escape(row.policy)}</b>: {html.escape(row.reason)}"
            + (f"<br><i>{html.escape(row.measured)}</i>" if row.measured else "")
            + "</li>"
            for row in rows
        )
        heading = html.escape(self.engine.advice_heading(self.measured))
        self.advice.setText(f"{heading}:<ol style='margin-left: 0px'>{items}</ol>")
        self.advice.setVisible(bool(rows))

    def set_profile(self, profile: api.HardwareProfile) -> None:
        self.profile = profile
        for card in self._cards:
            card.deleteLater()
        self._cards = []
        self._show_verdict()
        self._show_advice()
        # Each backend's unused GPU on a line of its own below the verdict.
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
