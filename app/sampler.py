"""Hardware sampling on a named background thread at a steady interval.

The sampler reads GPU memory, utilisation and power through the NVML backend, and system memory
through psutil, every
``interval`` seconds, scheduling each sample from the start time so the period does not drift.
It keeps the latest snapshot and the history; the GUI reads the samples it has not seen yet
(:meth:`HardwareSampler.history_since`) on a QTimer. Nothing here waits on the GUI, and the GUI
never waits on NVML.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil

from tuner import api


@dataclass(frozen=True)
class Sample:
    """One reading: seconds since the sampler started, memory in MiB per device, and each
    device's utilisation and power drawn of its limit, in percent (None: not read)."""

    t: float
    gpu_used_mb: tuple[float | None, ...]
    gpu_total_mb: tuple[float | None, ...]
    system_used_mb: float
    gpu_utilization: tuple[float | None, ...] = ()
    gpu_power: tuple[float | None, ...] = ()


class HardwareSampler:
    """Samples memory at a fixed interval until stopped.

    Args:
        interval: seconds between samples.
        backend: the NVML backend to read; ``None``: the one ``engine`` picks (the real one, or
            ``MPTUNE_FAKE_NVML``'s scripted GPUs).
        engine: the engine's face (:mod:`tuner.api`, or a test's fake with its functions).
    """

    def __init__(
        self, interval: float = 0.5, backend: api.NvmlBackend | None = None, engine: Any = api
    ) -> None:
        self.interval = interval
        self._backend = backend
        self._engine = engine
        self._latest: Sample | None = None
        self._history: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mptune-sampler", daemon=True)
        self.samples_taken = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def latest(self) -> Sample | None:
        with self._lock:
            return self._latest

    def history_since(self, index: int) -> list[Sample]:
        """Samples from ``index`` on (the caller keeps its own count)."""
        with self._lock:
            return self._history[index:]

    def _run(self) -> None:
        backend = (
            self._backend if self._backend is not None else self._engine.nvml_backend_from_env()
        )
        count = 0
        try:
            backend.init()
            count = backend.device_count()
        except Exception:  # noqa: BLE001 - no GPU is a state, not an error
            count = 0
        start = time.monotonic()
        tick = 0
        try:
            while not self._stop.is_set():
                readings = [backend.memory(i) for i in range(count)]
                use = [backend.use(i) for i in range(count)]
                sample = Sample(
                    time.monotonic() - start,
                    tuple(r[0] for r in readings),
                    tuple(r[1] for r in readings),
                    psutil.virtual_memory().used / 2**20,
                    tuple(u[0] for u in use),
                    tuple(u[1] for u in use),
                )
                with self._lock:
                    self._latest = sample
                    self._history.append(sample)
                    self.samples_taken += 1
                tick += 1
                # Sleep to the next multiple of the interval: the period does not drift.
                self._stop.wait(max(0.0, start + tick * self.interval - time.monotonic()))
        finally:
            backend.shutdown()
