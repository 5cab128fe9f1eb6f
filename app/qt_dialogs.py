"""The main window's message boxes: tuning on the CPU while a GPU would go unused, and About."""

from __future__ import annotations

import html
import platform
from importlib import metadata

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from tuner import __version__, api


def ask_tune_on_cpu(parent: QWidget, unused: api.UnusedGpu) -> bool:
    """Ask whether to tune on the CPU although a GPU would go unused: True to go on."""
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("A GPU would go unused")
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setText(f"<b>{html.escape(unused.headline)}</b>")
    reason = f"{html.escape(unused.reason)}.<br><br>" if unused.reason else ""
    fix = (
        f"To tune on the GPU, close mptune, run<br><code>{html.escape(unused.fix)}</code>"
        "<br>and start it again.<br><br>"
        if unused.fix
        else ""
    )
    box.setInformativeText(
        f"{reason}{fix}Tuned on the CPU, the recommendation is the CPU's, not the GPU's."
    )
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    cpu = box.addButton("Tune on the CPU", QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return box.clickedButton() is cpu


def show_about(parent: QWidget) -> None:
    from PySide6 import __version__ as pyside_version

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    QMessageBox.about(
        parent,
        "About mptune",
        (
            f"<h3>mptune {__version__}</h3><p>Finds the fastest numerically safe "
            "mixed-precision setup for a Keras model on this machine.</p>"
            f"<p>Python {html.escape(platform.python_version())}<br>"
            f"TensorFlow {version('tensorflow')}, Keras {version('keras')}<br>"
            f"PySide6 {pyside_version}, pyqtgraph {version('pyqtgraph')}<br>"
            f"Optuna {version('optuna')}</p>"
        ),
    )
