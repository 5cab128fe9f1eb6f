"""The main window: hardware and setup on the left, live plots and results on the right."""

from __future__ import annotations

import html
import math
import platform
import statistics
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (QFileDialog, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QPushButton, QScrollArea, QSizePolicy, QSplitter, QTabWidget,
                               QToolBar, QVBoxLayout, QWidget)

from app.bridge import EngineBridge
from app.qt_export import QtExportDialog
from app.qt_hardware import QtHardwarePanel
from app.qt_history import QtHistoryDialog
from app.qt_plots import QtLivePlots
from app.qt_recommendation import QtRecommendation
from app.qt_setup import QtSetupPanel
from app.qt_trials import QtTrialsTable
from app.sampler import HardwareSampler
from tuner import __version__
from tuner.errors import MptuneError
from tuner.hardware.nvml import NvmlBackend

ASSETS = Path(__file__).resolve().parents[1] / "assets"
REDRAW_INTERVAL_MS = 50  # one plot per tick: each plot up to 5 times a second


class _Detector(QObject):
    """Runs hardware detection off the GUI thread (NVML can be slow to start)."""

    detected = Signal(dict)

    def __init__(self, backend: NvmlBackend | None) -> None:
        super().__init__()
        self.backend = backend
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="mptune-detect", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from tuner.hardware import detect

        self.detected.emit(detect(self.backend).to_dict())


