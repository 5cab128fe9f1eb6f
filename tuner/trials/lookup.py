"""A machine measured elsewhere, answered from its table: a runner that gives a search the
throughput, peak memory, outcome and cost each setup measured on a GPU (its own trials, or
``bench/bench_gpu.py``'s), and a simulated clock that each trial advances by what it cost there.
A strategy for a GPU's minute-long trials is tuned with it on a CPU in seconds
(``bench/bench_replay.py``); tests reach budgets that end mid-search with it.

A :class:`MachineTable` holds the measured setups, by precision and batch size (the default
knobs), and the trial's phases in seconds. A setup it lacks is predicted from its precision's
measured ones: an out-of-memory error or a timeout at or below its batch size repeats;
throughput is interpolated in log2 of the batch size between measured rungs and flat beyond
the last; peak memory follows the least-squares line through the precision's rungs, and a
batch it puts over the card's memory runs out of it. Knobs (loss scales, steps per execution)
change nothing. Each trial costs the table's seconds for it (or the phases' sum), plus the
probe's where the trial probes; a pruned trial ends after :data:`~tuner.trials.spec.PRUNE_AFTER`
steps' worth of measuring.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.trials.fit import memory_line
from tuner.trials.messages import WorkerMessage
from tuner.trials.result import Timings, TrialError, TrialResult, TrialStatus
from tuner.trials.spec import PRUNE_AFTER, TrialSpec


class SimClock:
    """A clock that moves only when told to: ``clock()`` is the time now, in seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@dataclass(frozen=True)
class Measurement:
    """One setup as measured: its throughput and peak memory, or how it failed, and what its
    trial cost (seconds, the probe not counted; None: the table's phases)."""

    precision: str
    batch_size: int
    samples_per_second: float | None = None
    peak_memory_mb: float | None = None
    status: TrialStatus = TrialStatus.OK
    seconds: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        gb = data.get("peak_gb")
        return cls(
            precision=str(data["precision"]),
            batch_size=int(data["batch_size"]),
            samples_per_second=data.get("samples_per_second"),
            peak_memory_mb=float(gb) * 1024 if gb is not None else data.get("peak_memory_mb"),
            status=TrialStatus(data.get("status", "ok")),
            seconds=data.get("seconds"),
        )


@dataclass
class MachineTable:
    """What a GPU measured: its setups, its memory, and the phases of a trial there.

    Attributes:
        setups: the measured setups.
        memory_mb: the memory a trial may use there (a batch predicted over it runs out).
        phases: a trial's phases in seconds: ``startup_s``, ``build_s``, ``probe_s``,
            ``warmup_s``, ``measure_s``.
        note: where the figures come from (the card, the model, the date, the source).
    """

    setups: list[Measurement]
    memory_mb: float
    phases: dict[str, float]
    note: str = ""
    by_key: dict[tuple[str, int], Measurement] = field(init=False)

    def __post_init__(self) -> None:
        self.by_key = {(m.precision, m.batch_size): m for m in self.setups}

    @classmethod
    def load(cls, path: str | Path) -> MachineTable:
        data = json.loads(Path(path).read_text())
        return cls(
            setups=[Measurement.from_dict(m) for m in data["setups"]],
            memory_mb=float(data["memory_mb"]),
            phases={k: float(v) for k, v in data["phases"].items()},
            note=data.get("note", ""),
        )

    @property
    def trial_s(self) -> float:
        """A trial without the probe: start-up, build, warm-up (the compile) and measuring."""
        p = self.phases
        return sum(p.get(k, 0.0) for k in ("startup_s", "build_s", "warmup_s", "measure_s"))

    def measured(self, precision: str) -> list[Measurement]:
        return sorted(
            (m for m in self.setups if m.precision == precision), key=lambda m: m.batch_size
        )

    def predict(self, precision: str, batch_size: int) -> Measurement:
        """The measurement of ``(precision, batch_size)``, or its prediction (module doc)."""
        known = self.by_key.get((precision, batch_size))
        if known is not None:
            return known
        runs = self.measured(precision)
        for m in runs:
            if m.status is not TrialStatus.OK and m.batch_size <= batch_size:
                return Measurement(precision, batch_size, status=m.status, seconds=m.seconds)
        ok = [m for m in runs if m.status is TrialStatus.OK and m.samples_per_second]
        if not ok:
            raise KeyError(f"the table measured no {precision} setup that ran")
        memory = self._memory(ok, batch_size)
        if memory is not None and memory > self.memory_mb:
            return Measurement(precision, batch_size, status=TrialStatus.OOM)
        return Measurement(precision, batch_size, self._speed(ok, batch_size), memory)

    @staticmethod
    def _speed(ok: list[Measurement], batch_size: int) -> float:
        x = math.log2(batch_size)
        points = [(math.log2(m.batch_size), float(m.samples_per_second or 0)) for m in ok]
        if x <= points[0][0]:
            # Below the smallest measured rung a GPU idles more: a fifth less per halving.
            return float(points[0][1] * 0.8 ** (points[0][0] - x))
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if x0 <= x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return points[-1][1]

    @staticmethod
    def _memory(ok: list[Measurement], batch_size: int) -> float | None:
        line = memory_line((m.batch_size, m.peak_memory_mb) for m in ok if m.peak_memory_mb)
        if line is None:
            return None
        fixed, per_sample = line
        return fixed + per_sample * batch_size


