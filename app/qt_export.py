"""The export dialog: JSON, snippet or script, for Keras 3 or 2, previewed, copied or saved."""

from __future__ import annotations

import os
import shlex

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.controller import Controller
from app.highlighter import PythonHighlighter
from app.words import window_words
from tuner import api

FORMATS = {
    "JSON config": "json",
    "Snippet (paste into your script)": "snippet",
    "Training script": "script",
}
SUFFIX = {"json": ".json", "snippet": ".py", "script": ".py"}


class QtExportDialog(QDialog):
    """Preview and save one tuned config in any format; rendering and writing run off the GUI
    thread through the window's controller.

    Signals:
        rendered(str): the preview shows a new text (empty when the choice is not offered).
        saved(object): the file (a ``Path``) was written.
    """

    rendered = Signal(str)
    saved = Signal(object)

    def __init__(
        self,
        config: api.TunedConfig,
        controller: Controller,
        parent: QWidget | None = None,
        fmt: str = "json",
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export the tuned setup")
        self.config = config
        self.controller = controller
        self.resize(820, 620)
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        self.format = QComboBox()
        self.format.addItems(list(FORMATS))
        self.format.setCurrentIndex(list(FORMATS.values()).index(fmt))
        self.keras = QComboBox()
        self.keras.addItem("Keras 3", "3")
        self.keras.addItem("Keras 2 (tf_keras)", "2")
        row.addWidget(QLabel("Format"))
        row.addWidget(self.format, 1)
        row.addWidget(QLabel("For"))
        row.addWidget(self.keras)
        layout.addLayout(row)
        # The setup in words, knobs included, whatever the chosen format spells out.
        self.setup_line = QLabel(f"Setup: {config.setup.describe()}")
        self.setup_line.setTextFormat(Qt.TextFormat.PlainText)
        self.setup_line.setWordWrap(True)
        self.setup_line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.setup_line)
        # A training script's own setup: run it with the tuned setup applied, unedited.
        self.run_line = QLabel(run_command(config))
        self.run_line.setTextFormat(Qt.TextFormat.PlainText)
        self.run_line.setWordWrap(True)
        self.run_line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.run_line.setVisible(bool(self.run_line.text()))
        layout.addWidget(self.run_line)
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.preview.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.highlighter = PythonHighlighter(self.preview.document())
        layout.addWidget(self.preview, 1)
        self.problem = QLabel()
        self.problem.setObjectName("problem")
        layout.addWidget(self.problem)
        # What was done (copied, saved), in a colour of its own: not a problem.
        self.confirmation = QLabel()
        self.confirmation.setObjectName("confirmation")
        layout.addWidget(self.confirmation)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy")
        self.save_button = QPushButton("Save...")
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.save_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.copy_button.clicked.connect(self._on_copy)
        self.save_button.clicked.connect(self._on_save)
        self.format.currentIndexChanged.connect(self._on_changed)
        self.keras.currentIndexChanged.connect(self._on_changed)
        #: why Keras 2 is not offered for each format (None: it is), once the engine said
        self.keras2_problems: dict[str, str | None] = {}
        self._on_changed()
        self._ask_keras2()

    @property
    def fmt(self) -> str:
        return FORMATS[self.format.currentText()]

    def text(self) -> str:
        return self.preview.toPlainText()

    def _ask_keras2(self) -> None:
        """Ask the engine, off the GUI thread, which formats it can write for Keras 2 (the
        script is Keras 3 only; a setup tuned on JAX or with gradient accumulation has no
        tf_keras form): the choice is greyed out where it is not offered, its tooltip says why."""
        engine, config = self.controller.engine, self.config

        def problems() -> dict[str, str | None]:
            found: dict[str, str | None] = {}
            for fmt in FORMATS.values():
                try:
                    engine.render_config(config, fmt, "2")
                    found[fmt] = None
                except api.ConfigError as exc:
                    found[fmt] = str(exc)
            return found

        self.controller.call(problems, self._set_keras2_problems, name="keras2")

    def _set_keras2_problems(self, problems: dict[str, str | None]) -> None:
        self.keras2_problems = problems
        self._grey_keras2()

    def _grey_keras2(self) -> None:
        problem = self.keras2_problems.get(self.fmt)
        item = self.keras.model().item(1)  # type: ignore[attr-defined]  # a QStandardItemModel
        item.setEnabled(problem is None)
        item.setToolTip(window_words(problem) if problem else "")
        if problem is not None and self.keras.currentData() == "2":
            self.keras.setCurrentIndex(0)  # Keras 3, which every format offers

    def _on_changed(self) -> None:
        if self.keras2_problems:
            self._grey_keras2()
        fmt, keras = self.fmt, self.keras.currentData()
        self.copy_button.setEnabled(False)
        self.save_button.setEnabled(False)
        # A "Saved to" or "Copied" was of the choice before; the render on its way is not news
        # of it (cleared as it arrived, a render that ended after a save hid the save's line).
        self.confirmation.setText("")
        engine = self.controller.engine
        self.controller.call(
            lambda: engine.render_config(self.config, fmt, keras),
            lambda text: self._show(fmt, keras, text, None),
            lambda exc: self._show(fmt, keras, "", str(exc)),
            name="render",
        )

    def _show(self, fmt: str, keras: str, text: str, problem: str | None) -> None:
        if (fmt, keras) != (self.fmt, self.keras.currentData()):
            return  # the user chose again meanwhile; that render is on its way
        self.problem.setText(window_words(problem or ""))
        self.preview.setPlainText(text)
        self.copy_button.setEnabled(problem is None)
        self.save_button.setEnabled(problem is None)
        self.rendered.emit(text)

    def _on_copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text())
        self.confirmation.setText("Copied to the clipboard")

    def _on_saved(self, path: object) -> None:
        self.confirmation.setText(f"Saved to {path}")  # the user sees it was written, and where
        self.saved.emit(path)

    def _on_save(self) -> None:
        default = {"json": "tuned.json", "snippet": "tuned_snippet.py", "script": "train_tuned.py"}[
            self.fmt
        ]
        path, _ = QFileDialog.getSaveFileName(self, "Save", default)
        if path:
            self.save_to(path)

    def save_to(self, path: str | os.PathLike[str]) -> None:
        """Write the chosen format to ``path`` off the GUI thread (a script is made
        executable); ``saved`` says when it is written."""
        fmt, keras, engine = self.fmt, self.keras.currentData(), self.controller.engine
        self.controller.call(
            lambda: engine.save_export(self.config, path, fmt, keras),
            self._on_saved,
            lambda exc: QMessageBox.warning(self, "Not saved", f"Could not write {path}: {exc}"),
            name="save-export",
        )


def run_command(config: api.TunedConfig) -> str:
    """For a setup tuned on a training script: the command that runs the script with it
    applied, unedited (the JSON saved as tuned.json); "" for any other model."""
    try:
        command = api.ScriptCommand.parse(config.model)
    except api.MptuneError:
        return ""
    if command is None:
        return ""
    words = ["mptune", "run", command.path, "--config", "tuned.json"]
    if command.fit_call != 1:
        words += ["--fit-call", str(command.fit_call)]
    if command.args:
        words += ["--", *command.args]
    return (
        f"Or run your script with it, unedited (save the JSON as tuned.json): {shlex.join(words)}"
    )
