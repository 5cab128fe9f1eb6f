"""Times a training script's real fit as it trains (``mptune run``, issue 49): each epoch's
training from its start to its validation (or its end), so that the figure compares with the
trials' (which leave validation out, and say so); the validation apart."""

from __future__ import annotations

import time
from typing import Any

import keras


class FitTimer(keras.callbacks.Callback):  # type: ignore[misc]
    """A callback added to the script's own: the seconds of each epoch's training and of each
    validation pass, and how many samples an epoch trains (set before fit)."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: int | None = None
        self.epochs: list[float] = []
        self.validation: list[float] = []
        self._start = 0.0
        self._test = 0.0
        self._in_epoch = False

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._start, self._in_epoch = time.perf_counter(), True

    def on_test_begin(self, logs: Any = None) -> None:
        if self._in_epoch:
            self.epochs.append(time.perf_counter() - self._start)
            self._in_epoch = False
        self._test = time.perf_counter()

    def on_test_end(self, logs: Any = None) -> None:
        self.validation.append(time.perf_counter() - self._test)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._in_epoch:
            self.epochs.append(time.perf_counter() - self._start)
            self._in_epoch = False

    def achieved(self) -> float | None:
        """Samples per second over the whole epochs after the first (which compiles),
        or over the first where it is the only one."""
        timed = self.epochs[1:] or self.epochs
        if not timed or not self.samples or sum(timed) <= 0:
            return None
        return self.samples * len(timed) / sum(timed)
