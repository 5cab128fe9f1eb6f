"""The timed step loop (the setup's compile arguments come from :mod:`tuner.keras_setup`)."""

from __future__ import annotations

import math
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras

from tuner.setup import LossScale

#: Test hook, documented in docs/trials.md: ``oom@K`` raises a real
#: ``tf.errors.ResourceExhaustedError`` at step K (counting warm-up, from 1), ``crash@K`` kills
#: the worker with SIGKILL, ``hang@K`` stops it answering (for the time limit).
FAULT_ENV = "MPTUNE_TEST_FAULT"


@dataclass
class StepLog:
    """What the steps of one phase produced."""

    losses: list[float] = field(default_factory=list)
    loss_scales: list[float | None] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    nonfinite: list[bool] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0


class MemoryLimitExceeded(MemoryError):
    """The worker's peak resident memory passed the trial's limit (CPU trials)."""


def peak_rss_mb() -> float:
    """This process's peak resident memory."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes vs KiB


class StepRunner:
    """Runs training steps one ``train_on_batch`` at a time and reports each.

    ``train_on_batch`` returns the step's own loss (metrics are reset per call) as a NumPy
    value, and reading ``optimizer.iterations`` inside the timed region waits for the update:
    the timed region covers the whole step, on a GPU too.
    """

    def __init__(
        self,
        model: keras.Model,
        batches: Sequence[tuple[Any, Any]],
        loss_scale: LossScale,
        emit: Callable[..., None],
        cpu_memory_limit_mb: float | None = None,
    ) -> None:
        self.model = model
        self.batches = batches
        self.loss_scale = loss_scale
        self.emit = emit
        self.cpu_memory_limit_mb = cpu_memory_limit_mb
        self.optimizer = model.optimizer
        self.dynamic = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        self.global_step = 0
        self._fault = _parse_fault(os.environ.get(FAULT_ENV, ""))

    def run(
        self,
        phase: str,
        steps: int | None,
        seconds: float = 0.0,
        min_steps: int = 1,
        max_steps: int = 1,
    ) -> StepLog:
        """Run ``steps`` steps, or (``steps=None``) until ``seconds`` have passed, with at
        least ``min_steps`` and at most ``max_steps``."""
        log = StepLog()
        start = time.perf_counter()
        count = 0
        iterations = int(self.optimizer.iterations.numpy())
        while True:
            if steps is not None and count >= steps:
                break
            if (
                steps is None
                and count >= min_steps
                and (count >= max_steps or time.perf_counter() - start >= seconds)
            ):
                break
            x, y = self.batches[self.global_step % len(self.batches)]
            self.global_step += 1
            self._maybe_fault()
            t = time.perf_counter()
            logs = self.model.train_on_batch(x, y, return_dict=True)
            new_iterations = int(self.optimizer.iterations.numpy())
            dt = time.perf_counter() - t
            loss = float(logs["loss"])
            scale = self._current_scale()
            skipped = self.dynamic and new_iterations == iterations
            iterations = new_iterations
            nonfinite = not math.isfinite(loss)
            log.losses.append(loss)
            log.loss_scales.append(scale)
            log.skipped.append(skipped)
            log.nonfinite.append(nonfinite)
            log.times_s.append(dt)
            count += 1
            self.emit(
                "step",
                phase=phase,
                step=count,
                loss=loss,
                loss_scale=scale,
                skipped=skipped,
                nonfinite=nonfinite,
                time_ms=round(dt * 1000, 3),
            )
            if self.cpu_memory_limit_mb is not None and peak_rss_mb() > self.cpu_memory_limit_mb:
                raise MemoryLimitExceeded(
                    f"peak resident memory {peak_rss_mb():.0f} MB passed the limit of "
                    f"{self.cpu_memory_limit_mb:.0f} MB"
                )
        log.elapsed_s = time.perf_counter() - start
        return log

    def _current_scale(self) -> float | None:
        if self.dynamic:
            return float(self.optimizer.dynamic_scale.numpy())
        if self.loss_scale.kind == "fixed":
            return self.loss_scale.value
        return None

    def _maybe_fault(self) -> None:
        if self._fault is None or self._fault[1] != self.global_step:
            return
        kind = self._fault[0]
        if kind == "oom":
            import tensorflow as tf

            raise tf.errors.ResourceExhaustedError(
                None,
                None,
                f"OOM when allocating tensor (injected by {FAULT_ENV} at step {self.global_step})",
            )
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "hang":
            signal.pause()  # the parent's time limit ends it


def _parse_fault(text: str) -> tuple[str, int] | None:
    kind, _, step = text.partition("@")
    if kind not in ("oom", "crash", "hang") or not step.isdigit():
        return None
    return kind, int(step)
