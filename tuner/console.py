"""Terminal output for the CLI: a live status line while a trial runs, and its result."""

from __future__ import annotations

import math
import time
from types import TracebackType

from rich.console import Console
from rich.status import Status

from tuner.trials.events import Event
from tuner.trials.result import TrialResult
from tuner.trials.spec import TrialSpec

_PHASES = {"build": "building the model", "warmup": "warming up", "measure": "measuring"}


class TrialProgress:
    """A spinner on stderr that says what the running trial is doing (silent when stderr is not
    a terminal, so logs and pipes stay clean)."""

    def __init__(self, spec: TrialSpec, console: Console | None = None) -> None:
        self.spec = spec
        self.console = console or Console(stderr=True)
        self._status: Status | None = None
        self._phase = "starting the worker (importing TensorFlow)"
        self._last_update = 0.0

    def __enter__(self) -> TrialProgress:
        if self.console.is_terminal:
            self._status = self.console.status(self._text())
            self._status.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._status is not None:
            self._status.stop()

    def on_event(self, event: Event) -> None:
        kind = event["type"]
        if kind == "phase":
            self._phase = _PHASES.get(event.get("phase", ""), str(event.get("phase")))
        elif kind == "step":
            now = time.monotonic()
            if now - self._last_update < 0.1:  # a fast model sends hundreds of steps a second
                return
            self._last_update = now
            loss = event.get("loss")
            self._phase = (f"{_PHASES.get(event.get('phase', ''), '')}: step {event.get('step')}"
                           f", {event.get('time_ms', 0):.1f} ms, loss {_fmt(loss, '.4g')}")
        else:
            return
        if self._status is not None:
            self._status.update(self._text())

    def _text(self) -> str:
        return f"trial {self.spec.model} {self.spec.describe()}: {self._phase}"


def _fmt(value: object, spec: str = ".3g", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    return f"{format(value, spec)}{unit}"


def render_trial(result: TrialResult, verbose: bool = False) -> str:
    """A trial result as a few aligned lines."""
    spec = result.spec
    rows: list[tuple[str, str]] = [
        ("trial", f"{spec.model}  {spec.policy}  batch {spec.batch_size}  "
                  f"loss scale {spec.loss_scale}  on {result.device or spec.device}"),
        ("status", result.status.value),
    ]
    if result.error is not None:
        where = f"{result.error.location}: " if result.error.location else ""
        rows.append(("reason", where + result.error.message))
    if result.samples_per_second is not None:
        st = result.step_time_ms
        rows.append(("throughput", f"{result.samples_per_second:,.1f} samples/s  (step time p50 "
                                   f"{_fmt(st.get('p50'), '.2f')} ms, p90 "
                                   f"{_fmt(st.get('p90'), '.2f')} ms)"))
    if result.peak_memory_mb is not None:
        what = "GPU allocator peak" if result.memory_kind == "gpu" else "worker peak resident memory"
        rows.append(("peak memory", f"{result.peak_memory_mb:,.0f} MB ({what})"))
    if result.losses:
        rows.append(("loss", f"{_fmt(result.losses[0], '.4g')} -> {_fmt(result.losses[-1], '.4g')}"
                             f"  over {result.steps_completed} measured steps"))
    scales = [s for s in result.loss_scales if s is not None]
    if scales:
        rows.append(("loss scale", f"{_fmt(scales[0], 'g')} -> {_fmt(scales[-1], 'g')}, "
                                   f"{result.skipped_steps} skipped, {result.nonfinite_steps} "
                                   "non-finite steps"))
    elif result.nonfinite_steps:
        rows.append(("non-finite", f"{result.nonfinite_steps} steps"))
    t = result.timings
    if t.total_s is not None:
        parts = [f"{name} {_fmt(v, '.1f')} s" for name, v in (
            ("start-up", t.startup_s), ("build", t.build_s), ("warm-up", t.warmup_s),
            ("measured", t.measure_s)) if v is not None]
        share = f" ({t.measured_share:.0%} measuring)" if t.measured_share is not None else ""
        rows.append(("time", f"{t.total_s:.1f} s: " + ", ".join(parts) + share))
    for warning in result.warnings:
        rows.append(("warning", warning))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)

