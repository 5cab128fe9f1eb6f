"""The setup panel: which model, what to search, how long; remembered between runs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.qt_loss_scales import LossScalesEditor
from app.qt_wheel import guard_wheels
from app.tooltips import TOOLTIPS
from app.words import window_words
from tuner import api

_OPEN_FILE = "Open a model file..."
#: The model selected at first start (the README says so too).
DEFAULT_MODEL = "builtin:cnn"
#: The global batch offered when "keep" is first ticked, and the largest the panel takes: the
#: same bound as the batch-size range (the search tries the per-step sizes that divide it).
DEFAULT_GLOBAL_BATCH = 256
#: --parallel's choices in the window
PARALLEL_CHOICES = ("1", "auto", "2", "4", "8")
MAX_GLOBAL_BATCH = 1 << 16


class QtSetupPanel(QWidget):
    """Model choice (checked at once), search space, objective, trial length, budget, storage.

    The panel reads no file and runs nothing slow: when the model changes it emits
    ``modelChanged`` and the window has the model checked off the GUI thread, then hands the
    verdict back through :meth:`set_model_check`. What it asks the engine (the batch-size
    ladder, the loss scales read, the backend ``KERAS_BACKEND`` names) goes through ``engine``.

    Args:
        settings: where the panel's choices are remembered.
        parent: the owning widget.
        engine: the engine's face (:mod:`tuner.api`, or a test's fake with its functions).

    Signals:
        validityChanged(bool): whether the setup can start a search.
        modelChanged(str): the chosen model spec changed and needs checking.
    """

    validityChanged = Signal(bool)
    modelChanged = Signal(str)

    def __init__(
        self, settings: QSettings, parent: QWidget | None = None, engine: Any = api
    ) -> None:
        super().__init__(parent)
        self.settings = settings
        self.engine = engine
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)

        self.model = QComboBox()
        self.model.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.model.setMinimumContentsLength(16)
        for name, workload in api.BUILTINS.items():
            self.model.addItem(f"builtin:{name}", f"builtin:{name}")
            self.model.setItemData(
                self.model.count() - 1, workload.description, role=3
            )  # Qt.ToolTipRole
        self.model.addItem(_OPEN_FILE, None)
        self.model.activated.connect(self._on_model_activated)
        self.model_problem = QLabel()
        self.model_problem.setObjectName("problem")
        self.model_problem.setWordWrap(True)
        self.model_description = QLabel()
        self.model_description.setWordWrap(True)
        form.addRow("Model", self.model)
        form.addRow("", self.model_description)
        form.addRow("", self.model_problem)

        # The Keras backend: every backend listed; one that is not installed is greyed out,
        # its tooltip saying how to install it (set_installed_backends, from the detection).
        self.backend = QComboBox()
        for name in api.BACKENDS:
            self.backend.addItem(api.BACKEND_NAMES[name], name)
            self.backend.setItemData(
                self.backend.count() - 1, TOOLTIPS[f"backend_{name}"], Qt.ItemDataRole.ToolTipRole
            )
        self.backend.setToolTip(TOOLTIPS["backend"])
        self.backend.currentIndexChanged.connect(self._revalidate)
        # None until the detection says which backends are installed.
        self._installed_backends: dict[str, str | None] | None = None
        form.addRow("Backend", self.backend)

        policies = QWidget()
        row = QVBoxLayout(policies)  # one per line: the panel stays narrow
        row.setContentsMargins(0, 0, 0, 0)
        self.policy_boxes: dict[str, QCheckBox] = {}
        for policy in api.POLICIES:
            box = QCheckBox(policy)
            box.setChecked(True)
            box.setToolTip(TOOLTIPS["policy"])
            box.toggled.connect(self._revalidate)
            self.policy_boxes[policy] = box
            row.addWidget(box)
        form.addRow("Policies", policies)

        batches = QWidget()
        batch_row = QHBoxLayout(batches)
        batch_row.setContentsMargins(0, 0, 0, 0)
        self.batch_min = QSpinBox()
        self.batch_max = QSpinBox()
        for spin, value in ((self.batch_min, 8), (self.batch_max, 1024)):
            spin.setRange(1, 1 << 16)
            spin.setValue(value)
            spin.setToolTip(TOOLTIPS["batch_size"])
            spin.valueChanged.connect(self._revalidate)
        batch_row.addWidget(self.batch_min)
        batch_row.addWidget(QLabel("to"))
        batch_row.addWidget(self.batch_max)
        form.addRow("Batch sizes", batches)

        # float16's loss-scale candidates: ticked in a list, added from a row (issue 36).
        self.loss_scales = LossScalesEditor()
        self.loss_scales.changed.connect(self._revalidate)
        form.addRow("Loss scales", self.loss_scales)

        # A choice for each knob whose search the user switches (XLA, float8): auto, on, off.
        self.switches: dict[str, QComboBox] = {}
        for knob in api.SWITCHED:
            switch = QComboBox()
            for mode in api.SWITCH_MODES:
                switch.addItem(mode)
                switch.setItemData(
                    switch.count() - 1,
                    TOOLTIPS[f"{knob.name}_{mode}"],
                    Qt.ItemDataRole.ToolTipRole,
                )
            switch.setToolTip(TOOLTIPS[knob.name])
            form.addRow(knob.label, switch)
            self.switches[knob.name] = switch

        # "Keep global batch": a tick and B beside it, on one short line.
        global_batch = QWidget()
        global_row = QHBoxLayout(global_batch)
        global_row.setContentsMargins(0, 0, 0, 0)
        self.keep_global_batch = QCheckBox("keep")
        self.global_batch = QSpinBox()
        self.global_batch.setRange(0, MAX_GLOBAL_BATCH)
        self.global_batch.setValue(DEFAULT_GLOBAL_BATCH)
        self.global_batch.setEnabled(False)
        for widget in (self.keep_global_batch, self.global_batch):
            widget.setToolTip(TOOLTIPS["global_batch"])
        self.keep_global_batch.toggled.connect(self.global_batch.setEnabled)
        self.keep_global_batch.toggled.connect(self._revalidate)
        self.global_batch.valueChanged.connect(self._revalidate)
        global_row.addWidget(self.keep_global_batch)
        global_row.addWidget(self.global_batch, 1)
        form.addRow("Global batch", global_batch)

        self.objective = QComboBox()
        self.objective.addItems(api.OBJECTIVES)
        self.objective.setToolTip(TOOLTIPS["objective"])
        form.addRow("Objective", self.objective)

        self.measure_seconds = QDoubleSpinBox()
        self.measure_seconds.setRange(0.2, 60.0)
        self.measure_seconds.setValue(2.0)
        self.measure_seconds.setSuffix(" s")
        self.measure_seconds.setToolTip(TOOLTIPS["measure_seconds"])
        form.addRow("Trial length", self.measure_seconds)

        self.budget_minutes = QSpinBox()
        self.budget_minutes.setRange(0, 24 * 60)
        self.budget_minutes.setSpecialValueText("no limit")
        self.budget_minutes.setSuffix(" min")
        self.max_trials = QSpinBox()
        self.max_trials.setRange(0, 10000)
        self.max_trials.setSpecialValueText("no limit")
        form.addRow("Time budget", self.budget_minutes)
        form.addRow("Max trials", self.max_trials)

        self.parallel = QComboBox()
        self.parallel.addItems(PARALLEL_CHOICES)
        self.parallel.setToolTip(TOOLTIPS["parallel"])
        form.addRow("Trials at once", self.parallel)

        self.storage = QLineEdit()
        self.storage.setPlaceholderText("default: SQLite in the user data directory")
        form.addRow("Storage", self.storage)

        self._valid = False
        # The model checks that came back, by spec: None when fine, else the problem.
        self._model_checks: dict[str, str | None] = {}
        self.model.setCurrentIndex(max(0, self.model.findData(DEFAULT_MODEL)))
        self._load()
        self._on_model_changed()
        # Last, so that it finds every control above: the panel sits in a scroll area, and a
        # wheel over it must scroll, never change a setting the user did not choose.
        guard_wheels(self)

    # -- the model ---------------------------------------------------------------------------
    def model_spec(self) -> str | None:
        spec = self.model.currentData()
        return str(spec) if spec else None

    def set_model(self, spec: str) -> None:
        """Select ``spec`` (adding a file to the list) and check it."""
        index = self.model.findData(spec)
        if index < 0:
            try:
                command = api.ScriptCommand.parse(spec)
            except api.MptuneError:
                command = None
            label = (
                f"{shlex.join([Path(command.path).name, *command.args])} (script)"
                if command is not None
                else Path(spec).name
            )
            self.model.insertItem(self.model.count() - 1, label, spec)
            index = self.model.count() - 2
            self.model.setItemData(index, spec, role=3)
        self.model.setCurrentIndex(index)
        self._on_model_changed()

    def _on_model_activated(self, index: int) -> None:
        if self.model.itemData(index) is None:  # "Open a model file..."
            path, _ = QFileDialog.getOpenFileName(
                self, "Open a model", "", "Keras models (*.py *.keras)"
            )
            if path:
                self.set_model(path)
            else:
                self.model.setCurrentIndex(0)
                self._on_model_changed()
            return
        self._on_model_changed()

    def _on_model_changed(self) -> None:
        spec = self.model_spec()
        if spec and spec.startswith("builtin:"):
            self.model_description.setText(api.BUILTINS[spec.split(":")[1]].description)
        else:
            self.model_description.setText(_described(spec or ""))
        # A file is checked again each time it is chosen: it may have been edited meanwhile.
        if spec and not spec.startswith("builtin:"):
            self._model_checks.pop(spec, None)
        self._revalidate()
        if spec and spec not in self._model_checks:
            self.modelChanged.emit(spec)

    def set_model_check(self, spec: str, problem: str | None) -> None:
        """The verdict on ``spec`` from a check run off the GUI thread (None: it is fine)."""
        self._model_checks[spec] = problem
        self._revalidate()

    # -- validation --------------------------------------------------------------------------
    def problem(self) -> str | None:
        """What stops a search from starting, in one line; None when it can start."""
        spec = self.model_spec()
        if not spec:
            return "choose a model"
        if spec not in self._model_checks:
            return "checking the model..."
        if self._model_checks[spec] is not None:
            return self._model_checks[spec]
        backend = self.backend_choice()
        if self._installed_backends is not None and not self._installed_backends.get(backend):
            return (
                f"{api.BACKEND_NAMES[backend]} is not installed: "
                f"{api.BACKEND_INSTALL_HINTS[backend]}, or choose another backend"
            )
        if not any(box.isChecked() for box in self.policy_boxes.values()):
            return "choose at least one policy"
        if self.batch_min.value() > self.batch_max.value():
            return "the smallest batch size is above the largest"
        if self.keep_global_batch.isChecked() and self.global_batch.value() < 1:
            return "the global batch must be at least 1"
        try:
            self.search_space(list(api.POLICIES))
        except ValueError as exc:  # the loss scales, or whatever else the engine rejects
            return str(exc)
        return None

    def _revalidate(self) -> None:
        problem = self.problem()
        self.model_problem.setText(window_words(problem or ""))
        self.model_problem.setVisible(bool(problem))
        valid = problem is None
        if valid != self._valid:
            self._valid = valid
            self.validityChanged.emit(valid)

    @property
    def valid(self) -> bool:
        return self._valid

    def set_installed_backends(self, installed: dict[str, str | None]) -> None:
        """Which backends can run here (the hardware profile's ``software.backends``: each
        backend's version, None when it is not installed): the others are greyed out, with the
        command that installs them in their tooltip. A stored choice that is not installed
        stays chosen, and the panel says how to install it."""
        self._installed_backends = dict(installed)
        model = self.backend.model()
        for index in range(self.backend.count()):
            name = str(self.backend.itemData(index))
            version = installed.get(name)
            item = model.item(index)  # type: ignore[attr-defined]  # a QStandardItemModel
            item.setEnabled(bool(version))
            label = api.BACKEND_NAMES[name]
            if version:
                item.setText(f"{label} {version}")
                tooltip = TOOLTIPS[f"backend_{name}"]
            else:
                item.setText(f"{label} (not installed)")
                tooltip = f"Not installed here: {api.BACKEND_INSTALL_HINTS[name]}"
            self.backend.setItemData(index, tooltip, Qt.ItemDataRole.ToolTipRole)
        self._revalidate()

    def backend_choice(self) -> str:
        """The chosen Keras backend (``tensorflow``, ``jax`` or ``torch``)."""
        return str(self.backend.currentData())

    def apply_advice(self, advised_policies: list[str]) -> None:
        """Order nothing, but keep the policies the hardware advice lists checked."""
        advised = set(advised_policies)
        for policy, box in self.policy_boxes.items():
            if not self.settings.contains("policies"):
                box.setChecked(policy in advised)

    # -- what the engine gets ----------------------------------------------------------------
    def search_space(self, advice_order: list[str]) -> api.SearchSpace:
        """The search space the panel describes, its checked policies in ``advice_order``.

        Raises:
            ValueError: naming what is wrong (see :meth:`problem`).
        """
        checked = [p for p in advice_order if p in self.policy_boxes]
        checked = [p for p in checked if self.policy_boxes[p].isChecked()]
        checked += [
            p for p in api.POLICIES if self.policy_boxes[p].isChecked() and p not in checked
        ]
        scales = self.loss_scales.candidates()
        if api.MIXED_FLOAT16 in checked and not scales:
            raise ValueError("tick at least one loss scale for mixed_float16")
        return api.SearchSpace(
            policies=tuple(checked),
            batch_sizes=self.engine.ladder_range(self.batch_min.value(), self.batch_max.value()),
            loss_scales=scales or api.SearchSpace().loss_scales,  # unused without float16
            switches={name: box.currentText() for name, box in self.switches.items()},
            global_batch=self.global_batch.value() if self.keep_global_batch.isChecked() else None,
        )

    def tune_request(
        self, advice_order: list[str], profile: api.HardwareProfile | None = None
    ) -> api.TuneRequest:
        """The search the panel describes, for ``profile`` (None: the engine detects it).

        Raises:
            ValueError: naming what is wrong (see :meth:`problem`).
        """
        settings = api.SearchSettings(
            backend=self.backend_choice(),
            objective=self.objective.currentText(),
            measure_seconds=self.measure_seconds.value(),
            budget_minutes=self.budget_minutes.value() or None,
            max_trials=self.max_trials.value() or None,
        )
        return api.TuneRequest(
            model=self.model_spec(),
            space=self.search_space(advice_order),
            settings=settings,
            storage=self.storage.text().strip() or None,
            profile=profile,
            parallel=self.parallel_choice(),
        )

    def parallel_choice(self) -> int | str:
        """``auto`` or a whole number, as ``--parallel`` takes it."""
        text = self.parallel.currentText()
        return text if text == "auto" else int(text)

    # -- QSettings ---------------------------------------------------------------------------
    def save(self) -> None:
        s = self.settings
        s.setValue("model", self.model_spec() or "")
        s.setValue("backend", self.backend_choice())
        s.setValue("policies", ",".join(p for p, b in self.policy_boxes.items() if b.isChecked()))
        s.setValue("batch_min", self.batch_min.value())
        s.setValue("batch_max", self.batch_max.value())
        s.setValue("loss_scales", ",".join(str(c) for c in self.loss_scales.candidates()))
        s.setValue("loss_scale_candidates", ",".join(self.loss_scales.written()))
        for name, box in self.switches.items():
            s.setValue(name, box.currentText())
        s.setValue("keep_global_batch", self.keep_global_batch.isChecked())
        s.setValue("global_batch", self.global_batch.value())
        s.setValue("objective", self.objective.currentText())
        s.setValue("measure_seconds", self.measure_seconds.value())
        s.setValue("budget_minutes", self.budget_minutes.value())
        s.setValue("max_trials", self.max_trials.value())
        s.setValue("storage", self.storage.text())
        s.setValue("parallel", self.parallel.currentText())

    def _load_loss_scales(self) -> None:
        """The candidates listed and ticked when the window was last closed (a version that
        kept only the ticked ones as text: those, with the defaults listed beside them)."""
        s, default = self.settings, ",".join(api.DEFAULT_LOSS_SCALES)
        defaults = _stored_scales(self.engine, default)
        stored = str(s.value("loss_scales", default) or "")
        ticked = _stored_scales(self.engine, stored)
        if stored.strip() and not ticked:  # not as the engine writes them: the defaults
            ticked = defaults
        listed = _stored_scales(self.engine, str(s.value("loss_scale_candidates", "") or ""))
        self.loss_scales.set_candidates((listed or defaults) + ticked, ticked)

    def _load(self) -> None:
        s = self.settings
        model = str(s.value("model", "") or "")
        if model and (model.startswith("builtin:") or Path(model).exists()):
            self.set_model(model)
        # The stored backend; at first start KERAS_BACKEND's, as the command line's default.
        try:
            default_backend = self.engine.backend_from_env()
        except api.MptuneError:  # a value mptune does not tune: Keras' own default
            default_backend = api.BACKENDS[0]
        backend = str(s.value("backend", default_backend))
        self.backend.setCurrentIndex(
            max(0, self.backend.findData(backend if backend in api.BACKENDS else default_backend))
        )
        if s.contains("policies"):
            chosen = set(str(s.value("policies")).split(","))
            for policy, box in self.policy_boxes.items():
                box.setChecked(policy in chosen)
        self.batch_min.setValue(int(str(s.value("batch_min", 8))))
        self.batch_max.setValue(int(str(s.value("batch_max", 1024))))
        self._load_loss_scales()
        for name, switch in self.switches.items():
            choice = str(s.value(name, "auto"))
            switch.setCurrentText(choice if choice in api.SWITCH_MODES else "auto")
        # A stored global batch that is not a whole number reads as 0: kept, it is reported.
        self.global_batch.setValue(_whole(s.value("global_batch", DEFAULT_GLOBAL_BATCH)))
        keep = str(s.value("keep_global_batch", "false")).strip().lower()
        self.keep_global_batch.setChecked(keep in ("true", "1"))
        self.objective.setCurrentText(str(s.value("objective", "speed")))
        self.measure_seconds.setValue(float(str(s.value("measure_seconds", 2.0))))
        self.budget_minutes.setValue(int(str(s.value("budget_minutes", 0))))
        self.max_trials.setValue(int(str(s.value("max_trials", 0))))
        self.storage.setText(str(s.value("storage", "") or ""))
        parallel = str(s.value("parallel", "1"))
        self.parallel.setCurrentText(parallel if parallel in PARALLEL_CHOICES else "1")


def _stored_scales(engine: Any, text: str) -> tuple[api.LossScale, ...]:
    """Loss scales kept as the engine writes them; none where the text is not (a setting
    written by hand), so that the defaults stand in."""
    try:
        return tuple(engine.parse_loss_scales(text)) if text.strip() else ()
    except ValueError:
        return ()


def _whole(value: object) -> int:
    """A stored whole number, or 0 when it is not one."""
    try:
        return int(str(value).strip())
    except ValueError:
        return 0


def _described(spec: str) -> str:
    """A model file's path, or a training script's command and what a trial does with it."""
    try:
        command = api.ScriptCommand.parse(spec)
    except api.MptuneError:
        return spec
    if command is None:
        return spec
    which = "model.fit" if command.fit_call == 1 else f"model.fit call #{command.fit_call}"
    line = shlex.join([command.path, *command.args])
    return f"training script, run as {line} up to its {which}"
