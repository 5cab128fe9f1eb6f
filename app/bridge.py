"""The one bridge between the engine and the GUI.

The search runs on a named background thread; trials run in their own worker processes under
it. Engine events are queued from that thread and handed to the GUI thread in batches by a
QTimer, so a model that reports thousands of steps a second costs the event loop one signal per
tick, not one per step. What it hands over are the engine's frozen event records
(:mod:`tuner.search.events`): values, never live engine objects.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.counts import trials
from tuner import api

logger = logging.getLogger(__name__)

#: How often queued engine events reach the GUI.
DRAIN_INTERVAL_MS = 50


class EngineBridge(QObject):
    """Runs the engine's ``tune`` off the GUI thread and re-emits its events.

    Args:
        parent: the owning QObject.
        engine: the engine's face (:mod:`tuner.api`, or a fake with a ``tune`` function).

    Signals:
        eventsReady(list): search events (:data:`tuner.api.SearchEvent`), in order, on the GUI
            thread.
        finished(str, str): ``("done" | "stopped" | "failed", message)`` when the search ends.
    """

    eventsReady = Signal(list)
    finished = Signal(str, str)

    def __init__(self, parent: QObject | None = None, engine: Any = api) -> None:
        super().__init__(parent)
        self._queue: collections.deque[api.SearchEvent] = collections.deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._outcome: tuple[str, str] | None = None
        self._engine = engine
        self._timer = QTimer(self)
        self._timer.setInterval(DRAIN_INTERVAL_MS)
        self._timer.timeout.connect(self._on_drain)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, request: api.TuneRequest) -> None:
        """Start the search ``request`` asks for, with the engine's ``tune``."""
        if self.running:
            raise RuntimeError("a search is already running")
        self._cancel.clear()
        self._outcome = None
        self._thread = threading.Thread(
            target=self._run, args=(request,), name="mptune-search", daemon=True
        )
        self._thread.start()
        self._timer.start()

    def stop(self) -> None:
        """Ask the search to stop: the running trial's worker is killed at once."""
        self._cancel.set()

    def abort(self) -> None:
        """Stop now, for a closing window: the cancel flag, and every trial worker killed from
        this thread, without waiting for the search thread (it may be blocked on storage)."""
        self._cancel.set()
        self._engine.kill_all_workers()
        self._timer.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Join the search thread (after :meth:`stop`); True when it has ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def feed(self, events: list[api.SearchEvent]) -> None:
        """Queue events as if the engine sent them (replaying a recorded session)."""
        with self._lock:
            self._queue.extend(events)
        if not self._timer.isActive():
            self._timer.start()

    def _enqueue(self, event: api.SearchEvent) -> None:
        with self._lock:
            self._queue.append(event)

    def _run(self, request: api.TuneRequest) -> None:
        try:
            # Through the engine this bridge was given (a test's fake), not tuner.api's own.
            result = self._engine.tune(request, on_event=self._enqueue, cancel=self._cancel)
            outcome = (
                "done",
                f"session {result.session}: {trials(result.ran)} run, {result.recalled} recalled",
            )
        except (api.TrialCancelled, KeyboardInterrupt):
            outcome = ("stopped", "stopped: finished trials are kept in the session")
        except api.MptuneError as exc:
            outcome = ("failed", str(exc))
        except Exception as exc:
            logger.exception("search failed")
            outcome = ("failed", f"internal error: {type(exc).__name__}: {exc}")
        with self._lock:
            self._outcome = outcome

    def _on_drain(self) -> None:
        with self._lock:
            events = list(self._queue)
            self._queue.clear()
            outcome = self._outcome
            if outcome is not None:
                self._outcome = None
        if events:
            self.eventsReady.emit(events)
        if outcome is not None:
            if self._thread is not None:
                self._thread.join()
                self._thread = None
            self._timer.stop()
            self.finished.emit(*outcome)
        elif not self.running and not self._queue:
            self._timer.stop()
