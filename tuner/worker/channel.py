"""The worker's end of the event channel."""

from __future__ import annotations

import os
import time
from typing import Any

from tuner.trials.events import encode_event


class Channel:
    """Writes events as JSON lines to the pipe the parent gave us; never to stdout."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._t0 = time.monotonic()

    def emit(self, type_: str, **fields: Any) -> None:
        data = encode_event({"type": type_, "t": round(time.monotonic() - self._t0, 4), **fields})
        view = memoryview(data)
        while view:  # a pipe write can be partial when the parent is slow to read
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
