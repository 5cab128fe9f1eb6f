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

A :class:`Pricing` replaces that flat cost with one by parts (worker start, build, probe,
compile, measure, the rest of the trial, a failed run), under a :class:`Design` that decides
which parts each trial pays: :data:`TODAY` (every trial a fresh worker, as JAX's on a GPU in
issue 34's record) or :data:`WARM` (a warm worker per precision, as many waiting as the search's
``WorkerPool`` keeps, the pool of batches sized by the model's sample bytes and made again in
each warm trial, setups refused on their predicted memory; ``bench/bench_gpu_search.py``).
Without one, :class:`Lookup` prices as above.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.setup import Setup
from tuner.trials.fit import memory_line
from tuner.trials.messages import WorkerMessage
from tuner.trials.result import AsTrained, Timings, TrialError, TrialResult, TrialStatus
from tuner.trials.spec import (
    EPOCH_BATCHES,
    EPOCH_BYTES,
    LONGEST,
    MIN_EPOCHS,
    MIN_EXECUTIONS,
    PRUNE_AFTER,
    WARM_EXECUTIONS,
    TrialSpec,
)


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
    trial cost (seconds, the probe not counted; None: the table's phases). Where the table
    has them: the device's own rate (``samples_per_second`` is the figure the search ranks,
    the input counted), the trial's phases as its worker timed them (``parts``:
    ``startup_s``, ``build_s``, ``warmup_s``, ``measure_s``; a failed trial's start alone),
    and the share of its measured steps that Keras' dynamic loss scale skipped
    (``skipped_steps`` of ``steps``: it comes down from its initial 32768 by skipping)."""

    precision: str
    batch_size: int
    samples_per_second: float | None = None
    peak_memory_mb: float | None = None
    status: TrialStatus = TrialStatus.OK
    seconds: float | None = None
    device_samples_per_second: float | None = None
    parts: Mapping[str, float] = field(default_factory=dict, compare=False, hash=False)
    skipped_share: float = 0.0

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
            device_samples_per_second=data.get("device_samples_per_second"),
            parts={k: float(v) for k, v in (data.get("parts") or {}).items()},
            skipped_share=float(data.get("skipped_steps", 0)) / float(data.get("steps") or 1),
        )

    @property
    def device_rate(self) -> float | None:
        """The device's samples/s (the ranking figure where the table has no other)."""
        return self.device_samples_per_second or self.samples_per_second