#: The loss curve every precision follows (the table holds no losses): the same for all, so
#: the numerical guard passes every setup.
LOSS_STEPS = 60


class Lookup:
    """A runner that answers each trial from a :class:`MachineTable` and advances ``clock`` by
    the trial's cost there; ``noise`` (a share, e.g. 0.03) scatters each run's throughput
    that much, seeded, as a real card's runs scatter. Call it as a search calls a runner."""

    def __init__(
        self, table: MachineTable, clock: SimClock | None = None, noise: float = 0.0, seed: int = 0
    ) -> None:
        self.table = table
        self.clock = clock or SimClock()
        self.noise = noise
        self._random = random.Random(seed)
        self.calls: list[TrialSpec] = []

    def __call__(
        self,
        spec: TrialSpec,
        on_event: Callable[[WorkerMessage], None] | None = None,
        *,
        cancel: threading.Event | None = None,
        source: Any = None,
    ) -> TrialResult:
        self.calls.append(spec)
        setup = spec.setup
        m = self.table.predict(setup.precision, setup.batch_size)
        phases = self.table.phases
        probe_s = phases.get("probe_s", 0.0) if spec.probe and setup.policy.is_mixed else 0.0
        base = m.seconds if m.seconds is not None else self.table.trial_s
        if m.status is not TrialStatus.OK or not m.samples_per_second:
            self.clock.advance(base + probe_s)
            return TrialResult(
                spec,
                m.status,
                error=TrialError(f"{m.status.value} (as measured on the table's machine)"),
                timings=Timings(probe_s=probe_s or None, total_s=base + probe_s),
            )
        sps = m.samples_per_second * (1 + self._random.uniform(-self.noise, self.noise))
        pruned = spec.prune_below is not None and sps < spec.prune_below
        steps = PRUNE_AFTER if pruned else LOSS_STEPS
        # Measuring takes its time, or the steps it must run where they are slow; a pruned
        # trial ends after its first steps.
        measure_s = phases.get("measure_s", 0.0)
        measuring = max(measure_s, spec.min_steps * spec.batch_size / sps)
        if pruned:
            measuring = steps * spec.batch_size / sps
        cost = base + probe_s - measure_s + measuring
        self.clock.advance(cost)
        start = spec.warmup_steps
        return TrialResult(
            spec,
            TrialStatus.OK,
            samples_per_second=sps,
            device_samples_per_second=sps,
            step_time_ms={"p50": 1000.0 * spec.batch_size / sps},
            peak_memory_mb=m.peak_memory_mb,
            memory_kind="gpu",
            losses=tuple(2.0 - 0.01 * (start + i) for i in range(steps)),
            steps_completed=steps,
            numerics={"probe_s": probe_s} if probe_s else {},
            timings=Timings(probe_s=probe_s or None, total_s=cost),
            device="gpu:0 (replayed)",
            pruned=pruned,
        )
