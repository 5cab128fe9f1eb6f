"""The main window's message boxes: tuning on the CPU while a GPU would go unused, and About."""

from __future__ import annotations

import html
import platform
import shlex
from importlib import metadata
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox, QWidget

from tuner import __version__, api


def ask_model_file(parent: QWidget) -> str | None:
    """A model file the user picks (``.py`` with build_model(), or ``.keras``); None: none."""
    path, _ = QFileDialog.getOpenFileName(parent, "Open a model", "", "Keras models (*.py *.keras)")
    return path or None


def ask_script(parent: QWidget) -> str | None:
    """A training script and its own arguments, on one line as a shell writes them, as a model
    spec (issue 37); None when the user cancels or the arguments cannot be read (said)."""
    path, _ = QFileDialog.getOpenFileName(
        parent, "Open a training script", "", "Python scripts (*.py)"
    )
    if not path:
        return None
    line, given = QInputDialog.getText(
        parent,
        "The script's arguments",
        f"Run {Path(path).name} with these arguments (as on its command line; empty: none):",
    )
    if not given:
        return None
    try:
        args = shlex.split(line)
    except ValueError as exc:
        QMessageBox.warning(parent, "Cannot read the arguments", f"{line!r}: {exc}")
        return None
    return api.ScriptCommand(path, tuple(args)).spec


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