@dataclass
class MachineTable:
    """What a GPU measured: its setups, its memory, and the phases of a trial there.

    Attributes:
        setups: the measured setups.
        memory_mb: the memory a trial may use there (a batch predicted over it runs out).
        phases: a trial's phases in seconds: ``startup_s``, ``build_s``, ``probe_s``,
            ``warmup_s``, ``measure_s`` (and ``input_s``, timing the input, where known).
        note: where the figures come from (the card, the model, the date, the source).
        lines: phases that grow with the batch size, as ``(fixed, per_sample)`` seconds
            (``build_s``, ``warmup_s``, ``other_s``: a trial's wall time less its phases),
            for setups the table did not time (:class:`Pricing`); a phase without one costs
            its ``phases`` figure at any batch size.
        probes: the numerics probe's seconds by policy (:class:`Pricing`; else ``probe_s``).
        sample_bytes: what one sample of the model's inputs weighs (as
            ``tuner.worker.loading.model_sample_bytes`` reads it), which sizes a pool of
            batches (:func:`pool_samples`); None: unknown.
        pool_batches: the batches of the batch size that each of the table's trials made
            (its worker's pool): the ``build_s`` line's per-sample part is making them.
        quantizable_share: the model's share of multiply-adds in the layers Keras quantizes
            (:func:`tuner.worker.as_trained.quantizable_work`), which each trial reads back as
            a real one does (whether float8 can pay); None: not known.
    """

    setups: list[Measurement]
    memory_mb: float
    phases: dict[str, float]
    note: str = ""
    lines: dict[str, tuple[float, float]] = field(default_factory=dict)
    probes: dict[str, float] = field(default_factory=dict)
    sample_bytes: int | None = None
    pool_batches: int = 8
    quantizable_share: float | None = None
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
            lines={k: (float(v[0]), float(v[1])) for k, v in data.get("lines", {}).items()},
            probes={k: float(v) for k, v in data.get("probes", {}).items()},
            sample_bytes=int(data["sample_bytes"]) if data.get("sample_bytes") else None,
            pool_batches=int(data.get("pool_batches", 8)),
            quantizable_share=data.get("quantizable_share"),
        )

    @property
    def trial_s(self) -> float:
        """A trial without the probe: start-up, build, warm-up (the compile) and measuring."""
        p = self.phases
        return sum(p.get(k, 0.0) for k in ("startup_s", "build_s", "warmup_s", "measure_s"))

    def phase(self, name: str, batch_size: int) -> float:
        """Phase ``name``'s seconds at ``batch_size``: its line's, else its ``phases`` figure."""
        line = self.lines.get(name)
        if line is not None:
            return max(0.0, line[0] + line[1] * batch_size)
        return self.phases.get(name, 0.0)

    @property
    def data_s_per_sample(self) -> float:
        """Seconds to make one sample of a trial's data: the ``build_s`` line's per-sample
        part over the :attr:`pool_batches` batches each of the table's trials made."""
        return self.lines.get("build_s", (0.0, 0.0))[1] / max(1, self.pool_batches)

    def data_s(self, batch_size: int, sized_pool: bool = False) -> float:
        """Seconds to make a trial's pool of batches at ``batch_size``: the table's own pool
        (:attr:`pool_batches` batches), or with ``sized_pool`` the pool the worker makes now,
        sized by :attr:`sample_bytes` (:func:`pool_samples`)."""
        if sized_pool and self.sample_bytes:
            samples = pool_samples(self.sample_bytes, batch_size)
        else:
            samples = self.pool_batches * batch_size
        return self.data_s_per_sample * samples

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
        device = [m for m in ok if m.device_samples_per_second]
        nearest = min(ok, key=lambda m: abs(math.log2(m.batch_size / batch_size)))
        return Measurement(
            precision,
            batch_size,
            self._speed(ok, batch_size),
            memory,
            device_samples_per_second=(
                self._speed(device, batch_size, "device_samples_per_second") if device else None
            ),
            skipped_share=nearest.skipped_share,
        )

    @staticmethod
    def _speed(ok: list[Measurement], batch_size: int, rate: str = "samples_per_second") -> float:
        x = math.log2(batch_size)
        points = [(math.log2(m.batch_size), float(getattr(m, rate) or 0)) for m in ok]
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


#: The pool of batches a worker keeps in memory, as ``tuner.worker.loading.pool_size`` sizes
#: it: up to :data:`POOL_BATCHES` batches within :data:`POOL_BYTES`, and at least one batch.
POOL_BYTES = 256 * 2**20
POOL_BATCHES = 8


