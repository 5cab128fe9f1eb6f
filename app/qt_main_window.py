"""The main window: hardware and setup on the left, live plots and results on the right."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.bridge import EngineBridge
from app.controller import Controller
from app.counts import TrialCounts
from app.qt_dialogs import ask_model_file, ask_script, ask_tune_on_cpu, show_about
from app.qt_export import QtExportDialog
from app.qt_focus import QtFocusReturn
from app.qt_hardware import QtHardwarePanel
from app.qt_history import QtHistoryDialog
from app.qt_placement import DEFAULT_SIZE, ScreenPlacement
from app.qt_plots import QtLivePlots
from app.qt_recommendation import QtRecommendation
from app.qt_settings_column import QtSettingsColumn
from app.qt_setup import QtSetupPanel
from app.qt_trials import QtTrialsTable, TrialRow
from app.sampler import HardwareSampler
from app.session_clock import SessionClock
from app.words import window_words
from tuner import api
from tuner.resources import asset_path

logger = logging.getLogger(__name__)

REDRAW_INTERVAL_MS = 50  # one plot per tick: each plot up to 5 times a second

#: The trials table shows at least this many rows at the smallest supported window size.
MIN_TABLE_ROWS = 8


class QtMainWindow(ScreenPlacement, QMainWindow):
    """mptune's window. It renders; every engine call goes through :attr:`controller` (short
    calls) or :attr:`bridge` (the search), off the GUI thread.

    Args:
        settings: where the setup panel and geometry are remembered (tests pass their own).
        nvml_backend: the NVML backend for detection and sampling (tests pass a fake).
        engine: the engine's face, :mod:`tuner.api` (tests pass a fake).
        sample_interval: seconds between hardware samples.
    """

    def __init__(
        self,
        settings: QSettings | None = None,
        nvml_backend: api.NvmlBackend | None = None,
        engine: Any = api,
        sample_interval: float = 0.5,
    ) -> None:
        super().__init__()
        self.setWindowTitle("mptune")
        self.setWindowIcon(QIcon(str(asset_path("mptune.svg"))))
        self.settings = settings or QSettings("mptune", "mptune")
        self.engine = engine
        self.profile: api.HardwareProfile | None = None
        self.session_name: str | None = None
        self.storage: str | None = None
        self.controller = Controller(engine, self)
        self.bridge = EngineBridge(self, engine)
        self.bridge.eventsReady.connect(self._on_events)
        self.bridge.finished.connect(self._on_search_finished)
        #: where each trial sits on the memory plot's seconds axis: counted as a session
        #: reopened from History counts it, so that both put every trial at the same second
        self.clock = SessionClock()
        #: whether the followed trial's worker has it (its "started" message came): its memory
        #: is the trial's from then on; before, it is a fresh process loading its framework,
        #: from 0 MB up, which pulled the plot's axis down to 0
        self._worker_has_trial = False
        #: each running trial's latest worker ``t``: how far one stopped under its search got
        self._trial_t: dict[int, float] = {}
        self._trial_text = ""  # the followed trial, as the status line names it
        #: the running trials (several with --parallel): number -> (how it started, what it
        #: does now); how it started gives its row should the search stop under it
        self._running: dict[int, tuple[api.TrialStarted, str]] = {}
        #: the trial counts the progress bar, the status line and the table agree on
        self.counts = TrialCounts()
        #: the running trial the live plots and the status line follow (the oldest)
        self._followed: int | None = None
        self._memory_budget: float | None = None
        self._sample_index = 0
        self.finished_status: str | None = None
        # A stopped search can be resumed: Start then continues the same stored session.
        self._resumable: tuple[str, str] | None = None  # (session, model)
        #: the backends the user chose to tune on the CPU although NVML sees a GPU they cannot
        #: use (asked once a backend, for as long as the window is open)
        self._cpu_chosen: set[str] = set()
        self.export_dialog: QtExportDialog | None = None
        self.history_dialog: QtHistoryDialog | None = None

        self.hardware = QtHardwarePanel(engine=engine)
        self.setup = QtSetupPanel(self.settings, engine=engine)
        self.plots = QtLivePlots()
        self.table = QtTrialsTable()
        self.recommendation = QtRecommendation(engine=engine)
        self._build_layout()
        self._build_actions()
        # After any dialog the keyboard comes back here, so that F5 and Esc work at once.
        self.focus_return = QtFocusReturn(self)
        self.setup.validityChanged.connect(self._update_buttons)
        self.setup.modelChanged.connect(self._on_model_changed)
        # The verdict is for the backend the trials would run on.
        self.setup.backend.currentIndexChanged.connect(
            lambda _: self.hardware.set_backend(self.setup.backend_choice())
        )
        self.table.trialSelected.connect(self._on_trial_selected)
        self.recommendation.exportRequested.connect(self.open_export)

        self.sampler = HardwareSampler(sample_interval, nvml_backend, engine)
        self.sampler.start()
        self.redraw_timer = QTimer(self)
        self.redraw_timer.setInterval(REDRAW_INTERVAL_MS)
        self.redraw_timer.timeout.connect(self._on_redraw)
        self.redraw_timer.start()
        self.controller.call(
            lambda: engine.detect(nvml_backend),
            self._on_detected,
            self._on_detect_failed,
            name="detect",
        )
        self._on_model_changed(self.setup.model_spec())
        self._update_buttons()
        geometry = self.settings.value("geometry")
        screen = self.screen() or QGuiApplication.primaryScreen()
        area = screen.availableGeometry() if screen is not None else None
        if geometry is not None:
            self.restoreGeometry(geometry)
            if area is not None:
                self.fit_within(area)
        elif area is not None:
            self.open_on(area)
        else:
            self.resize(*DEFAULT_SIZE)

    # -- layout ------------------------------------------------------------------------------
    def _build_layout(self) -> None:
        scroll = QtSettingsColumn(("This machine", self.hardware), ("Search", self.setup))
        self.settings_scroll = scroll

        self.tabs = QTabWidget()
        self.tabs.addTab(self.table, "Trials")
        self.tabs.addTab(self.recommendation, "Recommendation")
        # The trials table keeps room for MIN_TABLE_ROWS rows at 1366x768 and 1280x800: its
        # minimum height is counted in rows of the current font, not pixels.
        # (one row more than promised: the tab page and the table frame take a few pixels each)
        rows = self.table.verticalHeader().defaultSectionSize() * (MIN_TABLE_ROWS + 1)
        header = self.table.horizontalHeader().sizeHint().height()
        tab_bar = self.tabs.tabBar().sizeHint().height()
        self.tabs.setMinimumHeight(rows + header + tab_bar + 2 * self.table.frameWidth() + 8)
        self.plots.setMinimumSize(480, 280)
        # Trials running at once (--parallel), side by side; hidden while one runs at a time.
        self.running_strip = QWidget()
        self.running_strip.setObjectName("running-trials")
        self._running_row = QHBoxLayout(self.running_strip)
        self._running_row.setContentsMargins(0, 0, 0, 0)
        self.running_strip.setVisible(False)
        below = QWidget()
        below_column = QVBoxLayout(below)
        below_column.setContentsMargins(0, 0, 0, 0)
        below_column.addWidget(self.running_strip)
        below_column.addWidget(self.tabs)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.plots)
        right.addWidget(below)
        right.setChildrenCollapsible(False)
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 2)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(scroll)
        self.splitter.addWidget(right)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([360, 920])
        self.setCentralWidget(self.splitter)

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
        self.progress.setMinimumWidth(160)
        self.progress.setMaximumWidth(320)
        self._show_counts()
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
        self.open_action = self._action(
            file_menu, "&Open model...", QKeySequence.StandardKey.Open, self.open_model
        )
        self.script_action = self._action(
            file_menu, "Open training &script...", "Ctrl+Shift+O", self.open_script
        )
        self.history_action = self._action(
            file_menu, "Open &past session...", "Ctrl+H", self.open_history
        )
        self.export_action = self._action(
            file_menu, "&Export...", "Ctrl+E", lambda: self.open_export("json")
        )
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
    def _on_detected(self, profile: api.HardwareProfile) -> None:
        self.profile = profile
        self.hardware.set_profile(profile)
        self.setup.apply_advice([a.policy for a in profile.advice])
        self.setup.set_installed_backends(profile.software.backends)
        self.hardware.set_backend(self.setup.backend_choice())
        self._read_measured()
        # The engine's rule (the device's memory less the headroom), not a copy of it here.
        self._memory_budget = self.engine.memory_budget_mb(profile)
        self.plots.set_budget(self._memory_budget)
        self.plots.name_use(on_gpu=bool(profile.gpus))
        self._update_buttons()

    def _read_measured(self) -> None:
        """What searches on this kind of machine measured of each policy, read off the GUI
        thread from the storage the Search panel names, for the advice (as ``mptune detect``
        says it); again after each search."""
        profile = self.profile
        if profile is None:
            return
        storage = self.setup.storage.text().strip() or None
        self.controller.call(
            lambda: self.engine.measured_here(profile, storage),
            self.hardware.set_measured,
            lambda exc: logger.info("measured advice not read: %s", exc),
            name="measured-here",
        )

    def _on_detect_failed(self, exc: Exception) -> None:
        self.status.setText(window_words(f"Cannot read this machine: {exc}"))

    def _on_model_changed(self, spec: str | None) -> None:
        """Check a model file off the GUI thread (it is parsed, not run)."""
        if not spec:
            return
        self.controller.call(
            lambda: self.engine.check_model(spec),
            lambda _source: self.setup.set_model_check(spec, None),
            lambda exc: self.setup.set_model_check(spec, str(exc)),
            name="check-model",
        )

    # -- the search --------------------------------------------------------------------------
    def _update_buttons(self, *_: Any) -> None:
        running = self.bridge.running
        can_start = self.setup.valid and self.profile is not None and not running
        self.start_button.setEnabled(can_start)
        self.start_action.setEnabled(can_start)
        self.stop_button.setEnabled(running)
        self.stop_action.setEnabled(running)
        resumable = self._resumable is not None and self._resumable[1] == self.setup.model_spec()
        self.start_button.setText("Resume" if resumable else "Start")
        self.start_button.setToolTip(
            f"Continue session {self._resumable[0]}: finished trials are not run again (F5)"
            if resumable and self._resumable
            else "Start the search (F5)"
        )
        self.setup.setEnabled(not running)
        self.export_action.setEnabled(self.recommendation.recommendation is not None)

    def start_search(self) -> None:
        if not self.start_button.isEnabled():
            return
        assert self.profile is not None
        self.setup.save()
        try:
            request = self.setup.tune_request(
                list(self.engine.hardware_prior(self.profile)), self.profile
            )
        except (ValueError, api.MptuneError) as exc:
            self.status.setText(window_words(str(exc)))
            return
        self.storage = request.storage
        if self._resumable is not None and self._resumable[1] == request.model:
            # A session owns its space and settings: the continued search uses the stored ones.
            request = request.resumed(self._resumable[0])
        else:
            on_device = self._cpu_if_gpu_unused(request)
            if on_device is None:
                return
            request = on_device
            # A new search starts from a clean slate; a resumed one keeps the finished trials
            # of its session on show (the recommendation will cite them).
            self.table.trials.clear()
            self.plots.clear()
        # Session time: a new search starts at 0; a resumed one goes on from its session's
        # (after a gap where a trial was stopped under it), the memory line broken there.
        if not self.table.trials.rows:
            self.clock = SessionClock()
        self._trial_t.clear()
        self.plots.break_memory()
        self._resumable = None
        self.counts = TrialCounts(state="searching")
        self.plots.set_budget(self._memory_budget)
        self.recommendation.set_recommendation(None, "Searching...")
        self._running.clear()
        self._followed = None
        self._show_running()
        self.finished_status = None
        self._show_counts()
        self.bridge.start(request)
        self.status.setText("Starting...")
        self._update_buttons()

    def _cpu_if_gpu_unused(self, request: api.TuneRequest) -> api.TuneRequest | None:
        """``request`` as it is, or on the CPU when NVML sees a GPU its backend cannot use and
        the user says so (asked once a backend, :meth:`ask_tune_on_cpu`); ``None``: cancelled.
        The engine refuses such a search on the default device rather than run it on the CPU
        without a word."""
        assert self.profile is not None
        assert request.settings is not None
        backend = request.settings.backend
        unused = self.engine.unused_gpu(self.profile, backend)
        if unused is not None and request.settings.device == "auto":
            if backend not in self._cpu_chosen:
                if not self.ask_tune_on_cpu(unused):
                    self.status.setText(window_words(f"Not started: {unused.sentence}"))
                    return None
                self._cpu_chosen.add(backend)
            # The CPU's advice orders the policies.
            on_cpu = self.setup.tune_request(
                list(self.engine.hardware_prior(self.profile, "cpu")), self.profile
            )
            assert on_cpu.settings is not None
            request = dataclasses.replace(
                on_cpu, settings=dataclasses.replace(on_cpu.settings, device="cpu")
            )
        assert request.settings is not None
        # The memory line's budget: the device the trials run on.
        self._memory_budget = self.engine.memory_budget_mb(self.profile, request.settings.device)
        return request

    def ask_tune_on_cpu(self, unused: api.UnusedGpu) -> bool:
        """Ask whether to tune on the CPU although a GPU would go unused: True to go on."""
        return ask_tune_on_cpu(self, unused)

    def stop_search(self) -> None:
        if self.bridge.running:
            self.status.setText("Stopping...")
            self.bridge.stop()

    def _on_events(self, events: list[api.SearchEvent]) -> None:
        steps: list[api.StepMessage] = []
        for event in events:
            if isinstance(event, api.WorkerReported):
                message = event.message
                t = getattr(message, "t", None)
                if t is not None:
                    self._trial_t[event.number] = max(t, self._trial_t.get(event.number, t))
                if event.number != self._followed:
                    self._note_running(event.number, message)
                    continue  # the plots follow one trial
                if isinstance(message, api.StepMessage):
                    steps.append(message)
                elif isinstance(message, api.MemoryMessage):
                    self._on_memory(message)
                elif isinstance(message, api.StartedMessage):
                    self._worker_has_trial = True
                elif isinstance(message, api.PhaseMessage):
                    self._show_phase(message.phase)
                    self._note_running(event.number, message)
                elif isinstance(message, api.HazardMessage):
                    # Found before the steps: marked on the plots (the result lists it too).
                    self.plots.add_hazard(message.hazard)
                continue
            if steps:
                self.plots.add_steps(steps)
                steps = []
            self._on_event(event)
        if steps:
            self.plots.add_steps(steps)

    def _on_event(self, event: api.SearchEvent) -> None:
        if isinstance(event, api.SessionOpened):
            self.session_name = event.name
            self.status.setText(f"Session {event.name}")
        elif isinstance(event, api.PlanUpdated):
            self.counts.planned(event.done, event.planned, event.seconds)
            self._show_counts()
            # The engine prices the plan from its trials' cost and its budget.
            self.progress.setToolTip(window_words(f"Plan: {event.words()}"))
        elif isinstance(event, api.LeaderChanged):
            # The star is the engine's leader at the figure it stands on, never a run's own.
            self.plots.set_best(event.setup.batch_size, event.samples_per_second)
        elif isinstance(event, api.StageStarted):
            self.status.setText(window_words(event.message))
        elif isinstance(event, api.TrialStarted):
            self._running[event.number] = (event, "starting")
            self.clock.start(event.number, time.monotonic())
            if self._followed is None:
                self._follow(event)
            self._show_running()
            self._show_counts()
        elif isinstance(event, api.TrialFinished):
            self._running.pop(event.number, None)
            if event.number == self._followed:
                self._followed = None
            self._show_running()
            self._trial_t.pop(event.number, None)
            self.add_trial(event.number, event.stage, event.result)
            self._show_loss_gaps()
            if self.counts.left is not None:  # one fewer left until the engine plans again
                self.counts.left = max(0, self.counts.left - 1)
            self._show_counts()
        elif isinstance(event, api.Recommended):
            self.show_recommendation(event.recommendation)

    def _follow(self, event: api.TrialStarted) -> None:
        """Let the live plots and the status line follow this trial."""
        self._followed = event.number
        self._worker_has_trial = False
        setup = event.spec.setup
        self.plots.start_trial(scaled=setup.loss_scale.kind != "none")
        if not (self.profile and self.profile.gpus):
            # A CPU's curve is the trial worker's memory: each trial's a line of its own (a
            # line from the last trial's end to a fresh worker's start read as a drop to 0).
            self.plots.break_memory()
        self._trial_text = f"Trial #{event.number}: {setup.in_words()}"
        self.status.setText(self._trial_text)

    def _on_memory(self, message: api.MemoryMessage) -> None:
        """The followed trial's worker memory, on a machine without a GPU (a GPU's memory
        comes from the sampler instead)."""
        if (self.profile and self.profile.gpus) or message.t is None or message.rss_mb is None:
            return
        if not self._worker_has_trial or self._followed is None:
            return
        t = self.clock.at(self._followed, message.t)
        if t is not None:
            self.plots.add_memory([t], [message.rss_mb])
            if message.cpu_percent is not None:
                self.plots.add_use([t], [message.cpu_percent])

    def _note_running(self, number: int, message: api.WorkerMessage) -> None:
        """What a running trial does now, for the strip of trials running at once."""
        if number not in self._running:
            return
        if isinstance(message, api.PhaseMessage):
            doing = api.PHASES.get(message.phase, message.phase)
        elif isinstance(message, api.StepMessage):
            doing = f"{message.phase} step {message.step}"
        else:
            return
        started, _ = self._running[number]
        self._running[number] = (started, doing)
        card = self.running_strip.findChild(QLabel, f"running-{number}")
        if card is not None:  # a step changes one card's text, not the strip
            card.setText(f"<b>{_card_name(started)}</b><br>{doing}")

    def _show_running(self) -> None:
        """The trials running at once, side by side (hidden while one runs at a time)."""
        while self._running_row.count():
            item = self._running_row.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.setParent(None)  # gone from findChild at once, deleted later
                widget.deleteLater()
        several = len(self._running) > 1
        self.running_strip.setVisible(several)
        if not several:
            return
        for number, (started, doing) in sorted(self._running.items()):
            card = QLabel(f"<b>{_card_name(started)}</b><br>{doing}")
            card.setObjectName(f"running-{number}")
            card.setFrameShape(QFrame.Shape.StyledPanel)
            card.setToolTip("followed by the plots" if number == self._followed else "")
            self._running_row.addWidget(card, 1)

    def _show_phase(self, phase: str) -> None:
        if self._trial_text:
            self.status.setText(f"{self._trial_text}: {api.PHASES.get(phase, phase)}")

    def _show_counts(self) -> None:
        """The progress bar from :attr:`counts`, its trials counted from the table and the
        running ones, so that bar, table and status line never disagree."""
        counts = self.counts
        counts.finished = self.table.trials.rowCount()
        counts.running = len(self._running)
        if counts.busy:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, max(1, counts.total))
            self.progress.setValue(counts.finished)
        self.progress.setFormat(counts.bar_format())

    def add_stopped(
        self, number: int, stage: str, spec: api.TrialSpec, why: str | None = None
    ) -> None:
        """A trial that closed without a result (stopped under a search) keeps its row."""
        stored = api.StoredTrial(number, stage, None, "FAIL", why, spec)
        result = self.engine.stored_result(stored, spec)  # the engine's result of such a trial
        self.table.trials.add(TrialRow(number, stage, result, True))

    def add_trial(
        self, number: int, stage: str, result: api.TrialResult, at: float | None = None
    ) -> None:
        """Put a finished trial in the table and the plots; its memory peak at ``at`` seconds
        of the session (None: where the session's clock ends it, live)."""
        self.table.trials.add(TrialRow(number, stage, result))
        setup = result.spec.setup
        sps = result.trained_samples_per_second  # the trial's one figure, as the table's
        if result.ok and sps:
            self.plots.add_throughput(setup.policy.name, setup.batch_size, sps)
            if stage == api.Stage.BASELINE and setup.policy == api.FLOAT32:
                self.plots.set_baseline(sps)
                self.plots.set_baseline_losses(list(result.losses))
        if result.peak_memory_mb:
            if at is None:
                at = self.clock.finish(number, result.timings.total_s)
            self.plots.mark_peak(at, result.peak_memory_mb)
        elif at is None:
            self.clock.finish(number, result.timings.total_s)

    def show_recommendation(self, rec: api.Recommendation) -> None:
        # At the end the star is the recommendation's setup, at its figure.
        self.plots.set_best(rec.setup.batch_size, rec.samples_per_second)
        self.recommendation.set_recommendation(rec)
        self.tabs.setCurrentWidget(self.recommendation)
        self._update_buttons()

    def _show_loss_gaps(self) -> None:
        """Each trial's loss gap to IEEE float32 at its batch size, as the engine compares
        them (the guard's comparison, for every trial that has its float32 trial), and what
        the engine says of a figure that did not hold and of its second look."""
        rows = [row for row in self.table.trials.rows if not row.stopped]
        gaps = self.engine.trial_loss_gaps({row.number: row.result for row in rows})
        self.table.trials.set_loss_gaps(gaps, self.engine.figure_notes(rows))

    def _on_search_finished(self, status: str, message: str) -> None:
        self.finished_status = status
        self._read_measured()  # the advice says what this search measured too
        # The trials the search ended under stay in the table, stopped (the session keeps
        # them so too: History counts them).
        now = time.monotonic()
        for number, (started, _) in sorted(self._running.items()):
            self.add_stopped(number, started.stage, started.spec, "stopped before it finished")
            # On the axis it lasts as far as its worker got (storage keeps about as much).
            ran = self._trial_t.get(number)
            self.clock.stop(
                number, ran if ran is not None else self.clock.seconds_since_start(number, now)
            )
        self._running.clear()
        self._trial_t.clear()
        self._followed = None
        self._show_running()
        if status == "stopped" and self.session_name:
            self._resumable = (self.session_name, self.setup.model_spec() or "")
        self.counts.state = status
        self._show_counts()
        message = window_words(message)
        stopped = sum(row.stopped for row in self.table.trials.rows)
        if status == "done" and stopped:  # so that the line adds up to the bar's count
            message += f", {stopped} stopped before"
        self.status.setText(message if status != "failed" else f"Failed: {message}")
        if self.recommendation.recommendation is None:
            if status == "failed":
                self.recommendation.set_recommendation(None, message)
                self.tabs.setCurrentWidget(self.recommendation)
            elif status == "stopped":
                self.recommendation.set_recommendation(
                    None,
                    "The search was stopped before it recommended a setup. Its finished "
                    "trials are kept: press Resume to continue it.",
                )
        self._update_buttons()

    # -- plots -------------------------------------------------------------------------------
    def _on_redraw(self) -> None:
        if self.profile is not None and self.profile.gpus:
            samples = self.sampler.history_since(self._sample_index)
            self._sample_index += len(samples)
            followed = self._followed
            if samples and followed is not None:
                # The samples on the wall clock (the last one is now), then on the session's
                # axis: those of the followed trial, from its start.
                wall = time.monotonic() - samples[-1].t
                placed = [(self.clock.at_wall(followed, s.t + wall), s) for s in samples]
                self.plots.add_gpu_samples([(t, s) for t, s in placed if t is not None])
        self.plots.redraw()

    def _on_trial_selected(self, row: TrialRow) -> None:
        result = row.result
        self.plots.show_trial_curves(
            list(result.losses), list(result.loss_scales), hazards=result.hazards
        )

    def save_plots(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Save plots", "mptune-plots.png", "PNG (*.png);;SVG (*.svg)"
        )
        if path:
            try:
                written = self.plots.save(path)
            except OSError as exc:
                QMessageBox.warning(self, "Cannot save the plots", str(exc))
                return
            self.status.setText(f"Saved the plots to {written}")

    # -- files, sessions, export -------------------------------------------------------------
    def open_model(self) -> None:
        path = ask_model_file(self)
        if path:
            self.setup.set_model(path)

    def open_script(self) -> None:
        """A training script as the user runs it (issue 37), with its own arguments."""
        spec = ask_script(self)
        if spec:
            self.setup.set_model(spec)

    def _storage_url(self) -> str | None:
        return self.setup.storage.text().strip() or None

    def open_history(self) -> QtHistoryDialog:
        """The past sessions, listed off the GUI thread; opening one loads it."""
        storage = self._storage_url()
        dialog = QtHistoryDialog(self)
        dialog.setModal(True)
        dialog.sessionChosen.connect(lambda name: self.load_session(name, storage))
        self.controller.call(
            lambda: self.engine.list_sessions(storage),
            dialog.set_sessions,
            lambda exc: dialog.set_problem(str(exc)),
            name="sessions",
        )
        dialog.show()
        self.history_dialog = dialog
        return dialog

    def load_session(self, name: str, storage: str | None) -> None:
        """Show a stored session's trials and recommendation (read off the GUI thread)."""
        self.status.setText(f"Opening session {name}...")
        self.controller.call(
            lambda: self.engine.open_session(name, storage),
            lambda view: self.show_session(view, storage),
            lambda exc: QMessageBox.warning(
                self, "Cannot open the session", window_words(str(exc))
            ),
            name="open-session",
        )

    def show_session(self, view: api.SessionView, storage: str | None) -> None:
        """Render a session that was read: its trials, its recommendation, and Resume when its
        search did not finish."""
        self.session_name, self.storage = view.name, storage
        self.table.trials.clear()
        self.plots.clear()
        self._running.clear()
        # The session's seconds, counted as the live search counted them (SessionClock): each
        # peak where it was live, on the same axis, not at trial numbers.
        self.clock, ends = SessionClock.of_session(view.trials)
        for stored in view.trials:
            if stored.result is not None:
                self.add_trial(stored.number, stored.stage, stored.result, at=ends[stored.number])
            elif stored.spec is not None:
                self.add_stopped(stored.number, stored.stage, stored.spec, stored.note)
        self._show_loss_gaps()
        self.counts = TrialCounts(state="done" if view.recommendation else "stopped")
        self._show_counts()
        if view.recommendation is not None:
            self.show_recommendation(view.recommendation)
            self._resumable = None
        else:
            text = "This session has no recommendation yet: the search did not finish. Press "
            text += "Resume to continue it."
            if view.failure is not None:
                # Resume cannot help until the model file is fixed: say what failed first.
                n, failed = view.failure.trial, window_words(view.failure.message)
                text = (
                    "This session's search failed: the model fails in its own code"
                    f"{f' (trial #{n})' if n is not None else ''}: {failed}. Fix "
                    "the model file, then press Resume: the failed trial runs again with the "
                    "fixed file."
                )
            self.recommendation.set_recommendation(None, text)
            self.setup.set_model(view.model)
            self._resumable = (view.name, view.model)
        self.status.setText(f"Session {view.name}: {self.counts.bar_format()}")
        self._update_buttons()

    def open_export(self, fmt: str = "json") -> None:
        """Read the session's tuned config off the GUI thread, then open the export dialog."""
        name, storage = self.session_name, self.storage
        if not name:
            QMessageBox.information(self, "Nothing to export", "no session to export")
            return
        self.controller.call(
            lambda: self.engine.session_config(self.engine.open_session(name, storage)),
            lambda config: self._show_export(config, fmt),
            lambda exc: QMessageBox.information(self, "Nothing to export", window_words(str(exc))),
            name="export",
        )

    def _show_export(self, config: api.TunedConfig, fmt: str) -> None:
        dialog = QtExportDialog(config, self.controller, self, fmt)
        dialog.setModal(True)
        dialog.show()
        self.export_dialog = dialog

    def show_about(self) -> None:
        show_about(self)

    # -- closing -----------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """End the search (its worker is killed now) and the sampler; keep the settings. Never
        waits on the search thread or on storage: a window closes at once."""
        if self.bridge.running:
            self.bridge.abort()
        self.controller.close()
        self.redraw_timer.stop()
        self.sampler.stop()
        self.setup.save()
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.sync()


def _card_name(started: api.TrialStarted) -> str:
    """A running trial's card title: ``#7 on gpu:1: mixed_float16 b256 dynamic``."""
    device = started.spec.device
    where = f" on {device}" if device.startswith("gpu:") else ""
    return f"#{started.number}{where}: {started.spec.setup.label}"