class QtMainWindow(QMainWindow):
    """mptune's window. ``settings``, ``nvml_backend`` and ``tune_function`` exist for tests."""

    def __init__(self, settings: QSettings | None = None, nvml_backend: NvmlBackend | None = None,
                 tune_function: Any = None, sample_interval: float = 0.5) -> None:
        super().__init__()
        self.setWindowTitle("mptune")
        self.setWindowIcon(QIcon(str(ASSETS / "mptune.svg")))
        self.settings = settings or QSettings("mptune", "mptune")
        self.profile: dict[str, Any] | None = None
        self.session_name: str | None = None
        self.storage: str | None = None
        self.bridge = EngineBridge(self, tune_function)
        self.bridge.eventsReady.connect(self._on_events)
        self.bridge.finished.connect(self._on_search_finished)
        self._search_started = 0.0
        self._trial_started = 0.0
        self._trial_seconds: list[float] = []
        self._best_speed = 0.0
        self._memory_budget: float | None = None
        self._sample_index = 0
        self.finished_status: str | None = None
        # A stopped search can be resumed: Start then continues the same stored session.
        self._resumable: tuple[str, str] | None = None  # (session, model)

        self.hardware = QtHardwarePanel()
        self.setup = QtSetupPanel(self.settings)
        self.plots = QtLivePlots()
        self.table = QtTrialsTable()
        self.recommendation = QtRecommendation()
        self._build_layout()
        self._build_actions()
        self.setup.validityChanged.connect(self._update_buttons)
        self.table.trialSelected.connect(self._on_trial_selected)
        self.recommendation.exportRequested.connect(self.open_export)

        self.sampler = HardwareSampler(sample_interval, nvml_backend)
        self.sampler.start()
        self.redraw_timer = QTimer(self)
        self.redraw_timer.setInterval(REDRAW_INTERVAL_MS)
        self.redraw_timer.timeout.connect(self._on_redraw)
        self.redraw_timer.start()
        self.detector = _Detector(nvml_backend)
        self.detector.detected.connect(self._on_detected)
        self.detector.start()
        self._update_buttons()
        geometry = self.settings.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1280, 820)

    # -- layout ------------------------------------------------------------------------------
    def _build_layout(self) -> None:
        left = QWidget()
        column = QVBoxLayout(left)
        title = QLabel("<h3>This machine</h3>")
        column.addWidget(title)
        column.addWidget(self.hardware)
        column.addWidget(QLabel("<h3>Search</h3>"))
        column.addWidget(self.setup)
        column.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(left)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(300)

        self.tabs = QTabWidget()
        self.tabs.addTab(self.table, "Trials")
        self.tabs.addTab(self.recommendation, "Recommendation")
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.plots)
        right.addWidget(self.tabs)
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 2)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(scroll)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([400, 880])
        self.setCentralWidget(split)

        toolbar = QToolBar("Search")
        toolbar.setObjectName("search-toolbar")
        toolbar.setMovable(False)
        self.start_button = QPushButton("Start")
        self.stop_button = QPushButton("Stop")
        self.start_button.setToolTip("Start the search (F5)")
        self.stop_button.setToolTip("Stop the search; finished trials stay in the session (Esc)")
        self.start_button.clicked.connect(self.start_search)
        self.stop_button.clicked.connect(self.stop_search)
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m trials")
        self.progress.setMinimumWidth(160)
        self.progress.setMaximumWidth(320)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status = QLabel("Ready")
        self.status.setMinimumWidth(100)
        self.status.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        toolbar.addWidget(self.start_button)
        toolbar.addWidget(self.stop_button)
        toolbar.addWidget(self.progress)
        toolbar.addWidget(self.status)
        self.addToolBar(toolbar)

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.open_action = self._action(file_menu, "&Open model...", QKeySequence.StandardKey.Open,
                                        self.open_model)
        self.history_action = self._action(file_menu, "Open &past session...", "Ctrl+H",
                                           self.open_history)
        self.export_action = self._action(file_menu, "&Export...", "Ctrl+E",
                                          lambda: self.open_export("json"))
        self._action(file_menu, "Save &plots...", "Ctrl+Shift+S", self.save_plots)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", QKeySequence.StandardKey.Quit, self.close)
        search_menu = menu.addMenu("&Search")
        self.start_action = self._action(search_menu, "&Start", "F5", self.start_search)
        self.stop_action = self._action(search_menu, "S&top", "Esc", self.stop_search)
        help_menu = menu.addMenu("&Help")
        self._action(help_menu, "&About mptune", None, self.show_about)

    def _action(self, menu: Any, text: str, shortcut: Any, slot: Any) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    # -- hardware ----------------------------------------------------------------------------
    def _on_detected(self, profile: dict[str, Any]) -> None:
        self.profile = profile
        self.hardware.set_profile(profile)
        self.setup.apply_advice(profile["advice"])
        if profile["gpus"]:
            total = profile["gpus"][0].get("memory_total_mb")
        else:
            total = profile["cpu"].get("ram_total_mb")
        self._memory_budget = total * 0.9 if total else None
        self.plots.set_budget(self._memory_budget)
        self._update_buttons()

    # -- the search --------------------------------------------------------------------------
    def _update_buttons(self, *_: Any) -> None:
        running = self.bridge.running
        can_start = self.setup.valid and self.profile is not None and not running
        self.start_button.setEnabled(can_start)
        self.start_action.setEnabled(can_start)
        self.stop_button.setEnabled(running)
        self.stop_action.setEnabled(running)
        resumable = (self._resumable is not None
                     and self._resumable[1] == self.setup.model_spec())
        self.start_button.setText("Resume" if resumable else "Start")
        self.start_button.setToolTip(
            f"Continue session {self._resumable[0]}: finished trials are not run again (F5)"
            if resumable and self._resumable else "Start the search (F5)")
        self.setup.setEnabled(not running)
        self.export_action.setEnabled(self.recommendation.recommendation is not None)

    def start_search(self) -> None:
        if not self.start_button.isEnabled():
            return
        assert self.profile is not None
        self.setup.save()
        from tuner.hardware import HardwareProfile

        try:
            arguments = self.setup.tune_arguments([a["policy"] for a in self.profile["advice"]])
        except (ValueError, MptuneError) as exc:
            self.status.setText(str(exc))
            return
        self.storage = arguments["storage"]
        resume = self._resumable is not None and self._resumable[1] == arguments["model"]
        if resume:
            assert self._resumable is not None
            arguments.update(study=self._resumable[0], resume=True)
        self._resumable = None
        self.table.trials.clear()
        self.plots.clear()
        self.plots.set_budget(self._memory_budget)
        self.recommendation.set_recommendation(None, "Searching...")
        self._search_started = time.monotonic()
        self._trial_seconds = []
        self._best_speed = 0.0
        self.finished_status = None
        self.progress.setRange(0, 0)
        self.bridge.start(profile=HardwareProfile.from_dict(self.profile), **arguments)
        self.status.setText("Starting...")
        self._update_buttons()

    def stop_search(self) -> None:
        if self.bridge.running:
            self.status.setText("Stopping...")
            self.bridge.stop()

    def _on_events(self, events: list[dict[str, Any]]) -> None:
        steps: list[dict[str, Any]] = []
        for event in events:
            kind = event["type"]
            if kind == "worker":
                inner = event["event"]
                if inner["type"] == "step":
                    steps.append(inner)
                elif inner["type"] == "memory" and not (self.profile or {}).get("gpus"):
                    t = self._trial_started - self._search_started + inner["t"]
                    self.plots.add_memory([t], [inner["rss_mb"]])
                continue
            if steps:
                self.plots.add_steps(steps)
                steps = []
            self._on_event(event)
        if steps:
            self.plots.add_steps(steps)

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "session":
            self.session_name = event["name"]
            self.status.setText(f"Session {event['name']}")
        elif kind == "plan":
            self.progress.setRange(0, max(1, event["planned"]))
            self.progress.setValue(event["done"])
            self._update_time_left(event["done"], event["planned"])
        elif kind == "stage":
            self.status.setText(event["message"])
        elif kind == "trial_started":
            self._trial_started = time.monotonic()
            spec = event["spec"]
            self.plots.start_trial(scaled=spec["loss_scale"] != "none")
            self.status.setText(f"Trial #{event['number']}: {spec['policy']}, batch "
                                f"{spec['batch_size']}, loss scale {spec['loss_scale']}")
        elif kind == "trial_finished":
            self._trial_seconds.append(time.monotonic() - self._trial_started)
            self.add_trial(event["number"], event["stage"], event["result"])
            self.progress.setValue(min(self.progress.value() + 1, self.progress.maximum()))
        elif kind == "recommendation":
            self.show_recommendation(event["recommendation"])

    def add_trial(self, number: int, stage: str, result: dict[str, Any]) -> None:
        """Put a finished trial in the table and the plots."""
        self.table.trials.add(number, stage, result)
        spec = result["spec"]
        sps = result.get("samples_per_second")
        if result["status"] == "ok" and sps:
            self.plots.add_throughput(spec["policy"], spec["batch_size"], sps)
            if sps > self._best_speed:
                self._best_speed = sps
                self.plots.set_best(spec["batch_size"], sps)
            if stage == "baseline" and spec["policy"] == "float32":
                self.plots.set_baseline(sps)
                self.plots.set_baseline_losses(result.get("losses") or [])
        if result.get("peak_memory_mb"):
            self.plots.mark_peak(time.monotonic() - self._search_started
                                 if self._search_started else number, result["peak_memory_mb"])

    def show_recommendation(self, rec: dict[str, Any]) -> None:
        self.recommendation.set_recommendation(rec)
        gaps = {}  # the guard's loss gap, on the trials of each mixed-precision candidate
        for cand in [rec, *rec.get("alternatives", [])]:
            if cand.get("loss_gap") is not None and cand["policy"] != "float32":
                numbers = [r["number"] for r in self.table.trials.rows
                           if r["result"]["spec"]["policy"] == cand["policy"]
                           and r["result"]["spec"]["batch_size"] == cand["batch_size"]
                           and r["result"]["spec"]["loss_scale"] == cand["loss_scale"]]
                gaps.update({n: cand["loss_gap"] for n in numbers})
        self.table.trials.set_loss_gaps(gaps)
        self.tabs.setCurrentWidget(self.recommendation)
        self._update_buttons()

    def _update_time_left(self, done: int, planned: int) -> None:
        if self._trial_seconds and planned > done:
            left = statistics.median(self._trial_seconds) * (planned - done)
            self.progress.setToolTip(f"about {math.ceil(left)} s left")

    def _on_search_finished(self, status: str, message: str) -> None:
        self.finished_status = status
        if status == "stopped" and self.session_name:
            self._resumable = (self.session_name, self.setup.model_spec() or "")
        done = self.table.trials.rowCount()
        self.progress.setRange(0, max(1, done if status == "done" else self.progress.maximum()))
        self.progress.setValue(done)
        self.status.setText(message if status != "failed" else f"Failed: {message}")
        if status == "failed" and self.recommendation.recommendation is None:
            self.recommendation.set_recommendation(None, message)
            self.tabs.setCurrentWidget(self.recommendation)
        self._update_buttons()

    # -- plots -------------------------------------------------------------------------------
    def _on_redraw(self) -> None:
        if (self.profile or {}).get("gpus"):
            samples = self.sampler.history_since(self._sample_index)
            self._sample_index += len(samples)
            if samples and self._search_started:
                offset = time.monotonic() - self._search_started - samples[-1].t
                self.plots.add_memory([s.t + offset for s in samples],
                                      [s.gpu_used_mb[0] or math.nan for s in samples])
        self.plots.redraw()

    def _on_trial_selected(self, row: dict[str, Any]) -> None:
        result = row["result"]
        self.plots.show_trial_curves(result.get("losses") or [], result.get("loss_scales") or [])

    def save_plots(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save plots", "mptune-plots.png",
                                              "PNG (*.png);;SVG (*.svg)")
        if path:
            files = self.plots.save(path)
            self.status.setText(f"Saved {len(files)} plots next to {path}")

    # -- files, sessions, export -------------------------------------------------------------
    def open_model(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a model", "",
                                              "Keras models (*.py *.keras)")
        if path:
            self.setup.set_model(path)

    def open_history(self) -> None:
        dialog = QtHistoryDialog(self.setup.storage.text().strip() or None, self)
        if dialog.exec() and dialog.chosen:
            self.load_session(dialog.chosen, self.setup.storage.text().strip() or None)

    def load_session(self, name: str, storage: str | None) -> None:
        """Show a stored session's trials and recommendation."""
        from tuner.search.session import TuningSession

        try:
            session = TuningSession.load(name, storage)
        except MptuneError as exc:
            QMessageBox.warning(self, "Cannot open the session", str(exc))
            return
        self.session_name, self.storage = name, storage
        self.table.trials.clear()
        self.plots.clear()
        self._search_started = 0.0
        self._best_speed = 0.0
        for stored in session.trials():
            if stored.result is not None:
                self.add_trial(stored.number, stored.stage, stored.result.to_dict())
        rec = session.attrs.get("recommendation")
        if rec:
            self.show_recommendation(rec)
        else:
            self.recommendation.set_recommendation(None, "This session has no recommendation "
                                                         "yet: the search did not finish.")
        self.status.setText(f"Session {name}: {len(session.trials())} trials")
        self._update_buttons()

    def export_config(self) -> Any:
        from tuner.export import config_from_session
        from tuner.search.session import TuningSession

        if not self.session_name:
            raise MptuneError("no session to export")
        return config_from_session(TuningSession.load(self.session_name, self.storage))

    def open_export(self, fmt: str = "json") -> QtExportDialog | None:
        try:
            config = self.export_config()
        except MptuneError as exc:
            QMessageBox.information(self, "Nothing to export", str(exc))
            return None
        dialog = QtExportDialog(config, self, fmt)
        dialog.setModal(True)
        dialog.show()
        self.export_dialog = dialog
        return dialog

    def show_about(self) -> None:
        from PySide6 import __version__ as pyside_version

        def version(name: str) -> str:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                return "not installed"

        QMessageBox.about(self, "About mptune", (
            f"<h3>mptune {__version__}</h3><p>Finds the fastest numerically safe "
            "mixed-precision setup for a Keras model on this machine.</p>"
            f"<p>Python {html.escape(platform.python_version())}<br>"
            f"TensorFlow {version('tensorflow')}, Keras {version('keras')}<br>"
            f"PySide6 {pyside_version}, pyqtgraph {version('pyqtgraph')}<br>"
            f"Optuna {version('optuna')}</p>"))

    # -- closing -----------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt's name
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop the search (its worker is killed) and the sampler; keep the settings."""
        if self.bridge.running:
            self.bridge.stop()
            self.bridge.wait(5)
        self.redraw_timer.stop()
        self.sampler.stop()
        if self.detector.thread is not None:
            self.detector.thread.join(5)
        self.setup.save()
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.sync()