def pool_samples(sample_bytes: int, batch_size: int) -> int:
    """The samples in a worker's pool of batches at ``batch_size``, for samples of
    ``sample_bytes`` (``tuner.worker.loading.pool_size`` batches of ``batch_size``). ResNet50's
    224x224x3 float32 samples (588 KiB): 6 batches at 64, one at 256 and above."""
    batches = max(1, min(POOL_BATCHES, POOL_BYTES // max(1, sample_bytes * batch_size)))
    return batches * batch_size


#: Seconds fit spends between two epochs of mptune's own arrays (a new iterator, their
#: shuffle, on JAX the state written back), in a simulated trial's fit pass: assumed, from
#: fit on this project's 2-core CPU (see :func:`fit_pass_s`); a GPU's is not measured.
EPOCH_RESTART_S = 0.05


def epoch_batches(sample_bytes: int | None, batch_size: int) -> int:
    """The batches of one epoch of mptune's own arrays in fit's loop
    (:func:`tuner.worker.feeding.epoch_arrays`): the pool (:func:`pool_samples`) repeated up to
    :data:`~tuner.trials.spec.EPOCH_BATCHES` batches within
    :data:`~tuner.trials.spec.EPOCH_BYTES`."""
    if not sample_bytes:
        return EPOCH_BATCHES
    pool = pool_samples(sample_bytes, batch_size) // batch_size
    pool_bytes = pool * batch_size * sample_bytes
    return pool * max(1, min(-(-EPOCH_BATCHES // pool), EPOCH_BYTES // max(1, pool_bytes)))


def fit_pass_s(execution_s: float, batches: int, seconds: float) -> float:
    """Fit's loop in a trial as :class:`tuner.worker.feeding.FitClock` runs it (issue 50), for
    executions of ``execution_s`` at fit's rate, epochs of ``batches`` executions and a window
    of ``seconds``: its warm executions, then whole epochs (from the end of the one under way,
    at least :data:`~tuner.trials.spec.MIN_EPOCHS` of them, about ``seconds``, each with its
    restart) where an epoch is shorter than the window, else ``seconds`` within one (at least
    :data:`~tuner.trials.spec.MIN_EXECUTIONS` executions); never past
    :data:`~tuner.trials.spec.LONGEST` times ``seconds`` after the warm ones, nor under one
    execution."""
    epoch_s = batches * execution_s + EPOCH_RESTART_S
    if epoch_s < seconds:
        timed = epoch_s / 2 + max(seconds, MIN_EPOCHS * epoch_s)
    else:
        timed = max(seconds, MIN_EXECUTIONS * execution_s)
    return WARM_EXECUTIONS * execution_s + max(execution_s, min(LONGEST * seconds, timed))


def idle_workers(policies: int) -> int:
    """How many warm workers a search's ``WorkerPool`` keeps waiting (``tuner.search.tune``'s
    ``_slots``): one per precision the search measures, its policies and TF32 beside float32,
    and at least 3. A GPU search of three policies keeps 4."""
    return max(3, policies + 1)


#: The parts of a trial that a :class:`Pricing` charges, in the order a trial meets them:
#: the worker's start, the model's build, making the trial's data (its pool of batches), the
#: numerics probe, the step's compile (with the warm-up steps), the measured steps, the rest
#: of the trial (timing the input, ending it) and a failed run (everything after the start of
#: a trial that failed).
PARTS = ("start", "build", "data", "probe", "compile", "measure", "fit", "other", "failed")
#: The parts that are a trial's own work: compiling its step and measuring it (the device's
#: steps, and fit's own loop where the design prices it).
WORK_PARTS = frozenset({"compile", "measure", "fit"})


@dataclass(frozen=True)
class Design:
    """Which parts of a trial a replayed trial pays (:class:`Pricing`).

    Attributes:
        name: what a report calls the design.
        warm: one worker per precision (the policy and TF32, both fixed in a process) kept
            warm between that precision's trials: its start and build are paid once, and
            again only after a trial that ended it (a real out-of-memory error, a crash, a
            timeout); a warm trial makes its data again unless its worker's last trial
            ran at its batch size (the worker keeps its last pool of batches), pays its
            compile where its worker has not compiled that step (the batch size and the
            compile-time knobs), and its measuring. Otherwise every trial starts a fresh
            worker and pays every part.
        max_idle: how many warm workers may wait at once (the least recently used ends);
            the search's rule is :func:`idle_workers`.
        predict_memory: a setup that runs out of memory is known from its compiled step
            before any step runs (on JAX ``memory_analysis()`` against the allocator's
            limit): refused at the price of its compile, recorded as out of memory, and its
            worker lives on.
        probe_s: the numerics probe's price for every policy; None: the table's, by policy.
        sized_pool: each trial's pool of batches is sized by the model's sample bytes
            (:meth:`MachineTable.data_s`, as the worker sizes it now); otherwise it is the
            table's own pool (the record's worker made 8 batches at any batch size).
        fit_pass: after its device steps a trial times fit's own loop on the input
            (issue 35) as it runs now (issue 50, :func:`fit_pass_s`), at the table's
            throughput, in place of the record's timing of the input alone.
    """

    name: str
    warm: bool = False
    max_idle: int = 3
    predict_memory: bool = False
    probe_s: float | None = None
    sized_pool: bool = False
    fit_pass: bool = False


#: Every trial in a fresh worker, as JAX's on a GPU were in issue 34's record (its pool of 8
#: batches at any batch size, as the record's worker made it).
TODAY = Design("today")
#: Issue 34's design: a warm worker per precision, four waiting (:func:`idle_workers` of a GPU
#: search's three policies: float32 and TF32 beside it, mixed_float16, mixed_bfloat16), the
#: pool of batches sized by the sample's bytes and made in every trial, setups refused on
#: their predicted memory; and each trial's fit loop as it runs now (issue 50).
WARM = Design(
    "warm",
    warm=True,
    max_idle=idle_workers(3),
    predict_memory=True,
    sized_pool=True,
    fit_pass=True,
)


@dataclass(frozen=True)
class Charge:
    """What one replayed trial paid, by part (:data:`PARTS`, seconds), and how it ended:
    ``fresh`` when it started a worker, ``refused`` when its predicted memory refused it
    before any step ran."""

    setup: Setup
    status: TrialStatus
    parts: Mapping[str, float]
    fresh: bool
    refused: bool = False
    pruned: bool = False

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())


class Pricing:
    """Prices each trial of a :class:`Lookup` by its parts under a :class:`Design`, from the
    table's timed phases (a measured setup's own, else its ``lines`` at the batch size), and
    keeps what the design needs to know: which precisions have a warm worker, and which steps
    each has compiled. Each trial's :class:`Charge` is kept in :attr:`charges`, in order."""

    def __init__(self, table: MachineTable, design: Design = TODAY) -> None:
        self.table = table
        self.design = design
        #: the warm workers by precision, the least recently used first, each with the
        #: setups whose step it compiled
        self._warm: OrderedDict[str, set[Setup]] = OrderedDict()
        #: the batch size each warm worker's last trial made its data at (a trial at the same
        #: size trains on that data again, as the worker does)
        self._data_at: dict[str, int] = {}
        self.charges: list[Charge] = []

    @property
    def workers_started(self) -> int:
        return sum(1 for c in self.charges if c.fresh)

    def charge(self, spec: TrialSpec, m: Measurement, pruned: bool = False) -> Charge:
        """Price the trial of ``spec``, which the table answers with ``m`` (pruned after its
        first steps when ``pruned``), and move the design's state on."""
        design, table = self.design, self.table
        setup = spec.setup
        b = setup.batch_size
        compiled = self._warm.pop(setup.precision, None) if design.warm else None
        fresh = compiled is None
        compiled = compiled if compiled is not None else set()
        parts = dict.fromkeys(PARTS, 0.0)
        if fresh:
            parts["start"] = m.parts.get("startup_s", table.phases.get("startup_s", 0.0))
        ok = m.status is TrialStatus.OK and bool(m.samples_per_second)
        refused = m.status is TrialStatus.OOM and design.predict_memory
        if ok or refused:
            if fresh:
                parts["build"], parts["data"] = self._build(m, b)
            elif self._data_at.get(setup.precision) != b:
                parts["data"] = table.data_s(b, design.sized_pool)
        if refused:
            # The step compiled to read its memory, which the allocator cannot give.
            parts["compile"] = table.phase("warmup_s", b)
        elif not ok:
            # A failed run: the build and the compile until it failed (as the table timed
            # it where it did); it ends its worker.
            if fresh and m.seconds is not None and not design.sized_pool:
                parts["failed"] = max(0.0, m.seconds - parts["start"])
            elif fresh and m.seconds is not None:
                # As the table timed it, with the pool of batches the design makes.
                pool_change = table.data_s(b, True) - table.data_s(b)
                parts["failed"] = max(0.0, m.seconds - parts["start"] + pool_change)
            else:
                build = sum(self._build(m, b)) if fresh else table.data_s(b, design.sized_pool)
                parts["failed"] = build + table.phase("warmup_s", b)
        else:
            rate = float(m.device_rate or 1.0)
            if spec.probe and setup.policy.is_half:
                parts["probe"] = self._probe(setup.policy.name)
            parts["compile"] = (
                spec.warmup_count(b / rate) * b / rate
                if setup in compiled
                else self._phase(m, "warmup_s", b)
            )
            if pruned:
                parts["measure"] = PRUNE_AFTER * b / rate
            else:
                parts["measure"] = m.parts.get(
                    "measure_s", max(spec.measure_seconds, spec.least_steps(b / rate) * b / rate)
                )
            parts["other"] = self._other(m, b, pruned)
            if design.fit_pass and not pruned:
                fit_rate = float(m.samples_per_second or rate)
                batches = epoch_batches(table.sample_bytes, b)
                fit_s = spec.fit_seconds(parts["measure"])
                parts["fit"] = fit_pass_s(b / fit_rate, batches, fit_s)
                # fit's loop in place of the record's timing of the input alone
                parts["other"] = max(0.0, parts["other"] - table.phases.get("input_s", 0.0))
            compiled.add(setup)
        if design.warm and (ok or refused):
            self._warm[setup.precision] = compiled
            self._data_at[setup.precision] = b
            while len(self._warm) > design.max_idle:
                self._warm.popitem(last=False)
        charge = Charge(setup, m.status, parts, fresh, refused, pruned)
        self.charges.append(charge)
        return charge

    def _build(self, m: Measurement, batch_size: int) -> tuple[float, float]:
        """A fresh worker's build (as the table timed it for ``m``, else its line), split into
        the model's build and making the pool of batches the design makes."""
        table = self.table
        timed = self._phase(m, "build_s", batch_size)
        model = max(0.0, timed - table.data_s(batch_size))
        return model, table.data_s(batch_size, self.design.sized_pool)

    def _phase(self, m: Measurement, name: str, batch_size: int) -> float:
        """A phase as the table timed it for ``m``, else its line at the batch size."""
        return m.parts.get(name, self.table.phase(name, batch_size))

    def _probe(self, policy: str) -> float:
        if self.design.probe_s is not None:
            return self.design.probe_s
        return self.table.probes.get(policy, self.table.phases.get("probe_s", 0.0))

    def _other(self, m: Measurement, batch_size: int, pruned: bool) -> float:
        """The trial's wall time less its phases (timing the input, ending the trial); a
        pruned trial times no input."""
        timed = ("startup_s", "build_s", "warmup_s", "measure_s")
        if m.seconds is not None and all(k in m.parts for k in timed):
            other = m.seconds - sum(m.parts[k] for k in timed)
        else:
            other = self.table.phase("other_s", batch_size)
        return max(0.0, other - (self.table.phases.get("input_s", 0.0) if pruned else 0.0))


#: The loss curve every precision follows (the table holds no losses): the same for all, so
#: the numerical guard passes every setup.
LOSS_STEPS = 60


class Lookup:
    """A runner that answers each trial from a :class:`MachineTable` and advances ``clock`` by
    the trial's cost there; ``noise`` (a share, e.g. 0.03) scatters each run's throughput
    that much, seeded, as a real card's runs scatter. ``pricing`` prices each trial by its
    parts under a design (:class:`Pricing`); without it a trial costs the table's seconds
    for it (module doc). Call it as a search calls a runner."""

    def __init__(
        self,
        table: MachineTable,
        clock: SimClock | None = None,
        noise: float = 0.0,
        seed: int = 0,
        pricing: Pricing | None = None,
    ) -> None:
        self.table = table
        self.clock = clock or SimClock()
        self.noise = noise
        self.pricing = pricing
        self._random = random.Random(seed)
        self.calls: list[TrialSpec] = []
        #: when each call started, on the simulated clock
        self.started: list[float] = []

    def __call__(
        self,
        spec: TrialSpec,
        on_event: Callable[[WorkerMessage], None] | None = None,
        *,
        cancel: threading.Event | None = None,
        source: Any = None,
    ) -> TrialResult:
        self.calls.append(spec)
        self.started.append(self.clock.now)
        setup = spec.setup
        m = self.table.predict(setup.precision, setup.batch_size)
        if self.pricing is not None:
            return self._priced(spec, m, self.pricing)
        phases = self.table.phases
        probe_s = phases.get("probe_s", 0.0) if spec.probe and setup.policy.is_half else 0.0
        base = m.seconds if m.seconds is not None else self.table.trial_s
        if m.status is not TrialStatus.OK or not m.samples_per_second:
            self.clock.advance(base + probe_s)
            return TrialResult(
                spec,
                m.status,
                error=TrialError(f"{m.status.value} (as measured on the table's machine)"),
                timings=Timings(probe_s=probe_s or None, total_s=base + probe_s),
            )
        sps = self._rate(m.samples_per_second)
        pruned = spec.prune_below is not None and sps < spec.prune_below
        steps = PRUNE_AFTER if pruned else LOSS_STEPS
        # Measuring takes its time, or the steps it must run where they are slow; a pruned
        # trial ends after its first steps.
        measure_s = phases.get("measure_s", 0.0)
        step_s = spec.batch_size / sps
        measuring = max(measure_s, spec.least_steps(step_s) * step_s)
        if pruned:
            measuring = steps * spec.batch_size / sps
        cost = base + probe_s - measure_s + measuring
        self.clock.advance(cost)
        timings = Timings(probe_s=probe_s or None, total_s=cost)
        return self._ok(spec, m, sps, sps, pruned, probe_s, timings)

    def _rate(self, samples_per_second: float) -> float:
        return samples_per_second * (1 + self._random.uniform(-self.noise, self.noise))

    def _priced(self, spec: TrialSpec, m: Measurement, pricing: Pricing) -> TrialResult:
        """The trial priced by its parts (:class:`Pricing`)."""
        ok = m.status is TrialStatus.OK and bool(m.samples_per_second)
        sps = self._rate(float(m.samples_per_second or 0.0)) if ok else 0.0
        pruned = ok and spec.prune_below is not None and sps < spec.prune_below
        charge = pricing.charge(spec, m, pruned)
        self.clock.advance(charge.seconds)
        p = charge.parts
        timings = Timings(
            startup_s=p["start"],
            build_s=p["build"] + p["data"],
            probe_s=p["probe"] or None,
            warmup_s=p["compile"] or None,
            measure_s=p["measure"] or None,
            total_s=charge.seconds,
        )
        if not ok:
            why = (
                "predicted from its compiled step, over the allocator's limit of "
                f"{self.table.memory_mb:,.0f} MB: no step ran"
                if charge.refused
                else "as measured on the table's machine"
            )
            return TrialResult(
                spec, m.status, error=TrialError(f"{m.status.value} ({why})"), timings=timings
            )
        # The device's rate (the steps' own, as a worker times them), scattered as ``sps``.
        device = float(m.device_rate or sps) * sps / float(m.samples_per_second or sps)
        return self._ok(spec, m, sps, device, pruned, p["probe"], timings)

    def _ok(
        self,
        spec: TrialSpec,
        m: Measurement,
        sps: float,
        device: float,
        pruned: bool,
        probe_s: float,
        timings: Timings,
    ) -> TrialResult:
        steps = PRUNE_AFTER if pruned else LOSS_STEPS
        start = spec.warmup_count(spec.batch_size / device)  # updates before the measured
        scale = spec.setup.loss_scale
        # Keras' dynamic loss scale skips steps while it comes down from its initial scale;
        # another scale skips none here (the table measured none).
        default_dynamic = scale.kind == "dynamic" and scale.initial_scale is None
        skipped = round(m.skipped_share * steps) if default_dynamic else 0
        return TrialResult(
            spec,
            TrialStatus.OK,
            samples_per_second=sps,
            device_samples_per_second=device,
            step_time_ms={"p50": 1000.0 * spec.batch_size / device},
            peak_memory_mb=m.peak_memory_mb,
            memory_kind="gpu",
            losses=tuple(2.0 - 0.01 * (start + i) for i in range(steps)),
            steps_completed=steps,
            skipped_steps=skipped,
            warmup_updates=start,
            numerics={"probe_s": probe_s} if probe_s else {},
            timings=timings,
            device="gpu:0 (replayed)",
            pruned=pruned,
            trained=AsTrained(quantizable_share=self.table.quantizable_share),
        )
