"""Every engine call the window makes, off the GUI thread, with results back as signals.

The window never waits on the engine: storage (SQLite, or PostgreSQL over a network), export,
model-file checks and hardware detection can each take seconds. :meth:`Controller.call` runs a
function on a named daemon thread and delivers its value (or its exception) to a callback on
the GUI thread through a queued Qt signal, napari's ``thread_worker`` pattern without the
generator machinery. Long searches go through :class:`app.bridge.EngineBridge`, which batches
their events.

The engine is reached through :mod:`tuner.api` only (``engine``); tests pass a fake with the
same functions, e.g. one whose storage blocks.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Signal

from tuner import api

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Controller(QObject):
    """Runs engine calls on background threads for the window.

    Args:
        engine: the engine's face (:mod:`tuner.api`, or a fake with the same functions).
        parent: the owning QObject (the window).
    """

    _delivered = Signal(object)  # (callback, value), emitted on a worker thread

    def __init__(self, engine: ModuleType | Any = api, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self._threads: set[threading.Thread] = set()  # calls whose result is not yet handed over
        self._started: list[threading.Thread] = []  # every thread not yet joined, for `wait`
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        self._delivered.connect(self._on_delivered)

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._threads)

    def call(
        self,
        function: Callable[[], T],
        on_done: Callable[[T], object],
        on_error: Callable[[Exception], object] | None = None,
        name: str = "call",
    ) -> None:
        """Run ``function()`` off the GUI thread; then, on the GUI thread, ``on_done(value)`` or
        ``on_error(exception)`` (logged when there is no ``on_error``)."""
        if self._closed:
            return
        thread = threading.Thread(
            target=self._run,
            args=(function, on_done, on_error),
            name=f"mptune-{name}-{next(self._ids)}",
            daemon=True,
        )
        with self._lock:
            self._threads.add(thread)
            self._started = [t for t in self._started if t.is_alive()] + [thread]
        thread.start()

    def wait(self, timeout: float) -> bool:
        """Join the calls under way for up to ``timeout`` seconds in all; True when none is
        left. The window never waits; the process does, at exit (:func:`app.main.run`)."""
        deadline = time.monotonic() + timeout
        # Every thread, not only the busy ones: a call is off the books before its thread has
        # returned, and a thread still alive then is one a test would see left behind.
        with self._lock:
            started = list(self._started)
        for thread in started:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not self.busy and not any(t.is_alive() for t in started)

    def close(self) -> None:
        """Deliver nothing more: results of calls still under way are dropped (their daemon
        threads end with the process)."""
        self._closed = True

    def _run(
        self,
        function: Callable[[], T],
        on_done: Callable[[T], object],
        on_error: Callable[[Exception], object] | None,
    ) -> None:
        item: tuple[Callable[[Any], object], Any]
        try:
            item = (on_done, function())
        except Exception as exc:  # noqa: BLE001 - handed to the GUI thread, never lost
            item = (on_error or _log_error, exc)
        # Off the books before the result is handed over, so that `busy` is already false
        # when the last callback runs.
        with self._lock:
            self._threads.discard(threading.current_thread())
        self._delivered.emit(item)

    def _on_delivered(self, item: tuple[Callable[[Any], object], Any]) -> None:
        callback, value = item
        if self._closed:
            return
        callback(value)


def _log_error(exc: Exception) -> None:
    logger.error("engine call failed: %s", exc, exc_info=exc)
